"""How often each word occurs in each page, so that a query need not scan every page's text.

Query ranks a page by `text.count(term)`. A term made only of word characters ([a-z0-9_.+-], the
characters of TOKEN) can only occur inside one maximal run of them, so its count in a page is the
sum, over the page's distinct runs (tokens) that contain it, of the token's count times
`token.count(term)`: exactly what scanning the text gives. Terms with other characters (a phrase
with a space) scan the text as before.

Built on the first query after the pages change, kept in the cache with a signature of every
page's content hash; a checkout without a usable cache builds it in memory.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from array import array
from bisect import bisect_right
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, Iterator

from kernelwiki.storage import cache

if TYPE_CHECKING:
    from kernelwiki.storage.index import Wiki

TOKEN = re.compile(r"[a-z0-9_.+-]+")


class TermIndex:
    def __init__(self, rels: list[str], tokens: list[str], bounds: array, numbers: array):
        self.rels = rels
        self.tokens = tokens
        self.bounds = bounds
        """The postings of tokens[i] are the pairs bounds[i] to bounds[i + 1] of `numbers`."""
        self.numbers = numbers
        """page number, count, page number, count, ..."""
        self._joined: str | None = None
        self._starts = array("Q")

    def _containing(self, term: str) -> Iterator[int]:
        """The numbers of the tokens that contain `term`: one C-speed search of all the tokens joined by
        newlines (which no term holds), not a Python loop over the vocabulary for every term."""
        if self._joined is None:
            self._joined = "\n".join(self.tokens)
            position = 0
            for token in self.tokens:
                self._starts.append(position)
                position += len(token) + 1
        joined, starts, tokens = self._joined, self._starts, self.tokens
        at = joined.find(term)
        while at >= 0:
            index = bisect_right(starts, at) - 1
            yield index
            at = joined.find(term, starts[index] + len(tokens[index]) + 1)

    def counts(self, term: str) -> dict[str, int] | None:
        """page file -> occurrences of `term` in its search text; None when `term` is not made of
        word characters only (the caller scans the text)."""
        if not TOKEN.fullmatch(term):
            return None
        out: dict[str, int] = defaultdict(int)
        numbers, bounds = self.numbers, self.bounds
        for index in self._containing(term):
            times = self.tokens[index].count(term)
            for position in range(2 * bounds[index], 2 * bounds[index + 1], 2):
                out[self.rels[numbers[position]]] += numbers[position + 1] * times
        return out

    def to_plain(self) -> dict:
        return {"rels": self.rels, "tokens": self.tokens, "bounds": self.bounds.tolist(),
                "numbers": base64.b64encode(self.numbers.tobytes()).decode("ascii")}

    @classmethod
    def from_plain(cls, plain: Any) -> "TermIndex | None":
        """The index to_plain wrote, or None when `plain` is not of that shape: every page number
        and bound is checked (with C-speed checks: this runs on every query), so that counts()
        cannot index outside them."""
        if type(plain) is not dict:
            return None
        rels, tokens, encoded = plain.get("rels"), plain.get("tokens"), plain.get("numbers")
        if type(rels) is not list or type(tokens) is not list or type(encoded) is not str:
            return None
        try:
            "".join(rels)
            "".join(tokens)
            bounds = array("Q", plain.get("bounds"))
            raw = base64.b64decode(encoded, validate=True)
        except (TypeError, ValueError, OverflowError, binascii.Error):
            return None
        numbers = array("I")
        if len(raw) % (2 * numbers.itemsize):
            return None
        numbers.frombytes(raw)
        if not (len(bounds) == len(tokens) + 1 and bounds[0] == 0 and 2 * bounds[-1] == len(numbers)
                and bounds.tolist() == sorted(bounds)):
            return None
        if numbers and max(numbers[0::2]) >= len(rels):
            return None
        return cls(rels, tokens, bounds, numbers)


def for_wiki(wiki: "Wiki") -> TermIndex:
    """The index for the pages as they are: the one this index already holds, else from the cache
    when it is current (read once per query, not once per word)."""
    signature = _signature(wiki)
    held = wiki.terms
    if held is not None and held[0] == signature:
        return held[1]
    wiki.terms = (signature, _load(wiki, signature))
    return wiki.terms[1]


def _load(wiki: "Wiki", signature: str) -> TermIndex:
    if wiki.use_cache:
        data = cache.read(wiki.repo, cache.TERMS, wiki.key)
        if isinstance(data, dict) and data.get("signature") == signature:
            index = TermIndex.from_plain(data.get("index"))
            if index is not None:
                return index
    index = build(wiki)
    if wiki.use_cache:
        cache.write(wiki.repo, cache.TERMS, wiki.key, {"signature": signature, "index": index.to_plain()})
        wiki.save()   # building read the search text: if the text cache was unusable, it is whole again
    return index   # a read-only checkout builds it each time


def build(wiki: "Wiki") -> TermIndex:
    rels = sorted(wiki.entries)
    postings: dict[str, array] = defaultdict(lambda: array("I"))
    for number, rel in enumerate(rels):
        for token, count in Counter(TOKEN.findall(wiki.text(wiki.entries[rel]))).items():
            postings[token].extend((number, count))
    numbers = array("I")
    bounds = array("Q", [0])
    for pairs in postings.values():
        numbers.extend(pairs)
        bounds.append(len(numbers) // 2)
    return TermIndex(rels, list(postings), bounds, numbers)


def _signature(wiki: "Wiki") -> str:
    digest = hashlib.sha256()
    for rel in sorted(wiki.entries):
        digest.update(f"{rel}\0{wiki.entries[rel].sha256}\n".encode())
    return digest.hexdigest()
