"""Upstream files pinned by repository commit, fetched on demand and checked against their SHA-256.

`get --include-code --fetch-upstream` (and the MCP tool's `fetch_upstream`) use this for the files a
PROVENANCE.yaml pins but the machine has not installed. Files are read from a local git mirror when
one holds the commit ($KERNELWIKI_UPSTREAM_MIRROR, else $KERNELWIKI_MIRRORS: directories of
`<owner>+<name>/repo` git directories; no network), else downloaded from $KERNELWIKI_UPSTREAM_URL
(a template with {repo} = owner/name, {commit} and {path}) and kept in the user's cache directory
(never in the repository). Every read is checked against the pinned SHA-256, so a file whose bytes
differ from the pin is never returned.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from kernelwiki.commands import mirrors
from kernelwiki.model.files import UnsafeFile, read_regular, stays_below
from kernelwiki.model.terminal import printable

DEFAULT_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
MAX_BYTES = 8 * 1024 * 1024
TIMEOUT_S = 30.0
"""Per read: how long the server may stay silent."""
DEADLINE_S = 120.0
"""The whole download, headers to last byte."""
# owner: letters, digits and inner hyphens (GitHub's rule); name: no '.' or '..', which would climb
# out of the cache directory the name becomes part of.
_REPO = re.compile(r"(?:https?://github\.com/)?([A-Za-z0-9][A-Za-z0-9-]*/(?!\.\.?(?:\.git)?/?$)[A-Za-z0-9_.-]+?)(?:\.git)?/?")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


class UpstreamError(Exception):
    """A pinned file that could not be fetched or did not match its hash; the message names it."""


def repo_name(repo: str) -> str | None:
    """'https://github.com/deepseek-ai/DeepGEMM' or 'deepseek-ai/DeepGEMM' -> 'deepseek-ai/DeepGEMM'."""
    match = _REPO.fullmatch(repo.strip())
    return match.group(1) if match else None


def cache_dir(repo_root: Path) -> Path:
    """$XDG_CACHE_HOME/kernelwiki/upstream or ~/.cache/kernelwiki/upstream; refused inside the repository,
    since upstream code must never land where it could be committed."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or "")
    if not base.is_absolute():  # the XDG spec: a relative value is invalid and ignored
        base = Path.home() / ".cache"
    directory = (base / "kernelwiki" / "upstream").resolve()
    root = repo_root.resolve()
    if directory == root or root in directory.parents:
        raise UpstreamError(f"the upstream cache {directory} is inside the repository {root}; "
                            "set XDG_CACHE_HOME to a directory outside it")
    return directory


MIRROR_VARIABLES = ("KERNELWIKI_UPSTREAM_MIRROR", "KERNELWIKI_MIRRORS")


def fetch(repo: str, commit: str, path: str, sha256: str, repo_root: Path) -> tuple[str, str, Path | None]:
    """The text of `path` at `repo@commit` whose SHA-256 is `sha256`: from a local git mirror, else
    from the cache when the cached copy still matches, else downloaded. Returns (text, where it was
    read: the mirror's `git-dir@commit:path` or the URL, the cached copy or None); raises UpstreamError."""
    name = repo_name(repo)
    where = f"{path} ({repo}@{commit})"
    if not name:
        raise UpstreamError(f"{where}: cannot fetch: the repository is not owner/name or a GitHub URL")
    if not _COMMIT.fullmatch(str(commit)):
        raise UpstreamError(f"{where}: cannot fetch: the commit is not a hexadecimal git commit")
    if not stays_below(path):
        raise UpstreamError(f"{where}: cannot fetch: the path must stay inside the repository")
    local = _from_mirror(name, str(commit), path, sha256, where)
    if local is not None:
        return local
    url = _url(os.environ.get("KERNELWIKI_UPSTREAM_URL") or DEFAULT_URL, name, commit, path, where)
    cached = cache_dir(repo_root) / name / commit / path
    try:  # never through a link, never blocking on a FIFO; anything else is downloaded again
        data = read_regular(cached, MAX_BYTES)
    except UnsafeFile:
        data = None
    if data is not None and hashlib.sha256(data).hexdigest() == sha256:
        return _text(data, where), url, cached
    data = _download(url, where)
    received = hashlib.sha256(data).hexdigest()
    if received != sha256:
        raise UpstreamError(f"{where}: SHA-256 mismatch: expected {sha256}, received {received} from {url}; "
                            "not printed")
    text = _text(data, where)
    _store(cached, data)
    return text, url, cached


