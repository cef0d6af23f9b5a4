"""Timing on the GPU: warm-up, CUDA events, L2 flushed before every timed launch, candidates
interleaved so that all of them see the same clocks, median with p10/p90, and each candidate's SM
clock read before its first and after its last timed launch.

Interleaving matters on Hopper: a long GEMM benchmark heats the chip and the SM clock falls, so
timing A for a minute and then B for a minute favours A. Here every iteration times each candidate
once, in turn. With order="shuffled" each iteration takes the candidates in a new order (seeded
by the iteration number, so reproducible): where the clock is power-limited, a kernel that always
follows the most power-hungry one starts on a lower clock, and a rotation would not help, since it
keeps every candidate's predecessor.
"""

from __future__ import annotations

import random
import statistics
from typing import Callable

from kernelwiki.harness.env import clocks

ORDERS = ("interleaved", "shuffled")
L2_FLUSH_FACTOR = 2  # sweep a buffer of at least 2x L2 between launches
# How the L2 is emptied before each timed launch. "memset" writes the buffer: the L2 is then full of
# dirty lines, which the timed kernel's own reads evict, so their write-back to DRAM competes with it
# (about L2-size bytes of extra traffic: a sizeable share for a kernel that streams ~100 MB). "read"
# sums the buffer instead: the L2 holds clean lines that are dropped for free, as in steady state.
FLUSHES = ("memset", "read")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def iteration_order(names: list[str], iteration: int, order: str) -> list[str]:
    """The order in which one timing iteration runs the candidates: as given ("interleaved"), or
    shuffled with the iteration number as seed ("shuffled"; reproducible run to run)."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r} unknown; use one of {ORDERS}")
    names = list(names)
    if order == "shuffled":
        random.Random(iteration).shuffle(names)
    return names


class Timer:
    """Times callables on the current CUDA stream with cold L2."""

    def __init__(self, warmup: int = 5, iters: int = 50, flush_l2: bool = True, order: str = "interleaved",
                 flush: str = "memset"):
        import torch

        if order not in ORDERS:
            raise ValueError(f"order {order!r} unknown; use one of {ORDERS}")
        if flush not in FLUSHES:
            raise ValueError(f"flush {flush!r} unknown; use one of {FLUSHES}")
        self.torch = torch
        self.warmup, self.iters, self.flush_l2, self.order, self.flush = warmup, iters, flush_l2, order, flush
        l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 * 2**20) or 64 * 2**20
        self.flush_bytes = L2_FLUSH_FACTOR * l2_bytes
        self._flush = None
        if flush_l2:
            self._flush = torch.ones(self.flush_bytes // 4, dtype=torch.float32, device="cuda")
            self._sink = torch.empty((), dtype=torch.float32, device="cuda")

    def protocol(self) -> dict:
        how = "memset" if self.flush == "memset" else "read (sum)"
        return {"method": "cuda-events", "warmup": self.warmup, "iterations": self.iters,
                "order": self.order, "l2": f"flushed: {how} of {self.flush_bytes >> 20} MiB before each launch"
                if self.flush_l2 else "warm"}

    def _empty_l2(self) -> None:
        if self.flush == "memset":
            self._flush.zero_()
        else:
            self.torch.sum(self._flush, dim=0, out=self._sink)

    def compare(self, candidates: dict[str, Callable[[], object]]) -> dict[str, dict]:
        """{name: {median_ms, p10_ms, p90_ms, sm_clock_mhz_before, sm_clock_mhz_after}} for each candidate."""
        torch = self.torch
        for fn in candidates.values():
            for _ in range(self.warmup):
                fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def time_one(name: str) -> float:
            if self._flush is not None:
                self._empty_l2()
            start.record()
            candidates[name]()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        return timed_rounds(list(candidates), time_one, self.iters, self.order,
                            lambda: clocks().get("sm_clock_mhz"))


def timed_rounds(names: list[str], time_one: Callable[[str], float], iters: int, order: str,
                 read_clock: Callable[[], float | None]) -> dict[str, dict]:
    """Run `iters` rounds, each timing every candidate once in `iteration_order`, and summarize.

    Each candidate's SM clock is read just before its first timed launch and just after its last
    one, so every candidate carries the clock of its own span: on a power-limited GPU the clock
    falls during the block, and one reading copied onto every candidate would hide that the later
    ones ran slower. (nvidia-smi takes tens of milliseconds, so it is not read around every launch.)
    """
    times: dict[str, list[float]] = {name: [] for name in names}
    before: dict[str, float | None] = {}
    after: dict[str, float | None] = {}
    for i in range(iters):
        for name in iteration_order(names, i, order):
            if i == 0:
                before[name] = read_clock()
            times[name].append(time_one(name))
            if i == iters - 1:
                after[name] = read_clock()
    return {
        name: {"median_ms": statistics.median(ts), "p10_ms": _percentile(ts, 0.1), "p90_ms": _percentile(ts, 0.9),
               "sm_clock_mhz_before": before.get(name), "sm_clock_mhz_after": after.get(name)}
        for name, ts in times.items()
    }


class ClockSampler:
    """Samples SM clock and power with `nvidia-smi -lms` while a block of work runs.

    Use as a context manager; `summary()` gives the median and range of what it saw.
    """

    def __init__(self, interval_ms: int = 100):
        self.interval_ms = interval_ms
        self.samples: list[tuple[float, float]] = []
        self._proc = None

    def __enter__(self) -> "ClockSampler":
        import shutil
        import subprocess
        import threading

        if shutil.which("nvidia-smi") is None:
            return self
        self._proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
             f"-lms={self.interval_ms}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        def read() -> None:
            for line in self._proc.stdout:
                try:
                    clock, power = (float(v) for v in line.split(","))
                except ValueError:
                    continue
                self.samples.append((clock, power))

        self._thread = threading.Thread(target=read, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            self._thread.join(timeout=5)

    def summary(self) -> dict:
        if not self.samples:
            return {"sm_clock_mhz_median": None, "power_w_median": None, "samples": 0}
        clocks_seen = [c for c, _ in self.samples]
        power_seen = [p for _, p in self.samples]
        return {"sm_clock_mhz_median": statistics.median(clocks_seen), "sm_clock_mhz_min": min(clocks_seen),
                "sm_clock_mhz_max": max(clocks_seen), "power_w_median": statistics.median(power_seen),
                "samples": len(self.samples)}


def sustained(fn: Callable[[], object], iters: int = 200, warmup: int = 20) -> dict:
    """Back-to-back launches (no L2 flush, no gaps), the way a real workload heats the chip;
    per-launch CUDA-event times plus the SM clock and power sampled during the block."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    with ClockSampler() as sampler:
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
    times = [start.elapsed_time(end) for start, end in events]
    return {"median_ms": statistics.median(times), "p10_ms": _percentile(times, 0.1),
            "p90_ms": _percentile(times, 0.9), "iterations": iters, "warmup": warmup, **sampler.summary()}


_CAPTURE_STREAM = None


def cuda_graph(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` captured once into a CUDA graph; returns a callable that replays it. Timing replays keeps
    a candidate's Python launch path (a loop of launches, a wrapper's checks) out of the events.

    `fn` must launch onto the stream current at the call: a launch bound to another stream escapes
    the capture and the graph holds no work (seen: a teaching variant that kept its compile-time
    stream timed at ~1 us). One capture stream serves the process, and `fn` runs once on it first:
    cuBLAS keeps a workspace per (handle, stream), and one first allocated inside a capture belongs
    to that graph's pool; a fresh stream per capture can reuse a dead stream's handle value and with
    it a freed workspace. The returned callable keeps `fn` alive: the graph holds raw pointers into
    what `fn` owns (a split-K workspace, an output)."""
    import torch

    global _CAPTURE_STREAM
    if _CAPTURE_STREAM is None:
        _CAPTURE_STREAM = torch.cuda.Stream()
    stream = _CAPTURE_STREAM
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    torch.cuda.synchronize()

    def replay() -> None:
        graph.replay()
    replay.keep_alive = (fn, graph)
    return replay
