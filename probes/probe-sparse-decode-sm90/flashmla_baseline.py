"""FlashMLA's sm_90a sparse FP8 decode as a candidate of probe-sparse-decode-sm90 (the strongest
baseline where it runs).

FlashMLA (deepseek-ai/FlashMLA at REVISION, built on the GPU machine by `source .device/flashmla.sh`)
reads the same 656-byte DeepSeek-V3.2 cache rows as our kernel: the cache is viewed as
(rows / 64, 64, 1, 656) pages of 64 tokens, the indices as (batch, 1, topk) global row numbers, and
`is_fp8_kvcache=True`. Its output and natural-log lse are checked against the same FP32 reference
as ours before it is timed.

What it supports at REVISION (csrc/api/sparse_decode.h, the DISPATCH_NUM_HEADS macro of
csrc/api/common.h and the KU_ASSERTs of csrc/sm90/decode/sparse_fp8/splitkv_mla.cuh): 64 or 128 query
heads, one KV head, d_qk 576 (or 512), d_v 512, topk a positive multiple of 64. On the H200 a call with
another head count kills the process (SIGSEGV), so such a case runs FlashMLA in a child process first
(`crash_reason`): the record keeps FlashMLA as a failed baseline with the signal, and the probe times
the others.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
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
    """Why FlashMLA at REVISION cannot be called on this problem in this process, or None."""
    if heads not in SUPPORTED_HEADS:
        return f"FlashMLA {REVISION} sparse decode supports {' or '.join(map(str, SUPPORTED_HEADS))} query heads, not {heads}"
    if topk <= 0 or topk % PAGE_TOKENS:
        return f"topk={topk}: FlashMLA {REVISION} needs a positive multiple of {PAGE_TOKENS}"
    if rows % PAGE_TOKENS:
        return f"the cache's {rows} rows are not whole pages of {PAGE_TOKENS} tokens"
    return None


CHILD = """
import sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from artifacts.kernels.sparse_decode import reference
import flashmla_baseline
batch, heads, topk = map(int, sys.argv[3:6])
g = torch.Generator(device="cuda").manual_seed(0)
q, cache, indices = reference.random_problem(batch, heads, topk, max(2 * topk, 4096), g)
flashmla_baseline.decoder(q, cache, indices)()
torch.cuda.synchronize()
print("FLASHMLA_RETURNED")
"""
CHILD_TIMEOUT_S = 120


def crash_reason(batch: int, heads: int, topk: int) -> str:
    """Run FlashMLA once on a problem of this shape (a small cache: max(2 topk, 4096) rows per sequence)
    in a child process and say how that ended: the signal that killed it, its exit status and last
    output, or that it returned."""
    here = Path(__file__).resolve().parent
    command = [sys.executable, "-W", "ignore", "-c", CHILD, str(here.parents[1]), str(here), str(batch), str(heads),
               str(topk)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"FlashMLA {REVISION} did not return within {CHILD_TIMEOUT_S} s on b{batch} h{heads} topk{topk} (child process killed)"
    shape = f"b{batch} h{heads} topk{topk} in a child process"
    if done.returncode < 0:
        return f"FlashMLA {REVISION} crashed: killed by {signal.Signals(-done.returncode).name} ({shape})"
    tail = " ".join((done.stdout + done.stderr).split())[-200:]
    if done.returncode:
        return f"FlashMLA {REVISION} failed: exit status {done.returncode} ({shape}): {tail}"
    return f"FlashMLA {REVISION} returned ({shape}) but is not timed: {unsupported(heads, topk, PAGE_TOKENS)}"


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
