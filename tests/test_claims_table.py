"""One claims-table layout (kernelwiki.model.claims) behind refresh's `claims` block, `get --claims`
and the site's claims tables: the same claims, each reproduction beside the claim it reproduces."""

from __future__ import annotations

import re

from kernelwiki.commands.get import claims_table
from kernelwiki.commands.refresh.blocks import render_claims
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


def _refresh_rows(claims: list[dict]) -> list[tuple[str, bool]]:
    """(claim id, is a reproduction) per row of the generated block."""
    rows = [line.split(" | ")[0].removeprefix("| ") for line in render_claims({"claims": claims}).splitlines()[3:-1]]
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
    assert "| ↳ measured.x.c1 | 700.0 TFLOP/s (1.01× cuBLAS) | measured |  |  | " \
           "[record](../../artifacts/evidence/probe-x/r.json) |" in block
    table = claims_table(CLAIMS)
    assert "| measured.x.c1 (tflops) | 700.0 TFLOP/s (1.014× cuBLAS) |  |  |  |  |  | measured | " \
           "artifacts/evidence/probe-x/r.json#c1 |" in table


def test_a_string_baseline_is_shown_not_a_traceback():
    claims = [{"id": "x", "value": 1.0, "ratio": 1.5, "baseline": "cuBLAS", "evidence": "spec"}]
    assert "1.0 (1.5× cuBLAS)" in claims_table(claims) and "1.0 (1.5× cuBLAS)" in render_claims({"claims": claims})
