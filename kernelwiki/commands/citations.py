"""`kernelwiki audit --sources`: check each cited quote against the pinned upstream text.

A `spec` or `source-reported` claim carries `locator` (where the value stands) and `quote` (the
verbatim words). Its source page's `origin` says where the text lives:

    origin: {package: flash-attn-4, version: 4.0.0b36}     # installed distribution or a wheel
    origin: {repo: deepseek-ai/DeepGEMM, commit: <40 hex>}  # a local git mirror
    origin: {file: notes-README.txt}                        # a file the project was given

The file is the locator up to its first ':' or ','; a line number after it (`path:N`, `path:N-M`)
says where the quote stands, and it is looked for there only (lines N..M, or N and the WRAP lines
after it), not anywhere in the file. A package is read from the installed
distribution when its version is the pinned one, else from `<name>-<version>-*.whl` in a wheel
directory; a repository from `<dir>/<owner>+<name>/repo` (a bare git directory, read with
`git show COMMIT:path`) in a mirror directory; a given file from a references directory (its
locator need not name the file). A source without an origin (a paper, a web page)
cannot be checked here; its quotes are counted, not checked.

Quotes and files are compared after collapsing whitespace and dropping Markdown emphasis, link
targets and code marks, so a quote of a README table row or a bold phrase reads as written.
"""

from __future__ import annotations

import importlib.metadata
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kernelwiki.commands import mirrors

from kernelwiki.model.pages import read_page
from kernelwiki.model.files import stays_below
from kernelwiki.model.problems import Problem
from kernelwiki.model.schema import check as schema_check
from kernelwiki.storage.repo import Repo

CITED_LEVELS = ("spec", "source-reported")
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


@dataclass
class Citations:
    problems: list[Problem] = field(default_factory=list)
    claims: int = 0
    """spec and source-reported claims."""
    quoted: int = 0
    checkable: int = 0
    """Quotes whose pinned file could be read on this machine."""
    matched: int = 0


def normalize(text: str) -> str:
    """Whitespace collapsed; Markdown links reduced to their text; `*`, `_`-emphasis and backticks dropped."""
    text = LINK.sub(r"\1", text)
    text = re.sub(r"[*`]", "", text)
    return " ".join(text.split())


class Texts:
    """Reads a file of a pinned package or repository; None when it is not on this machine."""

    def __init__(self, wheels: list[Path], mirrors: list[Path], references: list[Path]):
        self.wheels, self.mirrors, self.references = wheels, mirrors, references
        self._cache: dict[tuple, str | None] = {}

    def read(self, origin: dict, path: str) -> str | None:
        key = (tuple(sorted(origin.items())), path)
        if key not in self._cache:
            if "package" in origin:
                self._cache[key] = self._package(str(origin["package"]), str(origin["version"]), path)
            elif "file" in origin:
                found = self._reference(str(origin["file"]))
                self._cache[key] = found.read_text(encoding="utf-8", errors="replace") if found else None
            else:
                self._cache[key] = self._repo(str(origin["repo"]), str(origin["commit"]), path)
        return self._cache[key]

    def available(self, origin: dict) -> bool:
        """Whether the pinned package or commit itself is here (so a missing file is an error)."""
        if "package" in origin:
            return self._installed(str(origin["package"]), str(origin["version"])) is not None or \
                self._wheel(str(origin["package"]), str(origin["version"])) is not None
        if "file" in origin:
            return self._reference(str(origin["file"])) is not None
        return self._git_dir(str(origin["repo"]), str(origin["commit"])) is not None

    def _reference(self, name: str) -> Path | None:
        if not stays_below(name):
            return None
        return next((d / name for d in self.references if (d / name).is_file()), None)

    def _installed(self, name: str, version: str):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return None
        return dist if dist.version == version else None

    def _wheel(self, name: str, version: str) -> Path | None:
        stem = re.sub(r"[-_.]+", "_", name).lower()
        for directory in self.wheels:
            for wheel in sorted(directory.glob("*.whl")):
                parts = wheel.name.split("-")
                if len(parts) > 2 and re.sub(r"[-_.]+", "_", parts[0]).lower() == stem and parts[1] == version:
                    return wheel
        return None

    def _package(self, name: str, version: str, path: str) -> str | None:
        dist = self._installed(name, version)
        target = distribution_file(dist, path) if dist is not None else None
        if target is not None:
            return target.read_text(encoding="utf-8", errors="replace")
        wheel = self._wheel(name, version)
        if wheel is not None:
            with zipfile.ZipFile(wheel) as archive:
                if path in archive.namelist():
                    return archive.read(path).decode("utf-8", errors="replace")
        return None

    def _git_dir(self, repo: str, commit: str) -> Path | None:
        return mirrors.git_dir(self.mirrors, repo, commit)

    def _repo(self, repo: str, commit: str, path: str) -> str | None:
        git_dir = self._git_dir(repo, commit)
        shown = mirrors.show(git_dir, commit, path) if git_dir is not None else None
        return shown.decode("utf-8", errors="replace") if shown is not None else None


EXACT_PIN = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)\s*(?:;.*)?")


