"""`kernelwiki query` / scripts/query.py: ranked, alias-aware search with filters.

A query's words are grouped with their variants (aliases, plural and -ing/-ed stems); each group is
scored on a page by where its words stand there (a name the page carries, its id, aliases, title,
tags, summary, body) and weighted by how rare the group is in the wiki (inverse document frequency),
so that the uncommon word of a question counts most and `per`, `sm` or `kernel` little. A page that
lacks one word of a question of three or more is still ranked (at a discount, the word named), so
that one word an obvious page does not use never drops it for pages that mention everything in passing.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING

from kernelwiki.model.vocab import QUERY_ALIASES, composed, fold
from kernelwiki.storage import termindex
from kernelwiki.storage.index import Entry, Wiki
from kernelwiki.storage.repo import Repo
from kernelwiki.storage.termindex import SHORT, QueryIndex, segments

if TYPE_CHECKING:
    from kernelwiki.model.vocab import Vocabulary

# Where a query word is found, and what that is worth (before its rarity weighs it).
WEIGHTS = {"name": 10.0, "i": 5.0, "a": 4.0, "t": 6.0, "g": 5.0, "h": 3.0}
SOURCE_FACTOR = 0.7
"""A source page describes upstream material; at equal relevance the wiki's own page on it comes first."""
MISSING_FACTOR = 0.6
"""A page lacking one word of the question keeps this share of its score."""
NAME_BONUS = 10.0
"""A page whose id, alias or title is the whole query: this much per word, times the words' rarity."""


@dataclass
class Filters:
    types: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    archs: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return any((self.types, self.tags, self.archs, self.evidence, self.statuses))


@dataclass
class Hit:
    entry: Entry
    score: float
    missing: list[str] = field(default_factory=list)
    """Words of the query the page does not hold."""
    number: int = -1
    """The page's number in the query index."""

    def to_json(self) -> dict:
        e = self.entry
        return {"id": e.id, "type": e.get("type"), "title": e.get("title"), "path": e.rel,
                "evidence_level": e.get("evidence_level"), "evidence_by_arch": e.get("evidence_by_arch"),
                "status": e.get("status"), "architectures": e.get("architectures"), "tags": e.get("tags"),
                "summary": e.headline, "score": round(self.score, 3), "missing": self.missing}


def normalize_arch(source: Wiki | QueryIndex, name: str) -> list[str]:
    """'B200' -> ['sm_100a'], 'sm90' -> ['sm_90'], 'sm_90a' -> ['sm_90a']."""
    lowered = name.lower()
    if lowered in QUERY_ALIASES:
        return [a for a in QUERY_ALIASES[lowered] if a.startswith("sm_")]
    return [source.vocab.canonical_arch(lowered)]


def _index(source: Wiki | QueryIndex) -> QueryIndex:
    return source if isinstance(source, QueryIndex) else termindex.for_wiki(source)


# --- words -----------------------------------------------------------------------------------------
STOP_WORDS = frozenset("a an and are as at be by can do does for from how i in is it its of on or the to "
                       "vs versus what when where which why with work works use using about between difference explain "
                       "there this that these those my our your me we you if should would could will has have had than "
                       "then into so across over per through via onto among within during".split())
_NUMBER_UNIT = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([a-z]+)$")


def split_words(words: list[str]) -> list[str]:
    """The words as the index holds them: folded, punctuation around them dropped (`8192:`, `(TMA)`,
    `sm_120a?`) and words joined by other characters taken apart (`P·V` is `p`, `v`)."""
    out: list[str] = []
    for word in words:
        typed, folded = composed(word), fold(word)
        if len(typed) != len(folded):   # a letter whose lower case is longer: the folded form only
            out += termindex.words(folded)
            continue
        for match in termindex.TOKEN.finditer(folded):   # the words as typed (`Pallas`), found in the folded form
            start, end = match.span()
            while start < end and folded[start] in termindex.EDGES:
                start += 1
            while end > start and folded[end - 1] in termindex.EDGES:
                end -= 1
            if start < end:
                out.append(typed[start:end])
    return out


def glued(words: list[str]) -> list[str]:
    """The words with one-character words joined to their neighbours, as a kernel engineer means them:
    `split K` is `split-K`, `2 CTA` is `2-CTA`, `M = 1` is `M=1`. A one-letter word alone would match
    nearly every page (and every id and title that holds the letter) and drown the word it belongs to."""
    out: list[str] = []
    join_next = False  # the last word ends in punctuation (`M=`) and takes the next one as it is
    lone = False  # the last word is a one-character word with no word before it (`2`)
    for word in (w.strip() for w in words):
        if not word:
            continue
        single = len(word) == 1
        if join_next:
            out[-1] += word
            join_next = lone = False
        elif single and not word.isalnum() and out:
            out[-1] += word
            join_next, lone = True, False
        elif single and out:
            out[-1] += "-" + word
            lone = False
        elif lone:
            out[-1] += "-" + word
            lone = False
        else:
            out.append(word)
            lone = single
    return out


