"""Sparse MLA decode for Blackwell (sm_100a) in CuTe DSL: the sm_90a kernel's design on tcgen05 and TMEM.

What it computes: the same as sparse_decode_sm90.py (O (B, H, 512) bf16 and lse (B, H) from q (B, H, 576) bf16,
the FP8 cache (N, 656) and indices (B, TOPK)), with tcgen05 MMAs and the scores and output in tensor memory.

The design it shares with sparse_decode_sm90.py: a persistent grid whose parts walk the batch x tiles list
cut by schedule.plan (a sequence finished inside a part is written as bf16 O and lse, a sequence cut across
parts leaves fp32 partials for sparse_decode_sm90.SparseDecodeCombine, which runs unchanged on sm_100a),
warp-specialized roles handing tiles over through mbarrier pipelines, a gather role that dequantizes e4m3
to fp16 in registers into a two-stage ring of swizzled tiles, fp16 MMAs, V read as the MN-major view of
the K tile. What Blackwell changes (FlashMLA's sm100 decode, csrc/sm100/decode/head64, keeps S, P and O in
TMEM the same way): one CTA = 128 query heads x one half (256 dims) of the value, a single MMA warp, the
softmax warps owning one TMEM lane (one head) each; 288 threads in three roles:
    warps 4-7  load: per sequence of the walk the query into sQ (a one-stage pipeline: the MMA warp frees it
               after the sequence's last S), then every tile: gather the selected FP8 rows of a 32-token
               tile, dequantize to fp16 into a swizzled sKV[stage] (gather.py; two stages); each stage is
               handed to the MMA warp through a PipelineAsyncUmma (128 producer threads arrive after a
               fence.proxy.async, so the tensor core sees the generic-proxy stores).
    warp 8     MMA: allocates TMEM; per tile S = Q.K^T (tcgen05.mma kind::f16, M 128, N 32, K 576, both
               operands in shared memory) into TMEM, commits it to the softmax warps, waits for them to hand
               P back, then O += P.V (A = P read from TMEM, B = V), and releases the stage; per sequence it
               waits until the softmax warps have read the previous sequence's O before the first P.V.
    warps 0-3  softmax and epilogue: thread i owns TMEM lane i = head i, so a row's max and sum need no
               shuffles: tcgen05.ld its S row, online softmax in base 2, rescale its O row in TMEM,
               tcgen05.st P (fp16 packed in 32-bit words: St32x32bOp on Float32) over S's columns, fence,
               release. After a sequence's last tile: O / row sum -> bf16 O and lse, or the fp32 partial.
    TMEM       tmem_plan.py: S [0, 32), P [0, 16) aliasing S, O [256, 512) (checked on the CPU).

The footguns of the NVFP4 suite that this design applies (kernel-dsv4-sparse-decode links them):
    P.V's B operand is MN-major (footgun-v-mn-major): V here is the transposed view of the K tile;
    the P store uses a 32-bit St32x32bOp with the fp16 pairs recast to Float32 (footgun-st32x32b-16bit);
    P is written through the composition of S's accumulator layout, the same flattening the MMA's
    TMEM A-operand view uses (footgun-nested-layout-flatten);
    pipeline consumer groups count threads, 32 x warps (footgun-pipelineumma-consumer-threads);
    the CTA-local pipelines get no cluster layout (footgun-cta-layout-vmnk-deadlock);
    only the MMA warp and the softmax warps, which touch TMEM, take part in the TMEM allocation
    barrier; the load warps never wait on it (footgun-tmem-alloc-barrier-warps).

Constraints: as SparseDecodeSm90.can_implement; heads padded to 128 per CTA. Compile-verified only: no B200
    here.

Compile only (any machine): python -m artifacts.kernels.sparse_decode.sparse_decode_sm100 --arch sm_100a
"""

from __future__ import annotations

import argparse
import math

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import OperandMajorMode, tcgen05, warpgroup

