"""A probe's driver script under compute-sanitizer or Nsight Compute, and what the tool printed.

A tool probe writes a small driver (one kernel launch, its output checked, then a line
`DRIVER rel_err=<x> ok=<0|1>`), runs it in a child process under the tool and reads back the
driver's line and the tool's summary or counters.
"""

from __future__ import annotations

import re
import subprocess

DRIVER_LINE = re.compile(r"DRIVER rel_err=(\S+) ok=(\d)")
SANITIZER_SUMMARY = re.compile(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors|hazards)")
TAIL_CHARS = 1500


def run(command: list[str], timeout: int = 300) -> str:
    """stdout and stderr of a command, together."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    return result.stdout + result.stderr


def driver_result(output: str) -> dict:
    """The driver's own verdict: whether it ran, its relative error and whether its output was correct."""
    found = DRIVER_LINE.search(output)
    if not found:
        return {"driver_ran": False, "tail": output[-TAIL_CHARS:]}
    return {"driver_ran": True, "rel_err": float(found.group(1)), "output_ok": found.group(2) == "1"}


def sanitize(tool: str, driver: list[str]) -> dict:
    """The driver under compute-sanitizer `tool` (memcheck, racecheck): passed when its output is
    correct and the tool counts no device-side error or hazard. Host API return codes are not
    counted (cuGetProcAddress returns errors to cuda-python's driver bindings while they load)."""
    output = run(["compute-sanitizer", "--tool", tool, "--report-api-errors", "no", *driver])
    result = driver_result(output)
    summary = SANITIZER_SUMMARY.search(output)
    result["tool_errors"] = int(summary.group(2)) if summary else None
    result["passed"] = bool(result.get("output_ok")) and result["tool_errors"] == 0
    if not summary:
        result["tail"] = output[-TAIL_CHARS:]
    return result


def tensor_pipe_metrics(limit: int) -> list[str]:
    """Up to `limit` tensor-pipe GMMA activity counters this ncu knows (names differ between versions)."""
    listing = run(["ncu", "--query-metrics"], timeout=120)
    names = re.findall(r"^(\S*pipe_tensor\S*gmma\S*)", listing, flags=re.M | re.I)
    return [f"{name}.avg.pct_of_peak_sustained_active" for name in names if "cycles_active" in name][:limit]


def profile(kernel_regex: str, metrics: list[str], driver: list[str]) -> tuple[dict, str]:
    """ncu's value of each metric for the first launch of a kernel matching `kernel_regex` (None
    where ncu printed none), and ncu's whole output."""
    output = run(["ncu", "--kernel-name", f"regex:{kernel_regex}", "--launch-count", "1", "--metrics",
                  ",".join(metrics), *driver])
    values = {}
    for name in metrics:
        found = re.search(re.escape(name) + r"\s+\S*\s+([\d.,]+)\s*$", output, flags=re.M)
        values[name] = float(found.group(1).replace(",", "")) if found else None
    return values, output
