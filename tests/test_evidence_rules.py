"""Evidence that cannot flatter (issue 23), on the CPU: the headline is against the strongest correct
baseline, impossible values fail their case, and a negative control must fail its gate by at most
10x (a control that misses by 100x says nothing about the gate's tightness)."""

from __future__ import annotations

import math

import pytest

from kernelwiki.harness import gates, peaks
from kernelwiki.harness.probe import (Context, below_launch, case_status, choose_headline_baseline,
                                      summarize_controls, run_control)
from kernelwiki.probing.runner import too_blunt


def ctx(**kw) -> Context:
    return Context(seed=1, gpu_short="H200", gpu_name="NVIDIA H200", ceilings={}, **kw)


# --- the headline is the strongest correct baseline -------------------------------------------------
def test_headline_is_against_the_fastest_correct_baseline_not_the_weakest():
    out = ctx().headline_against("tflops", 600.0, "TFLOP/s",
                                 {"per-group cuBLAS loop": 375.0, "DeepGEMM": 700.0, "cuBLAS blockwise": 650.0})
    h = out["headline"]
    assert h["baseline"] == "DeepGEMM" and h["ratio"] == pytest.approx(600 / 700, abs=1e-4)
    assert h["baseline_reason"] == "fastest correct of: per-group cuBLAS loop, DeepGEMM, cuBLAS blockwise"
    ratios = {b["name"]: b["ratio"] for b in out["baselines"]}
    assert ratios["per-group cuBLAS loop"] == pytest.approx(1.6) and len(ratios) == 3


def test_an_incorrect_or_missing_baseline_is_never_the_headline():
    out = ctx().headline_against("tflops", 100.0, "TFLOP/s", {"fast-but-wrong": 900.0, "slow": 80.0, "absent": None},
                                 correct={"fast-but-wrong": False, "slow": True})
    assert out["headline"]["baseline"] == "slow"
    assert {b["name"]: b.get("correct") for b in out["baselines"]} == {"fast-but-wrong": False, "slow": True, "absent": None}
    none = ctx().headline_against("tflops", 100.0, "TFLOP/s", {"x": None})
    assert "baseline" not in none["headline"] and none["headline"]["baseline_reason"] == "no baseline ran correctly in this case"


def test_lower_is_better_picks_the_shortest_time_and_ratios_stay_speedups():
    out = ctx().headline_against("time", 2.0, "us", {"a": 3.0, "b": 2.5}, higher_is_better=False)
    assert out["headline"]["baseline"] == "b" and out["headline"]["ratio"] == 1.25


def test_a_declared_exception_wins_only_where_it_ran_correctly():
    exception = {"name": "cuBLAS", "reason": "quack times a different epilogue"}
    chosen = choose_headline_baseline({"cuBLAS": 500.0, "quack": 600.0}, None, True, exception)
    assert chosen == ("cuBLAS", "declared in probe.yaml: quack times a different epilogue")
    fallback = choose_headline_baseline({"cuBLAS": 500.0, "quack": 600.0}, {"cuBLAS": False}, True, exception)
    assert fallback[0] == "quack" and "did not run correctly" in fallback[1]


# --- impossible values fail the case ----------------------------------------------------------------
PASSED = {"passed": True, "rel_err": 1e-3, "tolerance": 2e-2}


def test_a_headline_above_the_datasheet_peak_fails_its_case():
    # record 20261201T013452Z: naive-4096x7168x2048 at 91,661 TFLOP/s, status passed
    headline = ctx().headline("tflops", 91661.0, "TFLOP/s", peak_key="e4m3")
    status = case_status({"correctness": PASSED, "headline": headline}, {"dtype": "e4m3"}, "H200")
    assert status["status"] == "failed" and "datasheet peak" in status["reason"]
    # without peak_key the case's dtype bounds it
    status = case_status({"correctness": PASSED, "headline": {"metric": "tflops", "value": 1200.0, "unit": "TFLOP/s"}},
                         {"dtype": "bf16"}, "H200")
    assert status["status"] == "failed" and "bf16" in status["reason"]
    assert case_status({"correctness": PASSED, "headline": {"metric": "bw", "value": 5.1, "unit": "TB/s"}}, {},
                       "H200")["status"] == "failed"


def test_a_bandwidth_is_bounded_by_the_ceiling_of_the_level_it_reads():
    """probe-l2-cache's reads of working sets the L2 holds run at 8-11 TB/s, above the HBM datasheet
    (4.8): checked against the L2's ceiling they pass; as an HBM read the same figure fails."""
    def status(value: float, level: str | None) -> str:
        params = {} if level is None else {"level": level}
        return case_status({"correctness": PASSED, "headline": {"metric": "bw", "value": value, "unit": "TB/s"}},
                           params, "H200")["status"]
    assert status(8.64, "l2") == "passed" and status(8.64, "smem") == "passed"
    assert status(8.64, "hbm") == "failed" and status(8.64, None) == "failed" and status(4.36, "hbm") == "passed"
    bound, basis = peaks.level_ceiling("l2", "H200")
    assert bound == pytest.approx(132 * 128 * 1980e6 / 1e12, abs=0.01) and "SMs" in basis
    assert status(bound * 1.01, "l2") == "failed"                     # past the SMs' load path: a bug
    assert peaks.level_ceiling("hbm", "H200") == (4.8, "HBM datasheet bandwidth (src-nvidia-h200)")
    with pytest.raises(ValueError, match="'dram'"):
        peaks.level_ceiling("dram", "H200")


