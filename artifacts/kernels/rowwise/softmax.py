"""Softmax forward over the last dimension in CuTe DSL for Hopper (sm_90a):
out[i, j] = exp(x[i, j] - max_k x[i, k]) / sum_k exp(x[i, k] - max_k x[i, k]).

What it does: one pass over x in HBM. Each CTA copies its rows (or its slice of a row split over a
cluster) into shared memory with cp.async (rowwise_common), then reads them back a few vectors at
a time three times: for the row maximum (reduced over the row: shuffles, shared memory, distributed
shared memory), for the sum of exp2((x - max) * log2(e)) (ex2.approx, one MUFU per element), and for
the quotients, written with 16-byte stores. The maximum is subtracted before the scaling by log2(e):
scaling first overflowed fp32 for values near the largest bf16 or fp32 (x * log2(e) = inf for
x > 2.4e38, then inf - inf = NaN). Columns past N are left out of both reductions.

Special values behave as torch.softmax's: a row holding NaN gives NaN everywhere (the sum is NaN);
a row holding +inf gives NaN everywhere (inf - inf); a row of -inf gives NaN (-inf - -inf); -inf
among finite values gives 0 there.

Constraints (checked by `SoftmaxForward.can_implement`, each ValueError names the value): x and out
bf16, fp16 or fp32, the same dtype, 2-D (M, N) with contiguous rows starting on 16-byte boundaries;
N a multiple of one 16-byte vector and at most 262144. M and N are run-time values of the compiled
kernel: one compile serves every M and every N with the same row plan (rowwise_common.choose_plan).

How to run: `from artifacts.kernels.rowwise import softmax_forward; y = softmax_forward(x)` (on the
current torch stream; capturable in a CUDA graph). Compile without a GPU and print the SASS:
`python -m artifacts.kernels.rowwise.softmax --arch sm_90a --n 4096`.
"""

from __future__ import annotations

import argparse
import math

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr

from . import rowwise_common as common
from .rowwise_common import RowPlan, fadd, fmax, row_reduce

LOG2_E = math.log2(math.e)
BROKEN = ("zero_padding", "scale_first")


class SoftmaxForward:
    """Compile-time settings: element type, the row plan, whether the plan's tile is exactly N (then no
    column predicates), and `broken`, the deliberately broken variant a negative control runs:

    - "zero_padding": the columns past N count as 0 instead of being left out, so each adds exp(-max)
      to the row's sum (the bug of a kernel whose out-of-bounds fill value is the copy's default);
    - "scale_first": exp2(x * log2(e) - max * log2(e)), the first version's order (two roundings of
      large products instead of one of the difference; overflows near the type's largest values).
    """

    def __init__(self, dtype, plan: RowPlan, exact: bool, broken: str | None = None):
        if broken not in (None, *BROKEN):
            raise ValueError(f"broken variant {broken!r} unknown; known: {', '.join(BROKEN)}")
        self.dtype = dtype
        self.plan = plan
        self.exact = exact
        self.broken = broken

    @staticmethod
    def can_implement(dtype, n: int) -> None:
        """ValueError naming the dtype or N that this kernel does not take."""
        common.check_dtype(dtype)
        common.check_row_length(n, dtype.width)

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, stream: cuda.CUstream):
        # mX, mO: (M, N) row-major
        plan = self.plan
        copy_in = common.row_tiled_copy(self.dtype, plan, asynchronous=True)
        self.kernel(mX, mO, copy_in).launch(
            grid=[cute.ceil_div(mX.shape[0], plan.rows_per_cta), plan.cluster_n, 1],
            block=[plan.cta_threads, 1, 1],
            cluster=[1, plan.cluster_n, 1] if const_expr(plan.cluster_n > 1) else None,
            stream=stream,
        )

    @cute.jit
    def exp2_shifted(self, x, row_max: Float32):
        """exp2((x - max) * log2(e)) of a vector: the difference first (it cannot overflow into NaN)."""
        if const_expr(self.broken == "scale_first"):
            return cute.math.exp2(x * LOG2_E - row_max * LOG2_E, fastmath=True)
        return cute.math.exp2((x - row_max) * LOG2_E, fastmath=True)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor, copy_in: cute.TiledCopy):
        plan = self.plan
        tidx, _, _ = cute.arch.thread_idx()
        row_block, cta_in_row, _ = cute.arch.block_idx()
        m, n = mX.shape
        tile = (plan.rows_per_cta, plan.cta_cols)

        smem = cutlass.memory.SmemAllocator()
        sX = smem.allocate_tensor(self.dtype, common.stage_layout(plan), byte_alignment=16)
        sPartial, mbar = common.allocate_reduction(smem, plan, 2)

        cX = cute.local_tile(cute.make_identity_tensor(mX.shape), tile, (row_block, cta_in_row))
        thr_in = copy_in.get_slice(tidx)
        tXgX = thr_in.partition_S(cute.local_tile(mX, tile, (row_block, cta_in_row)))   # ((vec, 1), 1, V)
        tXsX = thr_in.partition_D(sX)
        tXcX = thr_in.partition_S(cX)
        tXgO = thr_in.partition_D(cute.local_tile(mO, tile, (row_block, cta_in_row)))
        tXpX = None if const_expr(self.exact) else common.column_predicate(tXcX, n)

        common.cluster_start(mbar, 2, plan)
        in_rows = tXcX[0][0] < m
        if in_rows:
            cute.copy(copy_in, tXgX, tXsX, pred=tXpX)
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(0)
        frag = cute.make_rmem_tensor_like(tXsX[None, None, 0])
        frag_o = cute.make_rmem_tensor_like(tXsX[None, None, 0])
        counts_padding = const_expr(self.broken == "zero_padding")

        # pass 1: the row maximum (columns past N left out; zero_padding counts them as 0)
        local_max = -Float32.inf
        for v in cutlass.range(plan.vecs_per_thread, unroll=common.UNROLL):
            inside = True if const_expr(self.exact) else common.vector_in_row(tXcX, v, n)
            if inside:
                cute.autovec_copy(tXsX[None, None, v], frag)
                local_max = fmax(local_max, frag.load().to(Float32).reduce(cute.ReductionOp.MAX, -Float32.inf, 0))
            elif const_expr(counts_padding):
                local_max = fmax(local_max, Float32(0.0))
        row_max = row_reduce(local_max, fmax, -math.inf, sPartial, mbar, 0, plan, first=True)

        # pass 2: the sum of the shifted exponentials
        local_sum = Float32(0.0)
        for v in cutlass.range(plan.vecs_per_thread, unroll=common.UNROLL):
            inside = True if const_expr(self.exact) else common.vector_in_row(tXcX, v, n)
            if inside:
                cute.autovec_copy(tXsX[None, None, v], frag)
                e = self.exp2_shifted(frag.load().to(Float32), row_max)
                local_sum += e.reduce(cute.ReductionOp.ADD, Float32(0.0), 0)
            elif const_expr(counts_padding):
                local_sum += cute.math.exp2((Float32(0.0) - row_max) * LOG2_E, fastmath=True) * plan.vec
        row_sum = row_reduce(local_sum, fadd, 0.0, sPartial, mbar, 1, plan)
        scale = cute.arch.rcp_approx(row_sum)

        # pass 3: the quotients
        for v in cutlass.range(plan.vecs_per_thread, unroll=common.UNROLL):
            inside = True if const_expr(self.exact) else common.vector_in_row(tXcX, v, n)
            if in_rows and inside:
                cute.autovec_copy(tXsX[None, None, v], frag)
                frag_o.store((self.exp2_shifted(frag.load().to(Float32), row_max) * scale).to(self.dtype))
                cute.autovec_copy(frag_o, tXgO[None, None, v])


