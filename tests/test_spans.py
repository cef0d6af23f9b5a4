"""Inline claim spans: refresh renders them from claims, --check catches hand edits, validate names unknown ids."""

from __future__ import annotations

import pytest

from conftest import messages
from test_refresh import setup

from kernelwiki.model.spans import render, render_spans, with_unit

BODY = """# Example

The example reaches <!-- claim:peak -->999 TFLOP/s<!-- /claim --> (reported) and
<!-- claim:measured.x.c1 -->1 TFLOP/s<!-- /claim --> here, <!-- claim:measured.x.c1.ratio -->9×<!-- /claim --> the
baseline's <!-- claim:measured.x.c1.baseline -->0<!-- /claim -->, <!-- claim:measured.x.c1.peak -->?<!-- /claim --> of peak,
<!-- claim:measured.x.c1.ceiling -->?<!-- /claim --> of the measured ceiling.

```markdown
<!-- claim:peak -->example text inside a fence<!-- /claim -->
<!-- claim:no-such-claim -->also an example<!-- /claim -->
```
"""


def with_baseline(mini):
    import json

    from test_refresh import RECORD
    record = json.loads(json.dumps(RECORD))
    record["cases"][0]["headline"].update(baseline="cuBLAS", baseline_value=130.0, ratio=0.94923,
                                          fraction_of_peak=0.12478, fraction_of_ceiling=0.97123)
    record["ceilings"] = {"run_id": "20260101T000000Z-h200-run", "copy": 4.2}
    mini.write("artifacts/evidence/probe-x/r1.json", json.dumps(record))


def test_refresh_renders_spans_and_check_catches_hand_edits(mini):
    page = setup(mini, body=BODY)
    with_baseline(mini)
    assert mini.run("refresh", "--check")[0] == 1
    assert mini.run("refresh")[0] == 0
    text = page.read_text(encoding="utf-8")
    assert "<!-- claim:peak -->100 TFLOP/s<!-- /claim --> (reported)" in text
    assert "<!-- claim:measured.x.c1 -->123.4 TFLOP/s<!-- /claim -->" in text
    assert "<!-- claim:measured.x.c1.ratio -->0.949×<!-- /claim -->" in text
    assert "<!-- claim:measured.x.c1.baseline -->130 TFLOP/s<!-- /claim -->" in text
    assert "<!-- claim:measured.x.c1.peak -->12.5%<!-- /claim -->" in text
    assert "<!-- claim:measured.x.c1.ceiling -->97.1%<!-- /claim -->" in text
    assert "example text inside a fence" in text and "also an example" in text
    assert mini.run("refresh", "--check")[0] == 0           # idempotent
    page.write_text(text.replace("123.4 TFLOP/s", "150 TFLOP/s"), encoding="utf-8")
    code, out, _ = mini.run("refresh", "--check")
    assert code == 1 and "(claim spans)" in out


def test_validate_reports_unknown_span_ids_with_their_line(mini):
    page = setup(mini, body="# Example\n\nline two\nsee <!-- claim:nope -->1 W<!-- /claim --> and "
                            "<!-- claim:peak.ratio -->1×<!-- /claim -->\n")
    found = [p for p in mini.problems() if p["field"] == "claim span"]
    line = page.read_text().splitlines().index("see <!-- claim:nope -->1 W<!-- /claim --> and "
                                               "<!-- claim:peak.ratio -->1×<!-- /claim -->") + 1
    assert {p["line"] for p in found} == {str(line)}, messages(found)
    assert any("no claim with id 'nope'" in p["message"] for p in found)
    assert any("has no ratio" in p["message"] for p in found)


def test_spans_inside_fences_are_not_problems(mini):
    setup(mini, body="# Example\n\n~~~\n<!-- claim:nope -->x<!-- /claim -->\n~~~\n")
    assert not [p for p in mini.problems() if p["field"] == "claim span"]


@pytest.mark.parametrize("value, unit, text", [
    (591.634, "TFLOP/s", "591.6 TFLOP/s"), (1613, "TFLOP/s", "1613 TFLOP/s"), (1.3, "x", "1.3×"),
    (71, "%", "71%"), (4.8, "TB/s", "4.8 TB/s"), (12345.6, "GB/s", "12346 GB/s"), (0.0025123, None, "0.002512"),
    ("wgmma.mma_async", None, "wgmma.mma_async"),
])
def test_value_format(value, unit, text):
    assert with_unit(value, unit) == text


