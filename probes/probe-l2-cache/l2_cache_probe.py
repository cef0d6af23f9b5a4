"""probe-l2-cache: the L2 measured - bandwidth by working-set size, the persisting access-policy window,
what a memset "flush" does to the timing of a bandwidth-bound kernel, and the latency of one load.

Every case checks its kernel exactly first: the read kernel's wrap-around checksum of the words it
read against the same sum computed by torch, the pointer chase's visited indices against the chain.
Timing differs by case, because each case is about the L2's state (so ctx.bench, which rotates input
sets past the L2, does not apply):

- read-*: one working set read warm, over and over (about 2 GiB read per launch), CUDA events
  around each launch (the harness Timer, no flush);
- flush-*: one pass over the working set timed after each of three preparations, interleaved:
  a memset of 2x L2 (the old harness flush), a read (sum) of 2x L2, or an untimed read of the
  working set itself (warm);
- persisting-window: a hot set read after a streaming read that evicts it, without and then with
  an access-policy window that marks the hot set persisting (blocks in that order);
- chase-*: one thread, clock64 differences between dependent loads;
- sources-*: the same sweep as read-* under Nsight Compute (ncu_driver.py, cache control and
  clocks left alone), for how many of the bytes read came from DRAM and the L2's hit rate.

Run through the runner: kernelwiki probe run --probe probe-l2-cache [--compile-only]
"""

from __future__ import annotations

import csv
import io
import statistics
import sys
from functools import lru_cache
from pathlib import Path

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates, tools
from kernelwiki.harness.env import clocks
from kernelwiki.harness.probe import Context, Probe
from kernelwiki.harness.timing import L2_FLUSH_FACTOR, timed_rounds

from artifacts.kernels.l2_cache import l2_cache

MIB = 2**20
SWEEP_READ_BYTES = 2 * 2**30   # bytes each sweep launch reads, whatever the working set
FLUSH_ITERS, WINDOW_ITERS = 30, 20
_measured: dict[str, float] = {}


@lru_cache(maxsize=1)
def _kernels() -> l2_cache.L2Kernels:
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context exists before the library's runtime starts
    return l2_cache.L2Kernels(compile_mod.nvcc_library(l2_cache.SOURCE, "sm_90a"))


@lru_cache(maxsize=1)
def _sms() -> int:
    import torch

    return torch.cuda.get_device_properties(0).multi_processor_count


