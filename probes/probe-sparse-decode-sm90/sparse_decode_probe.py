"""probe-sparse-decode-sm90: our sparse MLA decode kernel against an FP32 reference, FlashMLA and torch SDPA.

Each case: a cache of 65536 tokens per sequence (normal latent rows quantized to the V3.2 FP8 format),
TOPK (2048, or 64: the smallest FlashMLA accepts) distinct random indices per sequence, normal bf16
queries. Correctness: O and lse (outputs poisoned first) against reference.sparse_decode in FP32; the O
gates derive from reference.sparse_decode_fp16 (the same attention with our kernel's fp16 operands):
twice its error against the FP32 reference, and 1.5x its error against the bf16-rounded reference (which
a bf16 P.V, about three times as far, fails: the `bf16-pv` control checks that in every run); lse within
LSE_TOL (gates.check, gates.check_lse). FlashMLA (flashmla_baseline.py) is checked against the same
reference with a bf16 kernel's gate (twice reference.sparse_decode_bf16's error); where FlashMLA does not
dispatch the head count it is run once in a child process and recorded as a failed baseline with how it
ended (metrics.flashmla_failed), and torch (gather + dequantize + SDPA, the same bf16 gate) is timed in
its place - only there. Timing: every candidate by ctx.bench,
each input set new queries and new indices into the same cache (set_bytes = the bytes a decode must
move, so the sets span 3x L2 where the kernel is short); the headline is against the fastest correct of
FlashMLA and torch (ctx.headline_against). Compile-only mode compiles the main kernel and the combine
kernel for sm_90a with fake tensors and scans PTX and SASS.

Run through the runner: kernelwiki probe run --probe probe-sparse-decode-sm90 [--compile-only]
"""

from __future__ import annotations


from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

import flashmla_baseline as flashmla  # next to this script, whose folder Python puts first on sys.path
from artifacts.kernels.sparse_decode import cache_format
from artifacts.kernels.sparse_decode import sparse_decode_sm90  # our kernel, importable without a GPU

GATE_FACTOR = 2.0        # "o": allowed multiple of the fp16 computation's error against the FP32 reference
ROUNDED_FACTOR = 1.5     # "o_rounded": allowed multiple of its error against the bf16-rounded FP32 reference
LSE_TOL = 1e-3           # natural-log units; fp32 statistics of a correct kernel differ by ~1e-6
BF16_GATE_FACTOR = 2.0   # a bf16 kernel (FlashMLA) against the bf16 computation's own error


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


def _gate_o(o, ref_o, gate: dict) -> dict:
    """O against the FP32 reference (`o`, GATE_FACTOR x the fp16 computation's error) and against the
    bf16-rounded reference (`o_rounded`, ROUNDED_FACTOR x its error there, largest element by the bf16
    table): the second is what tells an fp16 P.V from a bf16 one (the output rounding to bf16, common
    to both, dominates the first)."""
    import torch

    return {"o": {**gates.check(o, ref_o, "bf16", tol=gate["tol"], max_abs_tol=gate["max_abs_tol"]),
                  "gate": f"{GATE_FACTOR} x the fp16 computation's own error"},
            "o_rounded": {**gates.check(o, ref_o.to(torch.bfloat16), "bf16", tol=gate["rounded_tol"]),
                          "gate": f"{ROUNDED_FACTOR} x the fp16 computation's error against the bf16-rounded reference"}}


def _check(q, cache, indices, ref_o, ref_lse, gate: dict) -> tuple[dict, object]:
    """Run our kernel once on poisoned outputs; the record's correctness mapping (O by `_gate_o`, lse
    within LSE_TOL) and the op."""
    import torch

    op = sparse_decode_sm90.SparseDecode(q, cache, indices)
    gates.poison(op.out)
    gates.poison(op.lse)
    op.run()
    torch.cuda.synchronize()
    correctness = gates.combine({**_gate_o(op.out, ref_o, gate), "lse": gates.check_lse(op.lse, ref_lse, LSE_TOL)})
    correctness.update(splits=op.splits, reference_fp16_rel_err=gate["reference_fp16_rel_err"])
    return correctness, op


def _tolerance(q, cache, indices, ref_o) -> dict:
    """The tolerances of `_gate_o`, from reference.sparse_decode_fp16 (the same attention with our
    kernel's fp16 operands)."""
    import torch

    from artifacts.kernels.sparse_decode import reference

    fp16 = reference.sparse_decode_fp16(q, cache, indices)
    rounded = ref_o.to(torch.bfloat16)
    return {**gates.reference_tolerance(fp16, ref_o, k=GATE_FACTOR),
            "rounded_tol": ROUNDED_FACTOR * gates.relative_error(fp16, rounded),
            "reference_fp16_rel_err": gates.relative_error(fp16, ref_o)}


