"""The shortest complete sparse MLA decode for Hopper (sm_90a), for teaching: one warpgroup, one stage, no split.

What it computes: the same as ../sparse_decode_sm90.py (O (B, H, 512) bf16 and lse (B, H) from q (B, H, 576)
bf16, the FP8 cache (N, 656) and indices (B, TOPK)).

How: one CTA = one warpgroup (128 threads) = 64 query heads x one half (256 dims) of the value. For every tile
of 64 selected tokens, in order and with nothing overlapped:
    1. gather: load the 64 FP8 rows, dequantize to fp16, store the swizzled (64 x 576) tile (../gather.py);
    2. S = Q . K^T with wgmma m64n64k16 over K = 576, both operands in shared memory;
    3. online softmax on S in registers (running max, rescale O and the row sum by exp2(old - new max));
    4. P (fp16) into shared memory, then O += P . V with wgmma m64n256k16, V being the same tile read as
       an MN-major operand (dims x tokens).
Both CTAs of a head block compute the same S (the two value halves need it): twice the Q.K^T work.

Why it is slow, on purpose: while the rows load, the tensor cores idle, and while they compute, no load is in
flight. The production kernel adds two warpgroups sharing one S, the next tile's loads issued before this
tile's MMAs, its dequantization during P.V, and split-KV with a combine kernel to fill the GPU.

Constraints: as ../sparse_decode_sm90.py (SparseDecodeSm90.can_implement).
Compile only (any machine): python -m artifacts.kernels.sparse_decode.variants.simple --arch sm_90a
"""

from __future__ import annotations

import argparse
import math

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, warpgroup

from ..cache_format import D_QK, D_V
from ..gather import BLOCK_T, FP8RowGather, select
from ..sparse_decode_sm90 import DUMP_DIR, SparseDecodeSm90, _fake_io

THREADS = 128
BLOCK_H = 64
HALF_V = D_V // 2
LOG2E, LN2 = math.log2(math.e), math.log(2.0)


