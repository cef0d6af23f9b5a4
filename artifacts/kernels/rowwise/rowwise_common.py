"""What the row-wise kernels (rmsnorm.py, softmax.py) share: the launch plan for a row length, the
per-thread partition of a row tile, the row reduction (warp shuffles, then shared memory across the
warps of a row, then distributed shared memory across the CTAs of a cluster) and the host side
(input checks, CuTe views, fake tensors for compiling without a GPU, the current stream, the cache
of compiled kernels).

Why the row lives in registers: a row-wise op reads each element once and writes it once, so the
only way to reach the copy ceiling is to issue every load of a row before the first reduction
needs it and never touch memory again in between. Each thread owns VECS_PER_THREAD 16-byte
vectors of its row (32 bf16 values), loaded with one LDG.128 each; a row too long for one CTA at
that density is split over a cluster of CTAs whose partial sums meet in distributed shared memory.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

VECTOR_BYTES = 16          # one LDG.E.128 / STG.E.128 per vector
VECS_PER_THREAD = 4        # 16-byte vectors of the row each thread keeps in registers
MIN_CTA_THREADS = 128      # short rows: several rows per CTA, so a CTA still has four warps
MAX_CTA_THREADS = 512      # one CTA's share of a row; longer rows go to a cluster
MAX_CLUSTER = 8            # the portable cluster size on sm_90
WARP = 32
MAX_N = VECS_PER_THREAD * MAX_CTA_THREADS * MAX_CLUSTER * 8   # 131072 bf16 elements (16 bytes = 8)

DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, value))))


@dataclass(frozen=True)
class RowPlan:
    """How one row of `n` elements is spread over threads, warps and CTAs (all compile-time).

    A CTA holds `rows_per_cta` rows side by side; `threads_per_row` threads of it share a row,
    each with `vecs_per_thread` vectors of `vec` elements, strided by threads_per_row * vec so that a
    warp's loads are contiguous (coalesced); `cluster_n` CTAs share one row when it does not fit.
    """

    vec: int
    threads_per_row: int
    vecs_per_thread: int
    cluster_n: int
    cta_threads: int

    @property
    def rows_per_cta(self) -> int:
        return self.cta_threads // self.threads_per_row

    @property
    def warps_per_row(self) -> int:
        return max(1, self.threads_per_row // WARP)

    @property
    def cta_cols(self) -> int:
        """Columns of a row one CTA holds."""
        return self.vec * self.threads_per_row * self.vecs_per_thread

    @property
    def partials(self) -> int:
        """Partial results of one row that meet in shared memory (one per warp of the row, per CTA)."""
        return self.warps_per_row * self.cluster_n

    def covers_exactly(self, n: int) -> bool:
        """True when the cluster's tile is exactly the row: no column predicates needed."""
        return self.cta_cols * self.cluster_n == n


def plan_row(n: int, dtype_width: int) -> RowPlan:
    """The plan for rows of `n` elements of `dtype_width` bits (checked by `check_row_length`)."""
    vec = VECTOR_BYTES * 8 // dtype_width
    vectors = n // vec
    per_cta_max = VECS_PER_THREAD * MAX_CTA_THREADS
    cluster_n = math.ceil(vectors / per_cta_max)   # any size up to 8: no CTA of the cluster is all padding
    threads_per_row = min(MAX_CTA_THREADS, _pow2_at_least(math.ceil(vectors / (VECS_PER_THREAD * cluster_n))))
    vecs_per_thread = math.ceil(vectors / (threads_per_row * cluster_n))
    cta_threads = max(MIN_CTA_THREADS, threads_per_row)
    return RowPlan(vec, threads_per_row, vecs_per_thread, cluster_n, cta_threads)


def check_row_length(n: int, dtype_width: int) -> None:
    """ValueError naming N when a row cannot be planned: whole 16-byte vectors, at most MAX_N."""
    vec = VECTOR_BYTES * 8 // dtype_width
    if n <= 0:
        raise ValueError(f"N={n}: rows must have at least one element")
    if n % vec:
        raise ValueError(f"N={n} is not a multiple of {vec} elements: rows are read in {VECTOR_BYTES}-byte "
                         f"vectors (pad the row to a multiple of {vec})")
    limit = MAX_N * 16 // dtype_width
    if n > limit:
        raise ValueError(f"N={n} exceeds {limit}: a row is held in the registers of at most {MAX_CLUSTER} CTAs "
                         f"of {MAX_CTA_THREADS} threads")


# --- kernel side ---------------------------------------------------------------------------------------

def row_tiled_copy(dtype, plan: RowPlan):
    """The tiled copy of a (rows_per_cta, threads_per_row * vec) slab: thread (row, t) moves one 16-byte
    vector at columns t*vec ... t*vec+vec-1; repeated over a CTA's columns it gives each thread
    vecs_per_thread vectors strided by threads_per_row*vec."""
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=VECTOR_BYTES * 8)
    threads = cute.make_ordered_layout((plan.rows_per_cta, plan.threads_per_row), order=(1, 0))
    values = cute.make_layout((1, plan.vec))
    return cute.make_tiled_copy_tv(atom, threads, values)


