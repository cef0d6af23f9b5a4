"""Generated blocks (runs, versus) and charts choose each case from the runs that hold it, as the claims
do: a newer run of fewer cases (a `--case` run, a held-out-only run) hides none of the older ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import HW_PAGE
from test_refresh import RECORD

from kernelwiki.docsite import charts
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record

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
- id: c2
"""


def _record(run_id: str, started: str, commit: str) -> dict:
    record = json.loads(json.dumps(RECORD))
    record.update(run_id=run_id, started_at=started)
    record["environment"]["commit"] = commit
    record["cases"][0]["headline"].update(baseline="cuBLAS", baseline_value=100.0, ratio=1.234)
    return record


def _setup(mini, records: list[dict], body: str) -> Path:
    mini.write("probes/probe-x/probe.yaml", PROBE)
    mini.write("probes/probe-x/run.py", "")
    for record in records:
        mini.write(f"artifacts/evidence/probe-x/{record['run_id']}.json", json.dumps(record))
    text = HW_PAGE.replace("summary:", "probes:\n- probe-x\nsummary:").split("---\n# Example")[0] + "---\n" + body
    return mini.write("wiki/hardware/example.md", text)


def _two_runs(mini) -> Path:
    """r1 (commit old) holds c1 and c2; r2 (commit new, newer) holds c2 alone."""
    body = ("# Example\n\n<!-- kernelwiki:begin versus -->\nstale\n<!-- kernelwiki:end versus -->\n\n"
            "<!-- kernelwiki:begin runs -->\nstale\n<!-- kernelwiki:end runs -->\n")
    older = _record("r1", "2026-11-29T10:01:00Z", commit="old")
    older["cases"][0]["baselines"] = [{"name": "ours, one K tile in flight", "value": 80.0, "ratio": 1.25}]
    older["cases"].append({**older["cases"][0], "id": "c2"})
    newer = _record("r2", "2026-11-29T10:02:00Z", commit="new")
    newer["cases"][0]["id"] = "c2"
    newer["cases"][0]["baselines"] = [{"name": "ours, one K tile in flight", "value": 90.0, "ratio": 1.1}]
    return _setup(mini, [older, newer], body=body)


def test_a_newer_run_of_fewer_cases_hides_no_older_case_in_the_versus_and_runs_blocks(mini):
    page = _two_runs(mini)
    mini.run("refresh")
    text = page.read_text()
    assert "| probe-x | c1 | ours, one K tile in flight | 1.25 | 1.25 |" in text   # only in r1, of its own commit
    assert "| probe-x | c2 | ours, one K tile in flight | 1.1 | 1.1 |" in text     # r2's commit: r1 left out
    assert "| probe-x | c1 | cuBLAS | 1.23 | 1.23 | 1.23 | 1.23 |" in text
    assert "| probe-x | c2 | cuBLAS | 1.23, 1.23 |" in text
    assert "stale" not in text and mini.run("refresh", "--check")[0] == 0


def test_a_newer_run_of_fewer_cases_hides_no_older_case_in_the_charts():
    spec = ProbeSpec("probe-x", Path("."), {"id": "probe-x", "kind": "kernel", "pages": ["kernel-x"],
                                            "cases": [{"id": "a"}, {"id": "b"}, {"id": "c"}]})

    def record(path: str, started: str, cases: dict[str, float], status: str = "passed") -> Record:
        return Record(path, {"probe": "probe-x", "run_id": path, "mode": "run", "status": status, "started_at": started,
                             "environment": {"gpu": "NVIDIA H200"}, "cases": [
                                 {"id": case, "status": status, "params": {"set": "s", "shape": f"{i + 1}x64x64"},
                                  "headline": {"metric": "tflops", "value": 100 * ratio, "unit": "TFLOP/s",
                                               "baseline": "cuBLAS", "baseline_value": 100.0, "ratio": ratio}}
                                 for i, (case, ratio) in enumerate(cases.items())]})

    runs = [record("r1", "2026-11-29T10:00:00Z", {"a": 0.9, "b": 0.8}),
            record("r2", "2026-11-29T11:00:00Z", {"b": 0.7, "c": 1.1}),
            record("r3", "2026-11-29T12:00:00Z", {"a": 5.0}, status="incorrect")]   # a case that failed is not drawn
    drawn = charts.page_charts("kernel-x", {"probe-x": spec}, {"probe-x": runs})
    rows = {label: ours for chart in drawn if chart.kind == "dots"
            for series in chart.panels[""].values() for label, ours, _ in series}
    assert rows == {"a": pytest.approx(90.0), "b": pytest.approx(70.0), "c": pytest.approx(110.0)}
