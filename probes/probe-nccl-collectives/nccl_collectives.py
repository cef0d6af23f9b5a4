"""NCCL collectives, peer copies and symmetric-memory one-shot all-reduce on every GPU of one host.

The probe process is rank 0; it starts one process per other visible GPU (ranks 1..n-1, spawned,
NCCL through torch.distributed), then for each case tells every rank what to run. Each rank fills
its input from a seed every rank knows (collectives.input_seed), runs the operation once on a
poisoned output and checks it against a float64 reference it regenerates, then times a loop of
operations with CUDA events; the case's time is the slowest rank's (nccl-tests' rule). NVLink
multicast (NVLS) stays off for NCCL and symmetric memory alike.
"""

from __future__ import annotations

import os

os.environ["NCCL_NVLS_ENABLE"] = "0"   # before torch loads NCCL; the spawned ranks inherit both
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"

import atexit  # noqa: E402
import multiprocessing  # noqa: E402
import socket  # noqa: E402
import zlib  # noqa: E402

import collectives as co  # noqa: E402
from kernelwiki.harness import gates  # noqa: E402
from kernelwiki.harness.probe import Context, Probe  # noqa: E402

GROUP: dict = {}
"""Rank 0's process group state: world size and the worker processes."""


def _init(rank: int, world: int, port: int):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    return dist


def _serve(rank: int, world: int, port: int) -> None:
    """Ranks 1..n-1: run what rank 0 broadcasts until it broadcasts None."""
    dist = _init(rank, world, port)
    while True:
        command = [None]
        dist.broadcast_object_list(command, src=0)
        if command[0] is None:
            break
        _run_op(rank, world, **command[0])
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group() -> dict:
    if GROUP:
        return GROUP
    import torch

    world = torch.cuda.device_count()
    if world < 2:
        raise RuntimeError(f"requires 2 or more GPUs; this machine has {world}")
    port = _free_port()
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_serve, args=(rank, world, port), daemon=True) for rank in range(1, world)]
    for worker in workers:
        worker.start()
    _init(0, world, port)
    GROUP.update(world=world, workers=workers)
    atexit.register(_stop)
    return GROUP


def _stop() -> None:
    import torch.distributed as dist

    dist.broadcast_object_list([None], src=0)
    for worker in GROUP["workers"]:
        worker.join(timeout=30)
    dist.destroy_process_group()


def _command(**command) -> dict:
    """Every rank runs `command`; rank 0's merged result."""
    import torch.distributed as dist

    world = _group()["world"]
    dist.broadcast_object_list([command], src=0)
    return _run_op(0, world, **command)


def _run_op(rank: int, world: int, op: str, nbytes: int, dtype: str, seed: int, salt: int,
            wrong_rank: int | None = None) -> dict:
    """One case on this rank: check once, time the loop; the merged result (every rank gets it)."""
    import torch

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    n = co.elements(op, nbytes, dtype, world)
    chunk = n // world

    def contribution(r: int) -> "torch.Tensor":
        generator = torch.Generator(device="cuda").manual_seed(co.input_seed(seed, r, salt))
        return torch.randn(chunk if op == "all_gather" else n, generator=generator, device="cuda").to(torch_dtype)

    def reference_sum() -> "torch.Tensor":
        total = torch.zeros(n, dtype=torch.float64, device="cuda")
        for r in range(world):
            total += contribution(r).double()
        return total

    mine = contribution(rank)
    if wrong_rank == rank:   # the negative control: this rank hands in its bf16 staging copy
        mine = mine.to(torch.bfloat16).to(torch_dtype)
    candidates, check = _candidates(op, rank, world, n, chunk, mine, torch_dtype)
    results = {}
    for name, (launch, output, reset) in candidates.items():
        if output is not None:
            gates.poison(output)
        if reset is not None:
            reset()
        launch()
        torch.cuda.synchronize()
        if op in ("all_reduce", "one_shot_all_reduce"):
            correctness = gates.check(output, reference_sum(), dtype)
        elif op == "reduce_scatter":
            correctness = gates.check(output, reference_sum()[rank * chunk:(rank + 1) * chunk], dtype)
        elif op == "all_gather":
            correctness = gates.check(output, torch.cat([contribution(r) for r in range(world)]), "exact")
        elif op == "all_to_all":
            expected = torch.cat([contribution(r)[rank * chunk:(rank + 1) * chunk] for r in range(world)])
            correctness = gates.check(output, expected, "exact")
        else:  # p2p_copy: rank 0 copies to GPU 1; the others only take part in the timing's reduction
            correctness = check()
        warmup, iters = co.iterations(nbytes)
        results[name] = {"ms": _timed(launch, warmup, iters), "correctness": _merged(correctness),
                         "iters": iters, "warmup": warmup}
    buffer_bytes = n * torch.tensor([], dtype=torch_dtype).element_size()
    return {"elements": n, "buffer_bytes": buffer_bytes, "world": world, "candidates": results}


