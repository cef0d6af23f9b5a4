"""probe-attention-variants: which attention variants FlashAttention-4's sm90 path and cuDNN accept on Hopper, and how fast.

Each case is one variant (GQA / MQA head ratios, head dims 64 to 256, causal with sq != sk,
varlen batches, a paged KV cache). For each backend - FA4 (flash_attn.cute, the pinned
flash-attn-4 wheel) and cuDNN (torch SDPA with only the cuDNN backend enabled) - the probe calls
the variant once: a refusal is recorded as "unsupported: <the error>" (a result, not a failure);
an accepted call is gated against an FP32 reference computed here (explicit scores, bottom-right-aligned
causal mask - FlashAttention's convention for sq != sk -, K/V heads repeated for GQA) with the rule
FlashAttention's tests use (as probe-flash-attention-4 does): a backend's relative and largest element
error at most ERROR_FACTOR x PyTorch's own bf16 attention's at the same case and inputs. That yardstick
is flash SDPA where SDPA can take the variant; for varlen and paged KV, which SDPA takes only after
splitting the sequences or gathering the pages, it is the reference math per sequence rounded to bf16
where a flash kernel rounds (P before P @ V, and the output), with an FP32 softmax. Every case also tries
both backends with FP8 (e4m3) q, k, v and records what they say (the e4m3 table gate: PyTorch has no
FP8 attention to derive one from). The supported, correct backends are timed with ctx.bench; the
headline is FA4 in TFLOP/s (4 x attended (query, key) pairs x head dim) against the strongest correct
baseline of the same run (cuDNN where it accepts the variant).

Run through the runner: kernelwiki probe run --probe probe-attention-variants
"""

from __future__ import annotations

from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

GATE = "bf16"
ERROR_FACTOR = 2.0  # a backend's error <= 2 x PyTorch's own bf16 error, as in FlashAttention's tests


def attended_pairs(sq: int, sk: int, causal: bool) -> int:
    """(query, key) pairs a causal mask aligned to the bottom right keeps (query i sees keys
    0 .. sk - sq + i), or all sq x sk."""
    if not causal:
        return sq * sk
    return sum(max(0, min(sk, sk - sq + i + 1)) for i in range(sq))


def sequences(params: dict) -> list[tuple[int, int]]:
    """(sq, sk) of each sequence of the case."""
    if "seqlens" in params:
        return [(s, s) for s in (int(v) for v in str(params["seqlens"]).split(","))]
    return [(int(params["sq"]), int(params["sk"]))] * int(params["batch"])


def flops(params: dict) -> int:
    h, d = int(params["heads"]), int(params["head_dim"])
    return 4 * h * d * sum(attended_pairs(sq, sk, bool(params["causal"])) for sq, sk in sequences(params))


