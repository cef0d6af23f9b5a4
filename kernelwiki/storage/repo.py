"""Where things are: the repository root and the directories DESIGN.md section 1 names."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kernelwiki.model.problems import NotARepo

MARKER = Path("schemas") / "vocabulary.yaml"


class OutsideRepo(ValueError):
    """A user-supplied path that resolves outside the repository."""


TRUSTED_LAYOUT = ("wiki", "schemas", MARKER.as_posix(), "probes", "artifacts", "artifacts/evidence", "artifacts/kernels")
"""Directories (and the marker) that must be the checkout's own: a symbolic link there would make
every command read schemas, pages or probe code from anywhere on the machine."""


def _refuse_links(root: Path, named: str) -> None:
    for part in TRUSTED_LAYOUT:
        if (root / part).is_symlink():
            raise NotARepo(f"{named}: {part} is a symbolic link; a checkout's own directories must not point "
                           "elsewhere (the tools read schemas, pages and probe code only from inside it)")


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
                _refuse_links(candidate, str(candidate))
                return cls(candidate)
        return cls(Path(__file__).resolve().parents[2])

    @classmethod
    def at(cls, path: str | Path, given_by: str = "--root") -> "Repo":
        """The checkout at `path`; NotARepo unless it holds schemas/vocabulary.yaml and wiki/."""
        root = Path(path).expanduser().resolve()
        if not (root / MARKER).is_file() or not (root / "wiki").is_dir() or (root / "wiki").is_symlink():
            raise NotARepo(f"{given_by} {path}: not a kernelwiki checkout (no {MARKER.as_posix()} and wiki/ directory)")
        _refuse_links(root, f"{given_by} {path}")
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
