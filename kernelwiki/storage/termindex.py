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

import hashlib
import re
from array import array
from collections import Counter, defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelwiki.storage.index import Wiki

TOKEN = re.compile(r"[a-z0-9_.+-]+")
FILE = "terms.pickle"


class TermIndex:
    def __init__(self, rels: list[str], postings: dict[str, bytes]):
        self.rels = rels
        self.postings = postings
        """token -> array('I') bytes: page number, count, page number, count, ..."""

    def counts(self, term: str) -> dict[str, int] | None:
        """page file -> occurrences of `term` in its search text; None when `term` is not made of
        word characters only (the caller scans the text)."""
        if not TOKEN.fullmatch(term):
            return None
        out: dict[str, int] = defaultdict(int)
        for token, blob in self.postings.items():
            if term in token:
                times = token.count(term)
                numbers = array("I")
                numbers.frombytes(blob)
                for position in range(0, len(numbers), 2):
                    out[self.rels[numbers[position]]] += numbers[position + 1] * times
        return out


def for_wiki(wiki: "Wiki") -> TermIndex:
    """The index for the pages as they are, from the cache when it is current."""
    from kernelwiki.storage.index import read_pickle, write_pickle

    signature = _signature(wiki)
    path = wiki.repo.cache / FILE
    if wiki.use_cache:
        data = read_pickle(path)
        if data and data.get("key") == wiki.key and data.get("signature") == signature:
            return TermIndex(data["rels"], data["postings"])
    index = build(wiki)
    if wiki.use_cache and not wiki.repo.cache.is_symlink():
        try:
            wiki.repo.cache.mkdir(exist_ok=True)
            write_pickle(path, {"key": wiki.key, "signature": signature, "rels": index.rels,
                                "postings": index.postings})
        except OSError:
            pass  # a read-only checkout builds it each time
    return index


def build(wiki: "Wiki") -> TermIndex:
    rels = sorted(wiki.entries)
    postings: dict[str, array] = defaultdict(lambda: array("I"))
    for number, rel in enumerate(rels):
        for token, count in Counter(TOKEN.findall(wiki.text(wiki.entries[rel]))).items():
            postings[token].extend((number, count))
    return TermIndex(rels, {token: numbers.tobytes() for token, numbers in postings.items()})


def _signature(wiki: "Wiki") -> str:
    digest = hashlib.sha256()
    for rel in sorted(wiki.entries):
        digest.update(f"{rel}\0{wiki.entries[rel].sha256}\n".encode())
    return digest.hexdigest()
