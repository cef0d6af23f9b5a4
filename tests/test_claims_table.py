"""One claims-table layout (kernelwiki.model.claims) behind refresh's `claims` block, `get --claims`
and the site's claims tables: the same claims, each reproduction beside the claim it reproduces."""

from __future__ import annotations

import re

from kernelwiki.commands.get import Options, claims_table, page_table
from kernelwiki.docsite.render import claims_tables
from kernelwiki.model.claims import claim_rows, page_claims

CLAIMS = [
    {"id": "reported-peak", "metric": "tflops", "value": 989.0, "unit": "TFLOP/s", "evidence": "spec",
     "source": "src-a"},
    {"id": "reported-bw", "metric": "bandwidth", "value": 4.8, "unit": "TB/s", "evidence": "source-reported",
     "source": "src-a"},
    {"id": "compiled.x.sm_90a", "metric": "instructions-found", "value": "wgmma.mma_async", "arch": "sm_90a",
     "evidence": "compiled", "record": "artifacts/evidence/probe-x/c.json"},
    {"id": "measured.x.c1", "metric": "tflops", "value": 700.0, "unit": "TFLOP/s", "evidence": "measured",
     "record": "artifacts/evidence/probe-x/r.json", "case": "c1", "reproduces": "reported-peak",
     "baseline": {"name": "cuBLAS", "value": 690.0}, "ratio": 1.0145},
    {"id": "measured.x.c1.deepgemm", "metric": "tflops", "value": 710.0, "unit": "TFLOP/s", "evidence": "measured",
     "record": "artifacts/evidence/probe-x/r.json", "case": "c1", "reproduces": "reported-peak"},
    {"id": "measured.x.c2", "metric": "tflops", "value": 500.0, "unit": "TFLOP/s", "evidence": "measured",
     "record": "artifacts/evidence/probe-x/r.json", "case": "c2"},
]
LEGACY = [{"metric": "tflops", "value": 1.0, "unit": "TFLOP/s", "source_id": "src-a"}]
IDS = {c["id"] for c in CLAIMS}


def render_claims(meta: dict) -> str:
    """The page's claims block as get and MCP fill it."""
    return page_table(meta["claims"], Options())


def _refresh_rows(claims: list[dict]) -> list[tuple[str, bool]]:
    """(claim id, is a reproduction) per row of the generated block."""
    rows = [line.split(" | ")[0].removeprefix("| ") for line in render_claims({"claims": claims}).splitlines()[3:]
            if line.startswith("| ")]
    return [(row.removeprefix("↳ "), row.startswith("↳ ")) for row in rows]


def _site_pairs(claims: list[dict]) -> set[tuple[str, str | None]]:
    """(label id, id of the reproduction on its row) per row of the site's tables."""
    out = set()
    for row in re.findall(r"<tr><td id=.*?</tr>", claims_tables({"claims": claims}, "kernels/k.md", {}), re.S):
        ids = re.findall(r'id="claim-([^"]+)"', row)
        out.add((ids[0], ids[1] if len(ids) > 1 else None))
    return {(a.replace("-", "."), b.replace("-", ".") if b else None) for a, b in out}


def test_the_three_tables_show_the_same_claims():
    refresh_ids = [claim_id for claim_id, _ in _refresh_rows(CLAIMS)]
    get_ids = [line.split(" | ")[0].removeprefix("| ").split(" (")[0] for line in claims_table(CLAIMS).splitlines()[2:]]
    site_ids = {i for pair in _site_pairs(CLAIMS) for i in pair if i}
    assert sorted(refresh_ids) == sorted(get_ids) == sorted(IDS)
    assert site_ids == {i.replace("-", ".") for i in IDS}


def test_refresh_and_the_site_pair_each_reproduction_with_its_claim():
    rows = _refresh_rows(CLAIMS)
    assert rows == [("reported-peak", False), ("measured.x.c1", True), ("measured.x.c1.deepgemm", True),
                    ("reported-bw", False), ("compiled.x.sm_90a", False), ("measured.x.c2", False)]
    model = {(r.label["id"], r.reproduction["id"] if r.reproduction else None) for r in claim_rows(CLAIMS)}
    assert model == {("reported-peak", "measured.x.c1"), ("reported-peak", "measured.x.c1.deepgemm"),
                     ("reported-bw", None), ("compiled.x.sm_90a", None), ("measured.x.c2", None)}
    assert _site_pairs(CLAIMS) == {(a.replace("-", "."), b) for a, b in model}


def test_get_and_the_site_read_legacy_claims_alike():
    claims = page_claims({"claims": CLAIMS, "performance_claims": LEGACY})
    assert claims[-1] == {"metric": "tflops", "value": 1.0, "unit": "TFLOP/s", "id": "performance-claim-0",
                          "evidence": "source-reported", "source": "src-a"}
    assert "performance-claim-0 (tflops)" in claims_table(claims)
    assert 'id="claim-performance-claim-0"' in claims_tables({"claims": CLAIMS, "performance_claims": LEGACY},
                                                            "kernels/k.md", {})


