"""The site's building blocks as pure functions: links, number formatting, claims tables, charts,
record pages, cross-links. No mkdocs run here (tests/test_site.py builds the real site)."""

from __future__ import annotations

import re

import pytest
from pathlib import Path

from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record
from kernelwiki.docsite import charts, render
from kernelwiki.docsite.records import record_page


def test_href_is_relative_to_the_page_url_not_the_markdown_file():
    assert render.href("hardware/wgmma.md", "evidence/probes.md", "probe-x") == "../../evidence/probes/#probe-x"
    assert render.href("index.md", "evidence/probes.md") == "evidence/probes/"
    assert render.href("evidence/index.md", "evidence/probes.md") == "probes/"
    assert render.href("evidence/probes.md", "index.md") == "../../"
    assert render.href("hardware/wgmma.md", "hardware/wgmma.md", "a") == "./#a"
    assert render.record_uri("artifacts/evidence/p/r.json") == "records/p/r.md"


def test_numbers_get_three_to_four_significant_digits():
    assert [render.fmt(v) for v in (795.8248, 15.7533, 0.7446, 1083.006, 206, 12345.6, 0.0)] == \
        ["795.8", "15.75", "0.7446", "1083", "206", "12346", "0"]
    assert render.fmt_ratio(1.0424) == "1.04×" and render.fmt_ratio(None) == "—"


def test_facts_and_instruction_lists_are_readable():
    facts = render.fact_html("fact:runtime-if-traced:then,else, fact:const-expr-if-traced:then")
    assert "runtime if traced: <code>then,else</code>" in facts and "const expr if traced: <code>then</code>" in facts
    assert "fact:" not in facts
    assert render.fact_html("wgmma.mma_async, HGMMA") == "<code>wgmma.mma_async</code>, <code>HGMMA</code>"


def _meta(comparable: bool | None) -> dict:
    measured = {"id": "m", "metric": "tflops", "value": 660.0, "unit": "TFLOP/s", "gpu": "H200", "evidence": "measured",
                "record": "artifacts/evidence/p/r.json", "reproduces": "r", "baseline": {"name": "cuBLAS", "value": 600.0},
                "ratio": 1.1}
    if comparable is not None:
        measured["comparable"] = comparable
    return {"claims": [{"id": "r", "metric": "tflops", "value": 600, "unit": "TFLOP/s", "gpu": "H800",
                        "evidence": "source-reported", "source": "src-a", "conditions": "long conditions"},
                       measured,
                       {"id": "c", "metric": "instructions-found", "value": "HGMMA, UTMALDG", "evidence": "compiled",
                        "record": "artifacts/evidence/p/r.json"}]}


def test_claims_table_shows_measured_over_reported_only_when_comparable():
    pages = {"src-a": "sources/a.md"}
    plain = render.claims_tables(_meta(None), "kernels/k.md", pages)
    assert "(TFLOP/s)" in plain and "795" not in plain and ">660<" in plain and ">600<" in plain
    assert "1.1× <span class=\"kw-note\">cuBLAS, same run" in plain and "of reported" not in plain
    assert "on H200" in plain  # the reproduction ran on another GPU than the reported value
    assert '<span class="kw-cond">long conditions</span>' in plain  # conditions visible in the row
    assert plain.startswith('<details class="kw-fold"') and "<details open" not in plain  # folded, closed
    assert 'href="../../sources/a/"' in plain and 'href="../../records/p/r/"' in plain
    assert 'id="claim-r"' in plain and 'id="claim-m"' in plain and "<code>HGMMA</code>" in plain
    assert "of reported" not in render.claims_tables(_meta(False), "kernels/k.md", pages)
    assert "1.1× <span class=\"kw-note\">of reported" in render.claims_tables(_meta(True), "kernels/k.md", pages)


def test_claim_spans_render_as_text_linked_to_their_row():
    text = "It reaches <!-- claim:r -->600 TFLOP/s<!-- /claim --> and <!-- claim:gone -->5 us<!-- /claim -->."
    out = render.claim_spans(text, {"r"}, "kernels/k.md")
    assert out == 'It reaches <a class="kw-claim-ref" href="#claim-r">600 TFLOP/s</a> and 5 us.'


def _record(cases: list[dict], started: str = "2026-11-29T18:00:00Z", path: str = "artifacts/evidence/p/r.json") -> Record:
    return Record(path, {"probe": "p", "run_id": "r", "mode": "run", "status": "passed", "started_at": started,
                         "environment": {"gpu": "NVIDIA H200"}, "protocol": {"method": "cuda-events"}, "negative_control": {"failed_gate": True},
                         "cases": cases})