def test_validate_and_refresh_refuse_an_l2_figure_read_as_hbm():
    from kernelwiki.commands.evidence import impossible_problem

    case = {"params": {"kind": "read"}, "headline": {"value": 8.64, "unit": "TB/s"}}
    assert "hbm ceiling" in impossible_problem(case, "NVIDIA H200")
    assert impossible_problem(case, "NVIDIA H200", level="l2") is None        # the probe.yaml's level
    assert impossible_problem({**case, "params": {"level": "l2"}}, "NVIDIA H200") is None


def test_a_possible_headline_passes_and_an_incorrect_case_stays_incorrect():
    ok = {"correctness": PASSED, "headline": {"metric": "tflops", "value": 700.0, "unit": "TFLOP/s"}}
    assert case_status(ok, {"dtype": "bf16"}, "H200") == {"status": "passed"}
    assert case_status({"correctness": {"passed": False}}, {}, "H200") == {"status": "incorrect"}
    assert peaks.impossible({"value": 1e9, "unit": "us"}, {}, "H200") is None   # no peak bounds a time


def test_a_time_under_the_empty_launch_floor_fails_its_case():
    timing = {"ours": {"median_ms": 0.0004, "protocol": {"floor_ms": 0.002}},
              "cuBLAS": {"median_ms": 0.01, "protocol": {"floor_ms": 0.002}}}
    status = case_status({"correctness": PASSED, "timing": timing}, {}, "H200")
    assert status["status"] == "failed" and status["reason"].startswith("ours:")
    assert below_launch({"ours": {"median_ms": 0.0015, "protocol": {"floor_ms": 0.002}}}) is None


# --- negative controls must fail the gate, within 10x of it ------------------------------------------
def test_error_over_gate_is_the_worst_relative_error_ratio_over_parts():
    np = pytest.importorskip("numpy")
    ref = np.ones((64, 64))
    out = ref.copy()
    out[0, 0] += 0.5            # one element: the element test fails by 5x, the norm by 0.4x
    result = gates.check(out, ref, "bf16")
    assert not result["passed"] and gates.error_over_gate(result) == pytest.approx(result["rel_err"] / result["tolerance"])
    loose = gates.check(out * 1.001, ref, "bf16", tol=1e-4)
    combined = gates.combine({"table": result, "derived": loose, "lse": gates.check_lse(np.zeros(4) + 0.03, np.zeros(4), 0.01)})
    assert gates.error_over_gate(combined) == pytest.approx(loose["rel_err"] / 1e-4)
    assert gates.error_over_gate(gates.check(ref, ref, "exact")) is None            # exact: no ratio
    nan = ref.copy()
    nan[1, 1] = math.nan
    assert gates.error_over_gate(gates.check(nan, ref, "bf16")) is None             # poison caught it


def test_a_control_two_hundred_times_over_its_gate_is_too_blunt():
    blunt = run_control("all-scales", "every scale doubled", lambda c: {"passed": False, "rel_err": 4.6, "tolerance": 0.02}, ctx())
    subtle = run_control("one-tile", "one tile's scale x1.5", lambda c: {"passed": False, "rel_err": 0.06, "tolerance": 0.02}, ctx())
    assert blunt["error_over_gate"] == 230.0 and subtle["error_over_gate"] == 3.0
    assert blunt["gate_ratios"] == {"rel": 230.0}
    summary = summarize_controls([blunt], single=True)
    assert summary["failed_gate"] is True and summary["error_over_gate"] == 230.0
    assert too_blunt(summary) == "rel: all-scales 230x"
    assert too_blunt(summarize_controls([blunt, subtle], single=False)) == ""   # one control within reach suffices


def _check(rel: float, max_abs: float) -> dict:
    return {"passed": False, "rel_err": rel, "tolerance": 1.0, "max_abs_err": max_abs, "max_abs_tolerance": 1.0}


