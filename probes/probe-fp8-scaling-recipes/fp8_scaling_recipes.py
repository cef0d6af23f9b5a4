"""probe-fp8-scaling-recipes: the GEMM output error of each FP8 scaling recipe on real-shaped data.

Each case: A (2048 x 4096, activations) from one distribution, B (2048 x 4096, weights) normal; both
quantized by one recipe with our NumPy reference quantizers (artifacts/kernels/quant_reference);
the scaled GEMM is then computed on the GPU in float64 the way a kernel applies the scales (per
K-slice partial products scaled and summed; per-tensor/per-row scales in the epilogue), so the
only error left is the quantization's. Number: ||D - D_ref|| / ||D_ref|| against the float64
product of the unquantized inputs, with the bf16 GEMM (bf16 inputs, fp32 accumulation) on the same
data as the baseline.

Gate: every quantized element of both operands is the format's nearest value to x / scale - its
error at most half the format's spacing at that value (plus what saturation at the largest value
clips) - the bound round-to-nearest guarantees, so the gate sits exactly at the quantizer's own
error. Negative control: the same recipe (per-row E4M3, outlier channels) rounding toward zero, a
real quantizer bug that moves the numbers the probe reports; its worst element reaches twice the
bound. The scaled GEMM must also equal dequant(A) @ dequant(B).T: that identity holds to float64
rounding (about 1e-15) and any misplaced scale breaks it by 1e-3 or more, so no tolerance between
the two has a realistic bug within reach; it is asserted (the case fails above 1e-9) and its
residue recorded, not gated.
"""

from __future__ import annotations

import numpy as np

from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.quant_reference import distributions, fp8_recipes
from artifacts.kernels.quant_reference import minifloat as mf

M = N = 2048
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


def recipe_gemm(qa, qb):
    """(scaled GEMM as a kernel applies the scales, dequant(A) @ dequant(B).T), both float64 on the GPU."""
    import torch

    to_gpu = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()  # noqa: E731
    out = fp8_recipes.scaled_gemm(qa.moved(to_gpu), qb.moved(to_gpu), lambda x, y: x @ y)
    return out, to_gpu(qa.dequantize()) @ to_gpu(qb.dequantize()).T


EMULATION_LIMIT = 1e-9
"""The scaled GEMM and the dequantized product agree to float64 rounding (~1e-15); above this, the
emulation applies a scale on the wrong axis or slice and the case fails."""


def element_format(recipe: str):
    return mf.E5M2 if recipe == "per-tensor-e5m2" else mf.E4M3


def rounding_gate(x, operand, fmt, elements=None) -> dict:
    """Each element's error |q - x / scale| over half the format's spacing at x / scale (plus what
    saturation clips): at most 1 for round-to-nearest. `elements` replaces the operand's (the
    control's). The worst ratio is the gate's `rel_err` against a tolerance of 1."""
    x = np.asarray(x, dtype=np.float64)
    rows, k = x.shape
    scales = np.repeat(np.repeat(np.asarray(operand.scales), operand.group[0], axis=0), operand.group[1], axis=1)[:rows, :k]
    scaled = x / scales
    q = np.asarray(operand.elements if elements is None else elements)
    magnitude = np.minimum(np.abs(scaled), fmt.max_value)
    _, exp = np.frexp(magnitude)
    spacing = np.exp2((np.maximum(exp.astype(np.int64) - 1, fmt.min_exp) - fmt.man_bits).astype(np.float64))
    bound = spacing / 2 + np.maximum(np.abs(scaled) - fmt.max_value, 0.0)
    worst = float((np.abs(q - scaled) / bound).max())
    return {"passed": bool(worst <= 1.0 + 1e-9), "rel_err": worst, "tolerance": 1.0,
            "tolerance_basis": "half the format's spacing at each scaled value (round to nearest)", "all_written": True}


def truncated(x, operand, fmt):
    """The control's elements: x / scale rounded toward zero instead of to nearest."""
    x = np.asarray(x, dtype=np.float64)
    rows, k = x.shape
    scales = np.repeat(np.repeat(np.asarray(operand.scales), operand.group[0], axis=0), operand.group[1], axis=1)[:rows, :k]
    scaled = x / scales
    magnitude = np.minimum(np.abs(scaled), fmt.max_value)
    _, exp = np.frexp(magnitude)
    spacing = np.exp2((np.maximum(exp.astype(np.int64) - 1, fmt.min_exp) - fmt.man_bits).astype(np.float64))
    return np.copysign(np.minimum(np.floor(magnitude / spacing) * spacing, fmt.max_value), scaled)


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    a, b, exact, bf16 = inputs(params["data"], ctx)
    ctx.protocol["data"] = (f"A {M} x {K} from numpy default_rng(seed + 101) per distribution, B {N} x {K} normal; "
                            "scaled GEMMs emulated in float64 on the GPU")
    recipe, fmt = params["recipe"], element_format(params["recipe"])
    qa, qb = fp8_recipes.quantize_operand(a, recipe, "a"), fp8_recipes.quantize_operand(b, recipe, "b")
    out, dequantized = recipe_gemm(qa, qb)
    emulation = gates.relative_error(out, dequantized)
    if not emulation <= EMULATION_LIMIT:
        raise RuntimeError(f"the scaled GEMM differs from dequant(A) @ dequant(B).T by {emulation:g} (relative): "
                           "a scale applied on the wrong axis or slice")
    error, bf16_error = gates.relative_error(out, exact), gates.relative_error(bf16, exact)
    correctness = gates.combine({"a": rounding_gate(a, qa, fmt), "b": rounding_gate(b, qb, fmt)})
    return {"correctness": correctness,
            "metrics": {"rel_err": error, "bf16_rel_err": bf16_error, "rel_err_vs_bf16_output": gates.relative_error(out, bf16),
                        "scaled_vs_dequantized_rel": emulation},
            "headline": ctx.headline("gemm-rel-error", error, "relative",
                                     baseline=(f"bf16 GEMM (fp32 accumulation) on {params['data']} data", bf16_error))}


def negative_control(ctx: Context) -> dict:
    """Per-row E4M3 on outlier channels, rounding toward zero: both operands' gates must fail."""
    a, b, _, _ = inputs("outlier-channels", ctx)
    fmt = mf.E4M3
    qa, qb = fp8_recipes.quantize_operand(a, "per-row", "a"), fp8_recipes.quantize_operand(b, "per-row", "b")
    return gates.combine({"a": rounding_gate(a, qa, fmt, truncated(a, qa, fmt)),
                          "b": rounding_gate(b, qb, fmt, truncated(b, qb, fmt))})


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control)
