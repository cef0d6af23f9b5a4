"""FlashMLA's sm_90a sparse FP8 decode as a candidate of probe-sparse-decode-sm90 (the strongest
baseline where it runs).

FlashMLA (deepseek-ai/FlashMLA at REVISION, built on the GPU machine by `source .device/flashmla.sh`)
reads the same 656-byte DeepSeek-V3.2 cache rows as our kernel: the cache is viewed as
(rows / 64, 64, 1, 656) pages of 64 tokens, the indices as (batch, 1, topk) global row numbers, and
`is_fp8_kvcache=True`. Its output and natural-log lse are checked against the same FP32 reference
as ours before it is timed.

What it supports at REVISION (csrc/api/sparse_decode.h and the DISPATCH_NUM_HEADS macro of
csrc/api/common.h): 64 or 128 query heads, one KV head, d_qk 576 (or 512), d_v 512, topk > 0. Any
other head count is refused by its C++ checks ("Unsupported h_q"), so such a case is recorded with
FlashMLA skipped and the reason, never as a crash of the probe.
"""

from __future__ import annotations

from typing import Any, Callable

NAME = "FlashMLA"
REVISION = "9241ae3"
SUPPORTED_HEADS = (64, 128)
PAGE_TOKENS = 64   # tokens per cache page in the view FlashMLA is given (any page size works for sparse decode)


def unavailable() -> str | None:
    """Why FlashMLA cannot run in this process (not built or not importable), or None."""
    try:
        import flash_mla  # noqa: F401
    except Exception as err:   # noqa: BLE001  (an import error of a native extension can be of any type)
        return f"flash_mla not importable ({type(err).__name__}: {str(err)[:160]}); build it with `source .device/flashmla.sh`"
    return None


def unsupported(heads: int, topk: int, rows: int) -> str | None:
    """Why FlashMLA at REVISION refuses this problem, or None."""
    if heads not in SUPPORTED_HEADS:
        return f"FlashMLA {REVISION} sparse decode supports {' or '.join(map(str, SUPPORTED_HEADS))} query heads, not {heads}"
    if topk <= 0:
        return f"topk={topk}: FlashMLA needs topk > 0"
    if rows % PAGE_TOKENS:
        return f"the cache's {rows} rows are not whole pages of {PAGE_TOKENS} tokens"
    return None


def decoder(q: Any, cache: Any, indices: Any, softmax_scale: float | None = None) -> Callable[[], tuple[Any, Any]]:
    """A callable that runs FlashMLA on our problem and returns (O (B, H, 512) bf16, lse (B, H) fp32).

    q: (B, H, 576) bf16; cache: (rows, 656) uint8 in the V3.2 format; indices: (B, topk) int32 global
    row numbers. The first call also builds FlashMLA's tile-scheduler metadata, which later calls
    (and a CUDA graph captured after the first call) reuse."""
    import flash_mla

    batch, heads, d_qk = q.shape
    q4 = q.reshape(batch, 1, heads, d_qk).contiguous()
    pages = cache.view(cache.shape[0] // PAGE_TOKENS, PAGE_TOKENS, 1, cache.shape[1])
    index3 = indices.reshape(batch, 1, indices.shape[-1]).contiguous()
    meta, _ = flash_mla.get_mla_metadata()
    scale = softmax_scale if softmax_scale is not None else d_qk ** -0.5

    def run() -> tuple[Any, Any]:
        out, lse = flash_mla.flash_mla_with_kvcache(q4, pages, None, None, 512, meta, None, scale,
                                                    False, True, index3)
        return out.view(batch, heads, out.shape[-1]), lse.view(batch, heads)

    run.keep_alive = (q4, pages, index3, meta)   # the graph replays read these
    return run
