"""A 2-CTA Blackwell GEMM: one tcgen05.mma.cta_group::2 spans a pair of SMs (sm_100a).

What it does
    D[m, n] = sum_k A[m, k] * B[n, k] (A: M x K, B: N x K, both K-major; D: M x N row-major), bf16
    in, fp32 accumulation in TMEM, bf16 out - as tcgen05_gemm.py, but a cluster of two CTAs (a CTA
    pair, along M) computes one 256 x tile_n tile with MMAs of M = 256:
      each CTA     TMA-loads its own 128 rows of A and its half (tile_n / 2 rows) of B into its
                   shared memory; both loads signal the even (leader) CTA's full barrier, so the
                   transaction count is the pair's bytes;
      leader CTA   its MMA warp issues the 2-CTA MMAs, which read A and B from the shared memory of
                   both CTAs and write each CTA's 128 accumulator rows into that CTA's TMEM; the
                   stage release and the accumulator commit are multicast to both CTAs;
      both CTAs    allocate the same TMEM columns (a paired allocation), drain their own 128 rows
                   with tcgen05.ld and store them.
    Compared with two independent 128-row CTAs, each CTA holds half of B instead of all of it:
    per stage (128 + tile_n / 2) x k_tile elements instead of (128 + tile_n) x k_tile, so more
    stages fit, and B is read from L2 once per pair.

Why it exists
    The compile probe for hw-2cta-mma: the cta_group::2 MMA, the paired TMEM allocation and the
    multicast commit must be in the PTX for sm_100a.

Constraints (can_implement): M % 256 == 0, N % tile_n == 0, K % k_tile == 0; tile_n a multiple of 32
    in 32..256; k_tile a multiple of 16.

Compile only (any machine): python -m artifacts.kernels.tcgen05_gemm.pair_gemm --arch sm_100a
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
PAIR = 2                        # CTAs per MMA (cta_group::2), the cluster's M extent
PAIR_TILE_M = 256               # MMA M of a CTA pair; each CTA owns 128 rows
AB_DTYPE, ACC_DTYPE, D_DTYPE = cutlass.BFloat16, cutlass.Float32, cutlass.BFloat16

DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)  # the DSL names files there but does not create the directory


class PairGemm:
    def __init__(self, tile_n: int = 256, k_tile: int = 64, stages: int = 6):
        self.tile_mnk = (PAIR_TILE_M, tile_n, k_tile)
        self.stages = stages

    @staticmethod
    def can_implement(m: int, n: int, k: int, tile_n: int = 256, k_tile: int = 64) -> None:
        """Raise ValueError naming the offending value and the supported set."""
        if tile_n % 32 or not 32 <= tile_n <= 256:
            raise ValueError(f"tile_n={tile_n}: must be a multiple of 32 in 32..256 (each CTA loads half of it)")
        if k_tile % 16:
            raise ValueError(f"k_tile={k_tile}: must be a multiple of the MMA's K (16)")
        for name, size, tile in (("M", m, PAIR_TILE_M), ("N", n, tile_n), ("K", k, k_tile)):
            if size % tile:
                raise ValueError(f"{name}={size} is not a multiple of its tile {tile}")

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, stream):
        mma_op = tcgen05.MmaF16BF16Op(AB_DTYPE, ACC_DTYPE, self.tile_mnk[:2] + (16,), tcgen05.CtaGroup.TWO,
                                      tcgen05.OperandSource.SMEM, cute.nvgpu.OperandMajorMode.K,
                                      cute.nvgpu.OperandMajorMode.K)
        tiled_mma = cute.make_tiled_mma(mma_op)
        # (V, M, N, L): V = the two CTAs of the pair; one pair per cluster
        pair_layout = cute.tiled_divide(cute.make_layout((PAIR, 1, 1)), (tiled_mma.thr_id,))
        sA_layout = sm100_utils.make_smem_layout_a(tiled_mma, self.tile_mnk, AB_DTYPE, self.stages)
        sB_layout = sm100_utils.make_smem_layout_b(tiled_mma, self.tile_mnk, AB_DTYPE, self.stages)
        load_op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.TWO)
        tma_a, gA_tma = cute.nvgpu.make_tiled_tma_atom_A(
            load_op, mA, cute.select(sA_layout, mode=[0, 1, 2]), self.tile_mnk, tiled_mma, pair_layout.shape)
        tma_b, gB_tma = cute.nvgpu.make_tiled_tma_atom_B(
            load_op, mB, cute.select(sB_layout, mode=[0, 1, 2]), self.tile_mnk, tiled_mma, pair_layout.shape)

        @cute.struct
        class SharedStorage:
            ab_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            acc_barriers: cute.struct.MemRange[cutlass.Int64, 2]
            tmem_dealloc_barrier: cutlass.Int64
            tmem_base: cutlass.Int32

        self.shared_storage = SharedStorage
        # One CTA per 128 rows: the grid's M extent is twice the number of pair tiles.
        grid = (cute.size(mD, mode=[0]) // (PAIR_TILE_M // PAIR), cute.size(mD, mode=[1]) // self.tile_mnk[1], 1)
        self.kernel(tiled_mma, tma_a, gA_tma, tma_b, gB_tma, mD, sA_layout, sB_layout, pair_layout).launch(
            grid=grid, block=(THREADS, 1, 1), cluster=(PAIR, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, gA_tma: cute.Tensor, tma_b: cute.CopyAtom,
               gB_tma: cute.Tensor, mD: cute.Tensor, sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               pair_layout: cute.Layout):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bidx, bidy, _ = cute.arch.block_idx()
        rank_in_pair = bidx % PAIR
        is_leader = rank_in_pair == 0
        tile_coord = (bidx // PAIR, bidy, None)       # the pair's tile of D

        allocator = cutlass.memory.SmemAllocator()
        storage = allocator.allocate(self.shared_storage)
        sA = allocator.allocate_tensor(element_type=AB_DTYPE, layout=sA_layout.outer, byte_alignment=128,
                                       swizzle=sA_layout.inner)
        sB = allocator.allocate_tensor(element_type=AB_DTYPE, layout=sB_layout.outer, byte_alignment=128,
                                       swizzle=sB_layout.inner)
        if warp == PRODUCER_WARP:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        # Both CTAs' loads complete on the leader's barrier: count the pair's bytes.
        stage_bytes = (cute.size_in_bytes(AB_DTYPE, cute.select(sA_layout, mode=[0, 1, 2]))
                       + cute.size_in_bytes(AB_DTYPE, cute.select(sB_layout, mode=[0, 1, 2]))) * PAIR
        ab_producer, ab_consumer = pipeline.PipelineTmaUmma.create(
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            tx_count=stage_bytes,
            barrier_storage=storage.ab_barriers.data_ptr(),
            cta_layout_vmnk=pair_layout,
        ).make_participants()
        # The leader's commit reaches both CTAs; every thread of both CTAs arrives when done reading.
        acc_producer, acc_consumer = pipeline.PipelineUmmaAsync.create(
            num_stages=1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, PAIR * THREADS),
            barrier_storage=storage.acc_barriers.data_ptr(),
            cta_layout_vmnk=pair_layout,
        ).make_participants()

        gA = cute.local_tile(gA_tma, self.tile_mnk, tile_coord, proj=(1, None, 1))
        gB = cute.local_tile(gB_tma, self.tile_mnk, tile_coord, proj=(None, 1, 1))
        gD = cute.local_tile(mD, self.tile_mnk, tile_coord, proj=(1, 1, None))
        thr_mma = tiled_mma.get_slice(rank_in_pair)    # this CTA's half of the pair's MMA
        tCgA, tCgB, tCgD = thr_mma.partition_A(gA), thr_mma.partition_B(gB), thr_mma.partition_C(gD)
        tCrA, tCrB = tiled_mma.make_fragment_A(sA), tiled_mma.make_fragment_B(sB)
        tCtAcc = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C(self.tile_mnk[:2]))
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 3),
                                           cute.group_modes(tCgA, 0, 3))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 3),
                                           cute.group_modes(tCgB, 0, 3))

        # A paired allocation: both CTAs get the same columns; the MMA writes into both.
        tmem = cutlass.memory.TmemAllocator(
            storage.tmem_base, barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS),
            is_two_cta=True, two_cta_tmem_dealloc_mbar_ptr=storage.tmem_dealloc_barrier)
        tmem.allocate(TMEM_COLUMNS)
        tmem.wait_for_alloc()
        tCtAcc = cute.make_tensor(tmem.retrieve_ptr(ACC_DTYPE), tCtAcc.layout)
        k_tiles = cute.size(gA, mode=[2])

        if warp == PRODUCER_WARP:
            for _ in cutlass.range(k_tiles, unroll=1):
                empty = ab_producer.acquire_and_advance()
                cute.copy(tma_a, tAgA[(None, empty.count)], tAsA[(None, empty.index)], tma_bar_ptr=empty.barrier)
                cute.copy(tma_b, tBgB[(None, empty.count)], tBsB[(None, empty.index)], tma_bar_ptr=empty.barrier)

        if warp == MMA_WARP and is_leader:
            acc_slot = acc_producer.acquire_and_advance()
            tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
            for _ in cutlass.range(k_tiles, unroll=1):
                full = ab_consumer.wait_and_advance()
                for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                    cute.gemm(tiled_mma, tCtAcc, tCrA[(None, None, kb, full.index)],
                              tCrB[(None, None, kb, full.index)], tCtAcc)
                    tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                full.release()
            acc_slot.commit()

        tmem.relinquish_alloc_permit()

        load_atom = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition(32)), ACC_DTYPE)
        epi_tiler = ((cute.size(tCtAcc, mode=[0, 0]), 32),)
        tCtAcc_epi = cute.zipped_divide(tCtAcc, epi_tiler)
        tCgD_epi = cute.zipped_divide(tCgD, epi_tiler)
        tmem_copy = tcgen05.make_tmem_copy(load_atom, tCtAcc_epi[None, 0])
        thr_copy = tmem_copy.get_slice(tidx)
        tTtAcc, tTgD = thr_copy.partition_S(tCtAcc_epi), thr_copy.partition_D(tCgD_epi)
        rAcc = cute.make_rmem_tensor(tTgD[None, None, 0].shape, ACC_DTYPE)
        rD = cute.make_rmem_tensor(tTgD[None, None, 0].shape, D_DTYPE)
        acc_full = acc_consumer.wait_and_advance()
        for sub in cutlass.range(cute.size(tTtAcc, mode=[2])):
            cute.copy(tmem_copy, tTtAcc[None, None, sub], rAcc)
            rD.store(rAcc.load().to(D_DTYPE))
            cute.autovec_copy(rD, tTgD[None, None, sub])
        acc_full.release()

        # Neither CTA may leave while the peer can still signal its barriers.
        if warp == PRODUCER_WARP:
            ab_producer.tail()
        if warp == MMA_WARP and is_leader:
            acc_producer.tail()
        pipeline.sync(barrier_id=1)
        tmem.free(tCtAcc.iterator)


def compile_for(arch: str = "sm_100a", m: int = 512, n: int = 512, k: int = 512, tile_n: int = 256):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    PairGemm.can_implement(m, n, k, tile_n)
    fake = lambda rows, cols: make_fake_compact_tensor(AB_DTYPE, (rows, cols), stride_order=(1, 0),  # noqa: E731
                                                        assumed_align=16)
    return cute.compile(PairGemm(tile_n), fake(m, k), fake(n, k), fake(m, n), make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_100a")
    args = parser.parse_args()
    compile_for(args.arch)
    print(f"compiled for {args.arch}")
