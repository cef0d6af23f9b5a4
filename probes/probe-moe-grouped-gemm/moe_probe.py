"""probe-moe-grouped-gemm: an MoE layer's expert GEMM end to end - route, permute, grouped GEMM, un-permute.

Every case draws a Zipf-like routing (moe_routing.zipf_routing, the run's seed, exponent 0.5: uneven
counts per expert) for T tokens over E experts, top-8, and runs two pipelines from bf16 tokens x
(T, K) to bf16 outputs y (T, N), y[t] = sum_j w[t, j] * x[t] @ W[e(t, j)]^T:
  ours   permute x into our FP8 kernel's layout (contiguous: segments padded to 128 rows with
         m_indices; masked: (E, capacity, K) with the counts on the device), quantize per token
         (1x128), the block-scaled FP8 grouped GEMM (artifacts/kernels/fp8_blockscale_gemm, weights
         quantized per 128x128 block beforehand), un-permute;
  bf16   permute x into one contiguous (rows, K) buffer, torch._grouped_mm with the experts' offsets
         where this torch has it (else one torch.matmul per expert, the loop captured in a CUDA
         graph by ctx.bench), un-permute.
Correctness first (outputs poisoned): ours against the FP32 pipeline on the dequantized operands,
bf16 against the FP32 pipeline on the bf16 operands, both with the bf16 gate. Then ctx.bench times
both pipelines and each GEMM alone; the headline is ours (whole pipeline) in TFLOP/s of the routed
rows' useful FLOPs (2 T top_k N K) against the bf16 pipeline.

Run through the runner: kernelwiki probe run --probe probe-moe-grouped-gemm [--compile-only]
"""

from __future__ import annotations

import moe_routing as routing_mod  # next to this script, whose folder Python puts first on sys.path
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

ZIPF_EXPONENT = 0.5
CONTIGUOUS_ALIGN = 128   # our kernel's contiguous layout: segments aligned to its 128-row M tile
MASKED_ALIGN = 64        # capacity rounded up to a 64-row tile
WEIGHT_CHUNK = 16        # experts quantized at a time (bounds the FP32 temporaries)
GATE = "bf16"


