"""probe-fp8-scaling-recipes: the GEMM output error of each FP8 scaling recipe on real-shaped data.

Each case: A (2048 x 4096, activations) from one distribution, B (2048 x 4096, weights) normal; both
quantized by one recipe with our NumPy reference quantizers (artifacts/kernels/quant_reference);
the scaled GEMM is then computed on the GPU in float64 the way a kernel applies the scales (per
K-slice partial products scaled and summed; per-tensor/per-row scales in the epilogue), so the
only error left is the quantization's. Gate: that result equals dequant(A) @ dequant(B).T in float64
(the scales are applied on the right axes and slices). Number: ||D - D_ref|| / ||D_ref|| against the
float64 product of the unquantized inputs, with the bf16 GEMM (bf16 inputs, fp32 accumulation) on
the same data as the baseline. Negative control: the per-row recipe with A's scales applied along
the output's columns, which a square problem runs without complaint; it must fail the gate.
"""

from __future__ import annotations

import numpy as np

from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.quant_reference import distributions, fp8_recipes

M = N = 2048   # square, so the negative control's misplaced scales broadcast without an error
K = 4096
_INPUTS: dict[str, tuple] = {}


def inputs(kind: str, ctx: Context):
    """(A, B) of one distribution as NumPy float64, and the float64 and bf16 products on the GPU."""
    import torch

    if kind not in _INPUTS:
        rng = np.random.default_rng(ctx.seed + 101)
        a, b = distributions.sample(kind, (M, K), rng), rng.standard_normal((N, K))
        a_t, b_t = (torch.from_numpy(x).cuda() for x in (a, b))
        torch.backends.cuda.matmul.allow_tf32 = False
        bf16 = a_t.bfloat16().float() @ b_t.bfloat16().float().T
        _INPUTS.clear()  # one distribution at a time: cases are ordered by distribution
        _INPUTS[kind] = (a, b, a_t @ b_t.T, bf16.double())
    return _INPUTS[kind]


def recipe_gemm(a, b, recipe: str, misapply_a_scales: bool = False):
    """(scaled GEMM as a kernel applies the scales, dequant(A) @ dequant(B).T), both float64 on the GPU."""
    import torch

    to_gpu = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()  # noqa: E731
    qa, qb = fp8_recipes.quantize_operand(a, recipe, "a"), fp8_recipes.quantize_operand(b, recipe, "b")
    out = fp8_recipes.scaled_gemm(qa.moved(to_gpu), qb.moved(to_gpu), lambda x, y: x @ y, misapply_a_scales)
    return out, to_gpu(qa.dequantize()) @ to_gpu(qb.dequantize()).T


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    a, b, exact, bf16 = inputs(params["data"], ctx)
    ctx.protocol["data"] = (f"A {M} x {K} from numpy default_rng(seed + 101) per distribution, B {N} x {K} normal; "
                            "scaled GEMMs emulated in float64 on the GPU")
    out, dequantized = recipe_gemm(a, b, params["recipe"])
    error, bf16_error = gates.relative_error(out, exact), gates.relative_error(bf16, exact)
    return {"correctness": gates.check(out, dequantized, "fp64"),
            "metrics": {"rel_err": error, "bf16_rel_err": bf16_error, "rel_err_vs_bf16_output": gates.relative_error(out, bf16)},
            "headline": ctx.headline("gemm-rel-error", error, "relative",
                                     baseline=(f"bf16 GEMM (fp32 accumulation) on {params['data']} data", bf16_error))}


def negative_control(ctx: Context) -> dict:
    a, b, _, _ = inputs("outlier-channels", ctx)
    out, dequantized = recipe_gemm(a, b, "per-row", misapply_a_scales=True)
    return gates.check(out, dequantized, "fp64")


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control)
