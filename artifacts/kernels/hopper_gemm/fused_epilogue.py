"""Fused epilogues of the Hopper GEMM: bias, an activation and a residual applied to the accumulator
before D leaves the SM, so the GEMM's output is not written to HBM and read back by a second kernel.

What one fused epilogue computes, per element of D (row i, column j, batch l):

    D[i, j, l] = act(alpha * acc[i, j, l] + bias[j]) + beta * C[i, j, l]

in FP32, then converted to D's type once; for an e4m3 D (quantize-on-store) the result is first
multiplied by 1 / D's per-tensor scale (the conversion saturates to +-448). Every part is optional and a compile-time setting
(EpilogueSpec): with none of them the consumer's epilogue is the plain `alpha * acc` it was, the
same instructions. act is gelu_tanh (GELU's tanh form, as torch's approximate="tanh") or silu;
both go through one sigmoid, 0.5 * (1 + tanh(u)) = sigmoid(2u), built from exp2 and a division,
so FP32 outputs keep FP32 accuracy (tanh.approx would not).

How the operands reach the accumulator: per-thread loads from global memory of exactly the
elements the thread's accumulator fragment holds. The coordinates come from the thread-value
layout of the stmatrix copy that stores a D slice (the same partition applied to an identity
tensor of the slice's shape), so element v of a thread's slice registers and element v of its
coordinate tensor name the same (row, column). Each load is predicated on row < M and column < N:
partial tiles read nothing past the tensor (their D elements are dropped by the TMA store anyway).
Why not a TMA load of the residual slice into shared memory: the mainloop's stages fill shared
memory (fit_stages), so a residual buffer would cost stages, and a second barrier ring between the
epilogue threads; each residual element is read once, so the per-thread loads move the same bytes.

Not here (yet): SwiGLU. It halves D's width; the layout that would fit interleaves gate and up in
blocks of one 32-column slice, so two consecutive accumulator slices make one D slice, but the
scheduler counts tiles from D's width and the consumer stores every slice: more than this hook.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cutlass
import cutlass.cute as cute

ACTIVATIONS = ("gelu_tanh", "silu")
LOG2_E = math.log2(math.e)
GELU_TANH_SCALE = math.sqrt(2.0 / math.pi)   # u = sqrt(2/pi) * (x + 0.044715 x^3)
GELU_TANH_CUBIC = 0.044715


@dataclass(frozen=True)
class EpilogueSpec:
    """What the epilogue fuses (compile-time: one compiled kernel per spec). The default fuses nothing."""
    bias: bool = False
    activation: str | None = None
    residual: bool = False
    # D is e4m3: the values are multiplied by 1 / D's per-tensor scale before the (saturating) conversion
    quantize: bool = False
    # the probe's negative control, a realistic indexing bug: bias read by the column inside the output
    # tile, the tile's offset forgotten (right for the first column of tiles only)
    bias_tile_local: bool = False

    def __post_init__(self):
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r} unsupported; use one of {ACTIVATIONS} or None")

    @property
    def fused(self) -> bool:
        return self.bias or self.residual or self.quantize or self.activation is not None

    def describe(self) -> str:
        parts = [name for name, on in (("bias", self.bias), (self.activation or "", self.activation is not None),
                                       ("residual", self.residual), ("e4m3", self.quantize)) if on]
        return "+".join(parts) or "none"


@cute.jit
def _sigmoid(z):
    """1 / (1 + e^-z) on a TensorSSA of FP32: e^-z as exp2 (ex2.approx, ~2 ulp); for large -z the
    exponential is inf and the sigmoid 0, not NaN."""
    return 1.0 / (1.0 + cute.math.exp2(z * (-LOG2_E), fastmath=True))


@cute.jit
def activate(x, activation: cutlass.Constexpr):
    """act(x) for a TensorSSA of FP32: gelu_tanh = x * sigmoid(2u), silu = x * sigmoid(x)."""
    if cutlass.const_expr(activation == "gelu_tanh"):
        u = x * (x * x * GELU_TANH_CUBIC + 1.0) * GELU_TANH_SCALE
        return x * _sigmoid(u * 2.0)
    else:
        return x * _sigmoid(x)


def operand_dtype(d_dtype):
    """The type the epilogue reads bias and C in: D's, or bf16 for an e4m3 D."""
    return cutlass.BFloat16 if d_dtype == cutlass.Float8E4M3FN else d_dtype


