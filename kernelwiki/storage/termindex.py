"""The query index: which pages hold which words, names, tags and filter values, kept so that a query
reads only what its words and filters need, however many pages the wiki has.

Words are the runs of TOKEN characters of a page's folded search text, without punctuation at their
ends (`sm_90a.` is `sm_90a`, `8192:` is `8192`). A word with punctuation inside (`tcgen05.alloc`,
`cta_group::2`, `split-k`) is kept whole and as its segments (`tcgen05`, `alloc`), so `alloc` finds
it and so does `tcgen05.alloc`. A query term finds every key that starts with it and is at most
SUFFIX characters longer (`stage` finds `stages`, `swizzle` finds `swizzled`, `warp` not `warpgroup`);
a term of at most SHORT characters only itself (`sm` is not `smem`, `per` not `performance`).

Namespaces of keys: `b` body segments and `B` body words with punctuation inside (with counts);
`i` id, `a` alias, `t` title, `h` summary words (presence); `g` tags and architectures as written;
`n` whole names (id, id without its prefix, aliases, title) and `f` filter values (type, tag, arch,
status, evidence, evidence per architecture).

On disk (in the cache, untrusted like the rest of it): a manifest (kernelwiki.storage.cache's JSON)
naming the data file's token and size, the offsets of its shards, the pages' records and a stamp
(mtime, ctime) of every directory under wiki/; and the data file, those shards one after another
(one JSON document each: the keys of one namespace that begin with the same two characters and their
postings). A query reads the manifest, stats the directories, and reads the shards its terms fall
in and the records of the hits it shows. A file added, removed or renamed under wiki/ changes its
directory's stamp, and the index is built again from the page index; a file rewritten in place is
caught when it is one of the hits shown (its stat is checked), and by any command that loads the
whole page index and finds it changed (Wiki.save drops the manifest).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import secrets
import tempfile
from array import array
from bisect import bisect_left
from collections import Counter, defaultdict
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Iterable

from kernelwiki.model.vocab import Vocabulary, fold
from kernelwiki.storage import cache
from kernelwiki.storage.index import Entry
from kernelwiki.storage.repo import Repo

if TYPE_CHECKING:
    from kernelwiki.storage.index import Wiki

TOKEN = re.compile(r"[a-z0-9_.+:=-]+")
EDGES = "._+:=-"
SPLIT = re.compile(r"[._+:=-]+")
SHORT = 3
"""Terms of this many characters or fewer match only keys equal to them."""
SUFFIX = 3
"""A longer term matches keys that start with it and are at most this many characters longer."""
RECORDS_PER_CHUNK = 256
DATA = "query.dat"
FIELDS = ("i", "a", "t", "h")
RECORD_KEYS = ("rel", "id", "type", "title", "aliases", "tags", "architectures", "evidence_level",
               "evidence_by_arch", "status", "headline", "size", "mtime_ns", "ctime_ns", "code")


def words(text: str) -> list[str]:
    """The words of folded text, without punctuation at their ends."""
    return [w for w in (t.strip(EDGES) for t in TOKEN.findall(text)) if w]


def segments(word: str) -> list[str]:
    return [s for s in SPLIT.split(word) if s]


def shard_of(key: str) -> str:
    """The shard a key lives in: its namespace and the first two characters of its term."""
    return key[0] + key[1:3]


class Shard:
    """Sorted keys and, for each, the page numbers holding it (and how often, for body keys)."""

    __slots__ = ("keys", "bounds", "pages", "counts")

    def __init__(self, keys: list[str], bounds: array, pages: array, counts: array | None):
        self.keys, self.bounds, self.pages, self.counts = keys, bounds, pages, counts

    def matching(self, key: str, prefix: bool) -> Iterable[int]:
        """Indices of the keys equal to `key`, or (prefix) starting with it and then at most SUFFIX more
        characters or a segment boundary (`low-entropy` finds `low-entropy-inputs`)."""
        at = bisect_left(self.keys, key)
        size = len(key)
        while at < len(self.keys) and self.keys[at].startswith(key):
            found = self.keys[at]
            if found == key or (prefix and (len(found) <= size + SUFFIX or found[size] in EDGES)):
                yield at
            if not prefix:
                return
            at += 1

    def postings(self, index: int) -> tuple[array, array | None]:
        start, end = self.bounds[index], self.bounds[index + 1]
        return self.pages[start:end], (self.counts[start:end] if self.counts is not None else None)

    def to_plain(self) -> dict:
        return {"keys": self.keys, "bounds": self.bounds.tolist(), "pages": _b64(self.pages),
                "counts": _b64(self.counts) if self.counts is not None else None}

    @classmethod
    def from_plain(cls, plain: Any, pages: int, name: str = "") -> "Shard | None":
        """The shard `name` as to_plain wrote it, or None when `plain` is not of that shape: bounds
        ascending and inside the postings, every page number below `pages`, counts (a body shard's
        alone: `b`, `B`) as long as the postings."""
        if type(plain) is not dict or type(plain.get("keys")) is not list:
            return None
        if name and (plain.get("counts") is None) == (name[0] in "bB"):
            return None
        try:
            keys = plain["keys"]
            "".join(keys)
            bounds = array("Q", plain.get("bounds"))
            numbers = _unb64(plain.get("pages"))
            counts = None if plain.get("counts") is None else _unb64(plain.get("counts"))
        except (TypeError, ValueError, OverflowError, binascii.Error):
            return None
        if not (len(bounds) == len(keys) + 1 and bounds[0] == 0 and bounds[-1] == len(numbers)
                and bounds.tolist() == sorted(bounds) and keys == sorted(keys)
                and (counts is None or len(counts) == len(numbers))):
            return None
        if numbers and max(numbers) >= pages:
            return None
        return cls(keys, bounds, numbers, counts)


def _b64(values: array) -> str:
    return base64.b64encode(values.tobytes()).decode("ascii")


def _unb64(text: Any) -> array:
    if type(text) is not str:
        raise TypeError("not base64 text")
    raw = base64.b64decode(text, validate=True)
    values = array("I")
    if len(raw) % values.itemsize:
        raise ValueError("not a whole number of values")
    values.frombytes(raw)
    return values


class QueryIndex:
    """Everything a query reads: shards of keys by name, and the records of the pages (by number:
    the pages in id order)."""

    def __init__(self, repo: Repo, vocab: Vocabulary, pages: int, misnamed: list[str],
                 shards: dict[str, Shard] | None = None, records: list[dict] | None = None,
                 stored: "_Stored | None" = None):
        self.repo, self.vocab, self.pages, self.misnamed = repo, vocab, pages, misnamed
        self._shards: dict[str, Shard | None] = dict(shards or {})
        self._records: dict[int, list[dict] | None] = {} if records is None else \
            {n // RECORDS_PER_CHUNK: records[n:n + RECORDS_PER_CHUNK] for n in range(0, len(records), RECORDS_PER_CHUNK)}
        self._stored = stored

    # --- keys ---------------------------------------------------------------------------------
    def _shard(self, name: str) -> Shard | None:
        if name not in self._shards:
            self._shards[name] = self._stored.shard(name, self.pages) if self._stored else None
        return self._shards[name]

    def _lookup(self, namespace: str, term: str, prefix: bool) -> list[tuple[array, array | None]]:
        """The postings of every key of `namespace` that `term` matches."""
        if not term:
            return []
        key = namespace + term
        if len(term) >= 2:
            names = [shard_of(key)]
        elif self._stored is not None:   # one character: every shard whose term begins with it
            names = [n for n in self._stored.names if n[:2] == key[:2]]
        else:
            names = [n for n in self._shards if n[:2] == key[:2]]
        out = []
        for name in names:
            shard = self._shard(name)
            if shard is not None:
                out += [shard.postings(i) for i in shard.matching(key, prefix)]
        return out

    def body_counts(self, term: str) -> dict[int, int]:
        """page number -> occurrences in its search text of the words `term` matches (see the module)."""
        prefix = len(term) > SHORT
        namespace = "b" if len(segments(term)) == 1 and term == segments(term)[0] else "B"
        out: dict[int, int] = defaultdict(int)
        for pages, counts in self._lookup(namespace, term, prefix):
            assert counts is not None
            for page, count in zip(pages, counts):
                out[page] += count
        return out

    def holding(self, namespace: str, term: str, prefix: bool | None = None) -> set[int]:
        """The pages whose field (`i`, `a`, `t`, `h`), tag (`g`), name (`n`) or filter value (`f`) is `term`
        (fields: a word of it that `term` matches)."""
        if prefix is None:
            prefix = namespace in FIELDS and len(term) > SHORT
        found: set[int] = set()
        for pages, _ in self._lookup(namespace, term, prefix):
            found.update(pages)
        return found

    def counts(self, term: str) -> dict[str, int]:
        """page file -> occurrences of `term` (as body_counts, by path)."""
        return {self.record(n)["rel"]: c for n, c in self.body_counts(fold(term)).items() if c}

    # --- records ------------------------------------------------------------------------------
    def record(self, number: int) -> dict:
        chunk = number // RECORDS_PER_CHUNK
        if chunk not in self._records:
            self._records[chunk] = self._stored.records(chunk, self.pages) if self._stored else None
        records = self._records[chunk]
        if records is None:
            raise StaleIndex(f"record chunk {chunk} is unreadable")
        return records[number % RECORDS_PER_CHUNK]

    def entry(self, number: int) -> Entry:
        """The page as listings show it (its listing fields and headline; no frontmatter)."""
        record = self.record(number)
        head = {k: record[k] for k in ("id", "type", "title", "aliases", "tags", "architectures", "evidence_level",
                                       "evidence_by_arch", "status") if record.get(k) is not None}
        return Entry(record["rel"], record["mtime_ns"], record["size"], record["ctime_ns"], "", None, record["headline"],
                     None, [], head=head)

    def current(self, number: int) -> bool:
        """Whether the page file is as it was when the index was built (its stat unchanged)."""
        record = self.record(number)
        try:
            stat = os.stat(self.repo.root / record["rel"], follow_symlinks=False)
        except OSError:
            return False
        return (stat.st_mtime_ns, stat.st_size, stat.st_ctime_ns) == (record["mtime_ns"], record["size"], record["ctime_ns"])

    def misnamed_problems(self) -> list:
        from kernelwiki.model.problems import Problem

        return [Problem(name, 1, "-", "the file name is not UTF-8, so the page is left out of every lookup; "
                                      "rename it (page file names are UTF-8, like the ids they hold)")
                for name in self.misnamed]

    def idf(self, df: int) -> float:
        return math.log(1 + self.pages / max(df, 1))


class StaleIndex(LookupError):
    """The stored index cannot answer (damaged, or a page changed): build it again."""


# --- building --------------------------------------------------------------------------------------
def build(wiki: "Wiki") -> QueryIndex:
    """The index of the pages as the page index holds them (every page with an id, in id order); many
    pages are shared among the CPUs, each indexing a run of them."""
    from kernelwiki.storage.index import PARALLEL_MIN, _single_threaded

    entries = sorted(wiki.by_id().values(), key=lambda e: e.id or "")
    workers = min(os.cpu_count() or 1, 8) if len(entries) >= PARALLEL_MIN and _single_threaded() else 1
    runs = [(n * len(entries) // workers, (n + 1) * len(entries) // workers) for n in range(workers)]
    if workers > 1:
        import multiprocessing

        global _BUILDING
        _BUILDING = (wiki, entries)   # the forked workers inherit it
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                parts = pool.map(_index_run, runs)
        finally:
            _BUILDING = None
    else:
        parts = [_postings(wiki, entries, *runs[0])]
    postings: dict[str, tuple[array, array | None]] = {}
    records: list[dict] = []
    for part, part_records in parts:   # runs in page order: each key's pages stay sorted
        records += part_records
        for key, (numbers, times) in part.items():
            held = postings.get(key)
            if held is None:
                postings[key] = (numbers, times)
            else:
                held[0].extend(numbers)
                if held[1] is not None and times is not None:
                    held[1].extend(times)
    grouped: dict[str, list[str]] = defaultdict(list)
    for key in postings:
        grouped[shard_of(key)].append(key)
    shards = {}
    for name, keys in grouped.items():
        keys.sort()
        bounds, pages, counts = array("Q", [0]), array("I"), array("I") if name[0] in "bB" else None
        for key in keys:
            numbers, times = postings.pop(key)
            pages.extend(numbers)
            if counts is not None and times is not None:
                counts.extend(times)
            bounds.append(len(pages))
        shards[name] = Shard(keys, bounds, pages, counts)
    return QueryIndex(wiki.repo, wiki.vocab, len(entries), list(wiki.misnamed), shards, records)


_BUILDING: tuple | None = None


def _index_run(run: tuple[int, int]) -> tuple[dict, list[dict]]:
    assert _BUILDING is not None
    return _postings(*_BUILDING, *run)


def _postings(wiki: "Wiki", entries: list[Entry], start: int, end: int) -> tuple[dict, list[dict]]:
    """(key -> (page numbers, counts or None), records) of the pages numbered start to end."""
    postings: dict[str, tuple[array, array | None]] = {}
    keys_of: dict[str, list[str]] = {}   # token -> its body keys (pages share most of their words)
    records = []
    for number in range(start, end):
        entry = entries[number]
        counted: dict[str, int] = defaultdict(int)
        for token, count in Counter(TOKEN.findall(wiki.text(entry))).items():
            keys = keys_of.get(token)
            if keys is None:
                keys = _token_keys(token)
                if len(keys_of) < 1_000_000:
                    keys_of[token] = keys
            for key in keys:
                counted[key] += count
        for key, count in counted.items():
            pair = postings.get(key)
            if pair is None:
                pair = postings[key] = (array("I"), array("I"))
            pair[0].append(number)
            pair[1].append(count)
        for key in _page_keys(wiki, entry):
            pair = postings.get(key)
            if pair is None:
                pair = postings[key] = (array("I"), None)
            pair[0].append(number)
        entry.text = None   # built from; not kept (a wiki of 100,000 pages holds gigabytes of it)
        head = entry.head or {}
        records.append({"rel": entry.rel, **{k: head.get(k) for k in RECORD_KEYS[1:10]}, "headline": entry.headline,
                        "size": entry.size, "mtime_ns": entry.mtime_ns, "ctime_ns": entry.ctime_ns,
                        "code": code_bytes(wiki, entry)})
    return postings, records


def code_bytes(wiki: "Wiki", entry: Entry) -> int:
    """What `get --include-code` adds to reading the page: the bytes of its artifact and probe files."""
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
    return code


def word_keys(word: str) -> tuple[list[str], list[str]]:
    """(segments, the word from each segment on) of a word: `footgun-low-entropy-inputs` is found by
    `low`, `entropy` and by `low-entropy`; a word without punctuation inside is one segment."""
    parts = segments(word)
    if len(parts) < 2:
        return parts, []
    tails, at = [word], 0
    for part in parts[:-1]:
        at = word.index(part, at) + len(part)
        while word[at] in EDGES:
            at += 1
        tails.append(word[at:])
    return parts, tails


def _token_keys(token: str) -> list[str]:
    """The body keys of one run of TOKEN characters."""
    word = token.strip(EDGES)
    if not word:
        return []
    parts, tails = word_keys(word)
    return ["b" + part for part in parts] + ["B" + tail for tail in tails]


def _page_keys(wiki: "Wiki", entry: Entry) -> set[str]:
    head = entry.head or {}
    keys: set[str] = set()
    page_id = fold(head.get("id", ""))
    fields = {"i": [page_id], "a": [fold(a) for a in head.get("aliases", [])], "t": [fold(head.get("title", ""))],
              "h": [fold(entry.headline)]}
    for namespace, texts in fields.items():
        for text in texts:
            for word in words(text):
                parts, tails = word_keys(word)
                keys.update(namespace + key for key in parts + tails)
    keys.update("g" + fold(v) for v in head.get("tags", []) + head.get("architectures", []))
    names = [page_id, page_id.split("-", 1)[-1], *fields["a"], fields["t"][0]]
    keys.update("n" + name for name in names if name)
    archs = [wiki.vocab.canonical_arch(a) for a in head.get("architectures", [])]
    by_arch = head.get("evidence_by_arch") or {}
    filters = [f"type={head.get('type')}", f"status={head.get('status')}", f"evidence={head.get('evidence_level')}",
               *(f"tag={t}" for t in head.get("tags", [])), *(f"arch={a}" for a in archs),
               *(f"ev@{a}={by_arch[a]}" for a in archs if a in by_arch)]
    if by_arch:
        filters.append("by-arch")
    keys.update("f" + value for value in filters)
    return keys


# --- on disk ---------------------------------------------------------------------------------------
class _Stored:
    """The data file of a manifest: shards and record chunks read at their offsets, each checked."""

    def __init__(self, fd: int, manifest: dict):
        self.fd, self.manifest = fd, manifest
        self.names = list(manifest["shards"])

    def __del__(self) -> None:   # a long-running MCP server opens one per query
        with suppress(OSError):
            os.close(self.fd)

    def _read(self, where: Any) -> Any:
        if not (type(where) is list and len(where) == 2 and all(type(v) is int and v >= 0 for v in where)
                and where[0] + where[1] <= self.manifest["size"]):
            return None
        try:
            with cache.collector_paused():
                return json.loads(os.pread(self.fd, where[1], where[0]))
        except (OSError, ValueError, RecursionError):
            return None

    def shard(self, name: str, pages: int) -> Shard | None:
        where = self.manifest["shards"].get(name)
        if where is None:
            return None
        shard = Shard.from_plain(self._read(where), pages, name)
        if shard is None:
            raise StaleIndex(f"shard {name!r} is damaged")
        return shard

    def records(self, chunk: int, pages: int) -> list[dict] | None:
        chunks = self.manifest["records"]
        if not 0 <= chunk < len(chunks):
            return None
        data = self._read(chunks[chunk])
        expected = min(RECORDS_PER_CHUNK, pages - chunk * RECORDS_PER_CHUNK)
        if type(data) is not list or len(data) != expected or not all(_is_record(r) for r in data):
            return None
        return data


def _is_record(record: Any) -> bool:
    if type(record) is not dict or set(record) != set(RECORD_KEYS):
        return False
    ints = ("size", "mtime_ns", "ctime_ns", "code")
    if not all(type(record[k]) is int for k in ints) or type(record["rel"]) is not str \
            or type(record["headline"]) is not str or not _page_path(record["rel"]):
        return False
    try:
        for key in ("aliases", "tags", "architectures"):
            if record[key] is not None:
                "".join(record[key])
        by_arch = record["evidence_by_arch"]
        if by_arch is not None:
            "".join(by_arch)
            "".join(by_arch.values())
        for key in ("id", "type", "title", "evidence_level", "status"):
            if record[key] is not None and type(record[key]) is not str:
                return False
    except (TypeError, AttributeError):
        return False
    return record["id"] is not None


def _page_path(rel: str) -> bool:
    """Whether `rel` can be a page file's path below the checkout (wiki/.../NAME.md): a stored record
    naming another file (/etc/passwd, wiki/../x) would have a query stat it and show its path."""
    parts = rel.split("/")
    return parts[0] == "wiki" and len(parts) > 1 and rel.endswith(".md") and "\0" not in rel \
        and not any(part in ("", ".", "..") for part in parts)


MIN_RECORD_BYTES = 200
"""No page's record is shorter in the data file (every key, empty values: 209 bytes): a manifest
cannot claim more pages than its data file could hold, so a query allocates for no page that is not there."""


def stamps(root) -> dict[str, list[int]]:
    """(mtime, ctime) of wiki/ and every directory under it, by the hex of the path's bytes below the
    checkout (any name, UTF-8 or not): what a query checks before it trusts the index."""
    out: dict[str, list[int]] = {}
    prefix = len(str(root)) + 1
    stack = [os.path.join(str(root), "wiki")]
    while stack:
        path = stack.pop()
        try:
            stat = os.stat(path, follow_symlinks=False)
            out[os.fsencode(path[prefix:]).hex()] = [stat.st_mtime_ns, stat.st_ctime_ns]
            with os.scandir(path) as it:
                stack += [item.path for item in it if not item.name.endswith(".md") and item.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    return out


def _unchanged(root, recorded: Any) -> bool:
    if type(recorded) is not dict or not recorded:
        return False
    for name, stamp in recorded.items():
        try:
            rel = bytes.fromhex(name)
        except (TypeError, ValueError):
            return False
        if rel.split(b"/")[0] != b"wiki" or b".." in rel.split(b"/") or b"\0" in rel:
            return False
        try:
            stat = os.stat(os.path.join(os.fsencode(root), rel), follow_symlinks=False)
        except (OSError, ValueError):
            return False
        if [stat.st_mtime_ns, stat.st_ctime_ns] != stamp:
            return False
    return True


def save(index: QueryIndex, key: str, directories: dict[str, list[int]]) -> None:
    """Write the data file, then the manifest naming it (a reader never pairs one with the other's
    predecessor: the manifest names the data file's token). A checkout that cannot be written goes without."""
    repo = index.repo
    if repo.cache.is_symlink():
        return
    token = secrets.token_hex(16)
    parts = [json.dumps(token).encode() + b"\n"]
    offset = len(parts[0])
    table: dict[str, list[int]] = {}
    for name, shard in sorted(index._shards.items()):
        if shard is None:
            continue
        blob = json.dumps(shard.to_plain(), ensure_ascii=False, separators=(",", ":")).encode()
        table[name], offset = [offset, len(blob)], offset + len(blob)
        parts.append(blob)
    chunks = []
    for chunk in sorted(index._records):
        blob = json.dumps(index._records[chunk], ensure_ascii=False, separators=(",", ":")).encode()
        chunks.append([offset, len(blob)])
        offset += len(blob)
        parts.append(blob)
    try:
        repo.cache.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=repo.cache, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as out:
            out.writelines(parts)
        os.replace(tmp, repo.cache / DATA)
    except OSError:
        with suppress(OSError):
            os.unlink(tmp)
        return
    cache.write(repo, cache.QUERY, key, {"token": token, "size": offset, "pages": index.pages, "shards": table,
                                         "records": chunks, "stamps": directories, "misnamed": index.misnamed})


def _stored(repo: Repo, key: str) -> tuple[int, dict] | None:
    """(open data file, manifest) when both are there, of the right shapes, made for each other and for
    the directories as they are now."""
    manifest = cache.read(repo, cache.QUERY, key)
    if not (type(manifest) is dict and type(manifest.get("token")) is str and type(manifest.get("size")) is int
            and 0 <= manifest["size"] <= cache.MAX_BYTES
            and type(manifest.get("pages")) is int and manifest["pages"] >= 0 and type(manifest.get("shards")) is dict
            and type(manifest.get("records")) is list and type(manifest.get("misnamed")) is list
            and len(manifest["records"]) == -(-manifest["pages"] // RECORDS_PER_CHUNK)
            and all(type(n) is str and len(n) >= 2 for n in manifest["shards"])
            and all(type(n) is str for n in manifest["misnamed"])
            and _chunks_fit(manifest["records"], manifest["pages"], manifest["size"])):
        return None
    if not _unchanged(repo.root, manifest.get("stamps")):
        return None
    try:
        fd = os.open(repo.cache / DATA, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        import stat as stat_module

        info = os.fstat(fd)
        first = json.dumps(manifest["token"]).encode() + b"\n"
        if stat_module.S_ISREG(info.st_mode) and info.st_size == manifest["size"] \
                and os.pread(fd, len(first), 0) == first:
            return fd, manifest
    except OSError:
        pass
    os.close(fd)
    return None


def _chunks_fit(chunks: list, pages: int, size: int) -> bool:
    """Whether each record chunk is an [offset, length] inside the data file, long enough for the
    records it must hold (MIN_RECORD_BYTES each)."""
    for number, where in enumerate(chunks):
        if not (type(where) is list and len(where) == 2 and all(type(v) is int and v >= 0 for v in where)
                and where[0] + where[1] <= size
                and where[1] >= MIN_RECORD_BYTES * min(RECORDS_PER_CHUNK, pages - number * RECORDS_PER_CHUNK)):
            return False
    return True


def open_index(repo: Repo) -> QueryIndex:
    """The index as the pages are: the stored one when its directories are unchanged, else built from
    the page index (and stored for the next query)."""
    from kernelwiki.storage.cache import cache_key

    key = cache_key(repo)
    found = _stored(repo, key)
    if found is not None:
        fd, manifest = found
        return QueryIndex(repo, Vocabulary.load(repo.schemas), manifest["pages"], manifest["misnamed"],
                          stored=_Stored(fd, manifest))
    return rebuild(repo)


def rebuild(repo: Repo) -> QueryIndex:
    from kernelwiki.storage.index import Wiki

    directories = stamps(repo.root)   # before reading: a change while building shows at the next query
    wiki = Wiki.load(repo)
    index = build(wiki)
    if wiki.use_cache:
        save(index, wiki.key, directories)
    return index


def for_wiki(wiki: "Wiki") -> QueryIndex:
    """The index of a loaded page index (kept on it while its pages are unchanged)."""
    signature = tuple((rel, e.sha256) for rel, e in sorted(wiki.entries.items()))
    held = wiki.terms
    if held is not None and held[0] == signature:
        return held[1]
    wiki.terms = (signature, build(wiki))
    return wiki.terms[1]
