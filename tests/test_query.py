"""query: ranking, aliases (UMMA, B200, H100), filters, JSON."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT
from kernelwiki.storage.index import Wiki
from kernelwiki.commands.query import Filters, search
from kernelwiki.storage.repo import Repo


@pytest.fixture(scope="module")
def wiki() -> Wiki:
    return Wiki.load(Repo(ROOT), use_cache=False)


def ids(hits) -> list[str]:
    return [h.entry.id for h in hits]


def test_alias_umma_finds_tcgen05(wiki):
    assert ids(search(wiki, ["UMMA"], Filters()))[0] == "hw-tcgen05-mma"


def test_word_ranking_prefers_id_and_title(wiki):
    assert ids(search(wiki, ["wgmma"], Filters()))[0] == "hw-wgmma"
    assert ids(search(wiki, ["deepgemm"], Filters()))[0] == "kernel-deepgemm"


def test_all_words_must_match(wiki):
    assert ids(search(wiki, ["wgmma", "nonexistentword"], Filters())) == []


@pytest.mark.parametrize("arch, present, absent", [
    ("B200", "hw-tcgen05-mma", "hw-wgmma"),
    ("sm_100a", "hw-tcgen05-mma", "hw-wgmma"),
    ("sm100", "hw-tcgen05-mma", "hw-wgmma"),
    ("H100", "hw-wgmma", "hw-tcgen05-mma"),
    ("H200", "hw-wgmma", "hw-tcgen05-mma"),
    ("sm_90", "hw-wgmma", "hw-tcgen05-mma"),
])
def test_arch_filter_understands_gpu_names(wiki, arch, present, absent):
    found = ids(search(wiki, [], Filters(archs=[arch]), limit=0))
    assert present in found and absent not in found


def test_type_tag_evidence_status_filters(wiki):
    footguns = {e.id for e in wiki.by_id().values() if e.get("type") == "footgun"}
    assert set(ids(search(wiki, [], Filters(types=["footgun"]), limit=0))) == footguns
    assert "footgun-low-entropy-inputs" in footguns and "hw-wgmma" not in footguns
    assert "kernel-deepgemm" in ids(search(wiki, [], Filters(tags=["fp8"]), limit=0))
    assert "hw-wgmma" not in ids(search(wiki, [], Filters(tags=["fp8"]), limit=0))
    spec = ids(search(wiki, [], Filters(evidence=["spec"], types=["hardware"]), limit=0))
    assert spec == sorted(e.id for e in wiki.by_id().values()
                          if e.get("type") == "hardware" and e.get("evidence_level") == "spec")
    assert "hw-wgmma" not in spec
    verified = set(ids(search(wiki, [], Filters(statuses=["verified"]), limit=0)))
    assert verified == {e.id for e in wiki.by_id().values() if e.get("status") == "verified"}
    assert all(wiki.by_id()[i].get("probes") for i in verified)


def test_evidence_filter_is_per_arch_when_arch_given(wiki):
    found = ids(search(wiki, [], Filters(archs=["sm_100a"], evidence=["source-reported"]), limit=0))
    assert "kernel-deepgemm" in found and "hw-tcgen05-mma" not in found  # compiled on sm_100a
    compiled = ids(search(wiki, [], Filters(archs=["sm_100a"], evidence=["compiled"]), limit=0))
    assert "hw-tcgen05-mma" in compiled and "kernel-deepgemm" not in compiled


def test_cli_json_and_unknown_tag(mini):
    code, out, _ = mini.run("query", "wgmma", "--json")
    data = json.loads(out)["hits"]
    assert code == 0 and data[0]["id"] == "hw-example" and data[0]["summary"] == "A feature used to test the tools."
    code, _, err = mini.run("query", "--tag", "wgmmma")
    assert code == 2 and "did you mean 'wgmma'" in err
    code, _, err = mini.run("query", "nothing-matches-this")
    assert code == 0 and "no pages match" in err


@pytest.mark.parametrize("words", [["wgmma"], ["tma", "multicast"], ["UMMA"], ["b200", "gemm"], ["sm_90a"],
                                   ["fp8", "block"], ["a"], ["zzzz-nothing"], ["swizzle", "128b"]])
def test_term_index_ranks_exactly_like_scanning_the_text(wiki, monkeypatch, tmp_path, words):
    import re

    import kernelwiki.commands.query

    indexed = [(h.entry.id, h.score) for h in search(wiki, words, Filters(), 0)]
    monkeypatch.setattr(kernelwiki.commands.query, "TOKEN", re.compile(r"(?!)"))  # no term is a plain word
    scanned = [(h.entry.id, h.score) for h in search(wiki, words, Filters(), 0)]
    assert indexed == scanned


def test_a_long_query_costs_little_and_a_longer_one_is_refused():
    """Issue 24: query cost grew with words x vocabulary (60,000 words: minutes; the term index was
    read again for every word and each term scanned the vocabulary in Python). Now a query takes at
    most MAX_WORDS words, over both faces alike, and the longest one allowed answers fast."""
    import time

    from kernelwiki.commands.query import answer
    from kernelwiki.faces import arguments
    from kernelwiki.storage import termindex

    wiki = Wiki.load(Repo(ROOT))
    vocabulary = termindex.for_wiki(wiki).tokens
    words = [vocabulary[i * len(vocabulary) // arguments.MAX_WORDS] for i in range(arguments.MAX_WORDS - 8)]
    words += [f"zz{i}nothing" for i in range(8)]   # words no page holds: the any-word path, word by word
    start = time.perf_counter()
    result = answer(Wiki.load(Repo(ROOT)), arguments.words(" ".join(words)), Filters(), 20)
    assert result.hits and time.perf_counter() - start < 5.0, time.perf_counter() - start
    with pytest.raises(arguments.ArgumentError, match=f"at most {arguments.MAX_WORDS}"):
        arguments.words(" ".join(words + ["one-more"]))


def test_the_term_index_finds_every_token_holding_a_term():
    from array import array

    from kernelwiki.storage.termindex import TermIndex

    tokens = ["gemm", "ggemm", "gemmgemm", "tma", "xgem"]
    index = TermIndex(["a.md"], tokens, array("Q", range(len(tokens) + 1)), array("I", [0, 1] * len(tokens)))
    assert index.counts("gemm") == {"a.md": 1 + 1 + 2}
    assert index.counts("gem") == {"a.md": 1 + 1 + 2 + 1}
    assert index.counts("m") == {"a.md": 2 + 2 + 4 + 1 + 1}
    assert index.counts("zz") == {}
