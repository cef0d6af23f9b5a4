"""probe-fp8-blockscale-gemm-tools: our block-scaled FP8 GEMM under compute-sanitizer and Nsight Compute.

Each case starts a child process - a driver that runs one GEMM of the layout and tile width the
case names, on partial tiles, empty and partial groups or padding rows, and checks it against the
FP32 reference through `gates.check` (cuBLAS's output too, in the ncu case) - under the tool, then
reads the tool's summary. memcheck and racecheck pass with
zero device errors / hazards and a correct output; ncu passes when it profiled our kernel and the
output is correct, and reports its counters beside the same counters for cuBLAS blockwise FP8 on
the same operands. The negative control runs two planted bugs (kernelwiki.harness.planted) under
memcheck and racecheck: each tool must report its own.

Run through the runner: kernelwiki probe run --probe probe-fp8-blockscale-gemm-tools
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from kernelwiki.harness import planted, tools
from kernelwiki.harness.compile import Emitted
from kernelwiki.harness.probe import REPO_ROOT, Context, Probe

DRIVER = """
import sys, torch
sys.path[:0] = [{repo_root!r}, {baseline_dir!r}]   # a driver in a temporary folder: the checkout and the probe's helpers
from artifacts.kernels.fp8_blockscale_gemm import fp8_blockscale_gemm as kernel, quantize
from kernelwiki.harness import gates, tools
layout, what = sys.argv[1], sys.argv[2]
m, n, k, tile_n, tile_m, seed = (int(x) for x in sys.argv[3:9])
g = torch.Generator(device="cuda").manual_seed(seed)
groups = 3 if layout != "normal" else 1
if layout == "masked":
    a, sfa = quantize.per_token_cast(torch.randn(groups, m, k, generator=g, device="cuda"))
    counts = [0, m // 2 + 3, 1]                      # empty, partial, one row
    info = torch.tensor(counts, dtype=torch.int32, device="cuda")
elif layout == "contiguous":
    a, sfa = quantize.per_token_cast(torch.randn(m, k, generator=g, device="cuda"))
    index = [0] * 128 + [-1] * 128 + [1] * (m - 256)  # group 0, padding rows, group 1; group 2 empty
    info = torch.tensor(index, dtype=torch.int32, device="cuda")
else:
    a, sfa = quantize.per_token_cast(torch.randn(m, k, generator=g, device="cuda"))
    info = None
shape_b = (groups, n, k) if layout != "normal" else (n, k)
b, sfb = quantize.per_block_cast(torch.randn(*shape_b, generator=g, device="cuda"))
if what == "cublas":
    out = torch._scaled_mm(a, b.t(), scale_a=sfa.t().contiguous().t(), scale_b=sfb.t(), out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    # the reference after cuBLAS's kernel: ncu profiles the first GEMM-named launch
    print(tools.driver_line(gates.check(out, quantize.reference(a, sfa, b, sfb, layout, info), "bf16")))
    sys.exit(0)
if what == "deepgemm":   # DeepGEMM 340d988 on the same operands (normal layout), when importable
    import deepgemm_baseline
    if layout != "normal":
        print(tools.driver_line({{"passed": False, "reason": f"DeepGEMM is profiled in the normal layout only, not {{layout}}"}}))
        sys.exit(0)
    launch, out = deepgemm_baseline.normal(a, sfa, b, sfb)
    if launch is None:
        print(tools.driver_line({{"passed": False, "reason": out}}))
        sys.exit(0)
    launch()
    torch.cuda.synchronize()
    print(tools.driver_line(gates.check(out, quantize.reference(a, sfa, b, sfb), "bf16")))
    sys.exit(0)
run, d = kernel.compile_gemm(a, sfa, b, sfb, layout, info, tile_n=tile_n or None, tile_m=tile_m or None)
gates.poison(d)
run()
torch.cuda.synchronize()
ref = quantize.reference(a, sfa, b, sfb, layout, info)
if layout == "masked":
    out = torch.cat([d[i, :c] for i, c in enumerate(counts)]).float()
    ref = torch.cat([ref[i, :c] for i, c in enumerate(counts)])
elif layout == "contiguous":
    keep = info >= 0
    out, ref = d[keep].float(), ref[keep]
else:
    out = d
print(tools.driver_line(gates.check(out, ref, "bf16")))
"""
NCU_METRICS = ["sm__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__time_duration.sum",
               "lts__throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__cycles_active.avg"]


def _driver(tmp: Path) -> Path:
    path = tmp / "driver.py"
    path.write_text(DRIVER.format(repo_root=str(REPO_ROOT),
                                  baseline_dir=str(REPO_ROOT / "probes" / "probe-fp8-blockscale-gemm")))
    return path


def _driver_command(tmp: str, params: dict, what: str, seed: int) -> list[str]:
    m, n, k = params["shape"].split("x")
    tile_n, tile_m = str(params.get("tile_n", 0)), str(params.get("tile_m", 0))   # 0: the kernel's choose_tiling
    return [sys.executable, "-W", "ignore", str(_driver(Path(tmp))), params["layout"], what, m, n, k, tile_n, tile_m,
            str(seed)]


def _sanitize(tool: str, params: dict, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return tools.sanitize(tool, _driver_command(tmp, params, "ours", seed))


def _profile(params: dict, what: str, kernel_regex: str, metrics: list[str], seed: int) -> tuple[dict, str]:
    with tempfile.TemporaryDirectory() as tmp:
        return tools.profile(kernel_regex, metrics, _driver_command(tmp, params, what, seed))


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    if params["tool"].startswith("compute-sanitizer"):
        tool = params["tool"].split()[-1]
        correctness = _sanitize(tool, params, ctx.seed)
        unit = "errors" if tool == "memcheck" else "hazards"
        value = correctness["tool_errors"] if correctness["tool_errors"] is not None else -1
        return {"correctness": correctness, "headline": ctx.headline(case["metric"], value, unit)}
    tensor_pipe = tools.tensor_pipe_metrics(limit=1)
    if not tensor_pipe:
        return {"correctness": {"passed": False, "reason": "this ncu offers no tensor-pipe GMMA counter"},
                "headline": ctx.headline(case["metric"], 0.0, "% of active cycles")}
    metrics = NCU_METRICS + tensor_pipe
    tensor_pipe = tensor_pipe[0]
    ours, output = _profile(params, "ours", "Fp8BlockScaleGemm", metrics, ctx.seed)
    # cuBLAS's FP8 kernels are named nvjet_* (or *gemm*); the driver's other kernels are elementwise
    cublas, _ = _profile(params, "cublas", "nvjet|[Gg]emm|xmma", metrics, ctx.seed)
    # DeepGEMM's kernel is fp8_gemm_kernel<...>; skipped (value None, the driver's reason) when not importable
    theirs, theirs_output = _profile(params, "deepgemm", "fp8_gemm_kernel", metrics, ctx.seed)
    correctness = tools.driver_result(output)
    profiled = "Fp8BlockScaleGemm" in output and ours[tensor_pipe] is not None
    correctness["passed"] = bool(correctness.get("output_ok")) and profiled
    if not profiled:
        correctness["tail"] = output[-2000:]
    # the headline against the busier tensor pipe of the two libraries that ran correctly (issue 23:
    # the strongest baseline, never the weaker one by default)
    deepgemm_ok = theirs[tensor_pipe] is not None and bool(tools.driver_result(theirs_output).get("output_ok"))
    notes = {}
    if theirs[tensor_pipe] is None:
        notes["DeepGEMM"] = {"skipped": tools.driver_result(theirs_output).get("gate", {}).get("reason")
                             or theirs_output[-300:]}
    return {"correctness": correctness, "metrics": {**ours, **{f"cuBLAS {k}": v for k, v in cublas.items()},
                                                    **{f"DeepGEMM {k}": v for k, v in theirs.items()}},
            **ctx.headline_against(case["metric"], ours[tensor_pipe] or 0.0, "% of active cycles",
                                   {"cuBLAS blockwise FP8": cublas[tensor_pipe], "DeepGEMM": theirs[tensor_pipe]},
                                   correct={"cuBLAS blockwise FP8": cublas[tensor_pipe] is not None,
                                            "DeepGEMM": deepgemm_ok}, notes=notes)}


def negative_control(ctx: Context) -> dict:
    """Planted bugs under the same tools: memcheck must report the out-of-bounds write and racecheck
    the shared-memory race (their outputs are correct, so only the tool can fail them)."""
    return tools.planted_controls(ctx.seed)


def compile_planted(arch: str) -> Emitted:
    """Compile-only: the planted kernels of the negative control build for `arch`."""
    return planted.emitted(arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_planted)
