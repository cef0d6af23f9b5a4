"""FlashMLA's sm_90a dense MLA decode, the subject of probe-dense-mla-decode.

FlashMLA (deepseek-ai/FlashMLA at REVISION) is built on the GPU machine by
`source .device/flashmla-dense.sh` (made here by scripts/flashmla-dense-bundle.sh): the bf16
dense decode, its scheduler-metadata kernel and the split-KV combine, nothing else. The call is
the library's own Python interface at REVISION (flash_mla/flash_mla_interface.py):
`get_mla_metadata()` returns an empty FlashMLASchedMeta that the first `flash_mla_with_kvcache`
call fills (a kernel launch, so it must happen before a CUDA graph is captured), and later calls
with the same shapes and cache lengths reuse it.

What it accepts at REVISION (csrc/api/dense_decode.h): bf16 or fp16 q and cache of the same dtype
(this bundle builds bf16 only), head dim 576 or 512, V dim 512, page blocks of 64 tokens,
query heads a multiple of the KV heads; sm_90a only.
"""

from __future__ import annotations

from typing import Any, Callable

NAME = "FlashMLA"
REVISION = "9241ae3"
PAGE_TOKENS = 64
BUILD_HINT = "build it with `source .device/flashmla-dense.sh` (scripts/flashmla-dense-bundle.sh)"


def unavailable() -> str | None:
    """Why FlashMLA's dense decode cannot run in this process, or None: flash_mla not importable, or
    imported from a build without the dense entry point (the sparse-only bundle)."""
    try:
        import flash_mla
        import flash_mla.cuda as native
    except Exception as err:   # noqa: BLE001  (an import error of a native extension can be of any type)
        return f"flash_mla not importable ({type(err).__name__}: {str(err)[:160]}); {BUILD_HINT}"
    if not hasattr(native, "dense_decode_fwd"):
        return f"flash_mla ({getattr(flash_mla, '__file__', '?')}) has no dense decode built; {BUILD_HINT}"
    return None


def decoder(q: Any, pages: Any, block_table: Any, seqlens: Any, causal: bool,
            softmax_scale: float) -> Callable[[], tuple[Any, Any]]:
    """A callable that runs FlashMLA's dense decode on one input set and returns (O (B, s_q, H, 512)
    bf16, lse (B, H, s_q) fp32, natural log).

    q: (B, s_q, H, 576) bf16; pages: (blocks, 64, 1, 576) bf16; block_table: (B, pages per sequence)
    int32; seqlens: (B,) int32. Each decoder has its own scheduler metadata, filled by its first call."""
    import flash_mla

    meta, _ = flash_mla.get_mla_metadata()

    def run() -> tuple[Any, Any]:
        return flash_mla.flash_mla_with_kvcache(q, pages, block_table, seqlens, 512, meta, None,
                                                softmax_scale, causal)

    run.keep_alive = (q, pages, block_table, seqlens, meta)   # what graph replays read
    run.metadata = meta
    return run