def test_ratio_format_and_unknown_spans_are_left_alone():
    assert render({"ratio": 0.95}, "ratio") == "0.95×"
    body = "a <!-- claim:gone -->7 W<!-- /claim --> b <!-- claim:k -->0<!-- /claim -->\n"
    assert render_spans(body, [{"id": "k", "value": 2, "unit": "W"}]) == \
        "a <!-- claim:gone -->7 W<!-- /claim --> b <!-- claim:k -->2 W<!-- /claim -->\n"


def test_runs_block_lists_every_passing_run(mini):
    import json

    from test_refresh import RECORD
    page = setup(mini, body="# Example\n\n<!-- kernelwiki:begin runs -->\nstale\n<!-- kernelwiki:end runs -->\n")
    for run_id, ratio, status in (("r1", 0.9, "passed"), ("r2", 0.95, "incorrect"), ("r3", 0.85, "passed")):
        record = json.loads(json.dumps(RECORD))
        record.update(run_id=run_id, status=status, started_at=f"2026-11-29T10:0{run_id[1]}:00Z")
        record["cases"][0]["headline"].update(baseline="cuBLAS", baseline_value=1.0, ratio=ratio)
        mini.write(f"artifacts/evidence/probe-x/{run_id}.json", json.dumps(record))
    mini.run("refresh")
    text = page.read_text(encoding="utf-8")
    assert "| probe-x | c1 | cuBLAS | 0.9, 0.85 | 0.85 | 0.875 | 0.9 |" in text and "stale" not in text
    assert mini.run("refresh", "--check")[0] == 0


def test_versus_block_has_our_variants_in_the_latest_runs_of_one_commit(mini):
    """ours / each variant of ours and / the case's reproduction per run and their median, over the
    newest runs made from the latest run's commit and GPU only; not cuBLAS (the runs table's), not
    entries timed under another protocol ("@"), not cases on other pages or timing a teaching variant."""
    import json

    from test_refresh import RECORD
    page = setup(mini, body="# Example\n\n<!-- kernelwiki:begin versus -->\nstale\n<!-- kernelwiki:end versus -->\n")
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
               "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n  claim: peak\n  reproduced_by: Other\n"
               "- id: c2\n  pages: [some-other-page]\n- id: c3\n")
    # the second-newest run is from another commit, one from another GPU: both left out
    runs = (("r1", "new", "NVIDIA H200", 1.2), ("r2", "new", "NVIDIA H200", 1.1), ("r3", "new", "NVIDIA H100", 9.0),
            ("r4", "new", "NVIDIA H200", 1.3), ("r5", "old", "NVIDIA H200", 2.0), ("r6", "new", "NVIDIA H200", 1.0))
    for run_id, commit, gpu, ratio in runs:
        record = json.loads(json.dumps(RECORD))
        record.update(run_id=run_id, started_at=f"2026-11-29T10:0{run_id[1]}:00Z")
        record["environment"].update(commit=commit, gpu=gpu)
        entries = [{"name": "ours, one K tile in flight", "value": 100.0, "ratio": ratio},
                   {"name": "Other", "value": 100.0, "ratio": ratio / 2},
                   {"name": "ours @ 8 GB memset", "value": 100.0, "ratio": 0.8},
                   {"name": "cuBLAS", "value": 100.0, "ratio": 0.5}]
        case = record["cases"][0]
        case["baselines"] = entries
        record["cases"] = [case, {**case, "id": "c2"}, {**case, "id": "c3", "params": {**case["params"], "variant": "naive"}}]
        mini.write(f"artifacts/evidence/probe-x/{run_id}.json", json.dumps(record))
    mini.run("refresh")
    text = page.read_text(encoding="utf-8")
    assert "| probe-x | c1 | ours, one K tile in flight | 1.1, 1.3, 1 | 1.1 |" in text
    assert "| probe-x | c1 | Other | 0.55, 0.65, 0.5 | 0.55 |" in text
    assert "| c2 |" not in text and "| c3 |" not in text
    assert "cuBLAS" not in text and "@" not in text and "stale" not in text
    assert mini.run("refresh", "--check")[0] == 0


def test_a_span_broken_across_lines_is_reported(mini):
    page = setup(mini, body="# Example\n\nsee <!-- claim:peak -->100\nTFLOP/s<!-- /claim --> here\n")
    found = [p for p in mini.problems() if p["field"] == "claim span"]
    first = page.read_text().splitlines().index("see <!-- claim:peak -->100") + 1
    assert sorted(int(p["line"]) for p in found) == [first, first + 1]
    assert all("unclosed or malformed span" in p["message"] for p in found)
