"""probe-hopper-gemm-naive: the one-stage teaching wgmma GEMM against cuBLAS, bf16.

Each case: normal inputs, D checked against an FP32 matmul with the bf16 gate (output poisoned
first), then our kernel and torch.matmul timed by ctx.bench (the harness's one protocol).
Compile-only mode compiles the kernel for sm_90a with fake tensors and scans PTX and SASS.

Run through the runner: kernelwiki probe run --probe probe-hopper-gemm-naive [--compile-only]
"""

from __future__ import annotations


from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.hopper_gemm.variants import naive  # our kernel, importable without a GPU


def _inputs(m: int, n: int, k: int, seed: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    b = torch.randn(n, k, generator=g, device="cuda").bfloat16()
    return a, b


def _checked(a, b, tile_n: int, **variant):
    """Compile, run once on a poisoned output, compare with the FP32 reference."""
    import torch

    compiled, args, stream, d = naive.gemm(a, b, tile_n=tile_n, **variant)
    gates.poison(d)
    compiled(*args, stream)
    torch.cuda.synchronize()
    reference = a.float() @ b.float().t()
    return compiled, args, stream, gates.check(d.float(), reference, "bf16")


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    from kernelwiki.harness.timing import cute_stream

    params = case["params"]
    m, n, k = (int(x) for x in params["shape"].split("x"))
    a, b = _inputs(m, n, k, ctx.seed)
    compiled, args, _, correctness = _checked(a, b, params["tile_n"])

    def make_set(i: int) -> tuple:
        """(a, b, our D's arguments, cuBLAS's output) of input set i; set 0 is the one checked."""
        from cutlass.cute.runtime import from_dlpack

        cublas_out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        if i == 0:
            return a, b, args, cublas_out
        x, w = _inputs(m, n, k, ctx.seed + 1000 * i)
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        return x, w, [from_dlpack(t, assumed_align=16) for t in (x, w, d)], cublas_out

    timing = ctx.bench({"naive wgmma": lambda s: compiled(*s[2], cute_stream()),
                        "cuBLAS": lambda s: torch.matmul(s[0], s[1].t(), out=s[3])},
                       make_set, 2 * (m * k + n * k + m * n), iters=20, warmup=3)
    flops = 2 * m * n * k
    ours = flops / (timing["naive wgmma"]["median_ms"] * 1e-3) / 1e12
    cublas = flops / (timing["cuBLAS"]["median_ms"] * 1e-3) / 1e12
    return {"correctness": correctness, "timing": timing,
            "baselines": [{"name": "cuBLAS", "value": round(cublas, 2)}],
            "headline": ctx.headline("tflops", ours, "TFLOP/s", peak_key="bf16", ceiling_key="bf16",
                                     baseline=("cuBLAS", cublas))}


def negative_control(ctx: Context) -> dict:
    """The last of 64 K tiles skipped at 512x512x4096: about 6x the bf16 gate (at K = 512, one of
    eight tiles, it was 18x)."""
    a, b = _inputs(512, 512, 4096, ctx.seed + 1)
    return _checked(a, b, 128, skip_last_k_tile=True)[3]


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.from_cute(naive.compile_for(arch), arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
