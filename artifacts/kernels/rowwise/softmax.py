"""Softmax forward over the last dimension in CuTe DSL for Hopper (sm_90a):
out[i, j] = exp(x[i, j] - max_k x[i, k]) / sum_k exp(x[i, k] - max_k x[i, k]).

What it does: one pass over x. Each row is loaded once into registers with 16-byte vector loads
(LDG.E.128); the row maximum is reduced (shuffles, shared memory across warps, distributed shared
memory across the CTAs of a cluster for rows longer than 16384), the exponentials are computed in
fp32 with ex2.approx on x*log2(e) - max*log2(e) (one FFMA and one MUFU per element), their sum is
reduced the same way, and the quotients are written back with 16-byte stores. Columns past N
(when the row plan's tile is wider than the row) hold -inf, so they add exp(-inf) = 0 to the sum.
Bytes moved: M*N reads + M*N writes.

Constraints (checked by `SoftmaxForward.can_implement`, each ValueError names the value): x and out
bf16 or fp16, the same dtype, 2-D (M, N) with contiguous rows starting on 16-byte boundaries; N a
multiple of 8 and at most 131072. M and N are run-time values of the compiled kernel: one compile
serves every M and every N with the same row plan (rowwise_common.plan_row).

How to run: `from artifacts.kernels.rowwise import softmax_forward; y = softmax_forward(x)` (on the
current torch stream; capturable in a CUDA graph). Compile without a GPU and print the SASS:
`python -m artifacts.kernels.rowwise.softmax --arch sm_90a --n 4096`.
"""

from __future__ import annotations

import argparse
import math

import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr

from . import rowwise_common as common
from .rowwise_common import RowPlan, fadd, fmax, row_reduce

SUPPORTED = ("BFloat16", "Float16")
LOG2_E = math.log2(math.e)


class SoftmaxForward:
    """Compile-time settings: element type, the row plan, whether the plan's tile is exactly N (then no
    column predicates), and `zero_padding` - the deliberately broken variant the probe's negative
    control runs, which fills the columns past N with 0 instead of -inf, so each adds exp(-max) to the
    row's sum (the bug of a kernel whose out-of-bounds fill value is the copy's default)."""

    def __init__(self, dtype, plan: RowPlan, exact: bool, zero_padding: bool = False):
        self.dtype = dtype
        self.plan = plan
        self.exact = exact
        self.zero_padding = zero_padding

    @staticmethod
    def can_implement(dtype, n: int) -> None:
        """ValueError naming the dtype or N that this kernel does not take."""
        if getattr(dtype, "__name__", str(dtype)) not in SUPPORTED:
            raise ValueError(f"dtype {dtype} unsupported; supported: {', '.join(SUPPORTED)}")
        common.check_row_length(n, dtype.width)

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, stream):
        # mX, mO: (M, N) row-major
        plan = self.plan
        tiled_copy = common.row_tiled_copy(self.dtype, plan)
        self.kernel(mX, mO, tiled_copy).launch(
            grid=[cute.ceil_div(mX.shape[0], plan.rows_per_cta), plan.cluster_n, 1],
            block=[plan.cta_threads, 1, 1],
            cluster=[1, plan.cluster_n, 1] if const_expr(plan.cluster_n > 1) else None,
            stream=stream,
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor, tiled_copy: cute.TiledCopy):
        plan = self.plan
        tidx, _, _ = cute.arch.thread_idx()
        row_block, cta_in_row, _ = cute.arch.block_idx()
        m, n = mX.shape
        tile = (plan.rows_per_cta, plan.cta_cols)

        gX = cute.local_tile(mX, tile, (row_block, cta_in_row))
        gO = cute.local_tile(mO, tile, (row_block, cta_in_row))
        cX = cute.local_tile(cute.make_identity_tensor(mX.shape), tile, (row_block, cta_in_row))

        smem = cutlass.memory.SmemAllocator()
        sPartial, mbar = common.allocate_reduction(smem, plan, 2)

        thr_copy = tiled_copy.get_slice(tidx)
        tXgX = thr_copy.partition_S(gX)     # ((vec, 1), 1, vecs_per_thread)
        tXgO = thr_copy.partition_D(gO)
        tXcX = thr_copy.partition_S(cX)
        tXrX = cute.make_rmem_tensor_like(tXgX)
        tXrO = cute.make_rmem_tensor_like(tXgO)
        tXpX = None if const_expr(self.exact) else common.column_predicate(tXcX, n)

        common.cluster_start(mbar, 2, plan)
        in_rows = tXcX[0][0] < m
        tXrX.fill(0.0 if const_expr(self.zero_padding) else -tXrX.element_type.inf)
        if in_rows:
            cute.copy(tiled_copy, tXgX, tXrX, pred=tXpX)

        x = tXrX.load().to(Float32)
        row_max = row_reduce(x.reduce(cute.ReductionOp.MAX, -Float32.inf, 0), fmax, -math.inf, sPartial, mbar, 0, plan,
                             first=True)
        e = cute.math.exp2(x * LOG2_E - row_max * LOG2_E, fastmath=True)
        row_sum = row_reduce(e.reduce(cute.ReductionOp.ADD, Float32(0.0), 0), fadd, 0.0, sPartial, mbar, 1, plan)
        tXrO.store((e * cute.arch.rcp_approx(row_sum)).to(self.dtype))
        if in_rows:
            cute.copy(tiled_copy, tXrO, tXgO, pred=tXpX)


# --- host side -------------------------------------------------------------------------------------------

KERNEL_NAME = "rowwise.softmax_forward"


def _compile(dtype, n: int, arch: str | None, zero_padding: bool = False):
    from cutlass.runtime import make_fake_stream

    SoftmaxForward.can_implement(dtype, n)
    plan = common.plan_row(n, dtype.width)
    op = SoftmaxForward(dtype, plan, plan.covers_exactly(n), zero_padding)
    return cute.compile(op, common.fake_rows(dtype), common.fake_rows(dtype), make_fake_stream(),
                        options=common.compile_options(arch))


def compile_for(arch: str = "sm_90a", n: int = 4096, dtype=cutlass.BFloat16, zero_padding: bool = False):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin; M and N stay run-time values."""
    return _compile(dtype, n, arch, zero_padding)


def _kernel_for(dtype, n: int, zero_padding: bool):
    plan = common.plan_row(n, dtype.width)
    key = (KERNEL_NAME, dtype.__name__, plan, plan.covers_exactly(n), zero_padding)
    return common.cached(key, lambda: _compile(dtype, n, None, zero_padding))


def softmax_forward(x, out=None, *, zero_padding: bool = False):
    """Softmax of each row of x (M, N) into `out` (allocated when None); launched on the current torch
    stream. `zero_padding` selects the broken variant (negative controls only)."""
    import torch

    common.check_rows("x", x)
    dtype = common.torch_to_cute_dtype(x.dtype)
    m, n = x.shape
    SoftmaxForward.can_implement(dtype, n)
    if out is None:
        out = torch.empty_like(x)
    common.check_rows("out", out)
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"out: shape {tuple(out.shape)} dtype {out.dtype}; expected {tuple(x.shape)} {x.dtype}")
    if m == 0:
        return out
    compiled = _kernel_for(dtype, n, zero_padding)
    compiled(common.row_view(x), common.row_view(out), common.current_stream())
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--n", type=int, default=4096)
    args = parser.parse_args()
    from kernelwiki.harness import compile as compile_mod

    emitted = compile_mod.from_cute(compile_for(args.arch, args.n), args.arch)
    print(emitted.sass or emitted.ptx)
