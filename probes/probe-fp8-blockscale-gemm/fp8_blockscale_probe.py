"""probe-fp8-blockscale-gemm: our DeepGEMM-style block-scaled FP8 GEMM against cuBLAS.

Each case quantizes normal inputs (A per token per 128 K, B per 128 x 128 block; quantize.py),
checks our D (output poisoned first) against the FP32 product of the dequantized operands with the
bf16 gate, records cuBLAS blockwise FP8's error against the same reference beside ours, then times
ours and the baselines interleaved in a new order each iteration (same iteration count, L2 flushed before
every launch; at power-limited clocks no candidate always follows the hungriest one):
  normal      cuBLAS blockwise FP8 (torch._scaled_mm with 1x128 / 128x128 scales; headline),
              cuBLAS per-tensor FP8 and cuBLAS bf16 on the same (unquantized) values;
  contiguous  our normal layout on the same rows and FLOPs (headline: the grouped layout's cost),
              and cuBLAS blockwise once per group;
  masked      cuBLAS blockwise once per group (headline). Correct with full counts, then replayed
              from a CUDA graph after the device-side counts change to empty / partial groups: rows
              below each count must match, tiles wholly past it must stay unwritten.
A naive case times the one-stage teaching variant (variants/naive.py) beside both. Compile-only
mode compiles the three layouts and the teaching variant for sm_90a with fake tensors and scans
PTX and SASS.

Run through the runner: kernelwiki probe run --probe probe-fp8-blockscale-gemm [--compile-only]
"""

from __future__ import annotations

import re
import sys

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import REPO_ROOT, Context, Probe

sys.path.insert(0, str(REPO_ROOT / "artifacts" / "kernels" / "fp8-blockscale-gemm"))
sys.path.insert(0, str(REPO_ROOT / "artifacts" / "kernels" / "fp8-blockscale-gemm" / "variants"))
import fp8_blockscale_gemm as kernel  # noqa: E402  (importable without a GPU)
import naive  # noqa: E402
import quantize  # noqa: E402

GATE = "bf16"   # the reference holds the quantized operands exactly: only accumulation and bf16 rounding remain


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("x"))


def _tflops(flops: float, timing: dict) -> dict:
    return {name: flops / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}


def _cublas_blockwise(a, sfa, b, sfb):
    """cuBLAS blockwise FP8 through torch._scaled_mm: scale_a (M, K/128) with stride (1, M),
    scale_b the transpose of B's (N/128, K/128) block grid. A callable, or the reason it is refused."""
    import torch

    sfa = sfa.t().contiguous().t()   # stride (1, M) exactly
    call = lambda: torch._scaled_mm(a, b.t(), scale_a=sfa, scale_b=sfb.t(), out_dtype=torch.bfloat16)  # noqa: E731
    try:
        return call, call()
    except RuntimeError as err:
        return str(err).splitlines()[0][:200], None


