"""Claims of a case's aggregate figures (probe.yaml `metric_claims`: a held-out set's worst ratio, a class
geomean), and goals on them."""

from __future__ import annotations

import json

import pytest

from conftest import HW_PAGE, messages
from test_refresh import RECORD


PROBE = """id: probe-x
title: x
kind: kernel
pages:
- hw-example
archs:
- sm_90a
entry: run.py
cases:
- id: c1
  metric_claims:
    worst_ratio: {metric: ratio, unit: x, baseline: cuBLAS, statistic: 'worst shape of ours'}
    class_small_shapes: {metric: shapes, statistic: 'shapes with M up to 16'}
    tuned_worst_ratio: {unit: x}
- id: c2
"""

WORST = "measured.x.c1.worst_ratio"


def _record(run_id: str = "r1", started: str = "2026-11-29T10:00:00Z", commit: str = "new", **metrics) -> dict:
    record = json.loads(json.dumps(RECORD))
    record.update(run_id=run_id, started_at=started)
    record["environment"]["commit"] = commit
    case = record["cases"][0]
    case["headline"].update(baseline="cuBLAS", baseline_value=100.0, ratio=1.234)
    case["metrics"] = {"worst_ratio": 0.7169, "class_small_shapes": 6, "undeclared_ratio": 0.5,
                       "tuned_worst_ratio": None, **metrics}
    return record


def _setup(mini, records: list[dict] | None = None, probe: str = PROBE, goals: str = "", body: str = "# Example\n"):
    mini.write("probes/probe-x/probe.yaml", probe)
    mini.write("probes/probe-x/run.py", "")
    for record in records if records is not None else [_record()]:
        mini.write(f"artifacts/evidence/probe-x/{record['run_id']}.json", json.dumps(record))
    text = HW_PAGE.replace("summary:", f"probes:\n- probe-x\n{goals}summary:").split("---\n# Example")[0] + "---\n" + body
    return mini.write("wiki/hardware/example.md", text)


def _claims(mini) -> dict[str, dict]:
    from kernelwiki.model.pages import read_page

    page = read_page(mini.root / "wiki/hardware/example.md", "wiki/hardware/example.md")
    return {c["id"]: c for c in page.meta.get("claims") or []}


def test_a_declared_metric_becomes_a_claim_and_an_undeclared_or_null_one_does_not(mini):
    _setup(mini)
    assert mini.run("refresh")[0] == 0
    claims = _claims(mini)
    worst = claims[WORST]
    assert worst["value"] == 0.7169 and worst["unit"] == "x" and worst["metric"] == "ratio"
    assert worst["evidence"] == "measured" and worst["record"] == "artifacts/evidence/probe-x/r1.json"
    assert worst["case"] == "c1" and worst["case_metric"] == "worst_ratio" and worst["gpu"] == "H200"
    assert worst["conditions"].startswith("worst shape of ours, against cuBLAS")
    assert "measured_at" not in worst and "baseline" not in worst and "ratio" not in worst   # the record's name has it
    assert claims["measured.x.c1.class_small_shapes"]["value"] == 6
    assert claims["measured.x.c1.class_small_shapes"]["metric"] == "shapes"
    assert "measured.x.c1.undeclared_ratio" not in claims          # not declared
    assert "measured.x.c1.tuned_worst_ratio" not in claims         # declared, but null in the record
    assert mini.problems() == []
    assert mini.run("refresh", "--check")[0] == 0


def test_a_metric_claim_is_the_median_run_and_states_its_spread(mini):
    records = [_record("r1", "2026-11-29T10:01:00Z", worst_ratio=0.9), _record("r2", "2026-11-29T10:02:00Z", worst_ratio=0.7),
               _record("r3", "2026-11-29T10:03:00Z", worst_ratio=0.8)]
    _setup(mini, records)
    mini.run("refresh")
    worst = _claims(mini)[WORST]
    assert worst["value"] == 0.8 and worst["record"].endswith("r3.json") and worst["spread"]["runs"] == 3
    assert mini.problems() == []


def test_a_goal_on_a_metric_claim_is_judged(mini):
    goal = f"goals:\n- claim: {WORST}\n  at_least: {{}}\n  statement: no shape below the bar\n"
    body = f"# Example\n\nThe goal is {{}}: the worst shape ran at <!-- claim:{WORST} -->0<!-- /claim -->.\n"
    page = _setup(mini, goals=goal.format(0.9), body=body.format("missed"))
    mini.run("refresh")
    text = page.read_text()
    assert "status: draft" in text and "0.7169×" in text
    code, out, _ = mini.run("audit")
    assert "goals" not in out, out
    _setup(mini, goals=goal.format(0.5), body=body.format("met"))
    mini.run("refresh")
    assert "status: verified" in page.read_text()
    _setup(mini, goals=goal.format(0.5), body=body.format("missed"))   # the prose says the opposite
    mini.run("refresh")
    assert "is met: a sentence" in mini.run("audit")[1]


