"""Normalization forward kernels in CuTe DSL for Hopper (sm_90a), one kernel class for three ops:

- RMSNorm:                 out = x / sqrt(mean(x^2) + eps) * w
- residual add + RMSNorm:  h = x + residual (rounded to the input type, written to residual_out);
                           out = h / sqrt(mean(h^2) + eps) [* w]   (the weight is optional)
- LayerNorm:               out = (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * w [+ b]

What it does: one pass over the inputs in HBM. Each CTA copies its rows (or its slice of a row split
over a cluster) into shared memory with cp.async (rowwise_common explains why the bytes in flight
live in shared memory, not registers), then reads them back a few vectors at a time: once for the
sum of squares (LayerNorm: once for the sum, once for the centred sum of squares, so the variance
is never E[x^2] - E[x]^2), and once more for the output, scaled with the row's rstd, multiplied by
the weight (and the bias added) read from global memory (L2-resident), and stored with 16-byte
stores. Math in fp32, one rounding to the output type. The residual variant stores h = x + r
rounded to the input type, as the next layer reads it, during the first pass, and normalizes that
rounded h - what `F.rms_norm(x + r, ...)` computes. Bytes moved: M*N reads and M*N writes per
tensor (x, out; + residual and residual_out), + N per weight or bias, served from L2 after the
first rows.

Constraints (checked by `NormForward.can_implement` and the entry points; each ValueError names
the value): x, residual, weight, bias and the outputs bf16, fp16 or fp32, all the same dtype; the
row tensors 2-D (M, N) with contiguous rows starting on 16-byte boundaries; weight and bias 1-D of
length N, contiguous; N a multiple of one 16-byte vector (8 bf16/fp16 or 4 fp32 elements) and at
most 262144. M and N are run-time values of the compiled kernel: one compile serves every M and
every N with the same row plan (rowwise_common.choose_plan: by N, and a latency plan for a launch
of less than one wave).

How to run: `from artifacts.kernels.rowwise import rmsnorm_forward, add_rmsnorm_forward,
layernorm_forward` (on the current torch stream; capturable in a CUDA graph). Compile without a
GPU and print the SASS: `python -m artifacts.kernels.rowwise.norm --arch sm_90a --op layernorm --n 4096`.
"""

from __future__ import annotations

import argparse

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr

from . import rowwise_common as common
from .rowwise_common import RowPlan, fadd, row_reduce

OPS = ("rmsnorm", "add_rmsnorm", "layernorm")
BROKEN = ("tile_mean", "eps_dropped")


