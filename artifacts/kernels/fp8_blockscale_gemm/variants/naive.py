"""The shortest complete block-scaled FP8 GEMM for Hopper (sm_90a), for teaching: one stage, one warpgroup.

What it does
    D = A . B^T with A (M x K) e4m3 and FP32 scales per row per 128 K elements (sfa, M-major),
    B (N x K) e4m3 and FP32 scales per 128 x 128 block (sfb), D bf16; normal layout only.
    One CTA = one warpgroup (128 threads) computes one 64 x 128 tile of D. For every 128-wide K tile:
      warp 0 TMA-loads the A and B tiles into a single shared-memory buffer; the warpgroup waits,
      issues the tile's four wgmma k32 steps into a temporary FP32 accumulator (the first one
      overwrites it), waits for them (wait_group 0), releases the buffer, and promotes:
      acc += tmp * sfa[row, k_tile] * sfb[n_tile, k_tile], with the scales read from global memory;
    after the last K tile each thread stores its accumulator fragment straight to global memory.

Why it is slow, on purpose
    Nothing overlaps: while the tensor core works no load is in flight, while a load is in flight
    the tensor core idles, and while the warpgroup promotes nothing else runs. The production
    kernel (`../fp8_blockscale_gemm.py`) adds a multi-stage ring, a producer warpgroup, two
    consumer warpgroups taking turns on the tensor core, persistence, TMA for the scales and a
    TMA-store epilogue; probe-fp8-blockscale-gemm times this variant beside it.

Constraints (can_implement): M % 64 == 0, N % 128 == 0, K % 128 == 0.

Compile only (any machine): python -m artifacts.kernels.fp8_blockscale_gemm.variants.naive --arch sm_90a
"""

from __future__ import annotations

import argparse
import os
import tempfile

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

THREADS = 128                            # one warpgroup
TILE_M, TILE_N, TILE_K = 64, 128, 128    # one wgmma M; N = one B scale block; K tile = one scale block

DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)


