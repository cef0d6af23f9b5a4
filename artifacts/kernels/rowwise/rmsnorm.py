"""RMSNorm forward in CuTe DSL for Hopper (sm_90a): out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * w.

What it does: one pass over x. Each row is loaded once into registers with 16-byte vector loads
(LDG.E.128), squared and summed in fp32, reduced over the threads of the row (shuffles, then shared
memory across warps, then distributed shared memory across the CTAs of a cluster for rows longer
than 16384), scaled and written back with 16-byte stores. Bytes moved: M*N reads + M*N writes (+ N
for the weight, served from L2 after the first rows).

Constraints (checked by `RMSNormForward.can_implement`, each ValueError names the value): x, weight
and out bf16 or fp16, all the same dtype; x and out 2-D (M, N) with contiguous rows starting on
16-byte boundaries; weight 1-D of length N, contiguous; N a multiple of 8 and at most 131072.
M and N are run-time values of the compiled kernel: one compile serves every M and every N with the
same row plan (see rowwise_common.plan_row); math in fp32, one rounding to the output type.

How to run: `from artifacts.kernels.rowwise import rmsnorm_forward; y = rmsnorm_forward(x, w)` (on
the current torch stream; capturable in a CUDA graph). Compile without a GPU and print the SASS:
`python -m artifacts.kernels.rowwise.rmsnorm --arch sm_90a --n 4096`.
"""

from __future__ import annotations

import argparse

import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr

from . import rowwise_common as common
from .rowwise_common import RowPlan, fadd, row_reduce

SUPPORTED = ("BFloat16", "Float16")


class RMSNormForward:
    """Compile-time settings: element type, the row plan, whether the plan's tile is exactly N (then no
    column predicates), and `tile_mean` - the deliberately broken variant the probe's negative control
    runs, which divides the sum of squares by the tile width instead of N (the bug of a kernel that
    takes the padded tile for the row)."""

    def __init__(self, dtype, plan: RowPlan, exact: bool, tile_mean: bool = False):
        self.dtype = dtype
        self.plan = plan
        self.exact = exact
        self.tile_mean = tile_mean

    @staticmethod
    def can_implement(dtype, n: int) -> None:
        """ValueError naming the dtype or N that this kernel does not take."""
        if getattr(dtype, "__name__", str(dtype)) not in SUPPORTED:
            raise ValueError(f"dtype {dtype} unsupported; supported: {', '.join(SUPPORTED)}")
        common.check_row_length(n, dtype.width)

    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, eps: Float32, stream):
        # mX, mO: (M, N) row-major; mW: (N,)
        plan = self.plan
        tiled_copy = common.row_tiled_copy(self.dtype, plan)
        self.kernel(mX, mW, mO, eps, tiled_copy).launch(
            grid=[cute.ceil_div(mX.shape[0], plan.rows_per_cta), plan.cluster_n, 1],
            block=[plan.cta_threads, 1, 1],
            cluster=[1, plan.cluster_n, 1] if const_expr(plan.cluster_n > 1) else None,
            stream=stream,
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, eps: Float32, tiled_copy: cute.TiledCopy):
        plan = self.plan
        tidx, _, _ = cute.arch.thread_idx()
        row_block, cta_in_row, _ = cute.arch.block_idx()
        m, n = mX.shape
        tile = (plan.rows_per_cta, plan.cta_cols)

        # The weight as a (rows_per_cta, N) tensor with row stride 0: every row of the tile reads it.
        mWrows = cute.make_tensor(mW.iterator, cute.make_layout((plan.rows_per_cta, n), stride=(0, 1)))
        gX = cute.local_tile(mX, tile, (row_block, cta_in_row))
        gO = cute.local_tile(mO, tile, (row_block, cta_in_row))
        gW = cute.local_tile(mWrows, tile, (0, cta_in_row))
        cX = cute.local_tile(cute.make_identity_tensor(mX.shape), tile, (row_block, cta_in_row))

        smem = cutlass.memory.SmemAllocator()
        sPartial, mbar = common.allocate_reduction(smem, plan, 1)

        thr_copy = tiled_copy.get_slice(tidx)
        tXgX = thr_copy.partition_S(gX)     # ((vec, 1), 1, vecs_per_thread)
        tXgW = thr_copy.partition_S(gW)
        tXgO = thr_copy.partition_D(gO)
        tXcX = thr_copy.partition_S(cX)
        tXrX = cute.make_rmem_tensor_like(tXgX)
        tXrW = cute.make_rmem_tensor_like(tXgW)
        tXrO = cute.make_rmem_tensor_like(tXgO)
        tXpX = None if const_expr(self.exact) else common.column_predicate(tXcX, n)

        common.cluster_start(mbar, 1, plan)
        in_rows = tXcX[0][0] < m
        tXrX.fill(0.0)
        tXrW.fill(0.0)
        if in_rows:
            cute.copy(tiled_copy, tXgX, tXrX, pred=tXpX)
        cute.copy(tiled_copy, tXgW, tXrW, pred=tXpX)

        x = tXrX.load().to(Float32)
        sum_sq = row_reduce((x * x).reduce(cute.ReductionOp.ADD, Float32(0.0), 0), fadd, 0.0, sPartial, mbar, 0, plan,
                            first=True)
        count = Float32(plan.cta_cols * plan.cluster_n) if const_expr(self.tile_mean) else Float32(n)
        rstd = cute.math.rsqrt(sum_sq / count + eps, fastmath=True)
        y = x * rstd * tXrW.load().to(Float32)
        tXrO.store(y.to(self.dtype))
        if in_rows:
            cute.copy(tiled_copy, tXrO, tXgO, pred=tXpX)