def phrase(words: list[str]) -> tuple[str, ...]:
    """A query of several words as the names a page may carry: `tensor memory` as `tensor-memory`."""
    if len(words) < 2:
        return ()
    lowered = [fold(w) for w in words]
    return (" ".join(lowered), "-".join(lowered))


def variants(word: str) -> list[str]:
    """The word, its aliases, and light stems (plural, -ing, -ed) so `barriers`, `stage` and
    `swizzled` find `barrier`, `stages` and `swizzle`; words with digits or punctuation stay as typed."""
    lowered = fold(word)
    forms = [lowered]
    if lowered.isalpha() and len(lowered) > 3:
        if lowered.endswith("ies"):
            forms.append(lowered[:-3] + "y")
        elif lowered.endswith("es"):
            forms += [lowered[:-2], lowered[:-1]]
        elif lowered.endswith("s") and not lowered.endswith("ss"):
            forms.append(lowered[:-1])
        elif lowered.endswith("ing") and len(lowered) > 5:
            forms += [lowered[:-3], lowered[:-3] + "e"]
        elif lowered.endswith("ed") and len(lowered) > 4:
            forms += [lowered[:-2], lowered[:-1]]
        else:
            forms.append(lowered + "s")
    return list(dict.fromkeys(forms + [a.lower() for a in QUERY_ALIASES.get(lowered, [])]))


# --- scoring ---------------------------------------------------------------------------------------
@dataclass
class Group:
    """One word of the query with its variants, and where they stand on the pages that hold them."""

    word: str
    body: dict[int, int]
    """page -> occurrences in the page's text of its likeliest variant"""
    bonus: dict[int, float]
    """page -> worth of the fields (name, id, alias, title, tag, summary) that hold a variant"""
    weight: float = 1.0
    """its rarity: ln(1 + pages / pages holding it)"""
    pages: set[int] = field(default_factory=set)
    """the pages holding it anywhere"""
    _scores: dict[int, float] | None = field(default=None, repr=False)

    def scores(self) -> dict[int, float]:
        """page -> what the word is worth there: (1 + ln occurrences + the fields' worth) x rarity."""
        if self._scores is None:
            weight, log = self.weight, math.log
            out = {page: weight * (1.0 + log(count)) for page, count in self.body.items() if count}
            for page, worth in self.bonus.items():
                out[page] = out.get(page, 0.0) + weight * worth
            self._scores = out
        return self._scores

    def named(self, page: int) -> bool:
        """Whether the page names the word where it says what it is about (not only in its body)."""
        return page in self.bonus


def group(index: QueryIndex, word: str) -> Group:
    body: dict[int, int] = {}
    bonus: dict[int, float] = {}
    searched: list[str] = []
    for variant in variants(word):
        if not any(variant.startswith(s) and len(s) > SHORT and len(variant) - len(s) <= termindex.SUFFIX
                   for s in searched):   # `warpgroups` after `warpgroup`: its words are among the first's
            counts = index.body_counts(variant)
            if not body:
                body = counts
            else:
                for page, count in counts.items():
                    if count > body.get(page, 0):
                        body[page] = count
        searched.append(variant)
        found: dict[int, float] = {}
        for page in index.holding("n", variant, prefix=False):
            found[page] = found.get(page, 0.0) + WEIGHTS["name"]
        for namespace in ("i", "a", "t", "h", "g"):
            for page in index.holding(namespace, variant):
                found[page] = found.get(page, 0.0) + WEIGHTS[namespace]
        for page, worth in found.items():
            bonus[page] = max(bonus.get(page, 0.0), worth)
    pages = set(body) | set(bonus)
    return Group(word, body, bonus, index.idf(len(pages)), pages)


def _apart(index: QueryIndex, words: list[str]) -> list[str]:
    """Words no page holds as typed, taken apart where they join words (`measure-5`, `228KB`)."""
    out = []
    for word in words:
        parts = segments(fold(word))
        unit = _NUMBER_UNIT.match(fold(word))
        pieces = [p for p in (unit.groups() if unit else parts) if len(p) > 1 or p.isdigit()]
        if (len(parts) > 1 or unit) and not any(index.body_counts(v) for v in variants(word)) \
                and not index.holding("n", fold(word), prefix=False) and any(index.body_counts(p) for p in pieces):
            out += pieces
        else:
            out.append(word)
    return out


