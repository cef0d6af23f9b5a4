"""probe-launch-overhead: what a launch costs, eager and in a CUDA graph, and what that does to the
timing of a microsecond kernel.

The timing methods are the subject here, so they are written out in this file instead of calling
ctx.bench: (a) CUDA events around one launch, (b) events around many back-to-back launches, (c)
events around one replay of a graph that holds many launches, (d) host time (perf_counter) of the
Python call that submits a launch. Every case checks first that the work ran: the tick kernel's
counter must equal the number of launches (eager and replayed), our GEMM's output must pass the gate.

Run through the runner: kernelwiki probe run --probe probe-launch-overhead [--compile-only]
"""

from __future__ import annotations

import statistics
import time
from functools import lru_cache

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe
from kernelwiki.harness.timing import cuda_graph

from artifacts.kernels.launch_overhead import tick

ROUNDS = 200          # samples per one-launch measurement
BATCH = 1000          # launches per back-to-back block or per graph
BATCH_ROUNDS = 20     # samples of a block or a replay
ROTATE_FACTOR = 3     # input sets rotated past this many times the L2 in the honest GEMM timing
_measured: dict[str, float] = {}


@lru_cache(maxsize=1)
def _tick() -> tick.Tick:
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context exists before the library's runtime starts
    return tick.Tick(compile_mod.nvcc_library(tick.SOURCE, "sm_90a"))


def _stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def event_ms(fn, rounds: int) -> list[float]:
    """CUDA events around one call of fn, `rounds` times; each sample waits for the GPU first, so
    the GPU is idle when the start event is recorded (as in a one-launch-per-event-pair benchmark)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def host_us(fn, calls: int) -> float:
    """Host time of one call of fn, the GPU not waited for (submission only), in microseconds."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def _summary_us(samples_ms: list[float], per: int = 1) -> dict:
    ordered = sorted(s / per * 1e3 for s in samples_ms)
    pick = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
    return {"median_us": round(statistics.median(ordered), 3), "p10_us": round(pick(0.1), 3),
            "p90_us": round(pick(0.9), 3), "samples": len(ordered)}


def _counted(counter, expected: int) -> dict:
    import torch

    torch.cuda.synchronize()
    return gates.check(counter.cpu(), torch.tensor([expected], dtype=torch.int32), "exact")


def launches(case: dict, ctx: Context) -> dict:
    """The tick kernel timed one way (params.method); the counter checked against the launches made."""
    import torch

    method = case["params"]["method"]
    kernel = _tick()
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    one = lambda: kernel(counter, stream=_stream())  # noqa: E731
    metrics: dict = {}
    if method == "events-only":
        samples, per, made = event_ms(lambda: None, ROUNDS), 1, 0
    elif method == "one-per-event-pair":
        samples, per, made = event_ms(one, ROUNDS), 1, ROUNDS
        metrics["host_submit_us"] = round(host_us(one, BATCH), 3)
        made += BATCH
    elif method == "back-to-back":
        samples, per, made = event_ms(lambda: [one() for _ in range(BATCH)], BATCH_ROUNDS), BATCH, BATCH * BATCH_ROUNDS
    elif method == "back-to-back-cpp":
        samples, per = event_ms(lambda: kernel.many(counter, BATCH, stream=_stream()), BATCH_ROUNDS), BATCH
        made = BATCH * BATCH_ROUNDS
    elif method in ("graph-many", "graph-one"):
        n = BATCH if method == "graph-many" else 1
        graph = cuda_graph(lambda: [one() for _ in range(n)])   # runs fn once eagerly, then captures
        made = n
        samples, per = event_ms(graph, BATCH_ROUNDS), n
        made += n * BATCH_ROUNDS
        metrics["host_replay_us"] = round(host_us(graph, BATCH_ROUNDS), 3)
        made += n * BATCH_ROUNDS
    else:
        raise ValueError(f"method {method!r} unknown")
    correctness = _counted(counter, made)
    summary = _summary_us(samples, per)
    metrics.update(summary)
    ctx.protocol["launch_timing"] = ("explicit per case (see probe.yaml): CUDA events after a synchronize, "
                                     f"{ROUNDS} one-launch samples or {BATCH_ROUNDS} samples of {BATCH} launches; "
                                     "host time by perf_counter without waiting for the GPU")
    baseline_of = {"back-to-back": "one-per-event-pair", "back-to-back-cpp": "back-to-back",
                   "graph-many": "back-to-back-cpp"}
    base = baseline_of.get(method)
    baseline = (base, _measured[base]) if base in _measured else None
    _measured[method] = summary["median_us"]
    return {"correctness": correctness, "metrics": metrics,
            "headline": ctx.headline("time-per-launch", summary["median_us"], "us", baseline=baseline)}


