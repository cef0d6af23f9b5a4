"""Safe file access, the one way every tool reads and writes a file it was not handed by the user:
never through a symbolic link, never blocking on a FIFO, never more than a stated size, and writes
that replace a file atomically."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path, PurePosixPath


class UnsafeFile(OSError):
    """A file the tools refuse to read or write: a symbolic link, not a regular file, too large,
    or unreadable. str() is the reason, in words."""


def stays_below(path: object) -> bool:
    """Whether `path` (text from an untrusted file) names something below the directory it is
    relative to: not empty, not absolute, no `..` part, no backslash or NUL. The one test for every
    path a page, PROVENANCE.yaml or probe.yaml gives relative to a package, repository or folder."""
    if not isinstance(path, str) or not path or "\\" in path or "\0" in path:
        return False
    pure = PurePosixPath(path)
    return not pure.is_absolute() and ".." not in pure.parts and pure.parts not in ((), (".",))


def sha256_file(path: Path) -> str:
    """The SHA-256 of a regular file's bytes (read as read_regular reads: UnsafeFile if it cannot be)."""
    return hashlib.sha256(read_regular(path)).hexdigest()


def read_regular(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of a regular file, never through a symbolic link (O_NOFOLLOW: no window between a
    check and the read), never blocking on a FIFO; UnsafeFile says why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if os.path.islink(path):
            raise UnsafeFile("is a symbolic link; the tools read only regular files inside the repository") from None
        raise UnsafeFile(f"cannot be read: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile("is not a regular file")
        if limit is not None and info.st_size > limit:
            raise UnsafeFile(f"is {info.st_size:,} bytes; the limit is {limit:,}")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    except UnsafeFile:
        raise
    except OSError as err:
        raise UnsafeFile(f"cannot be read: {err.strerror or err}") from None
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes) -> None:
    """Write atomically by renaming a new file over `path`: a symbolic link at `path` is replaced,
    never written through, and the file keeps its permission bits."""
    try:
        mode = stat.S_IMODE(os.lstat(path).st_mode) if not os.path.islink(path) else None
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), mode if mode is not None else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
