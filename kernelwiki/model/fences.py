"""Fenced code blocks in Markdown, found by one rule for every reader (audit, claim spans, refresh's
generated blocks, the site's cross-links and claim links).

CommonMark's rule: a fence opens with three or more backticks or tildes, indented by at most three
spaces relative to its container (the page, or the content of the list item it sits in), and
closes only at a line of the same character, at least as long as the opening run, followed by
nothing but spaces. So a ```` fence around an example holding ``` lines stays open through them,
a ~~~ line never closes a ``` block, and a block never closed runs to the end of the text.
Everything inside, fence lines included, is code: no claim span, generated block or link there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<run>`{3,}|~{3,})(?P<info>.*)$")
LIST_ITEM = re.compile(r"^(?P<marker>[ \t]*(?:[-+*]|[0-9]{1,9}[.)]))(?P<gap>[ \t]+|$)")
MAX_INDENT = 3
"""Spaces a fence may stand in from its container; four or more make an indented code block."""


@dataclass(frozen=True)
class Fence:
    char: str
    length: int
    base: int
    """The content column of the container the fence opened in."""


def _indent(text: str) -> int:
    """Columns of leading whitespace (a tab advances to the next multiple of 4)."""
    return len(text.expandtabs(4)) - len(text.expandtabs(4).lstrip(" "))


def code_mask(lines: list[str]) -> list[bool]:
    """For each line (with or without its line ending): True when it belongs to a fenced code
    block, the fence lines included."""
    if not any("```" in line or "~~~" in line for line in lines):
        return [False] * len(lines)   # no line can open a fence
    mask: list[bool] = []
    fence: Fence | None = None
    containers: list[int] = []   # content columns of the list items the current line sits in
    for raw in lines:
        line = raw.rstrip("\r\n")
        if fence is not None:
            mask.append(True)
            if _closes(line, fence):
                fence = None
            continue
        if not line.strip():
            mask.append(False)
            continue
        indent = _indent(line)
        while containers and indent < containers[-1]:
            containers.pop()   # less indented than the item's content: the item has ended
        base = containers[-1] if containers else 0
        opening = OPENING.match(line)
        if opening and indent - base <= MAX_INDENT and _opens(opening):
            fence = Fence(opening.group("run")[0], len(opening.group("run")), base)
            mask.append(True)
            continue
        item = LIST_ITEM.match(line)
        if item and indent - base <= MAX_INDENT:
            marker_end = len(item.group("marker").expandtabs(4))
            gap = len(item.group("gap").expandtabs(4))
            # A gap of five or more columns starts an indented code block: the content is one column in.
            containers.append(marker_end + (gap if 1 <= gap <= 4 else 1))
            opening = OPENING.match(line[item.end():])
            if opening and _opens(opening):   # `- ```python`: the item's content starts with a fence
                fence = Fence(opening.group("run")[0], len(opening.group("run")), containers[-1])
                mask.append(True)
                continue
        mask.append(False)
    return mask


def _opens(opening: re.Match) -> bool:
    """A backtick fence's info string holds no backtick (else the line is inline code)."""
    return not (opening.group("run")[0] == "`" and "`" in opening.group("info"))


def _closes(line: str, fence: Fence) -> bool:
    if _indent(line) - fence.base > MAX_INDENT:
        return False
    stripped = line.strip(" \t")
    run = len(stripped) - len(stripped.lstrip(fence.char))
    return run >= fence.length and not stripped[run:].strip(" \t")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(0-based line, line with its ending) for every line outside fenced code blocks."""
    lines = text.splitlines(keepends=True)
    return [(index, line) for index, (line, code) in enumerate(zip(lines, code_mask(lines))) if not code]


def map_prose(text: str, change: Callable[[str], str]) -> str:
    """`text` with `change` applied to each run of consecutive lines outside fenced code; the code
    (fence lines included) is kept as it is."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    run: list[str] = []
    for line, code in zip(lines, code_mask(lines)):
        if code:
            if run:
                out.append(change("".join(run)))
                run = []
            out.append(line)
        else:
            run.append(line)
    if run:
        out.append(change("".join(run)))
    return "".join(out)


# --- generated blocks ------------------------------------------------------------------------------
BLOCK = re.compile(r"^<!-- kernelwiki:(begin|end) ([a-z0-9-]+) -->\s*$")


def fill_blocks(body: str, meta: dict, newline: str, renderers: dict) -> str:
    """Replace the inside of each generated block `renderers` names (`<!-- kernelwiki:begin NAME -->` ...
    `<!-- kernelwiki:end NAME -->`) by renderers[NAME](meta); everything outside stays as it is, and a
    marker inside fenced code (an example) is no marker."""
    lines = body.splitlines(keepends=True)
    markers = [None if code else BLOCK.match(line.rstrip("\r\n")) for line, code in zip(lines, code_mask(lines))]
    out: list[str] = []
    index = 0
    while index < len(lines):
        marker = markers[index]
        if marker and marker.group(1) == "begin" and marker.group(2) in renderers:
            end = _find_end(markers, index + 1, marker.group(2))
            if end is not None:
                out.append(lines[index])
                rendered = renderers[marker.group(2)](meta)
                out.append(rendered.replace("\n", newline))
                out.append(lines[end])
                index = end + 1
                continue
        out.append(lines[index])
        index += 1
    return "".join(out)


def _find_end(markers: list[re.Match | None], start: int, name: str) -> int | None:
    for index in range(start, len(markers)):
        marker = markers[index]
        if marker and marker.group(1) == "end" and marker.group(2) == name:
            return index
    return None