def _case(case_id: str, ratio: float, **params) -> dict:
    return {"id": case_id, "status": "passed", "params": params,
            "headline": {"metric": "tflops", "value": 100 * ratio, "unit": "TFLOP/s", "baseline": "cuBLAS",
                         "baseline_value": 100.0, "ratio": ratio}}


SPEC = ProbeSpec("probe-gemm", Path("."), {"id": "probe-gemm", "kind": "kernel", "pages": ["kernel-x"], "cases": []})


def test_llm_shapes_are_drawn_as_throughput_by_m_one_line_per_nk():
    cases = [_case(f"llm-{m}x{n}x{k}", 0.9 + m / 1e5, dtype="bf16", shape=f"{m}x{n}x{k}", set="llm-shapes")
             for m in (128, 1024, 4096) for n, k in ((4096, 7168), (2112, 7168))]
    found = charts.case_charts(SPEC, _record(cases), None)
    assert len(found) == 1 and found[0].kind == "lines" and found[0].xlabel == "M" and found[0].ylabel == "TFLOP/s"
    lines = found[0]
    assert lines.title == "TFLOP/s: ours vs cuBLAS" and lines.baseline == "cuBLAS"
    assert set(lines.panels[""]) == {"N×K=4096×7168", "N×K=2112×7168"}
    # the real quantity, ours and the baseline, not their ratio
    assert lines.panels[""]["N×K=4096×7168"][0] == (128, 100 * (0.9 + 128 / 1e5), 100.0)
    assert [x for x, *_ in lines.panels[""]["N×K=4096×7168"]] == [128, 1024, 4096]
    # one chart per quantity: a case of another set makes it one row per case, grouped by set
    cases.append(_case("odd", 1.1, dtype="bf16", shape="4096x4096x4096", set="square"))
    found = charts.case_charts(SPEC, _record(cases), None)
    assert [(c.kind, c.ylabel) for c in found] == [("dots", "TFLOP/s")]
    assert found[0].panels[""]["square"] == [("odd", pytest.approx(110.0), 100.0)]
    assert len(found[0].panels[""]["llm-shapes"]) == 6


def test_a_numeric_parameter_becomes_the_axis_and_many_lines_split_into_panels_of_one_chart():
    cases = [_case(f"{d}-{c}-{s}-{h}", 1.0, seqlen=s, head_dim=h, causal=c, direction=d, shape="b")
             for d in ("fwd", "bwd") for c in (False, True) for s in (1024, 2048, 4096) for h in (64, 128)]
    found = charts.case_charts(SPEC, _record(cases), None)
    # more than six lines: panels one below the other in the one chart (never side by side on a phone)
    assert len(found) == 1 and found[0].kind == "lines" and found[0].xlabel == "seqlen"
    assert len(found[0].panels) == 2 and all(len(lines) == 4 for lines in found[0].panels.values())
    assert set(found[0].panels) == {"causal=False", "causal=True"}
    svg = charts._draw(found[0])
    assert svg.count("causal=") == 2 and svg.count(">ours<") <= 1   # one legend, under the last panel


def test_history_needs_two_runs_and_svg_is_cached(tmp_path):
    first = _record([_case("a", 0.9)], "2026-11-29T17:00:00Z", "artifacts/evidence/p/1.json")
    assert charts.history_chart(SPEC, [first], None) is None
    second = _record([_case("a", 1.0)], "2026-11-29T18:00:00Z", "artifacts/evidence/p/2.json")
    chart = charts.history_chart(SPEC, [first, second], None)
    assert chart.panels[""]["a"] == [("2026-11-29 17:00", 0.9), ("2026-11-29 18:00", 1.0)]
    svg = charts.draw(chart, tmp_path)
    assert svg.startswith("<?xml") and "<svg" in svg
    assert not re.search(r'href="https?:|url\(https?:|@import', svg)  # namespaces only: nothing to fetch
    (tmp_path / chart.name).write_text("<svg>cached</svg>")
    assert charts.draw(chart, tmp_path) == "<svg>cached</svg>"


def test_record_page_has_environment_protocol_cases_and_the_json():
    page = record_page(_record([_case("a", 0.95, shape="8x8x8")]), {"kernel-x": "kernels/x.md"}, ["kernel-x"])
    assert "## Cases" in page and "`a`" in page and "0.95×" in page and "## Environment" in page
    assert "## Protocol" in page and "[r.json](r.json)" in page and "[kernel-x](../../kernels/x.md)" in page
    assert "search:\n  exclude: true" in page