def _normal(params: dict, ctx: Context) -> dict:
    import torch

    m, n, k = _shape(params["shape"])
    g = ctx.generator()
    x, w = torch.randn(m, k, generator=g, device="cuda"), torch.randn(n, k, generator=g, device="cuda")
    a, sfa = quantize.per_token_cast(x)
    b, sfb = quantize.per_block_cast(w)
    reference = quantize.reference(a, sfa, b, sfb)
    chosen = _tiling("normal", m, n)
    # a tiling case overrides the kernel's choice and times the choice beside it
    tiling = {"tile_n": params.get("tile_n", chosen["tile_n"]),
              "cluster_mn": tuple(int(c) for c in params["cluster"].split("x")) if "cluster" in params
              else chosen["cluster_mn"]}
    run, d = kernel.compile_gemm(a, sfa, b, sfb, **tiling)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    correctness = gates.check(d.float(), reference, GATE)
    same = torch.equal(kernel.gemm(a, sfa, b, sfb), d)   # the one-call API reuses the kernel: same bits
    correctness.update(gemm_api_matches=same, passed=correctness["passed"] and same)

    candidates = {"ours": run}
    if tiling != chosen:
        candidates["ours, chosen tiling"] = kernel.compile_gemm(a, sfa, b, sfb, **chosen)[0]
    if params.get("ablation"):   # the same kernel without the warpgroups' turn-taking, checked too
        run_free, d_free = kernel.compile_gemm(a, sfa, b, sfb, **tiling, order_warpgroups=False)
        run_free()
        correctness["without_turns"] = gates.check(d_free.float(), reference, GATE)
        correctness["passed"] = correctness["passed"] and correctness["without_turns"]["passed"]
        candidates["ours without warpgroup turns"] = run_free
    cublas, cublas_out = _cublas_blockwise(a, sfa, b, sfb)
    if cublas_out is not None:
        candidates["cuBLAS blockwise FP8"] = cublas
        correctness["cublas_blockwise_rel_err"] = gates.check(cublas_out.float(), reference, GATE)["rel_err"]
        correctness["elements_differing_from_cublas_blockwise"] = int((cublas_out != d).sum())
    else:
        correctness["cublas_blockwise_refused"] = cublas
    del reference, cublas_out
    scale_x, scale_w = (t.abs().amax() / quantize.E4M3_MAX for t in (x, w))
    a_t, b_t = (x / scale_x).to(torch.float8_e4m3fn), (w / scale_w).to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    x16, w16 = x.bfloat16(), w.bfloat16()
    del x, w
    candidates["cuBLAS per-tensor FP8"] = lambda: torch._scaled_mm(a_t, b_t.t(), scale_a=scale_x * one,
                                                                   scale_b=scale_w * one, out_dtype=torch.bfloat16)
    candidates["cuBLAS bf16"] = lambda: x16 @ w16.t()
    timing = ctx.timer(warmup=5, iters=30, order="shuffled").compare(candidates)
    tflops = _tflops(2 * m * n * k, timing)
    baseline = "cuBLAS blockwise FP8" if "cuBLAS blockwise FP8" in tflops else "cuBLAS per-tensor FP8"
    return _result(ctx, correctness, timing, tflops, baseline, tiling)


def _naive(params: dict, ctx: Context) -> dict:
    """The one-stage teaching variant, beside the production kernel and cuBLAS blockwise."""
    import torch

    m, n, k = _shape(params["shape"])
    g = ctx.generator()
    a, sfa = quantize.per_token_cast(torch.randn(m, k, generator=g, device="cuda"))
    b, sfb = quantize.per_block_cast(torch.randn(n, k, generator=g, device="cuda"))
    reference = quantize.reference(a, sfa, b, sfb)
    run, d = naive.compile_gemm(a, sfa, b, sfb)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    correctness = gates.check(d.float(), reference, GATE)
    del reference
    tiling = _tiling("normal", m, n)
    candidates = {"ours": run, "ours, production kernel": kernel.compile_gemm(a, sfa, b, sfb, **tiling)[0]}
    cublas, _ = _cublas_blockwise(a, sfa, b, sfb)
    if callable(cublas):
        candidates["cuBLAS blockwise FP8"] = cublas
    timing = ctx.timer(warmup=5, iters=30, order="shuffled").compare(candidates)
    tflops = _tflops(2 * m * n * k, timing)
    baseline = "cuBLAS blockwise FP8" if "cuBLAS blockwise FP8" in tflops else "ours, production kernel"
    return _result(ctx, correctness, timing, tflops, baseline, {"tile_m": naive.TILE_M, "tile_n": naive.TILE_N,
                                                               "cluster_mn": (1, 1)})


