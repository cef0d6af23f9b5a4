"""Sparse MLA decode for Hopper (sm_90a) in CuTe DSL: persistent, warp-specialized, FP8 KV-cache gather, wgmma.

What it computes (the DeepSeek-V3.2 decode attention; cache format in cache_format.py, reference in reference.py):
    for each sequence b and query head h (one query token per sequence),
        s[t]   = softmax_scale * q[b, h, :576] . kv[idx[b, t], :576]      t < TOPK (idx < 0 or >= rows: masked)
        O[b,h] = sum_t softmax(s)[t] * kv[idx[b, t], :512]                 lse[b, h] = log sum_t exp s[t]
    where kv is the FP8 cache row dequantized with its per-128-value scales (bf16 RoPE part as is).

How. A CTA owns 64 query heads; 384 threads in three warpgroups with their registers rebalanced by
setmaxnreg (S 216, V 168, load 120; the launch gives each 168; S below 216 makes ptxas serialize the
wgmmas):
    load (wg 2)  gathers one 64-token tile of selected rows per step into a two-stage ring of fp16 tiles
                 (schedule: gather.ProducerGather): 16-byte loads of the 656-byte rows straight into
                 registers, issued before it waits for the stage to be free; e4m3 -> fp16 (one
                 cvt.rn.f16x2.e4m3x2 per two values) times the 128-value tile's scale (HMUL2); RoPE
                 bf16 -> fp16; a 0/-inf mask per token; then fence.proxy.async and an mbarrier arrive.
                 Each CTA gathers its own tiles (with 128 heads both head blocks of a sequence read the same
                 rows): no 2-CTA cluster sharing the gather, as FlashMLA's crossover does.
    S (wg 0)     S = Q.K^T for the whole tile (wgmma m64n64k16, K = 576, Q and K from shared memory),
                 online softmax in registers (base 2; one warpgroup holds whole rows, so no cross-group
                 max exchange), P in fp16 kept in registers as the A operand of its own O[:, :256] += P.V
                 (wgmma m64n256k16, A from registers) and written to shared memory for wg 1, with the
                 rows' rescale factors. It issues the next tile's S right behind its P.V and only then
                 waits, so the tensor cores go from one to the other without a gap.
    V (wg 1)     rescales and accumulates O[:, 256:] += P.V (A = P from shared memory).
    fp16 MMAs    a dequantized value fp8 x 2^k is exact in fp16 as in bf16, and fp16 needs no fp32 -> bf16
                 rounding step: e4m3 -> fp16 is one instruction per two values where e4m3 -> bf16 is a
                 chain (src-flashmla-fp8-sparse-deep-dive). q (bf16) is converted to fp16 once per sequence.
    V = K        the P.V B operand is the MN-major view of the same swizzled tile (no copy).
    persistent   the grid is (head blocks, parts): `schedule.plan` cuts the batch x tiles walk into parts of
                 equal cost (a sequence switch counted as OVERHEAD_TILES tiles), one per SM's worth of head blocks; a
                 sequence finished inside one part is written as bf16 O and lse there, a sequence cut across
                 parts leaves fp32 partials that SparseDecodeCombine merges.

Constraints (can_implement): D_QK = 576, D_V = 512 (the V3.2 cache format); TOPK a multiple of 64; any
    number of query heads (padded to 64 per CTA); one query token per sequence; |q| and the dequantized
    cache values inside the fp16 range (they are for DeepSeek's power-of-two scales up to 2^7 and
    activations below 65504); cache rows 16-byte aligned (656 = 41 x 16).

Compile only (any machine): python -m artifacts.kernels.sparse_decode.sparse_decode_sm90 --arch sm_90a
Run: probe-sparse-decode-sm90 (kernelwiki probe run --probe probe-sparse-decode-sm90) on an H200.
"""

from __future__ import annotations

import argparse
import enum
import math
import os
import tempfile

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, warpgroup

from . import schedule
from .cache_format import D_QK, D_V, ROW_BYTES
from .gather import BLOCK_T, PIECE, ProducerGather, select

BLOCK_H = 64                     # query heads per CTA: one wgmma M
HALF_V = D_V // 2                # value dims of O per consumer warpgroup
STAGES = 2
WG_S, WG_V, WG_LOAD = 0, 1, 2    # warpgroup roles
THREADS = 128 * 3
CONSUMER_THREADS = 256
S_REGISTERS, V_REGISTERS, LOAD_REGISTERS = 216, 168, 120   # setmaxnreg targets (sum 504 = 3 x the launch's 168)
LOG2E = math.log2(math.e)
LN2 = math.log(2.0)
NUM_SMS = 132
MAX_SPLITS = 160                 # partials the combine kernel merges per sequence (5 per lane)
COMBINE_LOADS = 16               # partial rows one combine thread has in flight
Q_PIECES = BLOCK_H * D_QK // PIECE // CONSUMER_THREADS   # 16-byte pieces of Q per consumer thread (18)

DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)


