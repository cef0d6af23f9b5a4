"""Gathering selected FP8 cache rows into a swizzled fp16 shared-memory tile (CuTe DSL, sm_90a and up).

One job, shared by the sparse-decode kernels: for a tile of BLOCK_T selected tokens, load their cache rows
(cache_format.py) into registers with 16-byte loads, then dequantize (e4m3 -> fp16 times the row's
per-128 scale; bf16 RoPE -> fp16) and store them into a K-major, 128-byte-swizzled (BLOCK_T x 576) fp16
tile, plus an additive mask per token (0, or -inf for an index of -1 or outside the cache). The load and
the store are separate calls so that a kernel can put work between them. Also the query load (bf16 ->
fp16, rows past the last head zero).

Why fp16: the dequantized value e4m3 x 2^k is exact in fp16 as in bf16, and e4m3 -> fp16 is a single
cvt.rn.f16x2.e4m3x2 per two values with the scale applied as one HMUL2, where the bf16 path needs
e4m3 -> f16 -> f32 -> bf16 (the cost src-flashmla-fp8-sparse-deep-dive finds dominating its kernel).
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute

from .cache_format import D_NOPE, D_QK, D_ROPE, QUANT_TILE, ROPE_OFFSET, ROW_BYTES, SCALE_OFFSET

BLOCK_T = 64                        # selected tokens per tile
CHUNK = 16                          # e4m3 values per 16-byte load
PIECE = 8                           # fp16 values per 16-byte shared-memory store (and bf16 per RoPE load)
NOPE_CHUNKS = D_NOPE // CHUNK       # 32: one warp reads one row's NoPE part
ROPE_CHUNKS = D_ROPE // PIECE       # 8
SWIZZLE_MASK = 0x70                 # 128-byte swizzle on byte addresses: bits 7..9 xor into bits 4..6


def select(cond, if_value, else_value, dtype):
    """A branch-free choice between two scalars of `dtype` on a run-time condition."""
    return dtype(cutlass.select_(cond, dtype(if_value), dtype(else_value)))


class FP8RowGather:
    """The gather of `block_t`-token tiles by `threads` threads (the thread index passed to load/store
    counts from 0 within those threads)."""

    def __init__(self, threads: int, block_t: int = BLOCK_T):
        if threads % NOPE_CHUNKS or block_t * NOPE_CHUNKS % threads or block_t * ROPE_CHUNKS % threads:
            raise ValueError(f"threads={threads} with block_t={block_t} unsupported; use 128 or 256 threads and "
                             f"block_t a multiple of {max(threads // ROPE_CHUNKS, threads // NOPE_CHUNKS)}")
        self.threads, self.block_t = threads, block_t

    @cute.jit
    def load_q(self, mQ: cute.Tensor, b, h0, q_base, q_layout: cute.ComposedLayout, tidx):
        """Rows h0..h0+63 of q[b] (bf16) into the swizzled fp16 tile at q_base; rows past the last head zero."""
        heads = mQ.shape[1]
        q_gmem = mQ.iterator.toint()
        rows = cute.size(q_layout.outer, mode=[0])
        for i in cutlass.range_constexpr(rows * D_QK // PIECE // self.threads):
            piece = tidx + i * self.threads
            row, col = piece // (D_QK // PIECE), piece % (D_QK // PIECE) * PIECE
            vals = cute.make_rmem_tensor((PIECE,), cutlass.Float16)
            vals.fill(0.0)
            if h0 + row < heads:
                addr = q_gmem + (cutlass.Int64(b * heads + h0 + row) * D_QK + col) * 2   # 16-byte aligned
                src = cute.make_tensor(cute.make_ptr(cutlass.BFloat16, addr, cute.AddressSpace.gmem, assumed_align=16),
                                       cute.make_layout(PIECE))
                vals.store(src.load().to(cutlass.Float16))
            self.store_piece(q_base, cute.crd2idx((row, col), q_layout.outer), vals)

    @cute.jit
    def store_piece(self, smem_base: cutlass.Int32, elem_offset: cutlass.Int32, vals: cute.Tensor):
        """16 bytes of fp16 into a 128-byte-swizzled buffer: the swizzle acts on byte addresses."""
        addr = smem_base + elem_offset * 2
        addr = addr ^ ((addr >> 3) & SWIZZLE_MASK)
        dst = cute.make_tensor(cute.make_ptr(cutlass.Float16, addr, cute.AddressSpace.smem, assumed_align=16),
                               cute.make_layout(PIECE))
        dst.store(vals.load())

    @cute.jit
    def load(self, mKV: cute.Tensor, mIdx: cute.Tensor, b, tile, tidx):
        """Issue the global loads of one tile (block_t selected rows) into registers: per thread
        block_t * 32 / threads NoPE chunks of 16 e4m3 with their scales and block_t * 8 / threads
        RoPE chunks of 8 bf16. Returned as trace-time lists;
        nothing waits for them until store() uses them, so the loads fly while the MMAs run."""
        n_tokens = mKV.shape[0]
        base = mKV.iterator.toint()
        chunk = tidx % NOPE_CHUNKS
        nope = []
        for i in cutlass.range_constexpr(self.block_t // (self.threads // NOPE_CHUNKS)):
            t = tidx // NOPE_CHUNKS + i * (self.threads // NOPE_CHUNKS)
            idx = mIdx[(b, tile * self.block_t + t)]
            valid = (idx >= 0) & (idx < n_tokens)
            row = base + cutlass.Int64(select(valid, idx, 0, cutlass.Int32)) * ROW_BYTES
            src = cute.make_tensor(cute.make_ptr(cutlass.Float8E4M3FN, row + chunk * CHUNK, cute.AddressSpace.gmem,
                                                 assumed_align=16), cute.make_layout(CHUNK))
            scale_addr = row + SCALE_OFFSET + chunk * CHUNK // QUANT_TILE * 4
            scale = cute.make_tensor(cute.make_ptr(cutlass.Float32, scale_addr, cute.AddressSpace.gmem, assumed_align=4),
                                     cute.make_layout(1))
            nope.append((t, valid, src.load(), scale[0]))
        rope_chunk = tidx % ROPE_CHUNKS
        rope = []
        for i in cutlass.range_constexpr(self.block_t // (self.threads // ROPE_CHUNKS)):
            t = tidx // ROPE_CHUNKS + i * (self.threads // ROPE_CHUNKS)
            idx = mIdx[(b, tile * self.block_t + t)]
            valid = (idx >= 0) & (idx < n_tokens)
            src = cute.make_tensor(
                cute.make_ptr(cutlass.BFloat16, base + cutlass.Int64(select(valid, idx, 0, cutlass.Int32)) * ROW_BYTES
                              + ROPE_OFFSET + rope_chunk * PIECE * 2, cute.AddressSpace.gmem, assumed_align=16),
                cute.make_layout(PIECE))
            rope.append((t, src.load()))
        return nope, rope

    @cute.jit
    def store(self, loaded, stage, kv_base, kv_layout: cute.ComposedLayout, s_mask, tidx):
        """Dequantize what load() fetched into sKV[stage]: e4m3 -> fp16 times the tile scale (16 values
        = two 16-byte stores), bf16 RoPE -> fp16, and each token's additive mask (0 or -inf)."""
        nope, rope = loaded
        chunk = tidx % NOPE_CHUNKS
        vals = cute.make_rmem_tensor((CHUNK,), cutlass.Float16)
        for t, valid, fp8, scale in nope:
            vals.store(fp8.to(cutlass.Float16) * scale.to(cutlass.Float16))
            for half in cutlass.range_constexpr(CHUNK // PIECE):
                self.store_piece(kv_base, cute.crd2idx((t, chunk * CHUNK + half * PIECE, stage), kv_layout.outer),
                                  cute.local_tile(vals, (PIECE,), (half,)))
            if cutlass.const_expr(s_mask is not None):   # None: the kernel masks from the indices itself
                if chunk == 0:
                    s_mask[(t, stage)] = select(valid, 0.0, -math.inf, cutlass.Float32)
        rope_chunk = tidx % ROPE_CHUNKS
        piece = cute.make_rmem_tensor((PIECE,), cutlass.Float16)
        for t, bf16 in rope:
            piece.store(bf16.to(cutlass.Float16))
            self.store_piece(kv_base, cute.crd2idx((t, D_NOPE + rope_chunk * PIECE, stage), kv_layout.outer), piece)


ROUND_TOKENS = 32                   # tokens one pass of the producer warpgroup covers (8 per warp)
LANES_PER_TOKEN = 4                 # lanes that share a token's row
NOPE_LOADS = D_NOPE // (LANES_PER_TOKEN * CHUNK)    # 8 16-byte NoPE loads per lane and token
ROPE_LOADS = D_ROPE // (LANES_PER_TOKEN * PIECE)    # 2 16-byte RoPE loads per lane and token


class ProducerGather:
    """The gather of a warp-specialized kernel: one warpgroup (128 threads) fills one 64-token stage.

    Thread mapping, per 32-token round (two rounds per tile): warp w takes tokens 8w..8w+7 (+ 32 in the
    second round), lane l the token 8w + l % 8 and the quarter q = l // 8 of its row: NoPE load i (0..7)
    is the 16 bytes at 64 i + 16 q (each load instruction reads 64 contiguous bytes of 8 rows), RoPE
    load j (0, 1) the 16 bytes at 528 + 16 (4 j + q), and every lane the token's four scales (one
    16-byte load). The 8 lanes of a quarter write the same 16-byte column of 8 consecutive token rows of
    the 128-byte-swizzled tile: the swizzle puts those rows' columns in 8 different bank groups, so each
    16-byte shared-memory store is conflict-free.

    load() issues the loads and returns them (nothing waits for them until store() converts them), so
    a kernel can issue them before it waits for the stage to be free."""

    rounds = BLOCK_T // ROUND_TOKENS

    @cute.jit
    def token(self, wtid, rnd):
        """The tile row (0..63) this thread gathers in round `rnd`."""
        return rnd * ROUND_TOKENS + (wtid // 32) * 8 + wtid % 8

    @cute.jit
    def load_indices(self, mIdx: cute.Tensor, b, tile, wtid):
        """The cache rows of this thread's tokens in one tile (one int32 per round)."""
        return [mIdx[(b, tile * BLOCK_T + self.token(wtid, r))] for r in range(self.rounds)]

    @cute.jit
    def load(self, mKV: cute.Tensor, rows, wtid):
        """Issue the 16-byte loads of this thread's share of the rows `rows` (from load_indices)."""
        n_tokens = mKV.shape[0]
        base = mKV.iterator.toint()
        quarter = wtid % 32 // 8
        out = []
        for idx in rows:
            valid = (idx >= 0) & (idx < n_tokens)
            row = base + cutlass.Int64(select(valid, idx, 0, cutlass.Int32)) * ROW_BYTES
            nope = []
            for i in cutlass.range_constexpr(NOPE_LOADS):
                src = cute.make_tensor(cute.make_ptr(cutlass.Float8E4M3FN, row + i * 64 + quarter * CHUNK,
                                                     cute.AddressSpace.gmem, assumed_align=16), cute.make_layout(CHUNK))
                nope.append(src.load())
            scale = cute.make_tensor(cute.make_ptr(cutlass.Float32, row + SCALE_OFFSET, cute.AddressSpace.gmem,
                                                   assumed_align=16), cute.make_layout(4)).load()
            rope = []
            for j in cutlass.range_constexpr(ROPE_LOADS):
                src = cute.make_tensor(cute.make_ptr(cutlass.BFloat16, row + ROPE_OFFSET + (4 * j + quarter) * PIECE * 2,
                                                     cute.AddressSpace.gmem, assumed_align=16), cute.make_layout(PIECE))
                rope.append(src.load())
            out.append((valid, nope, scale, rope))
        return out

    @cute.jit
    def store(self, loaded, stage, kv_base, wtid):
        """Dequantize into stage `stage` of the fp16 ring at kv_base (e4m3 -> fp16 times the row's scale for
        its 128-value tile, bf16 RoPE -> fp16).

        The ring is (BLOCK_T x 576 fp16) per stage in 128-byte-swizzled K-major atoms of 8 rows x 64 dims,
        tiled rows first (the kernels' kv_layout): element (t, d) of a stage sits at byte
        (d // 64) * BLOCK_T * 128 + t * 128 + 2 * (d % 64) with the 16-byte column index XOR t % 8. So
        a thread's pieces differ from one of four per-thread row addresses by immediates only."""
        quarter = wtid % 32 // 8
        vals = cute.make_rmem_tensor((CHUNK,), cutlass.Float16)
        piece = cute.make_rmem_tensor((PIECE,), cutlass.Float16)
        stage_base = kv_base + stage * (BLOCK_T * D_QK * 2)
        for r in cutlass.range_constexpr(self.rounds):
            valid, nope, scale, rope = loaded[r]
            t = self.token(wtid, r)
            row = stage_base + t * 128
            nope_at = [row + (((quarter * 2 + half) ^ (t % 8)) << 4) for half in range(CHUNK // PIECE)]
            rope_at = [row + (D_NOPE // 64) * BLOCK_T * 128 + (((4 * j + quarter) ^ (t % 8)) << 4)
                       for j in range(ROPE_LOADS)]
            scales = [scale[q].to(cutlass.Float16) for q in range(D_NOPE // QUANT_TILE)]
            for i in cutlass.range_constexpr(NOPE_LOADS):
                vals.store(nope[i].to(cutlass.Float16) * scales[i // 2])
                for half in cutlass.range_constexpr(CHUNK // PIECE):
                    self.put(nope_at[half] + i * BLOCK_T * 128, cute.local_tile(vals, (PIECE,), (half,)))
            for j in cutlass.range_constexpr(ROPE_LOADS):
                piece.store(rope[j].to(cutlass.Float16))
                self.put(rope_at[j], piece)

    @cute.jit
    def put(self, addr: cutlass.Int32, vals: cute.Tensor):
        """16 bytes of fp16 at an (already swizzled) shared-memory byte address."""
        dst = cute.make_tensor(cute.make_ptr(cutlass.Float16, addr, cute.AddressSpace.smem, assumed_align=16),
                               cute.make_layout(PIECE))
        dst.store(vals.load())
