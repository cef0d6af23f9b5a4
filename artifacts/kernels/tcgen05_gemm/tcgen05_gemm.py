"""A minimal, complete Blackwell GEMM: TMA loads, tcgen05.mma into TMEM, tcgen05.ld epilogue (sm_100a).

What it does
    D[m, n] = sum_k A[m, k] * B[n, k]  (A: M x K, B: N x K, both K-major; D: M x N row-major),
    bf16/fp16 inputs, fp32 accumulation in tensor memory, D in bf16, fp16 or fp32.
    One CTA of 4 warps computes one (tile_m x tile_n) tile of D:
      warp 0   producer: TMA-loads A and B K-tiles into a `stages`-deep shared-memory ring
               (PipelineTmaUmma: full barriers complete on the TMA bytes);
      warp 1   MMA issuer: for each K-tile, tcgen05.mma over its K-blocks into the TMEM
               accumulator, then releases the stage (tcgen05.commit to the empty barrier);
               after the last K-tile it commits the accumulator (PipelineUmmaAsync);
      warps 0-3 epilogue: wait for the accumulator, tcgen05.ld 32x32b (each warp reads its own
               32 TMEM lanes = 32 rows of the tile), convert, store to global memory.
    TMEM: allocated once per CTA (all four warps take part in the allocation barrier), freed at
    the end.

Why it exists
    It is the compile probe for hw-tcgen05-mma and hw-tmem (the expected tcgen05.* instructions
    must appear in the PTX for sm_100a), and, instantiated with D in fp32 and K = head_dim, the
    stage-A kernel of kernel-dsv4-sparse-decode (S = Q K^T through TMEM to global memory).
    It is written to be read: no persistence, no clusters, no 2-CTA MMA.

Constraints (can_implement): M % tile_m == 0, N % tile_n == 0, K % k_tile == 0; tile_m in {64, 128};
    tile_n a multiple of 16 in 16..256; k_tile a multiple of 16.

Compile only (any machine): python -m artifacts.kernels.tcgen05_gemm.tcgen05_gemm --arch sm_100a
Run: needs a B200-class GPU (sm_100a); not available here.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync, tcgen05

THREADS = 128
PRODUCER_WARP, MMA_WARP = 0, 1
TMEM_COLUMNS = 512
EPILOGUE_SUBTILES = 4
AB_DTYPES = (cutlass.BFloat16, cutlass.Float16)
D_DTYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.Float32)

# --keep-ptx/--keep-cubin also write files; keep them out of the working directory.
DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)  # the DSL names files there but does not create the directory


class Tcgen05Gemm:
    def __init__(self, ab_dtype=cutlass.BFloat16, d_dtype=cutlass.BFloat16, tile_mn: tuple[int, int] = (128, 128),
                 k_tile: int = 64, stages: int = 4, skip_last_k_tile: bool = False,
                 acc_consumer_arrivals: int = THREADS, tmem_barrier_threads: int = THREADS,
                 b_major: str = "k", cluster_m: int = 1, acc_pipeline_cluster_layout: bool = False):
        self.ab_dtype, self.d_dtype, self.acc_dtype = ab_dtype, d_dtype, cutlass.Float32
        self.tile_mnk = (*tile_mn, k_tile)
        self.stages = stages
        # Deliberately wrong variants (the negative control and the footgun probes):
        # skip_last_k_tile drops a K-tile (the gate must catch it); acc_consumer_arrivals other than
        # THREADS miscounts the epilogue's per-thread arrivals; tmem_barrier_threads other than
        # THREADS leaves warps that wait on the TMEM allocation barrier out of its count.
        self.skip_last_k_tile = skip_last_k_tile
        self.acc_consumer_arrivals = acc_consumer_arrivals
        self.tmem_barrier_threads = tmem_barrier_threads
        # cluster_m > 1 launches clusters of CTAs along M (each CTA still computes its own tile);
        # acc_pipeline_cluster_layout hands the cluster layout to the CTA-local accumulator
        # pipeline, the mistake behind footgun-cta-layout-vmnk-deadlock.
        self.cluster_m = cluster_m
        self.acc_pipeline_cluster_layout = acc_pipeline_cluster_layout
        # "k": B is (N, K) with K contiguous; "mn": B's N is contiguous (V in O = P V is this case).
        self.b_major = cute.nvgpu.OperandMajorMode.MN if b_major == "mn" else cute.nvgpu.OperandMajorMode.K

    @staticmethod
    def can_implement(ab_dtype, d_dtype, m: int, n: int, k: int, tile_mn=(128, 128), k_tile: int = 64) -> None:
        """Raise ValueError naming the offending value and the supported set."""
        if ab_dtype not in AB_DTYPES:
            raise ValueError(f"A/B dtype {ab_dtype} unsupported; use one of {AB_DTYPES}")
        if d_dtype not in D_DTYPES:
            raise ValueError(f"D dtype {d_dtype} unsupported; use one of {D_DTYPES}")
        tile_m, tile_n = tile_mn
        if tile_m not in (64, 128):
            raise ValueError(f"tile_m={tile_m}: cta_group::1 MMAs have M in {{64, 128}}")
        if tile_n % 16 or not 16 <= tile_n <= 256:
            raise ValueError(f"tile_n={tile_n}: must be a multiple of 16 in 16..256")
        if k_tile % 16:
            raise ValueError(f"k_tile={k_tile}: must be a multiple of the MMA's K (16)")
        for name, size, tile in (("M", m, tile_m), ("N", n, tile_n), ("K", k, k_tile)):
            if size % tile:
                raise ValueError(f"{name}={size} is not a multiple of its tile {tile}")

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, stream):
        # mA: (M, K) K-major; mB: (N, K), K-major or N-major (b_major); mD: (M, N) N-major
        mma_op = tcgen05.MmaF16BF16Op(self.ab_dtype, self.acc_dtype, (self.tile_mnk[0], self.tile_mnk[1], 16),
                                      tcgen05.CtaGroup.ONE, tcgen05.OperandSource.SMEM,
                                      cute.nvgpu.OperandMajorMode.K, self.b_major)
        tiled_mma = cute.make_tiled_mma(mma_op)
        sA_layout = sm100_utils.make_smem_layout_a(tiled_mma, self.tile_mnk, self.ab_dtype, self.stages)
        sB_layout = sm100_utils.make_smem_layout_b(tiled_mma, self.tile_mnk, self.ab_dtype, self.stages)
        load_op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        tma_a, gA_tma = cute.nvgpu.make_tiled_tma_atom_A(
            load_op, mA, cute.select(sA_layout, mode=[0, 1, 2]), self.tile_mnk, tiled_mma)
        tma_b, gB_tma = cute.nvgpu.make_tiled_tma_atom_B(
            load_op, mB, cute.select(sB_layout, mode=[0, 1, 2]), self.tile_mnk, tiled_mma)

        @cute.struct
        class SharedStorage:
            ab_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            acc_barriers: cute.struct.MemRange[cutlass.Int64, 2]
            tmem_base: cutlass.Int32

        self.shared_storage = SharedStorage
        grid = cute.ceil_div((*mD.layout.shape, 1), self.tile_mnk[:2])
        self.kernel(tiled_mma, tma_a, gA_tma, tma_b, gB_tma, mD, sA_layout, sB_layout).launch(
            grid=grid, block=(THREADS, 1, 1), cluster=(self.cluster_m, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, gA_tma: cute.Tensor, tma_b: cute.CopyAtom,
               gB_tma: cute.Tensor, mD: cute.Tensor, sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bidx, bidy, _ = cute.arch.block_idx()
        tile_coord = (bidx, bidy, None)

        allocator = cutlass.memory.SmemAllocator()
        storage = allocator.allocate(self.shared_storage)
        # sA: (MMA, MMA_M, MMA_K, stages); sB: (MMA, MMA_N, MMA_K, stages)
        sA = allocator.allocate_tensor(element_type=self.ab_dtype, layout=sA_layout.outer, byte_alignment=128,
                                       swizzle=sA_layout.inner)
        sB = allocator.allocate_tensor(element_type=self.ab_dtype, layout=sB_layout.outer, byte_alignment=128,
                                       swizzle=sB_layout.inner)

        # Every warp reads the accumulator, so every warp takes part in the allocation barrier.
        tmem = cutlass.memory.TmemAllocator(
            storage.tmem_base,
            barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=self.tmem_barrier_threads))
        tmem.allocate(TMEM_COLUMNS)
        if warp == PRODUCER_WARP:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        stage_bytes = cute.size_in_bytes(self.ab_dtype, cute.select(sA_layout, mode=[0, 1, 2])) + \
            cute.size_in_bytes(self.ab_dtype, cute.select(sB_layout, mode=[0, 1, 2]))
        ab_producer, ab_consumer = pipeline.PipelineTmaUmma.create(
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            tx_count=stage_bytes,
            barrier_storage=storage.ab_barriers.data_ptr(),
        ).make_participants()
        # The epilogue's consumers arrive per thread: all 128 of them (not 4 warps).
        acc_producer, acc_consumer = pipeline.PipelineUmmaAsync.create(
            num_stages=1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.acc_consumer_arrivals),
            barrier_storage=storage.acc_barriers.data_ptr(),
            cta_layout_vmnk=cute.make_layout((1, self.cluster_m, 1, 1))
            if cutlass.const_expr(self.acc_pipeline_cluster_layout) else None,
        ).make_participants()

        # gA: (tile_m, k_tile, k_tiles); gB: (tile_n, k_tile, k_tiles); gD: (tile_m, tile_n)
        gA = cute.local_tile(gA_tma, self.tile_mnk, tile_coord, proj=(1, None, 1))
        gB = cute.local_tile(gB_tma, self.tile_mnk, tile_coord, proj=(None, 1, 1))
        gD = cute.local_tile(mD, self.tile_mnk, tile_coord, proj=(1, 1, None))
        thr_mma = tiled_mma.get_slice(0)
        tCgA, tCgB, tCgD = thr_mma.partition_A(gA), thr_mma.partition_B(gB), thr_mma.partition_C(gD)
        tCrA, tCrB = tiled_mma.make_fragment_A(sA), tiled_mma.make_fragment_B(sB)
        tCtAcc = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C(self.tile_mnk[:2]))
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 3),
                                           cute.group_modes(tCgA, 0, 3))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 3),
                                           cute.group_modes(tCgB, 0, 3))

        tmem.wait_for_alloc()
        tCtAcc = cute.make_tensor(tmem.retrieve_ptr(self.acc_dtype), tCtAcc.layout)
        k_tiles = cute.size(gA, mode=[2])
        if cutlass.const_expr(self.skip_last_k_tile):
            k_tiles = k_tiles - 1

        if warp == PRODUCER_WARP:
            for _ in cutlass.range(k_tiles, unroll=1):
                empty = ab_producer.acquire_and_advance()
                cute.copy(tma_a, tAgA[(None, empty.count)], tAsA[(None, empty.index)], tma_bar_ptr=empty.barrier)
                cute.copy(tma_b, tBgB[(None, empty.count)], tBsB[(None, empty.index)], tma_bar_ptr=empty.barrier)

        if warp == MMA_WARP:
            acc_slot = acc_producer.acquire_and_advance()
            tiled_mma.set(tcgen05.Field.ACCUMULATE, False)  # the first MMA overwrites the accumulator
            for _ in cutlass.range(k_tiles, unroll=1):
                full = ab_consumer.wait_and_advance()
                for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                    cute.gemm(tiled_mma, tCtAcc, tCrA[(None, None, kb, full.index)],
                              tCrB[(None, None, kb, full.index)], tCtAcc)
                    tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                full.release()
            acc_slot.commit()

        tmem.relinquish_alloc_permit()

        # Epilogue: TMEM -> registers -> global, in EPILOGUE_SUBTILES column slices.
        epi_tiler = ((cute.size(tCtAcc, mode=[0, 0]), cute.size(tCtAcc, mode=[0, 1]) // EPILOGUE_SUBTILES),)
        tCtAcc_epi = cute.zipped_divide(tCtAcc, epi_tiler)
        tCgD_epi = cute.zipped_divide(tCgD, epi_tiler)
        load_atom = cute.make_copy_atom(
            tcgen05.Ld32x32bOp(tcgen05.Repetition(self.tile_mnk[1] // EPILOGUE_SUBTILES)), cutlass.Float32)
        tmem_copy = tcgen05.make_tmem_copy(load_atom, tCtAcc_epi[None, 0])
        thr_copy = tmem_copy.get_slice(tidx)
        tTtAcc = thr_copy.partition_S(tCtAcc_epi)   # (TmemCpy, NumTmemCpy, subtiles)
        tTgD = thr_copy.partition_D(tCgD_epi)       # (TmemCpy, NumTmemCpy, subtiles)
        rAcc = cute.make_rmem_tensor(tTgD[None, None, 0].shape, self.acc_dtype)
        rD = cute.make_rmem_tensor(tTgD[None, None, 0].shape, self.d_dtype)

        acc_full = acc_consumer.wait_and_advance()
        for sub in cutlass.range(cute.size(tTtAcc, mode=[2])):
            cute.copy(tmem_copy, tTtAcc[None, None, sub], rAcc)
            rD.store(rAcc.load().to(self.d_dtype))
            cute.autovec_copy(rD, tTgD[None, None, sub])
        acc_full.release()

        pipeline.sync(barrier_id=1)  # every warp is done with TMEM before it is freed
        tmem.free(tCtAcc.iterator)


def compile_for(arch: str = "sm_100a", m: int = 512, n: int = 512, k: int = 512, ab_dtype=cutlass.BFloat16,
                d_dtype=cutlass.BFloat16, tile_mn=(128, 128), b_data_major: str = "k", **variant):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin; `variant` goes to the kernel.
    b_data_major says how B is stored ("k": K contiguous, "mn": N contiguous)."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    Tcgen05Gemm.can_implement(ab_dtype, d_dtype, m, n, k, tile_mn)
    fake_a = make_fake_compact_tensor(ab_dtype, (m, k), stride_order=(1, 0), assumed_align=16)
    fake_b = make_fake_compact_tensor(ab_dtype, (n, k), stride_order=(1, 0) if b_data_major == "k" else (0, 1),
                                      assumed_align=16)
    fake_d = make_fake_compact_tensor(d_dtype, (m, n), stride_order=(1, 0), assumed_align=16)
    return cute.compile(Tcgen05Gemm(ab_dtype, d_dtype, tile_mn, **variant), fake_a, fake_b, fake_d, make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_100a")
    args = parser.parse_args()
    compile_for(args.arch)
    print(f"compiled for {args.arch}")