def test_every_test_of_every_part_needs_a_control_within_reach():
    """The relative and the largest-element test, and each part of a composite gate, are judged
    apart: a control that fails only the element test (input-distribution's, rel 0.09x) or a part by
    77x (dense-mla-decode's lse) leaves that test unproven, whatever the other tests show."""
    assert gates.gate_ratios(_check(0.09, 14.2)) == {"rel": 0.09, "max_abs": 14.2}
    assert gates.control_reach([{"name": "c", "correctness": _check(0.09, 14.2)}]) == [
        "rel: c 0.09x", "max_abs: c 14.2x"]
    lse = {"passed": False, "max_abs_err": 0.0769, "tolerance": 1e-3, "infinite_entries_match": True}
    composite = gates.combine({"o": _check(6.4, 4.7), "lse": lse})
    assert gates.gate_ratios(composite) == pytest.approx({"o.rel": 6.4, "o.max_abs": 4.7, "lse.abs": 76.9})
    assert gates.control_reach([{"name": "scale", "correctness": composite}]) == ["lse.abs: scale 76.9x"]
    # a second control that reaches the lse test fixes it; a gate judged only exactly needs no ratio
    near = gates.combine({"o": _check(0.5, 0.5), "lse": {**lse, "max_abs_err": 0.004}})
    assert gates.control_reach([{"name": "scale", "correctness": composite}, {"name": "lse", "correctness": near}]) == []
    exact = {"passed": False, "exact": {"passed": False, "rel_err": None, "max_abs_err": 1.0, "mismatched": 1,
                                        "tolerance": 0.0}, "bf16": _check(12.5, 14.6)}
    assert gates.control_reach([{"name": "control", "correctness": exact}]) == [
        "bf16.rel: control 12.5x", "bf16.max_abs: control 14.6x"]
    assert _status_of({"failed_gate": True, "correctness": exact})[0] == "control-too-blunt"
    assert _status_of({"failed_gate": True, "correctness": _check(3.0, 2.0)})[0] == "passed"


def _status_of(control: dict) -> tuple[str, str]:
    from kernelwiki.probing.runner import _status

    return _status(_FakeSpec(), "run", {"cases": [{"id": "a", "status": "passed"}], "negative_control": control},
                   0, False, 60.0)


class _FakeSpec:
    data = {"negative_control": "broken"}


def test_a_control_that_passes_or_breaks_is_reported():
    passing = run_control("c", "", lambda c: {"passed": True, "rel_err": 1e-3, "tolerance": 2e-2}, ctx())
    broken = run_control("d", "", lambda c: 1 / 0, ctx())
    summary = summarize_controls([passing, broken], single=False)
    assert summary["failed_gate"] is False and summary["error"].startswith("d: ZeroDivisionError")
    assert summary["controls"][0]["failed_gate"] is False


def test_context_candidates_keep_their_ratio_but_are_never_the_headline():
    # a bf16 cuBLAS GEMM is not the FP8 problem: where cuBLAS blockwise refuses, no silent fallback to it
    out = ctx().headline_against("tflops", 600.0, "TFLOP/s", {"cuBLAS blockwise FP8": None},
                                 context={"cuBLAS bf16": 500.0},
                                 notes={"cuBLAS blockwise FP8": {"skipped": "refused: K not a multiple of 128"}})
    assert "baseline" not in out["headline"]
    entries = {b["name"]: b for b in out["baselines"]}
    assert entries["cuBLAS bf16"] == {"name": "cuBLAS bf16", "value": 500.0, "ratio": 1.2, "headline_candidate": False}
    assert entries["cuBLAS blockwise FP8"]["skipped"].startswith("refused")


# --- one control per code path (issue 23) -------------------------------------------------------------
CODE_PATH_CONTROLS = {
    "probe-fp8-blockscale-gemm/fp8_blockscale_probe.py": {"normal-one-scale", "contiguous-one-scale", "masked-one-scale"},
    "probe-hopper-gemm/hopper_gemm_probe.py": {"one-tile-last-k", "split-k-last-range"},
    "probe-flash-attention-4/fa4_probe.py": {"forward-scale", "backward-scale"},
    "probe-sparse-decode-sm90/sparse_decode_probe.py": {"split-path-one-row", "one-pass-one-row", "bf16-pv"},
}


def _control_names(script: str) -> set[str]:
    import ast

    from conftest import ROOT

    tree = ast.parse((ROOT / "probes" / script).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "NEGATIVE_CONTROLS" for t in node.targets):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return set()


@pytest.mark.parametrize("script", sorted(CODE_PATH_CONTROLS))
def test_each_code_path_the_issue_names_has_its_own_control(script):
    """FP8 grouped layouts, split-K, the FA4 backward, the sparse-decode split path (and its fp16 claim):
    a control on one path says nothing about a bug on another."""
    assert CODE_PATH_CONTROLS[script] <= _control_names(script)


def test_a_passed_record_whose_controls_leave_a_test_unproven_regresses_its_page():
    """refresh judges records the runner wrote before the per-test rule again: probe-input-
    distribution's control (rel 0.09x, max-abs 14x) makes its page regress, a control within reach
    of both tests does not."""
    from kernelwiki.commands.refresh.status import bad_run
    from kernelwiki.storage.records import Record

    def record(correctness: dict, status: str = "passed") -> Record:
        return Record("r.json", {"status": status, "mode": "run",
                                 "negative_control": {"failed_gate": True, "correctness": correctness}})

    assert bad_run(record(_check(0.09, 14.2)))
    assert not bad_run(record(_check(4.4, 5.2)))
    assert bad_run(record(_check(4.4, 5.2), status="control-too-blunt"))
    listed = Record("r.json", {"status": "passed", "mode": "run", "negative_control": {"failed_gate": True, "controls": [
        {"name": "a", "failed_gate": True, "correctness": _check(0.5, 3.0)},
        {"name": "b", "failed_gate": True, "correctness": _check(3.0, 40.0)}]}})
    assert not bad_run(listed)   # each test reached by one of the two