def _unsupported(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"unsupported: {type(err).__name__}: {text[:300]}"


def make_inputs(params: dict, ctx: Context, index: int, dtype=None) -> dict:
    """Per-sequence q (sq, h, d), k, v (sk, h_kv, d) in bf16 (or `dtype`), normal."""
    import torch

    h, hkv, d = int(params["heads"]), int(params["kv_heads"]), int(params["head_dim"])
    g = ctx.generator(salt=1 + 7 * index)
    seqs = sequences(params)
    qs = [torch.randn(sq, h, d, generator=g, device="cuda") for sq, _ in seqs]
    ks = [torch.randn(sk, hkv, d, generator=g, device="cuda") for _, sk in seqs]
    vs = [torch.randn(sk, hkv, d, generator=g, device="cuda") for _, sk in seqs]
    cast = (lambda t: t.to(dtype)) if dtype else (lambda t: t.bfloat16())
    return prepare({"q": [cast(t) for t in qs], "k": [cast(t) for t in ks], "v": [cast(t) for t in vs]})


def prepare(s: dict) -> dict:
    """Every backend's input form, built before any timing (no host work inside a captured graph):
    stacked (batch, seq, heads, dim) when the lengths agree, else concatenated with cu_seqlens,
    and the jagged nested tensors cuDNN's varlen path takes."""
    import torch

    lens = [q.shape[0] for q in s["q"]]
    if len(set(lens)) == 1 and len({k.shape[0] for k in s["k"]}) == 1:
        s.update({f"{name}b": torch.stack(s[name]) for name in ("q", "k", "v")})
    else:
        s.update({f"{name}cat": torch.cat(s[name]) for name in ("q", "k", "v")})
        s["cu"] = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        s["max"] = max(lens)
        try:
            s.update({f"{name}n": torch.nested.nested_tensor(s[name], layout=torch.jagged).transpose(1, 2)
                      for name in ("q", "k", "v")})
        except (RuntimeError, TypeError) as err:   # a dtype nested tensors do not take (e4m3)
            s["nested_refused"] = _unsupported(err)
    return s


def reference(s: dict, causal: bool, rounded: bool = False) -> list:
    """FP32 attention per sequence: softmax(q k^T / sqrt(d), bottom-right causal) v. `rounded`: the
    same math with bf16 rounding where a bf16 flash kernel rounds - P before P @ V and the output -
    and FP32 scores, softmax and accumulation: the gate's yardstick where SDPA has no kernel for the
    variant (bf16_baseline)."""
    import torch

    out = []
    for q, k, v in zip(s["q"], s["k"], s["v"]):
        sq, h, d = q.shape
        sk, hkv = k.shape[:2]
        qf = q.float().transpose(0, 1)                                     # (h, sq, d)
        kf = k.float().repeat_interleave(h // hkv, dim=1).transpose(0, 1)  # (h, sk, d)
        vf = v.float().repeat_interleave(h // hkv, dim=1).transpose(0, 1)
        scores = (qf @ kf.transpose(1, 2)) * d ** -0.5
        if causal:
            keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(diagonal=sk - sq)
            scores = scores.masked_fill(~keep, float("-inf"))
        p = scores.softmax(dim=-1)
        o = (p.bfloat16().float() @ vf).bfloat16().float() if rounded else p @ vf
        out.append(o.transpose(0, 1))
    return out


def baseline_kind(params: dict) -> str:
    """What computes the case's bf16 yardstick: "flash-sdpa" (PyTorch's own bf16 flash kernel) where
    SDPA takes the variant as it stands, "bf16-math" (reference(rounded=True)) for varlen and paged KV."""
    return "bf16-math" if "seqlens" in params or "page_size" in params else "flash-sdpa"


def bf16_baseline(params: dict, s: dict) -> tuple:
    """(PyTorch's bf16 attention of the case as one flat tensor, what computed it). Flash SDPA runs on
    the batched tensors with the K/V heads repeated (no enable_gqa question) and causal_lower_right for
    a causal sq != sk (flash's own causal is bottom-right there); where it refuses, the rounded
    reference math stands in and the returned name says so."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    def rounded() -> "object":
        return _flat_list(reference(s, bool(params["causal"]), rounded=True))
    if baseline_kind(params) == "bf16-math":
        return rounded(), "bf16-math"
    group = int(params["heads"]) // int(params["kv_heads"])
    q = s["qb"].transpose(1, 2)
    k, v = (s[f"{name}b"].repeat_interleave(group, dim=2).transpose(1, 2) for name in ("k", "v"))
    sq, sk = q.shape[2], k.shape[2]
    causal = bool(params["causal"])
    mask = causal_lower_right(sq, sk) if causal and sq != sk else None
    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                   is_causal=causal and mask is None)
        return out.transpose(1, 2).reshape(-1), "flash-sdpa"
    except RuntimeError as err:   # flash SDPA without a kernel for this shape: the rounded math instead
        print(f"  flash SDPA refused ({str(err).splitlines()[0][:200]}): bf16 math is the yardstick", flush=True)
        return rounded(), "bf16-math (flash SDPA refused)"


# --- the backends: fn(s) -> the output tensor (batched, concatenated or nested), on the current stream
def fa4_call(params: dict):
    """FA4 in the variant's form: batched, varlen (cu_seqlens) or paged (page_table)."""
    from flash_attn.cute.interface import flash_attn_func, flash_attn_varlen_func

    causal = bool(params["causal"])
    if "seqlens" in params:
        def varlen(s):
            return flash_attn_varlen_func(s["qcat"], s["kcat"], s["vcat"], cu_seqlens_q=s["cu"], cu_seqlens_k=s["cu"],
                                          max_seqlen_q=s["max"], max_seqlen_k=s["max"], causal=causal)[0]
        return varlen
    if "page_size" in params:
        def paged(s):
            kc, vc, table, lengths = s["paged"]
            return flash_attn_varlen_func(s["qb"], kc, vc, page_table=table, seqused_k=lengths, causal=causal)[0]
        return paged

    def batched(s):
        return flash_attn_func(s["qb"], s["kb"], s["vb"], causal=causal)[0]
    return batched


def paged_cache(s: dict, page: int, ctx: Context):
    """The K/V of every sequence scattered into pages of a shared pool in a shuffled order, the
    (batch, pages per sequence) int32 page table and each sequence's length (int32, seqused_k)."""
    import torch

    batch, (sk, hkv, d) = len(s["k"]), s["k"][0].shape
    per_seq = -(-sk // page)
    order = torch.randperm(batch * per_seq, generator=ctx.generator(salt=555), device="cuda")
    table = order.view(batch, per_seq).to(torch.int32).contiguous()
    kc = torch.zeros(batch * per_seq, page, hkv, d, dtype=s["k"][0].dtype, device="cuda")
    vc = torch.zeros_like(kc)
    for b in range(batch):
        for p in range(per_seq):
            rows = slice(p * page, min(sk, (p + 1) * page))
            n = rows.stop - rows.start
            kc[table[b, p], :n] = s["k"][b][rows]
            vc[table[b, p], :n] = s["v"][b][rows]
    return kc, vc, table, torch.full((batch,), sk, dtype=torch.int32, device="cuda")


def cudnn_call(params: dict):
    """torch SDPA with only the cuDNN backend: padded batches (GQA through enable_gqa, the
    bottom-right causal mask through causal_lower_right), varlen as a jagged nested tensor; no
    page-table argument exists in SDPA."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    causal = bool(params["causal"])
    gqa = int(params["heads"]) != int(params["kv_heads"])
    if "page_size" in params:
        def refuse(s):
            raise NotImplementedError("torch SDPA takes no page table: a paged KV cache must be gathered first")
        return refuse

    def sdpa(q, k, v, mask=None, is_causal=False):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                                    enable_gqa=gqa)
    if "seqlens" in params:
        def jagged(s):
            if "nested_refused" in s:
                raise TypeError(s["nested_refused"])
            return sdpa(s["qn"], s["kn"], s["vn"], is_causal=causal).transpose(1, 2)
        return jagged

    def batched(s):
        q, k, v = (s[f"{name}b"].transpose(1, 2) for name in ("q", "k", "v"))
        sq, sk = q.shape[2], k.shape[2]
        mask = causal_lower_right(sq, sk) if causal and sq != sk else None
        return sdpa(q, k, v, mask=mask, is_causal=causal and mask is None).transpose(1, 2)
    return batched


BACKENDS = {"fa4": fa4_call, "cudnn": cudnn_call}


def _attempt(fn, s) -> tuple:
    """(outputs, None) or (None, "unsupported: ...")."""
    import torch

    try:
        out = fn(s)
        torch.cuda.synchronize()
        return out, None
    except Exception as err:  # a refusal is the result this probe records
        return None, _unsupported(err)


def _flat(outputs) -> "object":
    """One flat tensor of a backend's output: a (batch, seq, heads, dim) or (total, heads, dim)
    tensor, or a jagged nested tensor, in sequence order."""
    import torch

    if getattr(outputs, "is_nested", False):
        return torch.cat([o.reshape(-1) for o in outputs.unbind(0)])
    return outputs.reshape(-1)


def _flat_list(tensors: list) -> "object":
    """Per-sequence tensors as one flat tensor, in sequence order (the order _flat gives an output)."""
    import torch

    return torch.cat([t.reshape(-1) for t in tensors])


def derived_gate(params: dict, s: dict, ref) -> dict:
    """The case's tolerances (gates.check keywords): ERROR_FACTOR x the bf16 yardstick's relative and
    largest element error against the flat FP32 reference `ref`, and `tolerance_from` naming the
    yardstick (kept in the record beside each verdict)."""
    base, name = bf16_baseline(params, s)
    return {**gates.reference_tolerance(base, ref, k=ERROR_FACTOR), "tolerance_from": name}


def _check(outputs, ref, dtype: str = GATE, gate: dict | None = None) -> dict:
    """gates.check of a backend's output against the flat reference, with the derived gate where given
    (else the dtype's table entry)."""
    if gate is None:
        return gates.check(_flat(outputs), ref, dtype)
    verdict = gates.check(_flat(outputs), ref, dtype, tol=gate["tol"], max_abs_tol=gate["max_abs_tol"])
    return {**verdict, "tolerance_from": gate["tolerance_from"]}


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    p = case["params"]
    causal = bool(p["causal"])
    s = make_inputs(p, ctx, 0)
    if "page_size" in p:
        s["paged"] = paged_cache(s, int(p["page_size"]), ctx)
    ref = _flat_list(reference(s, causal))
    gate = derived_gate(p, s, ref)
    support, parts, runnable = {}, {}, {}
    for name, make in BACKENDS.items():
        fn = make(p)
        out, refused = _attempt(fn, s)
        if refused:
            support[name] = refused
            continue
        parts[name] = _check(out, ref, gate=gate)
        del out
        support[name] = "supported" if parts[name]["passed"] else "accepted, incorrect"
        runnable[name] = fn
    fp8 = make_inputs({**p}, ctx, 0, dtype=torch.float8_e4m3fn)
    if "page_size" in p:
        fp8["paged"] = paged_cache(fp8, int(p["page_size"]), ctx)
    for name, make in BACKENDS.items():
        out, refused = _attempt(make(p), fp8)
        if refused:
            support[f"{name}_fp8_e4m3"] = refused
        else:
            verdict = _check(out, _flat_list(reference(fp8, causal)), "e4m3")
            support[f"{name}_fp8_e4m3"] = (f"accepted, {'correct' if verdict['passed'] else 'incorrect'} at the e4m3 "
                                          f"gate (rel_err {verdict['rel_err']})")
    del fp8, ref
    correctness = gates.combine(parts) if parts else {"passed": False, "reason": "no backend accepted the variant"}
    correctness["support"] = support
    metrics = {"support": support, "flops": flops(p)}
    timed = {name: fn for name, fn in runnable.items() if parts[name]["passed"]}
    if not timed:
        return {"correctness": correctness, "metrics": metrics}

    def inputs(i: int) -> dict:
        if i == 0:
            return s
        extra = make_inputs(p, ctx, i)
        if "page_size" in p:
            extra["paged"] = paged_cache(extra, int(p["page_size"]), ctx)
        return extra
    set_bytes = 2 * sum(t.numel() * t.element_size() for name in ("q", "k", "v") for t in s[name])
    timing = ctx.bench({name: (lambda inp, fn=fn: fn(inp)) for name, fn in timed.items()}, inputs, set_bytes,
                       iters=20, warmup=3)
    tflops = {name: flops(p) / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    metrics.update({f"{name}_tflops": round(v, 2) for name, v in tflops.items()})
    metrics.update({f"{name}_us": round(t["median_ms"] * 1e3, 1) for name, t in timing.items()})
    lead = "fa4" if "fa4" in tflops else "cudnn"
    others = {name: value for name, value in tflops.items() if name != lead}
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            **ctx.headline_against("tflops", tflops[lead], "TFLOP/s", others, peak_key="bf16")}


PAGED = {"batch": 8, "sq": 1, "sk": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "causal": False,
         "page_size": 128}
"""The paged-decode-gqa4-d128 case's shape (tests/ hold it equal to probe.yaml's), the control's shape."""

STALE_KEYS = 1
"""The control's bug: seqused_k this many keys short for every sequence - the cache length read before
the decode step's new K/V was counted, so each query misses its newest key. A NumPy model of this
shape (tests/test_attention_variants_gate.py) puts its relative error at about 3x the derived gate;
the earlier control (one page of sequence 0 pointing at sequence 1's) lands near 18x it."""


def control_stale_length(ctx: Context) -> dict:
    """FA4 paged decode with seqused_k STALE_KEYS short, gated like paged-decode-gqa4-d128 (the
    derived gate from the rounded bf16 math at the full length) against the full-length reference."""
    import torch

    s = make_inputs(PAGED, ctx, 99)
    kc, vc, table, lengths = paged_cache(s, PAGED["page_size"], ctx)
    s["paged"] = (kc, vc, table, lengths - STALE_KEYS)
    outputs = fa4_call(PAGED)(s)
    torch.cuda.synchronize()
    ref = _flat_list(reference(s, False))
    return _check(outputs, ref, gate=derived_gate(PAGED, s, ref))


NEGATIVE_CONTROLS = {"stale-cache-length": control_stale_length}


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=NEGATIVE_CONTROLS)
