"""Timing on the GPU: warm-up, CUDA events, L2 flushed before every timed launch, candidates
interleaved so that all of them see the same clocks, median with p10/p90, SM clock recorded.

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
L2_FLUSH_FACTOR = 2  # memset a buffer of at least 2x L2 between launches


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

    def __init__(self, warmup: int = 5, iters: int = 50, flush_l2: bool = True, order: str = "interleaved"):
        import torch

        if order not in ORDERS:
            raise ValueError(f"order {order!r} unknown; use one of {ORDERS}")
        self.torch = torch
        self.warmup, self.iters, self.flush_l2, self.order = warmup, iters, flush_l2, order
        l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 * 2**20) or 64 * 2**20
        self.flush_bytes = L2_FLUSH_FACTOR * l2_bytes
        self._flush = torch.empty(self.flush_bytes, dtype=torch.uint8, device="cuda") if flush_l2 else None

    def protocol(self) -> dict:
        return {"method": "cuda-events", "warmup": self.warmup, "iterations": self.iters,
                "order": self.order, "l2": f"flushed: memset of {self.flush_bytes >> 20} MiB before each launch"
                if self.flush_l2 else "warm"}

    def compare(self, candidates: dict[str, Callable[[], object]]) -> dict[str, dict]:
        """{name: {median_ms, p10_ms, p90_ms, sm_clock_mhz_after}} for each candidate."""
        torch = self.torch
        for fn in candidates.values():
            for _ in range(self.warmup):
                fn()
        torch.cuda.synchronize()
        times: dict[str, list[float]] = {name: [] for name in candidates}
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        clock_before = clocks().get("sm_clock_mhz")
        for i in range(self.iters):
            for name in iteration_order(list(candidates), i, self.order):
                fn = candidates[name]
                if self._flush is not None:
                    self._flush.zero_()
                start.record()
                fn()
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
        clock_after = clocks().get("sm_clock_mhz")
        return {
            name: {"median_ms": statistics.median(ts), "p10_ms": _percentile(ts, 0.1), "p90_ms": _percentile(ts, 0.9),
                   "sm_clock_mhz_before": clock_before, "sm_clock_mhz_after": clock_after}
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


def cuda_graph(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` captured once into a CUDA graph; returns the graph's replay. For candidates that are a
    Python loop of launches (one GEMM per group), so that host dispatch gaps between the launches
    are not timed, as when such a loop is used in production. `fn` runs once on a side stream
    before the capture (lazy initialization, workspaces) and must launch onto the current stream."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph.replay
