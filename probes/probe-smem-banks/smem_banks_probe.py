"""probe-smem-banks: what a bank conflict costs, what padding and swizzling remove, ldmatrix/stmatrix.

All times are clock64 cycles of one CTA (16 warps) on one SM, per warp-wide instruction; the
expected conflict degree (wavefronts) is computed from the addresses in
artifacts/kernels/smem_banks/patterns.py and recorded beside the measurement.

Run through the runner: kernelwiki probe run --probe probe-smem-banks [--compile-only]
"""

from __future__ import annotations

from functools import lru_cache

from artifacts.kernels.smem_banks import patterns
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

THREADS = 512
LDS_ITERS = 256        # x 8 unrolled loads per warp
MATRIX_ITERS = 128     # x 8 unrolled ldmatrix/stmatrix per warp
_measured: dict[str, float] = {}


@lru_cache(maxsize=1)
def _banks() -> patterns.Banks:
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context first; the library's runtime joins it
    return patterns.Banks(compile_mod.nvcc_library(patterns.SOURCE, "sm_90a"))


def _stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def _normal_bits(ctx: Context, count: int, salt: int):
    """Normal values' bit patterns: randn float32 viewed as int32."""
    import torch

    return torch.randn(count, generator=ctx.generator(salt), device="cuda").view(torch.int32)


def lds32(pattern: patterns.Pattern, ctx: Context) -> dict:
    import torch

    x = _normal_bits(ctx, patterns.WORDS, salt=list(patterns.PATTERNS).index(pattern.name))
    offsets = torch.tensor(pattern.offsets, dtype=torch.int32, device="cuda")
    out = gates.poison(torch.empty(32 + THREADS, dtype=torch.int32, device="cuda"))
    cycles = torch.zeros(1, dtype=torch.int64, device="cuda")
    _banks().strided(x, offsets, out, cycles, iters=LDS_ITERS, threads=THREADS, stream=_stream())
    torch.cuda.synchronize()
    correctness = gates.check(out[:32].long(), x[offsets.long()].long(), "exact")
    accesses = (THREADS // 32) * LDS_ITERS * 8
    return {"correctness": correctness, "cycles": cycles.item() / accesses, "degree": pattern.degree}


def _tile(ctx: Context, salt: int):
    """A 64 x 64 tile of bf16 values from torch.randn, as 16-bit patterns (torch int16 and Python ints)."""
    import torch

    bits = torch.randn(patterns.TILE_ROWS, 64, generator=ctx.generator(salt), device="cuda").bfloat16().view(torch.int16)
    rows = [[v & 0xFFFF for v in row] for row in bits.tolist()]
    return bits.contiguous(), rows


def matrix_check(ctx: Context, num: int, *, swizzle_store: bool, swizzle_load: bool, salt: int,
                 timed_store: bool = False, iters: int = 0) -> tuple[dict, float]:
    import torch

    bits, rows = _tile(ctx, salt)
    out = gates.poison(torch.empty(512 + THREADS, dtype=torch.int32, device="cuda"))
    cycles = torch.zeros(1, dtype=torch.int64, device="cuda")
    _banks().matrix(bits, out, cycles, num=num, iters=iters, timed_store=timed_store, swizzle_store=swizzle_store,
                    swizzle_load=swizzle_load, threads=THREADS, stream=_stream())
    torch.cuda.synchronize()
    # the reference assumes the layout the kernel should use: the load addresses follow the store layout
    fragment = patterns.ldmatrix_fragment(rows, num, swizzle_store, swizzle_store)
    trip = patterns.round_trip(rows, num, swizzle_store, swizzle_store)
    got = [v & 0xFFFFFFFF for v in out[:32 * num].tolist()] + [v & 0xFFFFFFFF for v in out[128:128 + 32 * num].tolist()]
    expected = fragment + trip
    correctness = gates.check(torch.tensor(got, dtype=torch.int64), torch.tensor(expected, dtype=torch.int64), "exact")
    instructions = (THREADS // 32) * iters * 8
    return correctness, (cycles.item() / instructions if instructions else 0.0)


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    if params["access"] == "lds32":
        result = lds32(patterns.PATTERNS[params["pattern"]], ctx)
        correctness, cycles, degree = result["correctness"], result["cycles"], result["degree"]
        baseline_id = "lds32-stride-1"
    else:
        num, swizzled = params["num"], params["layout"] == "sw128"
        correctness, cycles = matrix_check(ctx, num, swizzle_store=swizzled, swizzle_load=swizzled, salt=num,
                                           timed_store=params["access"] == "stmatrix", iters=MATRIX_ITERS)
        degree = patterns.matrix_wavefronts(num, swizzled)
        baseline_id = f"{params['access']}-x{num}-sw128"
    baseline = (baseline_id, _measured[baseline_id]) if baseline_id in _measured and baseline_id != case["id"] else None
    _measured[case["id"]] = cycles
    metrics = {"expected_wavefronts": degree, "cycles_per_wavefront": round(cycles / degree, 3), "warps": THREADS // 32}
    return {"correctness": correctness, "metrics": metrics,
            "headline": ctx.headline("cycles-per-access", cycles, "cycles", baseline=baseline)}


def negative_control(ctx: Context) -> dict:
    """Swizzle applied on store but not on load: ldmatrix x4 reads the wrong 16-byte chunks."""
    correctness, _ = matrix_check(ctx, 4, swizzle_store=True, swizzle_load=False, salt=77)
    return correctness


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.nvcc(patterns.SOURCE, arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
