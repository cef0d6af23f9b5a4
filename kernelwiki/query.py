"""`kernelwiki query` / scripts/query.py: ranked, alias-aware search with filters."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kernelwiki.index import Entry, Wiki
from kernelwiki.vocab import QUERY_ALIASES

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
    from kernelwiki.vocab import did_you_mean

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
    hits = []
    for entry in wiki.by_id().values():
        if not _passes(wiki, entry, filters, wanted_archs):
            continue
        score = 0.0
        for alternatives in terms:
            best = max(_score(entry, wiki.text(entry), term) for term in alternatives)
            if best == 0:
                break
            score += best
        else:
            hits.append(Hit(entry, score))
    hits.sort(key=lambda h: (-h.score, h.entry.id or ""))
    return hits[:limit] if limit else hits


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


def _score(entry: Entry, text: str, term: str) -> float:
    if not term:
        return 0.0
    score = 0.0
    page_id = (entry.id or "").lower()
    if term == page_id or page_id.split("-", 1)[-1] == term:
        score += WEIGHTS["id"]
    elif term in page_id:
        score += WEIGHTS["id"] / 2
    if any(term == str(a).lower() for a in entry.get("aliases") or []):
        score += WEIGHTS["alias"]
    if term in str(entry.get("title") or "").lower():
        score += WEIGHTS["title"]
    if any(term == str(t).lower() for t in (entry.get("tags") or []) + (entry.get("architectures") or [])):
        score += WEIGHTS["tag"]
    if term in entry.headline.lower():
        score += WEIGHTS["summary"]
    count = text.count(term)
    if count:
        score += 1.0 + math.log(count)
    return score