def test_ids_and_aliases_in_prose_become_links_outside_code_headings_and_links():
    from kernelwiki.docsite.links import Linker

    linker = Linker({"hw-wgmma": "hardware/wgmma.md", "hw-tmem": "hardware/tmem.md", "technique-x": "techniques/x.md"},
                    {"hw-wgmma": ["wgmma.mma_async", "gmma"], "hw-tmem": ["tcgen05.ld"], "technique-x": ["128x128"]})
    text = "\n".join([
        "# About hw-wgmma",
        "See `hw-wgmma` and hw-tmem; `tcgen05.ld` loads, tcgen05.ld again, wgmma.mma_async issues.",
        "A gmma word, a 128x128 tile, [hw-tmem](x.md) and https://e.com/hw-wgmma stay.",
        "```python",
        "hw-wgmma = 1",
        "```",
        "Own page: technique-x.",
    ])
    out = linker.link(text, "techniques/x.md", "technique-x").split("\n")
    assert out[0] == "# About hw-wgmma"
    assert out[1] == ("See [`hw-wgmma`](../hardware/wgmma.md) and [hw-tmem](../hardware/tmem.md); "
                      "[`tcgen05.ld`](../hardware/tmem.md) loads, [tcgen05.ld](../hardware/tmem.md) again, "
                      "[wgmma.mma_async](../hardware/wgmma.md) issues.")
    assert out[2] == "A gmma word, a 128x128 tile, [hw-tmem](x.md) and https://e.com/hw-wgmma stay."
    assert out[3:6] == ["```python", "hw-wgmma = 1", "```"] and out[6] == "Own page: technique-x."


def test_an_alias_of_two_pages_links_nowhere():
    from kernelwiki.docsite.links import Linker

    linker = Linker({"a": "a.md", "b": "b.md"}, {"a": ["x.1"], "b": ["x.1"]})
    assert linker.link("`x.1` and x.1", "c.md", None) == "`x.1` and x.1"


def test_refresh_copies_comparable_from_the_case_into_the_measured_claim():
    from conftest import ROOT
    from kernelwiki.commands.refresh.claims import measured_claims as _measured_claims
    from kernelwiki.model.vocab import Vocabulary

    vocab = Vocabulary.load(ROOT / "schemas")
    record = _record([_case("a", 1.1, dtype="bf16", shape="8x8x8"), _case("b", 0.9, dtype="bf16", shape="8x8x8")])
    spec = ProbeSpec("probe-gemm", Path("."), {"id": "probe-gemm", "cases": [
        {"id": "a", "claim": "reported-a", "comparable": True}, {"id": "b", "claim": "reported-b"}]})
    claims = {c["case"]: c for case in record.data["cases"]
              for c in _measured_claims(spec, [(record, case)], {"reported-a", "reported-b"}, vocab)}
    assert claims["a"]["reproduces"] == "reported-a" and claims["a"]["comparable"] is True
    assert claims["b"]["reproduces"] == "reported-b" and "comparable" not in claims["b"]


def test_comparable_is_an_optional_boolean_of_claims_and_probe_cases():
    import json

    import jsonschema

    from conftest import ROOT

    claim = json.loads((ROOT / "schemas/claim.schema.json").read_text())
    good = {"id": "m", "metric": "tflops", "value": 1.0, "evidence": "measured", "record": "artifacts/evidence/p/r.json"}
    jsonschema.validate({**good, "comparable": True}, claim)
    try:
        jsonschema.validate({**good, "comparable": "yes"}, claim)
        raise AssertionError("a non-boolean comparable passed")
    except jsonschema.ValidationError:
        pass
    probe = json.loads((ROOT / "schemas/probe.schema.json").read_text())
    assert probe["properties"]["cases"]["items"]["properties"]["comparable"]["type"] == "boolean"


def test_search_sees_prose_without_cards_claims_tables_or_code():
    from kernelwiki.docsite.hooks import _CODE_AND_TABLES

    html = ("<p>prose</p>" + render.evidence_card({"architectures": ["sm_90a"], "probes": ["probe-x"]}, "a/b.md")
            + render.claims_tables(_meta(None), "kernels/k.md", {"src-a": "sources/a.md"})
            + '<div class="language-python highlight"><pre><span></span><code>x = 1</code></pre></div><p>more</p>')
    assert _CODE_AND_TABLES.sub("", html).replace("\n", "") == "<p>prose</p><p>more</p>"
    folded = render.code_tabs([("k.py", "artifacts/k.py", "x = 1\n")])
    assert _CODE_AND_TABLES.sub("", "<p>a</p>" + folded + "<p>b</p>").replace("\n", "") == "<p>a</p><p>b</p>"


