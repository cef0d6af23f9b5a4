"""probe-hopper-gemm-tools: our Hopper GEMM under compute-sanitizer and Nsight Compute.

Each case starts a child process - a driver that runs one GEMM and checks it against an FP32
matmul - under the tool, then reads the tool's summary. memcheck/racecheck pass with zero device
errors / hazards and a correct output; ncu passes when it profiled our kernel and the output is
correct, and reports the counters it could read.

Run through the runner: kernelwiki probe run --probe probe-hopper-gemm-tools
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from kernelwiki.harness.probe import REPO_ROOT, Context, Probe

DRIVER = """
import sys, torch
sys.path.insert(0, {kernel_dir!r})
import hopper_gemm
m, n, k, skip = (int(x) for x in sys.argv[1:5])
g = torch.Generator(device="cuda").manual_seed(int(sys.argv[5]))
a = torch.randn(m, k, generator=g, device="cuda").bfloat16()
b = torch.randn(n, k, generator=g, device="cuda").bfloat16()
run, d = hopper_gemm.compile_gemm(a, b, skip_last_k_tile=bool(skip))
run()
torch.cuda.synchronize()
ref = a.float() @ b.float().t()
rel = ((d.float() - ref).norm() / ref.norm()).item()
print(f"DRIVER rel_err={{rel:.3e}} ok={{int(rel < 2e-2)}}")
"""
NCU_METRICS = ["sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__cycles_active.avg"]


def _driver(tmp: Path) -> Path:
    path = tmp / "driver.py"
    path.write_text(DRIVER.format(kernel_dir=str(REPO_ROOT / "artifacts" / "kernels" / "hopper-gemm")))
    return path


def _run(command: list[str], timeout: int = 240) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    return result.stdout + result.stderr


def _driver_result(output: str) -> dict:
    found = re.search(r"DRIVER rel_err=(\S+) ok=(\d)", output)
    if not found:
        return {"driver_ran": False, "tail": output[-1500:]}
    return {"driver_ran": True, "rel_err": float(found.group(1)), "output_ok": found.group(2) == "1"}


def _gmma_metrics() -> list[str]:
    """The tensor-pipe GMMA counters this ncu knows (names differ between versions)."""
    listing = _run(["ncu", "--query-metrics"], timeout=120)
    names = re.findall(r"^(\S*pipe_tensor\S*gmma\S*)", listing, flags=re.M | re.I)
    return [f"{name}.avg.pct_of_peak_sustained_active" for name in names if "cycles_active" in name][:2]


def _sanitize(tool: str, shape: tuple[int, int, int], seed: int, skip: int = 0) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        output = _run(["compute-sanitizer", "--tool", tool, "--report-api-errors", "no",
                       sys.executable, "-W", "ignore", str(_driver(Path(tmp))), *map(str, shape), str(skip), str(seed)])
    result = _driver_result(output)
    summary = re.search(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors|hazards)", output)
    result["tool_errors"] = int(summary.group(2)) if summary else None
    result["passed"] = bool(result.get("output_ok")) and result["tool_errors"] == 0
    if not summary:
        result["tail"] = output[-1500:]
    return result


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    shape = tuple(int(x) for x in params["shape"].split("x"))
    if params["tool"].startswith("compute-sanitizer"):
        tool = params["tool"].split()[-1]
        correctness = _sanitize(tool, shape, ctx.seed)
        unit = "errors" if tool == "memcheck" else "hazards"
        value = correctness["tool_errors"] if correctness["tool_errors"] is not None else -1
        return {"correctness": correctness, "headline": ctx.headline(case["metric"], value, unit)}
    metrics = NCU_METRICS + _gmma_metrics()
    with tempfile.TemporaryDirectory() as tmp:
        output = _run(["ncu", "--kernel-name", "regex:HopperGemm", "--launch-count", "1", "--metrics", ",".join(metrics),
                       sys.executable, "-W", "ignore", str(_driver(Path(tmp))), *map(str, shape), "0", str(ctx.seed)])
    values = {}
    for name in metrics:
        found = re.search(re.escape(name) + r"\s+\S*\s+([\d.,]+)\s*$", output, flags=re.M)
        values[name] = float(found.group(1).replace(",", "")) if found else None
    correctness = _driver_result(output)
    profiled = "HopperGemm" in output and values[NCU_METRICS[0]] is not None
    correctness["passed"] = bool(correctness.get("output_ok")) and profiled
    if not profiled:
        correctness["tail"] = output[-2000:]
    return {"correctness": correctness, "metrics": values,
            "headline": ctx.headline(case["metric"], values[NCU_METRICS[0]] or 0.0, "% of peak")}


def negative_control(ctx: Context) -> dict:
    return _sanitize("memcheck", (512, 512, 512), ctx.seed + 1, skip=1)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control)
