"""probe-hopper-gemm: our persistent warp-specialized wgmma GEMM against cuBLAS, bf16.

Each case: normal inputs, D checked against an FP32 matmul with the bf16 gate (output poisoned
first), then our kernel and torch.matmul timed interleaved (same iteration count, L2 flushed
before every launch, SM clock read before and after). Compile-only mode compiles the kernel for
sm_90a with fake tensors and scans PTX and SASS.

Run through the runner: kernelwiki probe run --probe probe-hopper-gemm [--compile-only]
"""

from __future__ import annotations

import sys

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import REPO_ROOT, Context, Probe

sys.path.insert(0, str(REPO_ROOT / "artifacts" / "kernels" / "hopper-gemm"))
import hopper_gemm  # noqa: E402  (our kernel, importable without a GPU)

CLUSTER = (2, 1)


def _inputs(m: int, n: int, k: int, seed: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(m, k, generator=g, device="cuda").bfloat16(),
            torch.randn(n, k, generator=g, device="cuda").bfloat16())


def _checked(a, b, tile_n: int, **variant):
    """Compile, run once on a poisoned output, compare with the FP32 reference."""
    import torch

    run, d = hopper_gemm.gemm(a, b, tile_n=tile_n, cluster_mn=CLUSTER, **variant)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    return run, gates.check(d.float(), a.float() @ b.float().t(), "bf16")


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    params = case["params"]
    m, n, k = (int(x) for x in params["shape"].split("x"))
    a, b = _inputs(m, n, k, ctx.seed)
    run, correctness = _checked(a, b, params["tile_n"])
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    timing = ctx.timer(warmup=5, iters=30).compare({
        "ours": run,
        "cuBLAS": lambda: torch.matmul(a, b.t(), out=out),
    })
    flops = 2 * m * n * k
    ours = flops / (timing["ours"]["median_ms"] * 1e-3) / 1e12
    cublas = flops / (timing["cuBLAS"]["median_ms"] * 1e-3) / 1e12
    return {"correctness": correctness, "timing": timing,
            "metrics": {"stages": hopper_gemm.HopperGemm(tile_n=params["tile_n"]).stages},
            "baselines": [{"name": "cuBLAS", "value": round(cublas, 2)}],
            "headline": ctx.headline("tflops", ours, "TFLOP/s", peak_key="bf16", ceiling_key="bf16",
                                     baseline=("cuBLAS", cublas))}


def negative_control(ctx: Context) -> dict:
    a, b = _inputs(1024, 1024, 1024, ctx.seed + 1)
    return _checked(a, b, 256, skip_last_k_tile=True)[1]


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.from_cute(hopper_gemm.compile_for(arch, cluster_mn=CLUSTER), arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