def _bf16_gate(q, cache, indices, ref_o) -> dict:
    """A bf16 kernel's gate (FlashMLA's, torch's): BF16_GATE_FACTOR x the bf16 computation's error."""
    from artifacts.kernels.sparse_decode import reference

    return gates.reference_tolerance(reference.sparse_decode_bf16(q, cache, indices), ref_o, k=BF16_GATE_FACTOR)


def flashmla_skip_reason(heads: int, topk: int, rows: int) -> str | None:
    """Why FlashMLA is not timed in this process (not importable, or a problem it does not dispatch), or None."""
    return flashmla.unavailable() or flashmla.unsupported(heads, topk, rows)


_FAILURES: dict[tuple[int, int], str] = {}


def flashmla_failure(heads: int, topk: int, rows: int) -> str | None:
    """For a problem FlashMLA does not dispatch (and only where it is importable): how a call ends, from
    a child process (it kills the process on 16 heads), recorded as the failed baseline's reason. The
    child runs batch 1 once per (heads, topk) in a probe run, and the reason names the shape it ran."""
    if flashmla.unavailable() or flashmla.unsupported(heads, topk, rows) is None:
        return None
    if (heads, topk) not in _FAILURES:
        _FAILURES[(heads, topk)] = flashmla.crash_reason(1, heads, topk)
    return _FAILURES[(heads, topk)]


def _flashmla(q, cache, indices):
    """FlashMLA bound to one input set, called once (its first call builds the scheduler metadata,
    which must not happen inside a graph capture)."""
    run = flashmla.decoder(q, cache, indices)
    run()
    return run


def _fresh_set(q, cache, indices, tokens_per_seq: int, generator, with_flashmla: bool) -> dict:
    """Another input set on the same cache: new queries, new distinct indices per sequence (other
    rows, so the L2 holds none of them), and our op (and FlashMLA) on them."""
    import torch

    batch, topk = indices.shape
    q = torch.randn(q.shape, generator=generator, device="cuda").bfloat16()
    local = torch.rand(batch, tokens_per_seq, generator=generator, device="cuda").argsort(dim=-1)[:, :topk]
    offsets = torch.arange(batch, device="cuda").unsqueeze(1) * tokens_per_seq
    indices = (local + offsets).int()
    out = {"q": q, "indices": indices, "op": sparse_decode_sm90.SparseDecode(q, cache, indices)}
    if with_flashmla:
        out["flashmla"] = _flashmla(q, cache, indices)
    return out


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    from artifacts.kernels.sparse_decode import reference

    params = case["params"]
    batch, heads, topk = params["batch"], params["heads"], params["topk"]
    q, cache, indices = _problem(params, ctx.seed)
    ref_o, ref_lse = reference.sparse_decode(q, cache, indices)
    correctness, op = _check(q, cache, indices, ref_o, ref_lse, _tolerance(q, cache, indices, ref_o))
    bf16_gate = _bf16_gate(q, cache, indices, ref_o)
    checked = {"q": q, "indices": indices, "op": op}
    skipped = flashmla_skip_reason(heads, topk, cache.shape[0])
    failed = flashmla_failure(heads, topk, cache.shape[0])
    correct = {}
    candidates = {"ours": lambda s: s["op"].run()}
    if failed:
        correct[flashmla.NAME] = False
    if skipped is not None:   # torch only where FlashMLA is not timed
        torch_o = reference.sdpa_baseline(q, cache, indices)
        correct["torch"] = gates.check(torch_o, ref_o, "bf16", **bf16_gate)["passed"]
        del torch_o
        candidates["torch"] = lambda s: reference.sdpa_baseline(s["q"], cache, s["indices"])
    if skipped is None:
        checked["flashmla"] = _flashmla(q, cache, indices)
        out, lse = checked["flashmla"]()
        torch.cuda.synchronize()
        flash = gates.combine({"o": gates.check(out, ref_o, "bf16", **bf16_gate),
                               "lse": gates.check_lse(lse, ref_lse, LSE_TOL)})
        correctness["flashmla"] = {k: flash[k] for k in ("passed", "rel_err", "max_abs_err", "tolerance")}
        correctness["flashmla"]["lse_max_abs_err"] = flash["parts"]["lse"]["max_abs_err"]
        correct[flashmla.NAME] = flash["passed"]
        candidates[flashmla.NAME] = lambda s: s["flashmla"]()
    del ref_o, ref_lse
    torch.cuda.empty_cache()
    timing = ctx.bench(
        candidates,
        lambda i: checked if i == 0 else _fresh_set(q, cache, indices, params["cache_tokens_per_seq"],
                                                    ctx.generator(1000 * i), skipped is None),
        bytes_moved(batch, heads, topk), iters=20, warmup=3)
    tflops = {name: flops(batch, heads, topk) / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    tbps = bytes_moved(batch, heads, topk) / (timing["ours"]["median_ms"] * 1e-3) / 1e12
    copy = ctx.ceilings.get("copy")
    metrics = {"splits": op.splits, "parts": len(op.schedule.parts),
               "bytes_moved": bytes_moved(batch, heads, topk), "achieved_tbps": round(tbps, 4),
               "hbm_fraction": round(tbps / float(copy), 4) if copy else None, "copy_ceiling_tbps": copy,
               "flashmla_revision": flashmla.REVISION,
               **({"flashmla_failed": failed} if failed else {"flashmla_skipped": skipped} if skipped else {})}
    flash_note = {"revision": flashmla.REVISION,
                  **({"failed": failed} if failed else {"skipped": skipped} if skipped else {})}
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            **ctx.headline_against("tflops", tflops["ours"], "TFLOP/s",
                                   {flashmla.NAME: tflops.get(flashmla.NAME),
                                    **({"torch": tflops["torch"]} if "torch" in tflops else {})},
                                   correct=correct, peak_key="bf16", ceiling_key="bf16",
                                   notes={flashmla.NAME: flash_note})}


