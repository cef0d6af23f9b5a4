"""refresh: only managed fields and generated blocks change; prose stays byte-identical; idempotent."""

from __future__ import annotations

import json

import pytest

from conftest import HW_PAGE

RECORD = {
    "schema_version": 1, "probe": "probe-x", "run_id": "r1", "mode": "run", "status": "passed",
    "started_at": "2026-11-29T10:00:00Z",
    "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a", "driver": "580.1", "cuda_runtime": "13.0",
                    "cutlass_dsl": "4.8.1", "torch": "2.11.0"},
    "protocol": {"method": "cuda-events"}, "negative_control": {"description": "broken", "failed_gate": True},
    "cases": [{"id": "c1", "status": "passed", "params": {"dtype": "bf16", "shape": "64x64x64"},
               "headline": {"metric": "tflops", "value": 123.4, "unit": "TFLOP/s"}}],
}

AWKWARD_BODY = """# Ünïcödé — prose with “quotes”, 中文 and emoji 🚀

```markdown
<!-- kernelwiki:begin claims -->
this is an example inside a code fence and must not be touched
<!-- kernelwiki:end claims -->
```

Text between.

<!-- kernelwiki:begin claims -->
stale generated content
<!-- kernelwiki:end claims -->

Trailing prose.   
"""


def setup(mini, body: str = AWKWARD_BODY, crlf: bool = False):
    mini.write("artifacts/evidence/probe-x/r1.json", json.dumps(RECORD))
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
               "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n  claim: peak\n")
    mini.write("probes/probe-x/run.py", "")
    text = HW_PAGE.replace("summary:", "probes:\n- probe-x\nsummary:").split("---\n# Example")[0] + "---\n" + body
    if crlf:
        text = text.replace("\n", "\r\n")
    return mini.write("wiki/hardware/example.md", text.encode())


def prose(text: str) -> str:
    """Everything outside the frontmatter and outside real generated blocks."""
    body = text.split("---", 2)[2]
    head, _, rest = body.partition("Text between.")
    tail = rest.split("<!-- kernelwiki:end claims -->")[-1]
    return head + tail


@pytest.mark.parametrize("crlf", [False, True])
def test_round_trip_keeps_prose_and_is_idempotent(mini, crlf):
    page = setup(mini, crlf=crlf)
    before = page.read_bytes().decode()
    assert mini.run("refresh", "--check")[0] == 1
    assert mini.run("refresh")[0] == 0
    after = page.read_bytes().decode()
    assert prose(after) == prose(before)
    assert "this is an example inside a code fence and must not be touched" in after
    assert "stale generated content" not in after
    # the file keeps the claims block empty (the table repeats the frontmatter); a reader gets it filled
    row = "| ↳ measured.x.c1 | 123.4 TFLOP/s | 1 run | measured | H200 / sm_90a |"
    assert row not in after and "measured.x.c1" in after.split("---", 2)[1]
    assert row in mini.run("get", "hw-example")[1]
    assert ("\r\n" in after) == crlf and ("\r\n" in after.replace("\r\n", "") or "\n" in after)
    if crlf:
        assert after.count("\r\n") == after.count("\n")
    # second run: nothing changes
    assert mini.run("refresh", "--check")[0] == 0
    mini.run("refresh")
    assert page.read_bytes().decode() == after


def test_managed_fields(mini):
    page = setup(mini)
    mini.run("refresh")
    text = page.read_text()
    for line in ("status: verified", "evidence_level: measured", "evidence_by_arch:\n  sm_90a: measured",
                 "measured_on: H200 | sm_90a | CUDA 13.0 | driver 580.1 | cutlass-dsl 4.8.1 | torch 2.11.0",
                 "last_measured: 2026-11-29T10:00:00Z", "  reproduces: peak", "  shape: 64x64x64"):
        assert line in text, line
    assert mini.problems() == []


def test_hand_typed_measured_number_cannot_land(mini):
    page = setup(mini)
    mini.run("refresh")
    page.write_text(page.read_text().replace("value: 123.4", "value: 150.0"))
    code, out, err = mini.run("refresh", "--check")
    assert code == 1 and "wiki/hardware/example.md: differs from what the records imply (claims" in out
    mini.run("refresh")
    assert "value: 123.4" in page.read_text()


def test_failed_latest_record_regresses_but_keeps_last_good_numbers(mini):
    page = setup(mini)
    failed = dict(RECORD, run_id="r2", status="incorrect", started_at="2026-11-29T11:00:00Z",
                  cases=[dict(RECORD["cases"][0], status="incorrect")])
    mini.write("artifacts/evidence/probe-x/r2.json", json.dumps(failed))
    mini.run("refresh")
    text = page.read_text()
    assert "status: regressed" in text and "value: 123.4" in text and "r1.json" in text