class Barrier(enum.IntEnum):
    """Named barriers between the two consumer warpgroups (0 is __syncthreads)."""
    Q_READY = 1      # both: the sequence's Q is in sQ (and the previous sequence is fully done)
    P_READY = 2      # S -> V: this tile's P (sP) and row rescale factors are in shared memory
    P_FREE = 3       # V -> S: V's P.V of the previous tile has read sP and the factors
    SUM_READY = 4    # S -> V: 1 / row sum of the finished sequence


def plan(batch: int, heads: int, topk: int, sms: int = NUM_SMS) -> schedule.Schedule:
    """The persistent walk for a problem: one part per SM's worth of head blocks."""
    return schedule.plan(batch, topk, schedule.parts_for(sms, math.ceil(heads / BLOCK_H)))


class SparseDecodeSm90:
    """The persistent main kernel."""

    def __init__(self):
        self.gather = ProducerGather()
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
                 mOacc: cute.Tensor, mLseAcc: cute.Tensor, mSched: cute.Tensor, mSplitBase: cute.Tensor,
                 softmax_scale: cutlass.Float32, stream):
        # mQ (B, H, 576) bf16; mKV (N, 656) uint8; mIdx (B, TOPK) int32; mO (B, H, 512) bf16; mLse (B, H) fp32;
        # mOacc (slots, H, 512) fp32, mLseAcc (slots, H) fp32: partials; mSched (parts * FIELDS,) int32;
        # mSplitBase (B + 1,) int32
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
                                                   OperandMajorMode.K, self.acc_dtype, (1, 1, 1), (BLOCK_H, BLOCK_T))
        pv_rs = sm90_utils.make_trivial_tiled_mma(cutlass.Float16, cutlass.Float16, OperandMajorMode.K,
                                                  OperandMajorMode.MN, self.acc_dtype, (1, 1, 1), (BLOCK_H, HALF_V),
                                                  warpgroup.OperandSource.RMEM)
        pv_ss = sm90_utils.make_trivial_tiled_mma(cutlass.Float16, cutlass.Float16, OperandMajorMode.K,
                                                  OperandMajorMode.MN, self.acc_dtype, (1, 1, 1), (BLOCK_H, HALF_V))

        @cute.struct
        class SharedStorage:
            full: cute.struct.MemRange[cutlass.Int64, STAGES]
            empty: cute.struct.MemRange[cutlass.Int64, STAGES]
            mask: cute.struct.MemRange[cutlass.Float32, STAGES * BLOCK_T]
            rescale: cute.struct.MemRange[cutlass.Float32, BLOCK_H]
            inv_sum: cute.struct.MemRange[cutlass.Float32, BLOCK_H]
            sKV: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(kv_layout)], 1024]
            sQ: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(q_layout)], 1024]
            sP: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(p_layout)], 1024]

        self.shared_storage = SharedStorage
        head_blocks = cute.ceil_div(mQ.shape[1], BLOCK_H)
        parts = mSched.shape[0] // schedule.FIELDS
        self.kernel(mQ, mKV, mIdx, mO, mLse, mOacc, mLseAcc, mSched, mSplitBase, softmax_scale * LOG2E, qk_mma,
                    pv_rs, pv_ss, kv_layout, v_layout, q_layout, p_layout).launch(
            grid=(head_blocks, parts, 1), block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mKV: cute.Tensor, mIdx: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor,
               mOacc: cute.Tensor, mLseAcc: cute.Tensor, mSched: cute.Tensor, mSplitBase: cute.Tensor,
               scale_log2: cutlass.Float32, qk_mma: cute.TiledMma, pv_rs: cute.TiledMma, pv_ss: cute.TiledMma,
               kv_layout: cute.ComposedLayout, v_layout: cute.ComposedLayout, q_layout: cute.ComposedLayout,
               p_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        head_block, part, _ = cute.arch.block_idx()
        wg = cute.arch.make_warp_uniform(tidx // 128)
        wtid = tidx % 128
        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        full = storage.full.data_ptr()
        empty = storage.empty.data_ptr()
        if tidx == 0:
            for s in cutlass.range_constexpr(STAGES):
                # full: the 128 gather threads; empty: the two consumer warpgroups
                cute.arch.mbarrier_init(full + s, 128)
                cute.arch.mbarrier_init(empty + s, 2)
            cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        first = mSched[part * schedule.FIELDS]
        walk = (first, mSched[part * schedule.FIELDS + 1], mSched[part * schedule.FIELDS + 2],
                mSched[part * schedule.FIELDS + 3], mSched[part * schedule.FIELDS + 4])
        if first < mQ.shape[0]:
            if wg == WG_LOAD:
                cute.arch.setmaxregister_decrease(LOAD_REGISTERS)
                self.produce(mKV, mIdx, walk, storage, wtid)
            elif wg == WG_S:
                cute.arch.setmaxregister_increase(S_REGISTERS)
                self.consume_s(mQ, mO, mLse, mOacc, mLseAcc, mSplitBase, mIdx, walk, scale_log2, qk_mma, pv_rs,
                               storage, kv_layout, v_layout, q_layout, p_layout, head_block, tidx)
            else:
                if cutlass.const_expr(V_REGISTERS > 168):
                    cute.arch.setmaxregister_increase(V_REGISTERS)
                self.consume_v(mQ, mO, mOacc, mSplitBase, mIdx, walk, pv_ss, storage, v_layout, q_layout, p_layout,
                               head_block, tidx)

    # ---- the gather warpgroup ----

    @cute.jit
    def produce(self, mKV: cute.Tensor, mIdx: cute.Tensor, walk, storage, wtid):
        first, first_tile, last, end_tile, _ = walk
        tiles = mIdx.shape[1] // BLOCK_T
        n_rows = mKV.shape[0]
        k0 = first * tiles + first_tile
        k1 = last * tiles + end_tile
        full = storage.full.data_ptr()
        empty = storage.empty.data_ptr()
        kv_base = storage.sKV.data_ptr().toint()
        s_mask = storage.mask.get_tensor(cute.make_layout((BLOCK_T, STAGES)))
        b0 = k0 // tiles
        rows = self.gather.load_indices(mIdx, b0, k0 - b0 * tiles, wtid)
        mask_row = mIdx[(b0, (k0 - b0 * tiles) * BLOCK_T + wtid % BLOCK_T)]
        for k in cutlass.range(k0, k1, unroll=1):
            step = k - k0
            stage = step % STAGES
            loaded = self.gather.load(mKV, rows, wtid)
            # the next tile's indices now (the last step reads its own again, unused), so that its row
            # loads never wait for an index load
            kn = cutlass.min(k + 1, k1 - 1)
            bn = kn // tiles
            rows_next = self.gather.load_indices(mIdx, bn, kn - bn * tiles, wtid)
            mask_next = mIdx[(bn, (kn - bn * tiles) * BLOCK_T + wtid % BLOCK_T)]
            cute.arch.mbarrier_wait(empty + stage, (step // STAGES) % 2 ^ 1)
            self.gather.store(loaded, stage, kv_base, wtid)
            if wtid < BLOCK_T:
                s_mask[(wtid, stage)] = select((mask_row >= 0) & (mask_row < n_rows), 0.0, -math.inf, cutlass.Float32)
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.mbarrier_arrive(full + stage)
            rows = rows_next
            mask_row = mask_next

    # ---- the consumer warpgroups ----

    @cute.jit
    def release(self, empty, stage, wtid):
        """This warpgroup is done with `stage`: one arrival on its empty barrier."""
        if wtid == 0:
            cute.arch.mbarrier_arrive(empty + stage)

    @cute.jit
    def load_q(self, mQ: cute.Tensor, b, h0, q_base, tidx):
        """Rows h0..h0+63 of q[b] (bf16) into the swizzled fp16 tile sQ, by both consumer warpgroups:
        thread i takes row i % 64 and the 8-dim pieces 8 (i // 64) + 32 k, k < 18 (eight consecutive rows
        per quarter warp: conflict-free 16-byte stores through the swizzle). Every load is issued before
        the first conversion; rows past the last head read the last head and store zeros."""
        heads = mQ.shape[1]
        row = tidx % BLOCK_H
        group = tidx // BLOCK_H
        head = cutlass.min(h0 + row, heads - 1)
        src_row = mQ.iterator.toint() + (cutlass.Int64(b * heads + head) * D_QK + group * PIECE) * 2
        loaded = []
        for k in cutlass.range_constexpr(Q_PIECES):
            src = cute.make_tensor(cute.make_ptr(cutlass.BFloat16, src_row + k * 64, cute.AddressSpace.gmem,
                                                 assumed_align=16), cute.make_layout(PIECE))
            loaded.append(src.load())
        # element (row, d) of the tile: byte (d // 64) * 8192 + row * 128 + 2 * (d % 64), 16-byte column XOR row % 8
        dst_row = [q_base + row * 128 + (((group + 4 * odd) ^ (row % 8)) << 4) for odd in range(2)]
        vals = cute.make_rmem_tensor((PIECE,), cutlass.Float16)
        for k in cutlass.range_constexpr(Q_PIECES):
            vals.store(loaded[k].to(cutlass.Float16))
            if h0 + row >= heads:
                vals.fill(0.0)
            dst = cute.make_tensor(cute.make_ptr(cutlass.Float16, dst_row[k % 2] + (k // 2) * BLOCK_H * 128,
                                                 cute.AddressSpace.smem, assumed_align=16), cute.make_layout(PIECE))
            dst.store(vals.load())
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=int(Barrier.Q_READY), number_of_threads=CONSUMER_THREADS)

    @cute.jit
    def seq_range(self, walk, b, tiles):
        """(first tile, end tile, split index) of sequence b in this part."""
        first, first_tile, last, end_tile, first_split = walk
        t_begin = select(b == first, first_tile, 0, cutlass.Int32)
        t_end = select(b == last, end_tile, tiles, cutlass.Int32)
        split = select(b == first, first_split, 0, cutlass.Int32)
        return t_begin, t_end, split

    @cute.jit
    def consume_s(self, mQ: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor, mOacc: cute.Tensor, mLseAcc: cute.Tensor,
                  mSplitBase: cute.Tensor, mIdx: cute.Tensor, walk, scale_log2: cutlass.Float32, qk_mma: cute.TiledMma,
                  pv_rs: cute.TiledMma, storage, kv_layout: cute.ComposedLayout, v_layout: cute.ComposedLayout,
                  q_layout: cute.ComposedLayout, p_layout: cute.ComposedLayout, head_block, tidx):
        first, first_tile, last, end_tile, _ = walk
        tiles = mIdx.shape[1] // BLOCK_T
        k0 = first * tiles + first_tile
        heads = mQ.shape[1]
        h0 = head_block * BLOCK_H
        full = storage.full.data_ptr()
        empty = storage.empty.data_ptr()
        sKV = storage.sKV.get_tensor(kv_layout.outer, swizzle=kv_layout.inner)     # (64 tok, 576, STAGES)
        sV = storage.sKV.get_tensor(v_layout.outer, swizzle=v_layout.inner)        # (512, 64 tok, STAGES)
        sQ = storage.sQ.get_tensor(q_layout.outer, swizzle=q_layout.inner)         # (64 heads, 576)
        s_mask = storage.mask.get_tensor(cute.make_layout((BLOCK_T, STAGES)))
        s_rescale = storage.rescale.get_tensor(cute.make_layout(BLOCK_H))
        s_inv = storage.inv_sum.get_tensor(cute.make_layout(BLOCK_H))
        q_base = storage.sQ.data_ptr().toint()

        qk_thr = qk_mma.get_slice(tidx)
        pv_thr = pv_rs.get_slice(tidx)
        tSrQ = qk_mma.make_fragment_A(qk_thr.partition_A(sQ))
        tSrK = qk_mma.make_fragment_B(qk_thr.partition_B(sKV))
        tOrV = pv_rs.make_fragment_B(pv_thr.partition_B(cute.local_tile(sV, (HALF_V, BLOCK_T, STAGES), (0, 0, 0))))
        acc_s = cute.make_rmem_tensor(qk_mma.partition_shape_C((BLOCK_H, BLOCK_T)), self.acc_dtype)
        acc_o = cute.make_rmem_tensor(pv_rs.partition_shape_C((BLOCK_H, HALF_V)), self.acc_dtype)
        # P (fp16) as the A operand of P.V: the accumulator of S regrouped into A's k-blocks of 16 tokens
        # (for 16-bit types a thread's S values are already in A's register order)
        a_tv = pv_rs.tv_layout_A.shape[1]
        p_frag = cute.make_layout((a_tv, acc_s.layout.shape[1], (acc_s.layout.shape[2], cute.size(acc_s, mode=[0])
                                                                  // cute.size(a_tv))),
                                  stride=(acc_s.layout.stride[0], acc_s.layout.stride[1],
                                          (acc_s.layout.stride[2], cute.size(a_tv, mode=[2]) * acc_s.layout.stride[0][2])))
        tOrP = cute.make_rmem_tensor(p_frag, cutlass.Float16)
        tOrP_as_s = cute.make_tensor(tOrP.iterator, acc_s.layout)
        tScS = qk_thr.partition_C(cute.make_identity_tensor((BLOCK_H, BLOCK_T)))   # (head, token) of each S value
        sP = storage.sP.get_tensor(p_layout.outer, swizzle=p_layout.inner)         # (64 heads, 64 tok)
        p_copy = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4),
                                                            cutlass.Float16), qk_mma)
        tPsP = p_copy.get_slice(tidx).partition_D(sP)
        tPrP = p_copy.retile(tOrP_as_s)
        row_max = cute.make_rmem_tensor((2,), cutlass.Float32)
        row_sum = cute.make_rmem_tensor((2,), cutlass.Float32)
        k_blocks = cute.size(tSrQ, mode=[2])
        pv_blocks = cute.size(tOrP, mode=[2])

        for b in cutlass.range(first, last + 1, unroll=1):
            t_begin, t_end, split = self.seq_range(walk, b, tiles)
            self.load_q(mQ, b, h0, q_base, tidx)
            row_max.fill(-math.inf)
            row_sum.fill(0.0)
            acc_o.fill(0.0)
            for t in cutlass.range(t_begin, t_end, unroll=1):
                step = b * tiles + t - k0
                stage = step % STAGES
                cute.arch.mbarrier_wait(full + stage, (step // STAGES) % 2)
                warpgroup.fence()
                for kb in cutlass.range_constexpr(k_blocks):
                    qk_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
                    cute.gemm(qk_mma, acc_s, tSrQ[(None, None, kb)], tSrK[(None, None, kb, stage)], acc_s)
                warpgroup.commit_group()
                if t > t_begin:
                    warpgroup.wait_group(1)          # the previous tile's P.V: its stage is free for us
                    self.release(empty, 1 - stage, tidx)
                warpgroup.wait_group(0)

                # online softmax, base 2: scale, mask, row max over the quad (a quad holds a row's 64 tokens)
                tile_max = cute.make_rmem_tensor((2,), cutlass.Float32)
                tile_max.fill(-math.inf)
                mask_col = 2 * (tidx % 4)        # a thread's S columns: 8 (i // 4) + 2 (tidx % 4) + i % 2
                for i in cutlass.range_constexpr(cute.size(acc_s)):
                    acc_s[i] = acc_s[i] * scale_log2 + s_mask[(mask_col + 8 * (i // 4) + i % 2, stage)]
                    tile_max[(i // 2) % 2] = cute.arch.fmax(tile_max[(i // 2) % 2], acc_s[i])
                new_max = cute.make_rmem_tensor((2,), cutlass.Float32)
                rescale = cute.make_rmem_tensor((2,), cutlass.Float32)
                for r in cutlass.range_constexpr(2):
                    for offset in (1, 2):
                        tile_max[r] = cute.arch.fmax(tile_max[r], cute.arch.shuffle_sync_bfly(tile_max[r], offset))
                    m = cute.arch.fmax(row_max[r], tile_max[r])
                    # a row with no valid token yet keeps max -inf; subtract 0 so that exp2 gives 0, not NaN
                    new_max[r] = select(m == -math.inf, 0.0, m, cutlass.Float32)
                    rescale[r] = cute.arch.exp2(row_max[r] - new_max[r])
                    row_max[r] = m
                    row_sum[r] = row_sum[r] * rescale[r]
                for i in cutlass.range_constexpr(cute.size(acc_s)):
                    acc_s[i] = cute.arch.exp2(acc_s[i] - new_max[(i // 2) % 2])
                    row_sum[(i // 2) % 2] = row_sum[(i // 2) % 2] + acc_s[i]
                tOrP_as_s.store(acc_s.load().to(cutlass.Float16))
                for i in cutlass.range_constexpr(cute.size(acc_o)):
                    acc_o[i] = acc_o[i] * rescale[(i // 2) % 2]
                if t > t_begin:
                    cute.arch.barrier(barrier_id=int(Barrier.P_FREE), number_of_threads=CONSUMER_THREADS)
                cute.copy(p_copy, tPrP, tPsP)      # stmatrix: 16x16 fp16 blocks, four per instruction
                if tidx % 4 == 0:
                    for r in cutlass.range_constexpr(2):
                        s_rescale[tScS[r * 2][0]] = rescale[r]
                cute.arch.fence_proxy("async.shared", space="cta")
                cute.arch.barrier_arrive(barrier_id=int(Barrier.P_READY), number_of_threads=CONSUMER_THREADS)

                # O[:, :256] += P . V, left in flight: the next tile's S is issued behind it
                warpgroup.fence()
                for kb in cutlass.range_constexpr(pv_blocks):
                    pv_rs.set(warpgroup.Field.ACCUMULATE, True)
                    cute.gemm(pv_rs, acc_o, tOrP[(None, None, kb)], tOrV[(None, None, kb, stage)], acc_o)
                warpgroup.commit_group()
            warpgroup.wait_group(0)
            self.release(empty, (b * tiles + t_end - 1 - k0) % STAGES, tidx)

            # ---- epilogue: full row sums, 1 / sum for both warpgroups, lse, our half of O ----
            no_split = (t_begin == 0) & (t_end == tiles)
            slot = mSplitBase[b] + split
            inv = cute.make_rmem_tensor((2,), cutlass.Float32)
            for r in cutlass.range_constexpr(2):
                for offset in (1, 2):
                    row_sum[r] = row_sum[r] + cute.arch.shuffle_sync_bfly(row_sum[r], offset)
                row = tScS[r * 2][0]
                total = row_sum[r]
                none = total == cutlass.Float32(0.0)
                inv[r] = select(none, 0.0, cute.arch.rcp_approx(total), cutlass.Float32)
                lse = (row_max[r] + cute.math.log2(total, fastmath=True)) * LN2
                if tidx % 4 == 0:
                    s_inv[row] = inv[r]
                    if h0 + row < heads:
                        if no_split:
                            # FlashMLA's convention for a query with nothing to attend: lse = +inf
                            mLse[(b, h0 + row)] = select(none, math.inf, lse, cutlass.Float32)
                        else:
                            mLseAcc[(slot, h0 + row)] = select(none, -math.inf, lse, cutlass.Float32)
            cute.arch.barrier_arrive(barrier_id=int(Barrier.SUM_READY), number_of_threads=CONSUMER_THREADS)
            self.store_o(acc_o, inv, pv_rs.get_slice(tidx), mO, mOacc, b, slot, no_split, h0, 0)

    @cute.jit
    def consume_v(self, mQ: cute.Tensor, mO: cute.Tensor, mOacc: cute.Tensor, mSplitBase: cute.Tensor,
                  mIdx: cute.Tensor, walk, pv_ss: cute.TiledMma, storage, v_layout: cute.ComposedLayout,
                  q_layout: cute.ComposedLayout, p_layout: cute.ComposedLayout, head_block, tidx):
        first, first_tile, last, end_tile, _ = walk
        tiles = mIdx.shape[1] // BLOCK_T
        k0 = first * tiles + first_tile
        h0 = head_block * BLOCK_H
        wtid = tidx % 128
        empty = storage.empty.data_ptr()
        sV = storage.sKV.get_tensor(v_layout.outer, swizzle=v_layout.inner)        # (512, 64 tok, STAGES)
        sP = storage.sP.get_tensor(p_layout.outer, swizzle=p_layout.inner)         # (64 heads, 64 tok)
        s_rescale = storage.rescale.get_tensor(cute.make_layout(BLOCK_H))
        s_inv = storage.inv_sum.get_tensor(cute.make_layout(BLOCK_H))
        q_base = storage.sQ.data_ptr().toint()
        pv_thr = pv_ss.get_slice(wtid)
        tOrP = pv_ss.make_fragment_A(pv_thr.partition_A(sP))
        tOrV = pv_ss.make_fragment_B(pv_thr.partition_B(cute.local_tile(sV, (HALF_V, BLOCK_T, STAGES), (1, 0, 0))))
        acc_o = cute.make_rmem_tensor(pv_ss.partition_shape_C((BLOCK_H, HALF_V)), self.acc_dtype)
        tOcO = pv_thr.partition_C(cute.make_identity_tensor((BLOCK_H, HALF_V)))
        pv_blocks = cute.size(tOrP, mode=[2])
        for b in cutlass.range(first, last + 1, unroll=1):
            t_begin, t_end, split = self.seq_range(walk, b, tiles)
            self.load_q(mQ, b, h0, q_base, tidx)
            acc_o.fill(0.0)
            for t in cutlass.range(t_begin, t_end, unroll=1):
                stage = (b * tiles + t - k0) % STAGES
                cute.arch.barrier(barrier_id=int(Barrier.P_READY), number_of_threads=CONSUMER_THREADS)
                for r in cutlass.range_constexpr(2):
                    factor = s_rescale[tOcO[r * 2][0]]
                    for i in cutlass.range_constexpr(cute.size(acc_o)):
                        if cutlass.const_expr((i // 2) % 2 == r):
                            acc_o[i] = acc_o[i] * factor
                warpgroup.fence()
                for kb in cutlass.range_constexpr(pv_blocks):
                    pv_ss.set(warpgroup.Field.ACCUMULATE, True)
                    cute.gemm(pv_ss, acc_o, tOrP[(None, None, kb)], tOrV[(None, None, kb, stage)], acc_o)
                warpgroup.commit_group()
                warpgroup.wait_group(0)
                self.release(empty, stage, wtid)
                if t < t_end - 1:
                    cute.arch.barrier_arrive(barrier_id=int(Barrier.P_FREE), number_of_threads=CONSUMER_THREADS)
            cute.arch.barrier(barrier_id=int(Barrier.SUM_READY), number_of_threads=CONSUMER_THREADS)
            inv = cute.make_rmem_tensor((2,), cutlass.Float32)
            for r in cutlass.range_constexpr(2):
                inv[r] = s_inv[tOcO[r * 2][0]]
            no_split = (t_begin == 0) & (t_end == tiles)
            self.store_o(acc_o, inv, pv_thr, mO, mOacc, b, mSplitBase[b] + split, no_split, h0, HALF_V)

    @cute.jit
    def store_o(self, acc_o: cute.Tensor, inv: cute.Tensor, pv_thr, mO: cute.Tensor, mOacc: cute.Tensor, b, slot,
                no_split, h0, col0: int):
        """O / row sum for this warpgroup's 256 columns: bf16 into O, or the fp32 partial of `slot`.
        Values i, i + 1 of a thread are adjacent columns of one row: one 4- or 8-byte store per pair."""
        heads = mO.shape[1]
        tOcO = pv_thr.partition_C(cute.make_identity_tensor((BLOCK_H, HALF_V)))
        if no_split:
            self.store_pairs(acc_o, inv, tOcO, mO, cutlass.Int64(b) * heads, h0, col0, heads)
        else:
            self.store_pairs(acc_o, inv, tOcO, mOacc, cutlass.Int64(slot) * heads, h0, col0, heads)

    @cute.jit
    def store_pairs(self, acc_o: cute.Tensor, inv: cute.Tensor, tOcO: cute.Tensor, mOut: cute.Tensor, row0, h0,
                    col0: int, heads):
        pair = cute.make_rmem_tensor((2,), mOut.element_type)
        width = mOut.element_type.width // 8
        base = mOut.iterator.toint()
        for i in cutlass.range_constexpr(0, cute.size(acc_o), 2):
            row, col = tOcO[i][0], tOcO[i][1] + col0
            if h0 + row < heads:
                for k in cutlass.range_constexpr(2):
                    pair[k] = (acc_o[i + k] * inv[(i // 2) % 2]).to(mOut.element_type)
                offset = (row0 + h0 + row) * D_V + col
                dst = cute.make_tensor(cute.make_ptr(mOut.element_type, base + offset * width, cute.AddressSpace.gmem,
                                                     assumed_align=2 * width), cute.make_layout(2))
                dst.store(pair.load())


class SparseDecodeCombine:
    """Merges the partials of every sequence cut across parts: O = sum_s exp(lse_s - lse) O_s,
    lse = log sum_s exp(lse_s). One CTA of 128 threads per (head, sequence); each warp computes the
    weights itself (lane j holds splits j, j + 32, ...), each thread merges 4 of the 512 value dims,
    COMBINE_LOADS partial loads in flight at a time. Sequences finished in one part (one split) are left
    alone."""

    @cute.jit
    def __call__(self, mOacc: cute.Tensor, mLseAcc: cute.Tensor, mSplitBase: cute.Tensor, mO: cute.Tensor,
                 mLse: cute.Tensor, stream):
        # mOacc (slots, H, 512) fp32; mLseAcc (slots, H) fp32; mSplitBase (B + 1,) int32; mO (B, H, 512) bf16;
        # mLse (B, H) fp32
        self.kernel(mOacc, mLseAcc, mSplitBase, mO, mLse).launch(grid=(mO.shape[1], mO.shape[0], 1),
                                                                 block=(128, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mOacc: cute.Tensor, mLseAcc: cute.Tensor, mSplitBase: cute.Tensor, mO: cute.Tensor,
               mLse: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        h, b, _ = cute.arch.block_idx()
        lane = tidx % 32
        s0 = mSplitBase[b]
        n = mSplitBase[b + 1] - s0
        if n > 1:
            per_lane = MAX_SPLITS // 32
            lse = cute.make_rmem_tensor((per_lane,), cutlass.Float32)
            top = cutlass.Float32(-math.inf)
            for k in cutlass.range_constexpr(per_lane):
                s = lane + 32 * k
                lse[k] = -math.inf
                if s < n:
                    lse[k] = mLseAcc[(s0 + s, h)]
                top = cute.arch.fmax(top, lse[k])
            for offset in (16, 8, 4, 2, 1):
                top = cute.arch.fmax(top, cute.arch.shuffle_sync_bfly(top, offset))
            shift = select(top == -math.inf, 0.0, top, cutlass.Float32)
            total = cutlass.Float32(0.0)
            for k in cutlass.range_constexpr(per_lane):
                lse[k] = cute.arch.exp2((lse[k] - shift) * LOG2E)
                total = total + lse[k]
            for offset in (16, 8, 4, 2, 1):
                total = total + cute.arch.shuffle_sync_bfly(total, offset)
            none = total == cutlass.Float32(0.0)
            inv = select(none, 0.0, cute.arch.rcp_approx(total), cutlass.Float32)
            acc = cute.make_rmem_tensor((4,), cutlass.Float32)
            acc.fill(0.0)
            heads = mO.shape[1]
            col_addr = mOacc.iterator.toint() + (cutlass.Int64(s0) * heads + h) * D_V * 4 + tidx * 16
            split_bytes = cutlass.Int64(heads) * D_V * 4
            parts = cute.make_rmem_tensor((COMBINE_LOADS, 4), cutlass.Float32)
            for k in cutlass.range_constexpr(per_lane):
                for j0 in cutlass.range(0, cutlass.max(cutlass.min(32, n - 32 * k), 0), COMBINE_LOADS, unroll=1):
                    # COMBINE_LOADS partials requested together (past the last split: a repeat of split 0, weight 0)
                    for u in cutlass.range_constexpr(COMBINE_LOADS):
                        s = 32 * k + j0 + u
                        addr = col_addr + select(s < n, s, 0, cutlass.Int32) * split_bytes
                        src = cute.make_tensor(cute.make_ptr(cutlass.Float32, addr, cute.AddressSpace.gmem,
                                                             assumed_align=16), cute.make_layout(4))
                        parts[(u, None)].store(src.load())
                    for u in cutlass.range_constexpr(COMBINE_LOADS):
                        w = cute.arch.shuffle_sync(lse[k], (j0 + u) % 32) * inv
                        w = select(32 * k + j0 + u < n, w, 0.0, cutlass.Float32)
                        for d in cutlass.range_constexpr(4):
                            acc[d] = acc[d] + w * parts[(u, d)]
            for d in cutlass.range_constexpr(4):
                mO[(b, h, tidx * 4 + d)] = acc[d].to(mO.element_type)
            if tidx == 0:
                mLse[(b, h)] = select(none, math.inf, shift + cute.math.log(total, fastmath=True), cutlass.Float32)


def _fake_io(batch: int, heads: int, topk: int, cache_tokens: int):
    """Fake q, cache, indices, O and lse for compile-only builds (no GPU)."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    q = make_fake_compact_tensor(cutlass.BFloat16, (batch, heads, D_QK), assumed_align=16)
    kv = make_fake_compact_tensor(cutlass.Uint8, (cache_tokens, ROW_BYTES), assumed_align=16)
    idx = make_fake_compact_tensor(cutlass.Int32, (batch, topk), assumed_align=16)
    o = make_fake_compact_tensor(cutlass.BFloat16, (batch, heads, D_V), assumed_align=16)
    lse = make_fake_compact_tensor(cutlass.Float32, (batch, heads), assumed_align=4)
    return q, kv, idx, o, lse


def _fake_args(batch: int, heads: int, topk: int, cache_tokens: int, sched: schedule.Schedule):
    """_fake_io plus the partials and the schedule tables of the main kernel."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    q, kv, idx, o, lse = _fake_io(batch, heads, topk, cache_tokens)
    o_acc = make_fake_compact_tensor(cutlass.Float32, (sched.slots, heads, D_V), assumed_align=16)
    lse_acc = make_fake_compact_tensor(cutlass.Float32, (sched.slots, heads), assumed_align=4)
    table = make_fake_compact_tensor(cutlass.Int32, (len(sched.parts) * schedule.FIELDS,), assumed_align=4)
    split_base = make_fake_compact_tensor(cutlass.Int32, (batch + 1,), assumed_align=4)
    return q, kv, idx, o, lse, o_acc, lse_acc, table, split_base


def compile_for(arch: str = "sm_90a", batch: int = 16, heads: int = 128, topk: int = 2048,
                cache_tokens: int = 65536):
    """Compile the main kernel with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.runtime import make_fake_stream

    SparseDecodeSm90.can_implement(batch, heads, topk, cache_tokens=cache_tokens)
    args = _fake_args(batch, heads, topk, cache_tokens, plan(batch, heads, topk))
    return cute.compile(SparseDecodeSm90(), *args, cutlass.Float32(D_QK ** -0.5), make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


def compile_combine_for(arch: str = "sm_90a", batch: int = 4, heads: int = 128, slots: int = 64):
    """Compile the combine kernel with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    o_acc = make_fake_compact_tensor(cutlass.Float32, (slots, heads, D_V), assumed_align=16)
    lse_acc = make_fake_compact_tensor(cutlass.Float32, (slots, heads), assumed_align=4)
    split_base = make_fake_compact_tensor(cutlass.Int32, (batch + 1,), assumed_align=4)
    o = make_fake_compact_tensor(cutlass.BFloat16, (batch, heads, D_V), assumed_align=16)
    lse = make_fake_compact_tensor(cutlass.Float32, (batch, heads), assumed_align=4)
    return cute.compile(SparseDecodeCombine(), o_acc, lse_acc, split_base, o, lse, make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


class SparseDecode:
    """The callable for torch tensors: q (B, H, 576) bf16, cache (N, 656) uint8, indices (B, TOPK) int32
    -> (O (B, H, 512) bf16, lse (B, H) fp32). The kernels are compiled once per process (dynamic shapes;
    one main kernel) and the schedule is built once per instance; run() only launches
    (CUDA-graph capturable: it reads the same buffers, whose contents may change between replays)."""

    def __init__(self, q, cache, indices, softmax_scale: float | None = None):
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
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        sched = plan(batch, heads, topk, sms)
        self.schedule = sched
        self.splits = max(sched.splits(b) for b in range(batch))
        if self.splits > MAX_SPLITS:
            raise ValueError(f"{self.splits} splits of one sequence; the combine kernel merges at most {MAX_SPLITS}")
        dev = q.device
        self.out = torch.empty(batch, heads, D_V, dtype=torch.bfloat16, device=dev)
        self.lse = torch.empty(batch, heads, dtype=torch.float32, device=dev)
        self.o_acc = torch.empty(sched.slots, heads, D_V, dtype=torch.float32, device=dev)
        self.lse_acc = torch.empty(sched.slots, heads, dtype=torch.float32, device=dev)
        self.table = torch.tensor(sched.table(), dtype=torch.int32, device=dev)
        self.split_base = torch.tensor(sched.split_base, dtype=torch.int32, device=dev)
        stream = _current_stream()
        scale = cutlass.Float32(softmax_scale if softmax_scale is not None else D_QK ** -0.5)
        main_views = [_view(t, a) for t, a in ((q, 16), (cache, 16), (indices, 16), (self.out, 16), (self.lse, 4),
                                               (self.o_acc, 16), (self.lse_acc, 4), (self.table, 4), (self.split_base, 4))]
        main = _compiled(("main", *_key(main_views)), SparseDecodeSm90(), *main_views, scale, stream)
        if self.splits > 1:
            combine_views = [_view(t, a) for t, a in ((self.o_acc, 16), (self.lse_acc, 4), (self.split_base, 4),
                                                      (self.out, 16), (self.lse, 4))]
            combine = _compiled(("combine", *_key(combine_views)), SparseDecodeCombine(), *combine_views, stream)

            def run():
                current = _current_stream()
                main(*main_views, scale, current)
                combine(*combine_views, current)
        else:
            def run():
                main(*main_views, scale, _current_stream())
        self.run = run


_KERNELS: dict = {}


def _current_stream():
    """The stream torch is using now (so that run() can be captured into a CUDA graph)."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


def _key(views) -> tuple:
    """What a compiled kernel is specialized on: element types only (shapes and strides are dynamic)."""
    return tuple(str(v.element_type) for v in views)


def _compiled(key, op, *args):
    if key not in _KERNELS:
        _KERNELS[key] = cute.compile(op, *args)
    return _KERNELS[key]


def _view(tensor, align: int):
    """A CuTe view with a dynamic layout (one compiled kernel serves every shape). `align`: what the
    kernels assume of the base pointer - 16 for the tensors they access in 16-byte pieces (q, the cache,
    the indices, O and the partials: torch's allocations are aligned and their rows are multiples of
    16 bytes), 4 for those read or written one element at a time."""
    from cutlass.cute.runtime import from_dlpack

    return from_dlpack(tensor, assumed_align=align).mark_layout_dynamic(leading_dim=tensor.dim() - 1)


def sparse_decode(q, cache, indices, softmax_scale: float | None = None):
    """(O, lse) for torch tensors; compiles on first use of a shape."""
    op = SparseDecode(q, cache, indices, softmax_scale)
    op.run()
    return op.out, op.lse


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    compile_for(args.arch, heads=128)
    compile_combine_for(args.arch)
    print(f"compiled for {args.arch}")