# --- issue 28 -------------------------------------------------------------------------------------
def test_summary_is_geomean_and_worst_case_never_the_best_and_labels_teaching_variants():
    from kernelwiki.docsite import summary

    cases = [_case("a", 0.5, set="s"), _case("b", 2.0, set="s"), _case("c", 1.0, set="held-out")]
    record = _record(cases)
    sets = summary.set_summaries(SPEC, record)
    assert [s.name for s in sets] == ["s", "held-out"]
    [whole] = summary.overall(sets)
    assert whole.geomean == pytest.approx(1.0) and whole.worst.case == "a" and len(whole.cases) == 3
    teaching = ProbeSpec("probe-gemm-naive", Path("."), {"id": "probe-gemm-naive", "kind": "kernel",
                                                         "title": "The teaching GEMM", "pages": [], "cases": []})
    assert summary.is_variant(teaching) and not summary.is_variant(SPEC)
    assert all(a.variant for a in summary.overall(summary.set_summaries(teaching, record)))  # never the kernel
    row = summary.set_summaries(SPEC, _record([_case("t", 0.6, set="teaching variant (one stage)")]))[0]
    assert row.variant


def _against(case: dict, baseline: str) -> dict:
    case["headline"]["baseline"] = baseline
    return case


def test_a_mixed_aggregate_is_refused_and_each_baseline_gets_its_own_geomean():
    """The sparse decode's old strip said "geomean 1.76x FlashMLA, torch": ours at 0.58-0.86x
    FlashMLA wherever FlashMLA ran, lifted by cases where only torch ran (8-14x). A geomean over
    cases of two baselines is refused; the summary gives one per baseline, each with its worst case."""
    from kernelwiki.docsite import summary

    flash = [_against(_case(f"b{b}-h128", r, shape=f"b{b}-h128"), "FlashMLA") for b, r in ((1, 0.58), (64, 0.86))]
    torch_only = [_against(_case(f"b{b}-h16", r), "torch") for b, r in ((1, 8.0), (64, 14.0))]
    sets = summary.set_summaries(SPEC, _record(flash + torch_only))
    mixed = tuple(c for s in sets for c in s.cases)
    with pytest.raises(ValueError, match="never mixed"):
        summary.Aggregate("probe-gemm", "all sets", "FlashMLA", False, mixed)
    by = {a.baseline: a for a in summary.overall(sets)}
    assert set(by) == {"FlashMLA", "torch"}
    assert by["FlashMLA"].geomean == pytest.approx((0.58 * 0.86) ** 0.5) and by["FlashMLA"].worst.case == "b1-h128"
    assert 'data-baseline="FlashMLA"' in by["FlashMLA"].html() and "torch" not in by["FlashMLA"].html()
    # a case whose headline is itself a geomean over shapes is never averaged with other cases
    held = _against(_case("held-out-bf16", 0.91, set="held-out"), "FlashMLA")
    held["metrics"] = {"headline_statistic": "geomean over the held-out shapes", "shapes": 24}
    nested = summary.set_summaries(SPEC, _record([held]))[0].cases + mixed[:2]
    with pytest.raises(ValueError, match="averages the geomean case"):
        summary.Aggregate("probe-gemm", "all sets", "FlashMLA", False, nested)
    alone = [a for a in summary.per_baseline("probe-gemm", "all sets", False, list(nested)) if a.cases[0].aggregate]
    assert len(alone) == 1 and "over 24 shapes" in alone[0].html()


def test_home_rows_show_geomean_worst_and_the_variant_label():
    from kernelwiki.docsite.generated import headline_rows

    spec = ProbeSpec("probe-gemm-naive", Path("."), {"id": "probe-gemm-naive", "kind": "kernel",
                                                     "title": "The teaching GEMM", "pages": [], "cases": []})
    rows = headline_rows({"p": SPEC, "q": spec}, {"probe-gemm": [_record([_case("a", 0.5), _case("b", 2.0)])],
                                                   "probe-gemm-naive": [_record([_case("n", 0.6)])]}, {}, {})
    assert "geomean <b>1×</b> vs cuBLAS over 2 cases" in rows[0] and "worst <b>0.5×</b> <code>a</code>" in rows[0]
    assert "2×" not in rows[0]
    assert "teaching variant, not the kernel" in rows[1]
    # one row per baseline, never one geomean over two
    two = headline_rows({"p": SPEC}, {"probe-gemm": [_record([_case("a", 0.5), _against(_case("b", 2.0), "quack")])]},
                        {}, {})
    assert len(two) == 2 and "| cuBLAS |" in two[0] and "| quack |" in two[1]


