"""Timing on the GPU: one protocol for every probe (`bench`), candidates interleaved so that all
of them see the same clocks, median with p10/p90, each candidate's SM clock read before its first
and after its last timed launch.

`bench(candidates, make_inputs, set_bytes)` times `{name: fn}` where `fn(inputs)` launches work on
the current CUDA stream using only one input set (its inputs and outputs). Each candidate is warmed
up and its eager time measured; the fastest one's decides the method for all of them (two methods
in one comparison would bias it: a long method's time holds a graph launch that a short method's
per-launch time does not, and an eager time can hold a wrapper's host work):

- short (under SHORT_BELOW_MS): one launch between two CUDA events measures the launch more than
  the kernel (on the H200 an empty kernel reads ~4 us that way, and a 512^3 GEMM 6.4 us against
  4.0 us). So one CUDA graph holds many launches cycling through input sets that together span
  ROTATE_L2_FACTOR x L2 (each set is evicted before it comes round again: cold L2 without a flush
  between launches), and the time is the replay's divided by the launches;
- long: a CUDA-graph replay of one launch after a read sweep of FLUSH_L2_FACTOR x L2 (FLUSHES says
  why a read and not a memset).

Both methods are floored by an empty launch measured the same way in the same process: a time
below REFUSE_BELOW_FLOOR x that floor is refused (ValueError; a graph that captured no work reads
~0), and a case whose fastest candidate is under RESOLVED_FLOOR_FACTOR x the floor is marked
`below_floor` (it measures the launch, not the kernel) and kept off the pages (`case_below_floor`).

Interleaving matters on Hopper: a long GEMM benchmark heats the chip and the SM clock falls, so
timing A for a minute and then B for a minute favours A. Here every iteration times each candidate
once, in turn. With order="shuffled" each iteration takes the candidates in a new order (seeded
by the iteration number, so reproducible): where the clock is power-limited, a kernel that always
follows the most power-hungry one starts on a lower clock, and a rotation would not help, since it
keeps every candidate's predecessor.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any, Callable, Protocol

from kernelwiki.harness.env import clocks, library_versions

ORDERS = ("interleaved", "shuffled")
L2_FLUSH_FACTOR = 2  # sweep a buffer of at least 2x L2 between launches
FLUSH_L2_FACTOR = L2_FLUSH_FACTOR
SHORT_BELOW_MS = 0.05       # eager time under which a candidate is timed as many launches in one graph
ROTATE_L2_FACTOR = 3        # short candidates: the input sets together span at least this many L2s
MAX_INPUT_SETS = 512        # ... but no more sets than this (tiny sets then stay in L2: the record says so)
MEMORY_FRACTION = 0.5       # ... and no more than this share of the free GPU memory
GRAPH_TARGET_MS = 2.0       # a short candidate's graph runs about this long: the events' ~0.5 us vanish in it
MAX_LAUNCHES = 4096         # ... with at most this many launches (capture time grows with them)
EAGER_SAMPLES = 5           # eager launches timed to classify a candidate
FLOOR_LAUNCHES = 1000       # empty launches in the graph that measures the short method's floor
REFUSE_BELOW_FLOOR = 0.5
"""A time under this fraction of the empty-launch floor is refused: no kernel finishes faster than an
empty one launched the same way; the half leaves room for noise and for a launch that overlaps its
predecessor, and still refuses a graph that captured no work."""
RESOLVED_FLOOR_FACTOR = 2.0
"""A case whose fastest candidate is under this many empty-launch floors is `below_floor`: more than
half of what is timed is the launch (bf16 512^3 and 1024^3 ranged 0.53-1.13x run to run)."""
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
    """One launch between two CUDA events, L2 flushed (or left warm) as asked: only for a probe whose
    subject is the L2's state itself (what a flush or a warm L2 does to a kernel). Every other probe
    times through `bench`, whose protocol this one's floor (~4 us per launch) would distort."""

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
        device = torch_device()
        for fn in candidates.values():
            for _ in range(self.warmup):
                fn()
        device.synchronize()

        def time_one(name: str) -> float:
            if self._flush is not None:
                self._empty_l2()
            return device.elapsed_ms(candidates[name], flush=False)

        return timed_rounds(list(candidates), time_one, self.iters, self.order, device.read_clock)


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


