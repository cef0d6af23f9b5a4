"""probe-dense-mla-decode: FlashMLA's dense MLA decode (the absorbed form) on DeepSeek-V3 shapes.

Each case: 128 query heads of 576 dims (512 latent + 64 RoPE) against one latent KV head, V = the
first 512 columns of the same cache rows, a bf16 cache in pages of 64 tokens scattered over the pool
in a random order (a block table per sequence), every sequence KV-long, s_q 1 (plain decode) or 2
(MTP: the two query tokens are the last two positions, causal, so the first does not see the last key);
two cases with 16 heads (128 split over 8 GPUs by tensor parallelism) show the memory-bound side.

Correctness: FlashMLA's O and lse against an FP32 torch reference of the same math (the rows gathered
through the block table, softmax(q K^T / sqrt(576)) V, bottom-right causal mask), outputs poisoned
through the caching allocator first; the O gate derives from torch's own bf16 computation of the same
attention (gates.reference_tolerance: DERIVED_FACTOR x its error against the FP32 reference), lse within
DERIVED_FACTOR x the lse of torch's bf16 scores' error. The torch baselines (bf16 matmul -> fp32 softmax -> bf16 P.V, and scaled_dot_product_attention
where it accepts d 576) run on a contiguous copy of the same cache - their best case, no paging - and are
gated the same way before they are timed.

Timing: FlashMLA and the torch baselines by ctx.bench (each input set a new cache, block table and q);
the subject is FlashMLA, the headline its TFLOP/s (2 x (576 + 512) FLOP per head per attended key)
against the fastest correct torch baseline, with its fraction of the bf16 peak; metrics give its TB/s
of KV read over the copy ceiling of probe-calibration, and FLOPs and bytes per KV token.

If FlashMLA's dense decode is not importable (the bundle not sourced) the probe is skipped with the
reason (`unavailable`). It has no kernel of its own: compile-only mode reports that.

Run on the GPU machine: source .device/flashmla-dense.sh; kernelwiki probe run --probe probe-dense-mla-decode
"""

from __future__ import annotations

from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

import flashmla_dense as flashmla  # next to this script, whose folder Python puts first on sys.path

HEADS = 128       # DeepSeek-V3's query heads (a decode instance without tensor parallelism)
D_QK = 576        # 512 latent (the compressed KV, c_KV) + 64 RoPE (k^R)
D_V = 512         # V is the latent part of the same rows
ELEMENT_BYTES = 2   # bf16
SCALE = D_QK ** -0.5
WRONG_SCALE = D_V ** -0.5   # the negative control's bug: the V (latent) dim's scale
CONTROL_PARAMS = {"batch": 16, "kv_len": 4096, "s_q": 1, "heads": HEADS}


# --- the arithmetic of one case, pure Python (tests/test_dense_mla_decode.py) ----------------------
def visible_keys(s_q: int, kv_len: int) -> list[int]:
    """Keys each query token sees: the s_q tokens are the last positions of the sequence, so token i
    sees keys 0 .. kv_len - s_q + i (FlashMLA's causal mask, bottom-right aligned); s_q 1 sees all."""
    return [kv_len - (s_q - 1 - i) for i in range(s_q)]


def flops(batch: int, kv_len: int, s_q: int, heads: int = HEADS) -> int:
    """2 x (d_qk + d_v) FLOP per head per attended (query token, key) pair: q.K^T over 576 dims, P.V over 512."""
    return 2 * (D_QK + D_V) * heads * batch * sum(visible_keys(s_q, kv_len))


def kv_bytes(batch: int, kv_len: int) -> int:
    """The cache rows a decode must read: 576 bf16 values per token, once for all heads (one latent KV head)."""
    return batch * kv_len * D_QK * ELEMENT_BYTES


