"""Local git mirrors of upstream repositories: `<dir>/<owner>+<name>/repo`, a (bare) git directory
read with `git --git-dir DIR show COMMIT:path`, never over the network.

`audit --sources` reads cited files from them and `get --fetch-upstream` reads pinned files from
them before it would download anything.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_TIMEOUT_S = 30.0


def directories(*variables: str) -> list[Path]:
    """The mirror directories named by the first of these environment variables that is set
    (several directories separated by the path separator)."""
    for variable in variables:
        value = os.environ.get(variable)
        if value:
            return [Path(p) for p in value.split(os.pathsep) if p]
    return []


def git_dir(mirrors: list[Path], repo: str, commit: str) -> Path | None:
    """The mirror of owner/name that holds `commit`, or None."""
    if "/" not in repo or repo.count("/") != 1 or ".." in repo:
        return None
    for directory in mirrors:
        candidate = directory / repo.replace("/", "+") / "repo"
        if candidate.is_dir() and _git(candidate, "cat-file", "-e", f"{commit}^{{commit}}") is not None:
            return candidate
    return None


def show(git_directory: Path, commit: str, path: str) -> bytes | None:
    """The bytes of `path` at `commit`, or None when the commit has no such file."""
    return _git(git_directory, "show", f"{commit}:{path}")


def _git(git_directory: Path, *args: str) -> bytes | None:
    try:
        done = subprocess.run(["git", "--git-dir", str(git_directory), *args], capture_output=True,
                              timeout=GIT_TIMEOUT_S, env=dict(os.environ, GIT_TERMINAL_PROMPT="0"))
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