@cute.jit
def column_predicate(tXcX: cute.Tensor, n: Int32) -> cute.Tensor:
    """One flag per vector of the thread's fragment: does it start inside the row? (N is a multiple of
    the vector, so a vector is either wholly inside or wholly outside.)"""
    tXpX = cute.make_rmem_tensor(cute.make_layout((1, cute.size(tXcX, mode=[1]), cute.size(tXcX, mode=[2])),
                                                  stride=(0, cute.size(tXcX, mode=[2]), 1)), cutlass.Boolean)
    for m in cutlass.range_constexpr(cute.size(tXcX, mode=[1])):
        for v in cutlass.range_constexpr(cute.size(tXcX, mode=[2])):
            tXpX[0, m, v] = cute.elem_less(tXcX[(0, 0), m, v][1], n)
    return tXpX


@cute.jit
def row_reduce(value: Float32, op: cutlass.Constexpr, identity: cutlass.Constexpr[float], sPartial: cute.Tensor,
               mbar: cute.Pointer, slot: cutlass.Constexpr[int], plan: cutlass.Constexpr,
               first: cutlass.Constexpr[bool] = False) -> Float32:
    """Reduce `value` over the threads that share this thread's row (the whole cluster for a split row);
    every one of them gets the result.

    1. butterfly shuffles within the row's threads of a warp;
    2. if the row spans warps: lane 0 of each warp writes its partial to sPartial[row, warp, slot],
       bar.sync, and each warp reduces the row's partials;
    3. if the row spans the CTAs of a cluster: lane r of each warp pushes the warp's partial into
       sPartial[0, rank * warps_per_row + warp, slot] of CTA r with st.async, which counts its 4 bytes
       against CTA r's mbarrier `mbar + slot`; each CTA arms its own barrier for all partials of the
       row (arrive + expect_tx) and waits on it. No cluster-wide barrier and no memory fence: the
       barrier completes when the bytes have landed.
    A slot is written once per kernel, so no barrier is needed before writing it. `first`: the first
    reduction of a split row waits for `cluster_start`'s arrive (every CTA of the cluster has started
    and initialized its barriers) before the first remote store.
    """
    value = cute.arch.warp_reduction(value, op, threads_in_group=min(plan.threads_per_row, WARP))
    if const_expr(plan.partials > 1):
        tidx, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        row = tidx // plan.threads_per_row
        warp_in_row = (tidx % plan.threads_per_row) // WARP
        if const_expr(plan.cluster_n == 1):
            if lane == 0:
                sPartial[row, warp_in_row, slot] = value
            cute.arch.barrier()
        else:
            if const_expr(first):
                cute.arch.cluster_wait()
            if tidx == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(mbar + slot, plan.partials * 4)
            rank = cute.arch.block_idx_in_cluster()
            if lane < plan.cluster_n:
                local = sPartial.iterator + cute.crd2idx((row, rank * plan.warps_per_row + warp_in_row, slot),
                                                         sPartial.layout)
                push_partial(value, local, mbar + slot, lane)
            cute.arch.mbarrier_wait(mbar + slot, 0)
        value = Float32(identity)
        for i in cutlass.range_constexpr(math.ceil(plan.partials / WARP)):
            if lane + i * WARP < plan.partials:
                value = op(value, sPartial[row, lane + i * WARP, slot])
        # every lane needs the row's result: a butterfly over the whole warp (lanes past the partials
        # hold the identity), not over the first `partials` lanes only, which left lanes 4..31 of a
        # 4-warp row with the identity (seen on the H200: N = 4096 and 2928 wrong, 1024 and 131072 right)
        value = cute.arch.warp_reduction(value, op, threads_in_group=WARP)
    return value


@cute.jit
def push_partial(value: Float32, local: cute.Pointer, local_mbar: cute.Pointer, peer: Int32) -> None:
    """st.async of one float into CTA `peer`'s copy of `local`, completing 4 bytes of the transaction
    on that CTA's copy of `local_mbar` (both addresses mapped into the cluster window with mapa)."""
    remote = cute.arch.map_dsmem_ptr(local, peer)
    remote_mbar = cute.arch.map_dsmem_ptr(local_mbar, peer)
    cute.arch.inline_ptx("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [{$r0}], {$r1}, [{$r2}];",
                         read_only_args=[Int32(remote.toint()), value, Int32(remote_mbar.toint())])


@cute.jit
def cluster_start(mbar: cute.Pointer, slots: cutlass.Constexpr[int], plan: cutlass.Constexpr) -> None:
    """A split row's CTAs initialize one transaction barrier per reduction and announce that they run
    (a relaxed arrive after the init fence); the first row_reduce waits for the whole cluster's
    arrive before storing into a peer. Early, so the wait costs nothing after the loads."""
    if const_expr(plan.cluster_n > 1):
        tidx, _, _ = cute.arch.thread_idx()
        if tidx < slots:
            cute.arch.mbarrier_init(mbar + tidx, 1)
        cute.arch.mbarrier_init_fence()
        cute.arch.cluster_arrive_relaxed()


