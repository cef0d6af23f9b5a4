"""`kernelwiki probe run`: select probes, skip what this machine cannot run, run each in its own
process with a timeout, write one record per probe run, refresh the pages, print a summary.

A crash, an illegal address or a hang ends only that probe (`crashed`, `timeout`); the run goes
on. Records are written atomically and only after they pass the record schema; a lock file stops
two runners writing at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, TextIO

from kernelwiki.probing import processes
from kernelwiki.harness import env as env_mod
from kernelwiki.harness import gates
from kernelwiki.harness.peaks import CEILINGS_ENV, ceilings_from_record, ceilings_unavailable
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage import record_file, record_form
from kernelwiki.storage.repo import Repo
from kernelwiki.model.files import read_regular, replace_file
from kernelwiki.model.terminal import printable
from kernelwiki.model.schema import check as schema_check

LOG_TAIL_CHARS = 4000
RUN_STATUSES_OK = ("passed", "compiled")
MAX_RESULT_DEPTH = 64
"""Levels of lists and objects a probe's result may nest (a record nests about eight)."""


class RunnerBusy(RuntimeError):
    pass


@dataclass
class Options:
    mode: str = "run"
    cases: list[str] = field(default_factory=list)
    archs: list[str] = field(default_factory=list)
    seed: int | None = None
    timeout_s: float | None = None
    write: bool = True
    """False: run and report, write no record (CI's compile-only pass)."""


@dataclass
class Outcome:
    probe: str
    status: str
    reason: str = ""
    record: dict | None = None
    path: str | None = None


@contextmanager
def runner_lock(repo: Repo, out: TextIO | None = None) -> Iterator[None]:
    """Exclusive for the whole run; released by the OS if the runner dies.

    The lock is taken on the repository directory itself, which no cleaning (rm -rf
    .kernelwiki-cache, git clean -X) can remove; who holds it is noted in the cache, best effort
    (a read-only cache, or a file where the cache should be, costs only that note). Holding it,
    the runner kills probe processes an earlier runner left behind when it was SIGKILLed."""
    fd = os.open(repo.root, os.O_RDONLY | os.O_DIRECTORY)
    note = repo.cache / "runner.lock"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:  # never through a link, never blocking on a FIFO planted there
            holder = printable(read_regular(note, 4096).decode("utf-8", "replace").strip()) or "unknown"
        except OSError:
            holder = "unknown"
        raise RunnerBusy(f"another probe runner ({holder}) holds the lock on {repo.root}; wait for it to finish") from None
    try:
        stale = processes.kill_stale(repo.root)
        if stale:
            print(f"killed {len(stale)} probe process(es) left running by an earlier runner that did not exit "
                  f"cleanly: pid {', '.join(map(str, stale))}", file=out or sys.stderr)
        if not repo.cache.is_symlink():
            try:
                repo.cache.mkdir(exist_ok=True)
                replace_file(note, f"pid {os.getpid()}, started {_now()}".encode())  # a link there is replaced
            except OSError:
                pass
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def run_probes(repo: Repo, specs: list[ProbeSpec], options: Options, out: TextIO | None = None) -> list[Outcome]:
    out = out or sys.stderr
    gpu = env_mod.detect_gpu()
    gpu_count = len(env_mod.list_gpus()) if gpu else 0
    machine = f"{gpu.name} ({gpu.arch})" if gpu else "no GPU"
    print(f"kernelwiki probe run: {len(specs)} probe(s), mode {options.mode}, on {machine}", file=out)
    environment = env_mod.fingerprint(repo.root)
    outcomes: list[Outcome] = []
    extra_env: dict[str, str] = {}
    needed = calibration_needed(specs, options)
    for index, spec in enumerate(specs, 1):
        prefix = f"[{index}/{len(specs)}] {spec.id}"
        reason = spec.skip_reason(options.mode, gpu, gpu_count)
        if not (spec.kind == "calibration" and needed) and not runs_a_case(spec, options):
            reason = f"none of the cases {', '.join(options.cases)} is one of its cases"
        if reason:
            print(f"{prefix}: skipped: {reason}", file=out)
            outcomes.append(Outcome(spec.id, "skipped", reason))
            if spec.kind == "calibration" and needed and CEILINGS_ENV not in extra_env:
                extra_env[CEILINGS_ENV] = json.dumps(ceilings_after(outcomes[-1]))
            continue
        timeout = options.timeout_s or spec.timeout_s
        print(f"{prefix}: running ({options.mode}, timeout {timeout:.0f} s)", file=out, flush=True)
        outcome = _run_one(repo, spec, options, environment, timeout, extra_env, out)
        outcomes.append(outcome)
        print(f"{prefix}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else "")
              + (f" -> {outcome.path}" if outcome.path else ""), file=out, flush=True)
        if spec.kind == "calibration" and (outcome.status == "passed" or CEILINGS_ENV not in extra_env):
            extra_env[CEILINGS_ENV] = json.dumps(ceilings_after(outcome))
    return outcomes


