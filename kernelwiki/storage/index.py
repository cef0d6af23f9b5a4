"""The page index: every page's frontmatter and search text, cached by content.

A cold build parses every page; later calls re-parse only the files that changed, so lookups on
thousands of pages stay fast. Each entry keeps the SHA-256 of the file it was parsed from and the
file's (mtime, size, ctime): lookups (get, query) trust an entry while all three match - copying
tools that preserve mtime (cp -p, tar, rsync) still change ctime, which user space cannot set -
and validate (and the page get prints) compare the content hash itself. The cache files are
kernelwiki.storage.cache's (JSON, keyed by the tool version, its code and the schemas); whatever is
read from them is checked for shape here before an entry is built from it, and an entry that fails
is read again from its page file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelwiki.model.files import UnsafeFile
from kernelwiki.model.pages import Page, parse_page, read_page, read_page_bytes
from kernelwiki.model.problems import Problem, utf8_text
from kernelwiki.model.vocab import QUERY_ALIASES, Vocabulary, closest, fold
from kernelwiki.storage import cache
from kernelwiki.storage.cache import cache_key
from kernelwiki.storage.repo import Repo

PARALLEL_MIN = 1000
"""Parse this many pages or more and the work is shared among the CPUs (forking costs ~50 ms)."""
_SHARED: tuple | None = None
_WORD = re.compile(r"[a-z0-9_.+-]+")


HEAD_KEYS = ("id", "type", "title", "aliases", "tags", "architectures", "evidence_level", "evidence_by_arch", "status")
"""Fields every listing and query reads; the cache keeps them apart from the rest of the
frontmatter, which is decoded only for the pages whose other fields are asked for."""


class Entry:
    """What the index keeps of one page file."""

    __slots__ = ("rel", "mtime_ns", "size", "ctime_ns", "sha256", "_meta", "_blob", "head", "headline", "text",
                 "read_problems", "local_problems", "ranking", "names_runs")

    def __init__(self, rel: str, mtime_ns: int, size: int, ctime_ns: int, sha256: str, meta: dict[str, Any] | None,
                 headline: str, text: str | None, read_problems: list[Problem],
                 local_problems: list[Problem] | None = None, blob: "_MetaFile | None" = None,
                 head: dict | None = None, names_runs: bool = True):
        self.rel, self.mtime_ns, self.size, self.ctime_ns, self.sha256 = rel, mtime_ns, size, ctime_ns, sha256
        self._meta, self._blob = meta, blob
        self.head = head if head is not None else _head(meta)
        self.headline = headline
        """summary, or the first paragraph of the body, for listings."""
        self.text = text
        """Lower-cased searchable text: title, aliases, tags and body (None until Wiki.text makes it)."""
        self.names_runs = names_runs
        """Whether the body may name a run (holds a run id's shape): validate reads again only those pages."""
        self.read_problems = read_problems
        self.local_problems = local_problems
        """Problems found by the per-file checks; None until validate has run them."""
        self.ranking: Any = None
        """What query ranks this page by, made once per process when a query first needs it
        (see ranking_fields)."""

    @property
    def meta(self) -> dict[str, Any] | None:
        """The frontmatter mapping (None when it could not be read)."""
        if isinstance(self._blob, (_MetaFile, _MetaJson)):
            self._meta, self._blob = self._blob.meta(self), None
        return self._meta

    def meta_text(self) -> str | None:
        """The frontmatter as the cache stores it: JSON text, or None where there is none or JSON
        cannot hold it (a !!binary or !!set value): then it is read again from the page file when
        asked for. (yamlio admits only string keys, which JSON keeps as they are.)"""
        if isinstance(self._blob, (_MetaFile, _MetaJson)):
            text = self._blob.text(self)
            if text is not None:
                return text
        if not self.meta:
            return None
        try:
            return json.dumps(self.meta, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):   # bytes or a set: JSON has no such value
            return None

    @property
    def id(self) -> str | None:
        value = self.get("id")
        return value if isinstance(value, str) else None

    def get(self, key: str, default: Any = None) -> Any:
        if self.head is not None and key in HEAD_KEYS:
            return self.head.get(key, default)
        return (self.meta or {}).get(key, default)


class _MetaJson:
    """The frontmatter of a page parsed in a worker process, as the JSON text the cache stores: the
    worker encodes it (in parallel), the index decodes it when some field outside the listing's is
    asked for (pickling the mapping back cost the parent as much)."""

    __slots__ = ("json",)

    def __init__(self, text: str):
        self.json = text

    def text(self, entry: "Entry") -> str:
        return self.json

    def meta(self, entry: "Entry") -> dict | None:
        meta = json.loads(self.json)
        return meta if isinstance(meta, dict) else None


class _MetaFile:
    """The frontmatter of the cached pages, in a file of its own that is read only when some
    page's full frontmatter is asked for (listings and queries need only Entry.head)."""

    def __init__(self, repo: Repo, key: str):
        self.repo, self.key = repo, key
        self.texts: dict | None = None

    def text(self, entry: Entry) -> str | None:
        """The stored JSON text of the entry's frontmatter, if stored for this very content."""
        if self.texts is None:
            data = cache.read(self.repo, cache.META, self.key)
            self.texts = data if isinstance(data, dict) else {}
        stored = self.texts.get(entry.rel)
        if isinstance(stored, list) and len(stored) == 2 and stored[0] == entry.sha256 and isinstance(stored[1], str):
            return stored[1]
        return None

    def meta(self, entry: Entry) -> dict | None:
        text = self.text(entry)
        if text is not None:
            try:
                meta = json.loads(text)
            except (ValueError, RecursionError):
                meta = None
            if isinstance(meta, dict):
                return meta
        # Not stored, stored by another save than the index, or damaged: the page file is the truth.
        return read_page(self.repo.root / entry.rel, entry.rel).meta


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
    terms: Any = None
    """(signature, TermIndex) once a query has needed the word index (kernelwiki.storage.termindex)."""
    misnamed: list[str] = field(default_factory=list)
    """Page files whose path is not UTF-8, with \\x escapes: left out of the index (see scan_pages)."""

    # --- loading -----------------------------------------------------------------------------
    @classmethod
    def load(cls, repo: Repo | None = None, use_cache: bool = True, verify: bool = False,
             check: Callable[["Wiki", Page], list[Problem]] | None = None) -> "Wiki":
        """The index. `verify` compares content hashes even where the file's stat is unchanged
        (validate does); `check(wiki, page)` is run on each page parsed, as its local problems.
        Many pages to parse are shared among the CPUs."""
        with cache.collector_paused():   # millions of frontmatter values, no cycles: the collector only costs
            return cls._load(repo, use_cache, verify, check)

    @classmethod
    def _load(cls, repo: Repo | None, use_cache: bool, verify: bool,
              check: Callable[["Wiki", Page], list[Problem]] | None) -> "Wiki":
        repo = repo or Repo.find()
        key = cache_key(repo)
        cached_vocab, cached = _read_cache(repo, key) if use_cache else (None, {})
        wiki = cls(repo, Vocabulary(cached_vocab) if cached_vocab else Vocabulary.load(repo.schemas), key=key,
                   use_cache=use_cache)
        todo = []
        pages, wiki.misnamed = scan_pages(repo.root)
        for rel, stat in pages:
            old = cached.get(rel)
            if old and (old.mtime_ns, old.size, old.ctime_ns) == (stat.st_mtime_ns, stat.st_size, stat.st_ctime_ns) \
                    and not verify:
                wiki.entries[rel] = old
            else:
                todo.append((rel, stat, old))
        workers = min(os.cpu_count() or 1, 8) if len(todo) >= PARALLEL_MIN and _single_threaded() else 1
        if workers > 1:
            import multiprocessing   # only for many pages: its import costs a lookup of one page 8 ms

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
        entry = _entry(page, stat, digest)
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
            self.misnamed = full.misnamed

    def save(self, always: bool = False) -> None:
        """Write the cache if anything changed (or `always`: a cache file was found unusable); a
        read-only checkout simply goes without."""
        if not (self.dirty or always) or not self.use_cache or self.partial:
            return
        key = self.key
        if self.repo.cache.is_symlink():  # it could point anywhere; write nothing through it
            return
        written = [
            cache.write(self.repo, cache.META, key,
                        {rel: [entry.sha256, entry.meta_text()] for rel, entry in self.entries.items()}),
            cache.write(self.repo, cache.INDEX, key, {"vocabulary": self.vocab.data,
                                                      "entries": {rel: _to_plain(e) for rel, e in self.entries.items()}}),
            cache.write(self.repo, cache.NAMES, key, {alias: entry.rel for alias, entry in self.aliases().items()}),
        ]
        if self.dirty:   # a page changed (perhaps in place, which a query cannot see): its index is built again
            cache.forget(self.repo, cache.QUERY)
        self.dirty = not all(written)

    def text(self, entry: Entry) -> str:
        """The search text of a page (made from the page, which is read again when it was not parsed here:
        only building the query index needs every page's text, and that is rare)."""
        if entry.text is None:
            body = None if entry.rel in self.fresh or entry.read_problems or entry.meta is None \
                else self._body(entry)
            entry.text = _search_text(self.page(entry.rel)) if body is None else _text_of(entry.meta, body)
        return entry.text

    def _body(self, entry: Entry) -> str | None:
        """The body of a page that read without problems, cut from its bytes at the closing fence (its
        frontmatter is in the index); None when the file is not as the index saw it."""
        try:
            raw = read_page_bytes(self.repo.root / entry.rel)
        except UnsafeFile:
            return None
        if hashlib.sha256(raw).hexdigest() != entry.sha256 or not raw.startswith(b"---\n"):
            return None
        end = raw.find(b"\n---\n", 3)
        if end < 0:
            return "" if raw.endswith(b"\n---") else None
        return raw[end + 5:].decode("utf-8")

    def read_entry(self, rel: str) -> Entry | None:
        """A new entry for one page file, read and parsed now (None when it is not there), kept in
        this index; for single-page lookups (kernelwiki.storage.lookup)."""
        try:
            stat = os.stat(self.repo.root / rel, follow_symlinks=False)
        except OSError:
            return None
        _, entry = self._read(rel, stat, None, None)
        assert isinstance(entry, Entry)
        return entry

    def misnamed_problems(self) -> list[Problem]:
        """One problem line per page file left out because its path is not UTF-8."""
        return [Problem(name, 1, "-", "the file name is not UTF-8, so the page is left out of every lookup; "
                                      "rename it (page file names are UTF-8, like the ids they hold)")
                for name in self.misnamed]

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
        """alias (folded: NFC, lower case) -> entry."""
        out: dict[str, Entry] = {}
        for entry in self.by_id().values():
            for alias in entry.get("aliases") or []:
                if isinstance(alias, str):
                    out.setdefault(fold(alias), entry)
        return out

    def resolve(self, name: str) -> Entry:
        """Find a page by id, repository path or alias (ids and aliases case-insensitive), in the
        order kernelwiki.storage.lookup tries them, so that `get` and MCP always agree: a name that
        is a page file's path is that page, even where a (refused) alias spells the same path.
        Raises UnknownPage, or repo.OutsideRepo for a path that leaves the repository."""
        ids = self.by_id()
        if name in ids:
            return ids[name]
        lowered = fold(name)
        for page_id, entry in ids.items():
            if fold(page_id) == lowered:
                return entry
        if "/" in name or name.endswith(".md"):
            path = self.repo.inside(name)
            entry = self.entries.get(self.repo.rel(path))
            if entry:
                return entry
        alias = self.aliases().get(lowered)
        if alias:
            return alias
        aliases = self.aliases()
        near = closest(lowered, list(ids) + list(aliases), n=5)
        suggestions = list(dict.fromkeys(aliases[n].id if n in aliases else n for n in near))
        raise UnknownPage(name, suggestions or self._fuzzy(name))

    def _fuzzy(self, name: str) -> list[str]:
        """Ids that contain a word of the name, when difflib finds nothing close."""
        words = [w for w in _WORD.findall(fold(name)) if len(w) > 2]
        return [i for i in sorted(self.by_id()) if any(w in i for w in words)][:5]

    def expand_aliases(self, word: str) -> list[str]:
        return [word, *QUERY_ALIASES.get(word.lower(), [])]


def ranking_fields(entry: Entry) -> tuple:
    """What query ranks a page by: (id, id without its prefix, aliases, title, tags and
    architectures, headline), lower-cased. Made from the listing fields (strings only, see _head)
    with C-level calls: a query makes it for every page that holds its words."""
    head = entry.head or {}
    page_id = fold(head.get("id", ""))
    # Tuples, not sets: a page has a few of each.
    return (page_id, page_id.split("-", 1)[-1], tuple(map(fold, head.get("aliases", ()))),
            fold(head.get("title", "")),
            tuple(map(fold, head.get("tags", []) + head.get("architectures", []))), fold(entry.headline))


def alias_files(repo: Repo, key: str) -> dict[str, Any] | None:
    """alias (lower-case) -> page file, as the last complete index saved it (None without a usable
    cache). The values are untrusted: a caller checks each one before it reads a file."""
    data = cache.read(repo, cache.NAMES, key)
    return data if isinstance(data, dict) else None


def _read_cache(repo: Repo, key: str) -> tuple[dict | None, dict[str, Entry]]:
    """(vocabulary, rel -> entry) from the index cache; (None, {}) without a usable one. An entry
    of the wrong shape is left out (its page is read again), a vocabulary of the wrong shape
    discards the whole file."""
    with cache.collector_paused():   # one pause for decoding and building: one collection after it
        data = cache.read(repo, cache.INDEX, key)
        if not isinstance(data, dict) or not Vocabulary.well_formed(data.get("vocabulary")) \
                or not isinstance(data.get("entries"), dict):
            return None, {}
        metas = _MetaFile(repo, key)
        entries = {}
        for rel, plain in data["entries"].items():
            entry = _from_plain(rel, plain, metas)
            if entry is not None:
                entries[rel] = entry
    return data["vocabulary"], entries


def _to_plain(entry: Entry) -> list:
    local = None if entry.local_problems is None else [astuple(p) for p in entry.local_problems]
    return [entry.mtime_ns, entry.size, entry.ctime_ns, entry.sha256, entry.head, entry.headline,
            [astuple(p) for p in entry.read_problems], local, entry.names_runs]


def _from_plain(rel: Any, plain: Any, metas: _MetaFile) -> Entry | None:
    """The entry a cached list describes, or None when it is not of the shape _to_plain writes.
    (Exact type checks and str.join, which refuses anything but strings, keep this cheap: it runs
    for every page a lookup loads.)"""
    if type(rel) is not str or type(plain) is not list or len(plain) != 9:
        return None
    mtime_ns, size, ctime_ns, sha256, head, headline, read, local, names_runs = plain
    if not (type(mtime_ns) is int and type(size) is int and type(ctime_ns) is int and type(sha256) is str
            and type(headline) is str and (head is None or _is_head(head)) and type(names_runs) is bool):
        return None
    problems = _problems(read)
    local_problems = None if local is None else _problems(local)
    if problems is None or (local is not None and local_problems is None):
        return None
    return Entry(rel, mtime_ns, size, ctime_ns, sha256, None, headline, None, problems, local_problems,
                 blob=metas, head=head, names_runs=names_runs)


_HEAD_LISTS = ("aliases", "tags", "architectures")


def _is_head(head: Any) -> bool:
    """Whether `head` is what _head makes: listing fields only, each of the shape listings rely on."""
    if type(head) is not dict:
        return False
    try:
        for key, value in head.items():
            if key in _HEAD_LISTS:
                if type(value) is not list:
                    return False
                "".join(value)
            elif key == "evidence_by_arch":
                if type(value) is not dict:
                    return False
                "".join(value)
                "".join(value.values())
            elif key not in HEAD_KEYS or type(value) is not str:
                return False
    except TypeError:   # a list or mapping holding something other than strings
        return False
    return True


def _problems(plain: Any) -> list[Problem] | None:
    if type(plain) is not list:
        return None
    if not plain:
        return []
    out = []
    for item in plain:
        if not (type(item) is list and len(item) == 4 and type(item[0]) is str and type(item[1]) is int
                and type(item[2]) is str and type(item[3]) is str):
            return None
        out.append(Problem(*item))
    return out


def scan_pages(root: Path) -> tuple[list[tuple[str, os.stat_result]], list[str]]:
    """(repository-relative path, stat) of every .md file under wiki/, sorted by path, and the .md
    files whose path is not UTF-8 (written with \\x escapes): those are no pages, since their name
    could be written neither in the cache nor in a JSON answer; validate names them.
    Works on strings: resolving thousands of Path objects costs more than the rest of a lookup."""
    prefix = len(str(root)) + 1
    found, misnamed = [], []
    stack = [os.path.join(str(root), "wiki")]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for item in it:
                    if item.name.endswith(".md") and not _utf8(item.path):
                        misnamed.append(utf8_text(item.path[prefix:]))
                    elif item.name.endswith(".md"):
                        # Links and other non-files are listed too, so that validate names them.
                        found.append((item.path[prefix:], item.stat(follow_symlinks=False)))
                    elif item.is_dir(follow_symlinks=False):
                        stack.append(item.path)
        except OSError:  # vanished or unreadable directory: its pages are simply not there
            continue
    if os.sep != "/":
        found = [(rel.replace(os.sep, "/"), stat) for rel, stat in found]
    found.sort(key=lambda item: item[0])
    return found, sorted(misnamed)


def _utf8(path: str) -> bool:
    """Whether the OS name decodes as UTF-8 (Python keeps the bytes it cannot decode as surrogates)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _single_threaded() -> bool:
    """Whether this process runs one thread, so forking reading workers is safe: a fork copies the
    locks other threads hold (native ones too: Ray's, after `probe run --ray` in the same process,
    left a forked worker waiting on a futex forever) and the child can never take them."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:   # no /proc: only the threads Python knows of can be counted
        import threading

        return threading.active_count() == 1


def _read_chunk(chunk: list[tuple[str, os.stat_result, str | None]]) -> list[tuple[str, Entry | str]]:
    """Worker: read and check a share of the pages (the wiki and the check come by fork)."""
    assert _SHARED is not None
    wiki, check = _SHARED
    out = []
    for rel, stat, known in chunk:
        result = wiki._read(rel, stat, known, check)
        entry = result[1]
        if isinstance(entry, Entry) and entry._meta:
            text = entry.meta_text()
            if text is not None:   # sent back as JSON text, decoded when asked for
                entry._meta, entry._blob = None, _MetaJson(text)
        out.append(result)
    return out


RUN_SHAPE = re.compile(r"\d{8}T\d{6}Z")
"""What a run id looks like (validate checks the runs a page's prose names)."""


def _entry(page: Page, stat: os.stat_result, digest: str) -> Entry:
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
        meta=meta, headline=headline, text=None, read_problems=page.problems,
        names_runs="Z" in page.body and RUN_SHAPE.search(page.body) is not None,
    )


def _search_text(page: Page) -> str:
    return _text_of(page.meta, page.body)


def _text_of(meta: dict | None, body: str) -> str:
    parts: list[str] = [body]
    if meta:
        for key in ("id", "title", "summary"):
            if isinstance(meta.get(key), str):
                parts.append(meta[key])
        for key in ("aliases", "tags", "architectures", "hardware_features", "techniques",
                    "kernel_types", "languages", "symptoms"):
            value = meta.get(key)
            if isinstance(value, list):
                parts.extend(str(v) for v in value)
    return fold("\n".join(parts))
