"""`kernelwiki audit`: find performance numbers in prose that no claim backs.

A performance number is a number followed by a performance unit (TFLOP/s, GB/s, ×, %, µs, cycles,
...). In page prose it must sit inside an inline claim span (kernelwiki.model.spans) so that `refresh`
owns its text. Not audited: the frontmatter, fenced code, inline `code`, claim spans, generated
blocks and HTML comments. A line that carries `<!-- unclaimed: reason -->` is exempt — for numbers
that are not measurements (a definition, an example input) — and is counted, so the share of
exemptions stays visible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernelwiki.model.pages import read_page
from kernelwiki.model.problems import Problem
from kernelwiki.storage.repo import Repo
from kernelwiki.model.fences import prose_lines
from kernelwiki.model.spans import SPAN, body_first_line

NUMBER = r"(?<![\w.])~?\d+(?:[.,]\d+)*"
UNITS = (r"(?:\s?(?:TFLOP/s|TFLOPS|PFLOP/s|PFLOPS|GFLOP/s|GB/s|TB/s|FLOP/clk(?:/SM)?|MHz|GHz|µs|us|ms|ns|"
         r"cycles?|ulps?|W)(?![\w/])"      # word units end at a word boundary ("7 Warps" is not 7 W)
         r"|\s?%"
         r"|×(?![\w(])"                    # 1.3× is a multiplier; 128×64, 64×K and 4 × 8 are shapes
         r"|x(?![\w.]))")                  # 1.2x, but not 0x1F, 4x4 or 2x.y
PERFORMANCE_NUMBER = re.compile(NUMBER + UNITS)
UNCLAIMED = re.compile(r"<!-- unclaimed:\s*(\S[^>]*?)\s*-->")
UNCLAIMED_EMPTY = re.compile(r"<!-- unclaimed:\s*-->")
BLOCK = re.compile(r"^<!-- kernelwiki:(begin|end) ([a-z0-9-]+) -->\s*$")
COMMENT = re.compile(r"<!--.*?-->")
INLINE_CODE = re.compile(r"(`+).*?\1")


@dataclass
class Audit:
    problems: list[Problem] = field(default_factory=list)
    spans: int = 0
    """Claim spans in prose (each a performance number the tool owns)."""
    unclaimed: int = 0
    """Performance numbers on lines marked `<!-- unclaimed: reason -->`."""
    bare: int = 0
    """Performance numbers outside spans on unmarked lines (each a problem)."""

    @property
    def total(self) -> int:
        return self.spans + self.unclaimed + self.bare


def audit_body(rel: str, body: str, first_line: int, result: Audit) -> None:
    """Add one page body's spans, exempt numbers and problems to `result`."""
    in_block = False
    for index, line in prose_lines(body):
        marker = BLOCK.match(line.rstrip("\r\n"))
        if marker:
            in_block = marker.group(1) == "begin"
            continue
        if in_block:
            continue
        result.spans += len(SPAN.findall(line))
        if UNCLAIMED_EMPTY.search(line):
            result.problems.append(Problem(rel, first_line + index, "unclaimed", "give a reason after 'unclaimed:'"))
        text = INLINE_CODE.sub(" ", COMMENT.sub(" ", SPAN.sub(" ", line)))
        found = [m.group(0) for m in PERFORMANCE_NUMBER.finditer(text)]
        if not found:
            continue
        if UNCLAIMED.search(line):
            result.unclaimed += len(found)
            continue
        result.bare += len(found)
        for number in found:
            result.problems.append(Problem(
                rel, first_line + index, "prose",
                f"performance number {number.strip()!r} outside a claim span; write it as "
                "<!-- claim:ID -->...<!-- /claim --> or mark the line <!-- unclaimed: reason -->"))


def audit(repo: Repo) -> Audit:
    """Audit the prose of every page under wiki/."""
    result = Audit()
    for path in sorted(repo.wiki.rglob("*.md")):
        page = read_page(path, repo.rel(path))
        if page.meta is None:
            continue   # validate reports unreadable pages
        audit_body(page.rel, page.body, body_first_line(page.frontmatter_text), result)
    return result