def runs_a_case(spec: ProbeSpec, options: Options) -> bool:
    """Whether a --case selection leaves the probe anything to run (no selection: all its cases)."""
    return not options.cases or any(spec.case(case) for case in options.cases)


def calibration_needed(specs: list[ProbeSpec], options: Options) -> bool:
    """Whether a probe of this run quotes measured ceilings: then the calibration probes run whole
    first, whatever --case selects (specs.with_calibration put them in the selection)."""
    return options.mode == "run" and any(s.ceilings and s.kind != "calibration" and runs_a_case(s, options)
                                         for s in specs)


def ceilings_after(calibration: Outcome) -> dict:
    """What the probes after a calibration run quote: its ceilings, named by its run id, or, when it
    did not pass (or wrote no record), none and why; never another run's."""
    if calibration.status != "passed" or calibration.record is None:
        run = f" ({calibration.record.get('run_id')})" if calibration.record else ""
        return ceilings_unavailable(f"{calibration.probe} {calibration.status} in this run{run}: "
                                    f"{calibration.reason}"[:1000])
    return ceilings_from_record(calibration.record, calibration.path)


def _run_one(repo: Repo, spec: ProbeSpec, options: Options, environment: dict, timeout: float,
             extra_env: dict[str, str], out: TextIO) -> Outcome:
    started = datetime.now(timezone.utc)
    index = environment.get("gpu_index")  # set when the runner placed the probe on one GPU of several
    clock_before = env_mod.clocks(index).get("sm_clock_mhz") if options.mode == "run" else None
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        extra_env = dict(extra_env, CUTE_DSL_DUMP_DIR=tmp)  # compiler dumps stay out of the checkout
        argv = [sys.executable, str(spec.entry), "--mode", options.mode, "--out", str(result_path)]
        if options.seed is not None:
            argv += ["--seed", str(options.seed)]
        argv += [a for case in options.cases if spec.case(case) for a in ("--case", case)]
        argv += [a for arch in options.archs for a in ("--arch", arch)]
        returncode, log_tail, timed_out = _execute(argv, repo, timeout, extra_env, out)
        result, garbage = _read_result(result_path)
    finished = datetime.now(timezone.utc)
    if garbage and not timed_out and returncode == 0:
        status, reason = "failed", garbage
    else:
        try:
            status, reason = _status(spec, options.mode, result, returncode, timed_out, timeout)
        except (AttributeError, TypeError, KeyError, ValueError) as err:
            # A result of the wrong shape (instructions not a mapping, a case not an object, ...)
            status, reason = "failed", f"the probe's result has the wrong shape ({type(err).__name__}: {err})"[:1000]
    if status == "skipped":
        return Outcome(spec.id, status, reason)
    env = dict(environment, sm_clock_mhz_before=clock_before,
               sm_clock_mhz_after=env_mod.clocks(index).get("sm_clock_mhz") if options.mode == "run" else None)
    record = {
        "schema_version": 1, "probe": spec.id, "run_id": "", "mode": options.mode, "status": status,
        "started_at": _iso(started), "finished_at": _iso(finished),
        "wall_s": round((finished - started).total_seconds(), 2), "environment": env,
        "cases": (result or {}).get("cases", []),
    }
    if reason:
        record["reason"] = reason
    for key in ("seed", "protocol", "ceilings", "negative_control", "instructions"):
        if result and result.get(key) not in (None, {}):
            record[key] = result[key]
    if status not in RUN_STATUSES_OK:
        record["log_tail"] = log_tail
    record["run_id"] = _run_id(repo, spec.id, started, env.get("gpu"), options.mode)
    problems = schema_check(repo.schemas, "record", record, f"{spec.id}/{record['run_id']}", lambda p: 1)
    if problems:
        # A probe that returns malformed results has failed; keep what can be kept.
        reason = "probe result fails the record schema: " + "; ".join(f"{p.field}: {p.message}" for p in problems[:5])
        record = {k: v for k, v in record.items() if k not in ("cases", "negative_control", "instructions", "protocol", "ceilings")}
        record.update(status="failed", reason=reason, cases=[], log_tail=log_tail)
        status = "failed"
    path = None
    if options.write:
        try:
            path = _write_record(repo, spec.id, record)
        except (OSError, ValueError, RecursionError) as err:
            # Evidence that was asked for and not kept is a failed run, whatever the probe said.
            status, reason = "failed", f"{reason}; record not written: {err}".lstrip("; ")
    return Outcome(spec.id, status, reason, record, path)


