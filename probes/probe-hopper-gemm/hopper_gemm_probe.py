"""probe-hopper-gemm: our persistent warp-specialized wgmma GEMM against cuBLAS (and quack), bf16, fp16, tf32, fp8.

Each case: normal inputs (fp8: quantized per tensor, scale = amax / 448), D checked against an
FP32 (tf32: FP64) matmul of the same (dequantized) operands, with tolerances derived from cuBLAS's
error at the same precision (gates.reference_tolerance; output poisoned first); then
our kernel, cuBLAS and (llm-shapes) quack's gemm(tuned=False) timed by ctx.bench (CUDA graphs;
short kernels as many launches over input sets rotated past 3x L2, long ones after an L2 read
sweep; shuffled order, SM clock before and after). The configuration our heuristic chose goes into metrics.config; for M <= 64,
metrics.b_stream_fraction = bytes of B / time / the copy bandwidth of probe-calibration.
Compile-only mode compiles every configuration the heuristic can pick for sm_90a with fake
tensors (dynamic shapes) and scans PTX and SASS.

Run through the runner: kernelwiki probe run --probe probe-hopper-gemm [--compile-only]
"""

from __future__ import annotations

import re
import sys
import time

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates, tools
from kernelwiki.harness.probe import REPO_ROOT, Context, Probe
from kernelwiki.harness.timing import bound

import held_out  # next to this script, whose folder Python puts first on sys.path
from artifacts.kernels.hopper_gemm import autotune, hopper_gemm  # our kernel, importable without a GPU

AB_DTYPES = {"bf16": hopper_gemm.cutlass.BFloat16, "fp16": hopper_gemm.cutlass.Float16,
             "tf32": hopper_gemm.cutlass.TFloat32, "e4m3": hopper_gemm.cutlass.Float8E4M3FN}
_D_DTYPE = {"fp16": hopper_gemm.cutlass.Float16, "tf32": hopper_gemm.cutlass.Float32}
TF32_MASK = -8192   # clears the 13 low mantissa bits: fp32 values exactly representable in tf32
E4M3_MAX = 448.0
PROBE = Probe(__file__)
LLM_ROWS: list[dict] = []   # the llm-shapes cases run so far in this process, for llm-shapes-summary
PRECOMPILED: set[str] = set()   # the sets whose kernels precompile_for has compiled in this process
STRONGEST = "strongest of cuBLAS and quack, per shape"


def accumulation_floor(k: int) -> float:
    """8 x the FP32 unit roundoff x sqrt(K): a generous bound on the relative error of summing K exact
    products in FP32 in any order (random-walk rounding), about 3e-5 at K = 4096. The gate's tolerance
    is derived from cuBLAS's error at the same precision, but cuBLAS may sum a GEMV in another order
    or in full FP32, so a correct kernel's FP32 accumulation may sit above that; never below this."""
    return 8 * 2.0**-24 * k**0.5


def _shape(params: dict) -> tuple[int, int, int]:
    if "shape" in params:
        return tuple(int(x) for x in params["shape"].split("x"))
    return int(params["m"]), int(params["n"]), int(params["k"])


def _settings(params: dict) -> dict:
    """Explicit kernel settings of a case; the llm-shapes cases leave them to choose_config."""
    settings = {}
    if "tile_n" in params:
        settings["tile_n"] = int(params["tile_n"])
    if "cluster" in params:
        settings["cluster_mn"] = tuple(int(x) for x in str(params["cluster"]).split("x"))
    return settings


