"""The sparse MLA decode in plain torch: the FP8 KV-cache format, and attention over the selected rows.

Cache format (cache_format.py; DeepSeek-V3.2, "FP8 with scale"): one row of 656 bytes per cached token,
    bytes   0..511  the 512 "NoPE" latent values in float8 e4m3,
    bytes 512..527  4 float32 scales, one per 128 consecutive NoPE values,
    bytes 528..655  the 64 RoPE values in bfloat16 (not quantized).
A query token attends with H query heads of D_QK = 576 dims (512 + 64) to the TOPK rows its indices
name; the value is the first D_V = 512 dims of the same row (MQA form of MLA: one latent KV head).
An index of -1 (or outside the cache) is masked. Outputs: O (B, H, 512) and the natural-log
log-sum-exp of the scaled scores (B, H); a query with no valid index gets O = 0 and lse = +inf,
FlashMLA's convention.

This module is the correctness oracle for artifacts/kernels/sparse_decode and the torch baseline of
probe-sparse-decode-sm90. Everything here runs on CPU or GPU.
"""

from __future__ import annotations

import math


import torch

from .cache_format import (D_NOPE, D_QK, D_ROPE, D_V, E4M3_MAX, QUANT_TILE, ROPE_OFFSET,
                          ROW_BYTES, SCALE_OFFSET, SCALES)

QUANTIZE_CHUNK = 1 << 16


def quantize_cache(latent: torch.Tensor) -> torch.Tensor:
    """(N, 576) bf16/fp32 latent rows -> (N, 656) uint8 cache rows. Each 128-value tile of the NoPE part
    gets the scale amax / 448 rounded up to a power of two (what DeepSeek's quantizer does), so the
    dequantized value is exact in bf16 and fp16 alike."""
    if latent.dim() != 2 or latent.shape[1] != D_QK:
        raise ValueError(f"latent: expected (N, {D_QK}); got {tuple(latent.shape)}")
    n = latent.shape[0]
    nope = latent[:, :D_NOPE].float().view(n, SCALES, QUANT_TILE)
    amax = nope.abs().amax(dim=-1).clamp_min(1e-4)
    scales = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX)))                       # (N, 4)
    q8 = (nope / scales.unsqueeze(-1)).to(torch.float8_e4m3fn).view(n, D_NOPE)
    row = torch.empty(n, ROW_BYTES, dtype=torch.uint8, device=latent.device)
    row[:, :SCALE_OFFSET] = q8.view(torch.uint8)
    row[:, SCALE_OFFSET:ROPE_OFFSET] = scales.float().contiguous().view(torch.uint8).view(n, 4 * SCALES)
    row[:, ROPE_OFFSET:] = latent[:, D_NOPE:].to(torch.bfloat16).contiguous().view(torch.uint8).view(n, 2 * D_ROPE)
    return row


def dequantize_rows(rows: torch.Tensor) -> torch.Tensor:
    """(..., 656) uint8 cache rows -> (..., 576) float32 latent rows (NoPE times its tile scale, RoPE as is)."""
    shape = rows.shape[:-1]
    flat = rows.reshape(-1, ROW_BYTES)
    nope = flat[:, :SCALE_OFFSET].contiguous().view(torch.float8_e4m3fn).float().view(-1, SCALES, QUANT_TILE)
    scales = flat[:, SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.float32)                   # (n, 4)
    rope = flat[:, ROPE_OFFSET:].contiguous().view(torch.bfloat16).float()                         # (n, 64)
    out = torch.cat([(nope * scales.unsqueeze(-1)).view(-1, D_NOPE), rope], dim=-1)
    return out.view(*shape, D_QK)


