"""probe-block-scaled-formats: MXFP8, MXFP4 and NVFP4 - quantization measured, tcgen05 MMAs compiled.

Run (any GPU machine; the math is NumPy on the host): each case quantizes a 2048 x 4096 tensor of
one distribution to one format, writes the bytes a block-scaled tcgen05 kernel would read (element
codes, FP4 packed in pairs; scale codes in the 128 x 4 atom order) and reads them back. The gate: the
tensor rebuilt from those bytes equals the quantizer's own dequantized tensor bit for bit (codes,
packing and scale layout agree). The number: the round-trip error ||dequant(x) - x|| / ||x||, with
MXFP8 on the same distribution as the baseline; beside it the same error over the body of the
distribution (|x| <= 4), which the norm of the large values hides. The negative control reads the scale buffer as a
plain row-major matrix, the common layout bug; it must fail the gate.

Compile-only: the MXFP8 (kind::mxf8f6f4) and MXFP4 (UE8M0 scales, 32-value blocks) variants of our
block-scaled GEMM for sm_100a (NVFP4's is probe-nvfp4-mma).
"""

from __future__ import annotations

import numpy as np

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.quant_reference import block_scale, distributions
from artifacts.kernels.quant_reference import minifloat as mf

SHAPE = (2048, 4096)
BULK = 4.0  # |x| <= BULK: the body of the distribution, whose error the large values hide in the norm
_ERRORS: dict[tuple[str, str], float] = {}


def stored_bytes(q: block_scale.Quantized) -> tuple[np.ndarray, np.ndarray]:
    """What the kernel is handed: element codes (FP4 two per byte) and the tcgen05 scale buffer."""
    codes = mf.encode(q.elements, q.fmt.element)
    if q.fmt.element is mf.E2M1:
        codes = block_scale.pack_e2m1_pairs(codes)
    return codes, block_scale.pack_scales(q.scale_codes)


def rebuilt(q: block_scale.Quantized, codes: np.ndarray, scale_buffer: np.ndarray, row_major: bool = False):
    """The tensor a kernel reading those bytes computes with."""
    if q.fmt.element is mf.E2M1:
        codes = block_scale.unpack_e2m1_pairs(codes)
    rows, scale_cols = q.scale_codes.shape
    read = block_scale.unpack_scales_row_major if row_major else block_scale.unpack_scales
    elements = mf.decode(codes, q.fmt.element)
    return block_scale.Quantized(q.fmt, elements, read(scale_buffer, rows, scale_cols), q.tensor_scale).dequantize()


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    fmt, kind = block_scale.FORMATS[params["format"]], params["data"]
    x = distributions.sample(kind, SHAPE, np.random.default_rng(ctx.seed + 17))
    q = block_scale.quantize(x, fmt)
    direct = q.dequantize()
    codes, scale_buffer = stored_bytes(q)
    correctness = gates.check(rebuilt(q, codes, scale_buffer), direct, "exact")
    error = gates.relative_error(direct, x)
    body = np.abs(x) <= BULK
    body_error = gates.relative_error(direct[body], x[body])
    _ERRORS[(fmt.name, kind)] = error
    bits = 8 * (codes.nbytes + q.scale_codes.size) / x.size
    ctx.protocol["data"] = f"{SHAPE[0]} x {SHAPE[1]} float64 from numpy default_rng(seed + 17), per distribution"
    baseline = _ERRORS.get(("mxfp8", kind)) if fmt.name != "mxfp8" else None
    return {"correctness": correctness,
            "metrics": {"rel_err": error, "body_rel_err": body_error, "bits_per_value": bits,
                        "max_abs_err_over_rms": float(np.abs(direct - x).max() / np.sqrt(np.mean(x * x)))},
            "headline": ctx.headline("round-trip-rel-error", error, "relative",
                                     baseline=(f"mxfp8 on {kind} data", baseline) if baseline else None)}


def negative_control(ctx: Context) -> dict:
    x = distributions.sample("normal", SHAPE, np.random.default_rng(ctx.seed + 29))
    q = block_scale.quantize(x, block_scale.NVFP4)
    codes, scale_buffer = stored_bytes(q)
    return gates.check(rebuilt(q, codes, scale_buffer, row_major=True), q.dequantize(), "exact")


def compile_kernels(arch: str) -> compile_mod.Emitted:
    from artifacts.kernels.tcgen05_gemm import block_scaled_gemm

    emitted = compile_mod.from_cute(block_scaled_gemm.compile_for(arch, fmt="mxfp8"), arch)
    emitted.extend(compile_mod.from_cute(block_scaled_gemm.compile_for(arch, fmt="mxfp4"), arch))
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernels)