def _inputs(dtype: str, m: int, n: int, k: int, seed: int, batch: int = 0, with_reference: bool = True):
    """(a, b, scale_a, scale_b, reference) for dtype bf16, fp16, tf32 or e4m3: a ([L,] M, K), b ([L,] N, K)
    (batch 0: no batch mode); reference = FP32 (tf32: FP64) product of what the kernel multiplies,
    times the scales (None without with_reference: an input set that is only timed)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    lead = (batch,) if batch else ()
    a = torch.randn(*lead, m, k, generator=g, device="cuda")
    b = torch.randn(*lead, n, k, generator=g, device="cuda")

    def product(x, y, scale: float | None = None):
        if not with_reference:
            return None
        out = x @ y.transpose(-1, -2)
        return out if scale is None else out * scale

    if dtype == "tf32":  # fp32 tensors holding tf32 values, so our kernel and cuBLAS TF32 see the same inputs
        a, b = ((x.view(torch.int32) & TF32_MASK).view(torch.float32) for x in (a, b))
        reference = product(a.double(), b.double())
        return a, b, 1.0, 1.0, None if reference is None else reference.float()
    if dtype in ("bf16", "fp16"):
        a, b = (a.bfloat16(), b.bfloat16()) if dtype == "bf16" else (a.half(), b.half())
        return a, b, 1.0, 1.0, product(a.float(), b.float())
    scale_a, scale_b = (float(x.abs().max()) / E4M3_MAX for x in (a, b))
    a8, b8 = (a / scale_a).to(torch.float8_e4m3fn), (b / scale_b).to(torch.float8_e4m3fn)
    return a8, b8, scale_a, scale_b, product(a8.float(), b8.float(), scale_a * scale_b)


def _case_operands(params: dict, dtype: str, m: int, n: int, k: int, seed: int, with_reference: bool = True):
    """The case's operands as _inputs returns them, in the case's layout (a row view, MN-major storage)."""
    if params.get("row_view"):   # M = 1 as one row of a larger matrix, ordinary strides
        a, b, scale_a, scale_b, reference = _inputs(dtype, 8, n, k, seed, with_reference=with_reference)
        a, reference = a[5:6], None if reference is None else reference[5:6]
    else:
        a, b, scale_a, scale_b, reference = _inputs(dtype, m, n, k, seed, int(params.get("batch", 0)), with_reference)
    # MN-major operands: the same values stored transposed (M or N contiguous)
    if params.get("a_major") == "mn":
        a = a.t().contiguous().t()
    if params.get("b_major") == "mn":
        b = b.t().contiguous().t()
    return a, b, scale_a, scale_b, reference


def _cublas(dtype: str, a, b, scale_a: float, scale_b: float, out):
    """{name: callable} of the cuBLAS baselines at the case's precision, writing into `out`."""
    import torch

    if dtype != "e4m3":
        return {"cuBLAS": lambda: torch.matmul(a, b.transpose(-1, -2), out=out)}
    sa, sb = (torch.tensor(x, device="cuda") for x in (scale_a, scale_b))
    return {name: (lambda fast=fast: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                                      use_fast_accum=fast))
            for name, fast in (("cuBLAS fast-accum", True), ("cuBLAS", False))}


def _check(d, reference, dtype: str, cublas_out, k: int) -> dict:
    """Our output against the reference, with tolerances derived from cuBLAS's error at the same
    precision (gates.reference_tolerance): a kernel that rounded tf32 through bf16 (~3e-3), or dropped
    a K tile, lands far above them."""
    return gates.check(d.float(), reference, dtype,
                       **gates.reference_tolerance(cublas_out.float(), reference, floor=accumulation_floor(k)))


def _cublas_result(dtype: str, a, b, scale_a: float, scale_b: float, shape):
    """cuBLAS's product at the case's precision (the baseline the gate's tolerance is derived from)."""
    import torch

    out = torch.empty(shape, dtype=torch.bfloat16 if dtype == "e4m3" else
                      (torch.float32 if dtype == "tf32" else a.dtype), device="cuda")
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        name = "cuBLAS fast-accum" if dtype == "e4m3" else "cuBLAS"
        return _cublas(dtype, a, b, scale_a, scale_b, out)[name]()   # _scaled_mm returns a new tensor
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before


def _quack(a, b):
    """quack 0.6.5's gemm (tuned=False) on the same operands, as (launch, its output), or (None, the
    reason) when it cannot run them."""
    import torch

    try:
        from quack.gemm_interface import gemm as quack_gemm
    except ImportError as err:
        return None, f"quack not importable: {err}"
    out = torch.empty(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)
    fn = lambda: quack_gemm(a, b.t(), out=out, tuned=False)   # noqa: E731  (quack takes B as (K, N))
    try:
        fn()
        torch.cuda.synchronize()
    except Exception as err:   # noqa: BLE001  (a shape quack refuses is recorded, not fatal)
        return None, f"quack failed: {type(err).__name__}: {str(err)[:200]}"
    return fn, out


