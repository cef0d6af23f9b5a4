"""probe-hopper-gemm-tools: our Hopper GEMM under compute-sanitizer and Nsight Compute.

Each case starts a child process - a driver that runs one GEMM and checks it against an FP32
matmul through `gates.check` - under the tool, then reads the tool's summary. memcheck/racecheck
pass with zero device errors / hazards and a correct output; ncu passes when it profiled our kernel
and the output is correct, and reports the counters it could read. The negative control runs two
planted bugs (kernelwiki.harness.planted) under memcheck and racecheck: each tool must report its own.

Run through the runner: kernelwiki probe run --probe probe-hopper-gemm-tools
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
sys.path[:0] = [{repo_root!r}]   # a driver in a temporary folder imports from the checkout
from artifacts.kernels.hopper_gemm import hopper_gemm
from kernelwiki.harness import gates, tools
m, n, k = (int(x) for x in sys.argv[1:4])
g = torch.Generator(device="cuda").manual_seed(int(sys.argv[4]))
a = torch.randn(m, k, generator=g, device="cuda").bfloat16()
b = torch.randn(n, k, generator=g, device="cuda").bfloat16()
run, d = hopper_gemm.compile_gemm(a, b)
gates.poison(d)
run()
torch.cuda.synchronize()
print(tools.driver_line(gates.check(d, a.float() @ b.float().t(), "bf16")))
"""
NCU_METRICS = ["sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__cycles_active.avg"]


def _driver(tmp: Path) -> Path:
    path = tmp / "driver.py"
    path.write_text(DRIVER.format(repo_root=str(REPO_ROOT)))
    return path


def _driver_command(tmp: str, shape: tuple[int, int, int], seed: int) -> list[str]:
    return [sys.executable, "-W", "ignore", str(_driver(Path(tmp))), *map(str, shape), str(seed)]


def _sanitize(tool: str, shape: tuple[int, int, int], seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return tools.sanitize(tool, _driver_command(tmp, shape, seed))


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    shape = tuple(int(x) for x in params["shape"].split("x"))
    if params["tool"].startswith("compute-sanitizer"):
        tool = params["tool"].split()[-1]
        correctness = _sanitize(tool, shape, ctx.seed)
        unit = "errors" if tool == "memcheck" else "hazards"
        value = correctness["tool_errors"] if correctness["tool_errors"] is not None else -1
        return {"correctness": correctness, "headline": ctx.headline(case["metric"], value, unit)}
    metrics = NCU_METRICS + tools.tensor_pipe_metrics(limit=2)
    with tempfile.TemporaryDirectory() as tmp:
        values, output = tools.profile("HopperGemm", metrics, _driver_command(tmp, shape, ctx.seed))
    correctness = tools.driver_result(output)
    profiled = "HopperGemm" in output and values[NCU_METRICS[0]] is not None
    correctness["passed"] = bool(correctness.get("output_ok")) and profiled
    if not profiled:
        correctness["tail"] = output[-2000:]
    return {"correctness": correctness, "metrics": values,
            "headline": ctx.headline(case["metric"], values[NCU_METRICS[0]] or 0.0, "% of peak")}


def negative_control(ctx: Context) -> dict:
    """Planted bugs under the same tools: memcheck must report the out-of-bounds write and racecheck
    the shared-memory race (their outputs are correct, so only the tool can fail them)."""
    return tools.planted_controls(ctx.seed)


def compile_planted(arch: str) -> Emitted:
    """Compile-only: the planted kernels of the negative control build for `arch`."""
    return planted.emitted(arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_planted)