def distribution_file(dist: importlib.metadata.Distribution, path: str) -> Path | None:
    """The installed file `path` of the distribution `dist`: one named by the RECORD (files list) of
    `dist` or of a part it pins exactly (`nvidia-cutlass-dsl` requires `...-libs-base==4.8.1`, which
    holds the code), never another distribution's file that merely sits in the same site-packages;
    None otherwise (and for a distribution installed without a files list)."""
    for part in _pinned_parts(dist):
        if path in {file.as_posix() for file in part.files or []}:
            target = Path(str(part.locate_file(path)))
            base = Path(str(part.locate_file(""))).resolve()
            return target if target.is_file() and base in target.resolve().parents else None
    return None


def _pinned_parts(dist: importlib.metadata.Distribution, limit: int = 16) -> list[importlib.metadata.Distribution]:
    """`dist` and the installed distributions it requires at an exact version (==), transitively."""
    parts, queue, seen = [], [dist], set()
    while queue and len(parts) < limit:
        part = queue.pop(0)
        name = (part.metadata["Name"] or "").lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        parts.append(part)
        for requirement in part.requires or []:
            match = EXACT_PIN.fullmatch(requirement)
            if not match:
                continue
            try:
                required = importlib.metadata.distribution(match.group(1))
            except importlib.metadata.PackageNotFoundError:
                continue
            if required.version == match.group(2):
                queue.append(required)
    return parts


def locator_file(locator: str) -> str:
    """The file a locator names: the text up to its first ':' or ','."""
    return re.split(r"[:,]", locator, maxsplit=1)[0].strip()


LINES = re.compile(r"^[^:,]+:(?P<first>[0-9]+)(?:-(?P<last>[0-9]+))?(?![0-9])")
WRAP = 2
"""Lines after a one-line locator (`path:N`) the quote may run on to: a sentence wrapped in the file."""


def located_text(text: str, locator: str) -> tuple[str, str]:
    """The part of a file a locator points at, and how to name it: lines N..M of `path:N-M`,
    lines N..N+WRAP of `path:N`; the whole file when the locator gives no line."""
    match = LINES.match(locator)
    if not match:
        return text, ""
    first = int(match.group("first"))
    last = int(match.group("last") or first + WRAP)
    return "\n".join(text.splitlines()[max(first - 1, 0):max(last, first)]), f" at line {match.group(0).split(':', 1)[1]}"


def locator_problem(locator: object) -> str | None:
    """Why a locator may not be read as a path, or None: an absolute path or one with '..' would
    let a page test whether any file on the machine holds its quote."""
    if not isinstance(locator, str):
        return None
    file = locator_file(locator)
    if file and (file.startswith("/") or ".." in PurePosixPath(file).parts or "\0" in file):
        return f"{file!r} leaves the pinned package or repository; give a path relative to its root"
    return None


def default_dirs(variable: str) -> list[Path]:
    return mirrors.directories(variable)


def check_citations(repo: Repo, wheels: list[Path], mirrors: list[Path], references: list[Path]) -> Citations:
    """Count the cited claims and their quotes; check every quote whose pinned file is here."""
    pages = {}
    for path in sorted(repo.wiki.rglob("*.md")):
        page = read_page(path, repo.rel(path))
        # Only pages that pass their schema (an origin without a version, a claim that is not a
        # mapping: validate reports them), so that what is read here has the shape it promises.
        if page.meta is not None and not schema_check(repo.schemas, "page", page.meta, page.rel, page.line):
            pages[page.rel] = page
    origins = {p.meta.get("id"): p.meta.get("origin") for p in pages.values()
               if p.meta.get("type") == "source" and isinstance(p.meta.get("origin"), dict)}
    texts = Texts(wheels, mirrors, references)
    result = Citations()
    for page in pages.values():
        for index, claim in enumerate(page.meta.get("claims") or []):
            if not isinstance(claim, dict) or claim.get("evidence") not in CITED_LEVELS:
                continue
            result.claims += 1
            quote, locator = claim.get("quote"), claim.get("locator")
            if not isinstance(quote, str):
                continue
            result.quoted += 1
            origin = origins.get(claim.get("source"))
            if origin is None or not isinstance(locator, str) or not texts.available(origin):
                continue
            file = str(origin["file"]) if "file" in origin else locator_file(locator)
            if not stays_below(file):
                result.problems.append(Problem(page.rel, page.line(("claims", index, "locator")),
                                               f"claims[{index}].locator",
                                               f"{file!r} leaves the pinned package or repository; not read"))
                continue
            result.checkable += 1
            text = texts.read(origin, file)
            where = origin.get("file") or \
                f"{origin.get('package') or origin.get('repo')}@{origin.get('version') or origin.get('commit', '')[:12]}"
            line = page.line(("claims", index, "quote"))
            if text is None:
                result.problems.append(Problem(page.rel, page.line(("claims", index, "locator")),
                                               f"claims[{index}].locator", f"no file {file!r} in {where}"))
            elif normalize(quote) not in normalize(located_text(text, locator)[0]):
                result.problems.append(Problem(page.rel, line, f"claims[{index}].quote",
                                               f"not found in {where} {file}{located_text(text, locator)[1]}"))
            else:
                result.matched += 1
    return result
