"""The one error type every checker reports: `path:line: field: what is wrong`."""

from __future__ import annotations

import re
from dataclasses import dataclass


class NotARepo(ValueError):
    """The checkout cannot be used at all: --root or $KERNELWIKI_ROOT names no kernelwiki checkout,
    or its schemas or vocabulary cannot be read or have the wrong shape. Every command answers it
    with one `error:` line (exit 2), never a traceback."""


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with one file, located as precisely as we can."""

    path: str
    """Path relative to the repository root (or as given, for files outside it)."""
    line: int
    """1-based line in the file; 1 when the problem concerns the whole file."""
    field: str
    """Dotted field path inside the frontmatter or document (`claims[2].value`), or `-`."""
    message: str
    """What is wrong, and where useful, what to do about it."""

    def __post_init__(self) -> None:
        # A path from the OS may hold bytes that are not UTF-8 (kept by Python as surrogates): shown
        # as \x escapes, a problem can always be printed and sent as JSON.
        for name in ("path", "field", "message"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, utf8_text(value))

    def __str__(self) -> str:
        return f"{_one_line(self.path)}:{self.line}: {_one_line(self.field)}: {_one_line(self.message)}"

    def to_json(self) -> dict:
        return {"path": self.path, "line": self.line, "field": self.field, "message": self.message}


def utf8_text(text: str) -> str:
    """`text` as valid UTF-8 text: the bytes of an OS name that are not UTF-8 as \\x escapes (wiki/\\xff.md),
    any other lone surrogate as a \\u escape."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


_UNPRINTABLE = re.compile(r"[^\S ]|[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(text: str) -> str:
    """Text quoted from a page may hold line breaks (\\n, \\x1e, \\u2028, ...) or escape
    sequences; shown escaped, a problem stays one line and cannot drive the terminal."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def field_path(parts: tuple) -> str:
    """('claims', 2, 'value') -> 'claims[2].value'."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "-"
