"""One timing protocol for every probe (issue 23): probe scripts time GPU work through ctx.bench
(kernelwiki.harness.timing.bench). Any other timing in a probe - CUDA event pairs, a host clock around
launches, the harness Timer, timed_rounds - is listed here with the reason it may not go through bench,
so a new one fails this test until it is either moved onto bench or justified."""

from __future__ import annotations

import re

from conftest import ROOT

OTHER_TIMING = re.compile(r"torch\.cuda\.Event\(|\.elapsed_time\(|perf_counter\(|time\.time\(|\bctx\.timer\(|"
                          r"\bTimer\(|\btimed_rounds\(|do_bench|cudaEventElapsedTime|std::chrono")

JUSTIFIED = {
    "probe-benchmark-pitfalls/pitfalls.py":
        "the wrong methods are the subject (host timer without a sync, warm L2, a side stream); the right "
        "reference each is compared with goes through ctx.bench",
    "probe-footgun-graph-memcpy/graph_memcpy.py":
        "the memcpy-eager case is the footgun itself: an eager copy_ cannot be replayed from a graph, so it "
        "is timed by the Timer after an L2 read sweep; the graph cases use ctx.bench",
    "probe-fp8-blockscale-gemm/deepgemm_baseline.py":
        "perf_counter times DeepGEMM's JIT build (host seconds), not a kernel",
    "probe-fp8-blockscale-gemm/fp8_blockscale_probe.py":
        "the '@ 8 GB memset' entries re-time graph replays under DeepGEMM's own protocol for comparison; "
        "they are context, never the headline, which comes from ctx.bench",
    "probe-hopper-gemm/hopper_gemm_probe.py":
        "perf_counter measures compile time and the host cost of a launch call (host metrics); _graph_ms is "
        "the held-out sweep's cheap first pass that only picks the finalists ctx.bench then times",
    "probe-l2-cache/l2_cache_probe.py":
        "the L2's state is what it measures (warm reads, the flush's own bias, the persisting window), "
        "which bench's rotation past the L2 would erase",
    "probe-launch-overhead/launch_overhead_probe.py":
        "the launch is what it measures, by each method side by side",
    "probe-rowwise-membound/rowwise_ops.py":
        "time.time measures the parallel precompile's wall seconds and progress (host metrics of the "
        "compile), not a kernel; every kernel is timed by ctx.bench",
    "probe-nccl-collectives/nccl_collectives.py":
        "NOT under the protocol: one process per GPU, the slowest rank's mean over back-to-back collectives "
        "between two events; bench has no multi-rank mode yet",
}


def bypassing_scripts() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for path in sorted((ROOT / "probes").glob("*/*")):
        if path.suffix not in (".py", ".cu", ".cuh", ".cpp") or not path.is_file():
            continue
        lines = [i + 1 for i, line in enumerate(path.read_text(encoding="utf-8").splitlines())
                 if OTHER_TIMING.search(line) and not line.lstrip().startswith("#")]
        if lines:
            found[path.relative_to(ROOT / "probes").as_posix()] = lines
    return found


def test_every_probe_times_through_bench_or_says_why_not():
    found = bypassing_scripts()
    unlisted = {name: lines for name, lines in found.items() if name not in JUSTIFIED}
    assert unlisted == {}, f"timing outside ctx.bench; move it onto ctx.bench or justify it here: {unlisted}"
    stale = sorted(set(JUSTIFIED) - set(found))
    assert stale == [], f"listed but no longer timing outside ctx.bench: {stale}"


def test_the_scan_finds_an_event_pair_around_a_launch(tmp_path):
    """The pattern catches the ways a probe has bypassed the protocol before."""
    for line in ("start = torch.cuda.Event(enable_timing=True)", "ms = start.elapsed_time(end)",
                 "t0 = time.perf_counter()", "timing = ctx.timer(warmup=3).compare(fns)"):
        assert OTHER_TIMING.search(line), line
    assert not OTHER_TIMING.search("timing = ctx.bench(candidates, make_inputs, set_bytes)")