def test_claims_table_groups_by_set_sorts_numerically_and_labels_candidates():
    meta = {"claims": [
        {"id": "r", "value": 600, "unit": "TFLOP/s", "evidence": "source-reported", "source": "src-a", "gpu": "H800"},
        {"id": "m-deepgemm", "value": 650, "unit": "TFLOP/s", "evidence": "measured", "record": "artifacts/evidence/p/r.json",
         "reproduces": "r", "candidate": "DeepGEMM", "gpu": "H200", "conditions": "set=big"},
        {"id": "m-ours", "value": 640, "unit": "TFLOP/s", "evidence": "measured", "record": "artifacts/evidence/p/r.json",
         "reproduces": "r", "gpu": "H200", "conditions": "set=big"},
        {"id": "x-1024", "value": 1, "unit": "TFLOP/s", "evidence": "measured", "record": "artifacts/evidence/p/r.json",
         "shape": "1024x1", "conditions": "set=small, tile=1"},
        {"id": "x-512", "value": 2, "unit": "TFLOP/s", "evidence": "measured", "record": "artifacts/evidence/p/r.json",
         "shape": "512x1", "conditions": "set=small, tile=2"}]}
    out = render.claims_tables(meta, "kernels/k.md", {"src-a": "sources/a.md"})
    assert out.index('kw-set"><th colspan="5">big') < out.index('kw-set"><th colspan="5">small')
    assert out.index("x-512") < out.index("x-1024")  # 512 before 1024, not as text
    assert 'kw-who">DeepGEMM<' in out and 'kw-who">our kernel<' in out
    assert "tile=2" in out and "set=small" not in out
    only_measured = render.claims_tables({"claims": meta["claims"][3:]}, "kernels/k.md", {})
    assert "reported" not in only_measured  # no reported column where nothing is reported


def test_evidence_card_shows_the_headline_record_and_no_green_verified_without_a_measurement():
    claim = {"id": "m", "value": 640.0, "unit": "TFLOP/s", "evidence": "measured", "record": "artifacts/evidence/p/r.json",
             "ratio": 0.99, "baseline": {"name": "cuBLAS", "value": 646}, "gpu": "H200", "measured_at": "2026-11-30T10:00:00Z"}
    card = render.evidence_card({"status": "verified", "claims": [claim], "last_measured": "2026-12-01T00:00:00Z",
                                 "measured_on": "H200"}, "kernels/k.md")
    assert "Headline" in card and "640 TFLOP/s" in card and "0.99× cuBLAS" in card and "records/p/r/" in card
    assert "2026-11-30" in card and "2026-12-01" not in card  # this page's evidence, not the probe's newest record
    compiled = render.evidence_card({"status": "verified", "claims": []}, "kernels/k.md")
    assert "not measured yet" in compiled and 'kw-status-verified"' not in compiled and "compiled only" in compiled


def test_the_card_headlines_a_case_sets_geomean_the_held_out_set_first():
    def claim(cid: str, value: float, conditions: str) -> dict:
        return {"id": cid, "value": value, "unit": "TFLOP/s", "evidence": "measured", "ratio": 0.5,
                "record": "artifacts/evidence/p/r.json", "baseline": {"name": "cuBLAS", "value": 1.0},
                "conditions": conditions}
    small = claim("measured.k.bf16-1024", 152.1, "shape=1024x1024x1024")
    tuning = claim("measured.k.llm-shapes-summary", 301.0, "headline_statistic=geomean over the llm-shapes cases")
    held = claim("measured.k.held-out-bf16", 256.9, "set=held-out, headline_statistic=geomean over the held-out shapes")
    assert render.own_evidence({"claims": [small, tuning, held]})[0]["id"] == held["id"]
    assert render.own_evidence({"claims": [small, tuning]})[0]["id"] == tuning["id"]
    assert render.own_evidence({"claims": [small]})[0]["id"] == small["id"]