HOST_DRIVER = """
import sys, time, torch
from artifacts.kernels.hopper_gemm import hopper_gemm
from kernelwiki.harness import gates, tools
a = torch.randn(1, 4096, device="cuda").bfloat16(); b = torch.randn(4096, 4096, device="cuda").bfloat16()
torch.cuda.synchronize()
t0 = time.perf_counter(); run, d = hopper_gemm.compile_gemm(a, b); t1 = time.perf_counter()
gates.poison(d); run(); torch.cuda.synchronize()
print("HOST", t1 - t0)
print(tools.driver_line(gates.check(d, a.float() @ b.float().t(), "bf16")))
"""


def host_overhead(ctx: Context) -> dict:
    """Host cost of a first call: in a fresh process with an empty kernel cache (compile), in a fresh
    process with the cache warm (load from disk), in-process for a new shape of the same
    configuration, and one launch of run()."""
    import os
    import subprocess
    import tempfile
    import time

    import torch

    seconds, checks = [], {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "KERNELWIKI_KERNEL_CACHE": cache}
        for label in ("cold cache", "disk cache"):
            out = subprocess.run([sys.executable, "-c", HOST_DRIVER], cwd=REPO_ROOT, env=env, capture_output=True,
                                 text=True, timeout=300)
            line = next((x for x in out.stdout.splitlines() if x.startswith("HOST ")), None)
            verdict = tools.driver_result(out.stdout)
            if line is None or not verdict["driver_ran"]:
                raise RuntimeError(f"host-overhead driver failed: {out.stderr[-500:]}")
            seconds.append(float(line.split()[1]))
            checks[label] = verdict["gate"]
    a, b = torch.randn(3, 4096, device="cuda").bfloat16(), torch.randn(4096, 4096, device="cuda").bfloat16()
    hopper_gemm.compile_gemm(a, b)   # this configuration, in memory
    a2 = torch.randn(5, 4096, device="cuda").bfloat16()
    t0 = time.perf_counter()
    run, d = hopper_gemm.compile_gemm(a2, b)
    new_shape_s = time.perf_counter() - t0
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(100):
        run()
    launch_us = (time.perf_counter() - t0) / 100 * 1e6   # host time of a launch call, not GPU time
    torch.cuda.synchronize()
    checks["new shape"] = gates.check(d, a2.float() @ b.float().t(), "bf16")
    correctness = gates.combine(checks)
    return {"correctness": correctness,
            "metrics": {"first_call_cold_cache_s": round(seconds[0], 3), "first_call_disk_cache_s": round(seconds[1], 3),
                        "new_shape_same_config_ms": round(new_shape_s * 1e3, 3), "run_launch_us": round(launch_us, 2)},
            "headline": ctx.headline("first-call-disk-cache", seconds[1], "s")}


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    params = case["params"]
    if params.get("set") == "host-overhead":
        return host_overhead(ctx)
    if params.get("set") == "held-out":
        return run_held_out(params, ctx)
    if params.get("set") == "llm-shapes-summary":
        return llm_shapes_summary(ctx)
    if params.get("set") == "schedules":
        return run_schedules(params, ctx)
    dtype = params["dtype"]
    m, n, k = _shape(params)
    if params.get("set") == "llm-shapes" and "llm-shapes" not in PRECOMPILED:   # the set's kernels at once,
        PRECOMPILED.add("llm-shapes")                                          # in parallel processes
        hopper_gemm.precompile_for(sorted(held_out.tuning_set(PROBE.spec["cases"])))
    a, b, scale_a, scale_b, reference = _case_operands(params, dtype, m, n, k, ctx.seed)
    settings = _settings(params)
    run, d = hopper_gemm.compile_gemm(a, b, alpha=scale_a * scale_b, **settings)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    cublas_out = _cublas_result(dtype, a, b, scale_a, scale_b, reference.shape)
    correctness = _check(d, reference, dtype, cublas_out, k)
    llm_shapes = params.get("set") == "llm-shapes"
    metrics: dict = {}
    quack0 = _quack(a, b) if llm_shapes else (None, None)
    if quack0[0] is not None:   # checked with our gate before it is timed
        correctness["quack_passed"] = _check(quack0[1], reference, dtype, cublas_out, k)["passed"]
    del reference, cublas_out
    # the one-call API (gemm) reuses the same compiled kernel and must give the same bits
    same = torch.equal(hopper_gemm.gemm(a, b, alpha=scale_a * scale_b, **settings), d)
    correctness.update(gemm_api_matches=same, passed=correctness["passed"] and same)

    def make_set(i: int) -> dict:
        """Input set i: {candidate: its launch on this set's operands} (set 0: the operands checked)."""
        x, w, sx, sw, _ = (a, b, scale_a, scale_b, None) if i == 0 else \
            _case_operands(params, dtype, m, n, k, ctx.seed + 1000 * i, with_reference=False)
        ours = run if i == 0 else hopper_gemm.compile_gemm(x, w, alpha=sx * sw, **settings)[0]
        launches = {"ours": ours, **_cublas(dtype, x, w, sx, sw, torch.empty_like(d))}
        if llm_shapes:
            quack, reason = quack0 if i == 0 else _quack(x, w)
            if quack is not None:
                launches["quack"] = quack
            elif i == 0:
                metrics["quack"] = reason
        return launches

    tf32_before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"   # cuBLAS TF32 for the tf32 cases only
    metrics.update(config=run.config.describe(), stages=hopper_gemm.HopperGemm(
        AB_DTYPES[dtype], _D_DTYPE.get(dtype, AB_DTYPES["bf16"]), tile_n=run.config.tile_n, tile_m=run.config.tile_m,
        reduce_splits=run.config.split_k > 1).stages)
    try:
        first = make_set(0)
        set_bytes = sum(t.numel() * t.element_size() for t in (a, b, d))   # what one launch touches
        timing = ctx.bench(bound(list(first)), lambda i: first if i == 0 else make_set(i), set_bytes,
                           iters=30, warmup=5)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    flops = 2 * m * n * k * int(params.get("batch", 1))
    tflops = {name: flops / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    if m <= 64 and ctx.ceilings.get("copy"):
        b_bytes = b.numel() * b.element_size()
        metrics["b_stream_fraction"] = round(b_bytes / (timing["ours"]["median_ms"] * 1e-3) / 1e12
                                             / float(ctx.ceilings["copy"]), 4)
        metrics["b_bytes"] = b_bytes
    result = {"correctness": correctness, "timing": timing, "metrics": metrics,
              **headline(ctx, tflops, dtype, correctness, metrics.get("quack"))}
    if llm_shapes:
        LLM_ROWS.append({"passed": correctness["passed"], "ours": tflops["ours"],
                         "best": result["headline"].get("baseline_value"), "choose_config": result["headline"].get("ratio")})
    return result


def schedule_settings(params: dict) -> dict:
    """{candidate: compile_gemm settings} of a schedules case: the two schedules with the same wgmma per
    warpgroup (64 x tile_n) and the same cluster - cooperative with two warpgroups on a 128-row tile
    (what choose_config picks at these shapes), ping-pong with each warpgroup on its own 64-row tile -
    and cooperative on the ping-pong CTA tile (64 rows, one consumer warpgroup: no overlap at all)."""
    tile_n = int(params["tile_n"])
    cluster = tuple(int(x) for x in str(params["cluster"]).split("x"))
    common = {"tile_n": tile_n, "cluster_mn": cluster, "split_k": 1}
    return {"ours-pingpong": {**common, "tile_m": 64, "schedule": "pingpong"},
            "ours-cooperative": {**common, "tile_m": 128},
            "ours-cooperative-64": {**common, "tile_m": 64}}


def run_schedules(params: dict, ctx: Context) -> dict:
    """The ping-pong and cooperative consumer schedules in one run on one shape, each gated, timed with
    cuBLAS and quack. Headline: ping-pong against the strongest baseline; the ping-pong / cooperative
    ratios go into metrics (and beside the headline as context)."""
    import torch

    if params.get("dtype") != "bf16":
        raise ValueError(f"schedules: dtype {params.get('dtype')!r}; the schedules are compared in bf16")
    m, n, k = _shape(params)
    settings = schedule_settings(params)
    a, b, _, _, reference = _inputs("bf16", m, n, k, ctx.seed)
    cublas_out = _cublas_result("bf16", a, b, 1.0, 1.0, reference.shape)
    checks, runs = {}, {}
    for name, setting in settings.items():
        run, d = hopper_gemm.compile_gemm(a, b, **setting)
        gates.poison(d)
        run()
        torch.cuda.synchronize()
        checks[name] = _check(d, reference, "bf16", cublas_out, k)
        runs[name] = run
    quack0 = _quack(a, b)
    quack_passed = quack0[0] is not None and _check(quack0[1], reference, "bf16", cublas_out, k)["passed"]
    del reference, cublas_out
    correctness = {**checks["ours-pingpong"], "passed": all(c["passed"] for c in checks.values()),
                   **{f"{name}_passed": c["passed"] for name, c in checks.items()}, "quack_passed": quack_passed}

    def make_set(i: int) -> dict:
        x, w = (a, b) if i == 0 else _inputs("bf16", m, n, k, ctx.seed + 1000 * i, with_reference=False)[:2]
        launches = {name: runs[name] if i == 0 else hopper_gemm.compile_gemm(x, w, **setting)[0]
                    for name, setting in settings.items()}
        launches.update(_cublas("bf16", x, w, 1.0, 1.0, torch.empty(m, n, dtype=x.dtype, device="cuda")))
        quack = quack0[0] if i == 0 else (_quack(x, w)[0] if quack0[0] is not None else None)
        if quack is not None:
            launches["quack"] = quack
        return launches

    first = make_set(0)
    set_bytes = 2 * (m * k + n * k + len(first) * m * n)   # bf16 operands and every candidate's output
    timing = ctx.bench(bound(list(first)), lambda i: first if i == 0 else make_set(i), set_bytes, iters=30, warmup=5)
    tflops = {name: 2 * m * n * k / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    pingpong = tflops["ours-pingpong"]
    metrics = {"configs": "; ".join(f"{name}: {run.config.describe()}" for name, run in runs.items()),
               "pingpong_over_cooperative": round(pingpong / tflops["ours-cooperative"], 4),
               "pingpong_over_cooperative_64": round(pingpong / tflops["ours-cooperative-64"], 4)}
    if quack0[0] is None:
        metrics["quack"] = quack0[1]
    result = ctx.headline_against("tflops", pingpong, "TFLOP/s",
                                  {"cuBLAS": tflops["cuBLAS"], "quack": tflops.get("quack")},
                                  correct={"cuBLAS": True, "quack": quack_passed}, peak_key="bf16", ceiling_key="bf16",
                                  context={"ours-cooperative": tflops["ours-cooperative"],
                                           "ours-cooperative-64": tflops["ours-cooperative-64"]})
    best = result["headline"].get("baseline_value")
    metrics["cooperative_over_best_baseline"] = round(tflops["ours-cooperative"] / best, 4) if best else None
    return {"correctness": correctness, "timing": timing, "metrics": metrics, **result}


def llm_shapes_summary(ctx: Context) -> dict:
    """Geomean and worst of ours / the strongest baseline over the llm-shapes cases this run measured
    (listed before this case in probe.yaml); refused when the run did not measure all of them."""
    expected = len(held_out.tuning_set(PROBE.spec["cases"]))
    if len(LLM_ROWS) != expected:
        raise ValueError(f"llm-shapes-summary needs the {expected} llm-shapes cases in the same run; "
                         f"this run measured {len(LLM_ROWS)}")
    complete = all(row["best"] for row in LLM_ROWS)
    return {"correctness": {"passed": all(row["passed"] for row in LLM_ROWS), "cases": len(LLM_ROWS)},
            "metrics": {"shapes": len(LLM_ROWS), "headline_statistic": "geomean over the llm-shapes cases",
                        **held_out.summary(LLM_ROWS, ("choose_config",))},
            **ctx.headline_against("tflops", held_out.geomean([r["ours"] for r in LLM_ROWS]),
                                   "TFLOP/s", {STRONGEST: held_out.geomean([r["best"] for r in LLM_ROWS]) if complete else None},
                                   peak_key="bf16")}


def _held_out_launches(x, w, configs: dict, with_quack: bool) -> tuple[dict, dict]:
    """({name: launch}, {name: (run, output)} of ours) on one input set: ours with each forced
    configuration (None: choose_config's), cuBLAS, and quack."""
    import torch

    out = {}
    for name, config in configs.items():
        forced = {} if config is None else {"tile_m": config.tile_m, "tile_n": config.tile_n,
                                            "cluster_mn": config.cluster_mn, "split_k": config.split_k,
                                            "swap_ab": config.swap_ab}
        out[name] = hopper_gemm.compile_gemm(x, w, **forced)
    launches = {name: run for name, (run, _) in out.items()}
    launches.update(_cublas("bf16", x, w, 1.0, 1.0, torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device="cuda")))
    if with_quack:
        quack, _ = _quack(x, w)
        if quack is not None:
            launches["quack"] = quack
    return launches, out


def _held_out_shape(shape: dict, index: int, nvmmh_config, ctx: Context) -> dict:
    """One held-out shape: gate every configuration of ours and quack, time them all with cuBLAS, and
    return its row (ratios to the shape's strongest correct baseline)."""
    import torch

    m, n, k = shape["m"], shape["n"], shape["k"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # what the default runs (swap-AB where the cost model prefers it); the sweep is tune=True's candidates
    chosen = hopper_gemm.choose_config(m, n, k, 1, sms, 16, allow_swap=True)
    configs = {"ours": None}
    configs.update({held_out.label(c): c for c in autotune.sweep(m, n, k, 1, sms, 16) if c != chosen})
    nvmmh_name = None
    if nvmmh_config is not None:
        nvmmh_name = "ours" if nvmmh_config == chosen else held_out.label(nvmmh_config)
        configs.setdefault(nvmmh_name, nvmmh_config)
    seed = ctx.seed + 7919 * (index + 1)
    a, b, _, _, reference = _inputs("bf16", m, n, k, seed)
    cublas_out = _cublas_result("bf16", a, b, 1.0, 1.0, reference.shape)
    launches, built = _held_out_launches(a, b, configs, with_quack=True)
    incorrect = []
    for name, (run, d) in built.items():
        gates.poison(d)
        run()
        torch.cuda.synchronize()
        if not _check(d, reference, "bf16", cublas_out, k)["passed"]:
            incorrect.append(name)
            launches.pop(name)
    quack_ok = "quack" in launches and _check(_quack(a, b)[1], reference, "bf16", cublas_out, k)["passed"]
    if not quack_ok:
        launches.pop("quack", None)
    del reference, cublas_out
    # the first pass is tune=True's own: its fastest is what gemm(tune=True) would run
    first_pass = hopper_gemm.time_sweep(a, b)
    tuned = min(first_pass, key=first_pass.__getitem__)
    tuned_name = "ours" if tuned == chosen else held_out.label(tuned)
    if "ours" in incorrect or nvmmh_name in incorrect or tuned_name in incorrect:
        return {**shape, "passed": False, "incorrect": incorrect}
    kept = {"ours", nvmmh_name, tuned_name, "cuBLAS", "quack"}
    named = {"ours" if config == chosen else held_out.label(config): ms for config, ms in first_pass.items()}
    finalists = held_out.finalists({name: ms for name, ms in named.items() if name in launches and name not in kept})
    names = [name for name in launches if name in kept or name in finalists]
    first = launches

    def make_set(i: int) -> dict:
        if i == 0:
            return first
        x, y, _, _, _ = _inputs("bf16", m, n, k, seed + i, with_reference=False)
        fresh, _ = _held_out_launches(x, y, {name: configs[name] for name in names if name in configs}, quack_ok)
        return {name: fresh[name] for name in names}

    set_bytes = 2 * (m * k + n * k + m * n)
    timing = ctx.bench(bound(names), make_set, set_bytes, iters=held_out.SWEEP_ITERS, warmup=2)
    tflops = {name: 2 * m * n * k / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    best = max(tflops[name] for name in ("cuBLAS", "quack") if name in tflops)
    ours_names = [name for name in tflops if name in configs]
    oracle = max(ours_names, key=tflops.__getitem__)
    return {**shape, "passed": True, "incorrect": incorrect, "ours": tflops["ours"], "best": best,
            "cublas": tflops["cuBLAS"], "quack": tflops.get("quack"),
            "config": held_out.label(chosen), "choose_config": tflops["ours"] / best,
            "nvmmh": tflops[nvmmh_name] / best if nvmmh_name else None,
            "tuned": tflops[tuned_name] / best, "tuned_config": held_out.label(tuned),
            "oracle": tflops[oracle] / best,
            "oracle_config": held_out.label(chosen) if oracle == "ours" else oracle}


def run_held_out(params: dict, ctx: Context) -> dict:
    """The held-out set (held_out.py): shapes drawn by the run's seed, outside the tuning set; the
    headline is the geomean of ours over the geomean of each shape's strongest baseline."""
    from artifacts.kernels.hopper_gemm import nvmmh

    if params.get("dtype") != "bf16":
        raise ValueError(f"held-out: dtype {params.get('dtype')!r}; the set is drawn for bf16")
    drawn = held_out.draw(ctx.seed, int(params["count"]), PROBE.spec["cases"])
    asked = nvmmh.configs([(s["m"], s["n"], s["k"]) for s in drawn], "bf16")
    rows, started = [], time.monotonic()
    # every kernel the shapes' choices and tune=True's candidates need, compiled in parallel processes
    precompile_errors = hopper_gemm.precompile_for([(s["m"], s["n"], s["k"]) for s in drawn], tune=True)
    precompiled_at = time.monotonic()
    for i, shape in enumerate(drawn):
        if time.monotonic() - started > held_out.TIME_BUDGET_S:   # the shapes left are recorded as not timed
            break
        rows.append(_held_out_shape(shape, i, asked[i] if asked else None, ctx))
        print(f"held-out {i + 1}/{len(drawn)} {shape['m']}x{shape['n']}x{shape['k']}: "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    passed = all(row["passed"] for row in rows) and len(rows) >= held_out.MIN_SHAPES
    timed = [row for row in rows if row["passed"]]
    metrics = {"seed": ctx.seed, "shapes": len(rows), "shapes_drawn": len(drawn),
               "stopped_by_time_budget": len(rows) < len(drawn),
               "oracle_finalists": held_out.FINALISTS,
               "headline_statistic": "geomean over the held-out shapes",
               "nvmmh": "asked" if asked else
               "unavailable (nvidia-matmul-heuristics not installed, or its child gave no complete answer)",
               **held_out.summary(timed, ("choose_config", "nvmmh", "tuned", "oracle")),
               **held_out.class_summary(timed, ("choose_config", "tuned")),
               "precompile_s": round(precompiled_at - started, 1), "precompile_errors": len(precompile_errors),
               "sweep_incorrect": "; ".join(f"{r['m']}x{r['n']}x{r['k']}: {', '.join(r['incorrect'])}"
                                            for r in rows if r["incorrect"]) or None,
               "per_shape": "; ".join(held_out.compact(r) for r in timed)}
    quack_everywhere = timed and all(r.get("quack") for r in timed)
    return {"correctness": {"passed": passed, "shapes_passed": len(timed), "shapes": len(rows),
                            "min_shapes": held_out.MIN_SHAPES},
            "metrics": metrics,
            **ctx.headline_against("tflops", held_out.geomean([r["ours"] for r in timed]) or 0.0,
                                   "TFLOP/s", {STRONGEST: held_out.geomean([r["best"] for r in timed]) if passed else None},
                                   peak_key="bf16",
                                   context={"cuBLAS": held_out.geomean([r["cublas"] for r in timed]),
                                            "quack": held_out.geomean([r["quack"] for r in timed]) if quack_everywhere else None})}


def headline(ctx: Context, tflops: dict, dtype: str, correctness: dict, quack_skipped: str | None) -> dict:
    """The headline against the fastest correct of cuBLAS and quack (where it ran and passed our gate);
    cuBLAS is the gate's own reference, so it counts as correct. For fp8, cuBLAS with promoted
    accumulation (use_fast_accum=False) computes more precisely than ours: its ratio stays beside."""
    baselines = {name: v for name, v in tflops.items() if name != "ours"}
    context = {"cuBLAS": baselines.pop("cuBLAS")} if dtype == "e4m3" else {}
    correct = {name: True for name in baselines if name != "quack"}
    if "quack" in baselines:
        correct["quack"] = bool(correctness.get("quack_passed"))
    notes = {}
    if quack_skipped:
        baselines["quack"] = None
        notes["quack"] = {"skipped": quack_skipped}
    return ctx.headline_against("tflops", tflops["ours"], "TFLOP/s", baselines, correct=correct, peak_key=dtype,
                                ceiling_key="bf16" if dtype == "bf16" else None, context=context, notes=notes)


def _skipped_tile_control(m: int, n: int, k: int, seed: int, **config) -> dict:
    """Our kernel with output tile (0, 0) skipping the last K tile of its last K range
    (skip_last_k_tile), gated like a case."""
    import torch

    a, b, _, _, reference = _inputs("bf16", m, n, k, seed)
    run, d = hopper_gemm.compile_gemm(a, b, skip_last_k_tile=True, **config)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    result = _check(d, reference, "bf16", _cublas_result("bf16", a, b, 1.0, 1.0, reference.shape), k)
    result.update(shape=f"{m}x{n}x{k}", config=run.config.describe())
    return result


def control_one_tile(ctx: Context) -> dict:
    """bf16 2048x1024x1024, 128x256 tiles, 1x1 cluster: one of 64 output tiles misses one of its 16 K
    tiles (about 5x the gate). Not in a 2x1 cluster: there the tile's partner CTA waits for the
    multicast half of the skipped K tile forever (the H200 run of 9eea3ed hung here)."""
    return _skipped_tile_control(2048, 1024, 1024, ctx.seed + 1, tile_m=128, tile_n=256, cluster_mn=(1, 1))


def control_split_k(ctx: Context) -> dict:
    """bf16 128x1024x8192 split over 8 K ranges (128x128 tiles, 1x1): the last range of one of the 8
    output tiles misses its last K tile, so the FP32 reduction sums one short partial (about 5x)."""
    return _skipped_tile_control(128, 1024, 8192, ctx.seed + 2, tile_m=128, tile_n=128, cluster_mn=(1, 1), split_k=8)


NEGATIVE_CONTROLS = {"one-tile-last-k": control_one_tile, "split-k-last-range": control_split_k}


def compile_kernel(arch: str) -> compile_mod.Emitted:
    """Every configuration the heuristic can pick for bf16 (tile_m x tile_n, split-K), the transposed
    operands, fp8 and tf32: shapes are dynamic, so one compile per configuration covers M = 1 too."""
    emitted = compile_mod.from_cute(hopper_gemm.compile_for(arch, m=1, cluster_mn=(2, 1)), arch)
    # decode: 64-row tiles, and the kernels that reduce split-K inside (one per tile shape, any split)
    extras = [hopper_gemm.compile_for(arch, m=1, tile_m=64, tile_n=tile_n, cluster_mn=(1, 1), split_k=split_k)
              for tile_n in (64, 128, 192, 256) for split_k in (1, 2)]
    extras += [hopper_gemm.compile_for(arch, tile_n=tile_n, cluster_mn=(1, 1), split_k=2) for tile_n in (64, 128)]
    transposed = compile_mod.from_cute(hopper_gemm.compile_for(arch, cluster_mn=(2, 1), a_major="mn", b_major="mn"),
                                       arch)
    if re.search(r"wgmma\.mma_async[^;]*p, 1,\s*1, 1, 1;", transposed.ptx):
        emitted.facts.append("mn-major-operands:imm-trans-a=1,imm-trans-b=1")
    ranks = set(re.findall(r"cp\.async\.bulk\.tensor\.(\d)d", emitted.ptx))
    if ranks == {"3"}:   # every TMA of the M = 1 compile keeps (rows, K, L)
        emitted.facts.append("m1-operand-tma-rank:3d")
    # the schedules cases' ping-pong kernel (its ordered barriers: BAR.SYNC / BAR.ARV over 256 threads)
    extras += [hopper_gemm.compile_for(arch, tile_m=64, tile_n=256, cluster_mn=(2, 1), schedule="pingpong")]
    # the tiles mid-M needs: a swapped 128 x 80 tile (two of them share the weight in a 1 x 2 cluster)
    # split over K, and a 192-row tile (three consumer warpgroups)
    extras += [hopper_gemm.compile_for(arch, tile_m=128, tile_n=80, cluster_mn=(1, 2), split_k=2, d_major="m"),
               hopper_gemm.compile_for(arch, tile_m=192, tile_n=192, cluster_mn=(2, 1))]
    extras += [hopper_gemm.compile_for(arch, ab_dtype=AB_DTYPES["e4m3"], cluster_mn=(2, 1)),
               hopper_gemm.compile_for(arch, ab_dtype=AB_DTYPES["tf32"], d_dtype=_D_DTYPE["tf32"], cluster_mn=(2, 1))]
    for compiled in extras:
        extra = compile_mod.from_cute(compiled, arch)
        emitted.extend(extra)
    return emitted


if __name__ == "__main__":
    PROBE.main(run_case=run_case, negative_control=NEGATIVE_CONTROLS, compile=compile_kernel)
