"""probe-tcgen05-gemm: our minimal tcgen05 GEMM, compiled for sm_100a (and run where a B200 exists).

Compile-only here: the runner on an H200 reports "requires sm_100a; this GPU is sm_90a".
On a B200, run mode checks D against an FP32 matmul and times it against torch.matmul (ctx.bench).
"""

from __future__ import annotations


from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.tcgen05_gemm import tcgen05_gemm


def build(m: int, n: int, k: int, ctx: Context, skip_last_k_tile: bool = False):
    """make_set(i): input set i, (a, b, poisoned d, launch on the current stream, cuBLAS's output);
    the kernel is compiled for the first set and reused for the others (same shapes)."""
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    from kernelwiki.harness.timing import cute_stream

    op = tcgen05_gemm.Tcgen05Gemm(cutlass.BFloat16, cutlass.BFloat16, skip_last_k_tile=skip_last_k_tile)
    compiled = None

    def make_set(i: int) -> tuple:
        nonlocal compiled
        gen = ctx.generator(1 + 1000 * i)
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16)
        d = gates.poison(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
        args = [from_dlpack(t, assumed_align=16) for t in (a, b, d)]
        if compiled is None:
            compiled = cute.compile(op, *args, cute_stream())
        return a, b, d, lambda: compiled(*args, cute_stream()), torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return make_set


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    m, n, k = (int(x) for x in case["params"]["shape"].split("x"))
    make_set = build(m, n, k, ctx)
    checked = make_set(0)
    a, b, d, launch, _ = checked
    launch()
    torch.cuda.synchronize()
    correctness = gates.check(d, a.float() @ b.float().T, "bf16")
    timing = ctx.bench({"tcgen05_gemm": lambda s: s[3](), "cuBLAS": lambda s: torch.matmul(s[0], s[1].T, out=s[4])},
                       lambda i: checked if i == 0 else make_set(i), 2 * (m * k + n * k + m * n))
    tflops = {name: 2 * m * n * k / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    return {"correctness": correctness, "timing": timing,
            "headline": ctx.headline("tflops", tflops["tcgen05_gemm"], "TFLOP/s", peak_key="bf16",
                                     baseline=("cuBLAS", tflops["cuBLAS"]))}


def negative_control(ctx: Context) -> dict:
    import torch

    a, b, d, launch, _ = build(512, 512, 512, ctx, skip_last_k_tile=True)(0)
    launch()
    torch.cuda.synchronize()
    return gates.check(d, a.float() @ b.float().T, "bf16")


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.from_cute(tcgen05_gemm.compile_for(arch), arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