def gather(cache: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The selected rows, dequantized: ((B, TOPK, 576) float32, (B, TOPK) bool valid). Invalid
    indices (-1 or >= N) read row 0 and are marked invalid."""
    valid = (indices >= 0) & (indices < cache.shape[0])
    rows = cache.index_select(0, torch.where(valid, indices, 0).reshape(-1).long())
    return dequantize_rows(rows).view(*indices.shape, D_QK), valid


def sparse_decode(q: torch.Tensor, cache: torch.Tensor, indices: torch.Tensor,
                  softmax_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """FP32 reference: q (B, H, 576), cache (N, 656) uint8, indices (B, TOPK) int32 ->
    (O (B, H, 512) float32, lse (B, H) float32)."""
    scale = softmax_scale if softmax_scale is not None else D_QK ** -0.5
    kv, valid = gather(cache, indices)                                       # (B, T, 576)
    scores = torch.einsum("bhd,btd->bht", q.float(), kv) * scale
    scores = scores.masked_fill(~valid.unsqueeze(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                                    # (B, H)
    empty = torch.isneginf(lse)
    p = torch.exp(scores - torch.where(empty, 0.0, lse).unsqueeze(-1))
    out = torch.einsum("bht,btd->bhd", p, kv[..., :D_V])
    return out, torch.where(empty, math.inf, lse)


def sparse_decode_bf16(q: torch.Tensor, cache: torch.Tensor, indices: torch.Tensor,
                       softmax_scale: float | None = None) -> torch.Tensor:
    """The same attention computed the way a bf16 kernel computes it (bf16 operands of both matmuls,
    P rounded to bf16, FP32 accumulation): its distance from `sparse_decode` is the error any bf16
    implementation is entitled to, and the probe's gate is a multiple of it."""
    scale = softmax_scale if softmax_scale is not None else D_QK ** -0.5
    kv, valid = gather(cache, indices)
    kv = kv.to(torch.bfloat16)
    scores = torch.einsum("bhd,btd->bht", q.bfloat16().float(), kv.float()) * scale
    scores = scores.masked_fill(~valid.unsqueeze(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.exp(scores - torch.where(torch.isneginf(lse), 0.0, lse).unsqueeze(-1)).to(torch.bfloat16)
    return torch.einsum("bht,btd->bhd", p.float(), kv[..., :D_V].float()).to(torch.bfloat16)


def sparse_decode_fp16(q: torch.Tensor, cache: torch.Tensor, indices: torch.Tensor,
                       softmax_scale: float | None = None) -> torch.Tensor:
    """The same attention computed the way our sm_90a kernel computes it: fp16 operands of both
    matmuls (q converted from bf16, the dequantized rows exact in fp16, P rounded to fp16), FP32
    accumulation and softmax, O rounded to bf16 at the end. Its distance from `sparse_decode` is
    what an fp16 kernel is entitled to; a bf16 computation (`sparse_decode_bf16`, P rounded to bf16)
    is about three times as far from the bf16-rounded exact result, which is how the probe's gate
    tells the two apart."""
    scale = softmax_scale if softmax_scale is not None else D_QK ** -0.5
    kv, valid = gather(cache, indices)
    kv = kv.to(torch.float16)
    scores = torch.einsum("bhd,btd->bht", q.to(torch.float16).float(), kv.float()) * scale
    scores = scores.masked_fill(~valid.unsqueeze(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.exp(scores - torch.where(torch.isneginf(lse), 0.0, lse).unsqueeze(-1)).to(torch.float16)
    return torch.einsum("bht,btd->bhd", p.float(), kv[..., :D_V].float()).to(torch.bfloat16)


def sdpa_baseline(q: torch.Tensor, cache: torch.Tensor, indices: torch.Tensor,
                  softmax_scale: float | None = None) -> torch.Tensor:
    """What a torch user writes: gather, dequantize to bf16, scaled_dot_product_attention on the
    gathered K/V. With one KV head, the H query heads are H queries of a single head (the MQA form),
    so nothing is broadcast. Returns O (B, H, 512) bf16."""
    scale = softmax_scale if softmax_scale is not None else D_QK ** -0.5
    kv, valid = gather(cache, indices)
    kv = kv.to(torch.bfloat16).unsqueeze(1)                                  # (B, 1, T, 576)
    mask = valid.view(q.shape[0], 1, 1, -1)
    return torch.nn.functional.scaled_dot_product_attention(
        q.unsqueeze(1), kv, kv[..., :D_V], attn_mask=mask, scale=scale).squeeze(1)


def random_problem(batch: int, heads: int, topk: int, tokens_per_seq: int, generator: torch.Generator,
                   device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normal q and latent rows, each sequence owning tokens_per_seq cache rows, and topk distinct
    random indices per sequence into its own rows (global row numbers, as FlashMLA's indices are).
    Returns (q (B, H, 576) bf16, cache (B * tokens_per_seq, 656) uint8, indices (B, TOPK) int32)."""
    q = torch.randn(batch, heads, D_QK, generator=generator, device=device).bfloat16()
    cache = torch.empty(batch * tokens_per_seq, ROW_BYTES, dtype=torch.uint8, device=device)
    for first in range(0, cache.shape[0], QUANTIZE_CHUNK):   # bounded fp32 scratch for large caches
        rows = min(QUANTIZE_CHUNK, cache.shape[0] - first)
        cache[first:first + rows] = quantize_cache(torch.randn(rows, D_QK, generator=generator, device=device))
    local = torch.rand(batch, tokens_per_seq, generator=generator, device=device).argsort(dim=-1)[:, :topk]
    offsets = torch.arange(batch, device=device).unsqueeze(1) * tokens_per_seq
    return q, cache, (local + offsets).int()