def _weights(experts: int, n: int, k: int, generator):
    """bf16 W (E, N, K) and its per-block FP8 (b, sfb), built a few experts at a time."""
    import torch

    from artifacts.kernels.fp8_blockscale_gemm import quantize

    w = torch.empty(experts, n, k, dtype=torch.bfloat16, device="cuda")
    b = torch.empty(experts, n, k, dtype=torch.float8_e4m3fn, device="cuda")
    sfb = torch.empty(experts, -(-n // 128), k // 128, dtype=torch.float32, device="cuda")
    for e0 in range(0, experts, WEIGHT_CHUNK):
        chunk = torch.randn(min(WEIGHT_CHUNK, experts - e0), n, k, generator=generator, device="cuda")
        w[e0:e0 + len(chunk)] = chunk.bfloat16()
        b[e0:e0 + len(chunk)], sfb[e0:e0 + len(chunk)] = quantize.per_block_cast(w[e0:e0 + len(chunk)])
    return w, b, sfb


def _grouped_mm_available():
    import torch

    return hasattr(torch, "_grouped_mm")


def _bf16_gemm(a, w, counts: list[int], out):
    """(launch, name, refusal): the bf16 grouped GEMM of rows a (sum counts, K) by experts w (E, N, K);
    launch() returns the (rows, N) product. torch._grouped_mm where this torch has and accepts it,
    else one torch.matmul per expert into `out` (ctx.bench captures the loop in one CUDA graph)."""
    import torch

    refusal = None if _grouped_mm_available() else "torch has no _grouped_mm"
    if refusal is None:
        ends = torch.tensor(list(_cumsum(counts)), dtype=torch.int32, device="cuda")
        wt = w.transpose(1, 2)   # (E, K, N), K contiguous

        def grouped():
            return torch._grouped_mm(a, wt, offs=ends)
        try:
            grouped()
            return grouped, "torch._grouped_mm", None
        except (RuntimeError, TypeError, ValueError) as err:
            refusal = f"torch._grouped_mm refused: {str(err).splitlines()[0][:300]}"
            print(f"  {refusal}", flush=True)
    starts = [0, *_cumsum(counts)][:-1]

    def loop():
        for e, (s, c) in enumerate(zip(starts, counts)):
            if c:
                torch.matmul(a[s:s + c], w[e].t(), out=out[s:s + c])
        return out
    return loop, "per-expert torch.matmul loop", refusal


def _cumsum(values):
    total = 0
    for v in values:
        total += v
        yield total


def _index(array):
    import torch

    return torch.from_numpy(array).to("cuda")


def _gather(x, source):
    """Rows of x by `source` (device int64, -1 = a zero row)."""
    import torch

    safe = source.clamp(min=0)
    return torch.where((source >= 0)[:, None], x.index_select(0, safe), torch.zeros((), dtype=x.dtype, device=x.device))


def _unpermute(rows, positions, weights, out):
    """out[t] = sum_j weights[t, j] * rows[positions[t, j]] in FP32, rounded once."""
    t, top_k = positions.shape
    picked = rows.index_select(0, positions.reshape(-1)).view(t, top_k, -1).float()
    out.copy_((picked * weights[:, :, None]).sum(dim=1))


def build(params: dict, ctx: Context, index: int = 0, plan_fn=None) -> dict:
    """Input set `index`: routing, weights, tokens, both pipelines' launchers and outputs."""
    import torch

    from artifacts.kernels.fp8_blockscale_gemm import fp8_blockscale_gemm as kernel
    from artifacts.kernels.fp8_blockscale_gemm import quantize

    tokens, experts, top_k = int(params["tokens"]), int(params["experts"]), int(params["top_k"])
    n, k, layout = int(params["n"]), int(params["k"]), params["layout"]
    routing = routing_mod.zipf_routing(tokens, experts, top_k, ctx.seed + index, ZIPF_EXPONENT)
    plan = (routing_mod.contiguous_plan(routing, CONTIGUOUS_ALIGN) if layout == "contiguous"
            else routing_mod.masked_plan(routing, MASKED_ALIGN))
    gather_plan = plan_fn(plan) if plan_fn else plan
    dense = routing_mod.contiguous_plan(routing, 1)   # the bf16 baseline: no padding
    g = ctx.generator(salt=7919 * index)
    w, b, sfb = _weights(experts, n, k, g)
    x = torch.randn(tokens, k, generator=g, device="cuda").bfloat16()
    weights = _index(routing.weights)
    s = {"routing": routing, "plan": plan, "x": x, "w": w, "b": b, "sfb": sfb, "weights": weights,
         "y_ours": torch.empty(tokens, n, dtype=torch.bfloat16, device="cuda"),
         "y_bf16": torch.empty(tokens, n, dtype=torch.bfloat16, device="cuda")}
    source, positions = _index(gather_plan.source), _index(plan.positions)
    if layout == "contiguous":
        group_info = _index(plan.m_indices.astype("int32"))
        shape = (plan.source.size, k)
    else:
        group_info = _index(plan.counts.astype("int32"))
        shape = (experts, plan.capacity, k)
    a_bf16 = _gather(x, source).view(shape)
    a, sfa = quantize.per_token_cast(a_bf16)
    run_gemm, d = kernel.compile_gemm(a, sfa, b, sfb, layout, group_info)
    s.update(a_fp8=a, sfa=sfa, d=d, gemm_ours=run_gemm)

    s["ours"] = _ours_pipeline(x, source, shape, a, sfa, run_gemm, d, n, positions, weights, s["y_ours"])

    dense_source, dense_positions = _index(dense.source), _index(dense.positions)
    rows = torch.empty(dense.source.size, k, dtype=torch.bfloat16, device="cuda")
    d_bf16 = torch.empty(dense.source.size, n, dtype=torch.bfloat16, device="cuda")
    gemm_bf16, s["bf16_name"], s["bf16_refusal"] = _bf16_gemm(rows, w, [int(c) for c in dense.counts], d_bf16)

    def bf16_pipeline():
        rows.copy_(x.index_select(0, dense_source))
        _unpermute(gemm_bf16(), dense_positions, weights, s["y_bf16"])
    # what the smallest candidate (our FP8 GEMM alone) reads and writes
    s.update(bf16=bf16_pipeline, gemm_bf16=gemm_bf16, rows=rows,
             set_bytes=sum(t.numel() * t.element_size() for t in (b, sfb, a, sfa, d)))
    return s


def _ours_pipeline(x, source, shape, a, sfa, run_gemm, d, n, positions, weights, y):
    """Permute (gather rows, quantize per token into the kernel's a / sfa), GEMM, un-permute."""
    from artifacts.kernels.fp8_blockscale_gemm import quantize

    def launch():
        q, scales = quantize.per_token_cast(_gather(x, source).view(shape))
        a.copy_(q)
        sfa.copy_(scales)
        run_gemm()
        _unpermute(d.view(-1, n), positions, weights, y)
    return launch


def references(s: dict) -> tuple:
    """FP32 pipelines: on the dequantized FP8 operands (ours) and on the bf16 operands (baseline)."""
    import torch

    from artifacts.kernels.fp8_blockscale_gemm import quantize

    routing, x = s["routing"], s["x"]
    xq, sx = quantize.per_token_cast(x)
    x_deq = quantize.dequantize_a(xq, sx)
    tokens, n = x.shape[0], s["w"].shape[1]
    ref_ours = torch.zeros(tokens, n, dtype=torch.float32, device="cuda")
    ref_bf16 = torch.zeros_like(ref_ours)
    experts = _index(routing.experts)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for e in range(routing.num_experts):
            hit = (experts == e).nonzero()
            if not len(hit):
                continue
            t, j = hit[:, 0], hit[:, 1]
            wt = s["weights"][t, j][:, None]
            w_deq = quantize.dequantize_b(s["b"][e], s["sfb"][e])
            ref_ours.index_add_(0, t, wt * (x_deq[t] @ w_deq.t()))
            ref_bf16.index_add_(0, t, wt * (x[t].float() @ s["w"][e].float().t()))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    return ref_ours, ref_bf16


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    p = case["params"]
    s = build(p, ctx)
    ref_ours, ref_bf16 = references(s)
    gates.poison(s["y_ours"])
    gates.poison(s["y_bf16"])
    s["ours"]()
    s["bf16"]()
    torch.cuda.synchronize()
    correctness = gates.combine({"ours": gates.check(s["y_ours"], ref_ours, GATE),
                                 "bf16": gates.check(s["y_bf16"], ref_bf16, GATE)})
    del ref_ours, ref_bf16
    plan, routing = s["plan"], s["routing"]
    names = {"ours": "ours: permute + FP8 grouped GEMM + un-permute", "ours_gemm": "ours: FP8 grouped GEMM only",
             "bf16": f"bf16: permute + {s['bf16_name']} + un-permute", "bf16_gemm": f"bf16: {s['bf16_name']} only"}
    launchers = {"ours": "ours", "ours_gemm": "gemm_ours", "bf16": "bf16", "bf16_gemm": "gemm_bf16"}
    candidates = {names[key]: (lambda inputs, attr=attr: inputs[attr]()) for key, attr in launchers.items()}
    timing = ctx.bench(candidates, lambda i: s if i == 0 else build(p, ctx, i), s["set_bytes"], iters=10, warmup=2)
    flops = 2 * routing.experts.size * s["w"].shape[1] * s["w"].shape[2]
    tflops = {name: flops / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    metrics = {"routed_rows": int(routing.experts.size), "buffer_rows": int(plan.source.size),
               "max_rows_per_expert": int(plan.counts.max()), "min_rows_per_expert": int(plan.counts.min()),
               "empty_experts": int((plan.counts == 0).sum()), "zipf_exponent": ZIPF_EXPONENT,
               "routing_seed": ctx.seed, "bf16_grouped_gemm": s["bf16_name"],
               "grouped_mm_in_torch": _grouped_mm_available(), "torch": torch.__version__}
    if s["bf16_refusal"]:
        metrics["bf16_grouped_mm_refusal"] = s["bf16_refusal"]
    if plan.capacity:
        metrics["capacity"] = plan.capacity
    for key, name in names.items():
        metrics[f"{key}_us"] = round(timing[name]["median_ms"] * 1e3, 1)
        metrics[f"{key}_tflops"] = round(tflops[name], 2)
    ours, base = names["ours"], names["bf16"]
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "baselines": [{"name": name, "value": round(v, 2), "ratio": round(tflops[ours] / v, 4)}
                          for name, v in tflops.items() if name != ours],
            "headline": ctx.headline("tflops", tflops[ours], "TFLOP/s", peak_key="e4m3", baseline=(base, tflops[base]))}


def negative_control(ctx: Context) -> dict:
    """The permutation off by one row for one expert (the one with the median row count): its rows
    gathered one row late, the un-permute unchanged; Qwen3 expert shape, contiguous layout."""
    import torch

    params = {"tokens": 512, "experts": 128, "top_k": 8, "n": 3072, "k": 4096, "layout": "contiguous"}
    probe_plan = routing_mod.contiguous_plan(routing_mod.zipf_routing(512, 128, 8, ctx.seed, ZIPF_EXPONENT),
                                             CONTIGUOUS_ALIGN)
    target = routing_mod.median_expert(probe_plan)
    s = build(params, ctx, plan_fn=lambda plan: routing_mod.off_by_one(plan, target))
    ref_ours, _ = references(s)
    gates.poison(s["y_ours"])
    s["ours"]()
    torch.cuda.synchronize()
    return {**gates.check(s["y_ours"], ref_ours, GATE), "expert": target, "rows_of_that_expert": int(probe_plan.counts[target])}


K_TAIL = 64


def k_tail_control(ctx: Context) -> dict:
    """The last 64 of K (half of the last 128-wide scale block) never read, for every expert: the
    weights' FP8 copy zeroed there after the reference was taken from it. A bug spread over every
    row: about 6x the bf16 gate's relative and element tolerances (the off-by-one row reaches the
    relative test but misses the element test by 50x, as a wrong row does)."""
    import torch

    params = {"tokens": 512, "experts": 128, "top_k": 8, "n": 3072, "k": 4096, "layout": "contiguous"}
    s = build(params, ctx)
    ref_ours, _ = references(s)
    s["b"][..., -K_TAIL:] = 0
    gates.poison(s["y_ours"])
    s["ours"]()
    torch.cuda.synchronize()
    return gates.check(s["y_ours"], ref_ours, GATE)


def compile_kernel(arch: str) -> compile_mod.Emitted:
    """Our FP8 kernel's two grouped layouts at the tilings small groups take (64- and 128-row tiles)."""
    from artifacts.kernels.fp8_blockscale_gemm import fp8_blockscale_gemm as kernel

    emitted = compile_mod.from_cute(kernel.compile_for(arch, "contiguous", groups=4, cluster_mn=(1, 1)), arch)
    emitted.extend(compile_mod.from_cute(kernel.compile_for(arch, "masked", groups=4, tile_m=64, tile_n=64,
                                                            cluster_mn=(1, 1)), arch))
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control={"off-by-one-row": negative_control,
                                                              "k-tail": k_tail_control}, compile=compile_kernel)
