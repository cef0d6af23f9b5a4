"""probe-fp8-blockscale-gemm: our DeepGEMM-style block-scaled FP8 GEMM against DeepGEMM and cuBLAS.

Each case quantizes normal inputs (A per token per 128 K, B per 128 x 128 block; quantize.py),
checks our D (output poisoned first) against the FP32 product of the dequantized operands, records
DeepGEMM's and cuBLAS blockwise FP8's errors against the same reference beside ours, then times ours
and the baselines with ctx.bench: in a new order each iteration (at power-limited clocks no
candidate always follows the hungriest one), each one captured in a CUDA graph, so that no host
work (a per-group loop, a wrapper's Python checks) is timed; a kernel under ~50 us as many launches
over input sets (the same candidates rebuilt on fresh operands) spanning 3x L2, a longer one after
a read sweep of the L2:
  normal      DeepGEMM 340d988 (deepgemm_baseline.py; skipped with the reason when not importable),
              cuBLAS blockwise FP8 (torch._scaled_mm with 1x128 / 128x128 scales; the headline),
              cuBLAS per-tensor FP8 and cuBLAS bf16 on the same (unquantized) values;
  contiguous  DeepGEMM, our normal layout on the same rows and FLOPs (headline: the grouped
              layout's cost), and cuBLAS blockwise once per group (the loop in one graph);
  masked      DeepGEMM and cuBLAS blockwise once per group (headline). Correct with
              full counts, then replayed from a CUDA graph after the device-side counts change to
              empty / partial groups: rows below each count must match, tiles wholly past it must
              stay unwritten.
A naive case times the one-stage teaching variant (variants/naive.py) beside both. At
4096x7168x16384, ours, DeepGEMM and cuBLAS blockwise are also timed under DeepGEMM's own benchmark
protocol (an 8 GB memset before each launch, a power break on a power-limited GPU). Where the kernel
chose stream-K, the same tile without it ("ours, data-parallel") is checked and timed beside.
The held-out case (held_out.py) draws shapes from real FP8 layers by the run's seed, none the tiling
choice was fitted on, and gates and times ours (its default choice) beside DeepGEMM on each; its
metrics are the geomean and worst ratio ours / DeepGEMM, per M class, and a compact per-shape list.

The gate (`_check`, through kernelwiki.harness.gates), all parts must pass:
  - the rounding gate, both tolerances derived from the reference's own rounding: relative
    Frobenius error <= ROUNDING_FACTOR x the error of rounding the exact FP32 result to bf16, and
    the largest element error <= MAX_ABS_FACTOR x the largest error of that rounding. A correct
    kernel's bf16 output differs from the reference by its own rounding plus twice its FP32
    accumulation error at most (a rounding flips only within that distance of a tie), so an error of
    the size of the rounding itself (a scale or an element slightly off anywhere) fails it. The
    harness's bf16 table (2e-2, 0.1 x RMS) is 10-15x looser: its verdict is recorded beside
    (bf16_table_passed), since no output that fails it passes the derived gate;
  - on the shapes marked `bit_exact` (where every earlier run found our D identical to cuBLAS
    blockwise), the number of elements that differ from cuBLAS blockwise's D: 0 allowed; where the
    kernel chose stream-K (whose pieces' partial sums are added in another order) it is recorded,
    not gated (bit_exact_not_gated).
The negative controls (one per layout, and stream-K) read one K block's A scale of some rows 5%
high: each must fail the rounding gate, its relative and its largest-element test, by 1.5-10x
(over_gate in each control's record; the normal one also fails the bit-exact gate).

Compile-only mode compiles the three layouts (dynamic shapes: one kernel per layout and tiling)
and the teaching variant for sm_90a with fake tensors and scans PTX and SASS. A run ends by
printing a table per case (ours, ours with 128-row tiles where the kernel chose 64 or 256 rows,
ours with the epilogue flipped at M >= 1024, DeepGEMM, cuBLAS blockwise, ours/DeepGEMM,
differing elements).

Run through the runner: kernelwiki probe run --probe probe-fp8-blockscale-gemm [--compile-only]
"""

from __future__ import annotations

import re
import sys

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

import deepgemm_baseline as deepgemm  # next to this script, whose folder Python puts first on sys.path
import held_out
from artifacts.kernels.fp8_blockscale_gemm import fp8_blockscale_gemm as kernel  # importable without a GPU
from artifacts.kernels.fp8_blockscale_gemm.variants import naive
from artifacts.kernels.fp8_blockscale_gemm import quantize

GATE = "bf16"            # the reference holds the quantized operands exactly: accumulation and bf16 rounding remain
ROUNDING_FACTOR = 1.25   # allowed relative error / the bf16 rounding error of the exact result
MAX_ABS_FACTOR = 2.0     # allowed largest element error / the largest bf16 rounding error of the exact result
ALLOWED_DIFFERING = 0    # elements that may differ from cuBLAS blockwise on `bit_exact` shapes
CUBLAS = "cuBLAS blockwise FP8"
CUBLAS_GROUPS = "cuBLAS blockwise FP8, per group, CUDA graph"
TALL = "ours, 128-row tiles"
CHOSEN = "ours, chosen tiling"                 # beside a forced tiling
WHOLE = "ours, whole-tile epilogue"
RING = "ours, epilogue ring"                   # 256-row tiles without their default whole-tile epilogue
ONE_K_TILE = "ours, one K tile in flight"      # mma_ahead off (one consumer warpgroup)
ONE_K_TILE_TURNS = "ours, one K tile in flight, with turns"   # mma_ahead off, two warpgroups: turns on
WITH_TURNS, WITHOUT_TURNS = "ours with warpgroup turns", "ours without warpgroup turns"
CLUSTER_1X2 = "ours, 1x2 cluster"              # where the choice has no cluster
DATA_PARALLEL = "ours, data-parallel"          # where the choice is stream-K: the same tile without it
WHOLE_TILE_EPILOGUE_FROM_M = 1024   # where the epilogue flip is timed: many tiles per SM
POWER_BREAK_BYTES = 8 << 30          # DeepGEMM's bench_kineto flush
PROBE = Probe(__file__)
SUMMARY: list[dict] = []  # one row per case for the table printed at the end of a run


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("x"))