def test_record_page_prints_integers_in_full_ceilings_with_units_and_other_runs():
    calibration = Record("artifacts/evidence/probe-calibration/c.json", {
        "probe": "probe-calibration", "mode": "run", "started_at": "2026-11-29T17:00:00Z",
        "cases": [{"id": "copy", "params": {"ceiling": "copy"}, "headline": {"value": 4.28, "unit": "TB/s"}}]})
    record = _record([_case("a", 0.95)])
    record.data.update(seed=1347767963, ceilings={"record": calibration.path, "copy": 4.2839})
    other = _record([_case("a", 0.9)], "2026-11-28T10:00:00Z", "artifacts/evidence/p/older.json")
    page = record_page(record, {}, [], [other, record], {calibration.path: calibration})
    assert "1347767963" in page and "1.35e+09" not in page
    assert "| copy | 4.284 TB/s |" in page and "(../probe-calibration/c.md)" in page
    assert "## Other runs of this probe" in page and "older.md" in page and "(r.md)" not in page.split("Other runs")[1]
    # a record whose calibration failed in its invocation says so: no ceiling, and why
    record.data["ceilings"] = {"copy": None, "run_id": None, "record": None, "reason": "probe-calibration crashed in this run"}
    page = record_page(record, {}, [], [record], {})
    assert "| copy | none |" in page and "| reason | probe-calibration crashed in this run |" in page
    # a hostile reason or key cannot end its cell, open a tag or become a link to another file
    record.data["ceilings"] = {"<b>k</b>": 1.0, "record": "../../../etc/passwd",
                               "reason": "x | <script>alert(1)</script> | y"}
    page = record_page(record, {}, [], [record], {})
    assert "<script>" not in page and "<b>" not in page and "x &#124; &lt;script&gt;" in page
    assert "](../../../etc/passwd)" not in page and "passwd" in page   # shown as text, not linked


def test_page_ids_in_prose_read_as_the_page_title():
    from kernelwiki.docsite.links import Linker

    linker = Linker({"hw-wgmma": "hardware/wgmma.md"}, {"hw-wgmma": ["wgmma"]}, {"hw-wgmma": "wgmma: the [MMA] <b>"})
    out = linker.link("See `hw-wgmma` and hw-wgmma; `wgmma` stays code.", "kernels/k.md", "kernel-k")
    assert "[wgmma: the &#91;MMA&#93; &#60;b&#62;](../hardware/wgmma.md)" in out and "`hw-wgmma`" not in out
    assert "[`wgmma`](../hardware/wgmma.md)" in out


def test_runs_and_versus_blocks_stay_and_the_claims_block_goes():
    from kernelwiki.docsite.hooks import GENERATED_BLOCK, _generated_block

    text = ("## Claims and measurements\n\n<!-- kernelwiki:begin claims -->\n| a |\n<!-- kernelwiki:end claims -->\n"
            "<!-- kernelwiki:begin runs -->\n\n| probe | case |\n|---|---|\n| p | c |\n\n<!-- kernelwiki:end runs -->\n"
            "<!-- kernelwiki:begin versus -->\n| v |\n<!-- kernelwiki:end versus -->\n")
    out = GENERATED_BLOCK.sub(_generated_block, text)
    assert "Claims and measurements" not in out and "| a |" not in out and "kernelwiki:" not in out
    assert "| p | c |" in out and "| v |" in out


def _timed(case_id: str, shape: str, ours_us: float, base_us: float, ours_name: str = "ours", **head) -> dict:
    """A GEMM case of `shape` with the timings its headline came from (TFLOP/s from 2MNK / time)."""
    m, n, k = map(int, shape.split("x"))
    value, base = 2 * m * n * k / ours_us / 1e6, 2 * m * n * k / base_us / 1e6
    return {"id": case_id, "status": "passed", "params": {"dtype": "bf16", "shape": shape, "set": "decode"},
            "headline": {"metric": "tflops", "value": value, "unit": "TFLOP/s", "baseline": "cuBLAS",
                         "baseline_value": base, "ratio": value / base, **head},
            "timing": {ours_name: {"median_ms": ours_us / 1000}, "cuBLAS": {"median_ms": base_us / 1000},
                       "other": {"median_ms": 3 * base_us / 1000}}}


def test_throughput_charts_draw_the_datasheet_peak_and_the_measured_ceiling():
    cases = [_timed(f"c{m}", f"{m}x4096x4096", 10.0 + m / 100, 11.0 + m / 100) for m in (256, 1024, 4096)]
    chart = charts.case_charts(SPEC, _record(cases), None)[0]
    assert chart.references == [("bf16 datasheet peak", 989.0)]   # H200 bf16 (harness.peaks)
    assert "bf16 datasheet peak: 989" in charts._draw(chart) and "bf16 datasheet peak: 989" in charts._draw(chart, "dark")
    for case in cases:
        case["headline"]["fraction_of_ceiling"] = case["headline"]["value"] / 780.0
    record = _record(cases)
    record.data["ceilings"] = {"run_id": "20261201T144953Z-h200-run", "bf16": 780.0}
    chart = charts.case_charts(SPEC, record, None)[0]
    assert chart.references == [("measured ceiling (cuBLAS bf16 8192³)", pytest.approx(780.0)),
                                ("bf16 datasheet peak", 989.0)]
    assert "measured ceiling (cuBLAS bf16 8192³): 780" in charts._draw(chart)
    # a record whose own ceilings are missing, or null because its calibration failed, shows none
    for ceilings in (None, {"run_id": None, "record": None, "reason": "probe-calibration failed in this run"}):
        record.data["ceilings"] = ceilings
        assert charts.case_charts(SPEC, record, None)[0].references == [("bf16 datasheet peak", 989.0)]


