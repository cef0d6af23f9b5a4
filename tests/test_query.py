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


def _scanned(text: str, term: str) -> int:
    """Occurrences of the words a term matches, by a scan of the text (the rule termindex states)."""
    from kernelwiki.storage.termindex import EDGES, SHORT, SUFFIX, word_keys, words

    plain = termindex_plain(term)
    count = 0
    for word in words(text):
        parts, tails = word_keys(word)
        for key in (parts if plain else tails or [word]):
            if key == term or (len(term) > SHORT and key.startswith(term)
                               and (len(key) <= len(term) + SUFFIX or key[len(term)] in EDGES)):
                count += 1
    return count


def termindex_plain(term: str) -> bool:
    from kernelwiki.storage.termindex import segments

    return segments(term) == [term]


@pytest.mark.parametrize("term", ["wgmma", "tma", "multicast", "tcgen05", "sm_90a", "stage", "swizzle", "128b",
                                  "low-entropy", "tcgen05.alloc", "cta_group::2", "m=1", "a", "zzzz-nothing"])
def test_the_index_counts_exactly_what_a_scan_of_the_text_finds(wiki, term):
    from kernelwiki.storage import termindex

    index = termindex.for_wiki(wiki)
    counted = index.counts(term)
    scanned = {rel: n for rel, e in wiki.entries.items() if e.id and (n := _scanned(wiki.text(e), term))}
    assert counted == scanned


def test_the_stored_index_answers_as_the_one_built_in_memory(mini):
    """The query index read back from its shards ranks exactly as the one just built."""
    from kernelwiki.commands.query import answer
    from kernelwiki.storage import termindex

    mini.write("wiki/hardware/second.md", HW_PAGE_TWO)
    repo = Repo(mini.root)
    built = termindex.rebuild(repo)   # builds and stores
    stored = termindex.open_index(repo)
    assert stored._stored is not None and built._stored is None
    found = 0
    for words in (["example"], ["wgmma", "feature"], ["tma", "multicast", "feature"], []):
        for filters in (Filters(), Filters(tags=["wgmma"]), Filters(archs=["H100"], evidence=["source-reported"])):
            one, two = answer(built, words, filters), answer(stored, words, filters)
            assert [(h.entry.id, h.score, h.missing) for h in one.hits] == \
                   [(h.entry.id, h.score, h.missing) for h in two.hits]
            found += len(one.hits)
    assert found > 10


HW_PAGE_TWO = """---
id: hw-second
title: A second feature with TMA multicast
type: hardware
architectures:
- sm_90a
tags:
- tma
---
# Second

TMA multicast to every CTA of a cluster; wgmma reads it.
"""


def test_a_long_query_costs_little_and_a_longer_one_is_refused():
    """Issue 24: query cost grew with words x vocabulary (60,000 words: minutes; the term index was
    read again for every word and each term scanned the vocabulary in Python). Now a query takes at
    most MAX_WORDS words, over both faces alike, and the longest one allowed answers fast."""
    import time

    from kernelwiki.commands.query import answer
    from kernelwiki.faces import arguments
    from kernelwiki.storage import termindex

    wiki = Wiki.load(Repo(ROOT))
    vocabulary = sorted({word for e in wiki.entries.values() for word in termindex.words(wiki.text(e))})
    words = [vocabulary[i * len(vocabulary) // arguments.MAX_WORDS] for i in range(arguments.MAX_WORDS - 8)]
    words += [f"zz{i}nothing" for i in range(8)]   # words no page holds: the any-word path, word by word
    start = time.perf_counter()
    result = answer(Wiki.load(Repo(ROOT)), arguments.words(" ".join(words)), Filters(), 20)
    assert result.hits and time.perf_counter() - start < 5.0, time.perf_counter() - start
    with pytest.raises(arguments.ArgumentError, match=f"at most {arguments.MAX_WORDS}"):
        arguments.words(" ".join(words + ["one-more"]))


def test_a_term_finds_the_words_that_begin_with_it():
    from array import array

    from kernelwiki.storage.termindex import Shard

    keys = sorted(["bgem", "bgemm", "bgemms", "bgemmgemm", "bgemv", "btma", "Blow-entropy-inputs", "Blow-entropyx"])
    shard = Shard(keys, array("Q", range(len(keys) + 1)), array("I", [0] * len(keys)), array("I", [1] * len(keys)))
    found = lambda key, prefix=True: [keys[i] for i in shard.matching(key, prefix)]
    assert found("bgemm") == ["bgemm", "bgemmgemm"][:1] + ["bgemms"]   # at most 3 more characters
    assert found("bgem", prefix=False) == ["bgem"]
    assert found("Blow-entropy") == ["Blow-entropy-inputs", "Blow-entropyx"]   # a segment boundary, or 1 more
    assert found("bzz") == []
