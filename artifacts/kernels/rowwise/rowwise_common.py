"""What the row-wise kernels (norm.py, softmax.py) share: the launch plan for a row length, the staging
of a CTA's rows through shared memory, the per-thread partition, the row reduction (warp shuffles,
then shared memory across the warps of a row, then distributed shared memory across the CTAs of a
cluster) and the host side (input checks, CuTe views, fake tensors for compiling without a GPU, the
current stream, the cache of compiled kernels in memory and on disk).

Why the rows are staged through shared memory: a row-wise op reads each element once and writes it
once, and nothing can be written before the row's reduction is known, so the only way to reach the
copy ceiling is to keep enough bytes in flight per SM while some CTAs wait on their reduction. When
the row lives in registers, the register file caps that: the first version (4 16-byte vectors per
thread, up to 512 threads) fitted 2 CTAs of a long row per SM, 64 KiB in flight, and fell to 0.76-0.93
of the copy at N >= 32768. Here each thread issues `cp.async` (LDGSTS.128, L1 bypassed) for all its
vectors of the CTA's tile (STAGE_BYTES, 32 KiB by default) into shared memory, so the bytes in flight
cost no registers; the passes over the row then read shared memory one vector at a time in a short
loop, so a thread holds a few vectors at most, and about six CTAs fit an SM (smem, not registers,
is the limit). A thread reads back only the vectors it copied itself: a `cp.async.wait_group`, no
CTA barrier. A row longer than one CTA's tile is split over a cluster of up to 16 CTAs.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import cpasync

VECTOR_BYTES = 16          # one LDGSTS.128 / LDS.128 / STG.E.128 per vector
STAGE_BYTES = 32 * 1024    # input bytes one CTA stages in shared memory (all its inputs together)
MAX_STAGE_BYTES = 128 * 1024   # the most a CTA stages when a row needs more than MAX_CLUSTER CTAs of STAGE_BYTES
MIN_CTA_THREADS = 128      # short rows: several rows per CTA, so a CTA still has four warps
MAX_CTA_THREADS = 256      # softmax: 8 vectors per thread at STAGE_BYTES
WEIGHTED_CTA_THREADS = 128 # norms: 16 vectors per thread, so fewer threads hold the weights in registers
LATENCY_CTA_THREADS = 1024 # a launch of less than one wave: each row spread thin (LATENCY_VECS per thread)
LATENCY_VECS = 2
MAX_CLUSTER = 16           # 16 is a non-portable cluster size on sm_90 (CuTe DSL allows it on every kernel)
SMEM_PER_SM = 228 * 1024   # sm_90: shared memory per SM, of which each CTA's 1 KiB reserve
REGISTERS_PER_SM = 65536
THREADS_PER_SM = 2048
UNROLL = 2                 # vectors a pass over shared memory handles per loop iteration
WARP = 32
MAX_N = 262144
SUPPORTED = ("BFloat16", "Float16", "Float32")

DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
SOURCES = sorted(Path(__file__).resolve().parent.glob("*.py"))


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, value))))


@dataclass(frozen=True)
class RowPlan:
    """How one row of `n` elements is spread over threads, warps and CTAs (all compile-time).

    A CTA holds `rows_per_cta` rows side by side; `threads_per_row` threads of it share a row,
    each with `vecs_per_thread` vectors of `vec` elements per input, strided by threads_per_row * vec
    so that a warp's accesses are contiguous (coalesced, and conflict-free in shared memory);
    `cluster_n` CTAs share one row when it does not fit one CTA's stage.
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

    def stage_bytes(self, inputs: int, width: int) -> int:
        """Shared memory the staged inputs of one CTA take."""
        return inputs * self.rows_per_cta * self.cta_cols * width // 8

    def ctas_per_sm(self, inputs: int, width: int, held_vectors: int = 0, exact: bool = True) -> int:
        """CTAs of this plan one SM holds at once: shared memory (the stage, the partials and the 1 KiB
        reserve of each CTA), threads, and registers when each thread holds `held_vectors` 16-byte
        vectors per vector of its row in registers (a norm's weight: 4 registers each). The register
        estimate - 28 of the thread's own, the held vectors, and 5 per vector more where column
        predicates guard an unrolled pass - is what ptxas fitted without spilling on sm_90a
        (tests/test_rowwise.py compiles every plan the probe runs and looks for local memory)."""
        smem = self.stage_bytes(inputs, width) + 2048
        registers = 28 + 4 * held_vectors * self.vecs_per_thread + (0 if exact else 5 * self.vecs_per_thread)
        registers = -(-registers // 8) * 8
        return max(1, min(SMEM_PER_SM // smem, THREADS_PER_SM // self.cta_threads,
                          REGISTERS_PER_SM // (registers * self.cta_threads), 32))


def plan_row(n: int, dtype_width: int, inputs: int = 1, stage_bytes: int = STAGE_BYTES,
             max_threads: int = MAX_CTA_THREADS) -> RowPlan:
    """The plan for rows of `n` elements of `dtype_width` bits with `inputs` staged tensors per row
    (checked by `check_row_length`): the CTA's stage is `stage_bytes` (grown, up to MAX_STAGE_BYTES,
    when the row would need more than MAX_CLUSTER CTAs), shared by up to `max_threads` threads."""
    vec = VECTOR_BYTES * 8 // dtype_width
    vectors = n // vec
    row_bytes = inputs * n * dtype_width // 8
    stage = max(stage_bytes, _pow2_at_least(math.ceil(row_bytes / MAX_CLUSTER)))
    per_cta = stage // (VECTOR_BYTES * inputs)                 # vectors of one input a CTA holds at most
    cluster_n = math.ceil(vectors / per_cta)                    # no CTA of the cluster is all padding
    per_thread = max(1, per_cta // max_threads)
    threads_per_row = min(max_threads, _pow2_at_least(math.ceil(vectors / (per_thread * cluster_n))))
    vecs_per_thread = math.ceil(vectors / (threads_per_row * cluster_n))
    cta_threads = max(MIN_CTA_THREADS, threads_per_row)
    return RowPlan(vec, threads_per_row, vecs_per_thread, cluster_n, cta_threads)


def choose_plan(n: int, dtype_width: int, inputs: int = 1, weighted: bool = False, m: int | None = None,
                sms: int | None = None) -> RowPlan:
    """The plan a launch of M rows uses: plan_row at STAGE_BYTES (threads per CTA: MAX_CTA_THREADS, or
    WEIGHTED_CTA_THREADS for a norm whose weights sit in registers), unless the launch fills less than
    one wave of the `sms` SMs (decode: M of a few rows) - then the latency plan, LATENCY_VECS vectors per
    thread and up to LATENCY_CTA_THREADS threads per row, so each pass over the row is short."""
    plan = plan_row(n, dtype_width, inputs, STAGE_BYTES, WEIGHTED_CTA_THREADS if weighted else MAX_CTA_THREADS)
    if m is not None and sms and math.ceil(m / plan.rows_per_cta) * plan.cluster_n < sms:
        latency_stage = LATENCY_CTA_THREADS * LATENCY_VECS * VECTOR_BYTES * inputs
        plan = plan_row(n, dtype_width, inputs, latency_stage, LATENCY_CTA_THREADS)
    return plan


def check_dtype(dtype) -> None:
    """ValueError naming a CuTe element type the row kernels do not take."""
    if getattr(dtype, "__name__", str(dtype)) not in SUPPORTED:
        raise ValueError(f"dtype {dtype} unsupported; supported: {', '.join(SUPPORTED)}")


def check_row_length(n: int, dtype_width: int) -> None:
    """ValueError naming N when a row cannot be planned: whole 16-byte vectors, at most MAX_N."""
    vec = VECTOR_BYTES * 8 // dtype_width
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"N={n}: rows must have at least one element")
    if n % vec:
        raise ValueError(f"N={n} is not a multiple of {vec} elements: rows are read in {VECTOR_BYTES}-byte "
                         f"vectors (pad the row to a multiple of {vec})")
    if n > MAX_N:
        raise ValueError(f"N={n} exceeds {MAX_N}: a row is staged in the shared memory of at most {MAX_CLUSTER} "
                         f"CTAs of {MAX_STAGE_BYTES // 1024} KiB")


# --- kernel side ---------------------------------------------------------------------------------------

def row_tiled_copy(dtype, plan: RowPlan, asynchronous: bool):
    """The tiled copy of a (rows_per_cta, threads_per_row * vec) slab: thread (row, t) moves one 16-byte
    vector at columns t*vec ... t*vec+vec-1; repeated over a CTA's columns it gives each thread
    vecs_per_thread vectors strided by threads_per_row*vec. `asynchronous`: cp.async global -> shared
    (.cg: through L2 only), else plain vector loads and stores (LDG/STG/LDS)."""
    op = cpasync.CopyG2SOp(cpasync.LoadCacheMode.GLOBAL) if asynchronous else cute.nvgpu.CopyUniversalOp()
    atom = cute.make_copy_atom(op, dtype, num_bits_per_copy=VECTOR_BYTES * 8)
    threads = cute.make_ordered_layout((plan.rows_per_cta, plan.threads_per_row), order=(1, 0))
    values = cute.make_layout((1, plan.vec))
    return cute.make_tiled_copy_tv(atom, threads, values)


def stage_layout(plan: RowPlan):
    """A CTA's staged rows in shared memory: (rows_per_cta, cta_cols), row-major."""
    return cute.make_ordered_layout((plan.rows_per_cta, plan.cta_cols), order=(1, 0))


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
def vector_in_row(tXcX: cute.Tensor, v: Int32, n: Int32) -> cutlass.Boolean:
    """Whether the thread's vector `v` (a run-time index) starts inside the row."""
    return tXcX[(0, 0), 0, v][1] < n


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

    table = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
    if dtype not in table:
        raise ValueError(f"dtype {dtype} unsupported; supported: torch.bfloat16, torch.float16, torch.float32")
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


def check_like(name: str, tensor, x) -> None:
    """`tensor` has x's shape and dtype and passes check_rows."""
    check_rows(name, tensor)
    if tensor.shape != x.shape or tensor.dtype != x.dtype:
        raise ValueError(f"{name}: shape {tuple(tensor.shape)} dtype {tensor.dtype}; expected {tuple(x.shape)} "
                         f"{x.dtype}")


def check_vector(name: str, tensor, x) -> None:
    """A contiguous, 16-byte aligned (N,) tensor of x's dtype on x's device."""
    n = x.shape[1]
    if tensor.dtype != x.dtype:
        raise ValueError(f"{name}: dtype {tensor.dtype} != x dtype {x.dtype}")
    if tensor.dim() != 1 or tensor.shape[0] != n or (n > 1 and tensor.stride(0) != 1):
        raise ValueError(f"{name}: expected a contiguous ({n},) tensor, got shape {tuple(tensor.shape)} "
                         f"strides {tensor.stride()}")
    if tensor.device != x.device:
        raise ValueError(f"{name}: on {tensor.device}, x on {x.device}")
    if tensor.data_ptr() % VECTOR_BYTES:
        raise ValueError(f"{name}: data_ptr {tensor.data_ptr():#x} is not {VECTOR_BYTES}-byte aligned")


def row_view(tensor):
    """The dynamic-layout CuTe view of an (M, N) tensor with contiguous rows, of the type fake_rows gives."""
    from cutlass.cute.runtime import from_dlpack

    if tensor.shape[0] == 1:    # the row stride of a single row addresses nothing: give it a valid one
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


def sm_count(device=None) -> int:
    import torch

    return torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device()).multi_processor_count


def current_stream():
    """The stream torch has current now: read at every launch, so launches can be captured in a graph."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


# --- compiled kernels: in memory, and on disk between processes --------------------------------------------

_COMPILED: dict = {}


def cache_dir() -> Path:
    """Where compiled kernels are kept between processes: $KERNELWIKI_KERNEL_CACHE, else the user cache."""
    base = os.environ.get("KERNELWIKI_KERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kernelwiki", "kernels")
    return Path(base)


def cache_name(key: tuple) -> str:
    """The file name of a compiled kernel: its compile-time settings, the CuTe DSL version and this
    package's sources, hashed (a changed kernel is never loaded from an old file)."""
    h = hashlib.sha256(repr(key).encode())
    h.update(cutlass.__version__.encode())
    for path in SOURCES:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return "rowwise_" + h.hexdigest()[:24]


def cached(key: tuple, compile_fn: Callable[[], Any]) -> Any:
    """The compiled kernel for `key` (everything compile-time: kernel, dtype, plan, variant, GPU arch):
    from memory, else from the disk cache (an object file exported by an earlier process, loaded in a few
    milliseconds), else `compile_fn()`, exported for the next process. Compiling every
    configuration a probe needs in parallel processes first (`precompile`) leaves the timing process
    only loads."""
    from cutlass.cute.runtime import load_module

    if key in _COMPILED:
        return _COMPILED[key]
    name = cache_name(key)
    obj = cache_dir() / f"{name}.o"
    compiled = None
    if obj.is_file():
        try:
            compiled = getattr(load_module(str(obj)), name)
        except Exception as err:   # noqa: BLE001  (a truncated or foreign file: compile over it)
            warnings.warn(f"{obj}: cached kernel unreadable ({type(err).__name__}: {err}); recompiling")
    if compiled is None:
        compiled = compile_fn()
        try:
            obj.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=obj.parent) as tmp:
                compiled.export_to_c(tmp, name)
                os.replace(os.path.join(tmp, f"{name}.o"), obj)
        except Exception as err:   # noqa: BLE001  (a cache that cannot be written costs a compile next time)
            warnings.warn(f"{obj.parent}: cannot store the compiled kernel ({type(err).__name__}: {err})")
    _COMPILED[key] = compiled
    return compiled
