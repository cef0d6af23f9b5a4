"""Boosts of the site search's alias entries, so that a query equal to an alias finds its page first.

Material's search worker (lunr) ORs every query word as a prefix (`a` of "how to time a kernel"
becomes `a*`) and sums, per matching entry, each matched term's idf; lunr does not divide by the
length of an entry. So an alias of many rare words (`cudaFuncAttributeNonPortableClusterSizeAllowed`
splits into eight) outscores, on one stray prefix match, the alias that is the whole query. Each
alias entry's boost is therefore the inverse of what the alias itself weighs: an alias typed in
full scores 1 (times the field boost), an alias that shares a word or two with the query scores its
share. Ties between full matches are settled by the worker, which favours the entry holding more of
the query's words.

The weights follow lunr's (BM25 with b = 0, k1 = 1.2; idf over every entry of the index, a term in
two fields of one entry counted twice), on tokens cut as the worker cuts them: text outside HTML
tags, split by the configured separator, lower-cased, stop words dropped (the list of the worker
that is installed).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path
from typing import Iterable

K1 = 1.2
SCALE = 10.0
"""Boost of an alias entry whose words weigh 1/SCALE: any constant keeps the order; this one keeps
boosts near the 1-2 of ordinary entries."""
_TAG = re.compile(r"<[^>]*>")
_STOP_LIST = re.compile(r"generateStopWordFilter\(\[([^\]]*)\]\)")


def worker_stop_words() -> frozenset[str]:
    """The stop words of the installed Material search worker (empty when it cannot be read)."""
    try:
        import material
    except ImportError:
        return frozenset()
    for worker in sorted((Path(material.__file__).parent / "templates/assets/javascripts/workers").glob("search.*.min.js")):
        try:
            match = _STOP_LIST.search(worker.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if match:
            return frozenset(re.findall(r'"([^"]*)"', match.group(1)))
    return frozenset()


def tokens(value: object, separator: re.Pattern, stop: frozenset[str]) -> list[str]:
    """A field's tokens as the worker makes them (a list field: each item in turn)."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        for part in separator.split(_TAG.sub(" ", str(item))):
            word = part.lower() if part else ""
            if word and word not in stop:
                out.append(word)
    return out


def alias_boosts(entries: list[dict], separator: str, fields: Iterable[str], stop: frozenset[str]) -> None:
    """Set the boost of every alias entry (one with an `aliases` field) to SCALE over its alias's weight."""
    cut = re.compile(separator)
    per_entry = [{name: tokens(entry[name], cut, stop) for name in fields if entry.get(name) is not None}
                 for entry in entries]
    postings: Counter = Counter()
    for found in per_entry:
        for words in found.values():
            postings.update(set(words))
    count = len(entries)

    def idf(term: str) -> float:
        df = postings[term]
        return math.log(1 + abs((count - df + 0.5) / (df + 0.5)))

    for entry, found in zip(entries, per_entry):
        words = Counter(found.get("aliases") or [])
        weight = sum(idf(term) * (K1 + 1) * tf / (K1 + tf) for term, tf in words.items())
        if "aliases" in entry and weight > 0:
            entry["boost"] = round(SCALE / weight, 6)