class NormForward:
    """Compile-time settings: the op (OPS), the element type, the row plan, whether the plan's tile is
    exactly N (then no column predicates), whether a weight and a bias are applied, and `broken`,
    the deliberately broken variant a negative control runs (None for the real kernel):

    - "tile_mean": the mean (of x^2, or of x and of (x - mean)^2) divides by the tile width instead
      of N - the bug of a kernel that takes its padded tile for the row (only visible when N is not
      a multiple of the tile);
    - "eps_dropped": rstd = 1 / sqrt(mean) - the eps left out (visible where the mean square is
      small against eps).
    """

    def __init__(self, op: str, dtype, plan: RowPlan, exact: bool, weight: bool = True, bias: bool = False,
                 broken: str | None = None):
        if op not in OPS:
            raise ValueError(f"op {op!r} unknown; supported: {', '.join(OPS)}")
        if broken not in (None, *BROKEN):
            raise ValueError(f"broken variant {broken!r} unknown; known: {', '.join(BROKEN)}")
        self.op = op
        self.dtype = dtype
        self.plan = plan
        self.exact = exact
        self.weight = weight
        self.bias = bias
        self.broken = broken

    @property
    def held_vectors(self) -> int:
        """Vectors a thread keeps in registers per vector of its row, as the plan's register estimate
        counts them: the weight's. A bias adds none: with fewer than 4 vectors per thread (the latency
        plans) it is held from the start too, 4 registers a vector more than the estimate, which those
        kernels have room for; with more, the last pass holds the weight and bias of two groups of
        `bias_group` vectors at a time: 16 registers per vector of a group, at most the whole weight's."""
        return int(self.weight)

    @property
    def bias_group(self) -> int:
        """Vectors per group in which the last pass loads the weight and bias (0: no bias, or both
        loaded before the wait)."""
        return self.plan.vecs_per_thread // 4 if self.bias else 0

    @property
    def ctas_per_sm(self) -> int:
        """The CTAs per SM the launch asks registers for (ptxas fits the kernel to it)."""
        return self.plan.ctas_per_sm(2 if self.residual else 1, self.dtype.width, self.held_vectors, self.exact)

    @property
    def residual(self) -> bool:
        return self.op == "add_rmsnorm"

    @property
    def layer(self) -> bool:
        return self.op == "layernorm"

    @staticmethod
    def can_implement(dtype, n: int) -> None:
        """ValueError naming the dtype or N that this kernel does not take."""
        common.check_dtype(dtype)
        common.check_row_length(n, dtype.width)

    @cute.jit
    def __call__(self, mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mB: cute.Tensor, mO: cute.Tensor,
                 mRO: cute.Tensor, eps: Float32, stream: cuda.CUstream):
        # mX, mR, mO, mRO: (M, N) row-major; mW, mB: (N,). Tensors an op does not use are passed as
        # any tensor of the right type (mX) and never read.
        plan = self.plan
        copy_in = common.row_tiled_copy(self.dtype, plan, asynchronous=True)
        copy_out = common.row_tiled_copy(self.dtype, plan, asynchronous=False)
        self.kernel(mX, mR, mW, mB, mO, mRO, eps, copy_in, copy_out).launch(
            grid=[cute.ceil_div(mX.shape[0], plan.rows_per_cta), plan.cluster_n, 1],
            block=[plan.cta_threads, 1, 1],
            cluster=[1, plan.cluster_n, 1] if const_expr(plan.cluster_n > 1) else None,
            min_blocks_per_mp=self.ctas_per_sm, preferred_smem_carveout=100,
            stream=stream,
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mB: cute.Tensor, mO: cute.Tensor,
               mRO: cute.Tensor, eps: Float32, copy_in: cute.TiledCopy, copy_out: cute.TiledCopy):
        plan = self.plan
        tidx, _, _ = cute.arch.thread_idx()
        row_block, cta_in_row, _ = cute.arch.block_idx()
        m, n = mX.shape
        tile = (plan.rows_per_cta, plan.cta_cols)
        slots = 2 if const_expr(self.layer) else 1

        smem = cutlass.memory.SmemAllocator()
        sX = smem.allocate_tensor(self.dtype, common.stage_layout(plan), byte_alignment=16)
        sR = smem.allocate_tensor(self.dtype, common.stage_layout(plan), byte_alignment=16) \
            if const_expr(self.residual) else None
        sPartial, mbar = common.allocate_reduction(smem, plan, slots)

        # The weight and bias as (rows_per_cta, N) tensors with row stride 0: every row of the tile reads them.
        mWrows = cute.make_tensor(mW.iterator, cute.make_layout((plan.rows_per_cta, n), stride=(0, 1)))
        mBrows = cute.make_tensor(mB.iterator, cute.make_layout((plan.rows_per_cta, n), stride=(0, 1)))
        cX = cute.local_tile(cute.make_identity_tensor(mX.shape), tile, (row_block, cta_in_row))
        thr_in = copy_in.get_slice(tidx)
        thr_out = copy_out.get_slice(tidx)
        tXgX = thr_in.partition_S(cute.local_tile(mX, tile, (row_block, cta_in_row)))   # ((vec, 1), 1, V)
        tXsX = thr_in.partition_D(sX)
        tXcX = thr_in.partition_S(cX)
        tXgO = thr_out.partition_D(cute.local_tile(mO, tile, (row_block, cta_in_row)))
        tXgW = thr_out.partition_S(cute.local_tile(mWrows, tile, (0, cta_in_row)))
        tXgB = thr_out.partition_S(cute.local_tile(mBrows, tile, (0, cta_in_row)))
        tXpX = None if const_expr(self.exact) else common.column_predicate(tXcX, n)

        common.cluster_start(mbar, slots, plan)
        in_rows = tXcX[0][0] < m
        if in_rows:
            cute.copy(copy_in, tXgX, tXsX, pred=tXpX)
            if const_expr(self.residual):
                tXgR = thr_in.partition_S(cute.local_tile(mR, tile, (row_block, cta_in_row)))
                cute.copy(copy_in, tXgR, thr_in.partition_D(sR), pred=tXpX)
        cute.arch.cp_async_commit_group()
        # The weight and bias into registers now, while the rows load: the last pass then waits on
        # nothing but shared memory (loaded there, the L2's latency came once per vector pair and
        # held the CTA's stage idle: ~0.95 of the copy for RMSNorm against ~0.97 for softmax). Where
        # both do not fit the registers (bias_group), the last pass loads them a group at a time.
        grouped = self.bias_group > 0
        tXrW = cute.make_rmem_tensor_like(tXgW)
        tXrB = cute.make_rmem_tensor_like(tXgB)
        if const_expr(self.weight and not grouped):
            cute.copy(copy_out, tXgW, tXrW, pred=tXpX)
        if const_expr(self.bias and not grouped):
            cute.copy(copy_out, tXgB, tXrB, pred=tXpX)
        cute.arch.cp_async_wait_group(0)

        tXsR = thr_in.partition_D(sR) if const_expr(self.residual) else None
        tXgRO = thr_out.partition_D(cute.local_tile(mRO, tile, (row_block, cta_in_row))) \
            if const_expr(self.residual) else None
        frag = cute.make_rmem_tensor_like(tXsX[None, None, 0])
        frag_r = cute.make_rmem_tensor_like(tXsX[None, None, 0])
        frag_o = cute.make_rmem_tensor_like(tXsX[None, None, 0])
        count = Float32(plan.cta_cols * plan.cluster_n) if const_expr(self.broken == "tile_mean") else Float32(n)

        # pass 1: sum of x (LayerNorm) or of x^2 (RMSNorm); the residual variant forms and stores h here
        total = Float32(0.0)
        for v in cutlass.range(plan.vecs_per_thread, unroll=common.UNROLL):
            inside = True if const_expr(self.exact) else common.vector_in_row(tXcX, v, n)
            cute.autovec_copy(tXsX[None, None, v], frag)
            x = frag.load().to(Float32)
            if const_expr(self.residual):
                cute.autovec_copy(tXsR[None, None, v], frag_r)
                frag_o.store((x + frag_r.load().to(Float32)).to(self.dtype))
                if in_rows and inside:
                    cute.autovec_copy(frag_o, tXgRO[None, None, v])
                x = frag_o.load().to(Float32)
            part = x.reduce(cute.ReductionOp.ADD, Float32(0.0), 0) if const_expr(self.layer) \
                else (x * x).reduce(cute.ReductionOp.ADD, Float32(0.0), 0)
            if inside:
                total += part
        total = row_reduce(total, fadd, 0.0, sPartial, mbar, 0, plan, first=True)

        mean = Float32(0.0)
        if const_expr(self.layer):
            mean = total / count
            # pass 2 (LayerNorm): the centred sum of squares, columns past N left out
            total = Float32(0.0)
            for v in cutlass.range(plan.vecs_per_thread, unroll=common.UNROLL):
                inside = True if const_expr(self.exact) else common.vector_in_row(tXcX, v, n)
                if inside:
                    cute.autovec_copy(tXsX[None, None, v], frag)
                    d = frag.load().to(Float32) - mean
                    total += (d * d).reduce(cute.ReductionOp.ADD, Float32(0.0), 0)
                elif const_expr(self.broken == "tile_mean"):
                    total += mean * mean * plan.vec     # the padding counted as zeros
            total = row_reduce(total, fadd, 0.0, sPartial, mbar, 1, plan)
        var = total / count
        rstd = cute.math.rsqrt(var, fastmath=True) if const_expr(self.broken == "eps_dropped") \
            else cute.math.rsqrt(var + eps, fastmath=True)

        # last pass: normalize, weight, bias, store (unrolled: the weights are registers). Grouped,
        # the weight and bias of the next group are loaded before this group's stores: ptxas keeps
        # a load behind every earlier store that may alias it, so the bias loaded vector by vector
        # here cost one serialized L2 round trip per vector (an LDG between each two STGs in the SASS).
        group = self.bias_group if const_expr(grouped) else plan.vecs_per_thread
        starts = [*range(0, plan.vecs_per_thread, group), plan.vecs_per_thread]
        if const_expr(grouped):
            self.load_group(tXgW, tXgB, tXrW, tXrB, tXpX, in_rows, starts[0], starts[1])
        for g in cutlass.range_constexpr(len(starts) - 1):
            if const_expr(grouped and g + 2 < len(starts)):
                self.load_group(tXgW, tXgB, tXrW, tXrB, tXpX, in_rows, starts[g + 1], starts[g + 2])
            for v in cutlass.range_constexpr(starts[g], starts[g + 1]):
                inside = True if const_expr(self.exact) else tXpX[0, 0, v]
                if in_rows and inside:
                    cute.autovec_copy(tXsX[None, None, v], frag)
                    x = frag.load().to(Float32)
                    if const_expr(self.residual):
                        cute.autovec_copy(tXsR[None, None, v], frag_r)
                        x = (x + frag_r.load().to(Float32)).to(self.dtype).to(Float32)
                    y = (x - mean) * rstd if const_expr(self.layer) else x * rstd
                    if const_expr(self.weight):
                        y = y * tXrW[None, None, v].load().to(Float32)
                    if const_expr(self.bias):
                        y = y + tXrB[None, None, v].load().to(Float32)
                    frag_o.store(y.to(self.dtype))
                    cute.autovec_copy(frag_o, tXgO[None, None, v])

    @cute.jit
    def load_group(self, tXgW: cute.Tensor, tXgB: cute.Tensor, tXrW: cute.Tensor, tXrB: cute.Tensor, tXpX,
                   in_rows, start: cutlass.Constexpr[int], stop: cutlass.Constexpr[int]):
        """The weight and bias of the thread's vectors start ... stop-1 into registers (as the last
        pass uses them: rows past M and vectors past N skipped)."""
        for v in cutlass.range_constexpr(start, stop):
            inside = True if const_expr(self.exact) else tXpX[0, 0, v]
            if in_rows and inside:
                cute.autovec_copy(tXgW[None, None, v], tXrW[None, None, v])
                cute.autovec_copy(tXgB[None, None, v], tXrB[None, None, v])