def _read_result(path: Path) -> tuple[dict | None, str]:
    """The probe's result.json as a mapping, or why it cannot be used ('' when it is simply absent).
    NaN and infinities (1e999 too) become null: a record is standard JSON, and the record schema then decides.
    A result nested deeper than MAX_RESULT_DEPTH cannot be used: everything that walks a record
    (rounding, the schema, the site) recurses, and the record would be lost to a RecursionError."""
    if not path.is_file():
        return None, ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda name: None,
                          parse_float=lambda literal: None if abs(float(literal)) == float("inf") else float(literal))
    except (ValueError, RecursionError) as err:
        return None, f"the probe wrote a result that is not JSON ({str(err)[:200]})"
    if not isinstance(data, dict):
        return None, f"the probe's result is a JSON {type(data).__name__}, not an object"
    if record_file.nesting(data) > MAX_RESULT_DEPTH:
        return None, f"the probe's result nests more than {MAX_RESULT_DEPTH} levels deep; a record is flatter"
    return data, ""


def _execute(argv: list[str], repo: Repo, timeout: float, extra_env: dict[str, str],
             out: TextIO) -> tuple[int | None, str, bool]:
    """Run the probe process, echoing its output; whatever way it ends (exit, timeout, the runner
    interrupted), nothing it started is left running."""
    marks = processes.tag(repo.root)
    env = dict(os.environ, **extra_env, **marks, PYTHONUNBUFFERED="1")
    package_parent = str(Path(__file__).resolve().parents[2])  # so that probes can `import kernelwiki`
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(filter(None, [str(repo.root), package_parent, env.get("PYTHONPATH")])))
    tail: deque[str] = deque(maxlen=400)
    processes.become_subreaper()
    before = processes.children()
    proc = processes.start_leader(lambda: subprocess.Popen(
        argv, cwd=repo.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, errors="replace", start_new_session=True))

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = printable(line.rstrip("\n"))
            tail.append(line + "\n")
            print(f"    | {line}", file=out, flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        timed_out = not _wait_unreaped(proc.pid, timeout)
    finally:
        # The leader is exited but not yet reaped (or still running): its group id cannot have been
        # reused, so killing the group hits only what the probe started.
        processes.kill_tree(proc.pid, marks[processes.RUN_VAR])
        processes.kill_descendants(proc.pid, before)
        proc.wait()
        processes.finished(proc.pid)
        reader.join(timeout=5)
    return proc.returncode, "".join(tail)[-LOG_TAIL_CHARS:], timed_out


def _wait_unreaped(pid: int, timeout: float) -> bool:
    """Wait until the process exits, leaving it a zombie; False on timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, 0.05)


def _status(spec: ProbeSpec, mode: str, result: dict | None, returncode: int | None, timed_out: bool,
            timeout: float) -> tuple[str, str]:
    if timed_out:
        return "timeout", f"no result within {timeout:.0f} s; the process group was killed"
    if returncode != 0:
        if returncode is not None and returncode < 0:
            return "crashed", f"killed by signal {processes.signal_name(-returncode)}"
        return "crashed", f"exited with status {returncode}"
    if result is None:
        return "failed", "the probe wrote no result"
    if mode == "compile-only":
        if result.get("reason") and not result.get("instructions"):
            return "skipped", result["reason"]
        archs = result.get("instructions") or {}
        broken = [a for a, r in archs.items() if r.get("error") or r.get("missing")]
        if not archs:
            return "compile-failed", "nothing was compiled"
        if broken:
            details = "; ".join(f"{a}: " + (archs[a].get("error") or "missing " + ", ".join(archs[a]["missing"]))
                                for a in broken)
            return "compile-failed", details[:1000]
        return "compiled", ""
    cases = result.get("cases") or []
    if not cases and result.get("reason"):
        return "skipped", result["reason"]
    if not cases:
        return "failed", "no case ran"
    failed = [c for c in cases if c.get("status") == "failed"]
    if failed:
        return "failed", f"case {failed[0].get('id')}: {failed[0].get('reason', '')}"[:1000]
    incorrect = [c["id"] for c in cases if c.get("status") != "passed"]
    if incorrect:
        return "incorrect", f"failed the correctness gate: {', '.join(incorrect)}"
    if spec.data.get("negative_control"):
        control = result.get("negative_control")
        if not control:
            return "failed", "the negative control did not run"
        if control.get("error"):
            return "failed", f"the negative control broke: {control['error']}"[:1000]
        if not control.get("failed_gate"):
            return "control-passed", "the deliberately broken variant passed the gate, so the gate proves nothing"
        blunt = too_blunt(control)
        if blunt:
            return "control-too-blunt", (f"no negative control fails these gate tests at {gates.CONTROL_NEAR_FACTOR:g}-"
                                         f"{gates.CONTROL_BLUNT_FACTOR:g}x their tolerance, so they are not shown to be "
                                         f"tight: {blunt}")[:1000]
    return "passed", ""


def too_blunt(control: dict) -> str:
    """The gate tests no negative control fails at gates.CONTROL_NEAR_FACTOR to CONTROL_BLUNT_FACTOR
    times their tolerance (`gates.control_reach`, '; '-separated), '' when none. Records of one
    control without `controls` are read from the top-level correctness."""
    entries = control.get("controls") or [{"name": "control", "correctness": control.get("correctness")}]
    return "; ".join(gates.control_reach(entries))


def _run_id(repo: Repo, probe_id: str, started: datetime, gpu: str | None, mode: str) -> str:
    gpu_part = re.sub(r"[^a-z0-9]+", "-", env_mod.short_gpu_name(gpu).lower()).strip("-") or "gpu"
    base = f"{started:%Y%m%dT%H%M%SZ}-{gpu_part}-{mode}"  # a file name, whatever the GPU is called
    candidate, n = base, 2
    while record_file.taken(repo.evidence / probe_id, candidate):
        candidate, n = f"{base}-{n}", n + 1
    return candidate


def _write_record(repo: Repo, probe_id: str, record: dict) -> str:
    """Atomically, as <run_id>.json.gz (storage.record_file: the same record gives the same bytes),
    mode 0644 (less the umask), never through a symbolic link."""
    directory = repo.evidence / probe_id
    repo.inside(directory)  # OutsideRepo if artifacts/evidence or the probe's directory links elsewhere
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{record['run_id']}{record_file.GZIP}"
    # Compact, one case per line, compressed: records are never edited, and the repository travels
    # to the GPU machine whole, under 4 MiB.
    replace_file(path, record_file.encode(record_file.record_text(record_form.compact(record))))
    return repo.rel(path)


def summary_table(outcomes: list[Outcome]) -> str:
    """probe, case, status, metric, baseline, ratio, % of peak — one row per case."""
    rows = [("probe", "case", "status", "metric", "value", "baseline", "ratio", "% peak", "% ceiling")]
    for outcome in outcomes:
        cases = (outcome.record or {}).get("cases") or []
        for arch, found in ((outcome.record or {}).get("instructions") or {}).items():
            total = len(found.get("found", [])) + len(found.get("missing", []))
            rows.append((outcome.probe, arch, outcome.status, "instructions", f"{len(found.get('found', []))}/{total} found",
                         "", "", "", ""))
        if not cases and not (outcome.record or {}).get("instructions"):
            rows.append((outcome.probe, "-", outcome.status, outcome.reason[:60], "", "", "", "", ""))
        for case in cases:
            h = case.get("headline") or {}
            rows.append((
                outcome.probe, case.get("id", ""), case.get("status", ""), h.get("metric", ""),
                f"{h['value']:.4g} {h.get('unit', '')}" if "value" in h else "",
                f"{h.get('baseline', '')} {h['baseline_value']:.4g}" if "baseline_value" in h else "",
                f"{h['ratio']:.3f}" if "ratio" in h else "",
                f"{100 * h['fraction_of_peak']:.1f}" if "fraction_of_peak" in h else "",
                f"{100 * h['fraction_of_ceiling']:.1f}" if "fraction_of_ceiling" in h else "",
            ))
        control = (outcome.record or {}).get("negative_control")
        if control:
            entries = control.get("controls") or [control]
            for entry in entries:
                ratio = entry.get("error_over_gate")
                label = "(negative control)" if len(entries) == 1 else f"(control {entry.get('name', '')})"
                rows.append((outcome.probe, label, "failed gate" if entry.get("failed_gate") else "PASSED GATE",
                             "", "", "", f"{ratio:.3g}x gate" if isinstance(ratio, (int, float)) else "", "", ""))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _now() -> str:
    return _iso(datetime.now(timezone.utc))


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