def test_decode_cases_are_drawn_in_bandwidth_and_labels_never_use_exponents():
    """A GEMM of at most 64 rows is memory-bound: its chart is GB/s (A and B read ÷ the time of a call),
    with the datasheet and the measured copy bandwidth; a lone compute-bound case gets no chart."""
    cases = [_timed("m1", "1x4096x4096", 9.0, 12.0), _timed("m16", "16x4096x4096", 10.0, 12.5),
             _timed("m64", "64x4096x4096", 14.0, 13.0), _timed("m4096", "4096x4096x4096", 200.0, 190.0)]
    record = _record(cases)
    record.data["ceilings"] = {"run_id": "20261201T144953Z-h200-run", "copy": 4.2}
    found = charts.case_charts(SPEC, record, None)
    assert [(c.kind, c.title) for c in found] == [("lines", "GB/s: ours vs cuBLAS")]
    points = found[0].panels[""]["N×K=4096×4096"]
    assert [p[0] for p in points] == [1, 16, 64]   # M <= 64 only
    assert points[0][1] == pytest.approx((4096 + 4096 * 4096) * 2 / 9e-6 / 1e9, rel=1e-3)   # 3,729 GB/s
    assert points[0][2] == pytest.approx((4096 + 4096 * 4096) * 2 / 12e-6 / 1e9, rel=1e-3)
    assert found[0].references == [("measured copy ceiling", pytest.approx(4200.0)), ("datasheet memory bandwidth", 4800.0)]
    svg = charts._draw(found[0], "dark")
    assert "GB/s" in svg and "4,800" in svg and "e+" not in svg
    assert [charts.number(v) for v in (1080.0, 12.34, 0.0123, 3.0, 0.5)] == ["1,080", "12.3", "0.0123", "3", "0.500"]


def test_times_per_launch_are_one_chart_with_every_case_even_without_a_baseline():
    cases = [{"id": "events-only", "status": "passed", "params": {"method": "events"},
              "headline": {"metric": "time-per-launch", "value": 10.3, "unit": "us"}},
             {"id": "graph", "status": "passed", "params": {"method": "graph"},
              "headline": {"metric": "time-per-launch", "value": 2100, "unit": "ns", "baseline": "events-only",
                           "baseline_value": 10300, "ratio": 0.2}}]
    found = charts.case_charts(SPEC, _record(cases), None)
    assert [(c.kind, c.ylabel) for c in found] == [("dots", "µs per call (lower is better)")]
    assert found[0].panels[""][""] == [("events-only", 10.3, None), ("graph", pytest.approx(2.1), pytest.approx(10.3))]
    assert "events-only" in charts._draw(found[0])
    assert charts.case_charts(SPEC, _record(cases[:1]), None) == []   # one case: its number is in the text, no chart


def test_the_card_names_a_geomeans_shape_count_not_its_shapeless_value_and_a_pages_own_headline():
    """kernel-hopper-gemm's card said "97.34 TFLOP/s": a geomean over 24 held-out shapes, no shape.
    A geomean claim shows its ratio over N shapes; an absolute figure shows its shape; a page's
    `headline` (ping-pong over cooperative) is what its card leads with."""
    held = {"id": "measured.k.held-out-bf16", "value": 97.3385, "unit": "TFLOP/s", "evidence": "measured",
            "record": "artifacts/evidence/p/r.json", "case": "held-out-bf16", "ratio": 0.91,
            "baseline": {"name": "strongest of cuBLAS and quack, per shape", "value": 106.96},
            "conditions": "set=held-out, count=24, headline_statistic=geomean over the held-out shapes"}
    card = render.evidence_card({"status": "verified", "claims": [held]}, "kernels/k.md")
    assert "97.34" not in card and "geomean 0.91× vs strongest of cuBLAS and quack, per shape over 24 shapes" in card
    cublas = {"id": "m.pp", "value": 689.1, "unit": "TFLOP/s", "evidence": "measured", "record": "artifacts/evidence/p/r.json",
              "case": "schedules-4096", "shape": "4096x4096x4096", "ratio": 0.87, "baseline": {"name": "cuBLAS", "value": 791.8}}
    versus = {**cublas, "id": "m.pp.vs-ours-cooperative", "ratio": 0.882, "baseline": {"name": "ours-cooperative", "value": 781.3}}
    card = render.evidence_card({"claims": [cublas, versus], "headline": versus["id"]}, "techniques/p.md")
    assert "689.1 TFLOP/s — 0.882× ours-cooperative" in card and "4096x4096x4096" in card and "0.87×" not in card
    from kernelwiki.docsite.strip import claims_strip

    strip = claims_strip([cublas, versus], "techniques/p.md", versus["id"])
    assert strip.index("ours-cooperative") < strip.index("cuBLAS")


