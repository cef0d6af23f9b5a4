"""`kernelwiki query` / scripts/query.py: ranked, alias-aware search with filters."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from kernelwiki.storage import termindex
from kernelwiki.storage.index import Entry, Wiki, ranking_fields
from kernelwiki.storage.termindex import TOKEN
from kernelwiki.model.vocab import QUERY_ALIASES

# Where a query word is found, and what that is worth.
WEIGHTS = {"id": 10.0, "alias": 9.0, "title": 6.0, "tag": 5.0, "summary": 3.0}


@dataclass
class Filters:
    types: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    archs: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)


@dataclass
class Hit:
    entry: Entry
    score: float

    def to_json(self) -> dict:
        e = self.entry
        return {"id": e.id, "type": e.get("type"), "title": e.get("title"), "path": e.rel,
                "evidence_level": e.get("evidence_level"), "evidence_by_arch": e.get("evidence_by_arch"),
                "status": e.get("status"), "architectures": e.get("architectures"), "tags": e.get("tags"),
                "summary": e.headline, "score": round(self.score, 3)}


def unknown_tag_messages(wiki: Wiki, tags: list[str]) -> list[str]:
    """One message per tag that is not in the vocabulary (a filter on it would match nothing)."""
    from kernelwiki.model.vocab import did_you_mean

    return [f"unknown tag {tag!r}{did_you_mean(tag, wiki.vocab.tags)}" for tag in tags if tag not in wiki.vocab.tags]


def normalize_arch(wiki: Wiki, name: str) -> list[str]:
    """'B200' -> ['sm_100a'], 'sm90' -> ['sm_90'], 'sm_90a' -> ['sm_90a']."""
    lowered = name.lower()
    if lowered in QUERY_ALIASES:
        return [a for a in QUERY_ALIASES[lowered] if a.startswith("sm_")]
    return [wiki.vocab.canonical_arch(lowered)]


def _arch_matches(page_arch: str, wanted: str) -> bool:
    # sm_90 asks for the family: sm_90 and sm_90a both answer it.
    return page_arch == wanted or page_arch == wanted + "a"


def search(wiki: Wiki, words: list[str], filters: Filters, limit: int = 20) -> list[Hit]:
    wanted_archs = [a for name in filters.archs for a in normalize_arch(wiki, name)]
    terms = [[w.lower() for w in wiki.expand_aliases(word)] for word in words for word in [word.strip()] if word]
    filtered = any((filters.types, filters.tags, filters.archs, filters.evidence, filters.statuses))
    # Word counts from the term index where every term is a plain word, else from each page's text.
    counts = None
    if terms and all(TOKEN.fullmatch(term) for alternatives in terms for term in alternatives):
        index = termindex.for_wiki(wiki)
        counts = [[index.counts(term) or {} for term in alternatives] for alternatives in terms]
    ranked: list[tuple[float, str, int, Entry]] = []
    for number, entry in enumerate(wiki.by_id().values()):
        if filtered and not _passes(wiki, entry, filters, wanted_archs):
            continue
        score = 0.0
        if counts is not None:
            found = [[by_page.get(entry.rel, 0) for by_page in group] for group in counts]
            if not all(any(group) for group in found):
                continue  # a word occurs nowhere in the page: no field can hold it either
        else:
            text = wiki.text(entry) if terms else ""
            found = [[text.count(term) for term in alternatives] for alternatives in terms]
        if terms and entry.ranking is None:
            entry.ranking = ranking_fields(entry)
        for alternatives, numbers in zip(terms, found):
            best = max([_score(entry.ranking, count, term) for term, count in zip(alternatives, numbers)])
            if best == 0:
                break
            score += best
        else:
            ranked.append((-score, entry.id or "", number, entry))  # ids are unique: entries never compared
    best_first = heapq.nsmallest(limit, ranked) if limit else sorted(ranked)
    return [Hit(entry, -negative) for negative, _, _, entry in best_first]


def _passes(wiki: Wiki, entry: Entry, filters: Filters, wanted_archs: list[str]) -> bool:
    if filters.types and entry.get("type") not in filters.types:
        return False
    tags = set(entry.get("tags") or [])
    if any(tag not in tags for tag in filters.tags):
        return False
    page_archs = [wiki.vocab.canonical_arch(a) for a in entry.get("architectures") or [] if isinstance(a, str)]
    matching = [a for a in page_archs if any(_arch_matches(a, w) for w in wanted_archs)]
    if wanted_archs and not matching:
        return False
    if filters.evidence:
        by_arch = entry.get("evidence_by_arch") or {}
        levels = {by_arch.get(a) for a in matching} - {None} if matching and by_arch else {entry.get("evidence_level")}
        if not levels & set(filters.evidence):
            return False
    if filters.statuses and entry.get("status") not in filters.statuses:
        return False
    return True


def _score(fields: tuple, count: int, term: str) -> float:
    """`count`: occurrences of the term in the page's search text."""
    if not term:
        return 0.0
    if not count and not any(c.isspace() for c in term):
        # The text holds the id, title, aliases, tags and headline; only a phrase can match the
        # headline (whitespace normalized) without matching the text.
        return 0.0
    page_id, short_id, aliases, title, tags, headline = fields
    score = 1.0 + math.log(count) if count else 0.0
    if term == page_id or short_id == term:
        score += WEIGHTS["id"]
    elif term in page_id:
        score += WEIGHTS["id"] / 2
    if term in aliases:
        score += WEIGHTS["alias"]
    if term in title:
        score += WEIGHTS["title"]
    if term in tags:
        score += WEIGHTS["tag"]
    if term in headline:
        score += WEIGHTS["summary"]
    return score
