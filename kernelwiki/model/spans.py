"""Inline claim spans: a figure in prose that `refresh` renders from the page's claim.

    <!-- claim:ID -->591.6 TFLOP/s<!-- /claim -->          the claim's value and unit
    <!-- claim:ID.ratio -->1.11×<!-- /claim -->            value / baseline (measured claims)
    <!-- claim:ID.baseline -->534.4 TFLOP/s<!-- /claim --> the baseline's value and unit
    <!-- claim:ID.peak -->60%<!-- /claim -->               fraction_of_peak as a percentage
    <!-- claim:ID.ceiling -->97.1%<!-- /claim -->          fraction_of_ceiling (of the measured ceiling) as a percentage

The text between the markers belongs to the tool: `refresh` rewrites it, `refresh --check` fails
when it differs, `validate` reports a span whose claim (or variant) does not exist. Spans inside
fenced code blocks (kernelwiki.model.fences) are examples, not spans, and are left alone.
Rendering depends only on the claim, so a second refresh changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from kernelwiki.model.fences import prose_lines
from kernelwiki.model.problems import Problem

SPAN = re.compile(r"<!-- claim:([A-Za-z0-9][A-Za-z0-9._-]*) -->(.*?)<!-- /claim -->")
VARIANTS = ("ratio", "baseline", "peak", "ceiling")
MULTIPLIER_UNITS = ("x", "×")


@dataclass(frozen=True)
class Span:
    line: int
    """0-based line of the body the span sits on."""
    start: int
    end: int
    name: str
    """What follows `claim:` — an id, or an id plus `.ratio`/`.baseline`/`.peak`/`.ceiling`."""
    text: str


def find_spans(body: str) -> list[Span]:
    return [Span(index, m.start(), m.end(), m.group(1), m.group(2))
            for index, line in prose_lines(body) for m in SPAN.finditer(line)]


def resolve(name: str, claims: dict[str, dict]) -> tuple[dict, str] | str:
    """(claim, variant) a span name refers to, or the reason it refers to nothing."""
    if name in claims:
        return claims[name], "value"
    base, _, variant = name.rpartition(".")
    if variant in VARIANTS and base in claims:
        claim = claims[base]
        missing = {"ratio": "ratio", "baseline": "baseline", "peak": "fraction_of_peak",
                   "ceiling": "fraction_of_ceiling"}[variant]
        if claim.get(missing) is None:
            return f"claim {base!r} has no {missing}, so it has no .{variant}"
        return claim, variant
    if variant in VARIANTS:
        return f"no claim with id {base!r} on this page"
    return f"no claim with id {name!r} on this page"


def render(claim: dict, variant: str) -> str:
    """The text of a span: 3-4 significant digits and the unit."""
    if variant == "ratio":
        return f"{_number(claim['ratio'], 3)}×"
    if variant in ("peak", "ceiling"):
        return f"{_number(claim['fraction_of_' + variant] * 100, 3)}%"
    if variant == "baseline":
        return with_unit(claim["baseline"]["value"], claim.get("unit"))
    return with_unit(claim.get("value"), claim.get("unit"))


def with_unit(value: object, unit: str | None) -> str:
    text = _number(value, 4) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    if not unit:
        return text
    if unit in MULTIPLIER_UNITS:
        return f"{text}×"
    return f"{text}{unit}" if unit == "%" else f"{text} {unit}"


def _number(value: float, digits: int) -> str:
    if float(value).is_integer() and abs(value) < 1e7:
        return str(int(value))
    if abs(value) >= 10 ** digits:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def render_spans(body: str, claims: list) -> str:
    """The body with every resolvable span's text rendered from its claim; the rest untouched."""
    by_id = {c["id"]: c for c in claims if isinstance(c, dict) and isinstance(c.get("id"), str)}
    spans = find_spans(body)
    if not spans:
        return body
    lines = body.splitlines(keepends=True)
    for span in reversed(spans):   # right to left, so earlier offsets on the same line stay valid
        target = resolve(span.name, by_id)
        if isinstance(target, str):
            continue
        line = lines[span.line]
        new = f"<!-- claim:{span.name} -->{render(*target)}<!-- /claim -->"
        lines[span.line] = line[:span.start] + new + line[span.end:]
    return "".join(lines)


def span_problems(rel: str, body: str, claims: list, first_body_line: int) -> list[Problem]:
    """`path:line: claim span: ...` for each span that names no claim (or a variant the claim lacks)."""
    if "claim" not in body:
        return []   # no span, whole or broken, can stand in a body without the word
    by_id = {c["id"]: c for c in claims if isinstance(c, dict) and isinstance(c.get("id"), str)}
    problems = []
    for span in find_spans(body):
        target = resolve(span.name, by_id)
        if isinstance(target, str):
            problems.append(Problem(rel, first_body_line + span.line, "claim span", target))
    for index, line in prose_lines(body):
        rest = SPAN.sub("", line)
        if "<!-- claim:" in rest or "<!-- /claim -->" in rest:
            problems.append(Problem(rel, first_body_line + index, "claim span",
                                    "unclosed or malformed span; write <!-- claim:ID -->TEXT<!-- /claim --> on one line"))
    return problems


def body_first_line(frontmatter_text: str) -> int:
    """The 1-based file line of the body's first line, given the frontmatter between the fences."""
    return frontmatter_text.count("\n") + 3