def test_a_geomean_over_shapes_shows_its_worst_shape_in_the_strip_and_the_card():
    """fp8-blockscale-gemm's strip read "geomean 1.01x vs DeepGEMM over 20 shapes" while one shape ran
    at 0.717x: a geomean case's summary names its worst ratio and shape where the record has them
    (metrics.worst_ratio or the headline chooser's <chooser>_worst_ratio, and per_shape), and the
    card its worst-shape metric claim; a chooser that is not the headline's is never taken."""
    from kernelwiki.docsite import summary

    held = _against(_case("held-out-bf16", 0.9217, set="held-out"), "strongest of cuBLAS and quack, per shape")
    held["metrics"] = {"headline_statistic": "geomean over the held-out shapes", "shapes": 24,
                       "oracle_geomean_ratio": 0.9772, "oracle_worst_ratio": 0.8676,
                       "choose_config_geomean_ratio": 0.9217, "choose_config_worst_ratio": 0.8155,
                       "choose_config_class_1_16_geomean_ratio": 0.9217,
                       "per_shape": "2x28672x4096 L/gate 64x96 2x1 s1 0.868 (oracle 0.9); 192x1536x7168 Q/up 128x64 1x1 s1 0.816"}
    [row] = summary.set_summaries(SPEC, _record([held]))[0].aggregates
    assert "worst <b>0.816×</b> <code>192x1536x7168</code>" in row.html() and "0.868" not in row.html()
    held["metrics"].pop("choose_config_worst_ratio")   # no figure of the headline's chooser: no worst at all
    [row] = summary.set_summaries(SPEC, _record([held]))[0].aggregates
    assert "worst" not in row.html()
    held["metrics"] = {"headline_statistic": "geomean", "worst_ratio": 0.7169, "per_shape": "640x8192x8192 Q/o 128x128 1x2 0.717"}
    [row] = summary.set_summaries(SPEC, _record([held]))[0].aggregates
    assert "worst <b>0.717×</b> <code>640x8192x8192</code>" in row.html()

    claim = {"id": "measured.k.held-out-fp8", "value": 185.1, "unit": "TFLOP/s", "evidence": "measured",
             "record": "artifacts/evidence/p/r.json", "case": "held-out-fp8", "ratio": 1.0133,
             "baseline": {"name": "DeepGEMM", "value": 182.6}, "conditions": "count=20, headline_statistic=geomean"}
    worst = {**claim, "id": "measured.k.held-out-fp8.worst_ratio", "value": 0.7169, "unit": "x", "ratio": None}
    assert "worst shape 0.717×" in render.evidence_card({"claims": [claim, worst]}, "kernels/k.md")
    assert "worst" not in render.evidence_card({"claims": [claim]}, "kernels/k.md")


def test_a_record_backed_claims_date_is_read_from_its_records_name_not_stored_in_the_page():
    """refresh no longer writes measured_at into the page (600 claims, ~21 kB: the record's name is the
    run id, which starts with the run's UTC start time); every reader gets it back through
    page_claims, and a hand-written measured_at is kept."""
    from kernelwiki.model.claims import page_claims, record_time

    rec = "artifacts/evidence/probe-x/20261202T094125Z-h200-run.json.gz"
    assert record_time(rec) == "2026-12-02T09:41:25Z" and record_time("artifacts/evidence/p/r1.json") is None
    assert record_time("artifacts/evidence/p/20261202T094125Z-h200-run-2.json") == "2026-12-02T09:41:25Z"
    [derived, kept, none] = page_claims({"claims": [{"id": "a", "record": rec},
                                                    {"id": "b", "record": rec, "measured_at": "2026-01-01T00:00:00Z"},
                                                    {"id": "c", "source": "src-x"}]})
    assert derived["measured_at"] == "2026-12-02T09:41:25Z" and kept["measured_at"] == "2026-01-01T00:00:00Z"
    assert "measured_at" not in none
    assert "2026-12-02" in render.evidence_card({"claims": [{"id": "m.x", "value": 1.0, "unit": "TB/s",
                                                             "evidence": "measured", "record": rec}]}, "k/p.md")