@dataclass
class Ranking:
    """The pages a query matched: each one's score and how many of the words it holds."""

    scores: dict[int, float]
    held: dict[int, int]

    def __len__(self) -> int:
        return len(self.scores)

    def best(self, limit: int = 0, most_words_first: bool = False) -> list[tuple[float, int]]:
        """(score, page) of the first `limit` (0: all), best first; pages are numbered in id order,
        which breaks ties."""
        if most_words_first:
            key = lambda page: (-self.held[page], -self.scores[page], page)
        else:
            key = lambda page: (-self.scores[page], page)
        pages = heapq.nsmallest(limit, self.scores, key=key) if limit else sorted(self.scores, key=key)
        return [(self.scores[page], page) for page in pages]


def rank(index: QueryIndex, groups: list[Group], allowed: set[int] | None, names: tuple[str, ...] = (),
         need: int | None = None) -> Ranking:
    """The pages holding at least `need` of the groups (all when None), among `allowed` (None: every
    page); a page whose id, alias or title is the whole query (`names`) ranks above pages that hold
    its words apart. (Dictionaries and sets over the pages that hold a word: the cost grows with them.)"""
    need = len(groups) if need is None else need
    if not groups:
        pages = allowed if allowed is not None else range(index.pages)
        return Ranking(dict.fromkeys(pages, 0.0), dict.fromkeys(pages, 0))
    if need == len(groups):
        candidates = set.intersection(*(g.pages for g in sorted(groups, key=lambda g: len(g.pages))))
        held = dict.fromkeys(candidates, len(groups))
    else:
        counted = Counter(chain.from_iterable(g.pages for g in groups))
        held = {page: count for page, count in counted.items() if count >= need}
    if allowed is not None:
        held = {page: count for page, count in held.items() if page in allowed}
    scores = dict.fromkeys(held, 0.0)
    for g in groups:
        for page, value in g.scores().items():
            if page in scores:
                scores[page] += value
    if need < len(groups):
        for page, count in held.items():
            if count < len(groups):
                scores[page] *= MISSING_FACTOR ** (len(groups) - count)
    rarity = sum(g.weight for g in groups)
    for name in names:
        for page in index.holding("n", name, prefix=False) & held.keys():
            scores[page] += NAME_BONUS * rarity
    for page in index.holding("f", "type=source") & held.keys():
        scores[page] *= SOURCE_FACTOR
    return Ranking(scores, held)


def hits(index: QueryIndex, groups: list[Group], ranked: list[tuple[float, int]]) -> list[Hit]:
    """Ranked pages as hits, each naming the words it lacks."""
    return [Hit(index.entry(page), score, [g.word for g in groups if page not in g.pages], page)
            for score, page in ranked]


def allowed_pages(index: QueryIndex, filters: Filters) -> set[int] | None:
    """The pages that pass the filters (None: no filter given)."""
    if not filters.any:
        return None
    sets: list[set[int]] = []
    if filters.types:
        sets.append(set().union(*(index.holding("f", f"type={t}") for t in filters.types)))
    sets += [index.holding("f", f"tag={t}") for t in filters.tags]
    wanted = [a for name in filters.archs for a in normalize_arch(index, name)]
    archs = [k for w in wanted for k in (w, w + "a")]   # sm_90 asks for the family: sm_90 and sm_90a answer it
    if wanted:
        sets.append(set().union(*(index.holding("f", f"arch={a}") for a in archs)))
    if filters.evidence:
        by_level = set().union(*(index.holding("f", f"evidence={level}") for level in filters.evidence))
        if wanted:   # that architecture's level, where the page gives levels by architecture
            by_arch = index.holding("f", "by-arch")
            per_arch = set().union(*(index.holding("f", f"ev@{a}={level}") for a in archs for level in filters.evidence))
            sets.append(per_arch | (by_level - by_arch))
        else:
            sets.append(by_level)
    if filters.statuses:
        sets.append(set().union(*(index.holding("f", f"status={s}") for s in filters.statuses)))
    allowed = sets[0]
    for other in sets[1:]:
        allowed &= other
    return allowed


def search(source: Wiki | QueryIndex, words: list[str], filters: Filters, limit: int = 20) -> list[Hit]:
    """Pages matching every word (and the filters), best first; at most `limit` (0: all)."""
    index = _index(source)
    words = glued(split_words(words))
    groups = [group(index, w) for w in words]
    return hits(index, groups, rank(index, groups, allowed_pages(index, filters), phrase(words)).best(limit))


# --- answers that do not dead-end ------------------------------------------------------------------
PASSING = 3
"""A word a page holds fewer times than this, and never in its id, title, aliases, tags or summary,
is mentioned in passing: the page is not about it."""


