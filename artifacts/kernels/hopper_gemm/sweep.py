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
Run (on the GPU machine; prints a summary, writes JSON lines):
    python -m artifacts.kernels.hopper_gemm.sweep --plan plan.json --out points.jsonl --workers 12
    plan.json: {"points": [[m, n, k, tile_m, tile_n, cluster_m, cluster_n, split_k, swap_ab], ...]}
    (tile_m 0 for cuBLAS). fit.py turns the lines into the compact table the chooser is fitted on.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import subprocess
import sys
import time
from pathlib import Path

L2_BYTES = 50 * 2 ** 20
GRAPH_TARGET_US = 1500.0   # one replay of a point's graph lasts about this long
MAX_LAUNCHES = 64
REPLAYS = 5                # the median of these replays is the point's time
ERROR_LIMIT = 2e-2         # relative Frobenius error against cuBLAS's output above which a point is wrong


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


def worker(jobs: list[list], out_path: str, lock_path: str) -> None:
    """Compile every configuration of `jobs` (lists of points of one kernel), then, holding the GPU
    lock, time each point and append its JSON line to out_path."""
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
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
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
            inputs = None
        fcntl.flock(lock, fcntl.LOCK_UN)


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
    parser.add_argument("--plan", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=280.0, help="seconds before the workers are stopped")
    parser.add_argument("--worker-jobs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_jobs:
        worker(json.loads(Path(args.worker_jobs).read_text()), args.out, args.out + ".lock")
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
        procs.append(subprocess.Popen([sys.executable, "-m", "artifacts.kernels.hopper_gemm.sweep", "--plan", args.plan,
                                       "--out", args.out, "--worker-jobs", str(job_file)]))
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
