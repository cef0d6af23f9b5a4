"""validate checks each measured claim against the run record it names."""

from __future__ import annotations

import json

import pytest

from conftest import messages

RECORD = {
    "schema_version": 1, "probe": "probe-x", "run_id": "run1", "mode": "run", "status": "passed",
    "started_at": "2026-11-29T00:00:00Z", "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a"},
    "negative_control": {"description": "broken", "failed_gate": True},
    "cases": [{"id": "c1", "status": "passed",
               "headline": {"metric": "tflops", "value": 101.0, "baseline": "cuBLAS", "baseline_value": 100.0,
                            "ratio": 1.01}}],
}
CLAIM = ("- id: measured.x.c1\n  metric: tflops\n  value: 101.0\n  gpu: H200\n  arch: sm_90a\n  evidence: measured\n"
         "  record: artifacts/evidence/probe-x/run1.json\n  case: c1\n  baseline:\n    name: cuBLAS\n    value: 100.0\n"
         "  ratio: 1.01\n")


def setup(mini, record: dict | None = None, claim: str = CLAIM, probes: str = "probes:\n- probe-x\n") -> None:
    mini.write("artifacts/evidence/probe-x/run1.json", json.dumps(record or RECORD))
    for probe in ("probe-x", "probe-y"):
        mini.write(f"probes/{probe}/probe.yaml", f"id: {probe}\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
                   "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
        mini.write(f"probes/{probe}/run.py", "")
    page = mini.root / "wiki/hardware/example.md"
    text = page.read_text().replace("summary:", "probes:\n- probe-x\n- probe-y\nsummary:")
    if probes != "probes:\n- probe-x\n":
        text = text.replace("probes:\n- probe-x\n- probe-y\n", probes)
    page.write_text(text.replace("---\n# Example", claim + "---\n# Example"))


def test_a_claim_that_matches_its_record_passes(mini):
    setup(mini)
    assert mini.problems() == []


@pytest.mark.parametrize("change, field, fragment", [
    (lambda r, c: (r, c.replace("value: 101.0", "value: 120.0", 1)), "claims[1].value", "is not the value of case 'c1'"),
    (lambda r, c: (r, c.replace("arch: sm_90a", "arch: sm_100a")), "claims[1].arch", "ran on sm_90a"),
    (lambda r, c: (r, c.replace("gpu: H200", "gpu: B200")), "claims[1].gpu", "ran on H200"),
    (lambda r, c: (r, c.replace("ratio: 1.01", "ratio: 1.2")), "claims[1].ratio", "is not the ratio"),
    (lambda r, c: (r, c.replace("    value: 100.0", "    value: 90.0")), "claims[1].baseline.value", "is not the baseline"),
    (lambda r, c: ({**r, "status": "incorrect"}, c), "claims[1].record", "needs a passed run"),
    (lambda r, c: ({**r, "cases": [{**r["cases"][0], "status": "failed"}]}, c), "claims[1].case", "is failed"),
])
def test_disagreements_are_reported_on_the_field(mini, change, field, fragment):
    record, claim = change(json.loads(json.dumps(RECORD)), CLAIM)
    setup(mini, record, claim)
    found = [p for p in mini.problems() if p["field"] == field]
    assert any(fragment in p["message"] for p in found), messages(mini.problems())


def test_record_of_a_probe_the_page_does_not_link(mini):
    setup(mini, probes="probes:\n- probe-y\n")
    found = mini.problems()
    assert any(p["field"] == "claims[1].record" and "does not list in probes" in p["message"] for p in found), \
        messages(found)


def test_a_fake_gpu_record_is_not_a_measurement(mini, monkeypatch):
    fake = json.loads(json.dumps(RECORD))
    fake["environment"]["driver"] = "fake"
    setup(mini, fake)
    page = mini.root / "wiki/hardware/example.md"
    text = page.read_text()
    monkeypatch.delenv("KERNELWIKI_FAKE_GPU", raising=False)
    found = mini.problems()
    assert any(p["field"] == "claims[1].record" and "KERNELWIKI_FAKE_GPU" in p["message"] for p in found), \
        messages(found)
    mini.run("refresh")   # refresh makes no measured claim from it either
    assert "id: measured.x.c1" not in page.read_text()
    page.write_text(text)
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", "NVIDIA H200,sm_90a")   # the runner's own tests
    assert mini.problems() == []