def _stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def working_set(nbytes: int, generator):
    """Random 32-bit words (int32 storage), nbytes of them."""
    import torch

    return torch.randint(-2**31, 2**31, (nbytes // 4,), dtype=torch.int32, device="cuda", generator=generator)


def checked_read(buf, per_thread: int, *, short_groups: int = 0) -> dict:
    """One launch of l2_read; its checksum against torch's exact sum of the same words."""
    import torch

    kernels = _kernels()
    checksum = torch.zeros(1, dtype=torch.int32, device="cuda")
    kernels.read(buf, per_thread, checksum, sms=_sms(), stream=_stream(), short_groups=short_groups)
    torch.cuda.synchronize()
    n_vec = buf.numel() * 4 // l2_cache.VECTOR_BYTES
    words = buf.view(-1, 4)
    expected = l2_cache.expected_checksum(l2_cache.read_threads(_sms()) * per_thread, n_vec,
                                          int(buf.to(torch.int64).sum().item()),
                                          lambda r: int(words[:r].to(torch.int64).sum().item()))
    got = checksum.to(torch.int64).item() % l2_cache.WORD
    return gates.check(torch.tensor([got]), torch.tensor([expected]), "exact")


def _read_bandwidth(nbytes: int, per_thread: int, median_ms: float) -> float:
    return l2_cache.read_threads(_sms()) * per_thread * l2_cache.VECTOR_BYTES / (median_ms * 1e-3) / 1e12


def sweep(case: dict, ctx: Context) -> dict:
    import torch

    nbytes = int(case["params"]["working_set_mib"]) * MIB
    buf = working_set(nbytes, ctx.generator())
    per_thread = l2_cache.per_thread_for(SWEEP_READ_BYTES, l2_cache.read_threads(_sms()))
    correctness = checked_read(buf, per_thread)
    checksum = torch.zeros(1, dtype=torch.int32, device="cuda")
    kernels = _kernels()
    timing = ctx.timer(warmup=3, iters=20, flush_l2=False).compare(
        {"read": lambda: kernels.read(buf, per_thread, checksum, sms=_sms(), stream=_stream())})
    ctx.protocol["read_sweep"] = ("warm: the working set read over and over in each launch (about 2 GiB read), "
                                  "CUDA events around each launch, no flush")
    tbs = _read_bandwidth(nbytes, per_thread, timing["read"]["median_ms"])
    props = torch.cuda.get_device_properties(0)
    metrics = {"bytes_read_per_launch": l2_cache.read_threads(_sms()) * per_thread * l2_cache.VECTOR_BYTES,
               "l2_cache_size_reported_mib": round(getattr(props, "L2_cache_size", 0) / MIB, 2)}
    baseline = ("DRAM (1 GiB working set)", _measured["read-1024m"]) if "read-1024m" in _measured else None
    _measured[case["id"]] = tbs
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "headline": ctx.headline("bandwidth", tbs, "TB/s", baseline=baseline)}


def flush_bias(case: dict, ctx: Context) -> dict:
    """One pass over the working set after a memset of 2x L2, after a read of 2x L2, and warm."""
    import torch

    nbytes = int(case["params"]["working_set_mib"]) * MIB
    buf = working_set(nbytes, ctx.generator())
    threads = l2_cache.read_threads(_sms())
    per_thread = l2_cache.per_thread_for(nbytes, threads)
    correctness = checked_read(buf, per_thread)
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.ones(L2_FLUSH_FACTOR * l2_bytes // 4, dtype=torch.float32, device="cuda")
    sink = torch.empty((), dtype=torch.float32, device="cuda")
    checksum = torch.zeros(1, dtype=torch.int32, device="cuda")
    kernels = _kernels()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def launch() -> None:
        kernels.read(buf, per_thread, checksum, sms=_sms(), stream=_stream())

    def warm() -> None:
        """Two untimed passes: the set is in L2, and the GPU is still busy while the host records the
        start event and submits the timed launch (so the submission is not inside the window)."""
        launch()
        launch()

    prepare = {"after_memset": lambda: flush.zero_(), "after_read_sweep": lambda: torch.sum(flush, dim=0, out=sink),
               "warm": warm}

    def time_one(name: str) -> float:
        prepare[name]()
        start.record()
        launch()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    for name in prepare:   # warm-up: one of each
        time_one(name)
    timing = timed_rounds(list(prepare), time_one, FLUSH_ITERS, "shuffled", lambda: clocks().get("sm_clock_mhz"))
    ctx.protocol["flush_comparison"] = (f"explicit: each of memset (zero_) of {L2_FLUSH_FACTOR}x L2, read (sum) of "
                                        f"{L2_FLUSH_FACTOR}x L2, or two untimed launches (warm) right before one timed "
                                        f"launch; CUDA events; {FLUSH_ITERS} shuffled rounds")
    tbs = {name: _read_bandwidth(nbytes, per_thread, t["median_ms"]) for name, t in timing.items()}
    metrics = {f"{name}_tb_s": round(v, 3) for name, v in tbs.items()}
    metrics["memset_over_read_time"] = round(timing["after_memset"]["median_ms"] / timing["after_read_sweep"]["median_ms"], 4)
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "headline": ctx.headline("bandwidth", tbs["after_memset"], "TB/s",
                                     baseline=("after a read sweep", tbs["after_read_sweep"]))}


def cuda_check(result):
    """The value of a cuda.bindings runtime call, or RuntimeError naming the failed status."""
    err, *rest = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA runtime call failed: {err}")
    return rest[0] if rest else None


def _window(cudart, base_ptr: int, num_bytes: int):
    """A stream attribute value holding an access-policy window (num_bytes 0: no window)."""
    window = cudart.cudaAccessPolicyWindow()
    window.base_ptr = base_ptr
    window.num_bytes = num_bytes
    window.hitRatio = 1.0
    window.hitProp = cudart.cudaAccessProperty.cudaAccessPropertyPersisting
    window.missProp = cudart.cudaAccessProperty.cudaAccessPropertyStreaming
    value = cudart.cudaStreamAttrValue()
    value.accessPolicyWindow = window
    return value


def persisting_window(case: dict, ctx: Context) -> dict:
    """The hot set read right after a streaming read that evicts it: plain, then inside a
    persisting access-policy window. The set-aside and the window are undone afterwards."""
    import torch
    from cuda.bindings import runtime as cudart

    params = case["params"]
    props = cuda_check(cudart.cudaGetDeviceProperties(torch.cuda.current_device()))
    limits = {"l2_cache_size_mib": round(props.l2CacheSize / MIB, 2),
              "persisting_l2_max_mib": round(props.persistingL2CacheMaxSize / MIB, 2),
              "access_policy_max_window_mib": round(props.accessPolicyMaxWindowSize / MIB, 2)}
    hot_bytes = min(int(params["hot_mib"]) * MIB, props.persistingL2CacheMaxSize // MIB * MIB)
    if hot_bytes == 0:
        return {"correctness": {"passed": True, "reason": "no persisting L2 on this device: nothing to check"},
                "metrics": {**limits, "set_aside_refused": "persistingL2CacheMaxSize is 0"}}
    hot, streaming = working_set(hot_bytes, ctx.generator()), working_set(int(params["streaming_mib"]) * MIB,
                                                                           ctx.generator(salt=1))
    threads = l2_cache.read_threads(_sms())
    hot_per_thread = l2_cache.per_thread_for(hot_bytes, threads)
    stream_per_thread = l2_cache.per_thread_for(streaming.numel() * 4, threads)
    correctness = checked_read(hot, hot_per_thread)
    limit = cudart.cudaLimit.cudaLimitPersistingL2CacheSize
    old_limit = cuda_check(cudart.cudaDeviceGetLimit(limit))
    refused = cudart.cudaDeviceSetLimit(limit, hot_bytes)[0]
    if int(refused) != 0:
        return {"correctness": correctness, "metrics": {**limits, "set_aside_refused": str(refused)}}
    side = torch.cuda.Stream()
    handle = cudart.cudaStream_t(side.cuda_stream)
    attribute = cudart.cudaStreamAttrID.cudaLaunchAttributeAccessPolicyWindow
    checksum = torch.zeros(1, dtype=torch.int32, device="cuda")
    kernels = _kernels()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: dict[str, list[float]] = {"plain": [], "window": []}
    try:
        set_aside = cuda_check(cudart.cudaDeviceGetLimit(limit))
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for condition in ("plain", "window"):
                cuda_check(cudart.cudaStreamSetAttribute(
                    handle, attribute, _window(cudart, hot.data_ptr(), hot_bytes if condition == "window" else 0)))
                cuda_check(cudart.cudaCtxResetPersistingL2Cache())
                for i in range(WINDOW_ITERS + 1):   # the first round only warms
                    kernels.read(streaming, stream_per_thread, checksum, sms=_sms(), stream=side.cuda_stream)
                    start.record(side)
                    kernels.read(hot, hot_per_thread, checksum, sms=_sms(), stream=side.cuda_stream)
                    end.record(side)
                    end.synchronize()
                    if i:
                        times[condition].append(start.elapsed_time(end))
    finally:
        cudart.cudaStreamSetAttribute(handle, attribute, _window(cudart, 0, 0))
        cudart.cudaCtxResetPersistingL2Cache()
        cudart.cudaDeviceSetLimit(limit, old_limit)
        torch.cuda.synchronize()
    ctx.protocol["persisting_window"] = (f"explicit: per round, an untimed read of the {params['streaming_mib']} MiB "
                                         f"streaming set, then CUDA events around one read of the hot set; "
                                         f"{WINDOW_ITERS} rounds without a window, then {WINDOW_ITERS} with it "
                                         f"(hitRatio 1, hitProp persisting, missProp streaming)")
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    tbs = {name: _read_bandwidth(hot_bytes, hot_per_thread, ms) for name, ms in medians.items()}
    metrics = {**limits, "hot_mib": hot_bytes / MIB, "set_aside_mib": round(set_aside / MIB, 2),
               "plain_tb_s": round(tbs["plain"], 3), "window_tb_s": round(tbs["window"], 3)}
    timing = {name: {"median_ms": ms, "iterations": WINDOW_ITERS} for name, ms in medians.items()}
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "headline": ctx.headline("bandwidth", tbs["window"], "TB/s", baseline=("no window", tbs["plain"]))}


def chase(case: dict, ctx: Context) -> dict:
    """Cycles of one dependent load, one thread, over a random cycle through the working set's lines."""
    import torch

    params = case["params"]
    nbytes = int(params["working_set_mib"]) * MIB
    words_per_line = l2_cache.LINE_BYTES // 4
    lines = nbytes // l2_cache.LINE_BYTES
    order = torch.randperm(lines, generator=ctx.generator(), device="cuda")
    next_words = torch.zeros(nbytes // 4, dtype=torch.int32, device="cuda")
    next_words[order * words_per_line] = (torch.roll(order, -1) * words_per_line).to(torch.int32)
    warm = lines if params["warm"] else 0
    steps = l2_cache.CHASE_MAX_STEPS
    clock_at = torch.zeros(steps, dtype=torch.int32, device="cuda")
    visited = gates.poison(torch.empty(steps, dtype=torch.int32, device="cuda"))
    _kernels().chase(next_words, int(order[0]) * words_per_line, warm, steps, clock_at, visited, stream=_stream())
    torch.cuda.synchronize()
    expected = torch.tensor(l2_cache.chain(order.cpu(), steps, warm), dtype=torch.int32)
    correctness = gates.check(visited.cpu(), expected, "exact")
    cycles = sorted(l2_cache.latencies([v % l2_cache.WORD for v in clock_at.cpu().tolist()]))
    pick = lambda q: cycles[min(len(cycles) - 1, round(q * (len(cycles) - 1)))]  # noqa: E731
    mhz = clocks().get("sm_clock_mhz")
    median = statistics.median(cycles)
    metrics = {f"p{q}_cycles": pick(q / 100) for q in (5, 25, 75, 95)}
    metrics.update(loads=len(cycles), sm_clock_mhz=mhz, median_ns=round(median / mhz * 1e3, 1) if mhz else None)
    ctx.protocol["chase"] = "one thread, ld.global.cg, clock64 difference between dependent loads (includes a few cycles of loop)"
    baseline = ("L2 hit (chase-l2)", _measured["chase-l2"]) if case["id"] != "chase-l2" and "chase-l2" in _measured \
        else None
    _measured[case["id"]] = median
    return {"correctness": correctness, "metrics": metrics,
            "headline": ctx.headline("latency", median, "cycles", baseline=baseline)}


NCU_METRICS = ("dram__bytes_read.sum", "lts__t_sector_hit_rate.pct", "gpu__time_duration.sum")
_SCALE = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
          "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
          "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "%": 1.0}
"""ncu's unit spellings (they differ between versions and with --print-units), to base units."""


def ncu_values(output: str) -> dict[str, float | None]:
    """NCU_METRICS from ncu's --csv output, in bytes, seconds and percent (None where absent or
    in a unit not known here)."""
    values: dict[str, float | None] = dict.fromkeys(NCU_METRICS)
    start = output.find('"ID"')
    for row in csv.DictReader(io.StringIO(output[start:] if start >= 0 else "")):
        name, unit, value = row.get("Metric Name"), str(row.get("Metric Unit") or "").lower(), row.get("Metric Value")
        if name in values and unit in _SCALE and value:
            try:
                values[name] = float(value.replace(",", "")) * _SCALE[unit]
            except ValueError:
                pass
    return values


def sources(case: dict, ctx: Context) -> dict:
    """The read-* sweep of one working set under ncu: bytes read from DRAM over the bytes the
    kernel requested, the L2's sector hit rate, and the DRAM read bandwidth (DRAM bytes over ncu's
    kernel duration), the one figure that the HBM ceiling bounds."""
    mib = int(case["params"]["working_set_mib"])
    driver = Path(__file__).with_name("ncu_driver.py")
    output = tools.run(["ncu", "--clock-control", "none", "--cache-control", "none", "--kernel-name", "regex:l2_read",
                        "--launch-skip", "2", "--launch-count", "1", "--csv", "--metrics", ",".join(NCU_METRICS),
                        sys.executable, str(driver), str(mib), str(ctx.seed)], timeout=300)
    verdict = tools.driver_result(output)
    if not verdict.get("driver_ran"):
        return {"correctness": {"passed": False, "reason": "the driver did not run under ncu"},
                "metrics": {"tail": verdict.get("tail", "")[-600:]}}
    values = ncu_values(output)
    dram, hit, seconds = (values[name] for name in NCU_METRICS)
    requested = l2_cache.read_threads(_sms()) * l2_cache.per_thread_for(SWEEP_READ_BYTES, l2_cache.read_threads(_sms())) \
        * l2_cache.VECTOR_BYTES
    ctx.protocol["sources"] = ("ncu --clock-control none --cache-control none, the third launch of the read sweep "
                               "(after the checked one and a warm-up), metrics " + ", ".join(NCU_METRICS))
    if dram is None or hit is None or not seconds:
        return {"correctness": {"passed": False, "reason": "ncu printed no value for " + ", ".join(
            n for n, v in values.items() if v is None)}, "metrics": {"tail": output[-600:]}}
    metrics = {"bytes_requested": requested, "dram_bytes_read": int(dram), "dram_fraction": round(dram / requested, 4),
               "l2_sector_hit_rate_pct": round(hit, 2), "ncu_duration_ms": round(seconds * 1e3, 4),
               "requested_tb_s": round(requested / seconds / 1e12, 4)}
    return {"correctness": verdict["gate"], "metrics": metrics,
            "headline": ctx.headline("dram-read-bandwidth", dram / seconds / 1e12, "TB/s", peak_key="copy")}


KINDS = {"read": sweep, "flush": flush_bias, "persisting": persisting_window, "chase": chase, "sources": sources}


def run_case(case: dict, ctx: Context) -> dict:
    return KINDS[case["params"]["kind"]](case, ctx)


def negative_control(ctx: Context) -> dict:
    """The read kernel losing the last of its ~60 groups of eight loads per thread must fail the exact checksum."""
    buf = working_set(64 * MIB, ctx.generator(salt=99))
    per_thread = l2_cache.per_thread_for(SWEEP_READ_BYTES, l2_cache.read_threads(_sms()))
    return checked_read(buf, per_thread, short_groups=1)


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.nvcc(l2_cache.SOURCE, arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
