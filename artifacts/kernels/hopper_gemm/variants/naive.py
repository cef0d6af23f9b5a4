"""The shortest complete wgmma GEMM for Hopper (sm_90a), for teaching: one stage, one warpgroup.

What it does
    D[m, n] = sum_k A[m, k] * B[n, k]  (A: M x K, B: N x K, both K-major; D: M x N row-major),
    bf16/fp16 inputs, fp32 accumulation in registers, D in the input type or fp32.
    One CTA = one warpgroup (128 threads) computes one 64 x tile_n tile of D. For every K tile:
      warp 0 TMA-loads the A and B tiles into a single shared-memory buffer (the mbarrier
      completes on the TMA's bytes); the warpgroup waits on it, issues the K tile's wgmmas
      (fence / 4 x wgmma / commit), waits for them to finish (wait_group 0) and releases the buffer;
    after the last K tile each thread stores its accumulator fragment straight to global memory.

Why it is slow, on purpose
    Nothing overlaps: while the tensor core works, no load is in flight, and while a load is in
    flight the tensor core idles. The production kernel (`../hopper_gemm.py`) adds a multi-stage
    ring, a producer warpgroup, two consumer warpgroups, persistence and a TMA-store epilogue;
    probe-hopper-gemm-naive times this variant next to cuBLAS so the gap is measured.

Constraints (can_implement): M % 64 == 0, N % tile_n == 0, K % 64 == 0; tile_n in {64, 128, 256}.

Compile only (any machine): python -m artifacts.kernels.hopper_gemm.variants.naive --arch sm_90a
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

THREADS = 128          # one warpgroup
TILE_M, TILE_K = 64, 64  # one wgmma M; K tile = 4 bf16 wgmmas of K=16 (128 bytes: one swizzle row)
AB_DTYPES = (cutlass.BFloat16, cutlass.Float16)
D_DTYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.Float32)

# --keep-ptx/--keep-cubin also write files; keep them out of the working directory.
DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)


class NaiveWgmmaGemm:
    def __init__(self, ab_dtype=cutlass.BFloat16, d_dtype=cutlass.BFloat16, tile_n: int = 128,
                 skip_last_k_tile: bool = False):
        self.ab_dtype, self.d_dtype, self.acc_dtype = ab_dtype, d_dtype, cutlass.Float32
        self.tile_mnk = (TILE_M, tile_n, TILE_K)
        self.skip_last_k_tile = skip_last_k_tile  # the negative control: a K tile never accumulated

    @staticmethod
    def can_implement(ab_dtype, d_dtype, m: int, n: int, k: int, tile_n: int = 128) -> None:
        """Raise ValueError naming the offending value and the supported set."""
        if ab_dtype not in AB_DTYPES:
            raise ValueError(f"A/B dtype {ab_dtype} unsupported; use one of {AB_DTYPES}")
        if d_dtype not in D_DTYPES:
            raise ValueError(f"D dtype {d_dtype} unsupported; use one of {D_DTYPES}")
        if tile_n not in (64, 128, 256):
            raise ValueError(f"tile_n={tile_n} unsupported; use 64, 128 or 256")
        for name, size, tile in (("M", m, TILE_M), ("N", n, tile_n), ("K", k, TILE_K)):
            if size % tile:
                raise ValueError(f"{name}={size} is not a multiple of its tile {tile}")

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, stream):
        # mA: (M, K) K-major; mB: (N, K) K-major; mD: (M, N) N-major
        k_major = cute.nvgpu.OperandMajorMode.K
        tiled_mma = sm90_utils.make_trivial_tiled_mma(self.ab_dtype, self.ab_dtype, k_major, k_major,
                                                      self.acc_dtype, (1, 1, 1), tiler_mn=self.tile_mnk[:2])
        # one stage: the smem layouts carry a stage mode of size 1
        sA_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.tile_mnk, self.ab_dtype, 1)
        sB_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, self.tile_mnk, self.ab_dtype, 1)
        tma_a, gA_tma = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mA,
                                                    cute.slice_(sA_layout, (None, None, 0)),
                                                    (self.tile_mnk[0], self.tile_mnk[2]))
        tma_b, gB_tma = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mB,
                                                    cute.slice_(sB_layout, (None, None, 0)),
                                                    (self.tile_mnk[1], self.tile_mnk[2]))

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[cutlass.Int64, 2]   # full and empty of the one stage
            sA: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(sB_layout)], 1024]

        self.shared_storage = SharedStorage
        grid = cute.ceil_div((*mD.layout.shape, 1), self.tile_mnk[:2])
        self.kernel(tiled_mma, tma_a, gA_tma, tma_b, gB_tma, mD, sA_layout, sB_layout).launch(
            grid=grid, block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, gA_tma: cute.Tensor, tma_b: cute.CopyAtom,
               gB_tma: cute.Tensor, mD: cute.Tensor, sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bidx, bidy, _ = cute.arch.block_idx()
        tile_coord = (bidx, bidy, None)

        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        # sA: (64, 64, 1); sB: (tile_n, 64, 1), 128-byte swizzled
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        stage_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(sA_layout, (None, None, 0))) + \
            cute.size_in_bytes(self.ab_dtype, cute.slice_(sB_layout, (None, None, 0)))
        # Producer: warp 0's TMA (one arrive + expect_tx). Consumers: the 4 warps release the buffer.
        ab_pipeline = pipeline.PipelineTmaAsync.create(
            num_stages=1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, THREADS // 32),
            tx_count=stage_bytes,
            barrier_storage=storage.barriers.data_ptr(),
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
        )

        # gA: (64, 64, k_tiles); gB: (tile_n, 64, k_tiles); gD: (64, tile_n)
        gA = cute.local_tile(gA_tma, self.tile_mnk, tile_coord, proj=(1, None, 1))
        gB = cute.local_tile(gB_tma, self.tile_mnk, tile_coord, proj=(None, 1, 1))
        gD = cute.local_tile(mD, self.tile_mnk, tile_coord, proj=(1, 1, None))
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                           cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                           cute.group_modes(gB, 0, 2))

        thr_mma = tiled_mma.get_slice(tidx)
        tCsA, tCsB, tCgD = thr_mma.partition_A(sA), thr_mma.partition_B(sB), thr_mma.partition_C(gD)
        tCrA, tCrB = tiled_mma.make_fragment_A(tCsA), tiled_mma.make_fragment_B(tCsB)  # smem descriptors
        rAcc = cute.make_rmem_tensor(tCgD.shape, self.acc_dtype)  # (MMA, MMA_M, MMA_N) accumulator fragment
        # Zero it and always accumulate: simpler than flipping the ACCUMULATE field after the very
        # first wgmma, which would have to survive the dynamic K loop.
        rAcc.fill(0.0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)

        producer = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        consumer = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        k_tiles = cute.size(gA, mode=[2])
        if cutlass.const_expr(self.skip_last_k_tile):
            k_tiles = k_tiles - 1
        for _ in cutlass.range(k_tiles, unroll=1):
            if warp == 0:  # the TMA copy elects one lane of the calling warp itself
                ab_pipeline.producer_acquire(producer)
                barrier = ab_pipeline.producer_get_barrier(producer)
                cute.copy(tma_a, tAgA[(None, producer.count)], tAsA[(None, 0)], tma_bar_ptr=barrier)
                cute.copy(tma_b, tBgB[(None, producer.count)], tBsB[(None, 0)], tma_bar_ptr=barrier)
            producer.advance()
            ab_pipeline.consumer_wait(consumer)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                cute.gemm(tiled_mma, rAcc, tCrA[(None, None, kb, 0)], tCrB[(None, None, kb, 0)], rAcc)
            warpgroup.commit_group()
            warpgroup.wait_group(0)  # the buffer is reused next: every wgmma reading it must be done
            ab_pipeline.consumer_release(consumer)
            consumer.advance()

        # Epilogue: registers -> global directly (no smem staging, no TMA store).
        rD = cute.make_rmem_tensor(tCgD.shape, self.d_dtype)
        rD.store(rAcc.load().to(self.d_dtype))
        cute.autovec_copy(rD, tCgD)


def compile_for(arch: str = "sm_90a", m: int = 512, n: int = 512, k: int = 512, ab_dtype=cutlass.BFloat16,
                d_dtype=cutlass.BFloat16, tile_n: int = 128, **variant):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    NaiveWgmmaGemm.can_implement(ab_dtype, d_dtype, m, n, k, tile_n)
    fake_a = make_fake_compact_tensor(ab_dtype, (m, k), stride_order=(1, 0), assumed_align=16)
    fake_b = make_fake_compact_tensor(ab_dtype, (n, k), stride_order=(1, 0), assumed_align=16)
    fake_d = make_fake_compact_tensor(d_dtype, (m, n), stride_order=(1, 0), assumed_align=16)
    return cute.compile(NaiveWgmmaGemm(ab_dtype, d_dtype, tile_n, **variant), fake_a, fake_b, fake_d,
                        make_fake_stream(), options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


def gemm(a, b, out_dtype=None, tile_n: int = 128, **variant):
    """D = A @ B.T for torch tensors a: (M, K), b: (N, K), both K-contiguous, on the current stream."""
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    dtypes = {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}
    out_dtype = out_dtype or a.dtype
    (m, k), n = a.shape, b.shape[0]
    NaiveWgmmaGemm.can_implement(dtypes.get(a.dtype), dtypes.get(out_dtype), m, n, k, tile_n)
    d = torch.empty(m, n, dtype=out_dtype, device=a.device)
    args = [from_dlpack(t, assumed_align=16) for t in (a, b, d)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled = cute.compile(NaiveWgmmaGemm(dtypes[a.dtype], dtypes[out_dtype], tile_n, **variant), *args, stream)
    return compiled, args, stream, d


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    compile_for(args.arch)
    print(f"compiled for {args.arch}")
