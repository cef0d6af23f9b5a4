"""probe-tcgen05-gemm: our minimal tcgen05 GEMM, compiled for sm_100a (and run where a B200 exists).

Compile-only here: the runner on an H200 reports "requires sm_100a; this GPU is sm_90a".
On a B200, run mode checks D against an FP32 matmul and times it against torch.matmul.
"""

from __future__ import annotations


from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.tcgen05_gemm import tcgen05_gemm


def build(m: int, n: int, k: int, ctx: Context, skip_last_k_tile: bool = False):
    """Inputs, poisoned output, and a launcher for the compiled kernel."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    gen = ctx.generator(1)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16)
    d = gates.poison(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    args = [from_dlpack(t, assumed_align=16) for t in (a, b, d)] + [stream]
    op = tcgen05_gemm.Tcgen05Gemm(cutlass.BFloat16, cutlass.BFloat16, skip_last_k_tile=skip_last_k_tile)
    compiled = cute.compile(op, *args)
    return a, b, d, lambda: compiled(*args)


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    m, n, k = (int(x) for x in case["params"]["shape"].split("x"))
    a, b, d, launch = build(m, n, k, ctx)
    launch()
    torch.cuda.synchronize()
    correctness = gates.check(d, a.float() @ b.float().T, "bf16")
    timing = ctx.timer().compare({"tcgen05_gemm": launch, "cuBLAS": lambda: torch.matmul(a, b.T)})
    tflops = {name: 2 * m * n * k / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    return {"correctness": correctness, "timing": timing,
            "headline": ctx.headline("tflops", tflops["tcgen05_gemm"], "TFLOP/s", peak_key="bf16",
                                     baseline=("cuBLAS", tflops["cuBLAS"]))}


def negative_control(ctx: Context) -> dict:
    import torch

    a, b, d, launch = build(512, 512, 512, ctx, skip_last_k_tile=True)
    launch()
    torch.cuda.synchronize()
    return gates.check(d, a.float() @ b.float().T, "bf16")


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.from_cute(tcgen05_gemm.compile_for(arch), arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
