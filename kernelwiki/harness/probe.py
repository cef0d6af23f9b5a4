"""What a probe script calls. The runner starts the script in its own process:

    python probes/<id>/<entry> --mode run|compile-only --out RESULT.json [--seed N] [--case ID]... [--arch A]...

and the script ends with `Probe(__file__).main(run_case=..., negative_control=..., compile=...)`:

- `run_case(case, ctx) -> dict` measures one case of probe.yaml and returns the record's case fields
  (`correctness`, `metrics`, `timing`, `baselines`, `headline`); the status is derived here: a case
  that passes its gate but whose headline exceeds the datasheet peak, or whose fastest time is
  under the empty-launch floor, is `failed` (a bug in the timing or the FLOP count, not a result).
  `ctx.headline_against` builds the headline from every baseline the case timed.
- `negative_control`: `fn(ctx) -> dict` runs the deliberately broken variant and returns its
  `correctness`, or `{name: fn}` for one control per code path (probe.yaml's `negative_control`
  then maps each name to its description). Each control's `error_over_gate` (its error over the
  tolerance it was gated with) and `gate_ratios` (the same per test: relative, largest element,
  lse, per part) are recorded; the runner fails the probe if a control passes the gate
  (control-passed) or if some test no control fails at gates.CONTROL_NEAR_FACTOR to
  CONTROL_BLUNT_FACTOR times its tolerance (control-too-blunt: `gates.control_reach`).
- `compile(arch) -> Emitted` compiles the probe's kernel for one architecture without running it.
- `unavailable() -> str | None`: why this process cannot run the probe's subject (a library built
  outside the repository and not importable here), or None; in run mode a reason makes the probe
  `skipped` with it, no case run (the runner's `requires` can only ask whether a module is found).

The result goes to --out as JSON; the runner adds the environment and writes the record.
"""

from __future__ import annotations

