"""Reading a page file: bytes -> (frontmatter mapping, body), with every way that can go wrong
reported as a Problem instead of an exception.

A page is `---\n<YAML mapping>\n---\n<Markdown body>`. Line numbers in problems are lines of the
file, so an editor can jump to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwiki.model import yamlio
from kernelwiki.model.problems import Problem
from kernelwiki.model.yamlio import LineMap
from kernelwiki.model.files import UnsafeFile, read_regular

BOM = b"\xef\xbb\xbf"
FENCE = "---"
MAX_PAGE_BYTES = 1 << 20
"""The largest page read (the largest real one is ~50 kB); a bigger file is refused unread."""


@dataclass
class Page:
    """One page as read from disk."""

    rel: str
    """Path relative to the repository root, with forward slashes."""
    meta: dict[str, Any] | None
    """The frontmatter mapping, or None when it could not be read."""
    body: str
    """Everything after the closing fence (LF line endings)."""
    frontmatter_text: str = ""
    """The frontmatter exactly as written (between the fences, LF line endings)."""
    lines: LineMap = field(default_factory=dict)
    """Field path -> 0-based line inside the frontmatter text."""
    problems: list[Problem] = field(default_factory=list)
    """What went wrong while reading (encoding, fences, YAML)."""
    canonical: bool = False
    """The frontmatter is known to be in canonical form (yamlio.read_canonical read it)."""

    FRONTMATTER_FIRST_LINE = 2  # line 1 is the opening fence

    def line(self, path: tuple = ()) -> int:
        """The 1-based file line of a frontmatter field (or its closest known parent)."""
        return line_of(self.lines, path) + self.FRONTMATTER_FIRST_LINE

    @property
    def id(self) -> str | None:
        value = (self.meta or {}).get("id")
        return value if isinstance(value, str) else None


def read_page(path: Path, rel: str) -> Page:
    """Read and parse one page; never raises: a symbolic link, a file too large or one that cannot
    be read is a page without frontmatter whose problem says so."""
    try:
        raw = read_page_bytes(path)
    except UnsafeFile as err:
        return Page(rel, None, "", problems=[Problem(rel, 1, "-", f"{err}; not read")])
    return parse_page(raw, rel)


def read_page_bytes(path: Path) -> bytes:
    """The bytes of a page file: a regular file, not a symbolic link, at most MAX_PAGE_BYTES."""
    return read_regular(path, MAX_PAGE_BYTES)


def parse_page(raw: bytes, rel: str) -> Page:
    problems: list[Problem] = []

    def problem(line: int, field_name: str, message: str) -> None:
        problems.append(Problem(rel, line, field_name, message))

    if raw.startswith(BOM):
        problem(1, "-", "file starts with a UTF-8 byte-order mark; remove it (validate --fix does)")
        raw = raw[len(BOM):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        problem(line, "-", f"not valid UTF-8 (byte 0x{raw[err.start]:02x}); save the file as UTF-8")
        return Page(rel, None, "", problems=problems)
    if "\r" in text:
        line = text[: text.index("\r")].count("\n") + 1
        problem(line, "-", "CRLF (or CR) line endings; use LF (validate --fix converts them)")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        problem(1, "-", "empty file; a page is '---', YAML frontmatter, '---', then Markdown")
        return Page(rel, None, "", problems=problems)

    lines = text.split("\n")
    if lines[0].rstrip() != FENCE:
        problem(1, "-", "no frontmatter: the first line must be '---'")
        return Page(rel, None, text, problems=problems)
    try:
        close = next(i for i in range(1, len(lines)) if lines[i].rstrip() == FENCE)
    except StopIteration:
        problem(1, "-", "frontmatter is never closed: add a '---' line after it")
        return Page(rel, None, "", problems=problems)
    # Every other tool (refresh, get, the site) splits at a line that is exactly '---'.
    for index in (0, close):
        if lines[index] != FENCE:
            problem(index + 1, "-", f"fence {lines[index]!r} has trailing whitespace; it must be exactly '---' "
                                    "(validate --fix rewrites it)")

    fm_text = "\n".join(lines[1:close]) + ("\n" if close > 1 else "")
    body = "\n".join(lines[close + 1:])
    page = Page(rel, None, body, frontmatter_text=fm_text, problems=problems)
    fast = yamlio.read_canonical(fm_text) if not problems else None
    if fast is not None:
        page.meta, page.lines, page.canonical = fast[0], fast[1], True
        return page
    try:
        meta, line_map = yamlio.load(fm_text)
    except yamlio.YamlProblem as err:
        problem(err.line + Page.FRONTMATTER_FIRST_LINE, err.field, err.message)
        return page
    if not isinstance(meta, dict):
        kind = "nothing" if meta is None else f"a {type(meta).__name__}"
        problem(2, "-", f"frontmatter must be a mapping of 'field: value' lines, got {kind}")
        return page
    page.meta, page.lines = meta, line_map
    return page


def render_page(meta: dict[str, Any], body: str) -> str:
    """The canonical text of a page with this frontmatter and body."""
    return f"{FENCE}\n{yamlio.dump(meta)}{FENCE}\n{body}"


def line_of(lines: LineMap, path: tuple) -> int:
    """The 0-based line of the deepest known prefix of `path`."""
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 0
