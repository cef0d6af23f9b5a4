"""probe-sparse-decode-sm90: our sparse MLA decode kernel against an FP32 reference and torch SDPA.

Each case: a cache of 65536 tokens per sequence (normal latent rows quantized to the V3.2 FP8 format),
2048 distinct random indices per sequence, normal bf16 queries. Correctness: O and lse (outputs poisoned
first) against reference.sparse_decode in FP32; the O gate is twice the relative Frobenius error and
twice the largest element error of reference.sparse_decode_bf16 (the same attention with bf16 operands),
lse within LSE_TOL (gates.check, gates.check_lse). Timing: our kernel(s) and the torch baseline by
ctx.bench, each input set new queries and new indices into the same cache (set_bytes = the bytes a
decode must move, so the sets span 3x L2 where the kernel is short). Compile-only mode compiles the one-pass kernel, the
split kernel and the combine kernel for sm_90a with fake tensors and scans PTX and SASS.

Run through the runner: kernelwiki probe run --probe probe-sparse-decode-sm90 [--compile-only]
"""

from __future__ import annotations


from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.sparse_decode import cache_format
from artifacts.kernels.sparse_decode import sparse_decode_sm90  # our kernel, importable without a GPU

GATE_FACTOR = 2.0   # allowed multiple of the bf16 computation's own error
LSE_TOL = 1e-3      # natural-log units; fp32 statistics of a correct kernel differ by ~1e-6


def flops(batch: int, heads: int, topk: int) -> int:
    """2 x (576 + 512) FLOP per head per selected token: Q.K^T over 576 dims, P.V over 512."""
    return 2 * (cache_format.D_QK + cache_format.D_V) * heads * topk * batch


def bytes_moved(batch: int, heads: int, topk: int) -> int:
    """What any implementation must move: the selected cache rows (with scales and RoPE), the indices,
    Q in bf16, O in bf16 and lse in fp32."""
    return batch * (topk * (cache_format.ROW_BYTES + 4) + heads * (2 * cache_format.D_QK + 2 * cache_format.D_V + 4))


def _problem(params: dict, seed: int):
    import torch

    from artifacts.kernels.sparse_decode import reference

    g = torch.Generator(device="cuda").manual_seed(seed)
    return reference.random_problem(params["batch"], params["heads"], params["topk"], params["cache_tokens_per_seq"], g)


def _check(q, cache, indices, ref_o, ref_lse, gate: dict) -> tuple[dict, object]:
    """Run our kernel once on poisoned outputs; the record's correctness mapping (O against the FP32
    reference with the derived tolerance `gate`, lse within LSE_TOL) and the op."""
    import torch

    op = sparse_decode_sm90.SparseDecode(q, cache, indices)
    gates.poison(op.out)
    gates.poison(op.lse)
    op.run()
    torch.cuda.synchronize()
    o = gates.check(op.out, ref_o, "bf16", tol=gate["tol"], max_abs_tol=gate["max_abs_tol"])
    o.update(reference_bf16_rel_err=gate["reference_bf16_rel_err"],
             gate=f"{GATE_FACTOR} x the bf16 reference's own error")
    correctness = gates.combine({"o": o, "lse": gates.check_lse(op.lse, ref_lse, LSE_TOL)})
    correctness["splits"] = op.splits
    return correctness, op


def _tolerance(q, cache, indices, ref_o) -> dict:
    """The tolerance: GATE_FACTOR times what the bf16 computation of the same attention is off by
    (gates.reference_tolerance)."""
    from artifacts.kernels.sparse_decode import reference

    bf16 = reference.sparse_decode_bf16(q, cache, indices)
    return {**gates.reference_tolerance(bf16, ref_o, k=GATE_FACTOR),
            "reference_bf16_rel_err": gates.relative_error(bf16, ref_o)}


def _fresh_set(q, cache, indices, tokens_per_seq: int, generator) -> dict:
    """Another input set on the same cache: new queries, new distinct indices per sequence (other
    rows, so the L2 holds none of them), and our op on them."""
    import torch

    batch, topk = indices.shape
    q = torch.randn(q.shape, generator=generator, device="cuda").bfloat16()
    local = torch.rand(batch, tokens_per_seq, generator=generator, device="cuda").argsort(dim=-1)[:, :topk]
    offsets = torch.arange(batch, device="cuda").unsqueeze(1) * tokens_per_seq
    indices = (local + offsets).int()
    return {"q": q, "indices": indices, "op": sparse_decode_sm90.SparseDecode(q, cache, indices)}


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    from artifacts.kernels.sparse_decode import reference

    params = case["params"]
    batch, heads, topk = params["batch"], params["heads"], params["topk"]
    q, cache, indices = _problem(params, ctx.seed)
    ref_o, ref_lse = reference.sparse_decode(q, cache, indices)
    correctness, op = _check(q, cache, indices, ref_o, ref_lse, _tolerance(q, cache, indices, ref_o))
    del ref_o, ref_lse
    torch.cuda.empty_cache()
    checked = {"q": q, "indices": indices, "op": op}
    timing = ctx.bench(
        {"ours": lambda s: s["op"].run(), "torch": lambda s: reference.sdpa_baseline(s["q"], cache, s["indices"])},
        lambda i: checked if i == 0 else _fresh_set(q, cache, indices, params["cache_tokens_per_seq"],
                                                    ctx.generator(1000 * i)),
        bytes_moved(batch, heads, topk), iters=20, warmup=3)
    tflops = {name: flops(batch, heads, topk) / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    tbps = bytes_moved(batch, heads, topk) / (timing["ours"]["median_ms"] * 1e-3) / 1e12
    copy = ctx.ceilings.get("copy")
    metrics = {"splits": op.splits, "bytes_moved": bytes_moved(batch, heads, topk), "achieved_tbps": round(tbps, 4),
               "hbm_fraction": round(tbps / float(copy), 4) if copy else None, "copy_ceiling_tbps": copy}
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "baselines": [{"name": "torch", "value": round(tflops["torch"], 2)}],
            "headline": ctx.headline("tflops", tflops["ours"], "TFLOP/s", peak_key="bf16", ceiling_key="bf16",
                                     baseline=("torch", tflops["torch"]))}


def negative_control(ctx: Context) -> dict:
    """Indices shifted by one row: a kernel that reads the rows it is told to read must now be wrong."""
    from artifacts.kernels.sparse_decode import reference

    params = {"batch": 16, "heads": 64, "topk": 2048, "cache_tokens_per_seq": 65536}
    q, cache, indices = _problem(params, ctx.seed + 1)
    ref_o, ref_lse = reference.sparse_decode(q, cache, indices)
    gate = _tolerance(q, cache, indices, ref_o)
    return _check(q, cache, (indices + 1).clamp(max=cache.shape[0] - 1).int(), ref_o, ref_lse, gate)[0]


def compile_kernel(arch: str) -> compile_mod.Emitted:
    emitted = compile_mod.from_cute(sparse_decode_sm90.compile_for(arch, split=False), arch)
    for extra in (compile_mod.from_cute(sparse_decode_sm90.compile_for(arch, split=True), arch),
                  compile_mod.from_cute(sparse_decode_sm90.compile_combine_for(arch), arch)):
        emitted.extend(extra)
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
