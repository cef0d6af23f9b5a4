"""A warp-specialized, persistent wgmma GEMM for Hopper (sm_90a) in CuTe DSL.

What it does
    D[l, m, n] = alpha * sum_k A[l, m, k] * B[l, n, k]  (A: (L,) M x K, B: (L,) N x K, each K-major or,
    for 16-bit types, M-/N-major, i.e. transposed in memory; D: (L,) M x N with N contiguous),
    bf16/fp16, tf32 (fp32 in memory) or fp8 e4m3 inputs, fp32 accumulation in registers, D in
    bf16/fp16/fp32 (alpha carries the per-tensor scales of fp8: scale_a * scale_b; 1.0 otherwise), or
    e4m3 through the fused epilogue's quantize-on-store; optionally D = act(alpha * A B^T + bias) +
    beta * C fused in the epilogue (fused_epilogue.py).
    TF32 goes through our own op (tf32_mma.py): the DSL does not expose one.
    One CTA per SM, clusters of cluster_mn CTAs, tile_m = 64 x (consumer warpgroups on one tile):
      warpgroup 0  producer: gives registers back (setmaxnreg down), and its warp 0 TMA-loads A and
                   B K-tiles into a `stages`-deep shared-memory ring; B is multicast to the CTAs of
                   the cluster that share it (cluster_m > 1), A to those along N (cluster_n > 1);
      warpgroups 1.. consumers (setmaxnreg up), one or two. Cooperative (the default): each owns 64
                   rows of every tile. Ping-pong (schedule="pingpong"; bf16/fp16, tile_m 64, no
                   split-K): two warpgroups on alternate 64-row tiles, whose ordered named barriers
                   (gemm_base.WarpgroupOrder) let one run its epilogue while the other issues its
                   mainloop. Per K-tile fence / wgmma / commit, then `wait_group 1` keeps one K-tile
                   of wgmma in flight while the previous stage goes back to the producer;
      epilogue     the consumers convert the accumulator, write it to shared memory with stmatrix
                   (epi_tile slices, a small ring), and one warp TMA-stores each slice; a fused
                   epilogue (fused_epilogue.py: bias, GELU/SiLU, residual) works on each slice's
                   FP32 values before the conversion.
    A static persistent scheduler walks the output tiles (m, n, l x split_k) cluster by cluster, so
    the producer starts the next tile's loads while the consumers finish the current one.
    Everything but the mainloop is gemm_base.Sm90GemmBase's, shared with the FP8 GEMM; pipeline_checks
    checks the ring's arrive counts and transaction bytes while the kernel is traced.

Shapes are dynamic: M, N, K, L and every stride are run-time values of one compiled kernel, so a new
    shape costs a launch, not a compile (and a size-1 mode stays a real mode of the TMA descriptor:
    with static shapes CuTe folds a static M = 1 away and emits a 1-D TMA for a 2-D box, which is
    what crashed M = 1 before).
Split-K (split_k > 1), for problems with fewer output tiles than SMs: the K tiles are divided into
    split_k contiguous ranges, one work tile each, reduced inside the same launch (its own compiled
    kernel, reduce_splits): every split stores its FP32 partial to a workspace and counts itself on
    the output tile's counter; the last to arrive sums the split_k partials in the fixed order
    0 .. split_k - 1 (the same bits every run) and runs the epilogue into D, fused or not, and resets
    the counter. Nothing waits on another CTA, so any CTA order completes (HopperGemm.reduce_partials).
Swap-AB (compile_gemm(swap_ab=True)), for a few token rows against a weight: the kernel runs on (b, a)
    and computes D^T, so the weight's rows fill the 64-row side of the wgmma and the tokens its narrow
    N side (16, 32 or 64 wide tiles); the epilogue stores D^T M-major (an M-major shared-memory slice
    written by the transposed stmatrix, then a TMA store through M-major strides), which is the
    user's (M, N) output with N contiguous: no transpose, no padding of the tokens.
choose_config(m, n, k, l) picks tile_m, tile_n, the cluster and split_k from the waves of tiles on
    the SMs; compile_gemm / gemm use it unless told otherwise. Its swap-AB rule (swap_ab_pays) is
    used for swap_ab=None only once SWAP_AB_AUTO is switched on.

Constraints (can_implement): A and B of the same type, bf16, fp16, tf32 or e4m3 (tf32 and fp8 only
    K-major: wgmma transposes 16-bit operands only); the contiguous dimension of A, B and D and every
    other stride 16-byte aligned, base pointers 16-byte aligned (TMA); any M, N, K >= 1 otherwise:
    partial tiles are handled by TMA (loads outside the tensor read zeros, stores outside it are
    dropped). tile_m in {64, 128}; tile_n in {16, 32, 64, 128, 192, 256} (ping-pong: from 64);
    cluster_mn in {(1,1), (2,1), (1,2)};
    split_k in 1..16, with cluster_mn (1,1) only when above 1 (not re-tested since a scratch harness
    bug) and the cooperative schedule; `out` must not overlap a or b, nor itself (no stride 0). D M-major
    (d_major='m', what swap-AB runs): bf16/fp16 D, cooperative, no split-K, no fused epilogue, M a
    multiple of 16 bytes.

Compile only (any machine): python -m artifacts.kernels.hopper_gemm.hopper_gemm --arch sm_90a
Run: probe-hopper-gemm (kernelwiki probe run --probe probe-hopper-gemm) on an H200.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace
from pathlib import Path

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.tensor_utils import LayoutEnum
from . import fused_epilogue
from .fused_epilogue import EpilogueSpec
from .gemm_base import EPI_TILE_N, SCHEDULES, NamedBarrier, Sm90GemmBase, WarpgroupOrder
from .sm90_common import (DUMP_DIR, SMEM_BYTES, WARPGROUP_THREADS, batch_last, cached_kernel, canonical,
                         check_alignment, current_stream, cute_view, fake_tensor, max_active_clusters)
from .tf32_mma import make_tiled_mma_tf32

WGMMA_M = 64            # rows of one warpgroup's wgmma
K_TILE_BYTES = 128      # one 128-byte swizzle row of K per stage: 64 bf16/fp16, 32 tf32 or 128 fp8 elements
EPI_STAGES = 4
AB_DTYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.TFloat32, cutlass.Float8E4M3FN)
D_DTYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.Float32, cutlass.Float8E4M3FN)   # e4m3: quantize-on-store
TILE_MS = (64, 128)
TILE_NS = (64, 128, 192, 256)   # what choose_config picks from without swap-AB
# narrow tiles for the swapped decode problem's small side (a few token rows as the kernel's N): less
# padded shared memory per stage; the epilogue slice is then the whole tile width
NARROW_TILE_NS = (16, 32)
CLUSTERS = ((1, 1), (2, 1), (1, 2))
MAX_SPLIT_K = 16
PINGPONG_TILE_M = WGMMA_M   # a ping-pong warpgroup owns a whole tile: one 64-row wgmma per K block
PINGPONG_AB_DTYPES = (cutlass.BFloat16, cutlass.Float16)
MAJOR_MODE = {"k": 1, "mn": 0}   # which mode of a (rows, K, L) view is contiguous
D_MAJOR_MODE = {"n": 1, "m": 0}  # which mode of D's (M, N, L) view is contiguous
D_M_MAJOR_DTYPES = (cutlass.BFloat16, cutlass.Float16)   # stmatrix's transposed form moves 16-bit values
# swap_ab=None picks swap-AB by choose_config's rule only when this is True: off until an H200 run shows
# the in-kernel swap beating the unswapped choice on decode shapes (probe-decode-gemm)
SWAP_AB_AUTO = False


@dataclass(frozen=True)
class GemmConfig:
    """The settings of one launch. tile_m, tile_n, cluster_mn and swizzle are compile-time (one compiled
    kernel each), and whether split_k is above 1 (the kernel that reduces its splits); split_k itself,
    like the shapes and strides, is a run-time value. swap_ab: the kernel runs on (b, a) into out^T, so
    tile_m, tile_n and cluster_mn are of that swapped problem (tile_m over the user's N, tile_n over M)."""
    tile_m: int = 128
    tile_n: int = 256
    cluster_mn: tuple[int, int] = (2, 1)
    split_k: int = 1
    swizzle: int = 1
    schedule: str = "cooperative"
    swap_ab: bool = False

    def describe(self) -> str:
        schedule = ", ping-pong" if self.schedule == "pingpong" else ""
        swap = ", swap-AB" if self.swap_ab else ""
        return (f"tile {self.tile_m}x{self.tile_n}, cluster {self.cluster_mn[0]}x{self.cluster_mn[1]}, "
                f"split-k {self.split_k}{schedule}{swap}")


class HopperGemm(Sm90GemmBase):
    """The mainloop of gemm_base's skeleton for one alpha-scaled product: per K tile, the consumers'
    wgmmas accumulate into registers with one K tile in flight; work tiles are (m, n, batch x split)."""

    def __init__(self, ab_dtype=cutlass.BFloat16, d_dtype=cutlass.BFloat16, tile_n: int = 256,
                 cluster_mn: tuple[int, int] = (2, 1), swizzle: int = 1, skip_last_k_tile: bool = False,
                 tile_m: int = 128, schedule: str = "cooperative", epilogue: EpilogueSpec = EpilogueSpec(),
                 d_major: str = "n", reduce_splits: bool = False, skip_last_slice: bool = False):
        self.ab_dtype, self.d_dtype, self.acc_dtype = ab_dtype, d_dtype, cutlass.Float32
        if d_major not in D_MAJOR_MODE or (d_major == "m" and d_dtype not in D_M_MAJOR_DTYPES):
            raise ValueError(f"d_major={d_major!r} with D dtype {d_dtype} unsupported: use 'n', or 'm' with D in "
                             f"{D_M_MAJOR_DTYPES}")
        self.d_layout = LayoutEnum.COL_MAJOR if d_major == "m" else LayoutEnum.ROW_MAJOR
        if schedule not in SCHEDULES or (schedule == "pingpong" and (tile_m != PINGPONG_TILE_M or
                                                                     ab_dtype not in PINGPONG_AB_DTYPES)):
            raise ValueError(f"schedule={schedule!r} with tile_m={tile_m} and A/B dtype {ab_dtype} unsupported: "
                             f"use one of {SCHEDULES}; 'pingpong' needs tile_m={PINGPONG_TILE_M} and A/B dtype "
                             f"in {PINGPONG_AB_DTYPES}")
        self.schedule = schedule
        # ping-pong: two consumer warpgroups, each on its own 64-row tile
        self.warpgroups = 2 if schedule == "pingpong" else tile_m // WGMMA_M
        self.threads = WARPGROUP_THREADS * (1 + self.warpgroups)
        self.tile_mnk = (tile_m, tile_n, K_TILE_BYTES * 8 // ab_dtype.width)
        self.cluster_mn = tuple(cluster_mn)
        self.swizzle = swizzle
        # the negative controls: output tile (0, 0) never loads or uses the last K tile of its last
        # K range (one K tile of one tile wrong: an error of a few times the gate, not a hundred)
        if skip_last_k_tile and self.cluster_mn != (1, 1):
            raise ValueError(f"skip_last_k_tile with cluster_mn={self.cluster_mn}: the partner CTA would wait "
                             f"for the skipped K tile's multicast forever; use cluster_mn=(1, 1)")
        self.skip_last_k_tile = skip_last_k_tile
        # split-K reduced inside the kernel (reduce_partials): its own compiled kernel, with a workspace
        # of partials and counters and one shared-memory word; skip_last_slice is its negative control
        # (the last split of output tile (0, 0) sums split_k - 1 slices: an off-by-one loop bound)
        if reduce_splits and schedule != "cooperative":
            raise ValueError(f"reduce_splits with schedule={schedule!r}: split-K runs the cooperative schedule")
        if skip_last_slice and not reduce_splits:
            raise ValueError("skip_last_slice without reduce_splits: it breaks the in-kernel split-K reduction")
        self.reduce_splits, self.skip_last_slice = reduce_splits, skip_last_slice
        self.smem_words = 1 if reduce_splits else 0   # "am I the last split of this tile", for every consumer
        self.epilogue = epilogue   # what the epilogue fuses (fused_epilogue.py); default: alpha * acc only
        self.epi_tile = (tile_m, min(EPI_TILE_N, tile_n))
        self.stages, self.epi_stages = self.fit_stages(EPI_STAGES, EPI_STAGES)

    @staticmethod
    def can_implement(ab_dtype, d_dtype, m: int, n: int, k: int, tile_n: int = 256,
                      cluster_mn: tuple[int, int] = (2, 1), a_major: str = "k", b_major: str = "k",
                      tile_m: int = 128, split_k: int = 1, batch: int = 1, schedule: str = "cooperative",
                      epilogue: EpilogueSpec = EpilogueSpec(), d_major: str = "n") -> None:
        """Raise ValueError naming the offending value and the supported set. d_major: which dimension
        of D is contiguous, 'n' or 'm' (what swap-AB writes: D^T of the user's product)."""
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule={schedule!r} unsupported; use one of {SCHEDULES}")
        if d_major not in D_MAJOR_MODE:
            raise ValueError(f"d_major={d_major!r} unsupported; use one of {tuple(D_MAJOR_MODE)}")
        if d_major == "m":
            # what the M-major store was built and compile-checked for
            if d_dtype not in D_M_MAJOR_DTYPES:
                raise ValueError(f"D dtype {d_dtype} with d_major='m' unsupported: the transposed stmatrix stores "
                                 f"16-bit values; use one of {D_M_MAJOR_DTYPES}")
            if epilogue.fused:
                raise ValueError(f"d_major='m' with a fused epilogue ({epilogue.describe()}) unsupported: bias and "
                                 f"residual are indexed for an N-major D")
            if split_k != 1:
                raise ValueError(f"d_major='m' with split_k={split_k} unsupported: the split-K workspace is N-major; "
                                 f"use split_k=1")
            if schedule != "cooperative":
                raise ValueError(f"d_major='m' with schedule={schedule!r} unsupported; use schedule='cooperative'")
        if schedule == "pingpong":
            # what the ping-pong path was built and compile-checked for; the rest is not implemented
            if ab_dtype not in PINGPONG_AB_DTYPES:
                raise ValueError(f"schedule='pingpong' with A/B dtype {ab_dtype} unsupported; use one of "
                                 f"{PINGPONG_AB_DTYPES} (or schedule='cooperative')")
            if tile_m != PINGPONG_TILE_M:
                raise ValueError(f"schedule='pingpong' with tile_m={tile_m} unsupported: each warpgroup owns a "
                                 f"{PINGPONG_TILE_M}-row tile; use tile_m={PINGPONG_TILE_M}")
            if split_k != 1:
                raise ValueError(f"schedule='pingpong' with split_k={split_k} unsupported; use split_k=1 "
                                 f"(or schedule='cooperative')")
        if d_dtype == cutlass.Float8E4M3FN and not epilogue.quantize:
            raise ValueError(f"D dtype {d_dtype} needs the quantizing epilogue (EpilogueSpec(quantize=True)): the "
                             f"values are scaled by 1 / D's scale before the conversion")
        if ab_dtype not in AB_DTYPES:
            raise ValueError(f"A/B dtype {ab_dtype} unsupported; use one of {AB_DTYPES}")
        if d_dtype not in D_DTYPES:
            raise ValueError(f"D dtype {d_dtype} unsupported; use one of {D_DTYPES}")
        if tile_m not in TILE_MS:
            raise ValueError(f"tile_m={tile_m} unsupported; use one of {TILE_MS}")
        tile_ns = TILE_NS if schedule == "pingpong" else NARROW_TILE_NS + TILE_NS
        if tile_n not in tile_ns:
            raise ValueError(f"tile_n={tile_n} unsupported{' with ping-pong' if schedule == 'pingpong' else ''}; "
                             f"use one of {tile_ns}")
        if tuple(cluster_mn) not in CLUSTERS:
            raise ValueError(f"cluster_mn={tuple(cluster_mn)} unsupported; use one of {CLUSTERS}")
        if not 1 <= split_k <= MAX_SPLIT_K:
            raise ValueError(f"split_k={split_k} unsupported; use 1..{MAX_SPLIT_K}")
        if split_k > 1 and tuple(cluster_mn) != (1, 1):
            # not verified on the GPU: illegal memory accesses were seen with it in scratch runs, which
            # also replayed CUDA graphs after the split-K workspace had been freed (a harness bug, the
            # likely cause); refused until re-tested. choose_config never combines them.
            raise ValueError(f"split_k={split_k} with cluster_mn={tuple(cluster_mn)} unsupported; split-K runs "
                             f"with cluster_mn=(1, 1)")
        if min(m, n, k, batch) < 1:
            raise ValueError(f"M, N, K and the batch must be positive; got M={m}, N={n}, K={k}, L={batch}")
        for name, major, mn in (("A", a_major, m), ("B", b_major, n)):
            if major not in ("k", "mn"):
                raise ValueError(f"{name} major mode {major!r} unsupported; use 'k' or 'mn'")
            if major == "mn" and ab_dtype.width != 16:
                raise ValueError(f"{name} is MN-major but {ab_dtype} is {ab_dtype.width}-bit: wgmma transposes "
                                 f"16-bit operands only; store {name} with K contiguous")
            contiguous, size = ("K", k) if major == "k" else ("M" if name == "A" else "N", mn)
            if size * ab_dtype.width % 128:
                raise ValueError(f"{contiguous}={size}: the contiguous dimension of {name} must be a multiple of "
                                 f"16 bytes for TMA ({128 // ab_dtype.width} elements of {ab_dtype})")
        contiguous, size, lines = ("M", m, "columns") if d_major == "m" else ("N", n, "rows")
        if size * d_dtype.width % 128:
            raise ValueError(f"{contiguous}={size}: {lines} of D must be a multiple of 16 bytes for TMA "
                             f"({contiguous} a multiple of {128 // d_dtype.width} for {d_dtype})")

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, alpha: cutlass.Float32,
                 split_k: cutlass.Int32, max_active_clusters: cutlass.Constexpr, stream: cuda.CUstream,
                 mBias: cute.Tensor | None = None, mC: cute.Tensor | None = None, beta: cutlass.Float32 | None = None,
                 quant: cutlass.Float32 | None = None, mPartials: cute.Tensor | None = None,
                 mCounters: cute.Tensor | None = None):
        # mA: (M, K, L) K- or M-major; mB: (N, K, L) K- or N-major; mD: (M, N, L) N-major, or M-major as
        # self.d_layout says (the TMA store atom follows mD's strides);
        # the fused epilogue's operands (None unless self.epilogue asks; stand-ins in a split kernel):
        # mBias (N,), mC (M, N, L) N-major, beta, quant (1 / D's per-tensor scale, for an e4m3 D);
        # reduce_splits: mPartials, FP32 (split_workspace's partials), and mCounters, Int32 (its counters)
        a_layout, b_layout = LayoutEnum.from_tensor(mA), LayoutEnum.from_tensor(mB)   # ROW_MAJOR = K-major
        # the warpgroups on one tile stacked along M, each issuing 64 x tile_n wgmmas
        if cutlass.const_expr(self.ab_dtype == cutlass.TFloat32):
            tiled_mma = make_tiled_mma_tf32((self.tile_warpgroups(), 1, 1), (WGMMA_M, self.tile_mnk[1]))
        else:
            tiled_mma = sm90_utils.make_trivial_tiled_mma(self.ab_dtype, self.ab_dtype, a_layout.sm90_mma_major_mode(),
                                                          b_layout.sm90_mma_major_mode(), self.acc_dtype,
                                                          (self.tile_warpgroups(), 1, 1),
                                                          tiler_mn=(WGMMA_M, self.tile_mnk[1]))
        sA_layout = sm90_utils.make_smem_layout_a(a_layout, self.tile_mnk, self.ab_dtype, self.stages)
        sB_layout = sm90_utils.make_smem_layout_b(b_layout, self.tile_mnk, self.ab_dtype, self.stages)
        sD_layout = sm90_utils.make_smem_layout_epi(self.d_dtype, self.d_layout, self.epi_tile, self.epi_stages)
        tma_a, gA_tma, tma_b, gB_tma = self.make_ab_atoms(mA, mB, sA_layout, sB_layout)
        tma_d, gD_tma = self.make_d_atom(mD, sD_layout)
        # work tiles (m, n, batch x split_k + split): every split of every output tile
        work_l = mD.shape[2] * split_k if cutlass.const_expr(self.reduce_splits) else None
        scheduler_params, grid = self.make_scheduler_params(mD, max_active_clusters, work_l)
        self.shared_storage = self.make_shared_storage(sA_layout, sB_layout, sD_layout)
        self.launch(self.kernel(tiled_mma, tma_a, gA_tma, tma_b, gB_tma, tma_d, gD_tma, sA_layout, sB_layout, sD_layout,
                                scheduler_params, alpha, split_k, mBias, mC, beta, quant, mPartials, mCounters),
                    grid, stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, gA_tma: cute.Tensor, tma_b: cute.CopyAtom,
               gB_tma: cute.Tensor, tma_d: cute.CopyAtom, gD_tma: cute.Tensor, sA_layout: cute.ComposedLayout,
               sB_layout: cute.ComposedLayout, sD_layout: cute.ComposedLayout,
               scheduler_params: utils.PersistentTileSchedulerParams, alpha: cutlass.Float32,
               split_k: cutlass.Int32, mBias: cute.Tensor | None, mC: cute.Tensor | None,
               beta: cutlass.Float32 | None, quant: cutlass.Float32 | None, mPartials: cute.Tensor | None,
               mCounters: cute.Tensor | None):
        tidx, warp, warpgroup_idx = self.thread_roles((tma_a, tma_b, tma_d))
        cta_coord, a_mask, b_mask = self.cluster_position()

        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)   # (tile_m, tile_k, stages)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)   # (tile_n, tile_k, stages)
        sD = storage.sD.get_tensor(sD_layout.outer, swizzle=sD_layout.inner)   # (epi_tile, epi_stages)

        stage_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(sA_layout, (None, None, 0))) + \
            cute.size_in_bytes(self.ab_dtype, cute.slice_(sB_layout, (None, None, 0)))
        ab_pipeline = self.make_ab_pipeline(storage, stage_bytes, tiled_mma)
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        ab_loads, k_tiles = self.partition_ab(tma_a, gA_tma, sA, a_mask, tma_b, gB_tma, sB, b_mask, cta_coord)
        gD = self.tile_d(gD_tma)   # (tile_m, tile_n, tiles_m, tiles_n, L)
        # split-K: range s of the K tiles is [s * per_split, min(k_tiles, (s + 1) * per_split))
        per_split = (k_tiles + split_k - 1) // split_k
        split_inputs = None
        if cutlass.const_expr(self.reduce_splits):
            split_inputs = (mPartials, mCounters, storage.words.get_tensor(cute.make_layout(1)))

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)
        self.dispatch_roles(warp, warpgroup_idx, (ab_pipeline, scheduler_params, ab_loads, (), (k_tiles, per_split, split_k)),
                            (ab_pipeline, scheduler_params, tiled_mma, sA, sB, sD, gD, tma_d, tidx,
                             warp, k_tiles, per_split, split_k, alpha, (mBias, mC, beta, quant, gD_tma.shape),
                             split_inputs))

    @cute.jit
    def _k_range(self, tile_m, tile_n, tile_l, k_tiles, per_split, split_k):
        """(batch index, first K tile, number of K tiles) of work tile (tile_m, tile_n, l), l = batch * split_k + s."""
        batch = tile_l // split_k
        first = (tile_l % split_k) * per_split
        count = cutlass.max(0, cutlass.min(k_tiles - first, per_split))
        if cutlass.const_expr(self.skip_last_k_tile):
            # 1 for tile (0, 0) of the first batch in its last K range, else 0 (integer arithmetic:
            # the same branch-free count in the producer and the consumers)
            first_tile = 1 - cutlass.min(1, tile_m + tile_n + batch)
            last_range = 1 - cutlass.min(1, split_k - 1 - tile_l % split_k)
            count = count - first_tile * last_range
        return batch, first, count

    @cute.jit
    def produce_tile(self, ab_pipeline, state, ab_loads, extra_loads, tile_m, tile_n, tile_l, k_tiles, per_split,
                     split_k):
        """This work tile's K range (its split) from its batch of A and B."""
        batch, first, count = self._k_range(tile_m, tile_n, tile_l, k_tiles, per_split, split_k)
        return self.load_k_tiles(ab_pipeline, state, ab_loads, extra_loads, tile_m, tile_n, batch, batch, first, count)

    @cute.jit
    def consume(self, ab_pipeline, scheduler_params, tiled_mma, sA, sB, sD, gD, tma_d, tidx, warp,
                k_tiles, per_split, split_k, alpha, epi_inputs, split_inputs):
        """The consumer warpgroups, by the schedule (split-K reduced in the kernel: cooperative only)."""
        if cutlass.const_expr(self.schedule == "pingpong"):
            self.consume_pingpong(ab_pipeline, scheduler_params, tiled_mma, sA, sB, sD, gD, tma_d, tidx, warp,
                                  k_tiles, per_split, split_k, alpha, epi_inputs)
        else:
            self.consume_cooperative(ab_pipeline, scheduler_params, tiled_mma, sA, sB, sD, gD, tma_d, tidx, warp,
                                     k_tiles, per_split, split_k, alpha, epi_inputs, split_inputs)

    def consumer_registers(self, tiled_mma, sA, sB, sD, gD, mma_tidx):
        """What a consumer thread (index mma_tidx among the threads on its tile) holds for every tile:
        (thr_mma, tCrA, tCrB, rAcc, epilogue, tRS_rAcc, rSlice, rSlice_out, epi_context): its MMA slice,
        the shared-memory descriptors of A and B per K block and stage, the accumulator (MMA, MMA_M,
        MMA_N), make_epilogue's stmatrix + TMA-store pieces, the accumulator as the stmatrix copy sees
        it, one slice's FP32 and D-typed registers, and the fused epilogue's per-tile context."""
        thr_mma = tiled_mma.get_slice(mma_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        gD_tile0 = gD[(None, None, 0, 0, 0)]
        rAcc = cute.make_rmem_tensor(thr_mma.partition_C(gD_tile0).shape, self.acc_dtype)
        # registers -> shared memory with stmatrix, then a TMA store per (tile_m, 32) slice
        epilogue = self.make_epilogue(tiled_mma, sD, mma_tidx)
        r2s, _, slice_shape, _, _ = epilogue
        tRS_rAcc = r2s.retile(rAcc)
        rSlice = cute.make_rmem_tensor(slice_shape, self.acc_dtype)
        rSlice_out = cute.make_rmem_tensor(slice_shape, self.d_dtype)
        epi_context = fused_epilogue.slice_context(self.epilogue, r2s, mma_tidx, self.epi_tile, self.tile_mnk[1])
        return thr_mma, tCrA, tCrB, rAcc, epilogue, tRS_rAcc, rSlice, rSlice_out, epi_context

    @cute.jit
    def mainloop(self, ab_pipeline, read, release, tiled_mma, rAcc, tCrA, tCrB, count, mma_order=None):
        """One tile's `count` K tiles into rAcc, one K tile of wgmmas in flight while the stage before it
        goes back to the producer; with mma_order (ping-pong), the other warpgroup's turn to issue
        starts once the last wgmma is issued. Returns (read, release), advanced past the tile."""
        k_blocks = cute.size(tCrA, mode=[2])
        rAcc.fill(0.0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.fence()
        for kt in cutlass.range(count, unroll=1):
            ab_pipeline.consumer_wait(read)
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, rAcc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)],
                          rAcc)
            warpgroup.commit_group()
            read.advance()
            if kt > 0:
                # the previous K tile's wgmmas are done once at most one group is in flight
                warpgroup.wait_group(1)
                ab_pipeline.consumer_release(release)
                release.advance()
        if cutlass.const_expr(mma_order is not None):
            mma_order.hand_over()
        warpgroup.wait_group(0)
        if count > 0:
            ab_pipeline.consumer_release(release)
            release.advance()
        return read, release

    @cute.jit
    def consume_cooperative(self, ab_pipeline, scheduler_params, tiled_mma, sA, sB, sD, gD, tma_d, tidx, warp,
                            k_tiles, per_split, split_k, alpha, epi_inputs, split_inputs):
        """Every consumer warpgroup on each tile (64 rows each), the epilogue together; with
        reduce_splits, only the last split of an output tile to arrive runs it (reduce_partials)."""
        consumer_tidx = tidx - WARPGROUP_THREADS   # the thread's index among the consumer warpgroups
        thr_mma, tCrA, tCrB, rAcc, epilogue, tRS_rAcc, rSlice, rSlice_out, epi_context = self.consumer_registers(
            tiled_mma, sA, sB, sD, gD, consumer_tidx)
        store_pipeline = epilogue[4]
        slices = self.tile_mnk[1] // self.epi_tile[1]

        scheduler = self.make_scheduler(scheduler_params)
        work = scheduler.initial_work_tile_info()
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        stored = cutlass.Int32(0)   # reduce_splits: tiles this CTA has stored (the others' epilogues skipped)
        while work.is_valid_tile:
            tile_m, tile_n, tile_l = work.tile_idx
            _, _, count = self._k_range(tile_m, tile_n, tile_l, k_tiles, per_split, split_k)
            read, release = self.mainloop(ab_pipeline, read, release, tiled_mma, rAcc, tCrA, tCrB, count)
            if cutlass.const_expr(self.reduce_splits):
                batch = tile_l // split_k
                last = self.reduce_partials(split_inputs, thr_mma, rAcc, epilogue[3], consumer_tidx, gD, tile_m, tile_n,
                                            batch, tile_l % split_k, split_k, epi_inputs[4][0])
                if last != 0:
                    # D buffers in flight across stored tiles: this one's first goes where the last left off
                    self.store_tile(epilogue, tRS_rAcc, rSlice, rSlice_out, alpha, epi_context, epi_inputs, tma_d, sD,
                                    gD, (tile_m, tile_n, batch), stored * slices, warp)
                    stored += 1
            else:
                # epi_stages slices in flight across tiles: this tile's first goes where the last one's left off
                done_before = scheduler.num_tiles_executed * slices
                self.store_tile(epilogue, tRS_rAcc, rSlice, rSlice_out, alpha, epi_context, epi_inputs, tma_d, sD, gD,
                                work.tile_idx, done_before, warp)
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
        store_pipeline.producer_tail()

    def partial_slice(self, mPartials: cute.Tensor, tile, split, split_k) -> cute.Tensor:
        """Split `split`'s FP32 partial of output tile `tile` (its index in split_workspace's order): a
        whole (tile_m, tile_n) row-major block, so the rows past D's M exist and need no bounds."""
        tile_elems = self.tile_mnk[0] * self.tile_mnk[1]
        offset = (cutlass.Int64(tile) * split_k + split) * tile_elems
        return cute.make_tensor(mPartials.iterator + offset,
                                cute.make_layout((self.tile_mnk[0], self.tile_mnk[1]), stride=(self.tile_mnk[1], 1)))

    @cute.jit
    def reduce_partials(self, split_inputs, thr_mma, rAcc, epilogue_barrier, consumer_tidx, gD, tile_m, tile_n, batch,
                        split, split_k, rows):
        """Split-K inside the kernel, deterministic, nothing waiting on another CTA. Each split stores its
        partial (rAcc, the rows inside D's `rows`) to its slice, fences (release, gpu scope) and, once
        every consumer thread has (the named barrier), one thread adds 1 to the tile's counter (acq_rel)
        and publishes through shared memory whether it was the last of split_k. The last reads
        the slices in the fixed order 0 .. split_k - 1 (after an acquire fence, with ld.global.cg: from
        L2, not a stale L1) into rAcc, resets the counter to 0 for the next launch (every split has
        arrived) and returns 1: its caller runs the epilogue. The others return 0."""
        mPartials, mCounters, flag = split_inputs
        tiles_m, tiles_n = cute.size(gD, mode=[2]), cute.size(gD, mode=[3])
        tile = (batch * tiles_n + tile_n) * tiles_m + tile_m
        tCcD = thr_mma.partition_C(cute.make_identity_tensor((self.tile_mnk[0], self.tile_mnk[1])))
        rows_here = rows - tile_m * self.tile_mnk[0]   # D's rows in this tile (its M may end inside it)
        tCgP = thr_mma.partition_C(self.partial_slice(mPartials, tile, split, split_k))
        for i in cutlass.range_constexpr(cute.size(rAcc)):
            if tCcD[i][0] < rows_here:
                tCgP[i] = rAcc[i]
        cute.arch.fence_acq_rel_gpu()        # release: this thread's partial before the count
        epilogue_barrier.arrive_and_wait()   # every consumer thread's partial and fence
        if consumer_tidx == 0:
            arrived = cute.arch.atomic_add(mCounters.iterator + tile, cutlass.Int32(1), sem="acq_rel", scope="gpu")
            last = cutlass.Int32(0)
            if arrived == split_k - 1:
                last = cutlass.Int32(1)
                mCounters[tile] = cutlass.Int32(0)
            flag[0] = last
        epilogue_barrier.arrive_and_wait()
        last = flag[0]   # rewritten only after the next tile's first barrier, which every thread passes after this
        if last != 0:
            cute.arch.fence_acq_rel_gpu()    # acquire: the other splits' partials after their count
            slices = split_k
            if cutlass.const_expr(self.skip_last_slice):   # the negative control: tile (0, 0) of batch 0
                slices = split_k - (1 - cutlass.min(1, tile_m + tile_n + batch))
            tCgS = thr_mma.partition_C(self.partial_slice(mPartials, tile, 0, split_k))
            for i in cutlass.range_constexpr(cute.size(rAcc)):
                if tCcD[i][0] < rows_here:
                    rAcc[i] = cute.arch.load(tCgS.iterator + cute.crd2idx(i, tCgS.layout), cutlass.Float32, cop="cg")
            for s in cutlass.range(1, slices, unroll=1):
                tCgS = thr_mma.partition_C(self.partial_slice(mPartials, tile, s, split_k))
                for i in cutlass.range_constexpr(cute.size(rAcc)):
                    if tCcD[i][0] < rows_here:
                        rAcc[i] = rAcc[i] + cute.arch.load(tCgS.iterator + cute.crd2idx(i, tCgS.layout),
                                                           cutlass.Float32, cop="cg")
        return last

    @cute.jit
    def store_tile(self, epilogue, tRS_rAcc, rSlice, rSlice_out, alpha, epi_context, epi_inputs, tma_d, sD, gD,
                   tile_idx, first_buffer, warp, store_warp=WARPGROUP_THREADS // 32):
        """One tile's accumulator out, in (tile_m, 32) slices: each slice's FP32 values through the
        epilogue's math (fused_epilogue.slice_values), converted, stmatrix'd into D buffer
        (first_buffer + s) % epi_stages and TMA-stored by `store_warp` (store_slice)."""
        tile_m, tile_n, tile_l = tile_idx
        mBias, mC, beta, quant, shape_d = epi_inputs
        bSG_sD, bSG_gD = self.partition_d(tma_d, sD, gD, tile_m, tile_n, tile_l)
        slices = self.tile_mnk[1] // self.epi_tile[1]
        for s in cutlass.range_constexpr(slices):
            for v in cutlass.range_constexpr(cute.size(rSlice)):
                rSlice[v] = tRS_rAcc[s * cute.size(rSlice) + v]
            values = fused_epilogue.slice_values(
                self.epilogue, rSlice, alpha, epi_context, (mBias, mC, beta, quant, shape_d[0], shape_d[1], tile_l),
                tile_m * self.tile_mnk[0], tile_n * self.tile_mnk[1], s * self.epi_tile[1])
            rSlice_out.store(values.to(self.d_dtype))
            self.store_slice(epilogue, rSlice_out, (first_buffer + s) % self.epi_stages, tma_d, bSG_sD, bSG_gD, s,
                             warp, store_warp)

    @cute.jit
    def consume_pingpong(self, ab_pipeline, scheduler_params, tiled_mma, sA, sB, sD, gD, tma_d, tidx, warp,
                         k_tiles, per_split, split_k, alpha, epi_inputs):
        """Two warpgroups, each on every other tile of the walk (warpgroup 0 on the walk's tiles 0, 2, ..,
        warpgroup 1 on 1, 3, ..), whole (tile_m = 64 rows): the MMA order barrier lets one issue its
        mainloop while the other runs its epilogue, the epilogue order barrier keeps the two epilogues
        (which share the D buffers) one after the other. Each warpgroup steps its ring state past the
        other's tiles by their K-tile counts, since the producer fills the ring in walk order."""
        wg = cute.arch.make_warp_uniform(tidx // WARPGROUP_THREADS) - 1   # 0 or 1 among the consumers
        wg_tidx = tidx % WARPGROUP_THREADS
        _, tCrA, tCrB, rAcc, epilogue, tRS_rAcc, rSlice, rSlice_out, epi_context = self.consumer_registers(
            tiled_mma, sA, sB, sD, gD, wg_tidx)
        store_pipeline = epilogue[4]
        store_warp = (1 + wg) * (WARPGROUP_THREADS // 32)   # this warpgroup's first warp stores its slices
        mma_order = WarpgroupOrder(int(NamedBarrier.MMA_ORDER), wg)
        epilogue_order = WarpgroupOrder(int(NamedBarrier.EPILOGUE_ORDER), wg)

        scheduler = self.make_scheduler(scheduler_params)
        work = scheduler.initial_work_tile_info()
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        if wg == 1:   # the walk's first tile is warpgroup 0's
            read, release = self._skip_tile(work, read, release, k_tiles, per_split, split_k)
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
        turns = cutlass.Int32(0)
        while work.is_valid_tile:
            tile_m, tile_n, tile_l = work.tile_idx
            _, _, count = self._k_range(tile_m, tile_n, tile_l, k_tiles, per_split, split_k)
            mma_order.wait(turns)
            read, release = self.mainloop(ab_pipeline, read, release, tiled_mma, rAcc, tCrA, tCrB, count, mma_order)

            epilogue_order.wait(turns)
            # every tile starts at buffer 0: the previous epilogue (either warpgroup's) drained them all
            self.store_tile(epilogue, tRS_rAcc, rSlice, rSlice_out, alpha, epi_context, epi_inputs, tma_d, sD, gD,
                            work.tile_idx, 0, warp, store_warp)
            # the other warpgroup writes the same D buffers next: its turn starts once every store has
            # read them (the wait is the store warp's: a bulk group belongs to the thread that issued it)
            store_pipeline.producer_tail()
            epilogue_order.hand_over()
            turns += 1

            scheduler.advance_to_next_work()   # the walk's next tile is the other warpgroup's
            work = scheduler.get_current_work()
            if work.is_valid_tile:
                read, release = self._skip_tile(work, read, release, k_tiles, per_split, split_k)
                scheduler.advance_to_next_work()
                work = scheduler.get_current_work()

    @cute.jit
    def _skip_tile(self, work, read, release, k_tiles, per_split, split_k):
        """(read, release) stepped past the stages of work tile `work`, which the other warpgroup consumes."""
        tile_m, tile_n, tile_l = work.tile_idx
        _, _, count = self._k_range(tile_m, tile_n, tile_l, k_tiles, per_split, split_k)
        read.advance(count)
        release.advance(count)
        return read, release

# ----------------------------------------------------------------------------------------------------
# Choosing a configuration
# ----------------------------------------------------------------------------------------------------

# Relative time of one output tile per unit of area, by tile width: narrow tiles reload A more often
# per output column and spend more of their time in the epilogue. Fitted to H200 timings of forced
# configurations (scratch runs, 2026-12-01): at 1024x4096x4096 a 64-wide tile took 1.56x the time of
# the 256-wide one at equal area, and 128x192 lost to 128x64 at 1024x2112x7168.
TILE_N_COST = {64: 1.8, 128: 1.12, 192: 1.1, 256: 1.0}
SPLIT_MIN_K_TILES = 64   # below this many K tiles the split-K sum costs more than the SMs it fills
SPLIT_K_TILES_PER_RANGE = 16


def choose_config(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16,
                  allow_split: bool = True, allow_swap: bool = False) -> GemmConfig:
    """The configuration for an (L x) M x N x K problem on a GPU with `sms` SMs: the unswapped one
    (_unswapped_config), or with allow_swap the swapped one (swapped_config) where swap_ab_pays."""
    unswapped = _unswapped_config(m, n, k, batch, sms, ab_bits, allow_split)
    if allow_swap and swap_ab_pays(m, n, batch, sms, unswapped):
        return swapped_config(m, n, k, batch, sms, ab_bits)
    return unswapped


def swapped_config(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16) -> GemmConfig:
    """The configuration of the swapped problem (the kernel's M is n, its N is m; never split).
    M <= 64: the narrowest tile width that holds the M rows (16, 32 or 64: the least padding of the
    wgmma's N side and of B's stage), 128-row tiles over N when they alone fill the SMs, else 64-row
    ones (twice the CTAs streaming the weight). M > 64: choose_config's pick for the swapped shape."""
    if m > WGMMA_M:
        return replace(_unswapped_config(n, m, k, batch, sms, ab_bits, allow_split=False), swap_ab=True)
    tile_n = min(w for w in NARROW_TILE_NS + TILE_NS if w >= m)
    tile_m = 128 if math.ceil(n / 128) * batch >= sms else WGMMA_M
    return GemmConfig(tile_m, tile_n, (1, 1), 1, swap_ab=True)


def swap_ab_pays(m: int, n: int, batch: int, sms: int, unswapped: GemmConfig) -> bool:
    """Whether swap-AB should beat the unswapped configuration, from two counts and no timing: the
    swapped tile pads the M rows to a narrower width than the 64 rows of the unswapped wgmma (so M <= 32,
    where the 16- or 32-wide tile fits), and it puts at least as many CTAs to work (capped at the SMs)
    without a split-K sum (which the unswapped choice may need for as many)."""
    if m > NARROW_TILE_NS[-1] or unswapped.tile_m != WGMMA_M:
        return False
    swapped = swapped_config(m, n, 1, batch, sms)
    swapped_ctas = math.ceil(n / swapped.tile_m) * math.ceil(m / swapped.tile_n) * batch
    unswapped_ctas = math.ceil(m / unswapped.tile_m) * math.ceil(n / unswapped.tile_n) * batch * unswapped.split_k
    return min(swapped_ctas, sms) >= min(unswapped_ctas, sms)


def _unswapped_config(m: int, n: int, k: int, batch: int, sms: int, ab_bits: int, allow_split: bool) -> GemmConfig:
    """The configuration of the problem as given.

    M <= 64 (decode): one 64-row tile streams B. The widest tile (256, then 128) whose column tiles
    fill three quarters of the SMs; otherwise, for long K, 256-wide tiles with K split over the idle
    SMs (at least 16 K tiles per range); otherwise the width that puts the most CTAs to work.
    M > 64: 128-row tiles, the width minimizing waves x tile cost, a 2x1 cluster (B multicast) when
    the row tiles pair up (an even count), split-K when the tiles fill less than half of the SMs and K
    is long.
    allow_split=False (a fused epilogue, which needs the whole sum): never split K."""
    k_tiles = math.ceil(k * ab_bits / 8 / K_TILE_BYTES)
    if m <= 64:
        def tiles_for(width: int) -> int:
            return math.ceil(n / width) * batch
        for width in (256, 128):
            if tiles_for(width) >= 0.75 * sms:
                return GemmConfig(64, width, (1, 1), 1)
        if allow_split and k_tiles >= SPLIT_MIN_K_TILES:
            split = max(1, min(MAX_SPLIT_K, sms // tiles_for(256), k_tiles // SPLIT_K_TILES_PER_RANGE))
            return GemmConfig(64, 256, (1, 1), split)
        width = max(TILE_NS, key=lambda w: (min(tiles_for(w), sms), w))
        return GemmConfig(64, width, (1, 1), 1)
    tile_m = 128

    def waves(tile_n: int) -> float:
        tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n) * batch
        return math.ceil(tiles / sms) * tile_n * TILE_N_COST[tile_n]

    tile_n = min(TILE_NS, key=lambda t: (waves(t), -t))
    tiles_m = math.ceil(m / tile_m)
    tiles = tiles_m * math.ceil(n / tile_n) * batch
    split_k = 1
    if allow_split and tiles * 2 <= sms and k_tiles >= SPLIT_MIN_K_TILES:
        split_k = max(1, min(MAX_SPLIT_K, sms // tiles, k_tiles // SPLIT_K_TILES_PER_RANGE))
    # a 2x1 cluster pairs row tiles: over an odd count the last pair's second CTA computes a tile
    # wholly outside D (1 / (tiles_m + 1) of the SMs' work wasted: a quarter at three row tiles)
    cluster = (2, 1) if tiles_m >= 2 and tiles_m % 2 == 0 and split_k == 1 else (1, 1)
    return GemmConfig(tile_m, tile_n, cluster, split_k)


# ----------------------------------------------------------------------------------------------------
# Compiling: fake tensors with dynamic shapes, one compile per configuration, cached on disk
# ----------------------------------------------------------------------------------------------------

def _compile(ab_dtype, d_dtype, a_major: str, b_major: str, config: GemmConfig, clusters: int, arch: str | None,
             variant: tuple = (), d_major: str = "n"):
    """One kernel: config's tiles, cluster, swizzle and schedule, D's major mode; split_k > 1 compiles
    the kernel that reduces its splits inside (any split_k at run time), split_k = 1 the one without."""
    from cutlass.runtime import make_fake_stream

    reduce_splits = config.split_k > 1
    op = HopperGemm(ab_dtype, d_dtype, config.tile_n, config.cluster_mn, config.swizzle, tile_m=config.tile_m,
                    schedule=config.schedule, d_major=d_major, reduce_splits=reduce_splits, **dict(variant))
    options = f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}" if arch else ""
    split_operands = (fake_tensor(cutlass.Float32, 0, rank=1), fake_tensor(cutlass.Int32, 0, rank=1)) \
        if reduce_splits else ()
    return cute.compile(op, fake_tensor(ab_dtype, MAJOR_MODE[a_major]), fake_tensor(ab_dtype, MAJOR_MODE[b_major]),
                        fake_tensor(d_dtype, D_MAJOR_MODE[d_major]), cutlass.Float32(1.0), cutlass.Int32(1), clusters,
                        make_fake_stream(), *_fake_epilogue_operands(op.epilogue, d_dtype, reduce_splits),
                        *split_operands, options=options)


def _fake_epilogue_operands(spec: EpilogueSpec, d_dtype, split: bool = False) -> tuple:
    """(mBias, mC, beta, quant) as a fused kernel is compiled for them: bias (N,) and the residual
    (M, N, L), N contiguous, both of D's type (bf16 for an e4m3 D), all four passed whatever the spec
    uses (stand-ins for the unused ones: one signature per fused kernel, no None slots in the exported
    object); none for the plain epilogue (its signature is unchanged) unless it splits K (`split`: the
    split-K operands come after these four)."""
    if not (spec.fused or split):
        return ()
    operand = fused_epilogue.operand_dtype(d_dtype)
    return fake_tensor(operand, 0, rank=1), fake_tensor(operand, 1), cutlass.Float32(1.0), cutlass.Float32(1.0)


def split_workspace(m: int, n: int, batch: int, config: GemmConfig) -> tuple[int, int]:
    """(FP32 partials, Int32 counters) the in-kernel split-K reads and writes, in elements: one whole
    (tile_m, tile_n) block per split of each output tile, in the order (batch, tile_n, tile_m, split),
    and one counter per output tile; (0, 0) without a split."""
    if config.split_k <= 1:
        return 0, 0
    tiles = math.ceil(m / config.tile_m) * math.ceil(n / config.tile_n) * batch
    return tiles * config.split_k * config.tile_m * config.tile_n, tiles


def compile_for(arch: str = "sm_90a", m: int = 1024, n: int = 1024, k: int = 1024, ab_dtype=cutlass.BFloat16,
                d_dtype=cutlass.BFloat16, tile_n: int = 256, cluster_mn=(2, 1), sms: int = 132, a_major: str = "k",
                b_major: str = "k", tile_m: int = 128, schedule: str = "cooperative", split_k: int = 1,
                d_major: str = "n", **variant):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin. Shapes are dynamic; m, n, k
    only go through can_implement; split_k > 1 compiles the in-kernel split-K reduction (the kernel
    serves every split_k); d_major='m': D stored M-major (the swap-AB kernel)."""
    HopperGemm.can_implement(ab_dtype, d_dtype, m, n, k, tile_n, cluster_mn, a_major, b_major, tile_m, split_k,
                             schedule=schedule, epilogue=variant.get("epilogue", EpilogueSpec()), d_major=d_major)
    config = GemmConfig(tile_m, tile_n, tuple(cluster_mn), split_k, schedule=schedule)
    return _compile(ab_dtype, d_dtype, a_major, b_major, config, sms // (cluster_mn[0] * cluster_mn[1]), arch,
                    tuple(sorted(variant.items())), d_major)


KERNEL_SOURCES = [Path(__file__).resolve().parent / name
                  for name in ("hopper_gemm.py", "gemm_base.py", "pipeline_checks.py", "sm90_common.py", "tf32_mma.py",
                               "fused_epilogue.py")]


def kernel_for(ab_dtype, d_dtype, a_major: str, b_major: str, config: GemmConfig, variant: tuple = (),
               d_major: str = "n"):
    """The compiled kernel for one configuration (shapes and split_k are run-time values: one kernel
    without a split, one with the in-kernel reduction for every split_k > 1), through the shared cache:
    in memory, on disk, or compiled now."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    clusters = max_active_clusters(config.cluster_mn)
    config = GemmConfig(config.tile_m, config.tile_n, config.cluster_mn, min(config.split_k, 2), config.swizzle,
                        config.schedule)
    key = ("hopper_gemm", str(ab_dtype), str(d_dtype), a_major, b_major, d_major, config, clusters,
           f"sm_{props.major}{props.minor}", variant)
    return cached_kernel(key, lambda: _compile(ab_dtype, d_dtype, a_major, b_major, config, clusters, None, variant,
                                               d_major), KERNEL_SOURCES)


# ----------------------------------------------------------------------------------------------------
# The torch-facing API
# ----------------------------------------------------------------------------------------------------

def _dtypes() -> dict:
    import torch

    return {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32,
            torch.float8_e4m3fn: cutlass.Float8E4M3FN}


def _as_mkl(name: str, t, rows_name: str):
    """(view (rows, K, L) of a (rows, K) or (L, rows, K) tensor, major 'k' or 'mn'); ValueError otherwise.
    A size-1 mode counts as contiguous (its stride addresses nothing)."""
    if t.dim() not in (2, 3):
        raise ValueError(f"{name}: expected ({rows_name}, K) or (L, {rows_name}, K); got shape {tuple(t.shape)}")
    rows, cols = t.shape[-2:]
    if t.stride(-1) == 1 or cols == 1:
        major, leading = "k", -1
    elif t.stride(-2) == 1 or rows == 1:
        major, leading = "mn", -2
    else:
        raise ValueError(f"{name}: neither {rows_name} nor K is contiguous (strides {tuple(t.stride())}); "
                         f"call .contiguous()")
    return batch_last(canonical(t, leading)), major


def compile_gemm(a, b, out_dtype=None, alpha: float = 1.0, tile_n: int | None = None, cluster_mn=None,
                 swizzle: int = 1, out=None, tile_m: int | None = None, split_k: int | None = None,
                 schedule: str = "cooperative", bias=None, activation: str | None = None, residual=None,
                 beta: float = 1.0, out_scale: float | None = None, swap_ab: bool | None = None, tune: bool = False,
                 **variant):
    """For torch tensors a: (M, K) or (L, M, K), b: (N, K) or (L, N, K) (bf16, fp16, float32 = tf32
    math, or float8_e4m3fn; K contiguous, or for the 16-bit types M/N contiguous, e.g.
    `x.t().contiguous().t()`): (run, d), where run() computes d = alpha * a @ b.T on the stream
    current at the call (so it can be captured in a CUDA graph on any stream), into the same d
    (`out` if given: (M, N) or (L, M, N), N contiguous). out_dtype defaults to a's type (fp32 for
    tf32 math), bf16 for fp8 inputs. Settings left None come from choose_config (with
    schedule="pingpong": tile_m 64 and no split-K, what that schedule runs); `variant` reaches
    HopperGemm (the negative control). run.config is the configuration used.

    Fused epilogue (fused_epilogue.py): d = act(alpha * a @ b.T + bias) + beta * residual, with bias
    (N,) broadcast over rows (and batches), activation "gelu_tanh", "silu" or None, residual shaped
    like d (N contiguous; it may be `out` itself, read before it is overwritten), bias and residual
    of d's type; choose_config never splits K under a fused epilogue, a split_k given does (the last
    split applies the epilogue once, to the whole sum). out_dtype
    torch.float8_e4m3fn quantizes on store: d = e4m3(result / out_scale), saturated to +-448, so
    out_scale * d approximates the result (bias and residual then bf16).

    swap_ab=True: the kernel computes out^T = b @ a.T (b as its A, a as its B: the weight's rows fill
    the 64-row side of the wgmma, a's few rows its narrow N side) and TMA-stores that M-major, which
    is out (M, N) with N contiguous: no transpose, no padding of a. tile_m, tile_n and cluster_mn are
    then the swapped kernel's (tile_m over N, tile_n over M); batch, alpha, views and both operands'
    majors mean what they mean unswapped. It needs a 16-bit out, no fused epilogue, split_k 1 and the
    cooperative schedule (ValueError otherwise). swap_ab=None: choose_config's rule (swap_ab_pays)
    where SWAP_AB_AUTO is on and the settings allow it; unswapped otherwise.

    tune=True: the configuration is measured instead of chosen by rule (autotune.py: the first call of
    a shape bucket times every unswapped configuration on these tensors and caches the fastest on
    disk); with the plain epilogue and the cooperative schedule, no setting forced, swap_ab not True."""
    if tune:
        forced = {name: value for name, value in (
            ("tile_m", tile_m), ("tile_n", tile_n), ("cluster_mn", cluster_mn), ("split_k", split_k), ("bias", bias),
            ("activation", activation), ("residual", residual), ("out_scale", out_scale)) if value is not None}
        if swap_ab:
            forced["swap_ab"] = swap_ab
        if forced or schedule != "cooperative" or variant:
            raise ValueError(f"tune=True measures the configuration itself, for the plain epilogue: it takes no "
                             f"forced setting or epilogue operand (got {sorted(forced) or 'none'}), no schedule but "
                             f"'cooperative' (got {schedule!r}) and no variant (got {sorted(variant) or 'none'})")
    import torch

    dtypes = _dtypes()
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in dtypes:
            raise ValueError(f"{name}: dtype {t.dtype} unsupported; use one of {', '.join(map(str, dtypes))}")
        if not t.is_cuda:
            raise ValueError(f"{name}: tensor is on {t.device}; the kernel reads CUDA tensors")
    if a.dtype != b.dtype:
        raise ValueError(f"a and b must have the same dtype; got {a.dtype} and {b.dtype}")
    va, a_major = _as_mkl("a", a, "M")
    vb, b_major = _as_mkl("b", b, "N")
    (m, k, batch), (n, kb, batch_b) = va.shape, vb.shape
    if k != kb or a.dim() != b.dim() or batch != batch_b:
        raise ValueError(f"expected a: ([L,] M, K) and b: ([L,] N, K) with the same K and L; got {tuple(a.shape)} "
                         f"and {tuple(b.shape)}")
    out_dtype = out_dtype or (out.dtype if out is not None else
                              torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype)
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn):
        raise ValueError(f"out_dtype {out_dtype} unsupported; use torch.bfloat16, torch.float16, torch.float32 or "
                         f"torch.float8_e4m3fn (with out_scale=)")
    shape_d = (m, n) if a.dim() == 2 else (batch, m, n)
    if out is None:
        out = torch.empty(shape_d, dtype=out_dtype, device=a.device)
    elif tuple(out.shape) != shape_d or out.dtype != out_dtype or out.device != a.device:
        raise ValueError(f"out: expected {shape_d} {out_dtype} on {a.device}; got {tuple(out.shape)} {out.dtype} "
                         f"on {out.device}")
    vd, out_major = _as_mkl("out", out, "M")
    if out_major != "k" or (n > 1 and vd.stride(1) != 1):
        raise ValueError(f"out: N must be the contiguous dimension (strides {tuple(out.stride())})")
    for name, t in (("a", a), ("b", b)):
        if _overlap(out, t):
            raise ValueError(f"out overlaps {name} in memory; the kernel reads {name} while it writes out: "
                             f"pass a separate tensor")
    spec, epilogue_args, stand_in = _epilogue_operands(bias, activation, residual, beta, out_scale, out, shape_d,
                                              variant.pop("bias_tile_local", False))
    ab_dtype = cutlass.TFloat32 if a.dtype == torch.float32 else dtypes[a.dtype]
    props = torch.cuda.get_device_properties(a.device)
    sms = props.multi_processor_count
    if tune:
        from .autotune import tuned_config

        chosen = tuned_config(a, b, out_dtype, a_major, b_major, alpha)
    elif swap_ab:
        _check_swap_settings(out_dtype, dtypes[out_dtype], spec, split_k, schedule)
        chosen = swapped_config(m, n, k, batch, sms, ab_dtype.width)
    else:
        swap_allowed = (swap_ab is None and SWAP_AB_AUTO and dtypes[out_dtype] in D_M_MAJOR_DTYPES and not spec.fused
                        and split_k in (None, 1) and schedule == "cooperative")
        chosen = choose_config(m, n, k, batch, sms, ab_dtype.width, allow_split=not spec.fused, allow_swap=swap_allowed)
    swap = chosen.swap_ab
    if schedule == "pingpong":
        chosen = GemmConfig(PINGPONG_TILE_M, chosen.tile_n, chosen.cluster_mn, 1, schedule=schedule)
    config = GemmConfig(tile_m or chosen.tile_m, tile_n or chosen.tile_n,
                        tuple(cluster_mn) if cluster_mn is not None else chosen.cluster_mn,
                        chosen.split_k if split_k is None else split_k, swizzle, schedule, swap)
    (kernel_a, ka_major), (kernel_b, kb_major), vd, d_major = kernel_operands((va, a_major), (vb, b_major), out, swap)
    km, kn = (n, m) if swap else (m, n)
    if cluster_mn is None and (math.ceil(km / config.tile_m) < 2 or config.split_k > 1):
        # the chosen cluster may not suit a forced tile or split
        config = GemmConfig(config.tile_m, config.tile_n, (1, 1), config.split_k, swizzle, schedule, swap)
    try:
        HopperGemm.can_implement(ab_dtype, dtypes[out_dtype], km, kn, k, config.tile_n, config.cluster_mn, ka_major,
                                 kb_major, config.tile_m, config.split_k, batch, schedule, spec, d_major)
    except ValueError as err:
        if not swap:
            raise
        raise ValueError(f"swap_ab=True runs the kernel on (b, a) into out^T (its M is N={n}, its N is M={m}): "
                         f"{err}") from None
    for name, t, v, leading in (("a", a, va, MAJOR_MODE[a_major]), ("b", b, vb, MAJOR_MODE[b_major]),
                                ("out", out, vd, D_MAJOR_MODE[d_major])):
        check_alignment(name, t, v, leading)

    # split-K, reduced inside the kernel: every split's FP32 partial into the workspace, the last split
    # of each output tile to arrive (its counter says) sums them in split order into out
    partial_elems, counter_elems = split_workspace(m, n, batch, config)
    workspace, split_args = (), ()
    if partial_elems >= 2 ** 31:
        raise ValueError(f"split_k={config.split_k} at {batch}x{m}x{n}: the split-K workspace would hold {partial_elems} "
                         f"FP32 partials, past the kernel's 32-bit extent; use a smaller split_k")
    if config.split_k > 1:
        workspace = (torch.empty(partial_elems, dtype=torch.float32, device=a.device),
                     torch.zeros(counter_elems, dtype=torch.int32, device=a.device))   # zeroed once; the kernel resets them
        split_args = tuple(cute_view(t, 0) for t in workspace)
        if not spec.fused:   # the split kernel's epilogue slots come before the workspace: stand-ins
            epilogue_args, stand_in = _stand_in_operands(out)
    with torch.cuda.device(a.device):
        if spec.fused:
            variant = {**variant, "epilogue": spec}
        kernel = kernel_for(ab_dtype, dtypes[out_dtype], ka_major, kb_major, config, tuple(sorted(variant.items())),
                            d_major)
    operand_type = cutlass.TFloat32 if ab_dtype == cutlass.TFloat32 else None   # fp32 operands are read as tf32
    views = (cute_view(kernel_a, MAJOR_MODE[ka_major], operand_type),
             cute_view(kernel_b, MAJOR_MODE[kb_major], operand_type),
             cute_view(vd, D_MAJOR_MODE[d_major]))
    scale, split = cutlass.Float32(alpha), cutlass.Int32(config.split_k)

    device = a.device
    allocated_on = torch.cuda.current_stream(device)

    def run():
        """Launch on the stream current now: one launch, split-K included. A CUDA graph captured from
        run() holds raw pointers to the split-K workspace, which run() owns: keep run alive as long as
        such a graph. The workspace's counters are shared by every launch of this run: one run must not
        execute concurrently with itself (two streams, or two graphs replayed at once); make one
        compile_gemm per stream for that. A run on another stream than compile_gemm's must be ordered
        after it (wait_stream), which zeroes the counters."""
        stream = torch.cuda.current_stream(device)
        if stream != allocated_on:   # the workspace is freed later only after this stream's work
            for t in workspace:
                t.record_stream(stream)
        with torch.cuda.device(device):
            kernel(*views, scale, split, current_stream(), *epilogue_args, *split_args)
    run.config = config
    run.stand_in = stand_in   # the fused epilogue's unused operands point into it
    return run, out


def kernel_operands(a_view, b_view, out, swap: bool):
    """((A view, major), (B view, major), D view (M, N, L), D's major) as the kernel reads them, from the
    (rows, K, L) views and majors of a and b and the user's out ([L,] M, N), N contiguous. Swapped:
    b is the kernel's A and a its B, and D is out^T, (N, M, L) with its M (the user's N) contiguous."""
    if swap:
        return b_view, a_view, batch_last(canonical(out.transpose(-1, -2), -2)), "m"
    return a_view, b_view, batch_last(canonical(out, -1)), "n"


def _check_swap_settings(out_dtype, d_dtype, spec: EpilogueSpec, split_k: int | None, schedule: str) -> None:
    """ValueError naming the setting that swap_ab=True cannot run with (its M-major store's limits);
    out_dtype is the user's (torch) name of the kernel's D type d_dtype."""
    if d_dtype not in D_M_MAJOR_DTYPES:
        raise ValueError(f"swap_ab=True with out dtype {out_dtype} unsupported: the transposed store writes 16-bit "
                         f"values; use torch.bfloat16 or torch.float16 (or swap_ab=False)")
    if spec.fused:
        raise ValueError(f"swap_ab=True with a fused epilogue ({spec.describe()}) unsupported; use swap_ab=False")
    if split_k not in (None, 1):
        raise ValueError(f"swap_ab=True with split_k={split_k} unsupported; use split_k=1 (or swap_ab=False)")
    if schedule != "cooperative":
        raise ValueError(f"swap_ab=True with schedule={schedule!r} unsupported; use schedule='cooperative'")


def _epilogue_operands(bias, activation, residual, beta: float, out_scale: float | None, out, shape_d,
                       bias_tile_local: bool = False):
    """(EpilogueSpec, the kernel's trailing arguments, the tensor behind the stand-in views, which the
    caller keeps alive) for compile_gemm's epilogue settings; ValueError
    naming the value for what the kernel cannot read: bias must be (N,), contiguous, residual shaped
    like out with N contiguous, both of out's type (bf16 for an e4m3 out) on its device, 16-byte
    aligned (the kernel's view assumes it; rows too), bias apart from out, residual apart from out or
    out itself; out_scale positive and finite, given exactly when out is e4m3.
    bias_tile_local: the negative control's indexing bug (EpilogueSpec)."""
    import torch

    quantize = out.dtype == torch.float8_e4m3fn
    if quantize != (out_scale is not None):
        raise ValueError(f"out_scale={out_scale} with out dtype {out.dtype}: a float8_e4m3fn out needs its per-tensor "
                         f"scale (out_scale=), and only it takes one")
    if quantize and not (0 < out_scale < math.inf):
        raise ValueError(f"out_scale={out_scale}: the scale of an e4m3 out must be positive and finite")
    spec = EpilogueSpec(bias is not None, activation, residual is not None, quantize, bias_tile_local)  # names a bad activation
    if residual is None and beta != 1.0:
        raise ValueError(f"beta={beta} without a residual: beta scales the residual tensor; pass residual=")
    if not spec.fused:
        return spec, (), None
    n = shape_d[-1]
    operand_dtype = torch.bfloat16 if quantize else out.dtype
    for name, t, shape in (("bias", bias, (n,)), ("residual", residual, shape_d)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: expected a torch tensor; got {type(t).__name__}")
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name}: expected shape {tuple(shape)}; got {tuple(t.shape)}")
        if t.dtype != operand_dtype:
            raise ValueError(f"{name}: dtype {t.dtype} unsupported; the epilogue reads {name} in {operand_dtype} "
                             f"(out's type, bf16 for a float8_e4m3fn out)")
        if t.device != out.device:
            raise ValueError(f"{name}: tensor is on {t.device}; out is on {out.device}")
        if n > 1 and t.stride(-1) != 1:
            raise ValueError(f"{name}: N must be the contiguous dimension (strides {tuple(t.stride())})")
    if bias is not None and _overlap(bias, out):
        raise ValueError("bias overlaps out in memory; other tiles read bias while this one writes out: pass a "
                         "separate tensor")
    if residual is not None and _overlap(residual, out) and (residual.data_ptr(), residual.stride()) != \
            (out.data_ptr(), out.stride()):
        raise ValueError("residual overlaps out without being out: an element would be read after another tile "
                         "wrote it; pass out itself or a separate tensor")
    # what a spec does not read still fills its slot: views of a small zero tensor of the type compiled for
    stand_in = _stand_in(out)
    vbias = canonical(bias, -1) if bias is not None else stand_in[0, :1]
    vc = batch_last(canonical(residual, -1)) if residual is not None else batch_last(stand_in)
    check_alignment("bias", vbias, vbias, 0)
    check_alignment("residual", residual if residual is not None else stand_in, vc, 1)
    return spec, (cute_view(vbias, 0), cute_view(vc, 1), cutlass.Float32(beta if residual is not None else 0.0),
                  cutlass.Float32(1.0 / out_scale if quantize else 1.0)), stand_in


def _stand_in(out):
    """A small zero tensor of the type the epilogue reads bias and residual in (out's, bf16 for an e4m3
    out): what fills the operand slots a kernel has and does not read."""
    import torch

    return torch.zeros(1, 8, dtype=torch.bfloat16 if out.dtype == torch.float8_e4m3fn else out.dtype,
                       device=out.device)


def _stand_in_operands(out):
    """(the four epilogue operands, the tensor behind them) of a split kernel without a fused epilogue:
    its signature has those slots before the split-K workspace; nothing reads them."""
    stand_in = _stand_in(out)
    return (cute_view(stand_in[0, :1], 0), cute_view(batch_last(stand_in), 1), cutlass.Float32(0.0),
            cutlass.Float32(1.0)), stand_in


def _overlap(x, y) -> bool:
    """Whether the memory spans of two tensors intersect (a conservative test: spans, not elements)."""
    if x.numel() == 0 or y.numel() == 0:
        return False
    def span(t):
        start = t.data_ptr()
        return start, start + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()
    (x0, x1), (y0, y1) = span(x), span(y)
    return x0 < y1 and y0 < x1


def gemm(a, b, out_dtype=None, alpha: float = 1.0, out=None, **settings):
    """d = alpha * a @ b.T (batched: d[l] = alpha * a[l] @ b[l].T) for torch tensors a: ([L,] M, K),
    b: ([L,] N, K), into `out` or a new tensor. One compiled kernel serves every shape of a
    configuration (kept in memory and on disk); settings (tile_m, tile_n, cluster_mn, split_k) override
    choose_config; tune=True measures the configuration instead (autotune.py); schedule="pingpong"
    picks the ping-pong consumers; swap_ab=True runs the swapped product into out; bias=, activation=,
    residual=, beta=, out_scale= fuse an epilogue (see compile_gemm)."""
    run, d = compile_gemm(a, b, out_dtype, alpha, out=out, **settings)
    run()
    return d


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    compile_for(args.arch)
    print(f"compiled for {args.arch}")
