"""The site search's alias boosts (kernelwiki.docsite.searchrank): scored as the worker scores them,
an alias typed in full beats another page's long alias that matches one stray prefix of the query."""

from __future__ import annotations

import math
import re
from collections import Counter

from kernelwiki.docsite.searchrank import K1, alias_boosts, tokens

SEPARATOR = r'[\s,:!=\[\]()"/]+|[\-_]+(?![\w.\-]*::)|(?!\b)(?=[A-Z][a-z])(?![\w.\-]*::)|\.(?!\d)(?![\w.\-]*::)|&[lg]t;'
STOP = frozenset({"a", "how", "to"})
FIELDS = ("title", "text", "tags", "aliases")


def _worker_score(entries: list[dict], entry: dict, query: list[str]) -> float:
    """lunr's score of the alias field: each query word a prefix, each matched term's idf x tf part, x boost."""
    cut = re.compile(SEPARATOR)
    postings = Counter()
    for other in entries:
        for name in FIELDS:
            if other.get(name) is not None:
                postings.update(set(tokens(other[name], cut, STOP)))
    words = Counter(tokens(entry["aliases"], cut, STOP))
    total = 0.0
    for term, tf in words.items():
        if any(term.startswith(q) for q in query):
            idf = math.log(1 + abs((len(entries) - postings[term] + 0.5) / (postings[term] + 0.5)))
            total += idf * (K1 + 1) * tf / (K1 + tf)
    return total * entry.get("boost", 1.0)


def test_an_alias_typed_in_full_beats_a_long_alias_with_a_stray_prefix_match():
    entries = [{"location": f"p{i}/", "title": "page", "text": f"a kernel runs for some time {i}"} for i in range(30)]
    whole = {"location": "timing/#alias-0", "title": "Launch overhead", "text": "", "aliases": "how to time a kernel"}
    long = {"location": "dsmem/#alias-1", "title": "Clusters", "text": "",
            "aliases": "cudaFuncAttributeNonPortableClusterSizeAllowed"}
    entries += [whole, long]
    query = ["how", "to", "time", "a", "kernel"]
    assert _worker_score(entries, long, query) > _worker_score(entries, whole, query)   # as the worker had it
    alias_boosts(entries, SEPARATOR, FIELDS, STOP)
    assert _worker_score(entries, whole, query) > _worker_score(entries, long, query)
    assert math.isclose(_worker_score(entries, whole, query), 10.0, rel_tol=1e-4)   # a full match scores SCALE


def test_a_name_before_double_colon_stays_one_token_as_the_worker_queries_it():
    cut = re.compile(SEPARATOR)
    assert tokens("fence.proxy.async.shared::cta", cut, STOP) == ["fence.proxy.async.shared", "cta"]
    assert tokens("<code>tcgen05.mma</code> of cudaFuncAttribute", cut, STOP) == ["tcgen05", "mma", "of", "cuda",
                                                                                  "func", "attribute"]


def test_the_site_uses_this_separator():
    from conftest import ROOT

    assert SEPARATOR in (ROOT / "mkdocs.yml").read_text().replace("\\\\", "\\")
