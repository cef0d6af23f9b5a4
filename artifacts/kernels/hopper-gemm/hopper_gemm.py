"""A warp-specialized, persistent wgmma GEMM for Hopper (sm_90a) in CuTe DSL.

What it does
    D[m, n] = sum_k A[m, k] * B[n, k]  (A: M x K, B: N x K, each K-major or, for 16-bit types,
    M-/N-major, i.e. transposed in memory; D: M x N row-major),
    bf16/fp16, tf32 (fp32 in memory) or fp8 e4m3 inputs, fp32 accumulation in registers,
    D = alpha * A.B^T in bf16/fp16/fp32 (alpha carries the per-tensor scales of fp8: scale_a * scale_b;
    1.0 otherwise). TF32 goes through our own op (tf32_mma.py): the DSL does not expose one.
    384 threads per CTA, one CTA per SM, clusters of cluster_mn CTAs:
      warpgroup 0  producer: gives registers back (setmaxnreg down), and its warp 0 TMA-loads A and
                   B K-tiles into a `stages`-deep shared-memory ring; B is multicast to the CTAs of
                   the cluster that share it (cluster_m > 1), A to those along N (cluster_n > 1);
      warpgroups 1-2 consumers (setmaxnreg up): each owns 64 rows of the 128-row tile; per K-tile
                   fence / 4 x wgmma / commit, then `wait_group 1` keeps one K-tile of wgmma in flight
                   while the previous stage goes back to the producer;
      epilogue     the consumers convert the accumulator, write it to shared memory with stmatrix
                   (epi_tile slices, a small ring), and one warp TMA-stores each slice.
    A static persistent scheduler walks the output tiles cluster by cluster (optionally swizzled in
    groups of `swizzle` clusters for L2 reuse), so the producer starts the next tile's loads while
    the consumers finish the current one.

Constraints (can_implement): A and B of the same type, bf16, fp16, tf32 or e4m3 (tf32 and fp8 only
    K-major: wgmma transposes 16-bit operands only); the contiguous dimension of A, B and D 16-byte aligned (TMA); any M, N, K otherwise: partial tiles are handled by
    TMA (loads outside the tensor read zeros, stores outside it are dropped). tile_m == 128;
    tile_n in {64, 128, 256}; cluster_mn in {(1,1), (2,1), (1,2)}.

Compile only (any machine): python artifacts/kernels/hopper-gemm/hopper_gemm.py --arch sm_90a
Run: probe-hopper-gemm (kernelwiki probe run --probe probe-hopper-gemm) on an H200.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum
from tf32_mma import make_tiled_mma_tf32

WARPGROUP_THREADS = 128
CONSUMER_WARPGROUPS = 2
THREADS = WARPGROUP_THREADS * (1 + CONSUMER_WARPGROUPS)
PRODUCER_REGISTERS, CONSUMER_REGISTERS = 40, 232   # setmaxnreg targets (multiples of 8, sum fits 64K)
K_TILE_BYTES = 128     # one 128-byte swizzle row of K per stage: 64 bf16/fp16 or 128 fp8 elements
EPI_TILE_N = 32       # epilogue slice: (tile_m, 32) columns at a time through shared memory
EPI_STAGES = 4
SMEM_BYTES = 232448   # 227 KiB usable per CTA on sm_90
AB_DTYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.TFloat32, cutlass.Float8E4M3FN)
D_DTYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.Float32)
CLUSTERS = ((1, 1), (2, 1), (1, 2))

# nvidia-cutlass-dsl 4.8.1 marks its persistent tile scheduler as moved to CUTLASS's examples; at the
# pinned version the wheel copy is the one available, so only that message is silenced.
warnings.filterwarnings("ignore", message="Migrated to examples/CuTeDSL/helpers", category=DeprecationWarning)

DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)


class HopperGemm:
    def __init__(self, ab_dtype=cutlass.BFloat16, d_dtype=cutlass.BFloat16, tile_n: int = 256,
                 cluster_mn: tuple[int, int] = (2, 1), swizzle: int = 1, skip_last_k_tile: bool = False):
        self.ab_dtype, self.d_dtype, self.acc_dtype = ab_dtype, d_dtype, cutlass.Float32
        self.tile_mnk = (128, tile_n, K_TILE_BYTES * 8 // ab_dtype.width)
        self.cluster_mn = cluster_mn
        self.swizzle = swizzle
        self.skip_last_k_tile = skip_last_k_tile  # the negative control: one K tile never loaded or used
        self.epi_tile = (self.tile_mnk[0], EPI_TILE_N)
        ab_stage_bytes = (self.tile_mnk[0] + tile_n) * K_TILE_BYTES
        epi_bytes = EPI_STAGES * self.epi_tile[0] * self.epi_tile[1] * d_dtype.width // 8
        self.stages = (SMEM_BYTES - epi_bytes - 1024) // ab_stage_bytes

    @staticmethod
    def can_implement(ab_dtype, d_dtype, m: int, n: int, k: int, tile_n: int = 256,
                      cluster_mn: tuple[int, int] = (2, 1), a_major: str = "k", b_major: str = "k") -> None:
        """Raise ValueError naming the offending value and the supported set."""
        if ab_dtype not in AB_DTYPES:
            raise ValueError(f"A/B dtype {ab_dtype} unsupported; use one of {AB_DTYPES}")
        if d_dtype not in D_DTYPES:
            raise ValueError(f"D dtype {d_dtype} unsupported; use one of {D_DTYPES}")
        if tile_n not in (64, 128, 256):
            raise ValueError(f"tile_n={tile_n} unsupported; use 64, 128 or 256")
        if tuple(cluster_mn) not in CLUSTERS:
            raise ValueError(f"cluster_mn={tuple(cluster_mn)} unsupported; use one of {CLUSTERS}")
        if min(m, n, k) < 1:
            raise ValueError(f"M, N, K must be positive; got {m}, {n}, {k}")
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
        if n * d_dtype.width % 128:
            raise ValueError(f"N={n}: rows of D must be a multiple of 16 bytes for TMA "
                             f"(N a multiple of {128 // d_dtype.width} for {d_dtype})")

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, alpha: cutlass.Float32,
                 max_active_clusters: cutlass.Constexpr, stream):
        # mA: (M, K) K- or M-major; mB: (N, K) K- or N-major; mD: (M, N) N-major
        a_layout, b_layout = LayoutEnum.from_tensor(mA), LayoutEnum.from_tensor(mB)   # ROW_MAJOR = K-major
        # two consumer warpgroups stacked along M, each issuing 64 x tile_n wgmmas
        if cutlass.const_expr(self.ab_dtype == cutlass.TFloat32):
            tiled_mma = make_tiled_mma_tf32((CONSUMER_WARPGROUPS, 1, 1), (64, self.tile_mnk[1]))
        else:
            tiled_mma = sm90_utils.make_trivial_tiled_mma(self.ab_dtype, self.ab_dtype, a_layout.sm90_mma_major_mode(),
                                                          b_layout.sm90_mma_major_mode(), self.acc_dtype,
                                                          (CONSUMER_WARPGROUPS, 1, 1), tiler_mn=(64, self.tile_mnk[1]))
        sA_layout = sm90_utils.make_smem_layout_a(a_layout, self.tile_mnk, self.ab_dtype, self.stages)
        sB_layout = sm90_utils.make_smem_layout_b(b_layout, self.tile_mnk, self.ab_dtype, self.stages)
        sD_layout = sm90_utils.make_smem_layout_epi(self.d_dtype, LayoutEnum.ROW_MAJOR, self.epi_tile, EPI_STAGES)

        cluster_m, cluster_n = self.cluster_mn
        # A is shared by the CTAs of a cluster row (same M, different N): multicast along N; B along M.
        tma_a, gA_tma = self._load_atom(mA, sA_layout, (self.tile_mnk[0], self.tile_mnk[2]), cluster_n)
        tma_b, gB_tma = self._load_atom(mB, sB_layout, (self.tile_mnk[1], self.tile_mnk[2]), cluster_m)
        tma_d, gD_tma = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mD,
                                                    cute.slice_(sD_layout, (None, None, 0)), self.epi_tile)

        tiles_mnl = (*cute.ceil_div(mD.layout.shape, self.tile_mnk[:2]), 1)
        scheduler_params = utils.PersistentTileSchedulerParams(tiles_mnl, (cluster_m, cluster_n, 1), self.swizzle, True)
        grid = utils.StaticPersistentTileScheduler.get_grid_shape(scheduler_params, max_active_clusters)

        @cute.struct
        class SharedStorage:
            ab_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(sB_layout)], 1024]
            sD: cute.struct.Align[cute.struct.MemRange[self.d_dtype, cute.cosize(sD_layout)], 1024]

        self.shared_storage = SharedStorage
        self.kernel(tiled_mma, tma_a, gA_tma, tma_b, gB_tma, tma_d, gD_tma, sA_layout, sB_layout, sD_layout,
                    scheduler_params, alpha).launch(grid=grid, block=(THREADS, 1, 1), cluster=(cluster_m, cluster_n, 1),
                                             min_blocks_per_mp=1, stream=stream)

    @staticmethod
    def _load_atom(tensor, smem_layout, tile, multicast: int):
        op = cpasync.CopyBulkTensorTileG2SMulticastOp() if multicast > 1 else cpasync.CopyBulkTensorTileG2SOp()
        return cpasync.make_tiled_tma_atom(op, tensor, cute.slice_(smem_layout, (None, None, 0)), tile,
                                           num_multicast=multicast)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, gA_tma: cute.Tensor, tma_b: cute.CopyAtom,
               gB_tma: cute.Tensor, tma_d: cute.CopyAtom, gD_tma: cute.Tensor, sA_layout: cute.ComposedLayout,
               sB_layout: cute.ComposedLayout, sD_layout: cute.ComposedLayout,
               scheduler_params: utils.PersistentTileSchedulerParams, alpha: cutlass.Float32):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // WARPGROUP_THREADS)
        if warp == 0:
            for atom in (tma_a, tma_b, tma_d):
                cpasync.prefetch_descriptor(atom)

        cluster_m, cluster_n = self.cluster_mn
        cluster_layout = cute.make_layout((cluster_m, cluster_n, 1))
        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cta_coord = cluster_layout.get_flat_coord(cta_rank)
        # which CTAs of the cluster receive this CTA's multicast: same row for A, same column for B
        a_mask = cute.make_layout_image_mask(cluster_layout, cta_coord, mode=1) if cutlass.const_expr(cluster_n > 1) else 0
        b_mask = cute.make_layout_image_mask(cluster_layout, cta_coord, mode=0) if cutlass.const_expr(cluster_m > 1) else 0

        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)   # (128, 64, stages)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)   # (tile_n, 64, stages)
        sD = storage.sD.get_tensor(sD_layout.outer, swizzle=sD_layout.inner)   # (128, 32, EPI_STAGES)

        stage_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(sA_layout, (None, None, 0))) + \
            cute.size_in_bytes(self.ab_dtype, cute.slice_(sB_layout, (None, None, 0)))
        # A stage is free again when every consumer warp of every CTA that received data from
        # this CTA's loads has released it: the warps of this CTA, times the CTAs sharing A or B.
        sharers = cluster_m + cluster_n - 1
        ab_pipeline = pipeline.PipelineTmaAsync.create(
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     sharers * CONSUMER_WARPGROUPS * WARPGROUP_THREADS // 32),
            tx_count=stage_bytes,
            barrier_storage=storage.ab_barriers.data_ptr(),
            cta_layout_vmnk=cute.make_layout((1, cluster_m, cluster_n, 1)),
            defer_sync=True,
        )
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        # gA: (128, 64, tiles_m, k_tiles); gB: (tile_n, 64, tiles_n, k_tiles); gD: (128, tile_n, tiles_m, tiles_n)
        gA = cute.local_tile(gA_tma, cute.slice_(self.tile_mnk, (None, 0, None)), (None, None))
        gB = cute.local_tile(gB_tma, cute.slice_(self.tile_mnk, (0, None, None)), (None, None))
        gD = cute.local_tile(gD_tma, cute.slice_(self.tile_mnk, (None, None, 0)), (None, None))
        tAsA, tAgA = cpasync.tma_partition(tma_a, cta_coord[1], cute.make_layout(cluster_n),
                                           cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, cta_coord[0], cute.make_layout(cluster_m),
                                           cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
        k_tiles = cute.size(gA, mode=[3])
        if cutlass.const_expr(self.skip_last_k_tile):
            k_tiles = k_tiles - 1

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if warpgroup_idx == 0:
            cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)
            if warp == 0:
                self._produce(ab_pipeline, scheduler_params, tma_a, tAgA, tAsA, a_mask, tma_b, tBgB, tBsB, b_mask,
                              k_tiles)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
            self._consume(ab_pipeline, scheduler_params, tiled_mma, sA, sB, sD, gD, tma_d, tidx - WARPGROUP_THREADS,
                          warp, k_tiles, alpha)

    @cute.jit
    def _produce(self, ab_pipeline, scheduler_params, tma_a, tAgA, tAsA, a_mask, tma_b, tBgB, tBsB, b_mask, k_tiles):
        scheduler = utils.StaticPersistentTileScheduler.create(scheduler_params, cute.arch.block_idx(),
                                                               cute.arch.grid_dim())
        work = scheduler.initial_work_tile_info()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        while work.is_valid_tile:
            tile_m, tile_n, _ = work.tile_idx
            tAgA_tile = tAgA[(None, tile_m, None)]   # (TMA, k_tiles)
            tBgB_tile = tBgB[(None, tile_n, None)]
            state.reset_count()
            for _ in cutlass.range(k_tiles, unroll=1):
                ab_pipeline.producer_acquire(state)
                barrier = ab_pipeline.producer_get_barrier(state)
                cute.copy(tma_a, tAgA_tile[(None, state.count)], tAsA[(None, state.index)], tma_bar_ptr=barrier,
                          mcast_mask=a_mask)
                cute.copy(tma_b, tBgB_tile[(None, state.count)], tBsB[(None, state.index)], tma_bar_ptr=barrier,
                          mcast_mask=b_mask)
                ab_pipeline.producer_commit(state)
                state.advance()
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
        ab_pipeline.producer_tail(state)  # do not exit while a consumer in the cluster may still signal us

    @cute.jit
    def _consume(self, ab_pipeline, scheduler_params, tiled_mma, sA, sB, sD, gD, tma_d, consumer_tidx, warp,
                 k_tiles, alpha):
        thr_mma = tiled_mma.get_slice(consumer_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))   # smem descriptors per K block and stage
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        rAcc = cute.make_rmem_tensor(thr_mma.partition_C(gD).shape[:3], self.acc_dtype)   # (MMA, MMA_M, MMA_N)

        # registers -> shared memory with stmatrix, then a TMA store per (128, 32) slice
        r2s_atom = sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, self.d_dtype, self.acc_dtype)
        stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.d_dtype)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))
        thr_r2s = r2s.get_slice(consumer_tidx)
        tRS_sD = thr_r2s.partition_D(sD)                      # (R2S, R2S_M, R2S_N, EPI_STAGES)
        tRS_rAcc = r2s.retile(rAcc)
        slice_shape = cute.shape(thr_r2s.partition_S(sD))[:3]
        rSlice = cute.make_rmem_tensor(slice_shape, self.acc_dtype)
        rSlice_out = cute.make_rmem_tensor(slice_shape, self.d_dtype)
        epilogue_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=CONSUMER_WARPGROUPS * WARPGROUP_THREADS)
        store_pipeline = pipeline.PipelineTmaStore.create(
            num_stages=EPI_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_WARPGROUPS * WARPGROUP_THREADS))
        store_warp = WARPGROUP_THREADS // 32   # the first consumer warp issues the TMA stores

        scheduler = utils.StaticPersistentTileScheduler.create(scheduler_params, cute.arch.block_idx(),
                                                               cute.arch.grid_dim())
        work = scheduler.initial_work_tile_info()
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        k_blocks = cute.size(tCrA, mode=[2])
        while work.is_valid_tile:
            read.reset_count()
            release.reset_count()
            rAcc.fill(0.0)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.fence()
            for k_tile in cutlass.range(k_tiles, unroll=1):
                ab_pipeline.consumer_wait(read)
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, rAcc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)],
                              rAcc)
                warpgroup.commit_group()
                read.advance()
                if k_tile > 0:
                    # the previous K tile's wgmmas are done once at most one group is in flight
                    warpgroup.wait_group(1)
                    ab_pipeline.consumer_release(release)
                    release.advance()
            warpgroup.wait_group(0)
            if k_tiles > 0:
                ab_pipeline.consumer_release(release)
                release.advance()

            # epilogue: (128, tile_n) in (128, 32) slices, EPI_STAGES of them in flight
            tile_m, tile_n, _ = work.tile_idx
            gD_slices = cute.zipped_divide(gD[(None, None, tile_m, tile_n)], self.epi_tile)
            bSG_sD, bSG_gD = cpasync.tma_partition(tma_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), gD_slices)
            slices = cute.size(gD_slices, mode=[1])
            done_before = scheduler.num_tiles_executed * slices
            for s in cutlass.range_constexpr(slices):
                for v in cutlass.range_constexpr(cute.size(rSlice)):
                    rSlice[v] = tRS_rAcc[s * cute.size(rSlice) + v]
                rSlice_out.store((rSlice.load() * alpha).to(self.d_dtype))
                buffer = (done_before + s) % EPI_STAGES
                cute.copy(r2s, rSlice_out, tRS_sD[(None, None, None, buffer)])
                cute.arch.fence_proxy("async.shared", space="cta")   # stmatrix writes -> TMA reads
                epilogue_barrier.arrive_and_wait()
                if warp == store_warp:
                    cute.copy(tma_d, bSG_sD[(None, buffer)], bSG_gD[(None, s)])
                    store_pipeline.producer_commit()
                    store_pipeline.producer_acquire()
                epilogue_barrier.arrive_and_wait()
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
        store_pipeline.producer_tail()


def max_active_clusters(cluster_mn: tuple[int, int]) -> int:
    """How many clusters of this shape fit on the current GPU at one CTA per SM."""
    return utils.HardwareInfo().get_max_active_clusters(cluster_mn[0] * cluster_mn[1])


def compile_for(arch: str = "sm_90a", m: int = 1024, n: int = 1024, k: int = 1024, ab_dtype=cutlass.BFloat16,
                d_dtype=cutlass.BFloat16, tile_n: int = 256, cluster_mn=(2, 1), sms: int = 132, a_major: str = "k",
                b_major: str = "k", **variant):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    HopperGemm.can_implement(ab_dtype, d_dtype, m, n, k, tile_n, cluster_mn, a_major, b_major)
    order = {"k": (1, 0), "mn": (0, 1)}   # stride_order: which mode is contiguous
    fake_a = make_fake_compact_tensor(ab_dtype, (m, k), stride_order=order[a_major], assumed_align=16)
    fake_b = make_fake_compact_tensor(ab_dtype, (n, k), stride_order=order[b_major], assumed_align=16)
    fake_d = make_fake_compact_tensor(d_dtype, (m, n), stride_order=(1, 0), assumed_align=16)
    op = HopperGemm(ab_dtype, d_dtype, tile_n, cluster_mn, **variant)
    return cute.compile(op, fake_a, fake_b, fake_d, cutlass.Float32(1.0), sms // (cluster_mn[0] * cluster_mn[1]),
                        make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


def compile_gemm(a, b, out_dtype=None, alpha: float = 1.0, tile_n: int = 256, cluster_mn=(2, 1), swizzle: int = 1,
                 **variant):
    """For torch tensors a: (M, K), b: (N, K) (bf16, fp16, float32 = tf32 math, or float8_e4m3fn; K
    contiguous, or for the 16-bit types M/N contiguous, e.g. `x.t().contiguous().t()`): (run, d),
    where run() computes d = alpha * a @ b.T on the current stream, into the same d. out_dtype
    defaults to a's type (fp32 for tf32 math), bf16 for fp8 inputs. `variant` reaches HopperGemm (the
    negative control)."""
    import cuda.bindings.driver as cuda
    import torch

    out_dtype = out_dtype or (torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype)
    d = torch.empty(a.shape[0], b.shape[0], dtype=out_dtype, device=a.device)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    views = [_cute_tensor(a, operand=True), _cute_tensor(b, operand=True), _cute_tensor(d)]   # once: run() only launches
    kernel = _kernel(a, b, d, views, stream, tile_n, tuple(cluster_mn), swizzle, tuple(sorted(variant.items())))
    return (lambda: kernel(*views, cutlass.Float32(alpha), stream)), d


def gemm(a, b, out_dtype=None, alpha: float = 1.0, tile_n: int = 256, cluster_mn=(2, 1)):
    """d = alpha * a @ b.T for torch tensors a: (M, K), b: (N, K), in a new tensor. The kernel is
    compiled on the first call for each shape, dtype and setting, and reused afterwards."""
    run, d = compile_gemm(a, b, out_dtype, alpha, tile_n, cluster_mn)
    run()
    return d


_KERNELS: dict = {}


def _kernel(a, b, d, views: list, stream, tile_n: int, cluster_mn: tuple[int, int], swizzle: int, variant: tuple):
    """The kernel compiled for tensors shaped like a, b, d (once per key); call it with CuTe views of
    a, b, d, then alpha and the stream."""
    import torch

    key = (tuple(a.shape), tuple(b.shape), a.stride(), b.stride(), a.dtype, b.dtype, d.dtype, a.device.index,
           tile_n, cluster_mn, swizzle, variant)
    if key in _KERNELS:
        return _KERNELS[key]
    dtypes = _dtypes()
    for name, t in (("a", a), ("b", b), ("d", d)):
        if t.dtype not in dtypes:
            raise ValueError(f"{name}: dtype {t.dtype} unsupported; use one of {', '.join(map(str, dtypes))}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"expected a: (M, K) and b: (N, K); got {tuple(a.shape)} and {tuple(b.shape)}")
    majors = []
    for name, t in (("a", a), ("b", b)):
        if t.stride(1) == 1:
            majors.append("k")
        elif t.stride(0) == 1:
            majors.append("mn")
        else:
            raise ValueError(f"{name}: neither dimension is contiguous (strides {t.stride()}); call .contiguous()")
    if a.dtype != b.dtype:
        raise ValueError(f"a and b must have the same dtype; got {a.dtype} and {b.dtype}")
    (m, k), n = a.shape, b.shape[0]
    ab_dtype = cutlass.TFloat32 if a.dtype == torch.float32 else dtypes[a.dtype]
    HopperGemm.can_implement(ab_dtype, dtypes[d.dtype], m, n, k, tile_n, cluster_mn, *majors)
    op = HopperGemm(ab_dtype, dtypes[d.dtype], tile_n, cluster_mn, swizzle, **dict(variant))
    _KERNELS[key] = cute.compile(op, *views, cutlass.Float32(1.0), max_active_clusters(cluster_mn), stream)
    return _KERNELS[key]


def _dtypes() -> dict:
    import torch

    return {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32,
            torch.float8_e4m3fn: cutlass.Float8E4M3FN}


def _cute_tensor(tensor, operand: bool = False):
    """A CuTe view of a torch tensor. fp8 goes through a uint8 view with the element type set
    afterwards, as cutlass.torch does for every float of 8 bits or fewer; an fp32 operand (A or B)
    is viewed as tf32, the type the MMA reads."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    if tensor.dtype == torch.float8_e4m3fn:
        view = from_dlpack(tensor.view(torch.uint8), assumed_align=16)
        view.element_type = cutlass.Float8E4M3FN
        return view
    view = from_dlpack(tensor, assumed_align=16)
    if operand and tensor.dtype == torch.float32:
        view.element_type = cutlass.TFloat32
    return view


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    compile_for(args.arch)
    print(f"compiled for {args.arch}")