# --- host side -------------------------------------------------------------------------------------------

KERNEL_NAME = "rowwise.norm_forward"


def _settings(op: str, dtype, n: int, weight: bool, bias: bool, broken: str | None, plan: RowPlan | None = None,
              m: int | None = None, sms: int | None = None):
    NormForward.can_implement(dtype, n)
    plan = plan or common.choose_plan(n, dtype.width, 2 if op == "add_rmsnorm" else 1, weight, m, sms)
    return NormForward(op, dtype, plan, plan.covers_exactly(n), weight, bias, broken)


def _compile(kernel: NormForward, arch: str | None):
    from cutlass.runtime import make_fake_stream

    dtype = kernel.dtype
    rows, vector = common.fake_rows(dtype), common.fake_vector(dtype)
    return cute.compile(kernel, rows, rows, vector, vector, rows, rows, Float32(1e-6), make_fake_stream(),
                        options=common.compile_options(arch))


def compile_for(arch: str = "sm_90a", n: int = 4096, dtype=cutlass.BFloat16, op: str = "rmsnorm",
                weight: bool = True, bias: bool = False, broken: str | None = None, plan: RowPlan | None = None):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin; M and N stay run-time values."""
    return _compile(_settings(op, dtype, n, weight, bias, broken, plan), arch)


def kernel_for(op: str, dtype, n: int, weight: bool, bias: bool, broken: str | None = None,
               plan: RowPlan | None = None, arch: str = "sm_90a", m: int | None = None, sms: int | None = None):
    """The compiled kernel for these settings (a launch of `m` rows on `sms` SMs picks its plan with
    rowwise_common.choose_plan), from the cache (rowwise_common.cached) or compiled now."""
    kernel = _settings(op, dtype, n, weight, bias, broken, plan, m, sms)
    key = (KERNEL_NAME, op, dtype.__name__, kernel.plan, kernel.exact, weight, bias, broken, arch)
    return common.cached(key, lambda: _compile(kernel, None))


def _launch(op: str, x, residual, weight, bias, out, residual_out, eps: float, broken: str | None,
            plan: RowPlan | None):
    import torch

    common.check_rows("x", x)
    dtype = common.torch_to_cute_dtype(x.dtype)
    m, n = x.shape
    NormForward.can_implement(dtype, n)
    for name, vector in (("weight", weight), ("bias", bias)):
        if vector is not None:
            common.check_vector(name, vector, x)
    if residual is not None:
        common.check_like("residual", residual, x)
    out = torch.empty_like(x) if out is None else out
    common.check_like("out", out, x)
    if residual is not None:
        residual_out = torch.empty_like(x) if residual_out is None else residual_out
        common.check_like("residual_out", residual_out, x)
    if m == 0:
        return out, residual_out
    major, minor = torch.cuda.get_device_capability(x.device)
    compiled = kernel_for(op, dtype, n, weight is not None, bias is not None, broken, plan, f"sm_{major}{minor}a",
                          m, common.sm_count(x.device))
    rows_x = common.row_view(x)
    vector_x = common.vector_view(x[0])
    compiled(rows_x,
             common.row_view(residual) if residual is not None else rows_x,
             common.vector_view(weight) if weight is not None else vector_x,
             common.vector_view(bias) if bias is not None else vector_x,
             common.row_view(out),
             common.row_view(residual_out) if residual is not None else rows_x,
             Float32(eps), common.current_stream())
    return out, residual_out


def rmsnorm_forward(x, weight, out=None, eps: float = 1e-6, *, broken: str | None = None,
                    plan: RowPlan | None = None):
    """RMSNorm of each row of x (M, N) with weight (N,), into `out` (allocated when None); launched on
    the current torch stream. `broken` selects a broken variant (negative controls only), `plan` a
    row plan other than plan_row's (tuning only)."""
    if weight is None:
        raise ValueError("weight: None; rmsnorm_forward needs a weight (add_rmsnorm_forward takes none)")
    return _launch("rmsnorm", x, None, weight, None, out, None, eps, broken, plan)[0]


