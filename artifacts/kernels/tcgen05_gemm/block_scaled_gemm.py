"""Block-scaled GEMMs on Blackwell: NVFP4, MXFP4 and MXFP8 through tcgen05.mma with scales in TMEM (sm_100a).

What it does
    D[m, n] = sum_k (A[m, k] * SFA[m, k // V]) * (B[n, k] * SFB[n, k // V]), with A and B K-major in
    the format's element type, one scale factor per V K-elements of each row (SFA, SFB), fp32
    accumulation in TMEM and D in fp16. The formats (FORMATS):
      nvfp4   E2M1 elements, E4M3 scales, V = 16   tcgen05.mma kind::mxf4nvf4 (block16)
      mxfp4   E2M1 elements, UE8M0 scales, V = 32  tcgen05.mma kind::mxf4
      mxfp8   E4M3 elements, UE8M0 scales, V = 32  tcgen05.mma kind::mxf8f6f4
    NVFP4's per-tensor FP32 scale is a scalar the caller folds into D; it does not touch the MMA.
    One CTA of 4 warps computes a 128 x 128 tile of D:
      warp 0   TMA-loads the A, B, SFA and SFB tiles of each K-tile into a `stages`-deep ring;
      warp 1   copies the stage's scale factors from shared memory into TMEM (tcgen05.cp), points
               the MMA's SFA/SFB fields at them and issues the block-scaled MMAs;
      warps 0-3 drain the accumulator with tcgen05.ld and store D.
    TMEM holds the accumulator and, next to it, the scale factors the MMA reads.

Why it exists
    The compile probes for hw-nvfp4 and hw-block-scaled-formats: each block-scaled MMA kind, the
    scale-factor copies into TMEM and the TMA loads must all be in the PTX for sm_100a.

Constraints: M % 128 == 0, N % 128 == 0, K % (4 * MMA K) == 0 (4 MMAs per K-tile; MMA K is 64 for
the FP4 kinds, 32 for MXFP8).
Compile only: python -m artifacts.kernels.tcgen05_gemm.block_scaled_gemm --arch sm_100a --format mxfp8
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
import cutlass.utils.blockscaled_layout as blockscaled
from cutlass.cute.nvgpu import cpasync, tcgen05

THREADS = 128
PRODUCER_WARP, MMA_WARP = 0, 1
D_DTYPE = cutlass.Float16


@dataclass(frozen=True)
class BlockFormat:
    """One block-scaled format as the tensor core takes it."""

    element: type
    scale: type
    block: int           # K-elements per scale factor
    mma_k: int           # K of one MMA instruction

    def mma_op(self, tile_mn: tuple[int, int]):
        shape = (*tile_mn, self.mma_k)
        one, smem, k_major = tcgen05.CtaGroup.ONE, tcgen05.OperandSource.SMEM, cute.nvgpu.OperandMajorMode.K
        if self.element is cutlass.Float8E4M3FN:
            return tcgen05.MmaMXF8F6F4Op(self.element, self.element, shape, one, smem, k_major, k_major)
        if self.block == 32:
            return tcgen05.MmaMXF4Op(shape, one, smem)
        return tcgen05.MmaMXF4NVF4Op(self.scale, shape, one, smem)


FORMATS = {
    "nvfp4": BlockFormat(cutlass.Float4E2M1FN, cutlass.Float8E4M3FN, block=16, mma_k=64),
    "mxfp4": BlockFormat(cutlass.Float4E2M1FN, cutlass.Float8E8M0FNU, block=32, mma_k=64),
    "mxfp8": BlockFormat(cutlass.Float8E4M3FN, cutlass.Float8E8M0FNU, block=32, mma_k=32),
}

# --keep-ptx/--keep-cubin also write files; keep them out of the working directory.
DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)  # the DSL names files there but does not create the directory


class BlockScaledGemm:
    def __init__(self, fmt: str = "nvfp4", tile_mn: tuple[int, int] = (128, 128), k_blocks: int = 4, stages: int = 4):
        self.fmt = FORMATS[fmt]
        self.tile_mnk = (*tile_mn, self.fmt.mma_k * k_blocks)
        self.stages = stages

    @staticmethod
    def can_implement(fmt: str, m: int, n: int, k: int, tile_mn=(128, 128), k_blocks: int = 4) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"format {fmt!r} unsupported; use one of {sorted(FORMATS)}")
        k_tile = FORMATS[fmt].mma_k * k_blocks
        for name, size, tile in (("M", m, tile_mn[0]), ("N", n, tile_mn[1]), ("K", k, k_tile)):
            if size % tile:
                raise ValueError(f"{name}={size} is not a multiple of its tile {tile}")

    @cute.jit
    def __call__(self, a_ptr: cute.Pointer, b_ptr: cute.Pointer, sfa_ptr: cute.Pointer, sfb_ptr: cute.Pointer,
                 d_ptr: cute.Pointer, m: cutlass.Constexpr, n: cutlass.Constexpr, k: cutlass.Constexpr, stream):
        ab_dtype, sf_dtype, sf_vec = self.fmt.element, self.fmt.scale, self.fmt.block
        # A: (M, K, 1) and B: (N, K, 1), K-major; D: (M, N, 1) N-major fp16
        mA = cute.make_tensor(a_ptr, cute.make_layout((m, k, 1), stride=(k, 1, m * k)))
        mB = cute.make_tensor(b_ptr, cute.make_layout((n, k, 1), stride=(k, 1, n * k)))
        mD = cute.make_tensor(d_ptr, cute.make_layout((m, n, 1), stride=(n, 1, m * n)))
        # Scale factors in the tensor-core's atom layout, filled out to A's and B's shapes.
        mSFA = cute.make_tensor(sfa_ptr, blockscaled.tile_atom_to_shape_SF(mA.shape, sf_vec))
        mSFB = cute.make_tensor(sfb_ptr, blockscaled.tile_atom_to_shape_SF(mB.shape, sf_vec))

        tiled_mma = cute.make_tiled_mma(self.fmt.mma_op(self.tile_mnk[:2]))
        cluster_vmnk = cute.tiled_divide(cute.make_layout((1, 1, 1)), (tiled_mma.thr_id.shape,))
        sA_layout = sm100_utils.make_smem_layout_a(tiled_mma, self.tile_mnk, ab_dtype, self.stages)
        sB_layout = sm100_utils.make_smem_layout_b(tiled_mma, self.tile_mnk, ab_dtype, self.stages)
        sSFA_layout = blockscaled.make_smem_layout_sfa(tiled_mma, self.tile_mnk, sf_vec, self.stages)
        sSFB_layout = blockscaled.make_smem_layout_sfb(tiled_mma, self.tile_mnk, sf_vec, self.stages)
        one = lambda layout: cute.slice_(layout, (None, None, None, 0))  # noqa: E731  (one stage)
        load = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        tma_a, gA = cute.nvgpu.make_tiled_tma_atom_A(load, mA, one(sA_layout), self.tile_mnk, tiled_mma,
                                                     cluster_vmnk.shape)
        tma_b, gB = cute.nvgpu.make_tiled_tma_atom_B(load, mB, one(sB_layout), self.tile_mnk, tiled_mma,
                                                     cluster_vmnk.shape)
        # Scale factors travel as 16-bit words: TMA has no 8-bit float element type.
        tma_sfa, gSFA = cute.nvgpu.make_tiled_tma_atom_A(load, mSFA, one(sSFA_layout), self.tile_mnk, tiled_mma,
                                                         cluster_vmnk.shape, internal_type=cutlass.Int16)
        tma_sfb, gSFB = cute.nvgpu.make_tiled_tma_atom_B(load, mSFB, one(sSFB_layout), self.tile_mnk, tiled_mma,
                                                         cluster_vmnk.shape, internal_type=cutlass.Int16)
        self.stage_bytes = (cute.size_in_bytes(ab_dtype, one(sA_layout)) + cute.size_in_bytes(ab_dtype, one(sB_layout))
                            + cute.size_in_bytes(sf_dtype, one(sSFA_layout))
                            + cute.size_in_bytes(sf_dtype, one(sSFB_layout)))

        @cute.struct
        class SharedStorage:
            ab_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            acc_barriers: cute.struct.MemRange[cutlass.Int64, 2]
            tmem_base: cutlass.Int32

        self.shared_storage = SharedStorage
        grid = (m // self.tile_mnk[0], n // self.tile_mnk[1], 1)
        self.kernel(tiled_mma, tma_a, gA, tma_b, gB, tma_sfa, gSFA, tma_sfb, gSFB, mD,
                    sA_layout, sB_layout, sSFA_layout, sSFB_layout).launch(
            grid=grid, block=[THREADS, 1, 1], cluster=(1, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, gA_all: cute.Tensor, tma_b: cute.CopyAtom,
               gB_all: cute.Tensor, tma_sfa: cute.CopyAtom, gSFA_all: cute.Tensor, tma_sfb: cute.CopyAtom,
               gSFB_all: cute.Tensor, mD: cute.Tensor, sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               sSFA_layout: cute.Layout, sSFB_layout: cute.Layout):
        ab_dtype, sf_dtype, sf_vec = self.fmt.element, self.fmt.scale, self.fmt.block
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bidx, bidy, bidz = cute.arch.block_idx()

        alloc = cutlass.memory.SmemAllocator()
        storage = alloc.allocate(self.shared_storage)
        sA = alloc.allocate_tensor(element_type=ab_dtype, layout=sA_layout.outer, byte_alignment=128,
                                   swizzle=sA_layout.inner)
        sB = alloc.allocate_tensor(element_type=ab_dtype, layout=sB_layout.outer, byte_alignment=128,
                                   swizzle=sB_layout.inner)
        sSFA = alloc.allocate_tensor(element_type=sf_dtype, layout=sSFA_layout, byte_alignment=128)
        sSFB = alloc.allocate_tensor(element_type=sf_dtype, layout=sSFB_layout, byte_alignment=128)

        ab_producer, ab_consumer = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ab_barriers.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1), tx_count=self.stage_bytes,
        ).make_participants()
        acc_producer, acc_consumer = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_barriers.data_ptr(), num_stages=1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, THREADS),  # per-thread arrivals
        ).make_participants()

        tiler_mk = cute.slice_(self.tile_mnk, (None, 0, None))
        tiler_nk = cute.slice_(self.tile_mnk, (0, None, None))
        # (bM, bK, RestM, RestK, RestL) and friends
        gA = cute.local_tile(gA_all, tiler_mk, (None, None, None))
        gB = cute.local_tile(gB_all, tiler_nk, (None, None, None))
        gSFA = cute.local_tile(gSFA_all, tiler_mk, (None, None, None))
        gSFB = cute.local_tile(gSFB_all, tiler_nk, (None, None, None))
        gD = cute.local_tile(mD, cute.slice_(self.tile_mnk, (None, None, 0)), (None, None, None))
        thr_mma = tiled_mma.get_slice(0)
        tCgA, tCgB = thr_mma.partition_A(gA), thr_mma.partition_B(gB)
        tCgSFA, tCgSFB = thr_mma.partition_A(gSFA), thr_mma.partition_B(gSFB)
        tCgD = thr_mma.partition_C(gD)
        part = lambda atom, s, g: cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(s, 0, 3),  # noqa: E731
                                                        cute.group_modes(g, 0, 3))
        tAsA, tAgA = part(tma_a, sA, tCgA)
        tBsB, tBgB = part(tma_b, sB, tCgB)
        tAsSFA, tAgSFA = part(tma_sfa, sSFA, tCgSFA)
        tBsSFB, tBgSFB = part(tma_sfb, sSFB, tCgSFB)
        tAsSFA, tAgSFA = cute.filter_zeros(tAsSFA), cute.filter_zeros(tAgSFA)
        tBsSFB, tBgSFB = cute.filter_zeros(tBsSFB), cute.filter_zeros(tBgSFB)
        # This CTA's tile: ((atom_v, rest_v), RestK)
        tAgA, tAgSFA = tAgA[(None, bidx, None, bidz)], tAgSFA[(None, bidx, None, bidz)]
        tBgB, tBgSFB = tBgB[(None, bidy, None, bidz)], tBgSFB[(None, bidy, None, bidz)]

        tCrA, tCrB = tiled_mma.make_fragment_A(sA), tiled_mma.make_fragment_B(sB)
        acc_layout = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C(self.tile_mnk[:2])).layout
        tmem = cutlass.memory.TmemAllocator(
            storage.tmem_base, barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS))
        tmem.allocate(512)
        tmem.wait_for_alloc()
        acc_ptr = tmem.retrieve_ptr(cutlass.Float32)
        tCtAcc = cute.make_tensor(acc_ptr, acc_layout)
        # The scale factors sit in TMEM right after the accumulator, SFA then SFB.
        sfa_ptr = cute.recast_ptr(acc_ptr + tcgen05.find_tmem_tensor_col_offset(tCtAcc), dtype=sf_dtype)
        tCtSFA = cute.make_tensor(sfa_ptr, blockscaled.make_tmem_layout_sfa(
            tiled_mma, self.tile_mnk, sf_vec, cute.slice_(sSFA_layout, (None, None, None, 0))))
        sfb_ptr = cute.recast_ptr(acc_ptr + tcgen05.find_tmem_tensor_col_offset(tCtAcc)
                                  + tcgen05.find_tmem_tensor_col_offset(tCtSFA), dtype=sf_dtype)
        tCtSFB = cute.make_tensor(sfb_ptr, blockscaled.make_tmem_layout_sfb(
            tiled_mma, self.tile_mnk, sf_vec, cute.slice_(sSFB_layout, (None, None, None, 0))))

        # Shared -> tensor memory copies of the scale factors (tcgen05.cp)
        s2t_atom = cute.make_copy_atom(tcgen05.Cp4x32x128bOp(tcgen05.CtaGroup.ONE), sf_dtype)

        def s2t(s_sf, t_sf):
            t_compact = cute.filter_zeros(t_sf)
            copy = tcgen05.make_s2t_copy(s2t_atom, t_compact)
            thr = copy.get_slice(0)
            src = tcgen05.get_s2t_smem_desc_tensor(copy, thr.partition_S(cute.filter_zeros(s_sf)))
            return copy, src, thr.partition_D(t_compact)

        sfa_copy, sfa_src, sfa_dst = s2t(sSFA, tCtSFA)
        sfb_copy, sfb_src, sfb_dst = s2t(sSFB, tCtSFB)
        k_tiles = cute.size(tAgA, mode=[1])

        if warp == PRODUCER_WARP:
            for _ in cutlass.range(k_tiles, unroll=1):
                empty = ab_producer.acquire_and_advance()
                for atom, src, dst in ((tma_a, tAgA, tAsA), (tma_b, tBgB, tBsB), (tma_sfa, tAgSFA, tAsSFA),
                                       (tma_sfb, tBgSFB, tBsSFB)):
                    cute.copy(atom, src[(None, empty.count)], dst[(None, empty.index)], tma_bar_ptr=empty.barrier)

        if warp == MMA_WARP:
            acc_slot = acc_producer.acquire_and_advance()
            tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
            for _ in cutlass.range(k_tiles, unroll=1):
                full = ab_consumer.wait_and_advance()
                cute.copy(sfa_copy, sfa_src[(None, None, None, None, full.index)], sfa_dst)
                cute.copy(sfb_copy, sfb_src[(None, None, None, None, full.index)], sfb_dst)
                for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                    tiled_mma.set(tcgen05.Field.SFA, tCtSFA[(None, None, kb)].iterator)
                    tiled_mma.set(tcgen05.Field.SFB, tCtSFB[(None, None, kb)].iterator)
                    cute.gemm(tiled_mma, tCtAcc, tCrA[(None, None, kb, full.index)],
                              tCrB[(None, None, kb, full.index)], tCtAcc)
                    tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                full.release()
            acc_slot.commit()

        tmem.relinquish_alloc_permit()
        load_atom = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition(self.tile_mnk[1])), cutlass.Float32)
        tmem_copy = tcgen05.make_tmem_copy(load_atom, tCtAcc)
        thr_copy = tmem_copy.get_slice(tidx)
        tTtAcc = thr_copy.partition_S(tCtAcc)
        tTgD = thr_copy.partition_D(tCgD)[(None, None, None, None, bidx, bidy, bidz)]
        rAcc = cute.make_rmem_tensor(tTgD.shape, cutlass.Float32)
        rD = cute.make_rmem_tensor(tTgD.shape, D_DTYPE)
        acc_full = acc_consumer.wait_and_advance()
        cute.copy(tmem_copy, tTtAcc, rAcc)
        rD.store(rAcc.load().to(D_DTYPE))
        cute.copy(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), D_DTYPE), rD, tTgD)
        acc_full.release()
        pipeline.sync(barrier_id=1)
        tmem.free(acc_ptr)


def compile_for(arch: str = "sm_100a", m: int = 256, n: int = 256, k: int = 512, fmt: str = "nvfp4"):
    """Compile one format's GEMM with placeholder pointers (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_ptr
    from cutlass.cute.typing import AddressSpace
    from cutlass.runtime import make_fake_stream

    BlockScaledGemm.can_implement(fmt, m, n, k)
    element, scale = FORMATS[fmt].element, FORMATS[fmt].scale
    ptr = lambda dtype, align: make_ptr(dtype, 0, AddressSpace.gmem, assumed_align=align)  # noqa: E731
    return cute.compile(BlockScaledGemm(fmt), ptr(element, 32), ptr(element, 32), ptr(scale, 16), ptr(scale, 16),
                        ptr(D_DTYPE, 32), m, n, k, make_fake_stream(), options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_100a")
    parser.add_argument("--format", default="nvfp4", choices=sorted(FORMATS))
    args = parser.parse_args()
    compile_for(args.arch, fmt=args.format)
    print("compiled")