def test_cell_formats_stay_as_each_table_had_them():
    block = render_claims({"claims": CLAIMS})
    assert "| ↳ measured.x.c1 | 700.0 TFLOP/s (1.01× cuBLAS) | 1 run | measured |  |  | [R2] |" in block
    assert "\n[R2]: artifacts/evidence/probe-x/r.json\n" in block
    table = claims_table(CLAIMS)
    assert "| measured.x.c1 (tflops) | 700.0 TFLOP/s (1.014× cuBLAS) | 1 run |  |  |  |  |  | measured | " \
           "artifacts/evidence/probe-x/r.json#c1 |" in table


def test_a_string_baseline_is_shown_not_a_traceback():
    claims = [{"id": "x", "value": 1.0, "ratio": 1.5, "baseline": "cuBLAS", "evidence": "spec"}]
    assert "1.0 (1.5× cuBLAS)" in claims_table(claims) and "1.0 (1.5× cuBLAS)" in render_claims({"claims": claims})


SPREAD = {"p10": 171.2, "p90": 175.04, "runs": 3}


def test_each_measured_claim_says_how_many_runs_and_their_spread_in_every_table():
    """refresh's block, `get --claims` (text and JSON) and the site say for each measured claim how
    many runs its value summarizes and their p10-p90; hand-written claims say nothing of runs."""
    claims = [dict(c) for c in CLAIMS]
    claims[5]["spread"] = SPREAD
    said = "median of 3 runs, p10–p90 171.2–175 TFLOP/s"
    block = render_claims({"claims": claims})
    assert f"| measured.x.c2 | 500.0 TFLOP/s | {said} | measured |" in block
    assert "| ↳ measured.x.c1 | 700.0 TFLOP/s (1.01× cuBLAS) | 1 run |" in block
    assert "| reported-peak | 989.0 TFLOP/s |  | spec |" in block
    table = claims_table(claims)
    assert f"| measured.x.c2 (tflops) | 500.0 TFLOP/s | {said} |" in table
    site = claims_tables({"claims": claims}, "kernels/k.md", {})
    assert f'<span class="kw-note kw-runs">{said}</span>' in site and site.count(">1 run</span>") == 2
    several_gpus = dict(claims[5], spread={**SPREAD, "gpus": 2})
    assert "median of 3 runs on 2 GPUs" in render_claims({"claims": [several_gpus]})


def test_get_claims_json_and_mcp_keep_runs_and_spread(mini):
    """Over the CLI's JSON and MCP alike a measured claim says how many runs it summarizes (`runs`)
    and keeps its spread; a hand-written claim gets no `runs`."""
    import json

    from kernelwiki.storage.repo import Repo

    page = mini.root / "wiki/hardware/example.md"
    measured = ("- id: measured.x.c1\n  metric: tflops\n  value: 101.0\n  unit: TFLOP/s\n  evidence: measured\n"
                "  record: artifacts/evidence/probe-x/run1.json\n  case: c1\n"
                "  spread:\n    p10: 99.5\n    p90: 102.25\n    runs: 3\n")
    page.write_text(page.read_text().replace("---\n# Example", measured + "---\n# Example"))
    code, out, err = mini.run("get", "hw-example", "--claims", "--format", "json")
    claims = {c["id"]: c for c in json.loads(out)["claims"]}
    assert code == 0, err
    assert claims["measured.x.c1"]["runs"] == 3 and claims["measured.x.c1"]["spread"]["p90"] == 102.25
    assert "runs" not in claims["peak"]
    pytest = __import__("pytest")
    pytest.importorskip("mcp")
    from kernelwiki.faces.mcp_server import call

    result = call(Repo(mini.root), "get_page", {"page": "hw-example", "part": "claims", "format": "json"})
    assert {c["id"]: c.get("runs") for c in result.structured_content["claims"]} == {"peak": None, "measured.x.c1": 3}
    text = call(Repo(mini.root), "get_page", {"page": "hw-example", "part": "claims"}).content[0].text
    assert "median of 3 runs, p10–p90 99.5–102.2 TFLOP/s" in text


def test_record_page_names_the_claims_it_backs_and_their_runs():
    from kernelwiki.docsite.records import record_page
    from kernelwiki.storage.records import Record

    record = Record("artifacts/evidence/probe-x/r.json", {
        "probe": "probe-x", "run_id": "r", "mode": "run", "status": "passed", "started_at": "2026-11-29T18:00:00Z",
        "protocol": {"iterations": 30}, "cases": [{"id": "c2", "status": "passed",
                                                   "headline": {"metric": "tflops", "value": 500.0, "unit": "TFLOP/s"}}]})
    claim = dict(CLAIMS[5], spread=SPREAD)
    page = record_page(record, {"kernel-x": "kernels/x.md"}, ["kernel-x"], [record], {}, [("kernel-x", claim)])
    assert "the median of 30 timed repetitions" in page
    section = page.split("## Claims from this run")[1]
    assert "| `measured.x.c2` | [kernel-x](../../kernels/x.md) | `c2` | 500 TFLOP/s | " \
           "median of 3 runs, p10–p90 171.2–175 TFLOP/s |" in section
    assert "## Claims from this run" not in record_page(record, {}, [], [record], {}, [])