class SparseDecodeSimple:
    def __init__(self):
        self.gather = FP8RowGather(THREADS)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mKV: cute.Tensor, mIdx: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor,
                 softmax_scale: cutlass.Float32, stream):
        # mQ (B, H, 576) bf16; mKV (N, 656) uint8; mIdx (B, TOPK) int32; mO (B, H, 512) bf16; mLse (B, H) fp32
        atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16)
        kv_layout = cute.tile_to_shape(atom, (BLOCK_T, D_QK, 1), order=(0, 1, 2))
        # the tile as V: (512 dims, 64 tokens), dims contiguous, same bytes as kv_layout
        v_layout = cute.make_composed_layout(atom.inner, 0, cute.make_layout(
            ((64, D_V // 64), (8, BLOCK_T // 8)), stride=((1, BLOCK_T * 64), (64, 512))))
        q_layout = cute.tile_to_shape(atom, (BLOCK_H, D_QK), order=(0, 1))
        p_layout = cute.tile_to_shape(atom, (BLOCK_H, BLOCK_T), order=(0, 1))
        qk_mma = sm90_utils.make_trivial_tiled_mma(cutlass.Float16, cutlass.Float16, OperandMajorMode.K,
                                                   OperandMajorMode.K, cutlass.Float32, (1, 1, 1), (BLOCK_H, BLOCK_T))
        pv_mma = sm90_utils.make_trivial_tiled_mma(cutlass.Float16, cutlass.Float16, OperandMajorMode.K,
                                                   OperandMajorMode.MN, cutlass.Float32, (1, 1, 1), (BLOCK_H, HALF_V))

        @cute.struct
        class SharedStorage:
            mask: cute.struct.MemRange[cutlass.Float32, BLOCK_T]
            sKV: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(kv_layout)], 1024]
            sQ: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(q_layout)], 1024]
            sP: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(p_layout)], 1024]

        self.shared_storage = SharedStorage
        grid = (2, cute.ceil_div(mQ.shape[1], BLOCK_H), mQ.shape[0])
        self.kernel(mQ, mKV, mIdx, mO, mLse, softmax_scale * LOG2E, qk_mma, pv_mma, kv_layout, v_layout, q_layout,
                    p_layout).launch(grid=grid, block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mKV: cute.Tensor, mIdx: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor,
               scale_log2: cutlass.Float32, qk_mma: cute.TiledMma, pv_mma: cute.TiledMma,
               kv_layout: cute.ComposedLayout, v_layout: cute.ComposedLayout, q_layout: cute.ComposedLayout,
               p_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        v_half, head_block, b = cute.arch.block_idx()
        h0 = head_block * BLOCK_H
        heads = mQ.shape[1]
        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        sKV = storage.sKV.get_tensor(kv_layout.outer, swizzle=kv_layout.inner)
        sV = storage.sKV.get_tensor(v_layout.outer, swizzle=v_layout.inner)
        sQ = storage.sQ.get_tensor(q_layout.outer, swizzle=q_layout.inner)
        sP = storage.sP.get_tensor(p_layout.outer, swizzle=p_layout.inner)
        s_mask = storage.mask.get_tensor(cute.make_layout((BLOCK_T, 1)))
        kv_base = storage.sKV.data_ptr().toint()
        self.gather.load_q(mQ, b, h0, storage.sQ.data_ptr().toint(), q_layout, tidx)

        qk_thr, pv_thr = qk_mma.get_slice(tidx), pv_mma.get_slice(tidx)
        tSrQ = qk_mma.make_fragment_A(qk_thr.partition_A(sQ))
        tSrK = qk_mma.make_fragment_B(qk_thr.partition_B(sKV))
        tOrP = pv_mma.make_fragment_A(pv_thr.partition_A(sP))
        tOrV = pv_mma.make_fragment_B(pv_thr.partition_B(cute.local_tile(sV, (HALF_V, BLOCK_T), (v_half, 0))))
        acc_s = cute.make_rmem_tensor(qk_mma.partition_shape_C((BLOCK_H, BLOCK_T)), cutlass.Float32)
        acc_o = cute.make_rmem_tensor(pv_mma.partition_shape_C((BLOCK_H, HALF_V)), cutlass.Float32)
        tScS = qk_thr.partition_C(cute.make_identity_tensor((BLOCK_H, BLOCK_T)))
        tSsP = qk_thr.partition_C(sP)
        acc_o.fill(0.0)
        # a thread holds two rows of S and O: value i belongs to row slot (i // 2) % 2
        row_max = cute.make_rmem_tensor((2,), cutlass.Float32)
        row_sum = cute.make_rmem_tensor((2,), cutlass.Float32)
        row_max.fill(-math.inf)
        row_sum.fill(0.0)

        for tile in cutlass.range(mIdx.shape[1] // BLOCK_T, unroll=1):
            self.gather.store(self.gather.load(mKV, mIdx, b, tile, tidx), 0, kv_base, kv_layout, s_mask, tidx)
            cute.arch.fence_proxy("async.shared", space="cta")   # generic-proxy stores -> wgmma reads
            cute.arch.sync_threads()
            warpgroup.fence()
            for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                qk_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
                cute.gemm(qk_mma, acc_s, tSrQ[(None, None, kb)], tSrK[(None, None, kb, 0)], acc_s)
            warpgroup.commit_group()
            warpgroup.wait_group(0)

            tile_max = cute.make_rmem_tensor((2,), cutlass.Float32)
            tile_max.fill(-math.inf)
            for i in cutlass.range_constexpr(cute.size(acc_s)):
                acc_s[i] = acc_s[i] * scale_log2 + s_mask[(tScS[i][1], 0)]
                tile_max[(i // 2) % 2] = cute.arch.fmax(tile_max[(i // 2) % 2], acc_s[i])
            new_max = cute.make_rmem_tensor((2,), cutlass.Float32)
            rescale = cute.make_rmem_tensor((2,), cutlass.Float32)
            for r in cutlass.range_constexpr(2):
                for offset in (1, 2):   # the four threads of a quad share a row
                    tile_max[r] = cute.arch.fmax(tile_max[r], cute.arch.shuffle_sync_bfly(tile_max[r], offset))
                m = cute.arch.fmax(row_max[r], tile_max[r])
                new_max[r] = select(m == -math.inf, 0.0, m, cutlass.Float32)   # no valid token yet: exp2 -> 0
                rescale[r] = cute.arch.exp2(row_max[r] - new_max[r])
                row_max[r] = m
                row_sum[r] = row_sum[r] * rescale[r]
            for i in cutlass.range_constexpr(cute.size(acc_s)):
                p = cute.arch.exp2(acc_s[i] - new_max[(i // 2) % 2])
                row_sum[(i // 2) % 2] = row_sum[(i // 2) % 2] + p
                tSsP[i] = p.to(cutlass.Float16)
            for i in cutlass.range_constexpr(cute.size(acc_o)):
                acc_o[i] = acc_o[i] * rescale[(i // 2) % 2]
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.sync_threads()
            warpgroup.fence()
            for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
                pv_mma.set(warpgroup.Field.ACCUMULATE, True)
                cute.gemm(pv_mma, acc_o, tOrP[(None, None, kb)], tOrV[(None, None, kb)], acc_o)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            cute.arch.sync_threads()   # sKV and sP are rewritten by the next tile

        tOcO = pv_thr.partition_C(cute.make_identity_tensor((BLOCK_H, HALF_V)))
        for r in cutlass.range_constexpr(2):
            for offset in (1, 2):
                row_sum[r] = row_sum[r] + cute.arch.shuffle_sync_bfly(row_sum[r], offset)
            row = tScS[r * 2][0]
            empty = row_sum[r] == cutlass.Float32(0.0)
            if tidx % 4 == 0 and v_half == 0 and h0 + row < heads:
                mLse[(b, h0 + row)] = select(empty, math.inf,
                                             (row_max[r] + cute.math.log2(row_sum[r], fastmath=True)) * LN2,
                                             cutlass.Float32)
            row_sum[r] = select(empty, 0.0, cute.arch.rcp_approx(row_sum[r]), cutlass.Float32)
        for i in cutlass.range_constexpr(cute.size(acc_o)):
            row, col = tOcO[i][0], tOcO[i][1] + v_half * HALF_V
            if h0 + row < heads:
                mO[(b, h0 + row, col)] = (acc_o[i] * row_sum[(i // 2) % 2]).to(mO.element_type)


def compile_for(arch: str = "sm_90a", batch: int = 4, heads: int = 128, topk: int = 2048, cache_tokens: int = 65536):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.runtime import make_fake_stream

    SparseDecodeSm90.can_implement(batch, heads, topk, cache_tokens=cache_tokens)
    return cute.compile(SparseDecodeSimple(), *_fake_io(batch, heads, topk, cache_tokens),
                        cutlass.Float32(D_QK ** -0.5), make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


def sparse_decode(q, cache, indices, softmax_scale: float | None = None):
    """(O, lse) for torch tensors (shapes as SparseDecode in ../sparse_decode_sm90.py); compiles every call."""
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    batch, heads, d_qk = q.shape
    SparseDecodeSm90.can_implement(batch, heads, indices.shape[1], d_qk, cache_tokens=cache.shape[0])
    out = torch.empty(batch, heads, D_V, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=q.device)
    views = [from_dlpack(t, assumed_align=16 if t.element_size() * t.shape[-1] % 16 == 0 else 4)
             for t in (q, cache, indices, out, lse)]
    scale = cutlass.Float32(softmax_scale if softmax_scale is not None else D_QK ** -0.5)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    cute.compile(SparseDecodeSimple(), *views, scale, stream)(*views, scale, stream)
    return out, lse


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    compile_for(parser.parse_args().arch)
    print("compiled")
