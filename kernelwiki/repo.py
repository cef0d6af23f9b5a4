"""Where things are: the repository root and the directories DESIGN.md section 1 names."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

MARKER = Path("schemas") / "vocabulary.yaml"


class OutsideRepo(ValueError):
    """A user-supplied path that resolves outside the repository."""


class NotARepo(ValueError):
    """--root or $KERNELWIKI_ROOT names a directory that is not a kernelwiki checkout."""


class UnsafeFile(OSError):
    """A file the tools refuse to read or write: a symbolic link, not a regular file, too large,
    or unreadable. str() is the reason, in words."""


@dataclass(frozen=True)
class Repo:
    root: Path

    @classmethod
    def find(cls, start: Path | None = None) -> "Repo":
        """$KERNELWIKI_ROOT, else the nearest parent of `start` (cwd) holding schemas/vocabulary.yaml,
        else the repository this package was installed from (the embedded wiki)."""
        env = os.environ.get("KERNELWIKI_ROOT")
        if env:
            return cls.at(env, "$KERNELWIKI_ROOT")
        here = (start or Path.cwd()).resolve()
        for candidate in (here, *here.parents):
            if (candidate / MARKER).is_file() and (candidate / "wiki").is_dir():
                return cls(candidate)
        return cls(Path(__file__).resolve().parents[1])

    @classmethod
    def at(cls, path: str | Path, given_by: str = "--root") -> "Repo":
        """The checkout at `path`; NotARepo unless it holds schemas/vocabulary.yaml and wiki/."""
        root = Path(path).expanduser().resolve()
        if not (root / MARKER).is_file() or not (root / "wiki").is_dir() or (root / "wiki").is_symlink():
            raise NotARepo(f"{given_by} {path}: not a kernelwiki checkout (no {MARKER.as_posix()} and wiki/ directory)")
        return cls(root)

    @property
    def wiki(self) -> Path:
        return self.root / "wiki"

    @property
    def schemas(self) -> Path:
        return self.root / "schemas"

    @property
    def probes(self) -> Path:
        return self.root / "probes"

    @property
    def evidence(self) -> Path:
        return self.root / "artifacts" / "evidence"

    @property
    def cache(self) -> Path:
        return self.root / ".kernelwiki-cache"

    def rel(self, path: Path) -> str:
        """Repository-relative path with forward slashes (absolute path if outside)."""
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def inside(self, user_path: str | Path) -> Path:
        """Resolve a path given relative to the root (or absolute); refuse one that leaves the repo,
        symbolic links included."""
        path = Path(user_path)
        if not path.is_absolute():
            path = self.root / path
        resolved = path.resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise OutsideRepo(f"{user_path}: path leaves the repository ({self.root}); refused")
        return resolved


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