def _contiguous(params: dict, ctx: Context) -> dict:
    import torch

    n, k = _shape(params["nk"])
    sizes = [int(s) for s in str(params["group_rows"]).split(",")]   # rows per group; negative: padding rows
    groups = sum(1 for s in sizes if s >= 0)
    indices, group = [], 0
    for rows in sizes:
        if rows < 0:
            indices += [-1] * -rows
        else:
            indices += [group] * rows
            group += 1
    m = len(indices)
    m_indices = torch.tensor(indices, dtype=torch.int32, device="cuda")
    g = ctx.generator()
    x = torch.randn(m, k, generator=g, device="cuda")
    w = torch.randn(groups, n, k, generator=g, device="cuda")
    a, sfa = quantize.per_token_cast(x)
    b, sfb = quantize.per_block_cast(w)
    reference = quantize.reference(a, sfa, b, sfb, "contiguous", m_indices)
    tiling = _tiling("contiguous", m, n)
    run, d = kernel.compile_gemm(a, sfa, b, sfb, "contiguous", m_indices, **tiling)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    valid = m_indices >= 0
    correctness = gates.check(d[valid].float(), reference[valid], GATE)
    untouched = bool(torch.isnan(d[~valid].float()).all())    # padding rows: skipped, never written
    correctness.update(padding_rows=int((~valid).sum()), padding_untouched=untouched,
                       passed=correctness["passed"] and untouched)
    del reference

    # the normal layout on the same rows (B = group 0): the grouped layout's own cost at equal FLOPs
    run_normal, _ = kernel.compile_gemm(a, sfa, b[0], sfb[0], tile_n=tiling["tile_n"])
    per_group = []
    for grp in range(groups):
        rows = (m_indices == grp).nonzero().flatten()
        if rows.numel():
            call, _ = _cublas_blockwise(a[rows], sfa[rows], b[grp], sfb[grp])
            per_group.append(call)
    candidates = {"ours": run, "ours, normal layout": run_normal}
    if all(callable(c) for c in per_group):
        candidates["cuBLAS blockwise FP8, per group"] = lambda: [c() for c in per_group]
    else:
        correctness["cublas_blockwise_refused"] = next(c for c in per_group if not callable(c))
    timing = ctx.timer(warmup=5, iters=30, order="shuffled").compare(candidates)
    tflops = _tflops(2 * int(valid.sum()) * n * k, timing)
    tflops["ours, normal layout"] = 2 * m * n * k / (timing["ours, normal layout"]["median_ms"] * 1e-3) / 1e12
    return _result(ctx, correctness, timing, tflops, "ours, normal layout", tiling)


