"""Time our Hopper GEMM's configurations on many shapes, cheaply: the data choose_config is fitted to.

What it does
    A plan is a list of points (m, n, k, configuration), bf16 in and out, K-major operands. Each
    configuration is compiled once (shapes are run-time values of its kernel), in one of `workers`
    processes; a worker compiles all of its configurations, then takes the GPU lock (a file lock: one
    timing process at a time) and times each of its points as one CUDA graph of launches over input
    sets rotated past 3x the L2 (the L2 is cold for each launch, as in the harness's protocol for
    short kernels), checks each output against cuBLAS's (relative Frobenius error), and appends one
    JSON line per point. cuBLAS (torch.mm) is timed the same way, once per shape. Workers own whole
    configurations, so no kernel is compiled twice and none needs the disk cache.
The grid (plan): N x K from the layers of the model families below (the held-out set's own,
    kernelwiki.harness.shapes.LAYERS, and others) and random draws, each layer at a few M from 1 to
    8192 (values just above tile multiples among them), every candidate of config.candidates at each
    shape, within a budget of points.
Run (on the GPU machine; prints a summary, writes JSON lines):
    python -m artifacts.kernels.hopper_gemm.sweep --make-plan plan.json [--points 9000]
    python -m artifacts.kernels.hopper_gemm.sweep --plan plan.json --out points.jsonl --workers 12
    plan.json: {"points": [[m, n, k, tile_m, tile_n, cluster_m, cluster_n, split_k, swap_ab], ...],
    "families": {"m,n,k": family}} (tile_m 0 for cuBLAS). fit.py turns the lines into the compact
    table the chooser is fitted on.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

def _family(name: str, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int,
            gated: bool = True) -> list[tuple[str, str, int, int]]:
    q, kv = heads * head_dim, kv_heads * head_dim
    up = 2 * intermediate if gated else intermediate
    return [(name, "qkv", q + 2 * kv, hidden), (name, "o", hidden, q), (name, "up", up, hidden),
            (name, "down", hidden, intermediate)]


# (family, layer, N, K): published configurations of 24 model families (inputs to the sweep, not claims)
LAYERS = tuple(
    _family("Llama-3-8B", 4096, 14336, 32, 8, 128) + _family("Llama-3-70B", 8192, 28672, 64, 8, 128)
    + _family("Qwen2.5-7B", 3584, 18944, 28, 4, 128) + _family("Qwen2.5-72B", 8192, 29568, 64, 8, 128)
    + _family("Qwen3-32B", 5120, 25600, 64, 8, 128) + _family("Gemma-2-9B", 3584, 14336, 16, 8, 256)
    + _family("Gemma-2-27B", 4608, 36864, 32, 16, 128) + _family("Phi-3-mini", 3072, 8192, 32, 32, 96)
    + _family("Phi-3-medium", 5120, 17920, 40, 10, 128) + _family("Yi-34B", 7168, 20480, 56, 8, 128)
    + _family("Mixtral-8x22B", 6144, 16384, 48, 8, 128) + _family("DBRX", 6144, 10752, 48, 8, 128)
    + _family("Command-R", 8192, 22528, 64, 64, 128) + _family("Gemma-7B", 3072, 24576, 16, 16, 256)
    + _family("Llama-2-13B", 5120, 13824, 40, 40, 128) + _family("OLMo-7B", 4096, 11008, 32, 32, 128)
    + _family("InternLM2-20B", 6144, 16384, 48, 8, 128) + _family("Nemotron-4-15B", 6144, 24576, 48, 8, 128, False)
    + _family("StarCoder2-15B", 6144, 24576, 48, 4, 128, False) + _family("Falcon-40B", 8192, 32768, 128, 8, 64, False)
    + _family("Mistral-Nemo-12B", 5120, 14336, 32, 8, 128) + _family("GPT-J-6B", 4096, 16384, 16, 16, 256, False)
    + [("DeepSeek-V3", "q_a", 1536, 7168), ("DeepSeek-V3", "q_b", 24576, 1536), ("DeepSeek-V3", "kv_a", 576, 7168),
       ("DeepSeek-V3", "kv_b", 32768, 512), ("DeepSeek-V3", "o", 7168, 16384), ("DeepSeek-V3", "expert_up", 4096, 7168),
       ("DeepSeek-V3", "expert_down", 7168, 2048), ("Qwen2-57B-A14B", "expert_up", 5120, 3584),
       ("Qwen2-57B-A14B", "expert_down", 3584, 2560)])
M_GRID = (1, 4, 8, 16, 24, 32, 48, 64, 65, 80, 96, 112, 128, 129, 144, 160, 176, 192, 200, 224, 256, 257, 320, 384,
          448, 512, 513, 640, 768, 896, 1024, 1025, 1536, 2048, 3072, 4096, 6144, 8192)
"""Tokens: decode to prefill, dense where the choice is hardest (65-1024) and just above tile multiples."""
MAX_ELEMENTS = 8192 * 16384   # the largest operand of a shape, as probe-hopper-gemm's held-out set


def make_plan(seed: int, budget: int, randoms: int = 12) -> dict:
    """Shapes drawn by `seed` from LAYERS and `randoms` random layers (N, K multiples of 128, log-uniform
    in 512..32768) at M from M_GRID, each with cuBLAS and every candidate, until `budget` points."""
    import random

    from artifacts.kernels.hopper_gemm import config

    rng = random.Random(seed)
    layers = list(LAYERS) + [(f"random-{i}", "x", 128 * round(2 ** rng.uniform(9, 15) / 128),
                              128 * round(2 ** rng.uniform(9, 15) / 128)) for i in range(randoms)]
    pool = [(m, n, k, family) for family, _, n, k in layers for m in M_GRID
            if max(m * k, n * k, m * n) <= MAX_ELEMENTS]
    rng.shuffle(pool)
    points, families = [], {}
    for m, n, k, family in pool:
        if f"{m},{n},{k}" in families:
            continue
        found = config.candidates(m, n, k, allow_swap=True)
        if len(points) + len(found) + 1 > budget:
            continue
        families[f"{m},{n},{k}"] = family
        points.append([m, n, k, 0, 0, 1, 1, 1, 0])
        points += [[m, n, k, c.tile_m, c.tile_n, *c.cluster_mn, c.split_k, int(c.swap_ab)] for c in found]
    return {"seed": seed, "points": points, "families": families}


L2_BYTES = 50 * 2 ** 20
GRAPH_TARGET_US = 1500.0   # one replay of a point's graph lasts about this long
MAX_LAUNCHES = 64
REPLAYS = 5                # the median of these replays is the point's time
ERROR_LIMIT = 2e-2         # relative Frobenius error against cuBLAS's output above which a point is wrong
POINT_TIMEOUT_S = 30.0     # one point (its inputs, launches and check) longer than this has hung


def _configs(points: list[list[int]]) -> dict[tuple, list[tuple[int, int, int]]]:
    """{(tile_m, tile_n, cluster_m, cluster_n, split_k > 1, swap_ab): [(m, n, k, split_k)]}: one compiled kernel each."""
    out: dict[tuple, list] = {}
    for m, n, k, tile_m, tile_n, cm, cn, split, swap in points:
        out.setdefault((tile_m, tile_n, cm, cn, split > 1, bool(swap)), []).append((m, n, k, tile_m, tile_n, cm, cn,
                                                                                    split, bool(swap)))
    return out


def _bench_us(runs, torch) -> float:
    """Microseconds per launch: runs (one per input set) cycled in one CUDA graph, median of REPLAYS."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for run in runs:
            run()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        runs[0]()
        end.record()
        torch.cuda.synchronize()
        once = max(start.elapsed_time(end) * 1000.0, 1.0)
        launches = max(len(runs), min(MAX_LAUNCHES, int(GRAPH_TARGET_US / once)))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(launches):
                runs[i % len(runs)]()
    graph.replay()
    times = []
    for _ in range(REPLAYS):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / launches)
    return sorted(times)[REPLAYS // 2]


class _Inputs:
    """The input sets of one shape (enough copies to rotate past 3x the L2) and cuBLAS's output."""

    def __init__(self, torch, m: int, n: int, k: int):
        gen = torch.Generator(device="cuda").manual_seed(m * 1_000_003 + n * 1009 + k)
        self.copies = max(2, math.ceil(3 * L2_BYTES / (2 * (m + n) * k)))
        self.a = [torch.randn(m, k, device="cuda", generator=gen).bfloat16() for _ in range(self.copies)]
        self.b = [torch.randn(n, k, device="cuda", generator=gen).bfloat16() for _ in range(self.copies)]
        self.ref = (self.a[0] @ self.b[0].t()).float()


def worker(jobs: list[list], out_path: str, lock_path: str, wait_for: str | None = None) -> None:
    """Compile every configuration of `jobs` (lists of points of one kernel), then (once `wait_for`
    exists, at most 300 s later) holding the GPU lock, time each point and append its JSON line to out_path."""
    import torch

    from artifacts.kernels.hopper_gemm import hopper_gemm

    torch.zeros(1, device="cuda")   # a CUDA context before the kernels' cluster query
    probe_a = torch.zeros(256, 4096, device="cuda", dtype=torch.bfloat16)   # any shape compiles the kernel
    probe_b = torch.zeros(256, 4096, device="cuda", dtype=torch.bfloat16)
    compiled = []
    for points in jobs:
        _, _, _, tile_m, tile_n, cm, cn, split, swap = points[0]
        t0 = time.time()
        try:
            if tile_m:   # compiles (or loads) the kernel; the shape is a run-time value
                hopper_gemm.compile_gemm(probe_a, probe_b, tile_m=tile_m, tile_n=tile_n, cluster_mn=(cm, cn),
                                         split_k=split, swap_ab=swap)
            compiled.append((points, None))
        except Exception as err:   # noqa: BLE001  (recorded per point; the sweep goes on)
            compiled.append((points, f"{type(err).__name__}: {err}"[:200]))
        print(f"compiled {points[0][3:]} in {time.time() - t0:.1f}s", flush=True)
    waited = time.time()
    while wait_for and not Path(wait_for).exists() and time.time() - waited < 300:
        time.sleep(0.5)
    started = [math.inf]   # not timing yet: waiting for the lock is not a hang
    # a point that hangs (a kernel that never finishes) ends this worker, which frees the GPU lock
    threading.Thread(target=_watchdog, args=(started,), daemon=True).start()
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started[0] = time.time()
        with open(out_path, "a") as out:
            inputs, key = None, None
            for points, error in compiled:
                for point in sorted(points):
                    m, n, k, tile_m, tile_n, cm, cn, split, swap = point
                    record = {"point": list(point)}
                    if error:
                        record["error"] = error
                    else:
                        if key != (m, n, k):
                            inputs, key = None, None
                            torch.cuda.empty_cache()
                            inputs, key = _Inputs(torch, m, n, k), (m, n, k)
                        try:
                            record.update(_time_point(torch, hopper_gemm, inputs, point))
                        except Exception as err:   # noqa: BLE001
                            record["error"] = f"{type(err).__name__}: {err}"[:200]
                    out.write(json.dumps(record) + "\n")
                    out.flush()
                    started[0] = time.time()
            inputs = None
        fcntl.flock(lock, fcntl.LOCK_UN)


def _watchdog(started: list[float]) -> None:
    """Exit the process (os._exit: a blocked CUDA call cannot be interrupted) once the point being timed
    has run POINT_TIMEOUT_S."""
    while True:
        time.sleep(1.0)
        if time.time() - started[0] > POINT_TIMEOUT_S:
            print(f"a point ran past {POINT_TIMEOUT_S} s: this worker stops", flush=True)
            os._exit(3)


def _time_point(torch, hopper_gemm, inputs: _Inputs, point) -> dict:
    m, n, k, tile_m, tile_n, cm, cn, split, swap = point
    if not tile_m:
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(inputs.copies)]
        runs = [lambda a=a, b=b, o=o: torch.mm(a, b.t(), out=o) for a, b, o in zip(inputs.a, inputs.b, outs)]
        return {"us": round(_bench_us(runs, torch), 3)}
    pairs = [hopper_gemm.compile_gemm(a, b, tile_m=tile_m, tile_n=tile_n, cluster_mn=(cm, cn), split_k=split,
                                      swap_ab=swap) for a, b in zip(inputs.a, inputs.b)]
    pairs[0][1].fill_(float("nan"))
    us = _bench_us([run for run, _ in pairs], torch)
    error = ((pairs[0][1].float() - inputs.ref).norm() / inputs.ref.norm()).item()
    record = {"us": round(us, 3), "error": None if error <= ERROR_LIMIT else f"relative error {error:.3g}"}
    return {key: value for key, value in record.items() if value is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", help="the plan to time (JSON)")
    parser.add_argument("--make-plan", help="write a plan (make_plan) to this file and stop")
    parser.add_argument("--points", type=int, default=9000, help="the plan's budget of points")
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--wait-for", help="a file whose existence lets the workers start timing (after tests)")
    parser.add_argument("--out")
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=280.0, help="seconds before the workers are stopped")
    parser.add_argument("--worker-jobs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_plan:
        plan = make_plan(args.seed, args.points)
        Path(args.make_plan).write_text(json.dumps(plan))
        print(f"{len(plan['points'])} points on {len(plan['families'])} shapes")
        return
    if args.worker_jobs:
        worker(json.loads(Path(args.worker_jobs).read_text()), args.out, args.out + ".lock", args.wait_for)
        return
    points = json.loads(Path(args.plan).read_text())["points"]
    jobs = sorted(_configs(points).values(), key=len, reverse=True)
    shares: list[list] = [[] for _ in range(max(1, min(args.workers, len(jobs))))]
    for job in jobs:   # whole kernels to workers, the fewest points first
        min(shares, key=lambda share: sum(len(j) for j in share)).append(job)
    Path(args.out).write_text("")
    procs = []
    for i, share in enumerate(shares):
        job_file = Path(f"{args.out}.jobs{i}.json")
        job_file.write_text(json.dumps(share))
        wait = ["--wait-for", args.wait_for] if args.wait_for else []
        procs.append(subprocess.Popen([sys.executable, "-m", "artifacts.kernels.hopper_gemm.sweep", "--out", args.out,
                                       "--worker-jobs", str(job_file), *wait]))
    deadline = time.time() + args.timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
    lines = [json.loads(line) for line in Path(args.out).read_text().splitlines() if line.strip()]
    errors = sum(1 for line in lines if "error" in line)
    print(f"{len(lines)} of {len(points)} points timed, {errors} with an error")


if __name__ == "__main__":
    main()