def bytes_moved(batch: int, kv_len: int, s_q: int, heads: int = HEADS) -> int:
    """Everything that must move: the cache rows, q (bf16), O (bf16), lse (fp32), the block table (int32)."""
    per_query = heads * s_q * (D_QK * ELEMENT_BYTES + D_V * ELEMENT_BYTES + 4)
    return kv_bytes(batch, kv_len) + batch * (per_query + 4 * (kv_len // flashmla.PAGE_TOKENS) + 4)


def per_token(s_q: int, heads: int = HEADS) -> dict:
    """FLOPs and bytes per KV token and their ratio (the arithmetic intensity, FLOP/byte) when the
    cache dominates the traffic: 2 h s_q (576 + 512) over 576 x 2."""
    f = 2 * heads * s_q * (D_QK + D_V)
    b = D_QK * ELEMENT_BYTES
    return {"flops_per_kv_token": f, "bytes_per_kv_token": b, "flop_per_byte_kv": round(f / b, 2)}


# --- inputs, reference, candidates (GPU) --------------------------------------------------------
def make_set(params: dict, generator) -> dict:
    """One input set: a pool of pages in random order (block table), the same rows as a contiguous
    (B, L, 576) copy for torch and the reference, q (B, s_q, 128, 576), the cache lengths."""
    import torch

    batch, kv_len, s_q, heads = (int(params[k]) for k in ("batch", "kv_len", "s_q", "heads"))
    per_seq = kv_len // flashmla.PAGE_TOKENS
    n_pages = batch * per_seq
    pages = torch.randn(n_pages, flashmla.PAGE_TOKENS, 1, D_QK, generator=generator, device="cuda").bfloat16()
    table = torch.randperm(n_pages, generator=generator, device="cuda").to(torch.int32).view(batch, per_seq)
    kv = pages.view(n_pages, flashmla.PAGE_TOKENS, D_QK)[table.long()].reshape(batch, kv_len, D_QK)
    q = torch.randn(batch, s_q, heads, D_QK, generator=generator, device="cuda").bfloat16()
    seqlens = torch.full((batch,), kv_len, dtype=torch.int32, device="cuda")
    return {"q": q, "pages": pages, "table": table, "kv": kv, "seqlens": seqlens,
            "mask": causal_mask(s_q, kv_len, heads)}


def causal_mask(s_q: int, kv_len: int, heads: int):
    """(s_q x heads, L) bool, True where a query row (token-major, then head) may attend; None for s_q 1."""
    import torch

    if s_q == 1:
        return None
    keys = torch.arange(kv_len, device="cuda")
    seen = torch.tensor(visible_keys(s_q, kv_len), device="cuda")
    return (keys[None, :] < seen[:, None]).repeat_interleave(heads, dim=0)


def reference(s: dict, scale: float = SCALE):
    """FP32 absorbed-MLA attention per sequence: O (B, s_q, H, 512) and natural-log lse (B, H, s_q)."""
    import torch

    q, kv, mask = s["q"], s["kv"], s["mask"]
    batch, s_q, heads, _ = q.shape
    out = torch.empty(batch, s_q, heads, D_V, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, heads, s_q, dtype=torch.float32, device=q.device)
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False   # a true FP32 reference
    try:
        for b in range(batch):
            k = kv[b].float()
            scores = (q[b].float().reshape(s_q * heads, D_QK) @ k.T) * scale
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            lse[b] = torch.logsumexp(scores, dim=-1).view(s_q, heads).T
            out[b] = (torch.softmax(scores, dim=-1) @ k[:, :D_V]).view(s_q, heads, D_V)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return out, lse


def torch_matmul(s: dict, scale: float = SCALE):
    """torch in bf16: scores = q K^T (bf16 GEMM), softmax in fp32, P in bf16, O = P V (bf16 GEMM)."""
    import torch

    q, kv, mask = s["q"], s["kv"], s["mask"]
    batch, s_q, heads, _ = q.shape
    scores = torch.matmul(q.view(batch, s_q * heads, D_QK), kv.transpose(1, 2)).float() * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, dim=-1).to(torch.bfloat16)
    return torch.matmul(p, kv[..., :D_V]).view(batch, s_q, heads, D_V)


def torch_lse(s: dict, scale: float = SCALE):
    """The natural-log lse (B, H, s_q) of torch_matmul's bf16 scores (softmax statistics in fp32)."""
    import torch

    q, kv, mask = s["q"], s["kv"], s["mask"]
    batch, s_q, heads, _ = q.shape
    scores = torch.matmul(q.view(batch, s_q * heads, D_QK), kv.transpose(1, 2)).float() * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.logsumexp(scores, dim=-1).view(batch, s_q, heads).transpose(1, 2)


def lse_tolerance(bf16_lse, ref_lse) -> float:
    """DERIVED_FACTOR x the largest finite lse error of torch's bf16 scores against the FP32
    reference (natural-log units), as the O gate is derived from torch's bf16 O."""
    import torch

    finite = torch.isfinite(ref_lse)
    error = float((bf16_lse[finite] - ref_lse[finite]).abs().max()) if bool(finite.any()) else 0.0
    return max(gates.DERIVED_FACTOR * error, gates.DERIVED_FLOOR)


def torch_sdpa(s: dict, scale: float = SCALE):
    """torch scaled_dot_product_attention (its own backend choice): the s_q x 128 query rows as queries
    of one KV head, K the 576-wide rows, V their first 512 columns."""
    import torch

    q, kv, mask = s["q"], s["kv"], s["mask"]
    batch, s_q, heads, _ = q.shape
    out = torch.nn.functional.scaled_dot_product_attention(
        q.view(batch, 1, s_q * heads, D_QK), kv.unsqueeze(1), kv[..., :D_V].unsqueeze(1),
        attn_mask=mask, scale=scale)
    return out.view(batch, s_q, heads, D_V)


def attach_flashmla(s: dict, params: dict, scale: float = SCALE) -> dict:
    """FlashMLA bound to the set, called once (its first call fills the scheduler metadata, which must
    not happen inside a graph capture)."""
    import torch

    run = flashmla.decoder(s["q"], s["pages"], s["table"], s["seqlens"], int(params["s_q"]) > 1, scale)
    run()
    torch.cuda.synchronize()
    s["flashmla"] = run
    return s


def poisoned_call(run, batch: int, s_q: int, heads: int):
    """FlashMLA allocates its outputs itself (torch.empty): NaN-filled blocks of the same sizes are
    freed just before the call, so memory it leaves unwritten reads NaN (the caching allocator hands
    the same blocks back), not a previous call's answer."""
    import torch

    for shape in ((batch, s_q, heads, D_V), (batch, heads, s_q)):
        bait = torch.empty(shape, dtype=torch.bfloat16 if len(shape) == 4 else torch.float32, device="cuda")
        gates.poison(bait)
        del bait
    out, lse = run()
    torch.cuda.synchronize()
    return out, lse


def _attempt(fn, s):
    """(output, None), or (None, 'unsupported: ...') where torch refuses the call."""
    import torch

    try:
        out = fn(s)
        torch.cuda.synchronize()
        return out, None
    except Exception as err:   # a refusal is recorded, never a crash of the probe
        return None, f"unsupported: {type(err).__name__}: {' '.join(str(err).split())[:240]}"


def gate_flashmla(s: dict, params: dict, ref_o, ref_lse, tolerance: dict, lse_tol: float, scale: float = SCALE,
                  run=None) -> dict:
    """FlashMLA's O and lse on one set, outputs poisoned, each gate derived from torch's bf16 error
    (`tolerance` for O, `lse_tol` for lse); `run` replaces the set's FlashMLA call (a control's)."""
    if run is None:
        run = s["flashmla"] if scale == SCALE else attach_flashmla(dict(s), params, scale)["flashmla"]
    out, lse = poisoned_call(run, int(params["batch"]), int(params["s_q"]), int(params["heads"]))
    return gates.combine({"o": gates.check(out, ref_o, "bf16", **tolerance), "lse": gates.check_lse(lse, ref_lse, lse_tol)})


def _key(name: str) -> str:
    """A candidate's name as a metric key: FlashMLA -> flashmla, torch-matmul -> torch_matmul."""
    return name.lower().replace("-", "_")


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    p = case["params"]
    batch, kv_len, s_q, heads = (int(p[k]) for k in ("batch", "kv_len", "s_q", "heads"))
    s = attach_flashmla(make_set(p, ctx.generator()), p)
    ref_o, ref_lse = reference(s)
    bf16_torch = torch_matmul(s)
    tolerance = gates.reference_tolerance(bf16_torch, ref_o)
    correctness = gate_flashmla(s, p, ref_o, ref_lse, tolerance, lse_tolerance(torch_lse(s), ref_lse))
    correctness["tolerance_from"] = (f"{gates.DERIVED_FACTOR:g} x torch bf16 (torch-matmul)'s error against the FP32 "
                                     "reference, for O and for lse")
    baselines = {"torch-matmul": torch_matmul, "torch-sdpa": torch_sdpa}
    torch_checks, correct, notes = {"torch-matmul": gates.check(bf16_torch, ref_o, "bf16", **tolerance)}, {}, {}
    del bf16_torch
    sdpa_out, refused = _attempt(torch_sdpa, s)
    if refused:
        notes["torch-sdpa"] = {"skipped": refused}
        del baselines["torch-sdpa"]
    else:
        torch_checks["torch-sdpa"] = gates.check(sdpa_out, ref_o, "bf16", **tolerance)
    del sdpa_out, ref_o, ref_lse
    torch.cuda.empty_cache()
    for name, check in torch_checks.items():
        correct[name] = bool(check["passed"])
    correctness["baselines"] = {name: {k: c.get(k) for k in ("passed", "rel_err", "tolerance")}
                                for name, c in torch_checks.items()}
    candidates = {flashmla.NAME: lambda inp: inp["flashmla"]()}
    candidates.update({name: (lambda inp, fn=fn: fn(inp)) for name, fn in baselines.items() if correct.get(name)})
    timing = ctx.bench(candidates, lambda i: s if i == 0 else attach_flashmla(make_set(p, ctx.generator(1000 * i)), p),
                       bytes_moved(batch, kv_len, s_q, heads), iters=20, warmup=3)
    work = flops(batch, kv_len, s_q, heads)
    tflops = {name: work / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    seconds = timing[flashmla.NAME]["median_ms"] * 1e-3
    kv_tbps = kv_bytes(batch, kv_len) / seconds / 1e12
    copy = ctx.ceilings.get("copy")
    moved = bytes_moved(batch, kv_len, s_q, heads)
    metrics = {"flops": work, "bytes_moved": moved, "kv_bytes": kv_bytes(batch, kv_len),
               **per_token(s_q, heads), "flop_per_byte": round(work / moved, 2),
               "kv_tbps": round(kv_tbps, 4), "copy_ceiling_tbps": copy,
               "kv_fraction_of_copy": round(kv_tbps / float(copy), 4) if copy else None,
               "sm_parts": int(s["flashmla"].metadata.tile_scheduler_metadata.shape[0]),
               "flashmla_revision": flashmla.REVISION,
               **{f"{_key(name)}_us": round(t["median_ms"] * 1e3, 2) for name, t in timing.items()}}
    metrics.update({f"{_key(name)}_skipped": note["skipped"] for name, note in notes.items()})
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            **ctx.headline_against("tflops", tflops[flashmla.NAME], "TFLOP/s",
                                   {name: tflops.get(name) for name in ("torch-matmul", "torch-sdpa")},
                                   correct=correct, peak_key="bf16", ceiling_key="bf16", notes=notes)}


def control_softmax_scale(ctx: Context) -> dict:
    """FlashMLA called with softmax_scale 1/sqrt(512) - the V (latent) dim's, a caller's slip - on
    batch 16 x 4096 keys, gated against the reference with the right scale (1/sqrt(576)): the scores
    are about 6% too sharp, O off by a few times the bf16 gate."""
    p = CONTROL_PARAMS
    s = attach_flashmla(make_set(p, ctx.generator(77)), p)
    ref_o, ref_lse = reference(s)
    result = gate_flashmla(s, p, ref_o, ref_lse, gates.reference_tolerance(torch_matmul(s), ref_o),
                           lse_tolerance(torch_lse(s), ref_lse), scale=WRONG_SCALE)
    result["bug"] = "softmax_scale = 1/sqrt(512) instead of 1/sqrt(576)"
    return result


def control_stale_length(ctx: Context) -> dict:
    """FlashMLA told each sequence is one key shorter than the cache holds (a cache length not
    advanced after the last append), batch 16 x 4096 keys, gated against the reference over every
    key: the lse misses the last key's share of the softmax, a few times its derived gate (the wrong
    scale misses lse by some 80x, which shows only that a gross bug fails)."""
    import torch

    p = CONTROL_PARAMS
    s = attach_flashmla(make_set(p, ctx.generator(78)), p)
    ref_o, ref_lse = reference(s)
    short = flashmla.decoder(s["q"], s["pages"], s["table"], (s["seqlens"] - 1).to(s["seqlens"].dtype), False, SCALE)
    short()
    torch.cuda.synchronize()
    result = gate_flashmla(s, p, ref_o, ref_lse, gates.reference_tolerance(torch_matmul(s), ref_o),
                           lse_tolerance(torch_lse(s), ref_lse), run=short)
    result["bug"] = "cache_seqlens one short of the keys in the cache"
    return result


NEGATIVE_CONTROLS = {"softmax-scale-dv": control_softmax_scale, "stale-cache-length": control_stale_length}


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=NEGATIVE_CONTROLS, unavailable=flashmla.unavailable)