import argparse
import json
import random
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelwiki.model import yamlio
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates, peaks
from kernelwiki.harness.env import detect_gpu, short_gpu_name

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Context:
    """What a case runner gets besides its parameters."""

    seed: int
    gpu_short: str
    gpu_name: str | None
    ceilings: dict
    protocol: dict = field(default_factory=dict)
    headline_exception: dict | None = None
    """probe.yaml's `headline_baseline` for the case being run (the case's, else the probe's)."""
    _timer: Any = None

    def timer(self, warmup: int = 5, iters: int = 50, flush_l2: bool = True, order: str = "interleaved",
              flush: str = "memset"):
        """The shared Timer (timing.Timer: only where the L2's state is what a probe measures; every
        other probe uses `bench`); its protocol goes into the record."""
        from kernelwiki.harness.timing import Timer

        settings = (warmup, iters, flush_l2, order, flush)
        if self._timer is None or (self._timer.warmup, self._timer.iters, self._timer.flush_l2, self._timer.order,
                                   self._timer.flush) != settings:
            self._timer = Timer(*settings)
            self.protocol.update(self._timer.protocol())
        return self._timer

    def bench(self, candidates: dict[str, Callable[[Any], object]], make_inputs: Callable[[int], Any], set_bytes: int,
              *, iters: int = 30, warmup: int = 5, order: str = "shuffled",
              capture_error_mode: str = "global") -> dict[str, dict]:
        """Time candidates under the one protocol (kernelwiki.harness.timing.bench): `fn(inputs)`
        launches on the current stream using only input set `inputs = make_inputs(i)`, of which one
        launch reads and writes `set_bytes` (the smallest over candidates). Returns {name: {median_ms, p10_ms, p90_ms, sm_clock_mhz_before,
        sm_clock_mhz_after, protocol}}; the protocol's rules and library versions go into the record."""
        from kernelwiki.harness import timing

        results = timing.bench(candidates, make_inputs, set_bytes, iters=iters, warmup=warmup, order=order,
                               capture_error_mode=capture_error_mode)
        timing.merge_protocol(self.protocol, timing.bench_protocol(iters, warmup, order))
        return results

    def generator(self, salt: int = 0):
        """A torch.Generator on the GPU seeded from the run's seed (recorded), so inputs are fresh per run."""
        import torch

        return torch.Generator(device="cuda").manual_seed(self.seed + salt)

    def headline(self, metric: str, value: float, unit: str, *, peak_key: str | None = None,
                 ceiling_key: str | None = None, baseline: tuple[str, float] | None = None) -> dict:
        """The number a case reports, with its ratio to the baseline and fractions of peak and ceiling."""
        out: dict[str, Any] = {"metric": metric, "value": round(float(value), 4), "unit": unit}
        if baseline is not None and baseline[1]:
            out.update(baseline=baseline[0], baseline_value=round(float(baseline[1]), 4),
                       ratio=round(float(value) / float(baseline[1]), 4))
        peak = peaks.datasheet(self.gpu_short, peak_key) if peak_key else None
        if peak:
            out["fraction_of_peak"] = round(float(value) / peak, 4)
        ceiling = self.ceilings.get(ceiling_key) if ceiling_key else None
        # A ceiling counts only with its provenance (the run id of the calibration measured earlier
        # in the same runner invocation, in the record's `ceilings` beside it) and when this value
        # was timed by the protocol that timed the ceiling: a fraction across protocols measures both.
        method = self.protocol.get("method")
        if ceiling and self.ceilings.get("run_id") and method and self.ceilings.get("protocol") == method:
            out["fraction_of_ceiling"] = round(float(value) / float(ceiling), 4)
        return out

    def headline_against(self, metric: str, value: float, unit: str, baselines: dict[str, float | None], *,
                         correct: dict[str, bool] | None = None, higher_is_better: bool = True,
                         peak_key: str | None = None, ceiling_key: str | None = None,
                         context: dict[str, float | None] | None = None, notes: dict[str, dict] | None = None) -> dict:
        """The case's `headline` and `baselines` from every baseline timed in it: the headline ratio is
        against the strongest correct one (or probe.yaml's declared exception, where it ran
        correctly), and every baseline keeps its own ratio beside it. `baselines` maps a name to its
        value in the headline's unit (None: it did not run); `correct` says which passed their gate
        (default: all that ran); `context` maps the candidates timed beside that do not compute the
        same thing (a lower precision, our own variant or layout): their ratios are kept, marked
        `headline_candidate: false`, and they are never the headline; `notes` adds fields to an
        entry (why it was skipped, its revision, ...). Returns {"headline": ..., "baselines": [...]}, to merge into the case's result."""
        headline = self.headline(metric, value, unit, peak_key=peak_key, ceiling_key=ceiling_key)
        name, reason = choose_headline_baseline(baselines, correct, higher_is_better, self.headline_exception)
        if name is not None:
            headline.update(baseline=name, baseline_value=round(float(baselines[name]), 4),
                            ratio=_ratio(float(value), float(baselines[name]), higher_is_better))
        headline["baseline_reason"] = reason
        entries = []
        for other, other_value in [*baselines.items(), *(context or {}).items()]:
            entry: dict[str, Any] = {"name": other, "value": None if other_value is None else round(float(other_value), 4),
                                     "ratio": None if not other_value else _ratio(float(value), float(other_value), higher_is_better)}
            if correct is not None and other in correct:
                entry["correct"] = bool(correct[other])
            if other not in baselines:
                entry["headline_candidate"] = False
            entries.append({**(notes or {}).get(other, {}), **entry})
        return {"headline": headline, "baselines": entries}


def choose_headline_baseline(baselines: dict[str, float | None], correct: dict[str, bool] | None,
                             higher_is_better: bool, exception: dict | None) -> tuple[str | None, str]:
    """(name, reason) of the baseline a headline is against: the declared exception where it ran and
    was correct, else the fastest correct candidate; (None, why) when none ran correctly."""
    ran = {name: float(v) for name, v in baselines.items()
           if isinstance(v, (int, float)) and v > 0 and (correct is None or correct.get(name, True))}
    if not ran:
        return None, ("no baseline ran correctly in this case" if baselines else "this case times no baseline")
    if exception and exception.get("name") in ran:
        return exception["name"], f"declared in probe.yaml: {exception.get('reason', '')}".strip()
    best = (max if higher_is_better else min)(ran, key=ran.__getitem__)
    reason = f"fastest correct of: {', '.join(ran)}" if len(ran) > 1 else "the only correct baseline timed"
    if exception and exception.get("name") in baselines:
        reason += f" (the declared {exception['name']} did not run correctly)"
    return best, reason


