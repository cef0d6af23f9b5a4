"""Fine-grained FP8 quantization (1x128 per token, 128x128 per block) and the FP32 reference.

per_token_cast   x (..., M, K) -> e4m3 (..., M, K) and sfa (..., M, K/128): one FP32 scale per row per
                 128 K elements, amax / 448, stored M-major (stride 1 along M) with the K-block stride
                 padded to a multiple of 4 floats, the layout the kernel's TMA and cuBLAS read.
per_block_cast   w (..., N, K) -> e4m3 (..., N, K) and sfb (..., ceil(N/128), K/128): one FP32 scale per
                 128 x 128 block (the last block row may be partial).
reference        the FP32 product of the dequantized operands: what an exact kernel would return
                 before its bf16 rounding. Grouped layouts take the group of each row.
"""

from __future__ import annotations

BLOCK = 128
E4M3_MAX = 448.0
AMAX_FLOOR = 1e-4   # an all-zero block gets a finite scale instead of 0 / 0


def per_token_cast(x):
    """(e4m3 (..., M, K), sfa (..., M, K/128) M-major) for a float tensor x (..., M, K), K % 128 == 0."""
    import torch

    *batch, m, k = x.shape
    if k % BLOCK:
        raise ValueError(f"K={k} must be a multiple of {BLOCK}")
    blocks = x.float().reshape(*batch, m, k // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=-1).clamp(min=AMAX_FLOOR) / E4M3_MAX          # (..., M, K/128)
    q = (blocks / scale.unsqueeze(-1)).to(torch.float8_e4m3fn).reshape(*batch, m, k)
    padded_m = -(-m // 4) * 4                                                    # 16-byte K-block stride
    storage = torch.zeros(*batch, k // BLOCK, padded_m, dtype=torch.float32, device=x.device)
    storage[..., :m] = scale.transpose(-1, -2)
    return q, storage[..., :m].transpose(-1, -2)


def per_block_cast(w):
    """(e4m3 (..., N, K), sfb (..., ceil(N/128), K/128)) for a float tensor w (..., N, K), K % 128 == 0."""
    import torch

    *batch, n, k = w.shape
    if k % BLOCK:
        raise ValueError(f"K={k} must be a multiple of {BLOCK}")
    n_blocks = -(-n // BLOCK)
    padded = torch.zeros(*batch, n_blocks * BLOCK, k, dtype=torch.float32, device=w.device)
    padded[..., :n, :] = w.float()
    blocks = padded.reshape(*batch, n_blocks, BLOCK, k // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=(-3, -1)).clamp(min=AMAX_FLOOR) / E4M3_MAX     # (..., N/128, K/128)
    q = (blocks / scale[..., None, :, None]).to(torch.float8_e4m3fn)
    return q.reshape(*batch, n_blocks * BLOCK, k)[..., :n, :].contiguous(), scale.contiguous()


def dequantize_a(a, sfa):
    """FP32 values of per-token-quantized a (..., M, K) with sfa (..., M, K/128)."""
    return a.float() * sfa.repeat_interleave(BLOCK, dim=-1)


def dequantize_b(b, sfb):
    """FP32 values of per-block-quantized b (..., N, K) with sfb (..., ceil(N/128), K/128)."""
    n = b.shape[-2]
    full = sfb.repeat_interleave(BLOCK, dim=-2)[..., :n, :].repeat_interleave(BLOCK, dim=-1)
    return b.float() * full


def reference(a, sfa, b, sfb, layout: str = "normal", group_info=None):
    """FP32 D of the kernel's layouts: normal (M, N); contiguous (M, N) with m_indices giving each row's
    group (rows of group -1 are zero); masked (G, M_max, N) for every row (the caller masks)."""
    import torch

    with _full_fp32_matmul():
        a32, b32 = dequantize_a(a, sfa), dequantize_b(b, sfb)
        if layout == "normal":
            return a32 @ b32.t()
        if layout == "masked":
            return torch.bmm(a32, b32.transpose(1, 2))
        if layout != "contiguous":
            raise ValueError(f"layout {layout!r} unknown; use normal, contiguous or masked")
        out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32, device=a.device)
        for g in range(b.shape[0]):
            rows = (group_info == g).nonzero().flatten()
            if rows.numel():
                out[rows] = a32[rows] @ b32[g].t()
        return out


class _full_fp32_matmul:
    """cuBLAS FP32 matmul without TF32 for the reference, restoring the caller's setting."""

    def __enter__(self):
        import torch

        self.before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False

    def __exit__(self, *exc):
        import torch

        torch.backends.cuda.matmul.allow_tf32 = self.before