def _candidates(op: str, rank: int, world: int, n: int, chunk: int, mine, torch_dtype):
    """{name: (launch, output, reset)} for the op, and the check a p2p copy uses. An in-place
    all-reduce is `reset` to this rank's input before the checked launch only: the timed loop runs
    the bare operation, as nccl-tests does (the values it then reduces do not change its speed)."""
    import torch
    import torch.distributed as dist

    if op == "all_reduce":
        buffer = torch.empty_like(mine)
        return {"nccl": (lambda: dist.all_reduce(buffer), buffer, lambda: buffer.copy_(mine))}, None
    if op == "all_gather":
        out = torch.empty(n, dtype=torch_dtype, device="cuda")
        return {"nccl": (lambda: dist.all_gather_into_tensor(out, mine), out, None)}, None
    if op == "reduce_scatter":
        out = torch.empty(chunk, dtype=torch_dtype, device="cuda")
        return {"nccl": (lambda: dist.reduce_scatter_tensor(out, mine), out, None)}, None
    if op == "all_to_all":
        out = torch.empty(n, dtype=torch_dtype, device="cuda")
        return {"nccl": (lambda: dist.all_to_all_single(out, mine), out, None)}, None
    if op == "one_shot_all_reduce":
        import torch.distributed._symmetric_memory as symm_mem

        group_name = dist.group.WORLD.group_name
        if hasattr(symm_mem, "enable_symm_mem_for_group"):   # needed before torch 2.8, harmless after
            symm_mem.enable_symm_mem_for_group(group_name)
        symmetric = symm_mem.empty(n, dtype=torch_dtype, device="cuda")
        symm_mem.rendezvous(symmetric, group_name)
        symmetric.copy_(mine)
        out = torch.empty_like(mine)
        nccl_buffer = torch.empty_like(mine)
        one_shot = (lambda: torch.ops.symm_mem.one_shot_all_reduce_out(symmetric, "sum", group_name, out), out, None)
        nccl = (lambda: dist.all_reduce(nccl_buffer), nccl_buffer, lambda: nccl_buffer.copy_(mine))
        return {"symm_mem_one_shot": one_shot, "nccl": nccl}, None
    if op == "p2p_copy":
        if rank != 0:
            return {"copy": (lambda: None, None, None)}, lambda: {"passed": True, "note": "rank 0 copies; this rank waits"}
        destination = torch.empty(n, dtype=torch_dtype, device="cuda:1")
        gates.poison(destination)

        def check():
            return gates.check(destination.to("cuda:0"), mine, "exact")
        return {"copy": (lambda: destination.copy_(mine, non_blocking=True), None, None)}, check
    raise ValueError(f"unknown op {op!r}")


def _timed(launch, warmup: int, iters: int) -> float:
    """Milliseconds per operation: the slowest rank's mean over `iters` back-to-back launches."""
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        launch()
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        launch()
    end.record()
    torch.cuda.synchronize()   # a peer copy's destination device too
    slowest = torch.tensor([start.elapsed_time(end) / iters], device="cuda")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.item())


def _merged(correctness: dict) -> dict:
    """Every rank's check as one: passed only if all passed; the worst errors and which rank."""
    import torch.distributed as dist

    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, correctness)
    worst = max(range(len(every)), key=lambda r: (not every[r].get("passed"), every[r].get("rel_err") or 0.0))
    merged = dict(every[worst], passed=all(c.get("passed") for c in every), worst_rank=worst)
    return merged


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    op, nbytes, dtype = params["op"], int(params["bytes"]), params["dtype"]
    result = _command(op=op, nbytes=nbytes, dtype=dtype, seed=ctx.seed, salt=zlib.crc32(case["id"].encode()))
    world, buffer_bytes = result["world"], result["buffer_bytes"]
    ctx.protocol.update(timing="nccl-tests: CUDA events around back-to-back operations, slowest rank's mean",
                        nccl_nvls_enable="0", torch_symm_mem_disable_multicast="1", ranks=world)
    metrics, correctness = {}, {"passed": True}
    for name, measured in result["candidates"].items():
        band = co.bandwidths(op, buffer_bytes, measured["ms"] / 1e3, world)
        metrics[name] = {"time_us": round(measured["ms"] * 1e3, 3), "algbw_gb_s": round(band["algbw_gb_s"], 3),
                         "busbw_gb_s": round(band["busbw_gb_s"], 3), "iters": measured["iters"]}
        if not measured["correctness"].get("passed"):
            correctness = dict(measured["correctness"], candidate=name)
        elif correctness.get("passed") and "rel_err" not in correctness:
            correctness = dict(measured["correctness"])
    main = "symm_mem_one_shot" if op == "one_shot_all_reduce" else next(iter(metrics))
    baseline = ("NCCL all_reduce", metrics["nccl"]["busbw_gb_s"]) if op == "one_shot_all_reduce" else None
    metric = "copy-gb-s" if op == "p2p_copy" else "busbw-gb-s"
    return {"correctness": correctness, "metrics": {"elements": result["elements"], "buffer_bytes": buffer_bytes,
                                                    "ranks": world, **metrics},
            "headline": ctx.headline(metric, metrics[main]["busbw_gb_s"], "GB/s", baseline=baseline)}


def negative_control(ctx: Context) -> dict:
    """All-reduce of 1 MiB fp32 in which the last rank hands in its bf16 staging copy."""
    world = _group()["world"]
    result = _command(op="all_reduce", nbytes=1 << 20, dtype="fp32", seed=ctx.seed, salt=4242, wrong_rank=world - 1)
    return result["candidates"]["nccl"]["correctness"]


if __name__ == "__main__":   # the spawned ranks import this file; only the probe process runs the probe
    Probe(__file__).main(run_case=run_case, negative_control=negative_control)
