"""The page index: every page's frontmatter and search text, cached by content.

A cold build parses every page; later calls re-parse only the files that changed, so lookups on
thousands of pages stay fast. Each entry keeps the SHA-256 of the file it was parsed from and the
file's (mtime, size, ctime): lookups (get, query) trust an entry while all three match - copying
tools that preserve mtime (cp -p, tar, rsync) still change ctime, which user space cannot set -
and validate (and the page get prints) compare the content hash itself. The cache lives in .kernelwiki-cache/ (ignored by git) and is
rebuilt whenever the schemas, the vocabulary or the tool version change.
"""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import pickle
import re
import tempfile
from contextlib import contextmanager
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from kernelwiki import __version__
from kernelwiki.model.pages import Page, parse_page, read_page, read_page_bytes
from kernelwiki.model.problems import Problem
from kernelwiki.storage.repo import Repo
from kernelwiki.model.files import UnsafeFile
from kernelwiki.model.schema import fingerprint
from kernelwiki.model.vocab import QUERY_ALIASES, Vocabulary, closest

PARALLEL_MIN = 1000
"""Parse this many pages or more and the work is shared among the CPUs (forking costs ~50 ms)."""
_SHARED: tuple | None = None
CACHE_FILE = "index.pickle"
TEXT_FILE = "text.pickle"  # search text, kept apart so that lookups need not load it
META_FILE = "meta.pickle"  # the full frontmatter of each page, read only when asked for
NAMES_FILE = "names.pickle"  # alias -> page file, so that `get ALIAS` need not load the index
# The cache is pickled, not JSON: loading 2,000 entries is several times faster, and the file is
# this checkout's own (ignored by git, rebuilt whenever the code or the schemas change).
_WORD = re.compile(r"[a-z0-9_.+-]+")


HEAD_KEYS = ("id", "type", "title", "aliases", "tags", "architectures", "evidence_level", "evidence_by_arch", "status")
"""Fields every listing and query reads; the cache keeps them apart from the rest of the
frontmatter, which is decoded only for the pages whose other fields are asked for."""


class Entry:
    """What the index keeps of one page file."""

    __slots__ = ("rel", "mtime_ns", "size", "ctime_ns", "sha256", "_meta", "_blob", "head", "headline", "text",
                 "read_problems", "local_problems", "ranking")

    def __init__(self, rel: str, mtime_ns: int, size: int, ctime_ns: int, sha256: str, meta: dict[str, Any] | None,
                 headline: str, text: str | None, read_problems: list[Problem],
                 local_problems: list[Problem] | None = None, blob: bytes | None = None, head: dict | None = None):
        self.rel, self.mtime_ns, self.size, self.ctime_ns, self.sha256 = rel, mtime_ns, size, ctime_ns, sha256
        self._meta, self._blob = meta, blob
        self.head = head if head is not None else _head(meta)
        self.headline = headline
        """summary, or the first paragraph of the body, for listings."""
        self.text = text
        """Lower-cased searchable text: title, aliases, tags and body (None until Wiki.text loads it)."""
        self.read_problems = read_problems
        self.local_problems = local_problems
        """Problems found by the per-file checks; None until validate has run them."""
        self.ranking: Any = None
        """What query ranks this page by, kept with the cache so that a query need not work it
        out again for every page (see ranking_fields)."""

    @property
    def meta(self) -> dict[str, Any] | None:
        """The frontmatter mapping (None when it could not be read)."""
        if isinstance(self._blob, _MetaFile):
            self._blob = self._blob.blob(self)
        if self._blob is not None:
            self._meta, self._blob = pickle.loads(self._blob), None
        return self._meta

    def meta_blob(self) -> bytes:
        """The frontmatter, pickled, as the cache stores it."""
        if isinstance(self._blob, _MetaFile):
            self._blob = self._blob.blob(self)
        return self._blob if self._blob is not None else pickle.dumps(self._meta, protocol=pickle.HIGHEST_PROTOCOL)

    @property
    def id(self) -> str | None:
        value = self.get("id")
        return value if isinstance(value, str) else None

    def get(self, key: str, default: Any = None) -> Any:
        if self.head is not None and key in HEAD_KEYS:
            return self.head.get(key, default)
        return (self.meta or {}).get(key, default)