# --- host side -------------------------------------------------------------------------------------------

KERNEL_NAME = "rowwise.softmax_forward"


def _settings(dtype, n: int, broken: str | None, plan: RowPlan | None = None, m: int | None = None,
              sms: int | None = None) -> SoftmaxForward:
    SoftmaxForward.can_implement(dtype, n)
    plan = plan or common.choose_plan(n, dtype.width, m=m, sms=sms)
    return SoftmaxForward(dtype, plan, plan.covers_exactly(n), broken)


def _compile(kernel: SoftmaxForward, arch: str | None):
    from cutlass.runtime import make_fake_stream

    return cute.compile(kernel, common.fake_rows(kernel.dtype), common.fake_rows(kernel.dtype), make_fake_stream(),
                        options=common.compile_options(arch))


def compile_for(arch: str = "sm_90a", n: int = 4096, dtype=cutlass.BFloat16, broken: str | None = None,
                plan: RowPlan | None = None):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin; M and N stay run-time values."""
    return _compile(_settings(dtype, n, broken, plan), arch)


def kernel_for(dtype, n: int, broken: str | None = None, plan: RowPlan | None = None, arch: str = "sm_90a",
               m: int | None = None, sms: int | None = None):
    """The compiled kernel for these settings (a launch of `m` rows on `sms` SMs picks its plan with
    rowwise_common.choose_plan), from the cache (rowwise_common.cached) or compiled now."""
    kernel = _settings(dtype, n, broken, plan, m, sms)
    key = (KERNEL_NAME, dtype.__name__, kernel.plan, kernel.exact, broken, arch)
    return common.cached(key, lambda: _compile(kernel, None))


def softmax_forward(x, out=None, *, broken: str | None = None, plan: RowPlan | None = None):
    """Softmax of each row of x (M, N) into `out` (allocated when None); launched on the current torch
    stream. `broken` selects a broken variant (negative controls only), `plan` a row plan other than
    plan_row's (tuning only)."""
    import torch

    common.check_rows("x", x)
    dtype = common.torch_to_cute_dtype(x.dtype)
    m, n = x.shape
    SoftmaxForward.can_implement(dtype, n)
    out = torch.empty_like(x) if out is None else out
    common.check_like("out", out, x)
    if m == 0:
        return out
    major, minor = torch.cuda.get_device_capability(x.device)
    compiled = kernel_for(dtype, n, broken, plan, f"sm_{major}{minor}a", m, common.sm_count(x.device))
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