def _ratio(value: float, baseline: float, higher_is_better: bool) -> float:
    """Ours over the baseline as a speedup: > 1 means ours is better, whichever way the metric runs."""
    return round(value / baseline if higher_is_better else baseline / value, 4)


class Probe:
    def __init__(self, script: str):
        self.directory = Path(script).resolve().parent
        self.spec, _ = yamlio.load((self.directory / "probe.yaml").read_text(encoding="utf-8"))

    def main(self, run_case: Callable[[dict, Context], dict] | None = None,
             negative_control: Callable[[Context], dict] | dict[str, Callable[[Context], dict]] | None = None,
             compile: Callable[[str], compile_mod.Emitted] | None = None,
             unavailable: Callable[[], str | None] | None = None) -> None:
        parser = argparse.ArgumentParser(description=self.spec.get("title"))
        parser.add_argument("--mode", choices=("run", "compile-only"), default="run")
        parser.add_argument("--out", required=True, help="where to write the result JSON")
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--case", action="append", default=[], help="run only these cases")
        parser.add_argument("--arch", action="append", default=[], help="compile-only: only these archs")
        args = parser.parse_args()
        if args.mode == "compile-only":
            result = self._compile_only(compile, args.arch)
        elif unavailable is not None and (reason := unavailable()):
            result = {"mode": "run", "reason": str(reason), "cases": []}
        else:
            result = self._run(run_case, negative_control, args)
        Path(args.out).write_text(json.dumps(result, indent=1, default=_json_default), encoding="utf-8")

    # --- modes ---------------------------------------------------------------------------------
    def _compile_only(self, compile, archs: list[str]) -> dict:
        expected = self.spec.get("expected_instructions") or {}
        if compile is None:
            return {"mode": "compile-only", "reason": "this probe has no kernel of its own to compile", "instructions": {}}
        instructions = {}
        for arch in archs or list(expected) or self.spec["archs"]:
            print(f"compiling for {arch} ...", flush=True)
            try:
                instructions[arch] = compile_mod.scan(compile(arch), expected.get(arch, []))
            except Exception as err:  # the record says what broke; the runner carries on
                instructions[arch] = {"found": [], "missing": expected.get(arch, []), "error": _short_error(err)}
        return {"mode": "compile-only", "instructions": instructions}

    def _run(self, run_case, negative_control, args) -> dict:
        if run_case is None:
            return {"mode": "run", "reason": "compile-only probe: run it with --compile-only", "cases": []}
        gpu = detect_gpu()
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
        ctx = Context(seed=seed, gpu_short=short_gpu_name(gpu.name if gpu else None), gpu_name=gpu.name if gpu else None,
                      ceilings=peaks.measured_ceilings(self.spec.get("ceilings") or []))
        ctx.protocol.update(data="normal (torch.randn) unless a case says otherwise", seed=seed)
        cases = [c for c in self.spec["cases"] if not args.case or c["id"] in args.case]
        results = []
        for index, case in enumerate(cases, 1):
            print(f"[case {index}/{len(cases)}] {case['id']} ...", flush=True)
            results.append(self._one_case(run_case, case, ctx))
            headline = results[-1].get("headline") or {}
            print(f"[case {index}/{len(cases)}] {case['id']}: {results[-1]['status']} "
                  f"{headline.get('value', '')} {headline.get('unit', '')}", flush=True)
        out: dict[str, Any] = {"mode": "run", "seed": seed, "cases": results, "protocol": ctx.protocol,
                               "ceilings": ctx.ceilings}
        if negative_control is not None:
            out["negative_control"] = self._controls(negative_control, ctx)
        return out

    def _controls(self, negative_control, ctx: Context) -> dict:
        """Run every negative control; the record keeps one entry per control under `controls`, and
        at the top whether all failed the gate and the worst error_over_gate (with a single control,
        also its description and correctness, as records had them before)."""
        described = self.spec.get("negative_control") or ""
        controls = negative_control if isinstance(negative_control, dict) else {"control": negative_control}
        entries = []
        for name, fn in controls.items():
            description = described.get(name, "") if isinstance(described, dict) else described
            print(f"[negative control {name}] ...", flush=True)
            entries.append(run_control(name, description, fn, ctx))
            print(f"[negative control {name}] failed the gate: {entries[-1]['failed_gate']}, "
                  f"error/gate: {entries[-1].get('error_over_gate')}", flush=True)
        return summarize_controls(entries, single=not isinstance(negative_control, dict))

    def _one_case(self, run_case, case: dict, ctx: Context) -> dict:
        base = {"id": case["id"], "params": case.get("params", {})}
        ctx.headline_exception = case.get("headline_baseline") or self.spec.get("headline_baseline")
        try:
            result = run_case(case, ctx)
        except Exception as err:
            traceback.print_exc()
            return {**base, "status": "failed", "reason": _short_error(err)}
        if isinstance(result.get("metrics"), dict):
            result = {**result, "metrics": scalar_metrics(result["metrics"])}
        return {**base, **case_status(result, base["params"], ctx.gpu_short), **result}


