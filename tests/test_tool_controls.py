"""Tool probes: drivers report through gates.check, and the negative controls are planted bugs the
tool itself must report (memcheck an out-of-bounds write, racecheck a shared-memory race)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwiki.harness import tools
from kernelwiki.probing.specs import ProbeSpec

ROOT = Path(__file__).resolve().parents[1]
GOOD = tools.driver_line({"passed": True, "rel_err": 0.0, "tolerance": 0.0})
BAD = tools.driver_line({"passed": False, "rel_err": 0.5, "tolerance": 0.02})


def test_driver_line_round_trips_the_gate():
    assert tools.driver_result("noise\n" + GOOD + "\nmore")["output_ok"] is True
    assert tools.driver_result(BAD)["output_ok"] is False
    assert tools.driver_result("DRIVER rel_err=0 ok=1")["driver_ran"] is False   # hand-written verdicts are not read


@pytest.mark.parametrize("output, passed, fragment", [
    (GOOD + "\n========= ERROR SUMMARY: 1 error\n", False, None),          # memcheck caught it: the control fails
    (GOOD + "\n========= ERROR SUMMARY: 0 errors\n", True, None),          # memcheck missed it: the probe must fail
    (BAD + "\n========= ERROR SUMMARY: 1 error\n", True, "caught by the tool alone"),   # wrong check caught it
    ("Traceback ...\n", True, "did not run"),
    # memcheck stops the faulting kernel, so the driver dies on the launch failure: the tool's report counts
    ("========= Invalid __global__ write of size 4 bytes\n=========     at oob_kernel\n"
     "torch.AcceleratorError: CUDA error: unspecified launch failure\n========= ERROR SUMMARY: 1 error\n", False, None),
])
def test_planted_verdict(output, passed, fragment):
    result = tools.planted_verdict("memcheck", "oob", output)
    assert result["passed"] is passed
    if fragment:
        assert fragment in result["reason"]


def test_racecheck_summary_is_read():
    result = tools.planted_verdict("racecheck", "race", GOOD + "\n========= RACECHECK SUMMARY: 2 hazards displayed\n")
    assert result["tool_errors"] == 2 and result["passed"] is False


def test_both_controls_must_fail(monkeypatch):
    verdicts = {"memcheck": {"passed": False}, "racecheck": {"passed": True}}
    monkeypatch.setattr(tools, "planted_control", lambda tool, seed: verdicts[tool])
    assert tools.planted_controls(1)["passed"] is True
    verdicts["racecheck"] = {"passed": False}
    assert tools.planted_controls(1)["passed"] is False


def test_compile_only_needs_no_tools():
    spec = ProbeSpec("p", ROOT, {"id": "p", "archs": ["sm_90a"], "tools": ["no-such-tool-kw"]})
    assert spec.skip_reason("compile-only", None) is None
    assert "missing tool no-such-tool-kw" in spec.skip_reason("run", None)


def test_planted_kernels_compile_for_hopper():
    pytest.importorskip("cutlass")
    from kernelwiki.harness import planted

    emitted = planted.emitted("sm_90a")
    assert emitted.facts == ["planted-oob:compiles", "planted-race:compiles"]
    assert "st.global" in emitted.ptx and "st.shared" in emitted.ptx and "bar.sync" in emitted.ptx
    with pytest.raises(ValueError):
        planted.compile_planted("leak", "sm_90a")
