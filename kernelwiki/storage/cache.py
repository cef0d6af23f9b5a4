"""The on-disk cache in .kernelwiki-cache/ (ignored by git): what the index and the word index keep
between runs.

Each file is one JSON document, `{"format": "kernelwiki-cache", "version": 1, "key": KEY,
"data": ...}`, written atomically. JSON, not pickle: loading a cache file can only build plain
values, never run code, so a planted or damaged file is harmless. It is still untrusted input: a
file that is not a regular file, too large, not JSON, of another format, version or key reads as
no cache at all, and the reader checks the shape of `data` before using any of it (an entry of
the wrong shape means "rebuild", never a traceback). The key changes with the tool version, its
code and the schemas, so a cache is never used by code or schemas it was not built for.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator

from kernelwiki import __version__
from kernelwiki.model.files import UnsafeFile, read_regular
from kernelwiki.model.schema import fingerprint
from kernelwiki.storage.repo import Repo

FORMAT = "kernelwiki-cache"
VERSION = 1
"""Raised whenever the layout of `data` in any cache file changes."""
MAX_BYTES = 1 << 30
"""A cache file larger than this is not read (20,000 pages make about 60 MB)."""

INDEX = "index.json"     # per page: stat, hash, listing fields, problems, ranking; and the vocabulary
META = "meta.json"       # the full frontmatter of each page, read only when asked for
NAMES = "names.json"     # alias -> page file, so that `get ALIAS` need not load the index
QUERY = "query.json"     # the query index's manifest (kernelwiki.storage.termindex; its data is query.dat)


def cache_key(repo: Repo) -> str:
    """Changes with the tool version, its code, the schemas and the vocabulary."""
    package = Path(__file__).resolve().parents[1]
    code = sorted(f"{p.relative_to(package)}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in package.rglob("*.py"))
    digest = hashlib.sha256("\n".join(code).encode()).hexdigest()[:12]
    return f"{__version__}:{digest}:{fingerprint(repo.schemas)}"


def read(repo: Repo, name: str, key: str) -> Any:
    """The `data` of cache file `name` when it is a cache document of this format, version and
    key; None otherwise (missing, a link, a FIFO, unreadable, not JSON, another key..., or the
    cache folder itself a link: it could point anywhere, and nothing is read through it)."""
    if repo.cache.is_symlink():
        return None
    try:
        raw = read_regular(repo.cache / name, MAX_BYTES)
        with collector_paused():
            document = json.loads(raw)
    except (UnsafeFile, ValueError, RecursionError, MemoryError):   # ValueError: not JSON, not UTF-8
        return None
    if not (isinstance(document, dict) and document.get("format") == FORMAT
            and document.get("version") == VERSION and document.get("key") == key):
        return None
    return document.get("data")


def write(repo: Repo, name: str, key: str, data: Any) -> bool:
    """Write cache file `name` atomically (a reader never sees half a file); False where the cache
    cannot be written (a read-only checkout, a cache folder that is a link or a file), which
    simply goes without."""
    if repo.cache.is_symlink():   # it could point anywhere; write nothing through it
        return False
    try:
        repo.cache.mkdir(exist_ok=True)
        text = json.dumps({"format": FORMAT, "version": VERSION, "key": key, "data": data},
                          ensure_ascii=False, separators=(",", ":"))
        fd, tmp = tempfile.mkstemp(dir=repo.cache, suffix=".tmp")
    except (OSError, TypeError, ValueError, RecursionError):
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, repo.cache / name)
    except BaseException as err:   # a full disk, a signal: no half-written file stays behind
        with suppress(OSError):
            os.unlink(tmp)
        if not isinstance(err, OSError):
            raise
        return False
    return True


def forget(repo: Repo, name: str) -> None:
    """Remove cache file `name` (what was built from pages that have changed since); never through a link."""
    if not repo.cache.is_symlink():
        with suppress(OSError):
            os.unlink(repo.cache / name)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Decoding 20,000 entries allocates millions of objects and triggers the cyclic garbage
    collector over and over (it then takes most of the time); they hold no cycles worth finding."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