class NaiveBlockScaleGemm:
    def __init__(self):
        self.ab_dtype, self.d_dtype, self.acc_dtype = cutlass.Float8E4M3FN, cutlass.BFloat16, cutlass.Float32
        self.tile_mnk = (TILE_M, TILE_N, TILE_K)

    @staticmethod
    def can_implement(m: int, n: int, k: int) -> None:
        """Raise ValueError naming the offending value and the supported set."""
        for name, size, tile in (("M", m, TILE_M), ("N", n, TILE_N), ("K", k, TILE_K)):
            if size < 1 or size % tile:
                raise ValueError(f"{name}={size} must be a positive multiple of its tile {tile}")

    @cute.jit
    def __call__(self, mA: cute.Tensor, mSFA: cute.Tensor, mB: cute.Tensor, mSFB: cute.Tensor, mD: cute.Tensor,
                 stream):
        # mA: (M, K) K-major e4m3; mSFA: (M, K/128) M-major fp32; mB: (N, K) K-major e4m3;
        # mSFB: (N/128, K/128) fp32; mD: (M, N) N-major bf16
        k_major = cute.nvgpu.OperandMajorMode.K
        tiled_mma = sm90_utils.make_trivial_tiled_mma(self.ab_dtype, self.ab_dtype, k_major, k_major,
                                                      self.acc_dtype, (1, 1, 1), tiler_mn=self.tile_mnk[:2])
        sA_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.tile_mnk, self.ab_dtype, 1)
        sB_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, self.tile_mnk, self.ab_dtype, 1)
        tma_a, gA_tma = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mA,
                                                    cute.slice_(sA_layout, (None, None, 0)), (TILE_M, TILE_K))
        tma_b, gB_tma = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mB,
                                                    cute.slice_(sB_layout, (None, None, 0)), (TILE_N, TILE_K))

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[cutlass.Int64, 2]   # full and empty of the one stage
            sA: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(sB_layout)], 1024]

        self.shared_storage = SharedStorage
        grid = cute.ceil_div((*mD.layout.shape, 1), self.tile_mnk[:2])
        self.kernel(tiled_mma, tma_a, gA_tma, tma_b, gB_tma, mSFA, mSFB, mD, sA_layout, sB_layout).launch(
            grid=grid, block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, gA_tma: cute.Tensor, tma_b: cute.CopyAtom,
               gB_tma: cute.Tensor, mSFA: cute.Tensor, mSFB: cute.Tensor, mD: cute.Tensor,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bidx, bidy, _ = cute.arch.block_idx()
        tile_coord = (bidx, bidy, None)

        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)   # (64, 128, 1)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)   # (128, 128, 1)
        stage_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(sA_layout, (None, None, 0))) + \
            cute.size_in_bytes(self.ab_dtype, cute.slice_(sB_layout, (None, None, 0)))
        ab_pipeline = pipeline.PipelineTmaAsync.create(
            num_stages=1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, THREADS // 32),
            tx_count=stage_bytes,
            barrier_storage=storage.barriers.data_ptr(),
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
        )

        # gA: (64, 128, k_tiles); gB: (128, 128, k_tiles); gD: (64, 128)
        gA = cute.local_tile(gA_tma, self.tile_mnk, tile_coord, proj=(1, None, 1))
        gB = cute.local_tile(gB_tma, self.tile_mnk, tile_coord, proj=(None, 1, 1))
        gD = cute.local_tile(mD, self.tile_mnk, tile_coord, proj=(1, 1, None))
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                           cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                           cute.group_modes(gB, 0, 2))

        thr_mma = tiled_mma.get_slice(tidx)
        tCgD = thr_mma.partition_C(gD)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))   # smem descriptors
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        rAcc = cute.make_rmem_tensor(tCgD.shape, self.acc_dtype)   # promoted sum, ((2, 2, 16), 1, 1)
        rTmp = cute.make_rmem_tensor(tCgD.shape, self.acc_dtype)   # one K tile's wgmma result
        rAcc.fill(0.0)
        # a thread's accumulator rows: warp * 16 + lane / 4, and 8 below it
        row0 = bidx * TILE_M + warp * 16 + tidx % 32 // 4

        producer = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        consumer = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        for k_tile in cutlass.range(cute.size(gA, mode=[2]), unroll=1):
            if warp == 0:  # the TMA copy elects one lane of the calling warp itself
                ab_pipeline.producer_acquire(producer)
                barrier = ab_pipeline.producer_get_barrier(producer)
                cute.copy(tma_a, tAgA[(None, k_tile)], tAsA[(None, 0)], tma_bar_ptr=barrier)
                cute.copy(tma_b, tBgB[(None, k_tile)], tBsB[(None, 0)], tma_bar_ptr=barrier)
            producer.advance()
            ab_pipeline.consumer_wait(consumer)
            warpgroup.fence()
            tiled_mma.set(warpgroup.Field.ACCUMULATE, False)   # the first k32 step overwrites rTmp
            for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                cute.gemm(tiled_mma, rTmp, tCrA[(None, None, kb, 0)], tCrB[(None, None, kb, 0)], rTmp)
                tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.commit_group()
            warpgroup.wait_group(0)  # rTmp is read next and the buffer reused: every wgmma must be done
            ab_pipeline.consumer_release(consumer)
            consumer.advance()
            sfb = mSFB[bidy, k_tile]
            scale0, scale1 = mSFA[row0, k_tile] * sfb, mSFA[row0 + 8, k_tile] * sfb
            for i in cutlass.range_constexpr(cute.size(rAcc)):   # element i sits in row r = i // 2 % 2
                rAcc[i] = rAcc[i] + rTmp[i] * (scale0 if i // 2 % 2 == 0 else scale1)

        # Epilogue: registers -> global directly (no smem staging, no TMA store).
        rD = cute.make_rmem_tensor(tCgD.shape, self.d_dtype)
        rD.store(rAcc.load().to(self.d_dtype))
        cute.autovec_copy(rD, tCgD)


def compile_for(arch: str = "sm_90a", m: int = 512, n: int = 512, k: int = 512):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    NaiveBlockScaleGemm.can_implement(m, n, k)
    fake = make_fake_compact_tensor
    tensors = (fake(cutlass.Float8E4M3FN, (m, k), stride_order=(1, 0), assumed_align=16),
               fake(cutlass.Float32, (m, k // TILE_K), stride_order=(0, 1), assumed_align=16),
               fake(cutlass.Float8E4M3FN, (n, k), stride_order=(1, 0), assumed_align=16),
               fake(cutlass.Float32, (n // TILE_N, k // TILE_K), stride_order=(1, 0), assumed_align=16),
               fake(cutlass.BFloat16, (m, n), stride_order=(1, 0), assumed_align=16))
    return cute.compile(NaiveBlockScaleGemm(), *tensors, make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


def compile_gemm(a, sfa, b, sfb):
    """For torch tensors laid out as for the production kernel's normal layout: (run, d), where
    run() computes d = D in bf16 on the current stream."""
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    (m, k), n = a.shape, b.shape[0]
    NaiveBlockScaleGemm.can_implement(m, n, k)
    d = torch.empty(m, n, dtype=torch.bfloat16, device=a.device)
    views = []
    for t in (a, sfa, b, sfb, d):
        view = from_dlpack(t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t, assumed_align=16)
        if t.dtype == torch.float8_e4m3fn:
            view.element_type = cutlass.Float8E4M3FN
        views.append(view)
    kernel = cute.compile(NaiveBlockScaleGemm(), *views, cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    # the stream is read at every launch: a launch bound to the stream current at compile time
    # escapes a CUDA-graph capture on another stream (the graph then holds no kernel at all)
    return (lambda: kernel(*views, cuda.CUstream(torch.cuda.current_stream().cuda_stream))), d


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    compile_for(args.arch)
    print(f"compiled for {args.arch}")