def test_old_evidence_is_stale(mini):
    page = setup(mini)
    # "Now" is the newest record of any probe: here a later, unrelated one (a real probe, and
    # dated in the past, or validate and refresh would refuse it).
    mini.write("probes/probe-y/probe.yaml", "id: probe-y\n")
    old = dict(RECORD, started_at="2025-06-01T00:00:00Z")
    mini.write("artifacts/evidence/probe-x/r1.json", json.dumps(old))
    other = dict(RECORD, probe="probe-y", run_id="r9", started_at="2026-06-01T00:00:00Z")
    mini.write("artifacts/evidence/probe-y/r9.json", json.dumps(other))
    (mini.root / "pyproject.toml").write_text("[tool.kernelwiki]\nfreshness_days = 90\n")
    mini.run("refresh")
    assert "status: stale" in page.read_text()


def test_page_without_probes_is_draft_and_loses_hand_written_measurements(mini):
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("summary:", "status: verified\nmeasured_on: typed by hand\nsummary:"))
    mini.run("refresh")
    text = page.read_text()
    assert "status: draft" in text and "measured_on" not in text and "evidence_level: source-reported" in text


def _case(value, ratio=None, median_ms=1.0):
    headline = {"metric": "tflops", "value": value, "unit": "TFLOP/s"}
    if ratio is not None:
        headline.update(baseline="cuBLAS", baseline_value=value / ratio, ratio=ratio)
    return {"id": "c1", "status": "passed", "headline": headline,
            "timing": {"ours": {"median_ms": median_ms}, "cuBLAS": {"median_ms": median_ms}}}


@pytest.mark.parametrize("history, new, dropped", [
    ([_case(780.0)], _case(690.0), True),                                  # no baseline: the value fell 12%
    ([_case(780.0, ratio=1.0)], _case(690.0, ratio=0.99), False),          # the machine slowed both alike
    ([_case(780.0, ratio=1.0)], _case(780.0, ratio=0.85), True),           # ours fell against cuBLAS
    ([_case(22.0, ratio=1.1, median_ms=0.01)], _case(11.0, ratio=0.5, median_ms=0.02), False),  # launch-bound
    ([_case(500.0, ratio=0.76), _case(550.0, ratio=0.83)], _case(520.0, ratio=0.74), False),  # noise: median 0.795
    ([_case(500.0, ratio=0.76), _case(550.0, ratio=0.83)], _case(520.0, ratio=0.60), True),   # a lasting drop
])
def test_regression_compares_with_the_median_of_earlier_runs(history, new, dropped):
    from kernelwiki.commands.refresh.status import dropped as _dropped
    from kernelwiki.storage.records import Record

    cases = [*history, new]
    runs = [Record(f"r{i}.json", {**RECORD, "run_id": f"r{i}", "cases": [case]}) for i, case in enumerate(cases)]
    assert _dropped(runs) is dropped


def test_regression_ignores_a_case_whose_parameters_changed():
    from kernelwiki.commands.refresh.status import dropped as _dropped
    from kernelwiki.storage.records import Record

    old, new = _case(780.0, ratio=1.0), _case(780.0, ratio=0.5)
    old["params"], new["params"] = {"tile_n": 64}, {"tile_n": 256}
    runs = [Record(f"r{i}.json", {**RECORD, "run_id": f"r{i}", "cases": [c]}) for i, c in enumerate((old, new))]
    assert _dropped(runs) is False


def test_candidate_claim_is_the_baselines_value_and_the_reproduction():
    """A case whose reported claim is another kernel's (reproduced_by): that kernel's value from the
    same run becomes the comparable reproduction; ours stays beside it without a ratio to it."""
    from kernelwiki.commands.refresh.claims import candidate_claim as _candidate_claim

    ours = {"id": "measured.p.c", "metric": "tflops", "value": 900.0, "unit": "TFLOP/s", "gpu": "H200",
            "arch": "sm_90a", "evidence": "measured", "record": "artifacts/evidence/p/r.json", "case": "c",
            "reproduces": "h800-x", "comparable": True, "measured_at": "2026-12-01T00:00:00Z"}
    case = {"id": "c", "params": {"layout": "normal", "shape": "1x2x3"},
            "baselines": [{"name": "cuBLAS", "value": 800.0}, {"name": "DeepGEMM", "value": 1000.0}]}
    spec = {"id": "c", "claim": "h800-x", "reproduced_by": "DeepGEMM"}
    claim = _candidate_claim(ours, case, spec, {"h800-x"})
    assert claim["id"] == "measured.p.c.deepgemm" and claim["value"] == 1000.0 and claim["candidate"] == "DeepGEMM"
    assert claim["reproduces"] == "h800-x" and claim["comparable"] is True and "comparable" not in ours
    assert "reproduces" not in _candidate_claim(dict(ours), case, spec, set())        # reported claim elsewhere
    assert _candidate_claim(dict(ours), {**case, "baselines": []}, spec, {"h800-x"}) is None   # skipped candidate
    assert _candidate_claim(dict(ours), case, {"id": "c"}, {"h800-x"}) is None
