"""`kernelwiki query` / scripts/query.py: ranked, alias-aware search with filters."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kernelwiki.storage import termindex
from kernelwiki.storage.index import Entry, Wiki, ranking_fields
from kernelwiki.storage.termindex import TOKEN
from kernelwiki.model.vocab import QUERY_ALIASES

# Where a query word is found, and what that is worth.
WEIGHTS = {"id": 10.0, "alias": 9.0, "title": 6.0, "tag": 5.0, "summary": 3.0}
SOURCE_FACTOR = 0.7
"""A source page describes upstream material; at equal relevance the wiki's own page on it comes first."""


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
    """Pages matching every word (and the filters), best first; at most `limit` (0: all)."""
    words = glued(words)
    hits = rank(wiki, [variants(word) for word in words], filters, phrase(words))
    return hits[:limit] if limit else hits


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
    lowered = [w.lower() for w in words]
    return (" ".join(lowered), "-".join(lowered))


def rank(wiki: Wiki, terms: list[list[str]], filters: Filters, names: tuple[str, ...] = ()) -> list[Hit]:
    """Every page where each group of alternative terms matches at least once, best first; a page
    whose id, alias or title is the whole query (`names`) ranks above pages that hold its words apart."""
    wanted_archs = [a for name in filters.archs for a in normalize_arch(wiki, name)]
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
            if names and _named_as(entry.ranking, names):
                score += WEIGHTS["alias"] * len(terms)
            if entry.get("type") == "source":
                score *= SOURCE_FACTOR
            ranked.append((-score, entry.id or "", number, entry))  # ids are unique: entries never compared
    return [Hit(entry, -negative) for negative, _, _, entry in sorted(ranked)]


def _named_as(fields: tuple, names: tuple[str, ...]) -> bool:
    page_id, short_id, aliases, title, _, _ = fields
    return any(name in (page_id, short_id, title) or name in aliases for name in names)


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
    if term == title:
        score += WEIGHTS["id"]
    elif term in title:
        score += WEIGHTS["title"]
    if term in tags:
        score += WEIGHTS["tag"]
    if term in headline:
        score += WEIGHTS["summary"]
    return score


# --- answers that do not dead-end ------------------------------------------------------------------
PASSING = 3
"""A word a page holds fewer times than this, and never in its id, title, aliases, tags or summary,
is mentioned in passing: the page is not about it."""
STOP_WORDS = frozenset("a an and are as at be by can do does for from how i in is it its of on or the to "
                       "vs versus what when where which why with work works use using about between difference explain".split())


def variants(word: str) -> list[str]:
    """The word, its aliases, and light stems (plural, -ing, -ed) so `barriers`, `stage` and
    `swizzled` find `barrier`, `stages` and `swizzle`; words with digits or punctuation stay as typed."""
    lowered = word.lower()
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
    """all: every word matched on each hit; any: no page has every word, the hits have some (nearest pages);
    none: no word occurs on any page (the hits are empty)"""
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
        return self.matched == "all" and bool(self.hits) and not self.in_passing


def answer(wiki: Wiki, words: list[str], filters: Filters, limit: int = 20) -> Answer:
    """Every-word matching first; when that finds nothing, any-word matching naming the words that
    no page holds, so a question the wiki does not cover still gets its nearest pages."""
    cleaned = [w.strip() for w in words if w.strip()]
    content = [w for w in cleaned if w.lower() not in STOP_WORDS] or cleaned
    ignored = [w for w in cleaned if w not in content]
    kept = glued(content)
    groups = [variants(w) for w in kept]
    # The whole query names a page as typed ("how to time a kernel": stop words are part of an alias)
    # or as kept ("split-K").
    names = tuple(dict.fromkeys(phrase(cleaned) + phrase(kept)))
    hits, matched, unmatched = rank(wiki, groups, filters, names), "all", []
    if not hits and len(groups) > 1:
        per_word = [rank(wiki, [group], filters) for group in groups]
        unmatched = [w for w, found in zip(kept, per_word) if not found]
        scores: dict[str, tuple[int, float, Hit]] = {}
        for found in per_word:
            for hit in found:
                words_matched, score, _ = scores.get(hit.entry.id or "", (0, 0.0, hit))
                scores[hit.entry.id or ""] = (words_matched + 1, score + hit.score, hit)
        nearest = sorted(scores.values(), key=lambda t: (-t[0], -t[1], t[2].entry.id or ""))
        hits = [Hit(hit.entry, score) for _, score, hit in nearest]
        matched = "any" if hits else "none"
        if hits and not unmatched:  # each word is somewhere, never together: name what the best page lacks
            best = hits[0].entry.id
            unmatched = [w for w, found in zip(kept, per_word) if best not in {h.entry.id for h in found}]
    elif not hits and groups:
        matched, unmatched = "none", list(kept)
    in_passing = [w for w, group in zip(kept, groups)
                  if not any(_named(hit.entry, group) or _mentions(wiki, hit.entry, group) >= PASSING for hit in hits)] \
        if matched == "all" and hits else []
    shown = hits[:limit] if limit else hits
    return Answer(shown, len(hits), limit, kept, ignored, matched, unmatched, in_passing,
                  suggest_tags(wiki, kept, filters),
                  {hit.entry.id or "": sizes(wiki, hit.entry) for hit in shown})


def _mentions(wiki: Wiki, entry: Entry, group: list[str]) -> int:
    """How often the page's text holds the likeliest of the terms."""
    if all(TOKEN.fullmatch(term) for term in group):
        index = termindex.for_wiki(wiki)
        return max((index.counts(term) or {}).get(entry.rel, 0) for term in group)
    text = wiki.text(entry)
    return max(text.count(term) for term in group)


def _named(entry: Entry, group: list[str]) -> bool:
    """Whether the page names one of the terms where it says what it is about (not only in its body)."""
    page_id, _, aliases, title, tags, headline = entry.ranking or ranking_fields(entry)
    return any(term in page_id or term in aliases or term in title or term in tags or term in headline for term in group)


def suggest_tags(wiki: Wiki, words: list[str], filters: Filters) -> list[str]:
    """Vocabulary tags a query word names or nearly names (a --tag filter is sharper than a word)."""
    import difflib

    tags = sorted(wiki.vocab.tags)
    found: list[str] = []
    for word in words:
        lowered = word.lower()
        found += [lowered] if lowered in wiki.vocab.tags else difflib.get_close_matches(lowered, tags, n=2, cutoff=0.8)
    return [t for t in dict.fromkeys(found) if t not in filters.tags]


def sizes(wiki: Wiki, entry: Entry) -> dict[str, int]:
    """What reading the page costs: its file, and the code `get --include-code` adds."""
    directories = []
    artifact = entry.get("artifact_dir")
    if isinstance(artifact, str):
        try:
            directories.append(wiki.repo.inside(artifact))
        except ValueError:
            pass
    directories += [wiki.repo.probes / p for p in entry.get("probes") or [] if isinstance(p, str) and "/" not in p]
    code = 0
    for directory in directories:
        if directory.is_dir() and not directory.is_symlink():
            code += sum(p.stat().st_size for p in directory.rglob("*")
                        if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts)
    return {"page": entry.size, "code": code}
