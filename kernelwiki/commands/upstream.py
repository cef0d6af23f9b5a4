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
import urllib.error
import urllib.request
from pathlib import Path

from kernelwiki.commands import mirrors

DEFAULT_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
MAX_BYTES = 8 * 1024 * 1024
TIMEOUT_S = 30.0
_REPO = re.compile(r"(?:https?://github\.com/)?([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?")
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
    parts = Path(path).parts
    if not parts or Path(path).is_absolute() or ".." in parts or "\\" in path:
        raise UpstreamError(f"{where}: cannot fetch: the path must stay inside the repository")
    local = _from_mirror(name, str(commit), path, sha256, where)
    if local is not None:
        return local
    template = os.environ.get("KERNELWIKI_UPSTREAM_URL") or DEFAULT_URL
    url = template.format(repo=name, commit=commit, path=path)
    cached = cache_dir(repo_root) / name / commit / path
    if cached.is_file():
        data = cached.read_bytes()
        if hashlib.sha256(data).hexdigest() == sha256:
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


def _download(url: str, where: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            data = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as err:
        raise UpstreamError(f"{where}: download failed: HTTP {err.code} {err.reason} from {url}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise UpstreamError(f"{where}: download failed: {reason} ({url})") from None
    if len(data) > MAX_BYTES:
        raise UpstreamError(f"{where}: download refused: larger than {MAX_BYTES} bytes ({url})")
    return data


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