def case_status(result: dict, params: dict, gpu_short: str) -> dict:
    """{"status": ...} (and "reason") of a case from what its runner returned: incorrect when it failed
    its gate; failed when it passed but its headline is impossible (above the datasheet peak) or its
    fastest time is under the empty-launch floor; passed otherwise."""
    if not (result.get("correctness") or {}).get("passed"):
        return {"status": "incorrect"}
    impossible = peaks.impossible(result.get("headline") or {}, params, gpu_short) or below_launch(result.get("timing"))
    return {"status": "failed", "reason": impossible} if impossible else {"status": "passed"}


def below_launch(timing: Any) -> str | None:
    """Why a case's fastest timed candidate cannot be real (under timing.REFUSE_BELOW_FLOOR x the
    empty-launch floor measured with it), or None."""
    from kernelwiki.harness.timing import REFUSE_BELOW_FLOOR

    for name, entry in (timing or {}).items() if isinstance(timing, dict) else ():
        if not isinstance(entry, dict):
            continue
        median, floor = entry.get("median_ms"), (entry.get("protocol") or {}).get("floor_ms")
        if isinstance(median, (int, float)) and isinstance(floor, (int, float)) and median < REFUSE_BELOW_FLOOR * floor:
            return (f"{name}: {median * 1e3:.3f} us per launch is under the empty-launch floor "
                    f"({floor * 1e3:.3f} us): the timed work did not run")
    return None


def run_control(name: str, description: str, fn: Callable[[Context], dict], ctx: Context) -> dict:
    """One control's record entry: its correctness, whether it failed the gate, its error_over_gate."""
    entry: dict[str, Any] = {"name": name, "description": description}
    try:
        correctness = fn(ctx)
    except Exception as err:
        return {**entry, "error": _short_error(err), "failed_gate": False, "error_over_gate": None}
    ratio = gates.error_over_gate(correctness)
    return {**entry, "correctness": correctness, "failed_gate": not correctness.get("passed", False),
            "error_over_gate": None if ratio is None else round(ratio, 3),
            "gate_ratios": {key: round(r, 3) for key, r in gates.gate_ratios(correctness).items()}}


def summarize_controls(entries: list[dict], single: bool) -> dict:
    """The record's `negative_control`: all controls' entries, whether every one failed the gate,
    the worst (largest) error_over_gate, the first error; a single control's fields also at the top."""
    ratios = [e["error_over_gate"] for e in entries if isinstance(e.get("error_over_gate"), (int, float))]
    out: dict[str, Any] = {"failed_gate": all(e["failed_gate"] for e in entries),
                           "error_over_gate": max(ratios) if ratios else None, "controls": entries}
    errors = [f"{e['name']}: {e['error']}" for e in entries if e.get("error")]
    if errors:
        out["error"] = "; ".join(errors)[:2000]
    if single:
        first = entries[0]
        out.update({k: first[k] for k in ("description", "correctness") if k in first})
        if first.get("error"):
            out["error"] = first["error"]
    else:
        out["description"] = "; ".join(f"{e['name']}: {e['description']}" for e in entries)[:2000]
    return out


def scalar_metrics(metrics: dict, prefix: str = "") -> dict:
    """A record's metrics are scalars (the record schema): a nested mapping becomes dotted keys
    (`support.fa4`), a list its JSON text, anything else its text."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalar_metrics(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value, default=_json_default)
        elif value is None or isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = _json_default(value)
    return out


def _short_error(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= 2000 else text[:2000] + "..."


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)
