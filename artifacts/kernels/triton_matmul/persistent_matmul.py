"""A persistent Triton matmul for Hopper: C = A @ W^T (A: M x K, W: N x K, both K contiguous), bf16 in,
FP32 accumulation, bf16 out.

Persistent: the grid is one program per SM (or fewer, when there are fewer output tiles); program p
takes tiles p, p + P, p + 2P, ... in a grouped order (GROUP_M row tiles walked column by column,
so consecutive tiles share W's columns and A's rows in L2). Two ways to load the operands:

  pointers     tl.load of (BLOCK_M, BLOCK_K) and (BLOCK_K, BLOCK_N) blocks from computed addresses;
               Triton's pipeliner turns them into cp.async copies num_stages deep;
  descriptors  host-built TMA descriptors (triton.tools.tensor_descriptor.TensorDescriptor),
               `desc.load` / `desc.store` of whole blocks: cp.async.bulk.tensor with mbarriers;
               optionally with `warp_specialize=True` on the tile loop, where this Triton offers it
               (producer warps issue the TMA, consumer warps the MMAs).

In every variant `tl.dot` on sm_90a lowers to wgmma.mma_async when the blocks allow it (BLOCK_M a
multiple of 64, num_warps a multiple of 4); the probe scans the PTX of each launch to show which.
Our own code, written from the ideas of the Triton tutorials (grouped ordering, persistent tiles,
tensor descriptors).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tile_position(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row tile, column tile) of linear tile `tile`: groups of GROUP_M row tiles, each walked
    down its rows first, then across the columns."""
    per_group = GROUP_M * tiles_n
    first_row = (tile // per_group) * GROUP_M
    rows_here = tl.minimum(tiles_m - first_row, GROUP_M)
    within = tile % per_group
    return first_row + within % rows_here, within // rows_here


@triton.jit
def matmul_pointers(a_ptr, w_ptr, c_ptr, M, N, K, stride_am, stride_wn, stride_cm,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                    PROGRAMS: tl.constexpr):
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, PROGRAMS):
        tm, tn = _tile_position(tile, tiles_m, tiles_n, GROUP_M)
        rows = tm * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tn * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + rows[:, None] * stride_am + (k0 + ks)[None, :],
                        mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0.0)
            w = tl.load(w_ptr + cols[None, :] * stride_wn + (k0 + ks)[:, None],     # (BLOCK_K, BLOCK_N) view of W^T
                        mask=(cols[None, :] < N) & ((k0 + ks)[:, None] < K), other=0.0)
            acc = tl.dot(a, w, acc)
        tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def _descriptor_tile(a_desc, w_desc, c_desc, tile, tiles_m, tiles_n, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """One output tile through TMA descriptors: K blocks of A and W in, the bf16 tile out."""
    tm, tn = _tile_position(tile, tiles_m, tiles_n, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([tm * BLOCK_M, kt * BLOCK_K])
        w = w_desc.load([tn * BLOCK_N, kt * BLOCK_K])
        acc = tl.dot(a, w.T, acc)
    c_desc.store([tm * BLOCK_M, tn * BLOCK_N], acc.to(tl.bfloat16))


@triton.jit
def matmul_descriptors(a_desc, w_desc, c_desc, M, N, K,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                       PROGRAMS: tl.constexpr):
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, PROGRAMS):
        _descriptor_tile(a_desc, w_desc, c_desc, tile, tiles_m, tiles_n, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)


@triton.jit
def matmul_descriptors_ws(a_desc, w_desc, c_desc, M, N, K,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                          PROGRAMS: tl.constexpr):
    """The same, with the tile loop warp-specialized (a separate kernel: a Triton without the
    `warp_specialize` argument of tl.range fails only this one)."""
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, PROGRAMS, warp_specialize=True):
        _descriptor_tile(a_desc, w_desc, c_desc, tile, tiles_m, tiles_n, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)


def programs(m: int, n: int, block_m: int, block_n: int, sms: int) -> int:
    """One program per SM, or one per output tile when there are fewer."""
    return max(1, min(sms, triton.cdiv(m, block_m) * triton.cdiv(n, block_n)))


def launcher(a, w, c, *, block_m: int = 128, block_n: int = 256, block_k: int = 64, group_m: int = 8,
             num_warps: int = 8, num_stages: int = 3, loads: str = "descriptors", warp_specialize: bool = False):
    """run() computing c = a @ w.T (bf16) on the current stream; run() returns Triton's compiled
    kernel (its .asm holds the TTGIR and PTX). TMA descriptors need 16-byte-aligned rows."""
    import torch

    m, k = a.shape
    n = w.shape[0]
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (programs(m, n, block_m, block_n, sms),)
    settings = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, PROGRAMS=grid[0],
                    num_warps=num_warps, num_stages=num_stages)
    if loads == "pointers":
        def run():
            return matmul_pointers[grid](a, w, c, m, n, k, a.stride(0), w.stride(0), c.stride(0), **settings)
        return run
    if loads != "descriptors":
        raise ValueError(f"loads={loads!r}: use 'pointers' or 'descriptors'")
    from triton.tools.tensor_descriptor import TensorDescriptor

    a_desc = TensorDescriptor.from_tensor(a, [block_m, block_k])
    w_desc = TensorDescriptor.from_tensor(w, [block_n, block_k])
    c_desc = TensorDescriptor.from_tensor(c, [block_m, block_n])

    kernel = matmul_descriptors_ws if warp_specialize else matmul_descriptors

    def run():
        return kernel[grid](a_desc, w_desc, c_desc, m, n, k, **settings)
    return run
