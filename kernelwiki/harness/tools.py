"""A probe's driver script under compute-sanitizer or Nsight Compute, and what the tool printed.

A tool probe writes a small driver (one kernel launch, its output checked with `gates.check`, then
a line `DRIVER_RESULT <the gate's JSON>`), runs it in a child process under the tool and reads back
the driver's verdict and the tool's summary or counters.

Each tool probe's negative control runs a planted bug (kernelwiki.harness.planted) under the same
tool: an out-of-bounds write that memcheck must report, a shared-memory race that racecheck must
report. Its output is correct, so only the tool can make it fail.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

DRIVER_PREFIX = "DRIVER_RESULT "
DRIVER_LINE = re.compile(r"^DRIVER_RESULT (\{.*\})\s*$", flags=re.M)
SANITIZER_SUMMARY = re.compile(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors?|hazards?)\b")
TAIL_CHARS = 1500


REPO_ROOT = Path(__file__).resolve().parents[2]


def run(command: list[str], timeout: int = 300, cwd: Path | None = None) -> str:
    """stdout and stderr of a command, together."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    return result.stdout + result.stderr


def driver_line(correctness: dict) -> str:
    """What a driver prints: its gate verdict (`gates.check`'s mapping) as one line."""
    return DRIVER_PREFIX + json.dumps(correctness, default=float)


def driver_result(output: str) -> dict:
    """The driver's own verdict: whether it ran, and its gate result (`output_ok` = the gate passed)."""
    found = DRIVER_LINE.search(output)
    if not found:
        return {"driver_ran": False, "tail": output[-TAIL_CHARS:]}
    try:
        gate = json.loads(found.group(1))
    except ValueError:
        return {"driver_ran": False, "tail": output[-TAIL_CHARS:]}
    return {"driver_ran": True, "output_ok": bool(gate.get("passed")), "gate": gate}


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


def planted_control(tool: str, seed: int) -> dict:
    """The negative control of a tool probe: the planted bug for `tool` under `tool`.

    Returns a `correctness` mapping whose `passed` is True when the tool reported nothing — i.e. the
    control did not fail, and the runner fails the probe. A planted driver whose own output check
    failed is not a valid control (the tool must be what catches it): it also counts as passed, with
    the reason, so the probe fails rather than being credited by the wrong check.
    """
    kind = {"memcheck": "oob", "racecheck": "race"}[tool]
    output = run(["compute-sanitizer", "--tool", tool, "--report-api-errors", "no",
                  sys.executable, "-W", "ignore", "-m", "kernelwiki.harness.planted", kind, str(seed)],
                 cwd=REPO_ROOT)   # `-m kernelwiki...` finds this checkout's package from there
    return planted_verdict(tool, kind, output)


def planted_controls(seed: int) -> dict:
    """Both planted bugs under their tools. `passed` (the control did not fail) when either tool
    missed its bug: then the probe's "no errors, no hazards" proves nothing and the probe fails."""
    memcheck, racecheck = planted_control("memcheck", seed), planted_control("racecheck", seed)
    return {"passed": memcheck["passed"] or racecheck["passed"], "memcheck": memcheck, "racecheck": racecheck}


PLANTED_OOB_REPORT = "Invalid __global__ write"   # memcheck's words for the planted out-of-bounds store


def planted_verdict(tool: str, kind: str, output: str) -> dict:
    result = driver_result(output)
    summary = SANITIZER_SUMMARY.search(output)
    result.update(planted=kind, tool=tool, tool_errors=int(summary.group(2)) if summary else None)
    if kind == "oob" and result["tool_errors"] and PLANTED_OOB_REPORT in output:
        # memcheck stops the faulting kernel, so the driver dies on the launch failure it reports:
        # the tool's own report of the planted write is what counts
        result["passed"] = False
    elif not result.get("output_ok"):
        result.update(passed=True, reason="the planted driver's own output check failed or it did not run; "
                                          "the control must be caught by the tool alone")
    else:
        result["passed"] = not result["tool_errors"]
    if not summary or result["passed"]:
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
    # --clock-control none: the GPU's clocks are left as they are (ncu would lock them to base)
    output = run(["ncu", "--clock-control", "none", "--kernel-name", f"regex:{kernel_regex}", "--launch-count", "1", "--metrics",
                  ",".join(metrics), *driver])
    values = {}
    for name in metrics:
        found = re.search(re.escape(name) + r"\s+\S*\s+([\d.,]+)\s*$", output, flags=re.M)
        values[name] = float(found.group(1).replace(",", "")) if found else None
    return values, output