@cute.jit
def slice_context(spec: cutlass.Constexpr, r2s: cute.TiledCopy, consumer_tidx, epi_tile, tile_n: int):
    """What slice_values needs across a tile's slices, or None when nothing is read: the (row, column)
    inside one D slice of each element of this thread's slice registers (the stmatrix copy's source
    partition of an identity tensor of the slice), the slice and tile widths, and the loads issued one
    slice ahead (a trace-time dict: the slice loop is unrolled, and every tile empties it)."""
    if cutlass.const_expr(spec.bias or spec.residual):
        return r2s.get_slice(consumer_tidx).partition_S(cute.make_identity_tensor(epi_tile)), epi_tile[1], tile_n, {}
    else:
        return None


@cute.jit
def _load_bias(mBias: cute.Tensor, coords, shape, first_col, n):
    """The bias under one slice's registers (column first_col + the element's), 0 past column N."""
    rBias = cute.make_rmem_tensor(shape, mBias.element_type)
    rBias.fill(0.0)
    for v in cutlass.range_constexpr(cute.size(rBias)):
        col = first_col + coords[v][1]
        if col < n:
            rBias[v] = mBias[col]
    return rBias


@cute.jit
def _load_c(mC: cute.Tensor, coords, shape, first_row, first_col, m, n, batch):
    """C under one slice's registers, 0 outside the M x N of batch `batch`."""
    rC = cute.make_rmem_tensor(shape, mC.element_type)
    rC.fill(0.0)
    for v in cutlass.range_constexpr(cute.size(rC)):
        row, col = first_row + coords[v][0], first_col + coords[v][1]
        if row < m:
            if col < n:
                rC[v] = mC[(row, col, batch)]
    return rC


@cute.jit
def slice_values(spec: cutlass.Constexpr, rSlice: cute.Tensor, alpha: cutlass.Float32, context, inputs,
                 first_row, tile_first_col, slice_first_col: int):
    """The FP32 values of one D slice: alpha * acc alone when nothing is fused, else
    act(alpha * acc + bias) + beta * C (times quant for an e4m3 D). The slice starts at row first_row and
    column tile_first_col + slice_first_col of D (its tile's first column, then its own inside the tile);
    inputs: (bias (N,), C (M, N, L), beta, quant, M, N, batch), those the spec does not use stand-ins.
    The bias and C of the next slice are loaded here, before this slice goes through shared memory,
    so their latency overlaps this slice's store (the first slice's are loaded when it is reached)."""
    x = rSlice.load() * alpha
    if cutlass.const_expr(spec.fused):
        mBias, mC, beta, quant, m, n, batch = inputs
        if cutlass.const_expr(spec.bias or spec.residual):
            coords, slice_n, tile_n, ahead = context
            last = slice_first_col + slice_n >= tile_n
            bias_tile_col = 0 if cutlass.const_expr(spec.bias_tile_local) else tile_first_col
            shape = rSlice.shape
            if cutlass.const_expr(spec.bias):
                rBias = ahead.pop("bias") if slice_first_col > 0 else \
                    _load_bias(mBias, coords, shape, bias_tile_col + slice_first_col, n)
                if cutlass.const_expr(not last):
                    ahead["bias"] = _load_bias(mBias, coords, shape, bias_tile_col + slice_first_col + slice_n, n)
            if cutlass.const_expr(spec.residual):
                rC = ahead.pop("c") if slice_first_col > 0 else \
                    _load_c(mC, coords, shape, first_row, tile_first_col + slice_first_col, m, n, batch)
                if cutlass.const_expr(not last):
                    ahead["c"] = _load_c(mC, coords, shape, first_row, tile_first_col + slice_first_col + slice_n,
                                         m, n, batch)
        if cutlass.const_expr(spec.bias):
            x = x + rBias.load().to(cutlass.Float32)
        if cutlass.const_expr(spec.activation is not None):
            x = activate(x, spec.activation)
        if cutlass.const_expr(spec.residual):
            x = x + rC.load().to(cutlass.Float32) * beta
        if cutlass.const_expr(spec.quantize):
            x = x * quant
    return x
