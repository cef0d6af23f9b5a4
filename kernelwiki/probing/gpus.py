"""`kernelwiki probe run --gpus all|N|LIST`: every chosen GPU of this host runs probes at once, one
probe process per GPU (CUDA_VISIBLE_DEVICES=its index).

Each GPU first runs the calibration probes itself (its ceilings are its own, named by that run's
id; null with the reason when it did not pass), then takes the next probe from a shared queue; a
single probe of several cases is split case by case over the GPUs instead. A probe that needs several GPUs (`min_gpus`) runs last, alone, on all of them. Each
record names the GPU (index, UUID) and the host. The caller holds the runner lock; an interrupt
kills every probe process of the checkout and no record is written after it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import socket
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TextIO

from kernelwiki.harness import env as env_mod
from kernelwiki.harness.peaks import CEILINGS_ENV, ceilings_unavailable
from kernelwiki.probing import processes
from kernelwiki.probing.runner import Options, Outcome, _run_one, _write_record, ceilings_after
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage import record_file
from kernelwiki.storage.repo import Repo


class GpuChoiceError(ValueError):
    """--gpus names GPUs this host does not have."""


def choose(selection: str | int | list[int], devices: list[env_mod.Device]) -> list[env_mod.Device]:
    """The devices --gpus selects: 'all', the first N, or these indices (checked by faces.arguments)."""
    if not devices:
        raise GpuChoiceError("gpus: this machine has no GPU")
    if selection == "all":
        return devices
    if isinstance(selection, int):
        if selection > len(devices):
            raise GpuChoiceError(f"gpus: {selection} GPUs asked for; this machine has {len(devices)}")
        return devices[:selection]
    by_index = {d.index: d for d in devices}
    unknown = [i for i in selection if i not in by_index]
    if unknown:
        raise GpuChoiceError(f"gpus: no GPU {', '.join(map(str, unknown))} on this machine "
                             f"(it has {', '.join(str(d.index) for d in devices)})")
    return [by_index[i] for i in selection]


@dataclass
class Unit:
    """One probe process: a probe, and the cases it runs (empty: those of the options)."""
    spec: ProbeSpec
    cases: list[str] = field(default_factory=list)


def plan(specs: list[ProbeSpec], options: Options, gpu_count: int) -> tuple[list[ProbeSpec], list[Unit], list[ProbeSpec]]:
    """(calibration run on every GPU, units shared over the GPUs, probes run on all GPUs at once)."""
    calibration = [s for s in specs if s.kind == "calibration"]
    together = [s for s in specs if s.kind != "calibration" and s.min_gpus > 1]
    single = [s for s in specs if s.kind != "calibration" and s.min_gpus <= 1]
    if len(single) == 1 and gpu_count > 1:
        spec = single[0]
        cases = options.cases or [c["id"] for c in spec.data.get("cases") or []]
        cases = [c for c in cases if spec.case(c)]
        if len(cases) > 1:
            shares = [cases[i::gpu_count] for i in range(min(gpu_count, len(cases)))]
            return calibration, [Unit(spec, share) for share in shares], together
    return calibration, [Unit(s) for s in single], together


class _Prefixed:
    """A stream that prefixes each line with the GPU it came from; whole lines, one writer at a time."""

    def __init__(self, out: TextIO, prefix: str, lock: threading.Lock):
        self.out, self.prefix, self.lock, self.pending = out, prefix, lock, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        if lines:
            with self.lock:
                self.out.write("".join(f"{self.prefix}{line}\n" for line in lines))
                self.out.flush()
        return len(text)

    def flush(self) -> None:
        pass


class _Runs:
    """What the GPU workers share: the queue, the outcomes, the stop flag, one writer of records."""

    def __init__(self, repo: Repo, options: Options, environment: dict, out: TextIO):
        self.repo, self.options, self.environment, self.out = repo, options, environment, out
        self.units: queue.Queue[Unit] = queue.Queue()
        self.outcomes: list[Outcome] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.host = socket.gethostname()
        self.batch = batch_id(self.host)

    def run(self, unit: Unit, devices: list[env_mod.Device], extra_env: dict[str, str], out: TextIO) -> Outcome | None:
        """One probe process on these devices; its outcome, or None once the run is interrupted."""
        first = devices[0]
        count = len(devices)
        reason = unit.spec.skip_reason(self.options.mode, first.gpu, count)
        if reason:
            print(f"{unit.spec.id}: skipped: {reason}", file=out)
            return self._keep(Outcome(unit.spec.id, "skipped", reason))
        environment = dict(self.environment, gpu=first.gpu.name, arch=first.gpu.arch, driver=first.gpu.driver,
                           host=self.host, gpu_index=first.index if count == 1 else None,
                           gpu_uuid=first.uuid if count == 1 else None,
                           power_limit_w=env_mod.clocks(first.index).get("power_limit_w"))
        if count > 1:
            environment["gpu_count"] = count
        visible = ",".join(str(d.index) for d in devices)
        options = dataclasses.replace(self.options, write=False, cases=unit.cases or self.options.cases)
        timeout = options.timeout_s or unit.spec.timeout_s
        cases = f" cases {', '.join(unit.cases)}" if unit.cases else ""
        print(f"{unit.spec.id}{cases}: running ({options.mode}, timeout {timeout:.0f} s)", file=out)
        outcome = _run_one(self.repo, unit.spec, options, environment, timeout,
                           dict(extra_env, CUDA_VISIBLE_DEVICES=visible), out)
        if self.stop.is_set():
            return None
        if self.options.write and outcome.record is not None:
            with self.lock:  # run ids are unique per probe directory: one writer picks them
                record = outcome.record
                record["batch"] = self.batch
                record["run_id"] = _unique_run_id(self.repo, unit.spec.id, record["run_id"], visible)
                try:
                    outcome.path = _write_record(self.repo, unit.spec.id, record)
                except (OSError, ValueError, RecursionError) as err:
                    # Evidence asked for and not kept is a failed run, as under the plain runner.
                    outcome.status = "failed"
                    outcome.reason = f"{outcome.reason}; record not written: {err}".lstrip("; ")
        print(f"{unit.spec.id}{cases}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else "")
              + (f" -> {outcome.path}" if outcome.path else ""), file=out)
        return self._keep(outcome)

    def _keep(self, outcome: Outcome) -> Outcome:
        with self.lock:
            self.outcomes.append(outcome)
        return outcome

    def worker(self, device: env_mod.Device, calibration: list[ProbeSpec]) -> None:
        out = _Prefixed(self.out, f"[gpu {device.index}] ", self.lock)
        extra_env: dict[str, str] = {}
        for spec in calibration:
            outcome = self.guarded(Unit(spec), [device], extra_env, out)
            if outcome and (outcome.status == "passed" or CEILINGS_ENV not in extra_env):
                extra_env[CEILINGS_ENV] = json.dumps(ceilings_after(outcome))
        while not self.stop.is_set():
            try:
                unit = self.units.get_nowait()
            except queue.Empty:
                return
            self.guarded(unit, [device], extra_env, out)

    def guarded(self, unit: Unit, devices: list[env_mod.Device], extra_env: dict[str, str], out: TextIO) -> Outcome | None:
        """run(), where a fault of the runner itself is that probe's failed outcome: in a worker
        thread it would otherwise vanish (a thread traceback, no outcome, and exit 0)."""
        try:
            return self.run(unit, devices, extra_env, out)
        except Exception as err:   # noqa: BLE001 - any fault here must reach the summary and the exit code
            reason = f"the runner failed on this probe: {type(err).__name__}: {' '.join(str(err).split())}"[:1000]
            print(f"{unit.spec.id}: failed ({reason})", file=out)
            return self._keep(Outcome(unit.spec.id, "failed", reason))


def run_on_gpus(repo: Repo, specs: list[ProbeSpec], options: Options, devices: list[env_mod.Device],
                out: TextIO | None = None) -> list[Outcome]:
    """Run the probes over `devices` in parallel; the outcomes, in the order the runs ended."""
    out = out or sys.stderr
    names = ", ".join(f"{d.index} ({d.gpu.name})" for d in devices)
    print(f"kernelwiki probe run: {len(specs)} probe(s), mode {options.mode}, on GPUs {names}", file=out)
    runs = _Runs(repo, options, env_mod.fingerprint(repo.root), out)
    calibration, units, together = plan(specs, options, len(devices))
    for unit in units:
        runs.units.put(unit)
    threads = [threading.Thread(target=runs.worker, args=(d, calibration), name=f"gpu-{d.index}", daemon=True)
               for d in devices]
    _wait(repo, runs, threads)
    alone = {CEILINGS_ENV: json.dumps(ceilings_unavailable("a probe on several GPUs at once has no calibration of "
                                                             "its own; each GPU's ceilings are that GPU's"))}
    for spec in together:
        thread = threading.Thread(target=runs.guarded, args=(Unit(spec), devices, alone, _Prefixed(out, "[all gpus] ", runs.lock)),
                                  daemon=True)
        _wait(repo, runs, [thread])
    return runs.outcomes


def _wait(repo: Repo, runs: _Runs, threads: list[threading.Thread]) -> None:
    """Start and join the workers from the main thread, where SIGINT/SIGTERM arrive as Interrupted:
    then stop them, kill every probe process of this checkout until all workers have ended, re-raise."""
    for thread in threads:
        thread.start()
    try:
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(timeout=0.1)
    except processes.Interrupted:
        runs.stop.set()
        while any(t.is_alive() for t in threads):
            processes.kill_stale(repo.root)
            for thread in threads:
                thread.join(timeout=0.05)
        raise


def batch_id(host: str) -> str:
    """The id the records of one invocation share: its start, host and runner pid."""
    safe = re.sub(r"[^A-Za-z0-9.-]", "-", host)[:60] or "host"
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{safe}-{os.getpid()}"


def _unique_run_id(repo: Repo, probe_id: str, run_id: str, visible: str) -> str:
    """The runner's run id with the GPU(s) appended, numbered on if a file of that name exists."""
    base = f"{run_id}-gpu{visible.replace(',', '-')}"
    candidate, n = base, 2
    while record_file.taken(repo.evidence / probe_id, candidate):
        candidate, n = f"{base}-{n}", n + 1
    return candidate
