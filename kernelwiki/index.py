"""The page index: every page's frontmatter and search text, cached by file mtime and size.

A cold build parses every page; later calls re-parse only the files that changed, so lookups on
thousands of pages stay fast. The cache lives in .kernelwiki-cache/ (ignored by git) and is
rebuilt whenever the schemas, the vocabulary or the tool version change.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwiki import __version__
from kernelwiki.pages import Page, read_page
from kernelwiki.problems import Problem
from kernelwiki.repo import Repo
from kernelwiki.schema import fingerprint
from kernelwiki.vocab import QUERY_ALIASES, Vocabulary, closest

CACHE_FILE = "index.json"
_WORD = re.compile(r"[a-z0-9_.+-]+")


@dataclass
class Entry:
    """What the index keeps of one page file."""

    rel: str
    mtime_ns: int
    size: int
    meta: dict[str, Any] | None
    headline: str
    """summary, or the first paragraph of the body, for listings."""
    text: str
    """Lower-cased searchable text: title, aliases, tags and body."""
    read_problems: list[Problem]
    local_problems: list[Problem] | None = None
    """Problems found by the per-file checks; None until validate has run them."""

    @property
    def id(self) -> str | None:
        value = (self.meta or {}).get("id")
        return value if isinstance(value, str) else None

    def get(self, key: str, default: Any = None) -> Any:
        return (self.meta or {}).get(key, default)

    def to_json(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k not in ("read_problems", "local_problems")}
        data["read_problems"] = [p.to_json() for p in self.read_problems]
        data["local_problems"] = (
            None if self.local_problems is None else [p.to_json() for p in self.local_problems]
        )
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Entry":
        data = dict(data)
        data["read_problems"] = [Problem(**p) for p in data["read_problems"]]
        if data["local_problems"] is not None:
            data["local_problems"] = [Problem(**p) for p in data["local_problems"]]
        return cls(**data)


class UnknownPage(LookupError):
    def __init__(self, name: str, suggestions: list[str]):
        hint = f"; closest: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(f"no page with id, alias or path {name!r}{hint}")
        self.suggestions = suggestions


@dataclass
class Wiki:
    repo: Repo
    vocab: Vocabulary
    entries: dict[str, Entry] = field(default_factory=dict)
    dirty: bool = False
    fresh: dict[str, Page] = field(default_factory=dict)
    """Pages parsed in this process (not from the cache), kept for their line maps."""

    # --- loading -----------------------------------------------------------------------------
    @classmethod
    def load(cls, repo: Repo | None = None, use_cache: bool = True) -> "Wiki":
        repo = repo or Repo.find()
        wiki = cls(repo, Vocabulary.load(repo.schemas))
        cached = wiki._read_cache() if use_cache else {}
        for path, stat in _scan(repo.wiki):
            rel = repo.rel(path)
            old = cached.get(rel)
            if old and old.mtime_ns == stat.st_mtime_ns and old.size == stat.st_size:
                wiki.entries[rel] = old
            else:
                page = read_page(path, rel)
                wiki.fresh[rel] = page
                wiki.entries[rel] = _entry(page, stat)
                wiki.dirty = True
        if set(cached) - set(wiki.entries):
            wiki.dirty = True
        if use_cache:
            wiki.save()
        return wiki

    def page(self, rel: str) -> Page:
        """The parsed page (from this process if parsed here, else read again)."""
        if rel not in self.fresh:
            self.fresh[rel] = read_page(self.repo.root / rel, rel)
        return self.fresh[rel]

    def _cache_key(self) -> str:
        """Changes with the tool version, its code, the schemas and the vocabulary."""
        code = sorted(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in Path(__file__).parent.glob("*.py"))
        digest = hashlib.sha256("\n".join(code).encode()).hexdigest()[:12]
        return f"{__version__}:{digest}:{fingerprint(self.repo.schemas)}"

    def _read_cache(self) -> dict[str, Entry]:
        try:
            data = json.loads((self.repo.cache / CACHE_FILE).read_text(encoding="utf-8"))
            if data.get("key") != self._cache_key():
                return {}
            return {rel: Entry.from_json(e) for rel, e in data["entries"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def save(self) -> None:
        """Write the cache atomically; a read-only checkout simply goes without."""
        if not self.dirty:
            return
        payload = {"key": self._cache_key(), "entries": {r: e.to_json() for r, e in self.entries.items()}}
        try:
            self.repo.cache.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.repo.cache, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(payload, out, ensure_ascii=False, separators=(",", ":"), default=str)
            os.replace(tmp, self.repo.cache / CACHE_FILE)
            self.dirty = False
        except OSError:
            pass

    # --- lookups -----------------------------------------------------------------------------
    def by_id(self) -> dict[str, Entry]:
        """id -> entry (the first file, in path order, when an id is duplicated)."""
        out: dict[str, Entry] = {}
        for rel in sorted(self.entries):
            entry = self.entries[rel]
            if entry.id and entry.id not in out:
                out[entry.id] = entry
        return out

    def aliases(self) -> dict[str, Entry]:
        """alias (lower-case) -> entry."""
        out: dict[str, Entry] = {}
        for entry in self.by_id().values():
            for alias in entry.get("aliases") or []:
                if isinstance(alias, str):
                    out.setdefault(alias.lower(), entry)
        return out

    def resolve(self, name: str) -> Entry:
        """Find a page by id, alias (case-insensitive) or repository path. Raises UnknownPage,
        or repo.OutsideRepo for a path that leaves the repository."""
        ids = self.by_id()
        if name in ids:
            return ids[name]
        lowered = name.lower()
        for page_id, entry in ids.items():
            if page_id.lower() == lowered:
                return entry
        alias = self.aliases().get(lowered)
        if alias:
            return alias
        if "/" in name or name.endswith(".md"):
            path = self.repo.inside(name)
            entry = self.entries.get(self.repo.rel(path))
            if entry:
                return entry
        aliases = self.aliases()
        near = closest(name.lower(), list(ids) + list(aliases), n=5)
        suggestions = list(dict.fromkeys(aliases[n].id if n in aliases else n for n in near))
        raise UnknownPage(name, suggestions or self._fuzzy(name))

    def _fuzzy(self, name: str) -> list[str]:
        """Ids that contain a word of the name, when difflib finds nothing close."""
        words = [w for w in _WORD.findall(name.lower()) if len(w) > 2]
        return [i for i in sorted(self.by_id()) if any(w in i for w in words)][:5]

    def expand_aliases(self, word: str) -> list[str]:
        return [word, *QUERY_ALIASES.get(word.lower(), [])]


def _scan(wiki_dir: Path):
    """(path, stat) of every .md file under wiki/, sorted by path."""
    found = []
    stack = [wiki_dir]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for item in it:
                    if item.is_dir(follow_symlinks=False):
                        stack.append(Path(item.path))
                    elif item.name.endswith(".md") and item.is_file():
                        found.append((Path(item.path), item.stat()))
        except FileNotFoundError:
            continue
    return sorted(found, key=lambda pair: pair[0])


def _entry(page: Page, stat: os.stat_result) -> Entry:
    meta = page.meta
    headline = ""
    if meta and isinstance(meta.get("summary"), str):
        headline = meta["summary"]
    else:
        for block in page.body.split("\n\n"):
            block = block.strip()
            if block and not block.startswith(("#", "<!--", "|", "```", ">")):
                headline = " ".join(block.split())[:200]
                break
    parts: list[str] = [page.body]
    if meta:
        for key in ("id", "title", "summary"):
            if isinstance(meta.get(key), str):
                parts.append(meta[key])
        for key in ("aliases", "tags", "architectures", "hardware_features", "techniques",
                    "kernel_types", "languages"):
            value = meta.get(key)
            if isinstance(value, list):
                parts.extend(str(v) for v in value)
    return Entry(
        rel=page.rel, mtime_ns=stat.st_mtime_ns, size=stat.st_size, meta=meta, headline=headline,
        text="\n".join(parts).lower(), read_problems=page.problems,
    )
