"""Text from untrusted input on its way to a terminal: control characters shown, never obeyed."""

from __future__ import annotations

import re

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 (but tab and newline), DEL, C1, and the bidirectional overrides that reorder what a reader
sees: an escape sequence could clear the screen, retitle the terminal, hide or reorder lines."""


def printable(text: str) -> str:
    """`text` with each control character written as an escape (\\x1b, \\u202e)."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                       text)


def printable_line(text: str) -> str:
    """One line of output: newlines and tabs escaped too, whitespace runs kept."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")
