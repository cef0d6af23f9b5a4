"""One page by id, alias or path without loading the whole index: what `get` does at 20,000 pages
in a fraction of the time a full load takes.

A page's id says where it lives (validate insists: `hw-wgmma` is wiki/hardware/wgmma.md), and the
index cache keeps alias -> file; either way the page file itself is read and must confirm the
name, so a stale cache can only send us to the full index, never to the wrong page. Whatever the
fast way cannot confirm goes to Wiki.resolve, which answers everything.
"""

from __future__ import annotations

import posixpath
import re

from kernelwiki.model.vocab import Vocabulary, fold
from kernelwiki.storage.cache import cache_key
from kernelwiki.storage.index import Entry, Wiki, alias_files
from kernelwiki.storage.repo import Repo

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def open_page(repo: Repo, name: str) -> tuple[Wiki, Entry]:
    """The index (possibly partial) and the page `name` names; raises like Wiki.resolve."""
    found = _quick(repo, name)
    if found is not None:
        return found
    wiki = Wiki.load(repo)
    if alias_files(repo, wiki.key) is None:
        wiki.save(always=True)   # the alias map was missing or unusable: the next lookup finds it
    return wiki, wiki.resolve(name)


def _quick(repo: Repo, name: str) -> tuple[Wiki, Entry] | None:
    vocab = Vocabulary.load(repo.schemas)
    key = cache_key(repo)
    candidates: list[tuple[str, str]] = []
    if _NAME.fullmatch(name):
        lowered = name.lower()
        for page_type, prefix in vocab.type_prefix.items():
            if lowered.startswith(prefix) and len(lowered) > len(prefix):
                candidates.append(("id", f"wiki/{vocab.sections[page_type]}/{lowered[len(prefix):]}.md"))
        rel = (alias_files(repo, key) or {}).get(lowered)
        if isinstance(rel, str):
            candidates.append(("alias", rel))
    elif "/" in name or name.endswith(".md"):
        candidates.append(("path", repo.rel(repo.inside(name))))  # OutsideRepo, as resolve raises
    for kind, rel in candidates:
        if not rel.startswith("wiki/") or not rel.endswith(".md") or posixpath.normpath(rel) != rel:
            continue   # the cache is untrusted: never a path that climbs out of wiki/
        wiki = Wiki(repo, vocab, key=key, partial=True)
        entry = wiki.read_entry(rel)
        if entry is not None and entry.meta is not None and _confirms(kind, name, entry):
            wiki.entries[rel] = entry
            return wiki, entry
    return None


def _confirms(kind: str, name: str, entry: Entry) -> bool:
    if kind == "id":
        return entry.id == name or (entry.id or "").lower() == name.lower()
    if kind == "alias":
        aliases = entry.get("aliases")
        return isinstance(aliases, list) and fold(name) in {fold(a) for a in aliases if isinstance(a, str)}
    return True
