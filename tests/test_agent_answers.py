"""Answers an agent can afford and queries that do not dead-end (issue 28, items 10, 11 and 13), on the
command line; tests/test_mcp.py asks the same over an MCP client session."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest
from jsonschema import Draft202012Validator

from conftest import ROOT
from kernelwiki.commands.get import prose, window
from kernelwiki.commands.query import Filters, answer, glued, search, variants
from kernelwiki.faces.cli import main
from kernelwiki.model import yamlio
from kernelwiki.storage import termindex
from kernelwiki.storage.index import Wiki
from kernelwiki.storage.repo import Repo


@pytest.fixture(scope="module")
def wiki() -> Wiki:
    return Wiki.load(Repo(ROOT), use_cache=False)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*argv, "--root", str(ROOT)])
    return code, out.getvalue(), err.getvalue()


# --- ranking: what a kernel engineer types finds the page about it first ---------------------------
@pytest.mark.parametrize("words, first", [
    ("wgmma", "hw-wgmma"),
    ("tma", "hw-tma"),
    ("mbarrier", "hw-mbarrier"),
    ("tcgen05", "hw-tcgen05-mma"),
    ("UMMA", "hw-tcgen05-mma"),
    ("tensor memory", "hw-tmem"),
    ("NVFP4", "hw-nvfp4"),
    ("DeepGEMM", "kernel-deepgemm"),
    ("fp8 blockscale", "kernel-fp8-blockscale-gemm"),
    ("split-K", "technique-decode-gemm"),   # the page about split-K, stream-K and swap-AB
    ("split K", "technique-decode-gemm"),
    ("2 CTA", "hw-2cta-mma"),
    ("cta_group::2", "hw-2cta-mma"),
    ("cluster launch control", "hw-cluster-launch-control"),
    ("try_cancel", "hw-cluster-launch-control"),
    ("MXFP8", "hw-block-scaled-formats"),
    ("scale factor layout", "hw-block-scaled-formats"),
    ("sm_120", "hw-sm100-vs-sm120"),
    ("RTX 5090", "hw-sm100-vs-sm120"),
    ("FP8 scaling recipes", "technique-fp8-scaling-recipes"),
    ("all-reduce", "kernel-one-host-communication"),
    ("symmetric memory", "kernel-one-host-communication"),
    ("hopper gemm", "kernel-hopper-gemm"),
    ("FlashAttention-4", "kernel-flash-attention-4"),
    ("low-entropy inputs", "footgun-low-entropy-inputs"),
    ("low entropy inputs", "footgun-low-entropy-inputs"),
    ("pipeline stages", "technique-pipeline-stages"),
    ("setmaxnreg", "technique-register-budgeting"),
    ("sparse decode", "kernel-dsv4-sparse-decode"),
    ("rasterization", "technique-persistent-kernels"),
    ("TMA", "hw-tma"),
    ("M=1", "technique-cuda-cores-vs-tensor-cores"),
    ("FlashAttention", "kernel-flash-attention-4"),
    ("flash attention", "kernel-flash-attention-4"),
    ("fence.proxy.async.shared::cta", "hw-tma-store"),
    ("how to time a kernel", "technique-launch-overhead-and-graphs"),   # an alias with its stop words
    ("how to benchmark a kernel", "technique-benchmarking-protocol"),
    ("profiling a kernel", "technique-profiling-recipes"),
    ("how to profile a kernel", "technique-profiling-recipes"),
])
def test_kernel_engineer_queries_rank_the_right_page_first(wiki, words, first):
    hits = answer(wiki, words.split(), Filters()).hits
    assert hits and hits[0].entry.id == first, [h.entry.id for h in hits[:5]]


# --- stemming, stop words, fallback ----------------------------------------------------------------
def test_light_stemming(wiki):
    assert {"stage", "stages"} <= set(variants("stages")) and "swizzle" in variants("swizzled")
    assert "pipeline" in variants("pipelining") and variants("sm_90a") == ["sm_90a"]
    # `setmaxnregs` occurs nowhere: only its stem can find the page.
    assert not termindex.for_wiki(wiki).counts("setmaxnregs")
    assert search(wiki, ["setmaxnregs"], Filters())[0].entry.id == "technique-register-budgeting"


def test_one_letter_words_join_the_word_they_belong_to(wiki):
    assert glued("split K".split()) == ["split-K"] and glued("M = 1".split()) == ["M=1"]
    assert glued("2 CTA".split()) == ["2-CTA"] and glued(["K"]) == ["K"] and glued(["tma", "multicast"]) == ["tma", "multicast"]
    # Alone, `K` matches nearly every page (and every id with a k in it) and pushed split-K pages down.
    assert answer(wiki, "split K".split(), Filters()).hits[0].entry.id == "technique-decode-gemm"


def test_stop_words_are_left_out_and_named(wiki):
    result = answer(wiki, "how does the tma work".split(), Filters())
    assert result.words == ["tma"] and set(result.ignored) == {"how", "does", "the", "work"}
    assert result.hits[0].entry.id == "hw-tma"
    assert answer(wiki, ["a"], Filters()).words == ["a"]  # a query of stop words only is searched as typed


def test_no_page_with_every_word_falls_back_to_any_word(wiki):
    assert search(wiki, ["wgmma", "nonexistentword"], Filters()) == []
    result = answer(wiki, ["wgmma", "nonexistentword"], Filters())
    assert result.matched == "any" and result.unmatched == ["nonexistentword"] and not result.covered
    assert result.hits[0].entry.id == "hw-wgmma"


def test_a_question_the_wiki_does_not_cover_says_so_and_gives_the_nearest_pages(wiki):
    # (stream-K vs split-K was the example until technique-decode-gemm covered stream-K)
    result = answer(wiki, "Pallas vs Triton".split(), Filters())
    assert not result.covered and result.unmatched == ["Pallas"] and result.ignored == ["vs"]
    assert "lang-triton-hopper" in [h.entry.id for h in result.hits[:3]]
    code, out, err = cli("query", "Pallas", "vs", "Triton")
    assert code == 0 and "not covered" in err and "'Pallas'" in err and "lang-triton-hopper" in out
    document = json.loads(cli("query", "Pallas", "vs", "Triton", "--json")[1])
    assert document["covered"] is False and document["unmatched"] == ["Pallas"] and document["hits"]
    assert answer(wiki, ["split-K"], Filters()).covered  # the page that is about it covers it
    nothing = answer(wiki, ["zzzz-qqqq"], Filters())
    assert nothing.matched == "none" and nothing.unmatched == ["zzzz-qqqq"] and not nothing.hits


def test_total_and_truncated_say_what_the_limit_left_out(wiki):
    result = answer(wiki, ["wgmma"], Filters(), limit=3)
    assert len(result.hits) == 3 and result.total > 3 and result.truncated
    assert not answer(wiki, ["wgmma"], Filters(), limit=0).truncated
    code, out, err = cli("query", "wgmma", "--limit", "3")
    assert f"3 of {result.total} pages shown" in err and len([l for l in out.splitlines() if not l.startswith(" ")]) == 3


def test_tag_suggestions(wiki):
    assert "fp8" in answer(wiki, ["fp8", "scales"], Filters()).suggested_tags
    assert "fp8" not in answer(wiki, ["fp8"], Filters(tags=["fp8"])).suggested_tags  # already filtered by it


def test_hits_carry_the_size_of_the_page_and_of_its_code(wiki):
    result = answer(wiki, ["hopper", "gemm"], Filters(), limit=1)
    entry = result.hits[0].entry
    size = result.sizes[entry.id]
    assert size["page"] == (ROOT / entry.rel).stat().st_size
    bundle = sum(p.stat().st_size for d in ("artifacts/kernels/hopper_gemm", "probes/probe-hopper-gemm")
                 for p in (ROOT / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert size["code"] >= bundle
    assert answer(wiki, ["ptx"], Filters(types=["source"]), limit=1).sizes.popitem()[1]["code"] == 0


def test_query_json_is_query_v3():
    schema = json.loads((ROOT / "schemas/output/query.v3.schema.json").read_text(encoding="utf-8"))
    document = json.loads(cli("query", "wgmma", "--limit", "2", "--json")[1])
    Draft202012Validator(schema).validate(document)
    assert document["total"] > 2 and document["truncated"] is True and document["hits"][0]["bytes"]["page"] > 0


# --- get: prose, files, windows ----------------------------------------------------------------------
def test_prose_leaves_out_generated_blocks_code_and_claim_marks():
    code, text, _ = cli("get", "kernel-hopper-gemm", "--prose")
    full = cli("get", "kernel-hopper-gemm", "--body-only")[1]
    import re

    blocks = sum(len(m.group(0)) for m in re.finditer(r"<!-- kernelwiki:begin (\S+) -->.*?<!-- kernelwiki:end \1 -->", full, re.S))
    assert code == 0 and blocks > len(full) / 3 and len(text) < len(full) - blocks   # the generated blocks are gone
    for gone in ("```", "kernelwiki:begin", "<!-- claim:", "| probe | case |"):
        assert gone in full and gone not in text
    assert "left out" in text and "## The teaching variant" in text
    # A fence inside a longer fence is text of the outer block, not a fence of its own (CommonMark).
    body = "a\n````markdown\n```python\nx = 1\n```\n````\n<!-- kernelwiki:begin runs -->\n| t |\n<!-- kernelwiki:end runs -->\n" \
           "b <!-- claim:c1 -->5 ms<!-- /claim -->\n"
    assert prose(body) == ("a\n[3 line(s) of markdown left out: part body has them]\n"
                           "[generated `runs` block left out: part claims, or the full page, has it]\nb 5 ms\n")


def test_files_choose_the_code_printed():
    code, text, _ = cli("get", "kernel-hopper-gemm", "--include-code", "--files", "hopper_gemm.py")
    assert code == 0 and "#### artifacts/kernels/hopper_gemm/hopper_gemm.py (own)" in text
    assert "#### artifacts/kernels/hopper_gemm/sm90_common.py" not in text
    assert "left out by the files patterns: " in text and "artifacts/kernels/hopper_gemm/sm90_common.py" in text
    every = cli("get", "kernel-hopper-gemm", "--include-code", "--files", "*")[1]
    assert len(text) < len(every) and not text.startswith("---")   # only the file asked for, not the page again
    document = json.loads(cli("get", "kernel-hopper-gemm", "--include-code", "--files", "*.yaml", "--format", "json")[1])
    shown = [f["path"] for f in document["artifacts"]["files"] if "text" in f]
    assert shown == ["artifacts/kernels/hopper_gemm/PROVENANCE.yaml"]


def test_max_bytes_windows_put_back_together_give_the_whole_answer():
    whole = cli("get", "kernel-hopper-gemm", "--include-code")[1]
    pieces, offset = [], 0
    while True:
        code, text, _ = cli("get", "kernel-hopper-gemm", "--include-code", "--max-bytes", "20000",
                            "--offset", str(offset))
        assert code == 0 and len(text.encode()) <= 20000 + 100
        marker = text.rfind("\n[cut at byte ")
        if marker < 0:
            pieces.append(text)
            break
        tail = text[marker:]
        assert f"of {len(whole.encode())}; continue with --offset " in tail
        pieces.append(text[:marker])
        offset = int(tail.split("continue with --offset ")[1].split(" ")[0])
    assert "".join(pieces) == whole and len(pieces) > 3


def test_window_never_splits_a_character():
    text = "é" * 300 + "\n"
    first, next_offset, total = window(text, 0, 257)
    assert first == "é" * 128 and next_offset == 256 and total == 601
    assert window(text, 1, 1000)[0] == text[1:]  # an offset inside a character moves to the next one


# --- requires and run -----------------------------------------------------------------------------------
def test_every_kernel_bundle_says_what_it_requires_and_how_to_run_it():
    for provenance in sorted((ROOT / "artifacts/kernels").glob("*/PROVENANCE.yaml")):
        data, _ = yamlio.load(provenance.read_text(encoding="utf-8"))
        assert data.get("requires") and data.get("run"), provenance


def test_include_code_prints_requires_run_and_whether_upstream_compiles_alone():
    text = cli("get", "kernel-hopper-gemm", "--include-code", "--files", "none")[1]
    assert "\nRequires: cutlass-dsl 4.8.1" in text and "\nRun: python -m artifacts.kernels.hopper_gemm.hopper_gemm --arch sm_90a" in text
    assert "do not compile alone" not in text
    deepgemm = cli("get", "kernel-deepgemm", "--include-code", "--files", "none")[1]
    assert "Upstream files do not compile alone: " in deepgemm and "JIT" in deepgemm


def test_claims_keep_their_conditions():
    text = cli("get", "kernel-hopper-gemm", "--claims")[1]
    assert "| conditions |" in text.splitlines()[0]
    assert "| tile_n=128 |" in text

