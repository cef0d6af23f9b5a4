"""probe-dsmem: distributed shared memory against local shared memory, per cluster size.

Per case (cluster size): the ring check (exact), the pointer-chase latency of a peer load and a
local load, and the 16-byte stream bandwidth of peer and local loads and stores, all in clock64
cycles, so the numbers do not depend on the clock the GPU runs at.

Run through the runner: kernelwiki probe run --probe probe-dsmem [--compile-only]
"""

from __future__ import annotations

import statistics
from functools import lru_cache

from artifacts.kernels.dsmem import cluster as dsmem
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

CHASE_ITERS = 4096
BW_ITERS = 256
NEGATIVE_DELAY_CYCLES = 200_000


@lru_cache(maxsize=1)
def _cluster() -> dsmem.Cluster:
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context first; the library's runtime joins it
    return dsmem.Cluster(compile_mod.nvcc_library(dsmem.SOURCE, "sm_90a"))


def _stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def _words(ctx: Context, count: int, salt: int):
    """Normal-derived 32-bit words: the bits of torch.randn float32 values."""
    import torch

    return torch.randn(count, generator=ctx.generator(salt), device="cuda").view(torch.int32)


def ring_check(ctx: Context, size: int, clusters: int, salt: int, *, skip_barrier: bool = False,
               delay: int = 0) -> dict:
    import torch

    x = _words(ctx, clusters * size * dsmem.CHECK_WORDS, salt)
    out = gates.poison(torch.empty_like(x))
    cycles = torch.zeros(clusters * size, dtype=torch.int64, device="cuda")
    _cluster().launch(x, out, cycles, mode="check", size=size, clusters=clusters, words=dsmem.CHECK_WORDS,
                      delay=delay, skip_barrier=skip_barrier, stream=_stream())
    torch.cuda.synchronize()
    ref = dsmem.ring_reference(x, size)
    result = gates.check(out.long(), ref.long(), "exact")
    result["mismatched_words"] = int((out != ref).sum())
    return result


def chase(size: int, mode: str) -> tuple[float, bool]:
    """(cycles per dependent load, whether the chain ended where it must)."""
    import torch

    out = torch.full((size,), -1, dtype=torch.int32, device="cuda")
    cycles = torch.zeros(size, dtype=torch.int64, device="cuda")
    _cluster().launch(out, out, cycles, mode=mode, size=size, clusters=1, words=dsmem.CHASE_WORDS,
                      iters=CHASE_ITERS, stream=_stream())
    torch.cuda.synchronize()
    return cycles[0].item() / CHASE_ITERS, out[0].item() == dsmem.chase_end(CHASE_ITERS)


def stream_bandwidth(size: int, clusters: int, mode: str) -> dict:
    """Bytes per clock per SM (median CTA) and the spread over CTAs."""
    import torch

    ctas = clusters * size
    sink = torch.empty(ctas * dsmem.BLOCK, dtype=torch.int32, device="cuda")
    cycles = torch.zeros(ctas, dtype=torch.int64, device="cuda")
    _cluster().launch(sink, sink, cycles, mode=mode, size=size, clusters=clusters, words=dsmem.BW_WORDS,
                      iters=BW_ITERS, stream=_stream())
    torch.cuda.synchronize()
    per_cta = cycles.tolist()
    return {"bytes_per_clk_per_sm": round(dsmem.bandwidth_bytes(BW_ITERS) / statistics.median(per_cta), 2),
            "cta_cycles_spread": round(max(per_cta) / min(per_cta), 3)}


def run_case(case: dict, ctx: Context) -> dict:
    size = case["params"]["cluster_size"]
    clusters, refusal = _cluster().max_active_clusters(size)
    if clusters < 1:
        raise RuntimeError(f"clusters of {size} CTAs with {dsmem.SMEM_BYTES} bytes of shared memory each cannot be "
                           f"scheduled on this GPU (max active clusters 0{': ' + refusal if refusal else ''})")
    correctness = ring_check(ctx, size, clusters, salt=size)
    local, local_ok = chase(size, "lat-local")
    peer, peer_ok = chase(size, "lat-peer")
    correctness["chase_end_matches"] = local_ok and peer_ok
    correctness["passed"] = correctness["passed"] and local_ok and peer_ok
    bandwidth = {mode: stream_bandwidth(size, clusters, mode)
                 for mode in ("bw-local-load", "bw-peer-load", "bw-local-store", "bw-peer-store")}
    metrics = {"max_active_clusters": clusters, "ctas": clusters * size, "local_load_latency_cycles": round(local, 1),
               "peer_load_latency_cycles": round(peer, 1),
               **{f"{mode.removeprefix('bw-').replace('-', '_')}_bytes_per_clk_per_sm": b["bytes_per_clk_per_sm"]
                  for mode, b in bandwidth.items()},
               **{f"cta_cycles_spread_{mode}": b["cta_cycles_spread"] for mode, b in bandwidth.items()}}   # metrics are scalars
    return {"correctness": correctness, "metrics": metrics,
            "headline": ctx.headline("dsmem-load-latency", peer, "cycles", baseline=("ld.shared (local)", local))}


def negative_control(ctx: Context) -> dict:
    """No cluster barrier between the writes and the peer reads; rank 1 spins before it writes."""
    return ring_check(ctx, 2, 1, salt=99, skip_barrier=True, delay=NEGATIVE_DELAY_CYCLES)


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.nvcc(dsmem.SOURCE, arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