def _gemm_sets(m: int, n: int, k: int, count: int, generator):
    """`count` input sets for our GEMM: (run, a, b, d) each, run bound to its own tensors."""
    import torch

    from artifacts.kernels.hopper_gemm import hopper_gemm  # CuTe DSL: compile-only needs no cutlass

    sets = []
    for _ in range(count):
        a = torch.randn(m, k, generator=generator, device="cuda").bfloat16()
        b = torch.randn(n, k, generator=generator, device="cuda").bfloat16()
        run, d = hopper_gemm.compile_gemm(a, b)
        sets.append((run, a, b, d))
    return sets


def _gemm_correct(run, a, b, d) -> dict:
    import torch

    gates.poison(d)
    run()
    torch.cuda.synchronize()
    ref = a.float() @ b.float().t()
    return gates.check(d, ref, "bf16", **gates.reference_tolerance(torch.matmul(a, b.t()), ref))


def gemm_front_end(case: dict, ctx: Context) -> dict:
    """Our GEMM's Python run() at a tiny shape: host time per call, one call per event pair, and the
    same kernel replayed from a graph of BATCH calls."""
    p = case["params"]
    (run, a, b, d), = _gemm_sets(p["m"], p["n"], p["k"], 1, ctx.generator())
    correctness = _gemm_correct(run, a, b, d)
    graph = cuda_graph(lambda: [run() for _ in range(BATCH)])
    replay = _summary_us(event_ms(graph, BATCH_ROUNDS), BATCH)
    eager = _summary_us(event_ms(run, ROUNDS))
    metrics = {"host_run_call_us": round(host_us(run, BATCH), 3), "event_pair_us": eager["median_us"],
               "graph_per_launch_us": replay["median_us"], "config": run.config.describe()}
    return {"correctness": correctness, "metrics": metrics,
            "headline": ctx.headline("time-per-launch", metrics["host_run_call_us"], "us",
                                     baseline=("graph replay per launch", replay["median_us"]))}


def gemm_timing_methods(case: dict, ctx: Context) -> dict:
    """The 512^3 GEMM (ours and cuBLAS) timed one launch per event pair on one warm input set, and as
    many launches in one graph over input sets rotated past ROTATE_FACTOR x L2."""
    import torch

    p = case["params"]
    m, n, k = p["m"], p["n"], p["k"]
    set_bytes = 2 * (m * k + n * k + m * n)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    count = max(2, -(-ROTATE_FACTOR * l2 // set_bytes))
    sets = _gemm_sets(m, n, k, count, ctx.generator())
    correctness = _gemm_correct(*sets[0])
    outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in sets]
    ours_one = sets[0][0]
    cublas_one = lambda: torch.matmul(sets[0][1], sets[0][2].t(), out=outs[0])  # noqa: E731
    ours_graph = cuda_graph(lambda: [s[0]() for s in sets])
    cublas_graph = cuda_graph(lambda: [torch.matmul(s[1], s[2].t(), out=o) for s, o in zip(sets, outs)])
    results = {"ours_event_pair": _summary_us(event_ms(ours_one, ROUNDS)),
               "cublas_event_pair": _summary_us(event_ms(cublas_one, ROUNDS)),
               "ours_graph_rotated": _summary_us(event_ms(ours_graph, BATCH_ROUNDS), count),
               "cublas_graph_rotated": _summary_us(event_ms(cublas_graph, BATCH_ROUNDS), count)}
    ctx.protocol["gemm_timing"] = (f"explicit: events around one launch on one warm set ({ROUNDS} samples) vs events "
                                   f"around one replay of a graph of {count} launches over {count} sets "
                                   f"({ROTATE_FACTOR}x L2), {BATCH_ROUNDS} samples")
    metrics = {f"{name}_us": r["median_us"] for name, r in results.items()}
    metrics["sets"] = count
    return {"correctness": correctness, "metrics": metrics, "timing": results,
            "headline": ctx.headline("time-per-launch", results["ours_event_pair"]["median_us"], "us",
                                     baseline=("graph over rotated sets", results["ours_graph_rotated"]["median_us"]))}


KINDS = {"tick": launches, "gemm-front-end": gemm_front_end, "gemm-timing": gemm_timing_methods}


def run_case(case: dict, ctx: Context) -> dict:
    return KINDS[case["params"]["kind"]](case, ctx)


def negative_control(ctx: Context) -> dict:
    """A graph captured from a launch bound to another stream (the stream chosen when the launcher was
    built, not the one current at the call): the launch escapes the capture, replays run nothing."""
    import torch

    kernel = _tick()
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    bound = torch.cuda.Stream()
    graph = cuda_graph(lambda: kernel(counter, stream=bound.cuda_stream))
    for _ in range(BATCH_ROUNDS):
        graph()
    torch.cuda.synchronize()
    return _counted(counter, 1 + BATCH_ROUNDS)   # one eager warm-up call, then one launch per replay


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.nvcc(tick.SOURCE, arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