from . import schedule
from .cache_format import D_QK, D_V
from .gather import FP8RowGather, select
from .sparse_decode_sm90 import DUMP_DIR, SparseDecodeSm90, _fake_io
from .tmem_plan import TmemPlan

BLOCK_H = 128                       # heads per CTA: the MMA's M, one TMEM lane each
BLOCK_T = 32                        # tokens per tile (sQ 144 KiB + two 36 KiB stages fill shared memory)
HALF_V = D_V // 2                   # value dims per CTA
STAGES = 2
SOFTMAX_WARPS = (0, 1, 2, 3)
LOAD_WARPS = (4, 5, 6, 7)
MMA_WARP = 8
THREADS = 32 * (len(SOFTMAX_WARPS) + len(LOAD_WARPS) + 1)
O_CHUNK = 32                        # O columns per tcgen05.ld/st when rescaling and storing O
LOG2E, LN2 = math.log2(math.e), math.log(2.0)
PLAN = TmemPlan(block_t=BLOCK_T, value_dims=HALF_V)
NUM_SMS = 148                       # a B200


def plan(batch: int, heads: int, topk: int, sms: int = NUM_SMS) -> schedule.Schedule:
    """The persistent walk: one part per SM's worth of CTAs (two value halves per 128-head block)."""
    return schedule.plan(batch, topk, schedule.parts_for(sms, 2 * math.ceil(heads / BLOCK_H)), tile=BLOCK_T)


@cute.jit
def sequence_range(walk, b, tiles):
    """(first tile, end tile, split index) of sequence b in a part's walk (schedule.Part's fields)."""
    first, first_tile, last, end_tile, first_split = walk
    t_begin = select(b == first, first_tile, 0, cutlass.Int32)
    t_end = select(b == last, end_tile, tiles, cutlass.Int32)
    split = select(b == first, first_split, 0, cutlass.Int32)
    return t_begin, t_end, split