# --- the one protocol: bench ------------------------------------------------------------------
def input_set_count(set_bytes: int, l2_bytes: int, free_bytes: int) -> int:
    """How many input sets a short candidate cycles through: enough to span ROTATE_L2_FACTOR x L2,
    at most MAX_INPUT_SETS and MEMORY_FRACTION of the free memory (one set is already built), at least 1."""
    if not isinstance(set_bytes, int) or set_bytes <= 0:
        raise ValueError(f"set_bytes {set_bytes!r} must be a positive number of bytes")
    wanted = math.ceil(ROTATE_L2_FACTOR * l2_bytes / set_bytes)
    fits = 1 + int(MEMORY_FRACTION * max(0, free_bytes) // set_bytes)
    return max(1, min(wanted, fits, MAX_INPUT_SETS))


def classify(eager_ms: float) -> str:
    """'short' (many launches in one graph) or 'long' (one flushed launch per replay)."""
    return "short" if eager_ms < SHORT_BELOW_MS else "long"


def launches_per_graph(eager_ms: float, sets: int) -> int:
    """Launches in a short candidate's graph: whole passes over the sets (each set used equally, and
    used again only after all the others), enough to run about GRAPH_TARGET_MS, at most MAX_LAUNCHES
    (but one pass at least)."""
    passes = math.ceil(GRAPH_TARGET_MS / (max(eager_ms, 1e-6) * sets))
    return sets * max(1, min(passes, MAX_LAUNCHES // sets))


def check_floor(name: str, median_ms: float, floor_ms: float) -> None:
    """Refuse a time that no kernel can reach: under REFUSE_BELOW_FLOOR x the empty-launch floor."""
    if median_ms < REFUSE_BELOW_FLOOR * floor_ms:
        raise ValueError(f"{name}: median {median_ms * 1e3:.3f} us per launch is below the empty-launch floor "
                         f"({floor_ms * 1e3:.3f} us, measured the same way in this process): the timed work "
                         f"did not run (a launch on another stream escapes the graph)")


def case_below_floor(case: dict, record_protocol: Any = None) -> bool:
    """Whether a record's case is kept off the pages: its fastest timed candidate is under the
    protocol's floor (it measures the launch, not the kernel).

    `bench` marks that itself (protocol.below_floor). A time with no protocol of its own, from a
    record whose protocol flushed the L2 before each launch (`record_protocol["l2"]` "flushed: ...":
    one launch between two CUDA events, the method `bench` replaced), is under that method's floor
    when it is under SHORT_BELOW_MS: there the launch, not the kernel, is what the events measure
    (bf16 512^3 and 1024^3 timed that way ranged 0.53-1.13x run to run). A warm-L2 Timer (a probe
    that measures the L2's state) has no such floor and is left alone."""
    entries = [t for t in (case.get("timing") or {}).values()
               if isinstance(t, dict) and isinstance(t.get("median_ms"), (int, float))]
    if not entries:
        return False
    fastest = min(entries, key=lambda t: t["median_ms"])
    protocol = fastest.get("protocol")
    if "protocol" not in fastest and isinstance(record_protocol, dict):
        flushed = str(record_protocol.get("l2", "")).startswith("flushed")
        return flushed and fastest["median_ms"] < SHORT_BELOW_MS
    return isinstance(protocol, dict) and protocol.get("below_floor") is True


class Device(Protocol):
    """What `bench` needs from the GPU. TorchDevice is the real one; the tests pass a fake."""

    l2_bytes: int
    floors: dict[str, float]   # empty_launch_floor's cache, per method

    def free_bytes(self) -> int: ...
    def synchronize(self) -> None: ...
    def graph(self, launch: Callable[[], object], error_mode: str = "global") -> Callable[[], object]: ...
    def elapsed_ms(self, launch: Callable[[], object], flush: bool) -> float: ...
    def empty_launch(self) -> Callable[[], object]: ...
    def read_clock(self) -> float | None: ...


def bench(candidates: dict[str, Callable[[Any], object]], make_inputs: Callable[[int], Any], set_bytes: int, *,
          iters: int = 30, warmup: int = 5, order: str = "shuffled", device: Device | None = None,
          capture_error_mode: str = "global") -> dict[str, dict]:
    """Time each candidate under the one protocol (module docstring). `fn(inputs)` launches on the
    current CUDA stream using only `inputs`; `make_inputs(i)` builds input set i; `set_bytes` is the
    bytes one launch reads and writes in its set (inputs and outputs; where candidates touch
    different parts of a set, the smallest: the sets must span 3x L2 for each of them). Sets are
    built while the free memory stays above (1 - MEMORY_FRACTION) of what it was.

    Returns {name: {median_ms, p10_ms, p90_ms, sm_clock_mhz_before, sm_clock_mhz_after, protocol}},
    times per launch; `protocol` = {method, launches, input_sets, set_bytes, l2_rotation, eager_ms,
    floor_ms, below_floor}. Raises ValueError for a time below the empty-launch floor.
    `capture_error_mode` is torch's: "thread_local" where another thread of the process (autograd's
    backward worker) makes CUDA calls that would invalidate a "global" capture."""
    if not candidates:
        raise ValueError("bench needs at least one candidate")
    if order not in ORDERS:
        raise ValueError(f"order {order!r} unknown; use one of {ORDERS}")
    if not isinstance(iters, int) or iters < 1 or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"iters {iters!r} must be >= 1 and warmup {warmup!r} >= 0")
    if not isinstance(set_bytes, int) or set_bytes <= 0:
        raise ValueError(f"set_bytes {set_bytes!r} must be a positive number of bytes")
    if capture_error_mode not in CAPTURE_ERROR_MODES:
        raise ValueError(f"capture_error_mode {capture_error_mode!r} unknown; use one of {CAPTURE_ERROR_MODES}")
    device = device if device is not None else torch_device()
    sets = [make_inputs(0)]
    eager: dict[str, float] = {}
    for name, fn in candidates.items():
        for _ in range(warmup):
            fn(sets[0])
        device.synchronize()
        eager[name] = statistics.median(device.elapsed_ms(lambda fn=fn: fn(sets[0]), flush=False)
                                        for _ in range(EAGER_SAMPLES))
    method = classify(min(eager.values()))
    if method == "short":
        free = device.free_bytes()
        for i in range(1, input_set_count(set_bytes, device.l2_bytes, free)):
            if device.free_bytes() < (1 - MEMORY_FRACTION) * free:   # a set larger than set_bytes says
                break
            sets.append(make_inputs(i))
    launches, replays = {}, {}
    for name, fn in candidates.items():
        launches[name] = launches_per_graph(eager[name], len(sets)) if method == "short" else 1
        replays[name] = _capture(device, name, _cycle(fn, sets, launches[name]), capture_error_mode)
    for replay in replays.values():   # a graph's first replay uploads it
        replay()
    device.synchronize()

    def time_one(name: str) -> float:
        return device.elapsed_ms(replays[name], flush=method == "long") / launches[name]

    results = timed_rounds(list(candidates), time_one, iters, order, device.read_clock)
    floor = empty_launch_floor(device, method, iters)
    for name, entry in results.items():
        check_floor(name, entry["median_ms"], floor)
        entry["protocol"] = {
            "method": method, "launches": launches[name], "input_sets": len(sets), "set_bytes": set_bytes,
            "l2_rotation": round(len(sets) * set_bytes / device.l2_bytes, 2) if method == "short" else None,
            "eager_ms": eager[name], "floor_ms": floor, "below_floor": entry["median_ms"] < RESOLVED_FLOOR_FACTOR * floor}
    return results


def bench_protocol(iters: int, warmup: int, order: str, device: Device | None = None) -> dict:
    """The record's `protocol` for `bench` (the rules; each timing entry carries its own values),
    with the library versions the baselines ran."""
    device = device if device is not None else torch_device()
    return {
        "method": "bench", "warmup": warmup, "iterations": iters, "order": order,
        "short": (f"eager time under {SHORT_BELOW_MS * 1e3:g} us: one CUDA graph of launches cycling through "
                  f"input sets spanning {ROTATE_L2_FACTOR}x L2 (at most {MAX_INPUT_SETS} sets, "
                  f"{MEMORY_FRACTION:g} of free memory), about {GRAPH_TARGET_MS:g} ms per replay; "
                  f"time = replay / launches"),
        "long": f"CUDA-graph replay of one launch after a read sweep of {FLUSH_L2_FACTOR}x L2 "
                f"({FLUSH_L2_FACTOR * device.l2_bytes >> 20} MiB)",
        "floor": (f"an empty launch timed the same way; refused under {REFUSE_BELOW_FLOOR:g}x it, "
                  f"below_floor under {RESOLVED_FLOOR_FACTOR:g}x it"),
        **library_versions(),
    }


def merge_protocol(protocol: dict, new: dict) -> None:
    """Add `new` to a record's protocol; a setting that differs between calls (iterations per case)
    becomes the sorted list of its values."""
    for key, value in new.items():
        old = protocol.get(key)
        if key not in protocol or old == value:
            protocol[key] = value
        else:
            values = old if isinstance(old, list) else [old]
            protocol[key] = sorted({*values, value}, key=str)


def _cycle(fn: Callable[[Any], object], sets: list, launches: int) -> Callable[[], None]:
    def run() -> None:
        for j in range(launches):
            fn(sets[j % len(sets)])
    return run


CAPTURE_ERROR_MODES = ("global", "thread_local", "relaxed")


def _capture(device: Device, name: str, launch: Callable[[], object], error_mode: str) -> Callable[[], object]:
    """device.graph(launch), or RuntimeError naming the candidate and the first error of the capture:
    torch's capture_end reports only "operation failed due to a previous error during capture", and
    the error that invalidated it (seen on the H200: "operation would make the legacy stream depend on
    a capturing blocking stream", from autograd leaves first used on the default stream) is the
    exception it was raised during."""
    try:
        return device.graph(launch, error_mode)
    except Exception as err:
        first = err
        while first.__context__ is not None and first.__context__ is not first:
            first = first.__context__
        cause = "" if first is err else f"; first error: {type(first).__name__}: {str(first).splitlines()[0]}"
        raise RuntimeError(f"{name}: CUDA-graph capture failed ({type(err).__name__}: "
                           f"{str(err).splitlines()[0] if str(err) else ''}{cause})"[:500]) from err


def empty_launch_floor(device: Device, method: str, iters: int = 30) -> float:
    """Median time of an empty launch under `method` ('short': per launch in a graph of
    FLOOR_LAUNCHES; 'long': one replay after the read sweep), measured once per device (and process)."""
    if method not in device.floors:
        empty = device.empty_launch()
        launches = FLOOR_LAUNCHES if method == "short" else 1

        def run() -> None:
            for _ in range(launches):
                empty()
        replay = device.graph(run)
        replay()
        device.synchronize()
        device.floors[method] = statistics.median(device.elapsed_ms(replay, flush=method == "long") / launches
                                                  for _ in range(iters))
    return device.floors[method]


class TorchDevice:
    """The GPU through torch: events on the current stream, the read sweep, graphs via cuda_graph."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 64 * 2**20)
        self.floors: dict[str, float] = {}
        self._sweep = None
        self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def free_bytes(self) -> int:
        return int(self.torch.cuda.mem_get_info()[0])

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def graph(self, launch: Callable[[], object], error_mode: str = "global") -> Callable[[], object]:
        return cuda_graph(launch, error_mode)

    def elapsed_ms(self, launch: Callable[[], object], flush: bool) -> float:
        if flush:
            self._read_sweep()
        start, end = self._events
        start.record()
        launch()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def _read_sweep(self) -> None:
        """Sum a buffer of FLUSH_L2_FACTOR x L2 (before the start event, so untimed): the L2 then
        holds clean lines of it, which the timed kernel's reads drop for free (FLUSHES)."""
        torch = self.torch
        if self._sweep is None:
            self._sweep = (torch.ones(FLUSH_L2_FACTOR * self.l2_bytes // 4, dtype=torch.float32, device="cuda"),
                           torch.empty((), dtype=torch.float32, device="cuda"))
        buffer, sink = self._sweep
        torch.sum(buffer, dim=0, out=sink)

    def empty_launch(self) -> Callable[[], object]:
        """The smallest kernel torch launches: one block writing one element."""
        one = self.torch.empty(1, dtype=self.torch.float32, device="cuda")
        return one.zero_

    def read_clock(self) -> float | None:
        return clocks().get("sm_clock_mhz")


_TORCH_DEVICE: TorchDevice | None = None


def torch_device() -> TorchDevice:
    """One TorchDevice per process (its sweep buffer and floors are reused)."""
    global _TORCH_DEVICE
    if _TORCH_DEVICE is None:
        _TORCH_DEVICE = TorchDevice()
    return _TORCH_DEVICE


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



def bound(names: list[str]) -> dict[str, Callable[[dict], object]]:
    """bench candidates for input sets that hold one launch per candidate, already bound to that
    set's tensors (a kernel compiled or wrapped for fixed pointers): fn(inputs) = inputs[name]()."""
    return {name: (lambda inputs, name=name: inputs[name]()) for name in names}


def cute_stream():
    """The current torch stream as a CUstream, for a CuTe DSL launch: read at every call, so that a
    launch under graph capture lands on the capture stream (one bound to the stream current at
    compile time escapes the graph: cuda_graph says what that looks like)."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)

_CAPTURE_STREAM = None


def cuda_graph(fn: Callable[[], object], error_mode: str = "global") -> Callable[[], object]:
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
    with torch.cuda.graph(graph, stream=stream, capture_error_mode=error_mode):
        fn()
    torch.cuda.synchronize()

    def replay() -> None:
        graph.replay()
    replay.keep_alive = (fn, graph)
    return replay