@pytest.mark.parametrize("value", ["nan", "Infinity", True, [0.7], {"v": 1}, "0.7"])
def test_a_metric_that_is_not_a_finite_number_makes_no_claim_and_is_refused(mini, value):
    _setup(mini, [_record(worst_ratio=value)])
    mini.run("refresh")
    assert WORST not in _claims(mini)
    found = messages(mini.problems())
    if isinstance(value, (list, dict)):   # the record schema refuses it, and the record with it
        assert "artifacts/evidence/probe-x/r1.json:" in found and "cases[0].metrics.worst_ratio" in found, found
        return
    assert "measured.x.c1.class_small_shapes" in _claims(mini)
    assert "artifacts/evidence/probe-x/r1.json:1: cases[0].metrics.worst_ratio:" in found
    assert "is not a finite number" in found and "metric_claims" in found


@pytest.mark.parametrize("name", ["ratio", "baseline", "../../etc", "Worst", "worst-ratio", "a" * 65, "<b>x</b>",
                                  "x\u202ey", "1st"])
def test_a_hostile_or_reserved_metric_name_is_refused_naming_the_file_and_key(mini, name):
    probe = PROBE.replace("    tuned_worst_ratio: {unit: x}\n", f"    {json.dumps(name)}: {{unit: x}}\n")
    _setup(mini, probe=probe)
    mini.run("refresh")
    found = messages(mini.problems())
    assert "probes/probe-x/probe.yaml:" in found and "cases[0].metric_claims" in found, found
    assert not any(c.get("case_metric") for c in _claims(mini).values())   # refresh skips a spec that fails


@pytest.mark.parametrize("field, value", [("unit", "x<script>"), ("statistic", "worst\u0007"), ("baseline", "a\nb"),
                                          ("metric", "Ratio!"), ("extra", "no")])
def test_a_hostile_declaration_is_refused(mini, field, value):
    probe = PROBE.replace("    tuned_worst_ratio: {unit: x}\n", f"    tuned_worst_ratio: {{{field}: {json.dumps(value)}}}\n")
    _setup(mini, probe=probe)
    found = messages(mini.problems())
    assert "probes/probe-x/probe.yaml:" in found and "cases[0].metric_claims" in found, found


def test_a_metric_name_that_is_the_reproduction_claims_is_refused(mini):
    probe = PROBE.replace("- id: c1\n", "- id: c1\n  reproduced_by: DeepGEMM\n").replace(
        "    tuned_worst_ratio: {unit: x}\n", "    deepgemm: {unit: x}\n")
    _setup(mini, probe=probe)
    assert "reproduced_by" in messages(mini.problems())


def test_a_hand_typed_metric_claim_value_is_refused(mini):
    page = _setup(mini)
    mini.run("refresh")
    page.write_text(page.read_text().replace("value: 0.7169", "value: 0.95"))
    found = messages(mini.problems())
    assert "is not metrics.worst_ratio of case 'c1'" in found
    assert mini.run("refresh", "--check")[0] == 1


@pytest.mark.parametrize("change", ["failed", "control-too-blunt", "case-incorrect", "control-passed-gate"])
def test_a_failed_or_partial_record_yields_no_metric_claim(mini, change):
    record = _record()
    if change == "case-incorrect":   # e.g. a held-out set that timed too few shapes to pass
        record["cases"][0]["status"] = "incorrect"
    elif change == "control-passed-gate":
        record["negative_control"]["failed_gate"] = False
    else:
        record["status"] = change
    _setup(mini, [record])
    mini.run("refresh")
    assert not any(c.get("case_metric") for c in _claims(mini).values())


@pytest.mark.parametrize("other_case, names", [
    ("c1.worst_ratio", "cases[0].metric_claims.worst_ratio"),   # a case id holds dots
    ("c1.vs-cublas", "cases[0].versus"),
    ("c1.deepgemm", "cases[0].reproduced_by"),
])
def test_a_claim_id_two_cases_make_is_refused_in_the_probe_yaml(mini, other_case, names):
    """Case `c1`'s metric claim `worst_ratio` and a case `c1.worst_ratio` both make
    measured.x.c1.worst_ratio: refresh wrote the page two claims of one id, and validate named only
    the page; the probe.yaml's second case is named, with the first."""
    probe = PROBE.replace("- id: c1\n", "- id: c1\n  versus: cuBLAS\n  reproduced_by: DeepGEMM\n").replace(
        "- id: c2\n", f"- id: {other_case}\n")
    _setup(mini, probe=probe)
    found = messages(mini.problems())
    assert (f"probes/probe-x/probe.yaml:17: cases[1].id: makes the claim id measured.x.{other_case}, as {names} "
            "does; rename the case or the name") in found, found
