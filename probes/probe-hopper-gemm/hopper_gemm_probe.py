"""probe-hopper-gemm: our persistent warp-specialized wgmma GEMM against cuBLAS, bf16 and fp8.

Each case: normal inputs (fp8: quantized per tensor, scale = amax / 448), D checked against an
FP32 matmul of the same (dequantized) operands with the gate of the input type (output poisoned
first), then our kernel and cuBLAS timed interleaved (same iteration count, L2 flushed before
every launch, SM clock read before and after). Compile-only mode compiles the bf16 and fp8
kernels for sm_90a with fake tensors and scans PTX and SASS.

Run through the runner: kernelwiki probe run --probe probe-hopper-gemm [--compile-only]
"""

from __future__ import annotations

import re
import sys

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import REPO_ROOT, Context, Probe

sys.path.insert(0, str(REPO_ROOT / "artifacts" / "kernels" / "hopper-gemm"))
import hopper_gemm  # noqa: E402  (our kernel, importable without a GPU)

CLUSTER = (2, 1)
AB_DTYPES = {"bf16": hopper_gemm.cutlass.BFloat16, "fp16": hopper_gemm.cutlass.Float16,
             "tf32": hopper_gemm.cutlass.TFloat32, "e4m3": hopper_gemm.cutlass.Float8E4M3FN}
_D_DTYPE = {"fp16": hopper_gemm.cutlass.Float16, "tf32": hopper_gemm.cutlass.Float32}
TF32_MASK = -8192   # clears the 13 low mantissa bits: fp32 values exactly representable in tf32
E4M3_MAX = 448.0


def _inputs(dtype: str, m: int, n: int, k: int, seed: int):
    """(a, b, scale_a, scale_b, reference) for dtype bf16, fp16, tf32 or e4m3: a (M, K), b (N, K);
    reference = FP32 product of what the kernel multiplies, times the scales."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a, b = torch.randn(m, k, generator=g, device="cuda"), torch.randn(n, k, generator=g, device="cuda")
    if dtype == "tf32":  # fp32 tensors holding tf32 values, so our kernel and cuBLAS TF32 see the same inputs
        a, b = ((x.view(torch.int32) & TF32_MASK).view(torch.float32) for x in (a, b))
        return a, b, 1.0, 1.0, (a.double() @ b.double().t()).float()
    if dtype in ("bf16", "fp16"):
        a, b = (a.bfloat16(), b.bfloat16()) if dtype == "bf16" else (a.half(), b.half())
        return a, b, 1.0, 1.0, a.float() @ b.float().t()
    scale_a, scale_b = (float(x.abs().max()) / E4M3_MAX for x in (a, b))
    a8, b8 = (a / scale_a).to(torch.float8_e4m3fn), (b / scale_b).to(torch.float8_e4m3fn)
    return a8, b8, scale_a, scale_b, (a8.float() @ b8.float().t()) * (scale_a * scale_b)


def _checked(dtype: str, a, b, scale_a: float, scale_b: float, reference, tile_n: int, **variant):
    """Compile, run once on a poisoned output, compare with the reference."""
    import torch

    run, d = hopper_gemm.compile_gemm(a, b, alpha=scale_a * scale_b, tile_n=tile_n, cluster_mn=CLUSTER, **variant)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    return run, d, gates.check(d.float(), reference, dtype)


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    params = case["params"]
    dtype = params["dtype"]
    m, n, k = (int(x) for x in params["shape"].split("x"))
    a, b, scale_a, scale_b, reference = _inputs(dtype, m, n, k, ctx.seed)
    # MN-major operands: the same values stored transposed (M or N contiguous)
    if params.get("a_major") == "mn":
        a = a.t().contiguous().t()
    if params.get("b_major") == "mn":
        b = b.t().contiguous().t()
    run, d, correctness = _checked(dtype, a, b, scale_a, scale_b, reference, params["tile_n"])
    del reference
    # the one-call API (gemm) reuses the same compiled kernel and must give the same bits
    same = torch.equal(hopper_gemm.gemm(a, b, alpha=scale_a * scale_b, tile_n=params["tile_n"], cluster_mn=CLUSTER), d)
    correctness.update(gemm_api_matches=same, passed=correctness["passed"] and same)
    out = torch.empty_like(d)
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"   # cuBLAS TF32 for the tf32 cases only
    if dtype != "e4m3":
        candidates = {"ours": run, "cuBLAS": lambda: torch.matmul(a, b.t(), out=out)}
    else:
        sa, sb = (torch.tensor(x, device="cuda") for x in (scale_a, scale_b))
        candidates = {
            "ours": run,
            "cuBLAS fast-accum": lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                                          use_fast_accum=True),
            "cuBLAS": lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                               use_fast_accum=False),
        }
    try:
        timing = ctx.timer(warmup=5, iters=30).compare(candidates)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    flops = 2 * m * n * k
    tflops = {name: flops / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    baseline = "cuBLAS fast-accum" if dtype == "e4m3" else "cuBLAS"
    return {"correctness": correctness, "timing": timing,
            "metrics": {"stages": hopper_gemm.HopperGemm(AB_DTYPES[dtype], _D_DTYPE.get(dtype, AB_DTYPES["bf16"]),
                                                         tile_n=params["tile_n"]).stages},
            "baselines": [{"name": name, "value": round(v, 2)} for name, v in tflops.items() if name != "ours"],
            "headline": ctx.headline("tflops", tflops["ours"], "TFLOP/s", peak_key=dtype,
                                     ceiling_key="bf16" if dtype == "bf16" else None,
                                     baseline=(baseline, tflops[baseline]))}


def negative_control(ctx: Context) -> dict:
    inputs = _inputs("bf16", 1024, 1024, 1024, ctx.seed + 1)
    return _checked("bf16", *inputs, 256, skip_last_k_tile=True)[2]


def compile_kernel(arch: str) -> compile_mod.Emitted:
    emitted = compile_mod.from_cute(hopper_gemm.compile_for(arch, cluster_mn=CLUSTER), arch)
    transposed = compile_mod.from_cute(hopper_gemm.compile_for(arch, cluster_mn=CLUSTER, a_major="mn", b_major="mn"),
                                       arch)
    if re.search(r"wgmma\.mma_async[^;]*p, 1,\s*1, 1, 1;", transposed.ptx):
        emitted.facts.append("mn-major-operands:imm-trans-a=1,imm-trans-b=1")
    fp8 = compile_mod.from_cute(hopper_gemm.compile_for(arch, ab_dtype=AB_DTYPES["e4m3"], cluster_mn=CLUSTER), arch)
    tf32 = compile_mod.from_cute(hopper_gemm.compile_for(arch, ab_dtype=AB_DTYPES["tf32"],
                                                         d_dtype=_D_DTYPE["tf32"], cluster_mn=CLUSTER), arch)
    for extra in (fp8, tf32):
        emitted.ptx += extra.ptx
        if emitted.sass is not None and extra.sass is not None:
            emitted.sass += extra.sass
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
