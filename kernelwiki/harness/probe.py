"""What a probe script calls. The runner starts the script in its own process:

    python probes/<id>/<entry> --mode run|compile-only --out RESULT.json [--seed N] [--case ID]... [--arch A]...

and the script ends with `Probe(__file__).main(run_case=..., negative_control=..., compile=...)`:

- `run_case(case, ctx) -> dict` measures one case of probe.yaml and returns the record's case fields
  (`correctness`, `metrics`, `timing`, `baselines`, `headline`); the status is derived here.
- `negative_control(ctx) -> dict` runs the deliberately broken variant and returns its
  `correctness`; the runner fails the probe if it passes the gate.
- `compile(arch) -> Emitted` compiles the probe's kernel for one architecture without running it.

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
from kernelwiki.harness import peaks
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
              *, iters: int = 30, warmup: int = 5, order: str = "shuffled") -> dict[str, dict]:
        """Time candidates under the one protocol (kernelwiki.harness.timing.bench): `fn(inputs)`
        launches on the current stream using only input set `inputs = make_inputs(i)`, of which one
        launch reads and writes `set_bytes` (the smallest over candidates). Returns {name: {median_ms, p10_ms, p90_ms, sm_clock_mhz_before,
        sm_clock_mhz_after, protocol}}; the protocol's rules and library versions go into the record."""
        from kernelwiki.harness import timing

        results = timing.bench(candidates, make_inputs, set_bytes, iters=iters, warmup=warmup, order=order)
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
        # A ceiling counts only with its provenance: the calibration record (or "this run", measured
        # earlier in the same runner invocation) goes into the record's `ceilings` beside it.
        if ceiling and self.ceilings.get("record"):
            out["fraction_of_ceiling"] = round(float(value) / float(ceiling), 4)
        return out


class Probe:
    def __init__(self, script: str):
        self.directory = Path(script).resolve().parent
        self.spec, _ = yamlio.load((self.directory / "probe.yaml").read_text(encoding="utf-8"))

    def main(self, run_case: Callable[[dict, Context], dict] | None = None,
             negative_control: Callable[[Context], dict] | None = None,
             compile: Callable[[str], compile_mod.Emitted] | None = None) -> None:
        parser = argparse.ArgumentParser(description=self.spec.get("title"))
        parser.add_argument("--mode", choices=("run", "compile-only"), default="run")
        parser.add_argument("--out", required=True, help="where to write the result JSON")
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--case", action="append", default=[], help="run only these cases")
        parser.add_argument("--arch", action="append", default=[], help="compile-only: only these archs")
        args = parser.parse_args()
        if args.mode == "compile-only":
            result = self._compile_only(compile, args.arch)
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
                      ceilings=peaks.measured_ceilings(REPO_ROOT, gpu.name if gpu else None))
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
            print("[negative control] ...", flush=True)
            description = self.spec.get("negative_control", "")
            try:
                correctness = negative_control(ctx)
                out["negative_control"] = {"description": description, "correctness": correctness,
                                           "failed_gate": not correctness.get("passed", False)}
            except Exception as err:
                out["negative_control"] = {"description": description, "error": _short_error(err),
                                           "failed_gate": False}
            print(f"[negative control] failed the gate: {out['negative_control']['failed_gate']}", flush=True)
        return out

    @staticmethod
    def _one_case(run_case, case: dict, ctx: Context) -> dict:
        base = {"id": case["id"], "params": case.get("params", {})}
        try:
            result = run_case(case, ctx)
        except Exception as err:
            traceback.print_exc()
            return {**base, "status": "failed", "reason": _short_error(err)}
        correctness = result.get("correctness") or {}
        status = "passed" if correctness.get("passed") else "incorrect"
        if isinstance(result.get("metrics"), dict):
            result = {**result, "metrics": scalar_metrics(result["metrics"])}
        return {**base, "status": status, **result}


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