def _one_row_control(ctx: Context, params: dict, sequences: int, tokens: int = 1) -> dict:
    """The kernel reading the neighbouring cache row (index + 1) for the first `tokens` selected tokens
    of the first `sequences` sequences (an off-by-one in the row offset of part of one tile): O off by
    a few times the gate."""
    from artifacts.kernels.sparse_decode import reference

    q, cache, indices = _problem(params, ctx.seed + 1)
    ref_o, ref_lse = reference.sparse_decode(q, cache, indices)
    gate = _tolerance(q, cache, indices, ref_o)
    wrong = indices.clone()
    wrong[:sequences, :tokens] += 1
    result = _check(q, cache, wrong, ref_o, ref_lse, gate)[0]
    result["bug"] = f"index + 1 for the first {tokens} token(s) of {sequences} of {params['batch']} sequences"
    return result


def control_split_path(ctx: Context) -> dict:
    """Batch 16 x 64 heads (each sequence cut over parts, then the combine kernel): one sequence's
    first token read from the next row."""
    return _one_row_control(ctx, {"batch": 16, "heads": 64, "topk": 2048, "cache_tokens_per_seq": 16384}, 1)


def control_one_pass(ctx: Context) -> dict:
    """Batch 128 x 64 heads (every sequence inside one part: no split): four sequences' first six
    tokens read from the next row. One token moved O's relative error to only 1.15x its gate (record
    20261202T094344Z); the error of k wrong rows grows about as sqrt(k), so six put it near 2.6x."""
    return _one_row_control(ctx, {"batch": 128, "heads": 64, "topk": 2048, "cache_tokens_per_seq": 16384}, 4,
                            tokens=6)


def control_bf16_pv(ctx: Context) -> dict:
    """The fp16 claim: the same attention computed with bf16 operands and P in bf16
    (reference.sparse_decode_bf16, what a bf16 kernel returns) must fail our gate, or the gate cannot
    tell our fp16 kernel from a bf16 one."""
    import torch

    from artifacts.kernels.sparse_decode import reference

    q, cache, indices = _problem({"batch": 16, "heads": 64, "topk": 2048, "cache_tokens_per_seq": 16384}, ctx.seed + 2)
    ref_o, ref_lse = reference.sparse_decode(q, cache, indices)
    gate = _tolerance(q, cache, indices, ref_o)
    bf16 = reference.sparse_decode_bf16(q, cache, indices)
    torch.cuda.synchronize()
    result = gates.combine(_gate_o(bf16, ref_o, gate))
    result["reference_fp16_rel_err"] = gate["reference_fp16_rel_err"]
    return result


NEGATIVE_CONTROLS = {"split-path-one-row": control_split_path, "one-pass-one-row": control_one_pass,
                     "bf16-pv": control_bf16_pv}


def compile_kernel(arch: str) -> compile_mod.Emitted:
    """The main kernel and the combine."""
    emitted = compile_mod.from_cute(sparse_decode_sm90.compile_for(arch, heads=128), arch)
    emitted.extend(compile_mod.from_cute(sparse_decode_sm90.compile_combine_for(arch), arch))
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=NEGATIVE_CONTROLS, compile=compile_kernel)