def _mixed_counts(groups: int, m_max: int) -> list[int]:
    """Empty, full, partial and single-row groups (for one group: a partial one)."""
    if groups == 1:
        return [m_max // 2 + 1]
    return ([0, m_max, m_max // 2 + 1, 1] * groups)[:groups] if groups > 2 else [0, m_max // 2 + 1]


def _masked_check(d, reference, counts: list[int]) -> dict:
    """Rows below each group's count against the reference; tiles wholly past it must be unwritten."""
    import torch

    rows = [d[g, :c] for g, c in enumerate(counts)]
    refs = [reference[g, :c] for g, c in enumerate(counts)]
    if sum(counts):
        result = gates.check(torch.cat(rows).float(), torch.cat(refs), GATE)
    else:
        result = {"passed": True, "rel_err": 0.0, "tolerance": gates.tolerance(GATE)}
    skipped = [d[g, -(-c // kernel.TILE_M) * kernel.TILE_M:] for g, c in enumerate(counts)]
    untouched = all(bool(torch.isnan(s.float()).all()) for s in skipped)
    result.update(counts=counts, skipped_tiles_untouched=untouched, passed=result["passed"] and untouched)
    return result


def _masked(params: dict, ctx: Context) -> dict:
    import torch

    groups, m_max = (int(v) for v in params["groups_x_m"].split("x"))
    n, k = _shape(params["nk"])
    g = ctx.generator()
    x = torch.randn(groups, m_max, k, generator=g, device="cuda")
    w = torch.randn(groups, n, k, generator=g, device="cuda")
    a, sfa = quantize.per_token_cast(x)
    b, sfb = quantize.per_block_cast(w)
    reference = quantize.reference(a, sfa, b, sfb, "masked")
    masked_m = torch.full((groups,), m_max, dtype=torch.int32, device="cuda")
    tiling = _tiling("masked", groups * m_max, n)
    run, d = kernel.compile_gemm(a, sfa, b, sfb, "masked", masked_m, **tiling)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    full = _masked_check(d, reference, [m_max] * groups)
    # the same launch from a CUDA graph; only the device-side counts change between replays
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    counts = _mixed_counts(groups, m_max)
    masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
    gates.poison(d)
    graph.replay()
    torch.cuda.synchronize()
    mixed = _masked_check(d, reference, counts)
    masked_m.fill_(m_max)
    correctness = {**full, "passed": full["passed"] and mixed["passed"], "graph_replay_mixed_counts": mixed}
    del reference

    per_group = [_cublas_blockwise(a[grp], sfa[grp], b[grp], sfb[grp])[0] for grp in range(groups)]
    candidates = {"ours": run}
    if all(callable(c) for c in per_group):
        candidates["cuBLAS blockwise FP8, per group"] = lambda: [c() for c in per_group]
    else:
        correctness["cublas_blockwise_refused"] = next(c for c in per_group if not callable(c))
    timing = ctx.timer(warmup=5, iters=30, order="shuffled").compare(candidates)
    tflops = _tflops(2 * groups * m_max * n * k, timing)
    baseline = "cuBLAS blockwise FP8, per group"
    return _result(ctx, correctness, timing, tflops, baseline if baseline in tflops else None, tiling)


def _tiling(layout: str, rows: int, n: int) -> dict:
    """The kernel's own choice of tile N and cluster for this GPU, passed explicitly so the record names it."""
    import torch

    tile_n, cluster_mn = kernel.choose_tiling(layout, rows, n, torch.cuda.get_device_properties(0).multi_processor_count)
    return {"tile_n": tile_n, "cluster_mn": cluster_mn}


def _result(ctx: Context, correctness: dict, timing: dict, tflops: dict, baseline: str | None, tiling: dict) -> dict:
    return {"correctness": correctness, "timing": timing,
            "metrics": {"tile": f"{tiling.get('tile_m', 128)}x{tiling['tile_n']}x128",
                        "cluster": "x".join(map(str, tiling["cluster_mn"]))},
            "baselines": [{"name": name, "value": round(v, 2)} for name, v in tflops.items() if name != "ours"],
            "headline": ctx.headline("tflops", tflops["ours"], "TFLOP/s", peak_key="e4m3",
                                     baseline=(baseline, tflops[baseline]) if baseline else None)}


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    if params.get("variant") == "naive":
        return _naive(params, ctx)
    return {"normal": _normal, "contiguous": _contiguous, "masked": _masked}[params["layout"]](params, ctx)


def negative_control(ctx: Context) -> dict:
    """K tile 0 accumulated without its scales (sfa * sfb taken as 1) must fail the gate."""
    import torch

    g = ctx.generator(salt=1)
    x, w = torch.randn(256, 512, generator=g, device="cuda"), torch.randn(256, 512, generator=g, device="cuda")
    a, sfa = quantize.per_token_cast(x)
    b, sfb = quantize.per_block_cast(w)
    run, d = kernel.compile_gemm(a, sfa, b, sfb, unscaled_k_tile=0)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    return gates.check(d.float(), quantize.reference(a, sfa, b, sfb), GATE)


def compile_kernel(arch: str) -> compile_mod.Emitted:
    emitted = compile_mod.from_cute(kernel.compile_for(arch, "normal", cluster_mn=(2, 1)), arch)
    for layout in ("contiguous", "masked"):
        extra = compile_mod.from_cute(kernel.compile_for(arch, layout, groups=4, cluster_mn=(1, 2)), arch)
        emitted.ptx += extra.ptx
        if emitted.sass is not None and extra.sass is not None:
            emitted.sass += extra.sass
    teaching = compile_mod.from_cute(naive.compile_for(arch), arch)
    if teaching.sass is not None and re.search(r"\bQGMMA\b", teaching.sass):
        emitted.facts.append("naive-variant:QGMMA")
    if emitted.sass is not None and not re.search(r"\b(STL|LDL)\b", emitted.sass):
        emitted.facts.append("no-local-memory:all-layouts")
    # ptxas serializes wgmma (a wait after every one) when it cannot prove the accumulators safe
    if emitted.sass is not None and emitted.sass.count("WARPGROUP.DEPBAR") < emitted.sass.count("QGMMA"):
        emitted.facts.append("wgmma-not-serialized:all-layouts")
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
