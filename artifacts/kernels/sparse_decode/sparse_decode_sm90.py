"""Sparse MLA decode for Hopper (sm_90a) in CuTe DSL: FP8 KV-cache gather, wgmma, online softmax, split-KV.

What it computes (the DeepSeek-V3.2 decode attention; cache format in cache_format.py, reference in reference.py):
    for each sequence b and query head h (one query token per sequence),
        s[t]   = softmax_scale * q[b, h, :576] . kv[idx[b, t], :576]      t < TOPK (idx -1: masked)
        O[b,h] = sum_t softmax(s)[t] * kv[idx[b, t], :512]                 lse[b, h] = log sum_t exp s[t]
    where kv is the FP8 cache row dequantized with its per-128-value scales (bf16 RoPE part as is).

How (one CTA = 64 query heads x one split of the TOPK indices, 256 threads = two warpgroups):
    gather    every thread issues 16-byte loads of the selected FP8 rows straight into registers (rows
              are 656 bytes apart and indexed, so TMA tiles do not fit, and a cp.async staging buffer
              would not fit beside two dequantized stages in shared memory): the next tile's loads are
              issued at the top of an iteration and consumed after its softmax, so their latency hides
              behind S = Q.K^T. Then e4m3 -> fp16 (one cvt per two values), times the tile's scale, two
              16-byte stores into a 128-byte-swizzled K-major tile sKV[stage] (64 tokens x 576), while
              the tensor cores run O += P.V; the RoPE part goes bf16 -> fp16. Two stages.
    fp16 MMA  the dequantized value fp8 x 2^k is exact in fp16 as in bf16, and fp16 needs no
              fp32 -> bf16 rounding step: the conversion that makes FlashMLA's bf16 path
              dequantization-bound (src-flashmla-fp8-sparse-deep-dive) is one cvt.rn.f16x2.e4m3x2 here.
              q (bf16) is converted to fp16 once per CTA; P is rounded to fp16 (finer than bf16).
    S = Q.K^T wgmma m64n32k16, each warpgroup one half (32 tokens) of the 64-token tile, K = 576 from
              smem (Q and sKV both K-major).
    softmax   in registers, base 2; the two warpgroups exchange their row maxima through shared memory so
              that both rescale with the same running max; P (fp16) goes to shared memory.
    O += P.V  wgmma m64n256k16, each warpgroup one half (256 dims) of the 512 value dims; V is the same
              sKV tile read as an MN-major operand (the transposed view of the same swizzled bytes).
    split-KV  when batch x head blocks do not fill the GPU, the TOPK tiles are split over CTAs
              (flash-decoding); each split writes an fp32 partial O and its lse, and SparseDecodeCombine
              merges them. With one split the main kernel writes bf16 O and lse itself.

Constraints (can_implement): D_QK = 576, D_V = 512 (the V3.2 cache format); TOPK a multiple of 64;
    any number of query heads (padded to 64 per CTA); one query token per sequence; |q| and the
    dequantized cache values inside the fp16 range (they are for DeepSeek's power-of-two scales up to
    2^7 and activations below 65504); the cache rows 16-byte aligned (656 = 41 x 16).

Compile only (any machine): python -m artifacts.kernels.sparse_decode.sparse_decode_sm90 --arch sm_90a
Run: probe-sparse-decode-sm90 (kernelwiki probe run --probe probe-sparse-decode-sm90) on an H200.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, warpgroup

from .cache_format import D_QK, D_V, ROW_BYTES
from .gather import BLOCK_T, FP8RowGather, select

BLOCK_H = 64          # query heads per CTA: one wgmma M
WARPGROUPS = 2
THREADS = 128 * WARPGROUPS
HALF_T = BLOCK_T // WARPGROUPS      # tokens of S per warpgroup
HALF_V = D_V // WARPGROUPS          # value dims of O per warpgroup
STAGES = 2
LOG2E = math.log2(math.e)
LN2 = math.log(2.0)
NUM_SMS = 132

DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)


def plan_splits(batch: int, heads: int, topk: int, sms: int = NUM_SMS) -> tuple[int, int]:
    """(splits, tiles per split): enough CTAs for about one wave, every split non-empty."""
    tiles = topk // BLOCK_T
    ctas = batch * math.ceil(heads / BLOCK_H)
    wanted = max(1, min(tiles, sms // ctas))
    per_split = math.ceil(tiles / wanted)
    return math.ceil(tiles / per_split), per_split


class SparseDecodeSm90:
    """The split kernel (fp32 partials) when `split` is set, else the one-pass kernel (bf16 O)."""

    def __init__(self, split: bool):
        self.split = split
        self.gather = FP8RowGather(THREADS)
        # lse of a row with no valid token: -inf in a partial (it merges with weight 0), +inf in the
        # final output (FlashMLA's convention for a query with nothing to attend)
        self.empty_lse = -math.inf if split else math.inf
        self.acc_dtype = cutlass.Float32

    @staticmethod
    def can_implement(batch: int, heads: int, topk: int, d_qk: int = D_QK, d_v: int = D_V,
                      cache_tokens: int = 1, query_tokens: int = 1) -> None:
        """Raise ValueError naming the offending value and the supported set."""
        if d_qk != D_QK:
            raise ValueError(f"d_qk={d_qk} unsupported; use {D_QK} (512 FP8 NoPE + 64 bf16 RoPE, the V3.2 format)")
        if d_v != D_V:
            raise ValueError(f"d_v={d_v} unsupported; use {D_V}")
        if topk < BLOCK_T or topk % BLOCK_T:
            raise ValueError(f"topk={topk} unsupported; use a positive multiple of {BLOCK_T}")
        if query_tokens != 1:
            raise ValueError(f"query tokens per sequence={query_tokens} unsupported; use 1")
        if min(batch, heads, cache_tokens) < 1:
            raise ValueError(f"batch, heads and cache tokens must be positive; got {batch}, {heads}, {cache_tokens}")

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mKV: cute.Tensor, mIdx: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor,
                 tiles_per_split: cutlass.Int32, softmax_scale: cutlass.Float32, stream):
        # mQ: (B, H, 576) bf16; mKV: (N, 656) uint8; mIdx: (B, TOPK) int32
        # split: mO (B, S, H, 512) fp32, mLse (B, S, H) fp32; else mO (B, H, 512) bf16, mLse (B, H) fp32
        k_atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16)
        # one swizzled buffer per stage, read as K (tokens x dims, K-major) and as V (dims x tokens,
        # MN-major): both views below address the same bytes
        kv_layout = cute.tile_to_shape(k_atom, (BLOCK_T, D_QK, STAGES), order=(0, 1, 2))
        stage_elems = BLOCK_T * D_QK
        v_layout = cute.make_composed_layout(
            k_atom.inner, 0,
            cute.make_layout(((64, D_V // 64), (8, BLOCK_T // 8), STAGES),
                             stride=((1, BLOCK_T * 64), (64, 512), stage_elems)))
        q_layout = cute.tile_to_shape(k_atom, (BLOCK_H, D_QK), order=(0, 1))
        p_layout = cute.tile_to_shape(k_atom, (BLOCK_H, BLOCK_T), order=(0, 1))
        qk_mma = sm90_utils.make_trivial_tiled_mma(cutlass.Float16, cutlass.Float16, OperandMajorMode.K,
                                                   OperandMajorMode.K, self.acc_dtype, (1, 1, 1), (BLOCK_H, HALF_T))
        pv_mma = sm90_utils.make_trivial_tiled_mma(cutlass.Float16, cutlass.Float16, OperandMajorMode.K,
                                                   OperandMajorMode.MN, self.acc_dtype, (1, 1, 1), (BLOCK_H, HALF_V))

        @cute.struct
        class SharedStorage:
            row_max: cute.struct.MemRange[cutlass.Float32, WARPGROUPS * BLOCK_H]
            row_sum: cute.struct.MemRange[cutlass.Float32, WARPGROUPS * BLOCK_H]
            mask: cute.struct.MemRange[cutlass.Float32, STAGES * BLOCK_T]
            sKV: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(kv_layout)], 1024]
            sQ: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(q_layout)], 1024]
            sP: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(p_layout)], 1024]

        self.shared_storage = SharedStorage
        batch, heads = mQ.shape[0], mQ.shape[1]
        grid = (mO.shape[1] if cutlass.const_expr(self.split) else 1, cute.ceil_div(heads, BLOCK_H), batch)
        self.kernel(mQ, mKV, mIdx, mO, mLse, tiles_per_split, softmax_scale * LOG2E, qk_mma, pv_mma, kv_layout,
                    v_layout, q_layout, p_layout).launch(grid=grid, block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mKV: cute.Tensor, mIdx: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor,
               tiles_per_split: cutlass.Int32, scale_log2: cutlass.Float32, qk_mma: cute.TiledMma,
               pv_mma: cute.TiledMma, kv_layout: cute.ComposedLayout, v_layout: cute.ComposedLayout,
               q_layout: cute.ComposedLayout, p_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        split, head_block, b = cute.arch.block_idx()
        wg = cute.arch.make_warp_uniform(tidx // 128)
        wg_tidx = tidx % 128
        h0 = head_block * BLOCK_H
        heads = mQ.shape[1]
        topk = mIdx.shape[1]
        tile0 = split * tiles_per_split
        n_tiles = cutlass.min(tiles_per_split, topk // BLOCK_T - tile0)

        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        sKV = storage.sKV.get_tensor(kv_layout.outer, swizzle=kv_layout.inner)     # (64 tok, 576, STAGES)
        sV = storage.sKV.get_tensor(v_layout.outer, swizzle=v_layout.inner)        # (512, 64 tok, STAGES)
        sQ = storage.sQ.get_tensor(q_layout.outer, swizzle=q_layout.inner)         # (64 heads, 576)
        sP = storage.sP.get_tensor(p_layout.outer, swizzle=p_layout.inner)         # (64 heads, 64 tok)
        s_max = storage.row_max.get_tensor(cute.make_layout((BLOCK_H, WARPGROUPS)))
        s_sum = storage.row_sum.get_tensor(cute.make_layout((BLOCK_H, WARPGROUPS)))
        s_mask = storage.mask.get_tensor(cute.make_layout((BLOCK_T, STAGES)))
        kv_base = storage.sKV.data_ptr().toint()
        q_base = storage.sQ.data_ptr().toint()

        self.gather.load_q(mQ, b, h0, q_base, q_layout, tidx)
        self.gather.store(self.gather.load(mKV, mIdx, b, tile0, tidx), 0, kv_base, kv_layout, s_mask, tidx)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.sync_threads()

        # ---- MMA operands ----
        qk_thr = qk_mma.get_slice(wg_tidx)
        pv_thr = pv_mma.get_slice(wg_tidx)
        sK_half = cute.local_tile(sKV, (HALF_T, D_QK, STAGES), (wg, 0, 0))          # my 32 tokens
        sV_half = cute.local_tile(sV, (HALF_V, BLOCK_T, STAGES), (wg, 0, 0))        # my 256 dims
        sP_half = cute.local_tile(sP, (BLOCK_H, HALF_T), (0, wg))
        tSrQ = qk_mma.make_fragment_A(qk_thr.partition_A(sQ))
        tSrK = qk_mma.make_fragment_B(qk_thr.partition_B(sK_half))
        tOrP = pv_mma.make_fragment_A(pv_thr.partition_A(sP))
        tOrV = pv_mma.make_fragment_B(pv_thr.partition_B(sV_half))
        acc_s = cute.make_rmem_tensor(qk_mma.partition_shape_C((BLOCK_H, HALF_T)), self.acc_dtype)
        acc_o = cute.make_rmem_tensor(pv_mma.partition_shape_C((BLOCK_H, HALF_V)), self.acc_dtype)
        tScS = qk_thr.partition_C(cute.make_identity_tensor((BLOCK_H, HALF_T)))   # (head, token) of each S value
        tSsP = qk_thr.partition_C(sP_half)
        acc_o.fill(0.0)
        # each thread holds two rows (heads) of S and O: value i belongs to row slot (i // 2) % 2
        row_max = cute.make_rmem_tensor((2,), cutlass.Float32)
        row_sum = cute.make_rmem_tensor((2,), cutlass.Float32)
        row_max.fill(-math.inf)
        row_sum.fill(0.0)
        k_blocks = cute.size(tSrQ, mode=[2])
        pv_blocks = cute.size(tOrP, mode=[2])

        for j in cutlass.range(n_tiles, unroll=1):
            stage = j % STAGES
            # the next tile's rows are requested now and dequantized after the softmax, so their memory
            # latency hides behind this tile's MMAs (the last iteration re-reads its own tile, unused)
            loaded = self.gather.load(mKV, mIdx, b, tile0 + cutlass.min(j + 1, n_tiles - 1), tidx)
            # S = Q . K^T (this warpgroup's 32 tokens)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                qk_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
                cute.gemm(qk_mma, acc_s, tSrQ[(None, None, kb)], tSrK[(None, None, kb, stage)], acc_s)
            warpgroup.commit_group()
            warpgroup.wait_group(0)

            # online softmax, base 2: scale, mask, row max across both warpgroups
            tile_max = cute.make_rmem_tensor((2,), cutlass.Float32)
            tile_max.fill(-math.inf)
            for i in cutlass.range_constexpr(cute.size(acc_s)):
                token = tScS[i][1] + wg * HALF_T
                acc_s[i] = acc_s[i] * scale_log2 + s_mask[(token, stage)]
                tile_max[(i // 2) % 2] = cute.arch.fmax(tile_max[(i // 2) % 2], acc_s[i])
            for r in cutlass.range_constexpr(2):
                for offset in (1, 2):   # the four threads of a quad share a row
                    tile_max[r] = cute.arch.fmax(tile_max[r], cute.arch.shuffle_sync_bfly(tile_max[r], offset))
            if tidx % 4 == 0:
                for r in cutlass.range_constexpr(2):
                    s_max[(tScS[r * 2][0], wg)] = tile_max[r]
            cute.arch.sync_threads()
            new_max = cute.make_rmem_tensor((2,), cutlass.Float32)
            rescale = cute.make_rmem_tensor((2,), cutlass.Float32)
            for r in cutlass.range_constexpr(2):
                row = tScS[r * 2][0]
                m = cute.arch.fmax(row_max[r], cute.arch.fmax(s_max[(row, 0)], s_max[(row, 1)]))
                # a row with no valid token yet keeps max -inf; subtract 0 so that exp2 gives 0, not NaN
                new_max[r] = select(m == -math.inf, 0.0, m, cutlass.Float32)
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

            # O += P . V (this warpgroup's 256 value dims), overlapped with dequantizing the next tile
            warpgroup.fence()
            for kb in cutlass.range_constexpr(pv_blocks):
                pv_mma.set(warpgroup.Field.ACCUMULATE, True)
                cute.gemm(pv_mma, acc_o, tOrP[(None, None, kb)], tOrV[(None, None, kb, stage)], acc_o)
            warpgroup.commit_group()
            self.gather.store(loaded, 1 - stage, kv_base, kv_layout, s_mask, tidx)
            warpgroup.wait_group(0)
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.sync_threads()

        # ---- epilogue: full row sums (quad, then the other warpgroup), O / sum, lse ----
        for r in cutlass.range_constexpr(2):
            for offset in (1, 2):
                row_sum[r] = row_sum[r] + cute.arch.shuffle_sync_bfly(row_sum[r], offset)
        if tidx % 4 == 0:
            for r in cutlass.range_constexpr(2):
                s_sum[(tScS[r * 2][0], wg)] = row_sum[r]
        cute.arch.sync_threads()
        inv_sum = cute.make_rmem_tensor((2,), cutlass.Float32)
        lse = cute.make_rmem_tensor((2,), cutlass.Float32)
        for r in cutlass.range_constexpr(2):
            row = tScS[r * 2][0]
            total = s_sum[(row, 0)] + s_sum[(row, 1)]
            empty = total == cutlass.Float32(0.0)
            inv_sum[r] = select(empty, 0.0, cute.arch.rcp_approx(total), cutlass.Float32)
            lse[r] = select(empty, self.empty_lse,
                             (row_max[r] + cute.math.log2(total, fastmath=True)) * LN2, cutlass.Float32)
            if tidx % 4 == 0 and wg == 0 and h0 + row < heads:
                if cutlass.const_expr(self.split):
                    mLse[(b, split, h0 + row)] = lse[r]
                else:
                    mLse[(b, h0 + row)] = lse[r]
        # values i, i + 1 of a thread are adjacent columns of one row: stored as one 8- (fp32) or 4-byte (bf16) pair
        tOcO = pv_thr.partition_C(cute.make_identity_tensor((BLOCK_H, HALF_V)))
        pair = cute.make_rmem_tensor((2,), mO.element_type)
        o_gmem = mO.iterator.toint()
        width = mO.element_type.width // 8
        for i in cutlass.range_constexpr(0, cute.size(acc_o), 2):
            row, col = tOcO[i][0], tOcO[i][1] + wg * HALF_V
            if h0 + row < heads:
                for k in cutlass.range_constexpr(2):
                    pair[k] = (acc_o[i + k] * inv_sum[(i // 2) % 2]).to(mO.element_type)
                if cutlass.const_expr(self.split):
                    offset = ((cutlass.Int64(b) * mO.shape[1] + split) * heads + h0 + row) * D_V + col
                else:
                    offset = (cutlass.Int64(b) * heads + h0 + row) * D_V + col
                dst = cute.make_tensor(cute.make_ptr(mO.element_type, o_gmem + offset * width, cute.AddressSpace.gmem,
                                                     assumed_align=2 * width), cute.make_layout(2))
                dst.store(pair.load())

class SparseDecodeCombine:
    """Merges the split partials: O = sum_s exp(lse_s - lse) O_s, lse = log sum_s exp(lse_s).
    One CTA of 128 threads per (sequence, head); each thread owns 4 of the 512 value dims."""

    @cute.jit
    def __call__(self, mOpart: cute.Tensor, mLsePart: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor, stream):
        # mOpart (B, S, H, 512) fp32; mLsePart (B, S, H) fp32; mO (B, H, 512) bf16; mLse (B, H) fp32
        self.kernel(mOpart, mLsePart, mO, mLse).launch(grid=(mO.shape[1], mO.shape[0], 1), block=(128, 1, 1),
                                                       stream=stream)

    @cute.kernel
    def kernel(self, mOpart: cute.Tensor, mLsePart: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        h, b, _ = cute.arch.block_idx()
        splits = mOpart.shape[1]
        top = cutlass.Float32(-math.inf)
        for s in cutlass.range(splits, unroll=1):
            top = cute.arch.fmax(top, mLsePart[(b, s, h)])
        shift = select(top == -math.inf, 0.0, top, cutlass.Float32)
        acc = cute.make_rmem_tensor((4,), cutlass.Float32)
        acc.fill(0.0)
        total = cutlass.Float32(0.0)
        for s in cutlass.range(splits, unroll=1):
            w = cute.arch.exp2((mLsePart[(b, s, h)] - shift) * LOG2E)
            total = total + w
            for d in cutlass.range_constexpr(4):
                acc[d] = acc[d] + w * mOpart[(b, s, h, tidx * 4 + d)]
        empty = total == cutlass.Float32(0.0)
        inv = select(empty, 0.0, cute.arch.rcp_approx(total), cutlass.Float32)
        for d in cutlass.range_constexpr(4):
            mO[(b, h, tidx * 4 + d)] = (acc[d] * inv).to(mO.element_type)
        if tidx == 0:
            mLse[(b, h)] = select(empty, math.inf, shift + cute.math.log(total, fastmath=True), cutlass.Float32)


def _fake_args(batch: int, heads: int, topk: int, cache_tokens: int, splits: int):
    from cutlass.cute.runtime import make_fake_compact_tensor

    q = make_fake_compact_tensor(cutlass.BFloat16, (batch, heads, D_QK), assumed_align=16)
    kv = make_fake_compact_tensor(cutlass.Uint8, (cache_tokens, ROW_BYTES), assumed_align=16)
    idx = make_fake_compact_tensor(cutlass.Int32, (batch, topk), assumed_align=16)
    if splits > 1:
        o = make_fake_compact_tensor(cutlass.Float32, (batch, splits, heads, D_V), assumed_align=16)
        lse = make_fake_compact_tensor(cutlass.Float32, (batch, splits, heads), assumed_align=4)
    else:
        o = make_fake_compact_tensor(cutlass.BFloat16, (batch, heads, D_V), assumed_align=16)
        lse = make_fake_compact_tensor(cutlass.Float32, (batch, heads), assumed_align=4)
    return q, kv, idx, o, lse


def compile_for(arch: str = "sm_90a", batch: int = 4, heads: int = 128, topk: int = 2048,
                cache_tokens: int = 65536, split: bool = False):
    """Compile the main kernel with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.runtime import make_fake_stream

    SparseDecodeSm90.can_implement(batch, heads, topk, cache_tokens=cache_tokens)
    splits, per_split = plan_splits(batch, heads, topk) if split else (1, topk // BLOCK_T)
    args = _fake_args(batch, heads, topk, cache_tokens, max(splits, 2) if split else 1)
    return cute.compile(SparseDecodeSm90(split), *args, cutlass.Int32(per_split), cutlass.Float32(D_QK ** -0.5),
                        make_fake_stream(), options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


def compile_combine_for(arch: str = "sm_90a", batch: int = 4, heads: int = 128, splits: int = 8):
    """Compile the combine kernel with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    o_part = make_fake_compact_tensor(cutlass.Float32, (batch, splits, heads, D_V), assumed_align=16)
    lse_part = make_fake_compact_tensor(cutlass.Float32, (batch, splits, heads), assumed_align=4)
    o = make_fake_compact_tensor(cutlass.BFloat16, (batch, heads, D_V), assumed_align=16)
    lse = make_fake_compact_tensor(cutlass.Float32, (batch, heads), assumed_align=4)
    return cute.compile(SparseDecodeCombine(), o_part, lse_part, o, lse, make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


class SparseDecode:
    """The callable for torch tensors: q (B, H, 576) bf16, cache (N, 656) uint8, indices (B, TOPK) int32
    -> (O (B, H, 512) bf16, lse (B, H) fp32). Kernels are compiled once per shape; run() only launches
    (CUDA-graph capturable)."""

    def __init__(self, q, cache, indices, softmax_scale: float | None = None, splits: int | None = None):
        import torch

        if q.dtype != torch.bfloat16 or cache.dtype != torch.uint8 or indices.dtype != torch.int32:
            raise ValueError(f"dtypes: q {q.dtype} (want bfloat16), cache {cache.dtype} (want uint8), "
                             f"indices {indices.dtype} (want int32)")
        if q.dim() != 3 or cache.dim() != 2 or indices.dim() != 2 or cache.shape[1] != ROW_BYTES:
            raise ValueError(f"shapes: q {tuple(q.shape)} (want (B, H, {D_QK})), cache {tuple(cache.shape)} "
                             f"(want (N, {ROW_BYTES})), indices {tuple(indices.shape)} (want (B, TOPK))")
        batch, heads, d_qk = q.shape
        topk = indices.shape[1]
        if indices.shape[0] != batch:
            raise ValueError(f"indices: batch {indices.shape[0]} != q batch {batch}")
        SparseDecodeSm90.can_implement(batch, heads, topk, d_qk, cache_tokens=cache.shape[0])
        for name, t in (("q", q), ("cache", cache), ("indices", indices)):
            if not t.is_contiguous():
                raise ValueError(f"{name}: must be contiguous")
        if splits is None:
            sms = torch.cuda.get_device_properties(q.device).multi_processor_count
            splits, per_split = plan_splits(batch, heads, topk, sms)
        else:
            per_split = math.ceil(topk // BLOCK_T / splits)
            splits = math.ceil(topk // BLOCK_T / per_split)
        self.splits = splits
        self.out = torch.empty(batch, heads, D_V, dtype=torch.bfloat16, device=q.device)
        self.lse = torch.empty(batch, heads, dtype=torch.float32, device=q.device)
        stream = _current_stream()
        scale = cutlass.Float32(softmax_scale if softmax_scale is not None else D_QK ** -0.5)
        views = [_view(q), _view(cache), _view(indices)]
        if splits > 1:
            self.o_part = torch.empty(batch, splits, heads, D_V, dtype=torch.float32, device=q.device)
            self.lse_part = torch.empty(batch, splits, heads, dtype=torch.float32, device=q.device)
            main_views = views + [_view(self.o_part), _view(self.lse_part)]
            combine_views = [_view(self.o_part), _view(self.lse_part), _view(self.out), _view(self.lse)]
            main = _compiled(("main", True, *_key(main_views)), SparseDecodeSm90(True), *main_views,
                             cutlass.Int32(per_split), scale, stream)
            combine = _compiled(("combine", *_key(combine_views)), SparseDecodeCombine(), *combine_views, stream)

            def run():
                current = _current_stream()
                main(*main_views, cutlass.Int32(per_split), scale, current)
                combine(*combine_views, current)
        else:
            main_views = views + [_view(self.out), _view(self.lse)]
            main = _compiled(("main", False, *_key(main_views)), SparseDecodeSm90(False), *main_views,
                             cutlass.Int32(per_split), scale, stream)

            def run():
                main(*main_views, cutlass.Int32(per_split), scale, _current_stream())
        self.run = run


_KERNELS: dict = {}


def _current_stream():
    """The stream torch is using now (so that run() can be captured into a CUDA graph)."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


def _key(views) -> tuple:
    return tuple((tuple(v.shape), str(v.element_type)) for v in views)


def _compiled(key, op, *args):
    if key not in _KERNELS:
        _KERNELS[key] = cute.compile(op, *args)
    return _KERNELS[key]


def _view(tensor):
    from cutlass.cute.runtime import from_dlpack

    return from_dlpack(tensor, assumed_align=16 if tensor.element_size() * tensor.shape[-1] % 16 == 0 else 4)


def sparse_decode(q, cache, indices, softmax_scale: float | None = None):
    """(O, lse) for torch tensors; compiles on first use of a shape."""
    op = SparseDecode(q, cache, indices, softmax_scale)
    op.run()
    return op.out, op.lse


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    compile_for(args.arch, split=False)
    compile_for(args.arch, split=True)
    compile_combine_for(args.arch)
    print(f"compiled for {args.arch}")
