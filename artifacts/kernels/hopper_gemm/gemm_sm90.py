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
    the SMs, and swap-AB for decode shapes (swap_ab_pays); compile_gemm / gemm use it unless told
    otherwise (swap_ab=False keeps the problem as given).

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

The host interface (torch tensors in, a launch out) is hopper_gemm.py; the configuration and its
rule config.py; the split-K ranges and reduction tile_scheduler.py; compiling and the kernel cache jit.py.
Compile only (any machine): python -m artifacts.kernels.hopper_gemm.hopper_gemm --arch sm_90a
Run: probe-hopper-gemm (kernelwiki probe run --probe probe-hopper-gemm) on an H200.
"""

from __future__ import annotations

from typing import Optional

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.tensor_utils import LayoutEnum

from . import fused_epilogue
from .config import (CLUSTERS, K_TILE_BYTES, MAX_SPLIT_K, MAX_TILE_N_192, NARROW_TILE_NS, PINGPONG_TILE_M, TILE_MS, TILE_NS,
                     TILE_WIDTHS, WGMMA_M, epilogue_slice_n)
from .fused_epilogue import EpilogueSpec
from .gemm_base import SCHEDULES, NamedBarrier, Sm90GemmBase, WarpgroupOrder
from .sm90_common import WARPGROUP_THREADS
from .tf32_mma import make_tiled_mma_tf32
from .tile_scheduler import SplitKTiles

EPI_STAGES = 4
AB_DTYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.TFloat32, cutlass.Float8E4M3FN)
D_DTYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.Float32, cutlass.Float8E4M3FN)   # e4m3: quantize-on-store
PINGPONG_AB_DTYPES = (cutlass.BFloat16, cutlass.Float16)
MAJOR_MODE = {"k": 1, "mn": 0}   # which mode of a (rows, K, L) view is contiguous
D_MAJOR_MODE = {"n": 1, "m": 0}  # which mode of D's (M, N, L) view is contiguous
D_M_MAJOR_DTYPES = (cutlass.BFloat16, cutlass.Float16)   # stmatrix's transposed form moves 16-bit values
THREE_CONSUMER_REGISTERS = (32, 160)   # setmaxnreg with 512 threads: 128 x 32 + 384 x 160 = 65536


class HopperGemm(SplitKTiles, Sm90GemmBase):
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
        self.epi_tile = (tile_m, epilogue_slice_n(tile_n))
        # three consumer warpgroups (192 rows): a stage is larger, so fewer D buffers leave room for a fourth
        self.stages, self.epi_stages = self.fit_stages(EPI_STAGES if self.warpgroups < 3 else 2, EPI_STAGES)

    @cute.jit
    def dispatch_roles(self, warp, warpgroup_idx, producer_args, consumer_args):
        """The skeleton's roles; with three consumer warpgroups (512 threads) the setmaxnreg targets are
        THREE_CONSUMER_REGISTERS (the skeleton's 40 / 232 would not fit 64K registers)."""
        if cutlass.const_expr(self.warpgroups != 3):
            Sm90GemmBase.dispatch_roles(self, warp, warpgroup_idx, producer_args, consumer_args)
        else:
            producer_registers, consumer_registers = THREE_CONSUMER_REGISTERS
            if warpgroup_idx == 0:
                cute.arch.setmaxregister_decrease(producer_registers)
                if warp == 0:
                    self.produce(*producer_args)
            else:
                cute.arch.setmaxregister_increase(consumer_registers)
                self.consume(*consumer_args)

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
        tile_ns = TILE_NS if schedule == "pingpong" else NARROW_TILE_NS + TILE_NS if epilogue.fused else TILE_WIDTHS
        if tile_n not in tile_ns:
            setting = " with ping-pong" if schedule == "pingpong" else " with a fused epilogue" if epilogue.fused else ""
            raise ValueError(f"tile_n={tile_n} unsupported{setting}; use one of {tile_ns}")
        if tile_m == 3 * WGMMA_M and (schedule != "cooperative" or tile_n > MAX_TILE_N_192 or epilogue.fused):
            raise ValueError(f"tile_m={tile_m} with tile_n={tile_n}, schedule={schedule!r} and epilogue "
                             f"{epilogue.describe()!r} unsupported: three consumer warpgroups hold "
                             f"{THREE_CONSUMER_REGISTERS[1]} registers each, so the accumulator fits up to "
                             f"tile_n={MAX_TILE_N_192}; the cooperative schedule and the plain epilogue only")
        if tuple(cluster_mn) not in CLUSTERS:
            raise ValueError(f"cluster_mn={tuple(cluster_mn)} unsupported; use one of {CLUSTERS}")
        if not 1 <= split_k <= MAX_SPLIT_K:
            raise ValueError(f"split_k={split_k} unsupported; use 1..{MAX_SPLIT_K}")
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
                 mBias: Optional[cute.Tensor] = None, mC: Optional[cute.Tensor] = None,
                 beta: Optional[cutlass.Float32] = None, quant: Optional[cutlass.Float32] = None,
                 mPartials: Optional[cute.Tensor] = None, mCounters: Optional[cute.Tensor] = None):
        # (typing.Optional, not `X | None`: the DSL's export to an object file unwraps only the former,
        # and could not write the split and fused kernels' scalars otherwise, so they were never cached)
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
        (tCrA, tCrB, rAcc, epilogue, tRS_rAcc, rSlice, rSlice_out, epi_context): the shared-memory
        descriptors of A and B per K block and stage, the accumulator (MMA, MMA_M, MMA_N), make_epilogue's stmatrix + TMA-store pieces, the accumulator as the stmatrix copy sees
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
        return tCrA, tCrB, rAcc, epilogue, tRS_rAcc, rSlice, rSlice_out, epi_context

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
        tCrA, tCrB, rAcc, epilogue, tRS_rAcc, rSlice, rSlice_out, epi_context = self.consumer_registers(
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
                last = self.reduce_partials(split_inputs, rAcc, epilogue[3], consumer_tidx, gD, tile_m, tile_n, batch,
                                            tile_l % split_k, split_k)
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
        tCrA, tCrB, rAcc, epilogue, tRS_rAcc, rSlice, rSlice_out, epi_context = self.consumer_registers(
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