class _MetaFile:
    """The frontmatter of the cached pages, in a file of its own that is read only when some
    page's full frontmatter is asked for (listings and queries need only Entry.head)."""

    def __init__(self, repo: Repo, key: str):
        self.repo, self.key = repo, key
        self.blobs: dict[str, tuple[str, bytes]] | None = None

    def blob(self, entry: Entry) -> bytes:
        if self.blobs is None:
            with _collector_paused():
                data = read_pickle(self.repo.cache / META_FILE)
            self.blobs = data["blobs"] if data and data.get("key") == self.key else {}
        stored = self.blobs.get(entry.rel)
        if stored and stored[0] == entry.sha256:
            return stored[1]
        # Written by another save than the index (or not at all): the page file is the truth.
        return pickle.dumps(read_page(self.repo.root / entry.rel, entry.rel).meta, protocol=pickle.HIGHEST_PROTOCOL)


def _head(meta: dict | None) -> dict | None:
    """The listing fields, each in the shape listings rely on (the page schema's shape); a value of
    another shape is left out here - validate reports it - so that no listing trips over it."""
    if meta is None:
        return None
    head: dict[str, Any] = {}
    for key in HEAD_KEYS:
        value = meta.get(key)
        if key in ("aliases", "tags", "architectures"):
            if isinstance(value, list):
                head[key] = [v for v in value if isinstance(v, str)]
        elif key == "evidence_by_arch":
            if isinstance(value, dict):
                head[key] = {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
        elif isinstance(value, str):
            head[key] = value
    return head


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
    key: str = ""
    """Cache key: the tool version, its code, the schemas and the vocabulary."""
    use_cache: bool = True
    partial: bool = False
    """Only some pages are loaded (a single-page lookup, see kernelwiki.storage.lookup); the first
    question about all pages loads the rest, and a partial index is never saved."""
    _texts: dict[str, str] | None = None

    # --- loading -----------------------------------------------------------------------------
    @classmethod
    def load(cls, repo: Repo | None = None, use_cache: bool = True, verify: bool = False,
             check: Callable[["Wiki", Page], list[Problem]] | None = None) -> "Wiki":
        """The index. `verify` compares content hashes even where the file's stat is unchanged
        (validate does); `check(wiki, page)` is run on each page parsed, as its local problems.
        Many pages to parse are shared among the CPUs."""
        repo = repo or Repo.find()
        key = cache_key(repo)
        with _collector_paused():
            cached_vocab, cached = _read_cache(repo, key) if use_cache else (None, {})
        wiki = cls(repo, Vocabulary(cached_vocab) if cached_vocab else Vocabulary.load(repo.schemas), key=key,
                   use_cache=use_cache)
        todo = []
        for rel, stat in scan_pages(repo.root):
            old = cached.get(rel)
            if old and (old.mtime_ns, old.size, old.ctime_ns) == (stat.st_mtime_ns, stat.st_size, stat.st_ctime_ns) \
                    and not verify:
                wiki.entries[rel] = old
            else:
                todo.append((rel, stat, old))
        workers = min(os.cpu_count() or 1, 8) if len(todo) >= PARALLEL_MIN else 1
        if workers > 1:
            global _SHARED
            _SHARED = (wiki, check)  # the forked workers inherit it
            chunks = [[(rel, stat, old.sha256 if old else None) for rel, stat, old in todo[i::workers]]
                      for i in range(workers)]
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                results = [r for chunk in pool.map(_read_chunk, chunks) for r in chunk]
            _SHARED = None
        else:
            results = [wiki._read(rel, stat, old.sha256 if old else None, check) for rel, stat, old in todo]
        for (rel, stat, old), result in zip(sorted(todo, key=lambda t: t[0]), sorted(results, key=lambda r: r[0])):
            wiki._store(rel, stat, old, result[1])
        if set(cached) - set(wiki.entries) or not cached_vocab:
            wiki.dirty = True
        wiki.save()
        return wiki

    def _read(self, rel: str, stat: os.stat_result, known: str | None,
              check: Callable[["Wiki", Page], list[Problem]] | None) -> tuple[str, Entry | str]:
        """(rel, a new entry) - or (rel, its digest) when the content still hashes to `known`."""
        try:
            raw = read_page_bytes(self.repo.root / rel)
            digest = hashlib.sha256(raw).hexdigest()
        except UnsafeFile:
            raw, digest = None, ""
        if known is not None and digest == known:
            return rel, digest
        page = parse_page(raw, rel) if raw is not None else read_page(self.repo.root / rel, rel)
        # The search text goes only into the cache and queries; without a cache, a query makes it.
        entry = _entry(page, stat, digest, with_text=self.use_cache)
        if check is not None:
            entry.local_problems = check(self, page)
        self.fresh[rel] = page
        return rel, entry

    def _store(self, rel: str, stat: os.stat_result, old: Entry | None, result: Entry | str) -> Entry:
        """Keep the cached entry (and its validation results) when the content is the same."""
        signature = (stat.st_mtime_ns, stat.st_size, stat.st_ctime_ns)
        if isinstance(result, str):
            assert old is not None
            if (old.mtime_ns, old.size, old.ctime_ns) != signature:
                old.mtime_ns, old.size, old.ctime_ns = signature
                self.dirty = True
            self.entries[rel] = old
        else:
            self.entries[rel] = result
            self.dirty = True
        return self.entries[rel]

    def current(self, entry: Entry) -> Entry:
        """The entry as the file is now (its content hash checked), for output built from one page."""
        try:
            stat = os.stat(self.repo.root / entry.rel, follow_symlinks=False)
        except OSError:
            return entry
        updated = self._store(entry.rel, stat, entry, self._read(entry.rel, stat, entry.sha256, None)[1])
        self.save()
        return updated

    def page(self, rel: str) -> Page:
        """The parsed page (from this process if parsed here, else read again)."""
        if rel not in self.fresh:
            self.fresh[rel] = read_page(self.repo.root / rel, rel)
        return self.fresh[rel]

    def complete(self) -> None:
        """Load every page into a partial index."""
        if self.partial:
            full = Wiki.load(self.repo, use_cache=self.use_cache)
            self.entries, self.vocab, self.key, self.partial = full.entries, full.vocab, full.key, False

    def save(self) -> None:
        """Write the cache atomically; a read-only checkout simply goes without."""
        if not self.dirty or not self.use_cache or self.partial:
            return
        key = self.key
        if self.repo.cache.is_symlink():  # it could point anywhere; write nothing through it
            return
        try:
            self.repo.cache.mkdir(exist_ok=True)
            texts = {rel: self.text(entry) for rel, entry in self.entries.items()}
            write_pickle(self.repo.cache / TEXT_FILE, {"key": key, "texts": texts})
            # Plain tuples and dicts unpickle several times faster than dataclass instances.
            blobs = {rel: (entry.sha256, entry.meta_blob()) for rel, entry in self.entries.items()}
            write_pickle(self.repo.cache / META_FILE, {"key": key, "blobs": blobs})
            entries = {rel: _to_plain(entry) for rel, entry in self.entries.items()}
            write_pickle(self.repo.cache / CACHE_FILE, {"key": key, "vocabulary": self.vocab.data, "entries": entries})
            aliases = {alias: entry.rel for alias, entry in self.aliases().items()}
            write_pickle(self.repo.cache / NAMES_FILE, {"key": key, "aliases": aliases})
            self.dirty = False
        except (OSError, pickle.PicklingError, RecursionError):
            pass

    def text(self, entry: Entry) -> str:
        """The search text of a page, from the text cache when the entry came from the cache."""
        if entry.text is None:
            if self._texts is None:
                data = read_pickle(self.repo.cache / TEXT_FILE) if self.use_cache else None
                self._texts = data["texts"] if data and data.get("key") == self.key else {}
            cached = self._texts.get(entry.rel)
            entry.text = cached if cached is not None else _search_text(self.page(entry.rel))
        return entry.text

    # --- lookups -----------------------------------------------------------------------------
    def by_id(self) -> dict[str, Entry]:
        """id -> entry (the first file, in path order, when an id is duplicated)."""
        self.complete()
        out: dict[str, Entry] = {}
        for rel in sorted(self.entries):
            entry = self.entries[rel]
            page_id = entry.id
            if page_id and page_id not in out:
                out[page_id] = entry
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


def ranking_fields(entry: Entry) -> tuple:
    """What query ranks a page by, kept in the cache: (id, id without its prefix, aliases, title, tags and architectures, headline), lower-cased."""
    page_id = (entry.id or "").lower()
    # Tuples, not sets: a page has a few of each, and tuples unpickle several times faster.
    return (page_id, page_id.split("-", 1)[-1], tuple(str(a).lower() for a in entry.get("aliases") or []),
            str(entry.get("title") or "").lower(),
            tuple(str(t).lower() for t in (entry.get("tags") or []) + (entry.get("architectures") or [])),
            entry.headline.lower())


def cache_key(repo: Repo) -> str:
    """Changes with the tool version, its code, the schemas and the vocabulary."""
    package = Path(__file__).resolve().parents[1]
    code = sorted(f"{p.relative_to(package)}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in package.rglob("*.py"))
    digest = hashlib.sha256("\n".join(code).encode()).hexdigest()[:12]
    return f"{__version__}:{digest}:{fingerprint(repo.schemas)}"


def _read_cache(repo: Repo, key: str) -> tuple[dict | None, dict[str, Entry]]:
    data = read_pickle(repo.cache / CACHE_FILE)
    if not data or data.get("key") != key:
        return None, {}
    metas = _MetaFile(repo, key)
    return data["vocabulary"], {rel: _from_plain(rel, plain, metas) for rel, plain in data["entries"].items()}


def _to_plain(entry: Entry) -> tuple:
    local = None if entry.local_problems is None else [astuple(p) for p in entry.local_problems]
    return (entry.mtime_ns, entry.size, entry.ctime_ns, entry.sha256, entry.head, entry.headline,
            [astuple(p) for p in entry.read_problems], local, entry.ranking or ranking_fields(entry))


def _from_plain(rel: str, plain: tuple, metas: _MetaFile) -> Entry:
    mtime_ns, size, ctime_ns, sha256, head, headline, read, local, ranking = plain
    entry = Entry(rel, mtime_ns, size, ctime_ns, sha256, None, headline, None, [Problem(*p) for p in read],
                  None if local is None else [Problem(*p) for p in local], blob=metas, head=head)  # type: ignore[arg-type]
    entry.ranking = ranking
    return entry


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Unpickling 20,000 entries allocates millions of objects and triggers the cyclic garbage
    collector over and over (it then takes most of the time); they hold no cycles worth finding."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_pickle(path: Path) -> dict | None:
    try:
        with open(path, "rb") as handle:
            data = pickle.load(handle)
        return data if isinstance(data, dict) else None
    except Exception:  # a damaged or foreign cache file is simply rebuilt
        return None


def write_pickle(path: Path, payload: dict) -> None:
    """Atomic write: a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            pickle.dump(payload, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def scan_pages(root: Path) -> list[tuple[str, os.stat_result]]:
    """(repository-relative path, stat) of every .md file under wiki/, sorted by path.
    Works on strings: resolving thousands of Path objects costs more than the rest of a lookup."""
    prefix = len(str(root)) + 1
    found = []
    stack = [os.path.join(str(root), "wiki")]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for item in it:
                    if item.name.endswith(".md"):
                        # Links and other non-files are listed too, so that validate names them.
                        found.append((item.path[prefix:], item.stat(follow_symlinks=False)))
                    elif item.is_dir(follow_symlinks=False):
                        stack.append(item.path)
        except OSError:  # vanished or unreadable directory: its pages are simply not there
            continue
    if os.sep != "/":
        found = [(rel.replace(os.sep, "/"), stat) for rel, stat in found]
    found.sort(key=lambda item: item[0])
    return found


def _read_chunk(chunk: list[tuple[str, os.stat_result, str | None]]) -> list[tuple[str, Entry | str]]:
    """Worker: read and check a share of the pages (the wiki and the check come by fork)."""
    assert _SHARED is not None
    wiki, check = _SHARED
    return [wiki._read(rel, stat, known, check) for rel, stat, known in chunk]


def _entry(page: Page, stat: os.stat_result, digest: str, with_text: bool = True) -> Entry:
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
    return Entry(
        rel=page.rel, mtime_ns=stat.st_mtime_ns, size=stat.st_size, ctime_ns=stat.st_ctime_ns, sha256=digest,
        meta=meta, headline=headline, text=_search_text(page) if with_text else None, read_problems=page.problems,
    )


def _search_text(page: Page) -> str:
    meta = page.meta
    parts: list[str] = [page.body]
    if meta:
        for key in ("id", "title", "summary"):
            if isinstance(meta.get(key), str):
                parts.append(meta[key])
        for key in ("aliases", "tags", "architectures", "hardware_features", "techniques",
                    "kernel_types", "languages", "symptoms"):
            value = meta.get(key)
            if isinstance(value, list):
                parts.extend(str(v) for v in value)
    return "\n".join(parts).lower()