def _tflops(flops: float, timing: dict) -> dict:
    return {name: flops / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _check(d, reference, exact=None) -> dict:
    """The probe's gate (module docstring), through the harness: gates.check with the relative and
    the largest-element tolerances derived from the bf16 rounding of the exact result and, given
    exact = (name, D of a bit-exact baseline), gates.bit_exact against it; gates.combine of them.
    The bf16 table's verdict is recorded beside (bf16_table_passed), not gated on: any output it
    fails, the derived gate fails too (its tolerances are 10-15x tighter)."""
    rounded = reference.bfloat16().float()
    rms = float(reference.double().norm()) / max(1, reference.numel()) ** 0.5
    rel = ROUNDING_FACTOR * gates.relative_error(rounded, reference)
    worst = MAX_ABS_FACTOR * float((rounded - reference).abs().max()) if reference.numel() else 0.0
    parts = {"rounding": gates.check(d.float(), reference, GATE, tol=rel, max_abs_tol=max(worst, 1e-7 * rms))}
    parts["rounding"]["tolerance_basis"] = (f"{ROUNDING_FACTOR} x the relative and {MAX_ABS_FACTOR} x the largest "
                                            f"element error of rounding the exact result to bf16")
    if exact is not None:
        parts["bit_exact"] = gates.bit_exact(d, exact[1], exact[0], ALLOWED_DIFFERING)
    result = gates.combine(parts)
    result["bf16_table_passed"] = gates.check(d.float(), reference, GATE)["passed"]
    return result


def over_gate(correctness: dict) -> dict:
    """Each gate part's error over its tolerance (relative and largest-element; for bit_exact the
    elements differing), for a control's record: how far it misses each gate it is judged by."""
    out = {}
    for name, part in (correctness.get("parts") or {}).items():
        if name == "bit_exact":
            out["bit_exact.differing"] = part.get("differing")
            continue
        for key, tol in (("rel_err", "tolerance"), ("max_abs_err", "max_abs_tolerance")):
            if isinstance(part.get(key), (int, float)) and isinstance(part.get(tol), (int, float)) and part[tol] > 0:
                out[f"{name}.{key}"] = round(part[key] / part[tol], 3)
    return out


def _attempt(call):
    """(call, its result) if it runs, else (the reason it was refused, None)."""
    try:
        return call, call()
    except (RuntimeError, ValueError) as err:
        return (str(err).splitlines() or [type(err).__name__])[0][:200], None


def _cublas_blockwise(a, sfa, b, sfb):
    """cuBLAS blockwise FP8 through torch._scaled_mm: scale_a (M, K/128) with stride (1, M),
    scale_b the transpose of B's (N/128, K/128) block grid. (callable, D), or (the reason it is refused, None)."""
    import torch

    sfa = sfa.t().contiguous().t()   # stride (1, M) exactly
    return _attempt(lambda: torch._scaled_mm(a, b.t(), scale_a=sfa, scale_b=sfb.t(), out_dtype=torch.bfloat16))


def _power_break(candidates: dict, names: tuple) -> dict:
    """Timings under DeepGEMM's own benchmark protocol (its bench_kineto flushes with an 8 GB memset
    between launches, which also gives a power-limited GPU a break), for comparison with ours: the
    harness's graph replay and events, an 8 GB memset before each launch, candidates in turn."""
    import torch

    from kernelwiki.harness import timing

    device = timing.torch_device()
    replays = {name: timing.cuda_graph(candidates[name]) for name in names if name in candidates}
    flush = torch.empty(POWER_BREAK_BYTES, dtype=torch.uint8, device="cuda")

    def time_one(name: str) -> float:
        flush.zero_()
        return device.elapsed_ms(replays[name], flush=False)

    result = timing.timed_rounds(list(replays), time_one, 30, "interleaved", device.read_clock)
    protocol = {"method": "deepgemm-memset", "launches": 1, "flush_bytes": POWER_BREAK_BYTES,
                "description": "DeepGEMM's: 8 GB memset before each launch, 30 in turn"}
    return {f"{name} @ 8 GB memset": {**entry, "protocol": protocol} for name, entry in result.items()}


def _time(ctx: Context, candidates: dict, rebuild, set_bytes: int) -> dict:
    """Time the candidates by ctx.bench. Input set 0 is these launches (the ones checked); set i
    is rebuild(i): the same candidates bound to fresh operands (our kernel and the baselines take
    fixed pointers), so a short kernel cycles through sets that span 3x L2. Each is captured in a
    CUDA graph: a Python loop of launches (cuBLAS once per group) or a wrapper's Python work
    (DeepGEMM's checks and config lookup, our views) is not timed, only what runs on the GPU."""
    from kernelwiki.harness.timing import bound

    def make_set(i: int) -> dict:
        if i == 0:
            return candidates
        fresh = rebuild(i)   # may hold a baseline that set 0 dropped after its check failed
        missing = set(candidates) - set(fresh)
        if missing:
            raise RuntimeError(f"input set {i} lacks the candidates {sorted(missing)}")
        return {name: fresh[name] for name in candidates}

    return ctx.bench(bound(list(candidates)), make_set, set_bytes, iters=30, warmup=5)


def _deepgemm(launch_out, d, reference, rows, correctness: dict, candidates: dict, extra: list) -> None:
    """Check DeepGEMM's D against the reference (rows: which of them to compare, None for all),
    count how many differ from ours (d), and add it as a timing candidate; or record why it is
    skipped. Without a reference (an input set that is only timed) it only adds the candidate."""
    import torch

    launch, out = launch_out
    if reference is None:
        if launch is not None:
            candidates[deepgemm.NAME] = launch
        return
    if launch is None:
        extra.append({"name": deepgemm.NAME, "value": None, "skipped": out, **deepgemm.provenance()})
        return
    gates.poison(out)
    try:
        launch()
        torch.cuda.synchronize()
    except Exception as err:   # its JIT build or its own checks refused this shape
        extra.append({"name": deepgemm.NAME, "value": None,
                      "skipped": f"{type(err).__name__}: {err}".splitlines()[0][:300], **deepgemm.provenance()})
        return
    mine, theirs = (d, out) if rows is None else (d[rows], out[rows])
    correctness["deepgemm_rel_err"] = gates.relative_error(theirs.float(), reference)
    correctness["deepgemm_passed"] = gates.check(theirs.float(), reference, GATE)["passed"]
    correctness["elements_differing_from_deepgemm"] = gates.bit_exact(mine, theirs, deepgemm.NAME)["differing"]
    candidates[deepgemm.NAME] = launch
    extra.append({"name": deepgemm.NAME, **deepgemm.provenance()})


def _strided(a, sfa, b, sfb) -> tuple:
    """The same operands as views into larger buffers, 16 bytes past each buffer's start: rows of A
    and B 144 bytes longer than K, sfa's K-block stride 8 floats past its padded M, sfb's rows 4
    floats longer. Only our kernel takes them; the baselines get the compact originals."""
    import torch

    views = []
    for t, pad in ((a, 144), (b, 144)):
        big = torch.empty(t.shape[0], t.shape[1] + pad, dtype=t.dtype, device=t.device)
        views.append(big[:, 16:16 + t.shape[1]])
    storage = torch.empty(sfa.shape[1], sfa.stride(1) + 8, device=sfa.device)
    views.insert(1, storage[:, 4:4 + sfa.shape[0]].t())
    views.append(torch.empty(sfb.shape[0], sfb.shape[1] + 4, device=sfb.device)[:, :sfb.shape[1]])
    for view, t in zip(views, (a, sfa, b, sfb)):
        view.copy_(t)
    return tuple(views)


def _normal(params: dict, ctx: Context, index: int = 0):
    """The normal layout's case; with index > 0, only input set `index` for the timing (the same
    candidates on fresh operands, nothing checked): returns its {name: launch}."""
    import torch

    checking = index == 0
    m, n, k = _shape(params["shape"])
    g = ctx.generator(salt=1000 * index)
    x, w = torch.randn(m, k, generator=g, device="cuda"), torch.randn(n, k, generator=g, device="cuda")
    a, sfa = quantize.per_token_cast(x)
    b, sfb = quantize.per_block_cast(w)
    reference = quantize.reference(a, sfa, b, sfb) if checking else None
    ops = _strided(a, sfa, b, sfb) if params.get("views") else (a, sfa, b, sfb)   # what our kernel takes
    chosen = _tiling("normal", m, n, k=k)
    # a tiling case overrides the kernel's choice (data-parallel unless it says streamk) and times the
    # choice beside it
    forced = {key: params[key] for key in ("tile_m", "tile_n") if key in params}
    if "cluster" in params:
        forced["cluster_mn"] = tuple(int(c) for c in params["cluster"].split("x"))
    tiling = chosen
    if forced:   # a forced tile runs without the chooser's stream-K (unless the case says) and short A
        tiling = {**chosen, **forced, "streamk": bool(params.get("streamk", False))}
        tiling["a_rows"] = tiling["tile_m"]
    run, d = kernel.compile_gemm(*ops, **tiling)
    cublas, cublas_out = _cublas_blockwise(a, sfa, b, sfb)
    correctness, exact = {}, None
    if checking:
        gates.poison(d)
        run()
        torch.cuda.synchronize()
        # bit for bit only in one pass over K: stream-K adds its pieces' partial sums in another order
        summed_in_pieces = bool(tiling.get("streamk"))
        exact = (CUBLAS, cublas_out) if params.get("bit_exact") and cublas_out is not None and not summed_in_pieces \
            else None
        correctness = _check(d, reference, exact)
        if params.get("bit_exact") and summed_in_pieces:
            correctness["bit_exact_not_gated"] = "stream-K: partial sums of K pieces added in another order than one pass"
        elif params.get("bit_exact") and exact is None:
            correctness["parts"]["bit_exact"] = {"against": CUBLAS, "refused": cublas, "passed": False}
            correctness["passed"] = False
        same = torch.equal(kernel.gemm(*ops), d)   # the one-call API reuses the kernel: same bits
        correctness.update(gemm_api_matches=same, passed=correctness["passed"] and same)

    candidates, extra, metrics = {"ours": run}, [], {}
    if tiling != chosen:
        _checked_candidate(CHOSEN, kernel.compile_gemm(*ops, **chosen), reference,
                           None if chosen.get("streamk") else exact, correctness, candidates)
    _tall_tiles_ab("normal", m, n, 1, [tiling, chosen], lambda t: kernel.compile_gemm(*ops, **t),
                   reference, exact, correctness, candidates, metrics)
    _ablations(lambda variant: kernel.compile_gemm(*ops, **{**tiling, **variant}), tiling,
               params.get("ablation", False), m >= WHOLE_TILE_EPILOGUE_FROM_M, reference, exact, correctness, candidates)
    if cublas_out is not None:
        candidates[CUBLAS] = cublas
        if checking:
            correctness["cublas_blockwise_rel_err"] = gates.relative_error(cublas_out.float(), reference)
            correctness["cublas_blockwise_passed"] = gates.check(cublas_out.float(), reference, GATE)["passed"]
            correctness["elements_differing_from_cublas_blockwise"] = gates.bit_exact(d, cublas_out, CUBLAS)["differing"]
    else:
        correctness["cublas_blockwise_refused"] = cublas
        extra.append({"name": CUBLAS, "value": None, "skipped": cublas})
    _deepgemm(deepgemm.normal(a, sfa, b, sfb), d, reference, None, correctness, candidates, extra)
    del reference, cublas_out
    scale_x, scale_w = (t.abs().amax() / quantize.E4M3_MAX for t in (x, w))
    a_t, b_t = (x / scale_x).to(torch.float8_e4m3fn), (w / scale_w).to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    x16, w16 = x.bfloat16(), w.bfloat16()
    del x, w
    per_tensor, _ = _attempt(lambda: torch._scaled_mm(a_t, b_t.t(), scale_a=scale_x * one, scale_b=scale_w * one,
                                                      out_dtype=torch.bfloat16))
    if callable(per_tensor):
        candidates["cuBLAS per-tensor FP8"] = per_tensor
    else:
        extra.append({"name": "cuBLAS per-tensor FP8", "value": None, "skipped": per_tensor})
    candidates["cuBLAS bf16"] = lambda: x16 @ w16.t()
    if not checking:
        return candidates
    set_bytes = _nbytes(*ops, d)   # what our launch touches (the smallest of the candidates' shares)
    timing = _time(ctx, candidates, lambda i: _normal(params, ctx, i), set_bytes)
    if params.get("deepgemm_protocol"):
        timing.update(_power_break(candidates, ("ours", deepgemm.NAME, CUBLAS)))
    tflops = _tflops(2 * m * n * k, timing)
    return _result(ctx, correctness, timing, tflops, tiling, extra, metrics)


def _naive(params: dict, ctx: Context, index: int = 0):
    """The one-stage teaching variant, beside the production kernel and cuBLAS blockwise (index > 0:
    only input set `index`, as in _normal)."""
    import torch

    m, n, k = _shape(params["shape"])
    g = ctx.generator(salt=1000 * index)
    a, sfa = quantize.per_token_cast(torch.randn(m, k, generator=g, device="cuda"))
    b, sfb = quantize.per_block_cast(torch.randn(n, k, generator=g, device="cuda"))
    run, d = naive.compile_gemm(a, sfa, b, sfb)
    tiling = _tiling("normal", m, n, k=k)
    production, production_d = kernel.compile_gemm(a, sfa, b, sfb, **tiling)
    candidates = {"ours": run, "ours, production kernel": production}
    cublas, cublas_out = _cublas_blockwise(a, sfa, b, sfb)
    if callable(cublas):
        candidates[CUBLAS] = cublas
    if index:
        return candidates
    reference = quantize.reference(a, sfa, b, sfb)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    correctness = _check(d, reference)
    gates.poison(production_d)
    production()
    torch.cuda.synchronize()
    correctness["production_kernel_passed"] = _check(production_d, reference)["passed"]
    if cublas_out is not None:
        correctness["cublas_blockwise_passed"] = gates.check(cublas_out.float(), reference, GATE)["passed"]
    del reference
    timing = _time(ctx, candidates, lambda i: _naive(params, ctx, i), _nbytes(a, sfa, b, sfb, d))
    tflops = _tflops(2 * m * n * k, timing)
    return _result(ctx, correctness, timing, tflops, {"tile_m": naive.TILE_M,
                                                                       "tile_n": naive.TILE_N, "cluster_mn": (1, 1)})


def _group_rows(text: str) -> tuple[list[int], int]:
    """m_indices from 'rows,rows,...' (negative: that many padding rows, index -1), and the group count."""
    indices, group = [], 0
    for rows in (int(s) for s in str(text).split(",")):
        if rows < 0:
            indices += [-1] * -rows
        else:
            indices += [group] * rows
            group += 1
    return indices, group


def _contiguous(params: dict, ctx: Context, index: int = 0):
    """The m-grouped contiguous layout's case (index > 0: only input set `index`, as in _normal)."""
    import torch

    checking = index == 0
    n, k = _shape(params["nk"])
    indices, groups = _group_rows(params["group_rows"])
    m = len(indices)
    m_indices = torch.tensor(indices, dtype=torch.int32, device="cuda")
    g = ctx.generator(salt=1000 * index)
    x = torch.randn(m, k, generator=g, device="cuda")
    w = torch.randn(groups, n, k, generator=g, device="cuda")
    a, sfa = quantize.per_token_cast(x)
    b, sfb = quantize.per_block_cast(w)
    del x, w
    reference = quantize.reference(a, sfa, b, sfb, "contiguous", m_indices) if checking else None
    tiling = _tiling("contiguous", m, n)
    if "tile_m" in params:   # a tiling case: the forced tile, the kernel's choice timed beside
        tiling = {**tiling, "tile_m": params["tile_m"], "tile_n": params["tile_n"]}
    run, d = kernel.compile_gemm(a, sfa, b, sfb, "contiguous", m_indices, **tiling)
    valid = m_indices >= 0
    correctness = {}
    if checking:
        gates.poison(d)
        run()
        torch.cuda.synchronize()
        correctness = _check(d[valid], reference[valid])
        untouched = gates.untouched(d[~valid])    # padding rows: skipped, never written
        correctness.update(padding_rows=int((~valid).sum()), padding_untouched=untouched,
                           passed=correctness["passed"] and untouched)

    # the normal layout on the same rows (B = group 0): the grouped layout's own cost at equal FLOPs
    run_normal, _ = kernel.compile_gemm(a, sfa, b[0], sfb[0], tile_m=tiling["tile_m"], tile_n=tiling["tile_n"])
    candidates, extra, metrics = {"ours": run, "ours, normal layout": run_normal}, [], {}
    valid_reference = reference[valid] if checking else None
    chosen = _tiling("contiguous", m, n)
    if chosen != tiling:
        _checked_candidate(CHOSEN, kernel.compile_gemm(a, sfa, b, sfb, "contiguous", m_indices, **chosen),
                           valid_reference, None, correctness, candidates, rows=valid)
    _tall_tiles_ab("contiguous", m, n, 1, [tiling, chosen],
                   lambda t: kernel.compile_gemm(a, sfa, b, sfb, "contiguous", m_indices, **t), valid_reference, None,
                   correctness, candidates, metrics, rows=valid)
    per_group, cublas_d = [], torch.full_like(d, float("nan")) if checking else None
    for grp in range(groups):
        rows = (m_indices == grp).nonzero().flatten()
        if rows.numel():
            call, out = _cublas_blockwise(a[rows], sfa[rows], b[grp], sfb[grp])
            per_group.append(call)
            if out is not None and checking:
                cublas_d[rows] = out
    if all(callable(c) for c in per_group):
        candidates[CUBLAS_GROUPS] = lambda: [c() for c in per_group]
        if checking:
            correctness["elements_differing_from_cublas_blockwise"] = gates.bit_exact(
                d[valid], cublas_d[valid], CUBLAS)["differing"]
            correctness["cublas_blockwise_passed"] = gates.check(cublas_d[valid].float(), valid_reference, GATE)["passed"]
    else:
        correctness["cublas_blockwise_refused"] = next(c for c in per_group if not callable(c))
        extra.append({"name": CUBLAS_GROUPS, "value": None, "skipped": correctness["cublas_blockwise_refused"]})
    _deepgemm(deepgemm.contiguous(a, sfa, b, sfb, m_indices), d, valid_reference, valid, correctness, candidates,
              extra)
    del reference, valid_reference
    if not checking:
        return candidates
    set_bytes = _nbytes(a, sfa, b[0], sfb[0], d)   # what the normal layout's launch touches, the smallest share
    timing = _time(ctx, candidates, lambda i: _contiguous(params, ctx, i), set_bytes)
    tflops = _tflops(2 * int(valid.sum()) * n * k, timing)
    tflops["ours, normal layout"] = 2 * m * n * k / (timing["ours, normal layout"]["median_ms"] * 1e-3) / 1e12
    return _result(ctx, correctness, timing, tflops, tiling, extra, metrics)


def _mixed_counts(groups: int, m_max: int) -> list[int]:
    """Empty, full, partial and single-row groups (for one group: a partial one)."""
    if groups == 1:
        return [m_max // 2 + 1]
    return ([0, m_max, m_max // 2 + 1, 1] * groups)[:groups] if groups > 2 else [0, m_max // 2 + 1]


def _masked_check(d, reference, counts: list[int], tile_m: int) -> dict:
    """Rows below each group's count against the reference; tiles wholly past it must be unwritten."""
    import torch

    rows = [d[g, :c] for g, c in enumerate(counts)]
    refs = [reference[g, :c] for g, c in enumerate(counts)]
    if sum(counts):
        result = _check(torch.cat(rows), torch.cat(refs))
    else:
        result = {"passed": True, "rel_err": 0.0, "tolerance": gates.tolerance(GATE)}
    skipped = [d[g, -(-c // tile_m) * tile_m:] for g, c in enumerate(counts)]
    untouched = all(gates.untouched(s) for s in skipped)
    result.update(counts=counts, skipped_tiles_untouched=untouched, passed=result["passed"] and untouched)
    return result


def _masked(params: dict, ctx: Context, index: int = 0):
    """The m-grouped masked layout's case (index > 0: only input set `index`, as in _normal)."""
    import torch

    from kernelwiki.harness.timing import cuda_graph

    checking = index == 0
    groups, m_max = (int(v) for v in params["groups_x_m"].split("x"))
    n, k = _shape(params["nk"])
    g = ctx.generator(salt=1000 * index)
    x = torch.randn(groups, m_max, k, generator=g, device="cuda")
    w = torch.randn(groups, n, k, generator=g, device="cuda")
    a, sfa = quantize.per_token_cast(x)
    b, sfb = quantize.per_block_cast(w)
    del x, w
    reference = quantize.reference(a, sfa, b, sfb, "masked") if checking else None
    masked_m = torch.full((groups,), m_max, dtype=torch.int32, device="cuda")
    tiling = _tiling("masked", m_max, n, groups)
    run, d = kernel.compile_gemm(a, sfa, b, sfb, "masked", masked_m, **tiling)
    correctness, d_full = {}, None
    if checking:
        gates.poison(d)
        run()
        torch.cuda.synchronize()
        full = _masked_check(d, reference, [m_max] * groups, tiling["tile_m"])
        d_full = d.clone()
        # the same launch from a CUDA graph; only the device-side counts change between replays
        replay = cuda_graph(run)
        counts = _mixed_counts(groups, m_max)
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        gates.poison(d)
        replay()
        torch.cuda.synchronize()
        mixed = _masked_check(d, reference, counts, tiling["tile_m"])
        masked_m.fill_(m_max)
        correctness = {**full, "passed": full["passed"] and mixed["passed"], "graph_replay_mixed_counts": mixed}

    candidates, extra, metrics = {"ours": run}, [], {}
    _tall_tiles_ab("masked", m_max, n, groups, [tiling],
                   lambda t: kernel.compile_gemm(a, sfa, b, sfb, "masked", masked_m, **t), reference, None,
                   correctness, candidates, metrics)
    calls = [_cublas_blockwise(a[grp], sfa[grp], b[grp], sfb[grp]) for grp in range(groups)]
    if all(callable(c) for c, _ in calls):
        candidates[CUBLAS_GROUPS] = lambda: [c() for c, _ in calls]
        if checking:
            cublas_d = torch.stack([out for _, out in calls])
            correctness["elements_differing_from_cublas_blockwise"] = gates.bit_exact(
                d_full, cublas_d, CUBLAS)["differing"]
            correctness["cublas_blockwise_passed"] = gates.check(cublas_d.float(), reference, GATE)["passed"]
    else:
        correctness["cublas_blockwise_refused"] = next(c for c, _ in calls if not callable(c))
        extra.append({"name": CUBLAS_GROUPS, "value": None, "skipped": correctness["cublas_blockwise_refused"]})
    _deepgemm(deepgemm.masked(a, sfa, b, sfb, masked_m, m_max), d_full, reference, None, correctness, candidates,
              extra)
    del reference
    if not checking:
        return candidates
    set_bytes = _nbytes(a, sfa, b, sfb, d)
    timing = _time(ctx, candidates, lambda i: _masked(params, ctx, i), set_bytes)
    tflops = _tflops(2 * groups * m_max * n * k, timing)
    return _result(ctx, correctness, timing, tflops, tiling, extra, metrics)


def _tiling(layout: str, m: int, n: int, groups: int = 1, tile_ms: tuple[int, ...] = kernel.TILE_MS,
            k: int | None = None) -> dict:
    """The kernel's own choice of tiles, cluster and stream-K for this GPU (stream-K is weighed given
    K), passed explicitly so the record names it."""
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return kernel.choose_tiling(layout, m, n, sms, groups, tile_ms, k=k)


def _ablations(launch, tiling: dict, every: bool, epilogue: bool, reference, exact, correctness: dict,
               candidates: dict) -> None:
    """The chosen kernel with one of its defaults flipped, checked and timed beside it, so every run
    shows what each default brings: K tiles in flight, the warpgroups' turns, the cluster (every:
    the case's `ablation` flag) and the epilogue (epilogue: from WHOLE_TILE_EPILOGUE_FROM_M rows).
    launch(variant) -> (run, d) for the chosen tiling with the variant's settings (overriding it)."""
    flips = {}
    if tiling.get("streamk"):   # stream-K's flip is the data-parallel kernel of the same tile
        flips[DATA_PARALLEL] = {"streamk": False}
        for name, variant in flips.items():
            _checked_candidate(name, launch(variant), reference, exact, correctness, candidates)
        return
    op = kernel.Fp8BlockScaleGemm(tile_n=tiling["tile_n"], cluster_mn=tiling["cluster_mn"], tile_m=tiling["tile_m"])
    if every and op.mma_ahead:   # two consumer warpgroups without it take turns (the default there)
        flips[ONE_K_TILE_TURNS if op.warpgroups == 2 else ONE_K_TILE] = {"mma_ahead": False}
    if every and op.warpgroups == 2 and not op.mma_ahead:
        flips[WITHOUT_TURNS if op.order_warpgroups else WITH_TURNS] = {"order_warpgroups": not op.order_warpgroups}
    if every and tuple(tiling["cluster_mn"]) == (1, 1):
        flips[CLUSTER_1X2] = {"cluster_mn": (1, 2)}
    if epilogue:
        flips[RING if op.halves == 2 else WHOLE] = {"whole_tile_epilogue": op.halves != 2}
    for name, variant in flips.items():
        _checked_candidate(name, launch(variant), reference, exact, correctness, candidates)


def _checked_candidate(name: str, run_d: tuple, reference, exact, correctness: dict, candidates: dict,
                       rows=None) -> None:
    """Run a variant of ours once on a poisoned output, gate it like ours (correctness[name]; a
    failure fails the case), then add it to the timed candidates. rows: the rows of d to check
    (None: all; reference holds those rows only). Without a reference (an input set that is only
    timed) it only adds the candidate."""
    import torch

    run, d = run_d
    if reference is not None:
        gates.poison(d)
        run()
        torch.cuda.synchronize()
        correctness[name] = _check(d if rows is None else d[rows], reference, exact)
        correctness["passed"] = correctness["passed"] and correctness[name]["passed"]
    candidates[name] = run


def _tall_tiles_ab(layout: str, m: int, n: int, groups: int, tilings: list, launch, reference, exact,
                   correctness: dict, candidates: dict, metrics: dict, rows=None) -> None:
    """Where the kernel chose 64- or 256-row tiles, also check and time its best 128-row tile (the
    tiling before those heights existed) as "ours, 128-row tiles", so every run shows what they bring.
    launch(tiling) -> (run, d); tilings: those already timed; rows: the rows of d to check (None: all;
    reference holds those rows only, or is None for an input set that is only timed)."""
    previous = _tiling(layout, m, n, groups, tile_ms=(kernel.MMA_M,))
    if previous in tilings:
        return
    run_d = launch(previous)
    if reference is not None:
        _checked_candidate("tiles_128_rows", run_d, reference, exact, correctness, {}, rows=rows)
    candidates[TALL] = run_d[0]
    metrics["tile_128_rows"] = f"{previous['tile_m']}x{previous['tile_n']}x128"


def _ratio(tflops: dict, name: str) -> float | None:
    """ours / name, both under the same protocol: an entry timed under another protocol ("X @ 8 GB
    memset") is compared with ours under that protocol; ours under it has no ratio."""
    ours = "ours"
    if " @ " in name:
        ours = "ours @ " + name.split(" @ ", 1)[1]
    if name == ours or not tflops.get(name) or not tflops.get(ours):
        return None
    return round(tflops[ours] / tflops[name], 4)


HEADLINE_CANDIDATES = (deepgemm.NAME, CUBLAS, CUBLAS_GROUPS, "ours, production kernel")
"""The candidates that compute the case's problem (block-scaled FP8, same scales, bf16 out) as another
kernel does: the headline is against the fastest of them that passed the gate (DeepGEMM where it
runs). The rest (cuBLAS per-tensor FP8 and bf16: other precisions; our own variants and layouts)
keep their ratios beside it and are never the headline, so a refused cuBLAS blockwise leaves the
case without a ratio instead of falling back to bf16."""
PASSED_KEYS = {deepgemm.NAME: "deepgemm_passed", CUBLAS: "cublas_blockwise_passed",
               CUBLAS_GROUPS: "cublas_blockwise_passed", "ours, production kernel": "production_kernel_passed"}


def _result(ctx: Context, correctness: dict, timing: dict, tflops: dict,
            tiling: dict, extra: list | None = None, metrics: dict | None = None) -> dict:
    extra = extra or []
    annotations = {entry["name"]: {k: v for k, v in entry.items() if k not in ("name", "value")} for entry in extra}
    same_protocol = {name: v for name, v in tflops.items() if name != "ours" and " @ " not in name}
    candidates = {name: same_protocol.get(name) for name in HEADLINE_CANDIDATES
                  if name in same_protocol or name in annotations}
    correct = {name: bool(correctness.get(PASSED_KEYS[name], True)) for name in candidates if name in same_protocol}
    out = ctx.headline_against("tflops", tflops["ours"], "TFLOP/s", candidates, correct=correct, peak_key="e4m3",
                               context={name: same_protocol.get(name) for name in [*same_protocol, *annotations]
                                        if name not in candidates},
                               notes=annotations)
    # timed under DeepGEMM's own protocol: each compared with ours under that protocol
    out["baselines"] += [{**annotations.get(name, {}), "name": name, "value": round(v, 2), "ratio": _ratio(tflops, name),
                          "headline_candidate": False} for name, v in tflops.items() if " @ " in name]
    return {"correctness": correctness, "timing": timing,
            "metrics": {"tile": f"{tiling['tile_m']}x{tiling['tile_n']}x128",
                        "cluster": "x".join(map(str, tiling["cluster_mn"])),
                        "schedule": "stream-K" if tiling.get("streamk") else "data-parallel",
                        "a_rows": tiling.get("a_rows", tiling["tile_m"]), **(metrics or {})}, **out}


def _held_out_set(shape: dict, seed: int, checking: bool):
    """One input set of a held-out shape: (candidates {name: launch}, ours' (run, d), DeepGEMM's
    (launch, out) or (None, why), the reference or None)."""
    import torch

    m, n, k = shape["m"], shape["n"], shape["k"]
    g = torch.Generator(device="cuda").manual_seed(seed)
    a, sfa = quantize.per_token_cast(torch.randn(m, k, generator=g, device="cuda"))
    b, sfb = quantize.per_block_cast(torch.randn(n, k, generator=g, device="cuda"))
    ours = kernel.compile_gemm(a, sfa, b, sfb)
    theirs = deepgemm.normal(a, sfa, b, sfb)
    candidates = {"ours": ours[0]}
    if theirs[0] is not None:
        candidates[deepgemm.NAME] = theirs[0]
    reference = quantize.reference(a, sfa, b, sfb) if checking else None
    return candidates, ours, theirs, reference


def _held_out_shape(shape: dict, index: int, ctx: Context) -> dict:
    """One held-out shape: ours (its default choice) and DeepGEMM gated, then timed together by
    ctx.bench; the row holds ours / DeepGEMM (None where DeepGEMM is unavailable or fails its gate)."""
    import torch

    from kernelwiki.harness.timing import bound

    m, n, k = shape["m"], shape["n"], shape["k"]
    seed = ctx.seed + 7919 * (index + 1)
    candidates, (run, d), (launch, out), reference = _held_out_set(shape, seed, True)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    correctness = _check(d, reference)
    row = {**shape, "tiling": held_out.label(run.tiling), "passed": correctness["passed"],
           "rel_err": correctness["rel_err"]}
    if launch is not None:
        gates.poison(out)
        launch()
        torch.cuda.synchronize()
        row["deepgemm_passed"] = gates.check(out.float(), reference, GATE)["passed"]
        if not row["deepgemm_passed"]:
            candidates.pop(deepgemm.NAME)
    else:
        row["deepgemm_skipped"] = out
    del reference
    if not row["passed"]:
        return row

    def make_set(i: int) -> dict:
        return candidates if i == 0 else _held_out_set(shape, seed + i, False)[0]

    timing = ctx.bench(bound(list(candidates)), make_set, m * k + n * k + 2 * m * n, iters=held_out.ITERS, warmup=2)
    tflops = _tflops(2 * m * n * k, timing)
    row.update(ours=tflops["ours"], deepgemm=tflops.get(deepgemm.NAME))
    if row["deepgemm"]:
        row["ratio"] = tflops["ours"] / row["deepgemm"]
    return row


def _held_out(params: dict, ctx: Context) -> dict:
    """The held-out case (held_out.py): shapes drawn by the run's seed from real FP8 layers, none the
    tiling choice was fitted on; ours (its default choice) and DeepGEMM gated and timed on each. The
    headline is the geomean of ours over the geomean of DeepGEMM (= the geomean of the per-shape
    ratios), the metrics the geomean and worst ratio, per M class, and a compact per-shape list."""
    import time

    drawn = held_out.draw(ctx.seed, int(params["count"]), PROBE.spec["cases"])
    rows, started = [], time.monotonic()
    for i, shape in enumerate(drawn):
        if time.monotonic() - started > held_out.TIME_BUDGET_S:   # the shapes left are recorded as not timed
            break
        rows.append(_held_out_shape(shape, i, ctx))
        print(f"held-out {i + 1}/{len(drawn)} {shape['m']}x{shape['n']}x{shape['k']}: {rows[-1].get('ratio')} "
              f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    timed = [row for row in rows if row["passed"]]
    compared = [row for row in timed if row.get("ratio")]
    passed = len(timed) == len(rows) and len(compared) >= held_out.MIN_SHAPES
    metrics = {"seed": ctx.seed, "shapes": len(rows), "shapes_drawn": len(drawn),
               "stopped_by_time_budget": len(rows) < len(drawn), "baseline": deepgemm.NAME,
               "headline_statistic": "geomean over the held-out shapes of ours / DeepGEMM",
               **held_out.summary(compared),
               "incorrect": "; ".join(f"{r['m']}x{r['n']}x{r['k']}" for r in rows if not r["passed"]) or None,
               "deepgemm_missing": "; ".join(f"{r['m']}x{r['n']}x{r['k']}" for r in timed if not r.get("ratio")) or None,
               "per_shape": "; ".join(held_out.compact(r) for r in timed)}
    notes = {} if compared else {deepgemm.NAME: {"skipped": deepgemm.module()[1] or "no shape had a passing DeepGEMM"}}
    return {"correctness": {"passed": passed, "shapes_passed": len(timed), "shapes": len(rows),
                            "shapes_with_deepgemm": len(compared), "min_shapes": held_out.MIN_SHAPES},
            "metrics": metrics,
            **ctx.headline_against("tflops", held_out.geomean([r["ours"] for r in compared]) or 0.0, "TFLOP/s",
                                   {deepgemm.NAME: held_out.geomean([r["deepgemm"] for r in compared]) if compared
                                    else None}, correct={deepgemm.NAME: bool(compared)}, peak_key="e4m3",
                                   notes=notes)}


def _selected_cases() -> list[dict]:
    """The cases this process runs (the runner passes --case for a selection)."""
    chosen = [sys.argv[i + 1] for i, arg in enumerate(sys.argv[:-1]) if arg == "--case"]
    return [c for c in PROBE.spec["cases"] if not chosen or c["id"] in chosen]


def _deepgemm_shapes(cases: list[dict], seed: int | None = None) -> list[dict]:
    """The DeepGEMM configurations the cases will call, for `deepgemm.precompile` (a held-out case's
    shapes as the run's seed draws them)."""
    shapes = []
    for case in cases:
        params = case["params"]
        if params.get("set") == "held-out":
            if seed is not None:
                shapes += [{"layout": "normal", "m": s["m"], "n": s["n"], "k": s["k"], "groups": 1}
                           for s in held_out.draw(seed, int(params["count"]), PROBE.spec["cases"])]
            continue
        if params.get("variant"):
            continue
        if params["layout"] == "normal":
            m, n, k = _shape(params["shape"])
            shapes.append({"layout": "normal", "m": m, "n": n, "k": k, "groups": 1})
        elif params["layout"] == "contiguous":
            indices, groups = _group_rows(params["group_rows"])
            if -1 not in indices:
                shapes.append({"layout": "contiguous", "m": len(indices), "n": _shape(params["nk"])[0],
                               "k": _shape(params["nk"])[1], "groups": groups})
        else:
            groups, m_max = (int(v) for v in params["groups_x_m"].split("x"))
            shapes.append({"layout": "masked", "m": m_max, "n": _shape(params["nk"])[0],
                           "k": _shape(params["nk"])[1], "groups": groups})
    return [dict(t) for t in dict.fromkeys(tuple(sorted(s.items())) for s in shapes)]


def run_case(case: dict, ctx: Context) -> dict:
    if "deepgemm" not in ctx.protocol:   # before the first case: every DeepGEMM JIT build at once
        built = deepgemm.precompile(_deepgemm_shapes(_selected_cases(), ctx.seed))
        ctx.protocol["deepgemm"] = deepgemm.provenance() or {"unavailable": deepgemm.module()[1]}
        print(f"[DeepGEMM] precompiled in {built['seconds']} s; errors: {built['errors'] or 'none'}", flush=True)
    params = case["params"]
    if params.get("set") == "held-out":
        result = _held_out(params, ctx)
    elif params.get("variant") == "naive":
        result = _naive(params, ctx)
    else:
        result = {"normal": _normal, "contiguous": _contiguous, "masked": _masked}[params["layout"]](params, ctx)
    SUMMARY.append(_summary_row(case["id"], result))
    return result


def _summary_row(case_id: str, result: dict) -> dict:
    values = {entry["name"]: entry.get("value") for entry in result.get("baselines", [])}
    correctness = result["correctness"]
    return {"case": case_id, "ours": result["headline"]["value"], "tall": values.get(TALL), "whole": values.get(WHOLE, values.get(RING)),
            "DeepGEMM": values.get(deepgemm.NAME),
            "cuBLAS": values.get(CUBLAS, values.get(CUBLAS_GROUPS)),
            "differing": correctness.get("elements_differing_from_cublas_blockwise"),
            "differing_deepgemm": correctness.get("elements_differing_from_deepgemm"), "passed": correctness["passed"]}


CONTROL_SCALE_FACTOR = 1.05
"""The controls' bug: one K block's A scale of one 128-row tile read 5% high (a scale loaded from a
neighbouring row of the smem scale buffer, a rounding of the scale product): a tile's partial sum
off by 5% in one of eight K blocks moves D by about 4x the rounding gate, where the bf16 table
(2e-2) would pass it. Each layout has its own control, since each indexes the scales its own way."""
CONTROL_K_BLOCK = 3


def _wrong_scale(sfa, rows: slice, k_block: int = CONTROL_K_BLOCK):
    """A copy of sfa (same M-major layout) with the scales of `rows` (the last-but-one axis) at
    `k_block` multiplied by CONTROL_SCALE_FACTOR."""
    bad = sfa.clone()   # same strides; .contiguous() on the transposed view returned sfa itself (M-major
    bad[..., rows, k_block] *= CONTROL_SCALE_FACTOR   # already), so the control corrupted cuBLAS's scales too
    return bad


def _control_operands(ctx: Context, batch: tuple, m: int, n: int, k: int):
    import torch

    g = ctx.generator(salt=1)
    x, w = torch.randn(*batch, m, k, generator=g, device="cuda"), torch.randn(*batch, n, k, generator=g, device="cuda")
    return (*quantize.per_token_cast(x), *quantize.per_block_cast(w))


def control_normal(ctx: Context) -> dict:
    """Normal layout, 512x2048x1024: the first tile's rows read a scale 5% high in one K block. It
    must fail the bit-exact gate against cuBLAS blockwise and, on its own, the rounding gate (what
    guards the layouts and shapes without a bit-exact baseline)."""
    import torch

    a, sfa, b, sfb = _control_operands(ctx, (), 512, 2048, 1024)
    reference = quantize.reference(a, sfa, b, sfb)
    run, d = kernel.compile_gemm(a, _wrong_scale(sfa, slice(0, 128)), b, sfb)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    _, cublas_out = _cublas_blockwise(a, sfa, b, sfb)
    result = _check(d, reference, (CUBLAS, cublas_out) if cublas_out is not None else None)
    # the control is caught only if each gate the probe relies on catches it by itself; where cuBLAS
    # blockwise refuses the shape there is no bit-exact gate to rely on (seen on the H200 at 512x2048x1024)
    relied = [result["parts"]["rounding"]["passed"]]
    if "bit_exact" in result["parts"] and "refused" not in result["parts"]["bit_exact"]:
        relied.append(result["parts"]["bit_exact"]["passed"])
    result["passed"] = bool(any(relied))
    result.update(shape="512x2048x1024", over_gate=over_gate(result))
    return result


def control_streamk(ctx: Context) -> dict:
    """Normal layout through stream-K, 32x2048x1024 in 64x64 tiles (32 tiles x 8 K tiles over up to 132
    CTAs: every tile summed from pieces of other CTAs): rows 0-7 read a scale 5% high in one K block;
    it must fail the rounding gate (relative and largest-element error)."""
    import torch

    a, sfa, b, sfb = _control_operands(ctx, (), 32, 2048, 1024)
    reference = quantize.reference(a, sfa, b, sfb)
    run, d = kernel.compile_gemm(a, _wrong_scale(sfa, slice(0, 8)), b, sfb, tile_m=64, tile_n=64, cluster_mn=(1, 1),
                                 streamk=True)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    result = _check(d, reference)
    result.update(passed=result["parts"]["rounding"]["passed"], shape="32x2048x1024",
                  tiling=held_out.label(run.tiling), over_gate=over_gate(result))
    return result


CONTROL_GROUP_ROWS = "256,256,-128,128"


def control_contiguous(ctx: Context) -> dict:
    """Contiguous layout (groups of 256, 256 and 128 rows, 128 padding rows: M a multiple of 128; N = K = 1024): the second
    group's first tile reads a scale 5% high in one K block; it must fail the rounding gate."""
    import torch

    indices, groups = _group_rows(CONTROL_GROUP_ROWS)
    m_indices = torch.tensor(indices, dtype=torch.int32, device="cuda")
    g = ctx.generator(salt=1)
    a, sfa = quantize.per_token_cast(torch.randn(len(indices), 1024, generator=g, device="cuda"))
    b, sfb = quantize.per_block_cast(torch.randn(groups, 1024, 1024, generator=g, device="cuda"))
    reference = quantize.reference(a, sfa, b, sfb, "contiguous", m_indices)
    run, d = kernel.compile_gemm(a, _wrong_scale(sfa, slice(256, 384)), b, sfb, "contiguous", m_indices)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    valid = m_indices >= 0
    result = _check(d[valid], reference[valid])
    result.update(passed=result["parts"]["rounding"]["passed"], group_rows=CONTROL_GROUP_ROWS)
    result["over_gate"] = over_gate(result)
    return result


def control_masked(ctx: Context) -> dict:
    """Masked layout, 4 groups x 128 rows, N = K = 1024: group 2's rows read a scale 5% high in one K
    block; it must fail the rounding gate."""
    import torch

    a, sfa, b, sfb = _control_operands(ctx, (4,), 128, 1024, 1024)
    reference = quantize.reference(a, sfa, b, sfb, "masked")
    masked_m = torch.full((4,), 128, dtype=torch.int32, device="cuda")
    bad = _wrong_scale(sfa, slice(0, 128))
    good = sfa.clone()
    good[2] = bad[2]   # only group 2 is wrong
    run, d = kernel.compile_gemm(a, good, b, sfb, "masked", masked_m)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    result = _check(d, reference)
    result.update(passed=result["parts"]["rounding"]["passed"], groups_x_m="4x128", over_gate=over_gate(result))
    return result


NEGATIVE_CONTROLS = {"normal-one-scale": control_normal, "contiguous-one-scale": control_contiguous,
                     "masked-one-scale": control_masked, "streamk-one-scale": control_streamk}


def compile_kernel(arch: str) -> compile_mod.Emitted:
    emitted = compile_mod.from_cute(kernel.compile_for(arch, "normal", cluster_mn=(2, 1)), arch)
    ranks = set(re.findall(r"cp\.async\.bulk\.tensor\.(\d)d", emitted.ptx))
    for layout in ("contiguous", "masked"):
        extra = compile_mod.from_cute(kernel.compile_for(arch, layout, groups=4, cluster_mn=(1, 2)), arch)
        ranks |= set(re.findall(r"cp\.async\.bulk\.tensor\.(\d)d", extra.ptx))
        emitted.extend(extra)
    if ranks == {"3"}:   # no mode dropped: the M = 1 crash came from a 1-D TMA built for a static M of 1
        emitted.facts.append("tma-3d-dynamic-shapes:all-layouts")
    streamk = compile_mod.from_cute(kernel.compile_for(arch, "normal", tile_m=64, tile_n=128, cluster_mn=(1, 1),
                                                      streamk=True), arch)
    if streamk.sass is not None and re.search(r"\bSTG\.E\.128\b", streamk.sass) and re.search(r"\bLDG\.E\.128\b",
                                                                                              streamk.sass):
        emitted.facts.append("streamk-128-bit-partials")   # the pieces' partials move 16 bytes per access
    emitted.extend(streamk)
    teaching = compile_mod.from_cute(naive.compile_for(arch), arch)
    if teaching.sass is not None and re.search(r"\bQGMMA\b", teaching.sass):
        emitted.facts.append("naive-variant:QGMMA")
    if emitted.sass is not None and not re.search(r"\b(STL|LDL)\b", emitted.sass):
        emitted.facts.append("no-local-memory:all-layouts")
    # ptxas serializes wgmma (a wait after every one) when it cannot prove the accumulators safe
    if emitted.sass is not None and emitted.sass.count("WARPGROUP.DEPBAR") < emitted.sass.count("QGMMA"):
        emitted.facts.append("wgmma-not-serialized:all-layouts")
    return emitted


def print_summary(rows: list[dict]) -> None:
    """The per-case table at the end of a run's output (TFLOP/s; cuBLAS = blockwise, per group for
    grouped cases; differing = elements of our D that differ from cuBLAS blockwise / DeepGEMM)."""
    if not rows:
        return
    fmt = lambda v, spec=".0f": "-" if v is None else format(v, spec)  # noqa: E731
    print(f"{'case':<34} {'ours':>6} {'128-row':>7} {'epiFlip':>8} {'DeepGEMM':>8} {'cuBLAS':>6} {'ours/DG':>7} "
          f"{'diff cuBLAS':>11} {'diff DG':>7} ok")
    for r in rows:
        ratio = r["ours"] / r["DeepGEMM"] if r["DeepGEMM"] else None
        print(f"{r['case']:<34} {fmt(r['ours']):>6} {fmt(r.get('tall')):>7} {fmt(r.get('whole')):>8} {fmt(r['DeepGEMM']):>8} {fmt(r['cuBLAS']):>6} "
              f"{fmt(ratio, '.3f'):>7} {fmt(r['differing'], 'd'):>11} {fmt(r['differing_deepgemm'], 'd'):>7} "
              f"{'yes' if r['passed'] else 'NO'}", flush=True)


if __name__ == "__main__":
    PROBE.main(run_case=run_case, negative_control=NEGATIVE_CONTROLS, compile=compile_kernel)
    print_summary(SUMMARY)