def allocate_reduction(smem, plan: RowPlan, slots: int):
    """sPartial (rows_per_cta, partials, slots) float32 and, for a split row, one mbarrier per slot."""
    sPartial = smem.allocate_tensor(Float32, partial_layout(plan, slots), byte_alignment=16)
    mbar = smem.allocate_array(cutlass.Int64, num_elems=slots) if plan.cluster_n > 1 else None
    return sPartial, mbar


def partial_layout(plan: RowPlan, slots: int):
    """sPartial: (rows_per_cta, partials, slots) float32 in shared memory."""
    return cute.make_ordered_layout((plan.rows_per_cta, plan.partials, slots), order=(1, 0, 2))


def fmax(a: Float32, b: Float32) -> Float32:
    return cute.arch.fmax(a, b)


def fadd(a: Float32, b: Float32) -> Float32:
    return a + b


# --- host side -------------------------------------------------------------------------------------------

def torch_to_cute_dtype(dtype) -> Any:
    import torch

    table = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}   # the row kernels' types
    if dtype not in table:
        raise ValueError(f"dtype {dtype} unsupported; supported: torch.bfloat16, torch.float16")
    return table[dtype]


def check_rows(name: str, tensor) -> None:
    """A 2-D CUDA tensor whose rows are contiguous and start on 16-byte boundaries."""
    if tensor.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D (M, N) tensor, got shape {tuple(tensor.shape)}; "
                         f"flatten leading dimensions with .reshape(-1, N)")
    if not tensor.is_cuda:
        raise ValueError(f"{name}: tensor on {tensor.device}; the kernel runs on a CUDA device")
    if tensor.shape[1] > 1 and tensor.stride(1) != 1:
        raise ValueError(f"{name}: last-dimension stride {tensor.stride(1)} != 1; the kernel reads contiguous "
                         f"rows: call .contiguous()")
    size = tensor.element_size()
    if tensor.data_ptr() % VECTOR_BYTES:
        raise ValueError(f"{name}: data_ptr {tensor.data_ptr():#x} is not {VECTOR_BYTES}-byte aligned; "
                         f"pass a tensor that starts on a {VECTOR_BYTES}-byte boundary, e.g. .clone()")
    if tensor.shape[0] > 1 and (tensor.stride(0) * size) % VECTOR_BYTES:
        raise ValueError(f"{name}: row stride {tensor.stride(0)} is not a multiple of {VECTOR_BYTES // size} "
                         f"elements ({VECTOR_BYTES} bytes)")


def row_view(tensor):
    """The dynamic-layout CuTe view of an (M, N) tensor with contiguous rows, of the type fake_rows gives."""
    from cutlass.cute.runtime import from_dlpack

    if tensor.shape[0] == 1:    # the row stride of a single row addresses nothing: make it TMA-safe anyway
        tensor = tensor.as_strided(tensor.shape, (max(tensor.shape[1], 1), 1))
    return from_dlpack(tensor, assumed_align=VECTOR_BYTES).mark_layout_dynamic(leading_dim=1)


def vector_view(tensor):
    from cutlass.cute.runtime import from_dlpack

    return from_dlpack(tensor, assumed_align=VECTOR_BYTES).mark_layout_dynamic(leading_dim=0)


def fake_rows(dtype):
    """A fake (M, N) tensor for compiling: 32-bit dynamic extents, a dynamic 64-bit row stride that is a
    multiple of 16 bytes, stride 1 along the row, 16-byte-aligned base."""
    from cutlass.cute.runtime import make_fake_tensor

    per_vector = VECTOR_BYTES * 8 // dtype.width
    return make_fake_tensor(dtype, (cute.sym_int32(), cute.sym_int32()),
                            (cute.sym_int64(divisibility=per_vector), 1), assumed_align=VECTOR_BYTES)


def fake_vector(dtype):
    from cutlass.cute.runtime import make_fake_tensor

    return make_fake_tensor(dtype, (cute.sym_int32(),), (1,), assumed_align=VECTOR_BYTES)


def compile_options(arch: str | None) -> str:
    """--gpu-arch for compiling on a machine without the GPU (keeping PTX and cubin to scan)."""
    if arch is None:
        return ""
    os.makedirs(DUMP_DIR, exist_ok=True)
    return f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}"


def current_stream():
    """The stream torch has current now: read at every launch, so launches can be captured in a graph."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


_COMPILED: dict = {}


def cached(key: tuple, compile_fn: Callable[[], Any]) -> Any:
    """One compile per configuration and process (shapes are run-time values of the compiled kernel)."""
    if key not in _COMPILED:
        _COMPILED[key] = compile_fn()
    return _COMPILED[key]