@dataclass
class Answer:
    """What a query found and how: every word matched, or the nearest pages when none matched them all."""

    hits: list[Hit]
    total: int
    """pages that matched, before the limit"""
    limit: int
    words: list[str]
    """the words searched for (stop words left out)"""
    ignored: list[str]
    """stop words left out"""
    matched: str
    """all: some page holds every word (the hits that lack one say which, in `missing`); any: no page
    holds every word, the hits have some (nearest pages); none: no word occurs on any page"""
    unmatched: list[str]
    """words no page holds, or (matched any) words the best hit lacks"""
    in_passing: list[str]
    """words every hit holds only in its body, never in an id, alias, title, tag or summary"""
    suggested_tags: list[str]
    sizes: dict[str, dict[str, int]]
    """page id -> {"page": bytes of the page file, "code": bytes of its artifact and probe files}"""

    @property
    def truncated(self) -> bool:
        return self.total > len(self.hits)

    @property
    def covered(self) -> bool:
        """False when the wiki has no page on the question as asked (not every word matched)."""
        return self.matched == "all" and bool(self.hits) and not self.in_passing and not self.hits[0].missing


def answer(source: Wiki | QueryIndex, words: list[str], filters: Filters, limit: int = 20) -> Answer:
    """Every word, or all but one of three or more, ranked together; when no page holds every word,
    the pages holding any, naming the words that no page holds, so a question the wiki does not cover
    still gets its nearest pages."""
    index = _index(source)
    cleaned = [w.strip() for w in words if w.strip()]
    content = [w for w in cleaned if fold(w) not in STOP_WORDS] or cleaned
    ignored = [w for w in cleaned if w not in content]
    kept = _apart(index, glued(split_words(content)))
    groups = [group(index, w) for w in kept]
    allowed = allowed_pages(index, filters)
    # The whole query names a page as typed ("how to time a kernel": stop words are part of an alias)
    # or as kept ("split-K").
    names = tuple(dict.fromkeys(phrase(cleaned) + phrase(kept)))
    ranked = rank(index, groups, allowed, names, need=len(groups) - 1 if len(groups) > 2 else None)
    if len(groups) > 2 and len(groups) not in ranked.held.values():   # none holds every word: the nearest ones
        ranked = Ranking({}, {})
    matched, unmatched, most_words_first = "all", [], False
    if not ranked and len(groups) > 1:
        unmatched = [g.word for g in groups if not g.pages & (allowed if allowed is not None else g.pages)]
        ranked, most_words_first = rank(index, groups, allowed, names, need=1), True
        matched = "any" if ranked else "none"
        if ranked and not unmatched:  # each word is somewhere, never together: name what the best page lacks
            best = ranked.best(1, most_words_first)[0][1]
            unmatched = [g.word for g in groups if best not in g.pages]
    elif not ranked and groups:
        matched, unmatched = "none", list(kept)
    in_passing = []
    if matched == "all" and ranked:
        pages = ranked.scores.keys()
        in_passing = [g.word for g in groups if not g.bonus.keys() & pages
                      and not any(count >= PASSING and page in pages for page, count in g.body.items())]
    shown = hits(index, groups, ranked.best(limit, most_words_first))
    for hit in shown:   # a hit shown must be the page as it is: one rewritten in place makes the index stale
        if not index.current(hit.number):
            raise termindex.StaleIndex(f"{hit.entry.rel} changed since the query index was built")
    return Answer(shown, len(ranked), limit, kept, ignored, matched, unmatched, in_passing,
                  suggest_tags(index.vocab, kept, filters),
                  {hit.entry.id or "": {"page": hit.entry.size, "code": index.record(hit.number)["code"]}
                   for hit in shown})


def ask(repo: Repo, index: QueryIndex, words: list[str], filters: Filters, limit: int) -> tuple[QueryIndex, Answer]:
    """The answer from a stored index, or from one built again when a page it would show changed since."""
    try:
        return index, answer(index, words, filters, limit)
    except termindex.StaleIndex:
        index = termindex.rebuild(repo)
        return index, answer(index, words, filters, limit)


def suggest_tags(vocab: Vocabulary, words: list[str], filters: Filters) -> list[str]:
    """Vocabulary tags a query word names or nearly names (a --tag filter is sharper than a word)."""
    import difflib

    tags = sorted(vocab.tags)
    found: list[str] = []
    for word in words:
        lowered = word.lower()
        found += [lowered] if lowered in vocab.tags else difflib.get_close_matches(lowered, tags, n=2, cutoff=0.8)
    return [t for t in dict.fromkeys(found) if t not in filters.tags]