# --- host side -------------------------------------------------------------------------------------------

KERNEL_NAME = "rowwise.rmsnorm_forward"


def _compile(dtype, n: int, arch: str | None, tile_mean: bool = False):
    from cutlass.runtime import make_fake_stream

    RMSNormForward.can_implement(dtype, n)
    plan = common.plan_row(n, dtype.width)
    op = RMSNormForward(dtype, plan, plan.covers_exactly(n), tile_mean)
    return cute.compile(op, common.fake_rows(dtype), common.fake_vector(dtype), common.fake_rows(dtype),
                        Float32(1e-6), make_fake_stream(), options=common.compile_options(arch))


def compile_for(arch: str = "sm_90a", n: int = 4096, dtype=cutlass.BFloat16, tile_mean: bool = False):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin; M and N stay run-time values."""
    return _compile(dtype, n, arch, tile_mean)


def _kernel_for(dtype, n: int, tile_mean: bool):
    plan = common.plan_row(n, dtype.width)
    key = (KERNEL_NAME, dtype.__name__, plan, plan.covers_exactly(n), tile_mean)
    return common.cached(key, lambda: _compile(dtype, n, None, tile_mean))


def rmsnorm_forward(x, weight, out=None, eps: float = 1e-6, *, tile_mean: bool = False):
    """RMSNorm of each row of x (M, N) with weight (N,), into `out` (allocated when None); launched on the
    current torch stream. `tile_mean` selects the broken variant (negative controls only)."""
    import torch

    common.check_rows("x", x)
    dtype = common.torch_to_cute_dtype(x.dtype)
    m, n = x.shape
    RMSNormForward.can_implement(dtype, n)
    if weight.dtype != x.dtype:
        raise ValueError(f"weight: dtype {weight.dtype} != x dtype {x.dtype}")
    if weight.dim() != 1 or weight.shape[0] != n or (n > 1 and weight.stride(0) != 1):
        raise ValueError(f"weight: expected a contiguous ({n},) tensor, got shape {tuple(weight.shape)} "
                         f"strides {weight.stride()}")
    if weight.data_ptr() % common.VECTOR_BYTES:
        raise ValueError(f"weight: data_ptr {weight.data_ptr():#x} is not {common.VECTOR_BYTES}-byte aligned")
    if out is None:
        out = torch.empty_like(x)
    common.check_rows("out", out)
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"out: shape {tuple(out.shape)} dtype {out.dtype}; expected {tuple(x.shape)} {x.dtype}")
    if m == 0:
        return out
    compiled = _kernel_for(dtype, n, tile_mean)
    compiled(common.row_view(x), common.vector_view(weight), common.row_view(out), Float32(eps),
             common.current_stream())
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--n", type=int, default=4096)
    args = parser.parse_args()
    from kernelwiki.harness import compile as compile_mod

    emitted = compile_mod.from_cute(compile_for(args.arch, args.n), args.arch)
    print(emitted.sass or emitted.ptx)