def add_rmsnorm_forward(x, residual, weight=None, out=None, residual_out=None, eps: float = 1e-6, *,
                        broken: str | None = None, plan: RowPlan | None = None):
    """h = x + residual (rounded to x's dtype) into `residual_out`, and RMSNorm of h (times `weight`
    when given) into `out`, in one pass; both allocated when None. Returns (out, residual_out)."""
    return _launch("add_rmsnorm", x, residual, weight, None, out, residual_out, eps, broken, plan)


def layernorm_forward(x, weight, bias=None, out=None, eps: float = 1e-5, *, broken: str | None = None,
                      plan: RowPlan | None = None):
    """LayerNorm of each row of x (M, N) with weight (N,) and optional bias (N,), into `out`."""
    if weight is None:
        raise ValueError("weight: None; layernorm_forward needs a weight")
    return _launch("layernorm", x, None, weight, bias, out, None, eps, broken, plan)[0]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--op", default="rmsnorm", choices=OPS)
    parser.add_argument("--n", type=int, default=4096)
    args = parser.parse_args()
    from kernelwiki.harness import compile as compile_mod

    emitted = compile_mod.from_cute(compile_for(args.arch, args.n, op=args.op, bias=args.op == "layernorm"), args.arch)
    print(emitted.sass or emitted.ptx)