class SparseDecodeSm100:
    def __init__(self):
        self.gather = FP8RowGather(32 * len(LOAD_WARPS), BLOCK_T)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mKV: cute.Tensor, mIdx: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor,
                 mOacc: cute.Tensor, mLseAcc: cute.Tensor, mSched: cute.Tensor, mSplitBase: cute.Tensor,
                 softmax_scale: cutlass.Float32, stream):
        # mQ (B, H, 576) bf16; mKV (N, 656) uint8; mIdx (B, TOPK) int32; mO (B, H, 512) bf16; mLse (B, H) fp32;
        # mOacc (slots, H, 512) fp32, mLseAcc (slots, H) fp32: partials; mSched (parts * FIELDS,) int32 (the
        # walk of schedule.plan with 32-token tiles); mSplitBase (B + 1,) int32
        qk_mma = sm100_utils.make_trivial_tiled_mma(cutlass.Float16, OperandMajorMode.K, OperandMajorMode.K,
                                                    cutlass.Float32, tcgen05.CtaGroup.ONE, (BLOCK_H, BLOCK_T))
        pv_mma = sm100_utils.make_trivial_tiled_mma(cutlass.Float16, OperandMajorMode.K, OperandMajorMode.MN,
                                                    cutlass.Float32, tcgen05.CtaGroup.ONE, (BLOCK_H, HALF_V),
                                                    tcgen05.OperandSource.TMEM)
        atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Float16)
        kv_layout = cute.tile_to_shape(atom, (BLOCK_T, D_QK, STAGES), order=(0, 1, 2))
        # the same bytes as V: (512 dims, 32 tokens, stage), dims contiguous (MN-major)
        v_layout = cute.make_composed_layout(atom.inner, 0, cute.make_layout(
            ((64, D_V // 64), (8, BLOCK_T // 8), STAGES), stride=((1, BLOCK_T * 64), (64, 512), BLOCK_T * D_QK)))
        q_layout = cute.tile_to_shape(atom, (BLOCK_H, D_QK), order=(0, 1))
        p_layout = sm100_utils.make_smem_layout_a(pv_mma, (BLOCK_H, HALF_V, BLOCK_T), cutlass.Float16, 1)

        @cute.struct
        class SharedStorage:
            kv_barriers: cute.struct.MemRange[cutlass.Int64, STAGES * 2]
            q_barriers: cute.struct.MemRange[cutlass.Int64, 2]
            s_barriers: cute.struct.MemRange[cutlass.Int64, 2]
            o_barriers: cute.struct.MemRange[cutlass.Int64, 2]
            tmem_base: cutlass.Int32
            sKV: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(kv_layout)], 1024]
            sQ: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(q_layout)], 1024]

        self.shared_storage = SharedStorage
        grid = (2, cute.ceil_div(mQ.shape[1], BLOCK_H), mSched.shape[0] // schedule.FIELDS)
        self.kernel(mQ, mKV, mIdx, mO, mLse, mOacc, mLseAcc, mSched, mSplitBase, softmax_scale * LOG2E, qk_mma,
                    pv_mma, kv_layout, v_layout, q_layout, p_layout).launch(grid=grid, block=(THREADS, 1, 1),
                                                                            stream=stream)

    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mKV: cute.Tensor, mIdx: cute.Tensor, mO: cute.Tensor, mLse: cute.Tensor,
               mOacc: cute.Tensor, mLseAcc: cute.Tensor, mSched: cute.Tensor, mSplitBase: cute.Tensor,
               scale_log2: cutlass.Float32, qk_mma: cute.TiledMma, pv_mma: cute.TiledMma,
               kv_layout: cute.ComposedLayout, v_layout: cute.ComposedLayout, q_layout: cute.ComposedLayout,
               p_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        v_half, head_block, part = cute.arch.block_idx()
        h0 = head_block * BLOCK_H
        tiles = mIdx.shape[1] // BLOCK_T
        base_word = part * schedule.FIELDS
        walk = (mSched[base_word], mSched[base_word + 1], mSched[base_word + 2], mSched[base_word + 3],
                mSched[base_word + 4])
        first, last = walk[0], walk[2]

        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        sKV = storage.sKV.get_tensor(kv_layout.outer, swizzle=kv_layout.inner)    # (32 tok, 576, STAGES)
        sV = storage.sKV.get_tensor(v_layout.outer, swizzle=v_layout.inner)       # (512, 32 tok, STAGES)
        sQ = storage.sQ.get_tensor(q_layout.outer, swizzle=q_layout.inner)        # (128 heads, 576)

        # consumer and producer groups count threads (footgun-pipelineumma-consumer-threads); no cluster
        # layout for these CTA-local pipelines (footgun-cta-layout-vmnk-deadlock)
        load_threads = 32 * len(LOAD_WARPS)
        softmax_threads = 32 * len(SOFTMAX_WARPS)
        kv_producer, kv_consumer = pipeline.PipelineAsyncUmma.create(
            num_stages=STAGES, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, load_threads),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            barrier_storage=storage.kv_barriers.data_ptr()).make_participants()
        q_producer, q_consumer = pipeline.PipelineAsyncUmma.create(
            num_stages=1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, load_threads),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            barrier_storage=storage.q_barriers.data_ptr()).make_participants()
        s_producer, s_consumer = pipeline.PipelineUmmaAsync.create(
            num_stages=1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, softmax_threads),
            barrier_storage=storage.s_barriers.data_ptr()).make_participants()
        o_producer, o_consumer = pipeline.PipelineUmmaAsync.create(
            num_stages=1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, softmax_threads),
            barrier_storage=storage.o_barriers.data_ptr()).make_participants()

        # TMEM: the MMA warp allocates; the softmax warps read it; the load warps stay out of the
        # allocation barrier (footgun-tmem-alloc-barrier-warps)
        tmem = cutlass.memory.TmemAllocator(
            storage.tmem_base,
            barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=32 + softmax_threads),
            allocator_warp_id=MMA_WARP)
        tmem_done = pipeline.NamedBarrier(barrier_id=2, num_threads=32 + softmax_threads)

        qk_thr, pv_thr = qk_mma.get_slice(0), pv_mma.get_slice(0)
        tSrQ = qk_mma.make_fragment_A(qk_thr.partition_A(sQ))
        tSrK = qk_mma.make_fragment_B(qk_thr.partition_B(sKV))
        tOrV = pv_mma.make_fragment_B(pv_thr.partition_B(cute.local_tile(sV, (HALF_V, BLOCK_T, STAGES),
                                                                          (v_half, 0, 0))))
        tStS_shape = qk_mma.make_fragment_C(qk_mma.partition_shape_C((BLOCK_H, BLOCK_T)))
        tOtO_shape = pv_mma.make_fragment_C(pv_mma.partition_shape_C((BLOCK_H, HALF_V)))

        if warp >= LOAD_WARPS[0] and warp <= LOAD_WARPS[-1] and first < mQ.shape[0]:
            # ---- load warps: per sequence its query, then every tile into the next free stage ----
            ltid = tidx - 32 * LOAD_WARPS[0]
            kv_base = storage.sKV.data_ptr().toint()
            for b in cutlass.range(first, last + 1, unroll=1):
                t_begin, t_end, _ = sequence_range(walk, b, tiles)
                q_slot = q_producer.acquire_and_advance()            # the previous sequence's last S is done
                self.load_q(mQ, b, h0, storage.sQ.data_ptr().toint(), ltid)
                cute.arch.fence_proxy("async.shared", space="cta")
                q_slot.commit()
                for j in cutlass.range(t_begin, t_end, unroll=1):
                    loaded = self.gather.load(mKV, mIdx, b, j, ltid)
                    slot = kv_producer.acquire_and_advance()
                    self.gather.store(loaded, slot.index, kv_base, kv_layout, None, ltid)
                    cute.arch.fence_proxy("async.shared", space="cta")   # generic stores -> tensor core reads
                    slot.commit()

        if warp == MMA_WARP and first < mQ.shape[0]:
            # ---- MMA warp (stages A and B) ----
            tmem.allocate(PLAN.alloc_cols)
            tmem.wait_for_alloc()
            base = tmem.retrieve_ptr(cutlass.Float32)
            tStS = cute.make_tensor(base + PLAN.s_offset, tStS_shape.layout)
            tOtO = cute.make_tensor(base + PLAN.o_offset, tOtO_shape.layout)
            # P: the PV MMA's TMEM A operand over S's columns (fp16: two per column)
            tOrP = pv_mma.make_fragment_A(cute.make_tensor(base + PLAN.p_offset, p_layout.outer))[None, None, None, 0]
            s_slot = s_producer.acquire_and_advance()
            for b in cutlass.range(first, last + 1, unroll=1):
                t_begin, t_end, _ = sequence_range(walk, b, tiles)
                q = q_consumer.wait_and_advance()
                o_slot = o_producer.acquire_and_advance()         # the softmax warps have read the previous O
                for j in cutlass.range(t_begin, t_end, unroll=1):
                    kv = kv_consumer.wait_and_advance()
                    for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
                        qk_mma.set(tcgen05.Field.ACCUMULATE, kb != 0)
                        cute.gemm(qk_mma, tStS, tSrQ[(None, None, kb)], tSrK[(None, None, kb, kv.index)], tStS)
                    s_slot.commit()                               # S ready for the softmax warps
                    s_slot = s_producer.acquire_and_advance()     # P written, O rescaled
                    for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
                        # a sequence's first P.V overwrites O; everything after accumulates
                        pv_mma.set(tcgen05.Field.ACCUMULATE, j > t_begin if kb == 0 else True)
                        cute.gemm(pv_mma, tOtO, tOrP[(None, None, kb)], tOrV[(None, None, kb, kv.index)], tOtO)
                    kv.release()                                  # the stage is free once these MMAs finish
                q.release()                                       # sQ is free once the last S is done
                o_slot.commit()                                   # O complete: the softmax warps' epilogue
            tmem.relinquish_alloc_permit()
            tmem_done.arrive_and_wait()                           # the softmax warps are done with TMEM
            tmem.free(base)

        if warp <= SOFTMAX_WARPS[-1] and first < mQ.shape[0]:
            # ---- softmax and epilogue warps (stage C): thread i = TMEM lane i = head h0 + i ----
            tmem.wait_for_alloc()
            base = tmem.retrieve_ptr(cutlass.Float32)
            tStS = cute.make_tensor(base + PLAN.s_offset, tStS_shape.layout)
            tOtO = cute.make_tensor(base + PLAN.o_offset, tOtO_shape.layout)
            self._softmax_and_epilogue(tStS, tOtO, s_consumer, o_consumer, mIdx, mKV.shape[0], scale_log2, mO, mLse,
                                       mOacc, mLseAcc, mSplitBase, walk, h0, v_half, tiles, tidx, qk_mma)
            tmem_done.arrive_and_wait()

    @cute.jit
    def load_q(self, mQ: cute.Tensor, b, h0, q_base, ltid):
        """Rows h0..h0+127 of q[b] (bf16) into the swizzled fp16 tile sQ: load thread i takes row i, one
        64-dim column block (eight 16-byte loads, then their conversions and stores) per step of a loop,
        so that its addresses are two per-thread values plus immediates (rows past the last head read the
        last head and store zeros). Element (row, d) sits at byte (d // 64) * 128 * 128 + row * 128 +
        2 * (d % 64), its 16-byte column XOR row % 8 (the K_SW128 atoms of q_layout, rows first)."""
        heads = mQ.shape[1]
        row = ltid
        head = cutlass.min(h0 + row, heads - 1)
        src_row = mQ.iterator.toint() + cutlass.Int64(b * heads + head) * D_QK * 2
        dst_row = q_base + row * 128
        vals = cute.make_rmem_tensor((8,), cutlass.Float16)
        for blk in cutlass.range(D_QK // 64, unroll=1):
            loaded = []
            for u in cutlass.range_constexpr(8):
                src = cute.make_tensor(cute.make_ptr(cutlass.BFloat16, src_row + blk * 128 + u * 16,
                                                     cute.AddressSpace.gmem, assumed_align=16), cute.make_layout(8))
                loaded.append(src.load())
            for u in cutlass.range_constexpr(8):
                vals.store(loaded[u].to(cutlass.Float16))
                if h0 + row >= heads:
                    vals.fill(0.0)
                dst = cute.make_tensor(cute.make_ptr(cutlass.Float16, dst_row + blk * BLOCK_H * 128 + ((u ^ (row % 8)) << 4),
                                                     cute.AddressSpace.smem, assumed_align=16), cute.make_layout(8))
                dst.store(vals.load())

    @cute.jit
    def _softmax_and_epilogue(self, tStS, tOtO, s_consumer, o_consumer, mIdx, n_tokens, scale_log2, mO, mLse, mOacc,
                              mLseAcc, mSplitBase, walk, h0, v_half, tiles, tidx, qk_mma):
        heads = mO.shape[1]
        # S as a (128 heads, 32 tokens) TMEM tensor; tcgen05.ld 32x32b: thread i reads lane i, one column
        # per repetition
        tSAcc = tStS[(None, None), 0, 0]
        cS = qk_mma.get_slice(0).partition_C(cute.make_identity_tensor((BLOCK_H, BLOCK_T)))[(None, None), 0, 0]
        s_load = tcgen05.make_tmem_copy(cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition(BLOCK_T)),
                                                            cutlass.Float32), tSAcc).get_slice(tidx)
        tTsS = s_load.partition_S(tSAcc)
        tScS = s_load.partition_D(cS)                    # (head, token) of each loaded value
        r_s = cute.make_rmem_tensor(tScS.shape, cutlass.Float32)
        # P over S's first columns: S's accumulator layout composed down to BLOCK_T / 2 columns, each
        # holding two fp16 as one 32-bit word (footgun-st32x32b-16bit, footgun-nested-layout-flatten)
        p_cols = BLOCK_T * 16 // 32
        tStP = cute.make_tensor(tSAcc.iterator + PLAN.p_offset,
                                cute.composition(tSAcc.layout, cute.make_layout((BLOCK_H, p_cols))))
        cP = cute.make_tensor(cS.iterator, cute.composition(cS.layout, cute.make_layout((BLOCK_H, p_cols))))
        p_store = tcgen05.make_tmem_copy(cute.make_copy_atom(tcgen05.St32x32bOp(tcgen05.Repetition(p_cols)),
                                                             cutlass.Float32), tStP).get_slice(tidx)
        tTpP = p_store.partition_D(tStP)
        r_p = cute.make_rmem_tensor(r_s.shape, cutlass.Float16)
        r_p32 = cute.make_tensor(cute.recast_ptr(r_p.iterator, dtype=cutlass.Float32), p_store.partition_S(cP).shape)
        # O in O_CHUNK-column slices for the rescale and the epilogue: chunk c is O's accumulator layout
        # composed down to O_CHUNK columns, moved c * O_CHUNK columns along
        tOAcc = tOtO[(None, None), 0, 0]
        chunk_layout = cute.composition(tOAcc.layout, cute.make_layout((BLOCK_H, O_CHUNK)))
        cO = cute.make_identity_tensor((BLOCK_H, O_CHUNK))
        o_load = tcgen05.make_tmem_copy(cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition(O_CHUNK)),
                                                            cutlass.Float32),
                                        cute.make_tensor(tOAcc.iterator, chunk_layout)).get_slice(tidx)
        o_store = tcgen05.make_tmem_copy(cute.make_copy_atom(tcgen05.St32x32bOp(tcgen05.Repetition(O_CHUNK)),
                                                             cutlass.Float32),
                                         cute.make_tensor(tOAcc.iterator, chunk_layout)).get_slice(tidx)
        tTcO = o_load.partition_D(cO)                    # (head, column within the chunk) of each value
        r_o = cute.make_rmem_tensor(tTcO.shape, cutlass.Float32)
        o_chunks = HALF_V // O_CHUNK

        first, _, last, _, _ = walk
        for b in cutlass.range(first, last + 1, unroll=1):
            t_begin, t_end, split = sequence_range(walk, b, tiles)
            row_max = cutlass.Float32(-math.inf)
            row_sum = cutlass.Float32(0.0)
            for j in cutlass.range(t_begin, t_end, unroll=1):
                s_slot = s_consumer.wait_and_advance()
                cute.copy(s_load, tTsS, r_s)
                cute.arch.fence_view_async_tmem_load()       # tcgen05.wait::ld before the registers are read
                tile_max = cutlass.Float32(-math.inf)
                for i in cutlass.range_constexpr(cute.size(r_s)):
                    # the mask comes from the indices (broadcast loads), not from the load warps' shared
                    # memory: nothing would order their stores before the MMA warp's commit that wakes us
                    idx = mIdx[(b, j * BLOCK_T + tScS[i][1])]
                    valid = (idx >= 0) & (idx < n_tokens)
                    r_s[i] = select(valid, r_s[i] * scale_log2, -math.inf, cutlass.Float32)
                    tile_max = cute.arch.fmax(tile_max, r_s[i])
                m = cute.arch.fmax(row_max, tile_max)
                new_max = select(m == -math.inf, 0.0, m, cutlass.Float32)    # no valid token yet: exp2 -> 0
                rescale = cute.arch.exp2(row_max - new_max)
                row_max = m
                row_sum = row_sum * rescale
                for i in cutlass.range_constexpr(cute.size(r_s)):
                    p = cute.arch.exp2(r_s[i] - new_max)
                    row_sum = row_sum + p
                    r_p[i] = p.to(cutlass.Float16)
                cute.copy(p_store, r_p32, tTpP)
                if j > t_begin:   # O of the sequence's previous tiles (its first P.V overwrites O)
                    for c in cutlass.range_constexpr(o_chunks):
                        chunk = cute.make_tensor(tOAcc.iterator + c * O_CHUNK, chunk_layout)
                        cute.copy(o_load, o_load.partition_S(chunk), r_o)
                        cute.arch.fence_view_async_tmem_load()
                        for i in cutlass.range_constexpr(cute.size(r_o)):
                            r_o[i] = r_o[i] * rescale
                        cute.copy(o_store, r_o, o_store.partition_D(chunk))
                cute.arch.fence_view_async_tmem_store()     # tcgen05.wait::st: P and O in TMEM before the MMA warp goes on
                s_slot.release()

            # ---- the sequence's epilogue: bf16 O and lse where this part holds all of it, else the partial ----
            o_slot = o_consumer.wait_and_advance()
            none = row_sum == cutlass.Float32(0.0)
            inv = select(none, 0.0, cute.arch.rcp_approx(row_sum), cutlass.Float32)
            lse = (row_max + cute.math.log2(row_sum, fastmath=True)) * LN2
            whole = (t_begin == 0) & (t_end == tiles)
            slot = mSplitBase[b] + split
            row = tScS[0][0]
            if h0 + row < heads:
                if v_half == 0:
                    if whole:
                        mLse[(b, h0 + row)] = select(none, math.inf, lse, cutlass.Float32)
                    else:
                        mLseAcc[(slot, h0 + row)] = select(none, -math.inf, lse, cutlass.Float32)
                for c in cutlass.range_constexpr(o_chunks):
                    cute.copy(o_load, o_load.partition_S(cute.make_tensor(tOAcc.iterator + c * O_CHUNK,
                                                                          chunk_layout)), r_o)
                    cute.arch.fence_view_async_tmem_load()
                    col0 = v_half * HALF_V + c * O_CHUNK
                    if whole:
                        for i in cutlass.range_constexpr(cute.size(r_o)):
                            mO[(b, h0 + row, col0 + tTcO[i][1])] = (r_o[i] * inv).to(mO.element_type)
                    else:
                        for i in cutlass.range_constexpr(cute.size(r_o)):
                            mOacc[(slot, h0 + row, col0 + tTcO[i][1])] = r_o[i] * inv
            o_slot.release()


def compile_for(arch: str = "sm_100a", batch: int = 4, heads: int = 128, topk: int = 2048, cache_tokens: int = 65536):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    SparseDecodeSm90.can_implement(batch, heads, topk, cache_tokens=cache_tokens)   # the same inputs
    problems = PLAN.problems()
    if problems:
        raise ValueError(f"TMEM plan: {'; '.join(problems)}")
    sched = plan(batch, heads, topk)
    partials = (make_fake_compact_tensor(cutlass.Float32, (sched.slots, heads, D_V), assumed_align=16),
                make_fake_compact_tensor(cutlass.Float32, (sched.slots, heads), assumed_align=4),
                make_fake_compact_tensor(cutlass.Int32, (len(sched.parts) * schedule.FIELDS,), assumed_align=4),
                make_fake_compact_tensor(cutlass.Int32, (batch + 1,), assumed_align=4))
    return cute.compile(SparseDecodeSm100(), *_fake_io(batch, heads, topk, cache_tokens), *partials,
                        cutlass.Float32(D_QK ** -0.5), make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_100a")
    compile_for(parser.parse_args().arch)
    print("compiled")