def _from_mirror(name: str, commit: str, path: str, sha256: str, where: str) -> tuple[str, str, None] | None:
    """The file from the first mirror holding the commit; None when no mirror has it (then it is downloaded)."""
    found = mirrors.directories(*MIRROR_VARIABLES)
    git_dir = mirrors.git_dir(found, name, commit) if found else None
    if git_dir is None:
        return None
    source = f"{git_dir}@{commit}:{path}"
    data = mirrors.show(git_dir, commit, path)
    if data is None:
        raise UpstreamError(f"{where}: the mirror {git_dir} has commit {commit} but no {path}; not printed")
    received = hashlib.sha256(data).hexdigest()
    if received != sha256:
        raise UpstreamError(f"{where}: SHA-256 mismatch: expected {sha256}, the mirror {source} has {received}; "
                            "not printed")
    return _text(data, where), source, None
def _url(template: str, name: str, commit: str, path: str, where: str) -> str:
    """The template with {repo}, {commit} and {path} filled in. Plain replacement, not str.format:
    the template comes from the environment, and `{oops}`, a lone `{` or `{repo.__class__}` must not
    raise or reach into objects."""
    url = template.replace("{repo}", name).replace("{commit}", commit).replace("{path}", path)
    if not re.match(r"(?:https?|file)://", url):
        raise UpstreamError(f"{where}: $KERNELWIKI_UPSTREAM_URL {printable(template)!r} is not an http(s) or file URL "
                            "template with {repo}, {commit} and {path}")
    return url


def _download(url: str, where: str) -> bytes:
    """The body at `url`, within DEADLINE_S in all: a per-read socket timeout alone never trips on a
    server that sends a byte every few seconds. The download runs in a daemon thread that stops
    reading once the deadline has passed."""
    outcome: dict = {}
    deadline = time.monotonic() + DEADLINE_S

    def work() -> None:
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                chunks, size = [], 0
                while size <= MAX_BYTES and time.monotonic() < deadline:
                    chunk = response.read1(1 << 16)
                    if not chunk:
                        outcome["data"] = b"".join(chunks)
                        return
                    chunks.append(chunk)
                    size += len(chunk)
                outcome["error"] = (f"download refused: larger than {MAX_BYTES} bytes" if size > MAX_BYTES
                                    else f"download failed: not complete within {DEADLINE_S:.0f} s")
        except urllib.error.HTTPError as err:  # the server's words: one line, escapes shown, not obeyed
            outcome["error"] = f"download failed: HTTP {err.code} {_words(err.reason)}"
        except (urllib.error.URLError, OSError, ValueError) as err:
            outcome["error"] = f"download failed: {_words(getattr(err, 'reason', err))}"

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0) + 1)
    if "data" in outcome:
        return outcome["data"]
    raise UpstreamError(f"{where}: {outcome.get('error') or f'download failed: not complete within {DEADLINE_S:.0f} s'} "
                        f"({printable(url)})")


def _words(reason: object) -> str:
    """An error's text as one printable line (a redirect loop's message spans three lines; a
    server's reason phrase may carry escape sequences)."""
    return printable(" ".join(str(reason).split()))[:300]


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UpstreamError(f"{where}: matches its pin but is not UTF-8 text; not printed") from None


def _store(path: Path, data: bytes) -> None:
    """Atomic write; a cache that cannot be written only costs a download next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
