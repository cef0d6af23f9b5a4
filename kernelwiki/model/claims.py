"""A page's claims as a table: which claims, in which rows, and the text of each cell.

Three tables show them: refresh's generated `claims` block, `get --claims` and the site's claims
tables. All three read the claims with page_claims (legacy `performance_claims` as source-reported
ones) and lay them out with claim_rows (a measurement that reproduces a claim shares its row);
the Markdown tables pick their columns from COLUMNS (markdown_rows), the site renders the same
rows as HTML (kernelwiki.docsite.render).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

RECORD_LEVELS = ("measured", "compiled")
"""Evidence levels of the claims `refresh` writes from run records (the others are written by hand)."""


RUN_TIME = re.compile(r"(?:^|/)(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z-[^/]*$")
"""A run record's file name starts with the UTC time its run started (the run id)."""


def record_time(record: object) -> str | None:
    """The UTC start time (2026-12-02T09:41:25Z) of the run a claim's `record` path names, or None."""
    match = RUN_TIME.search(str(record)) if isinstance(record, str) else None
    return "{}-{}-{}T{}:{}:{}Z".format(*match.groups()) if match else None


def page_claims(meta: dict) -> list[dict]:
    """The page's claims in our format (copies), legacy performance_claims read as source-reported ones.
    A record-backed claim's `measured_at` is its record's start time, read from the record's name
    (refresh does not write it into the page: the name already says it)."""
    claims = [dict(c) for c in meta.get("claims") or [] if isinstance(c, dict)]
    for claim in claims:
        if "measured_at" not in claim and (when := record_time(claim.get("record"))):
            claim["measured_at"] = when
    for index, legacy in enumerate(meta.get("performance_claims") or []):
        if isinstance(legacy, dict):
            claim = {k: v for k, v in legacy.items() if k != "source_id"}
            claim.update(id=f"performance-claim-{index}", evidence="source-reported", source=legacy.get("source_id"))
            claims.append(claim)
    return claims


@dataclass(frozen=True)
class ClaimRow:
    """One row: the claim it is named after (`label`), the value reported for it (a hand-written
    claim: the label itself) and the value measured (a record-backed label itself, or a
    measurement that reproduces the label; None when nothing measured it)."""

    label: dict
    reported: dict | None
    measured: dict | None

    @property
    def reproduction(self) -> dict | None:
        """The measurement of another claim's quantity on this row (None when the label is the measurement)."""
        return self.measured if self.measured is not None and self.measured is not self.label else None


def claim_rows(claims: list[dict]) -> list[ClaimRow]:
    """Each claim once, in page order, except that a claim reproducing another one on the page
    (`reproduces`) shares that claim's row: one row per reproduction, or one without any."""
    by_id = {c.get("id") for c in claims}
    reproductions: dict[Any, list[dict]] = {}
    for claim in claims:
        if claim.get("reproduces") in by_id:
            reproductions.setdefault(claim["reproduces"], []).append(claim)
    rows = []
    for claim in claims:
        if claim.get("reproduces") in by_id:
            continue
        if claim.get("evidence") in RECORD_LEVELS:
            rows.append(ClaimRow(claim, None, claim))
            rows += [ClaimRow(claim, None, m) for m in reproductions.get(claim.get("id"), [])]
        else:
            rows += [ClaimRow(claim, claim, m) for m in reproductions.get(claim.get("id"), [None])]
    return rows


# --- cells ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Style:
    """How a Markdown claims table looks: its columns (keys of COLUMNS), whether a reproduction
    stands on a row of its own under the claim it reproduces (`grouped`, marked ↳) or every claim
    in page order, the significant digits of a ratio, and where a cited record links to (None:
    the record's path and case as text)."""

    columns: tuple[str, ...]
    grouped: bool = True
    ratio_digits: int = 3
    record_link: Callable[[str], str] | None = None
    record_label: Callable[[str], str] | None = None
    """Where set, a cited record is this text (a reference such as `[R1]`) instead of a link or its path."""


def cell(value: Any) -> str:
    """Any text as one Markdown table cell: a `|` cannot end the cell and a line break cannot end the
    row (the one escaper of every Markdown table get and MCP print; the site's is docsite.render.cell)."""
    return " ".join(str(value).splitlines()).replace("|", "\\|")


def value_text(claim: dict, style: Style) -> str:
    """'591.6 TFLOP/s (1.11× cuBLAS)': the value, its unit and its ratio to a same-run baseline."""
    value = f"{claim.get('value')} {claim.get('unit', '')}".strip()
    baseline = claim.get("baseline")
    if claim.get("ratio") is not None and baseline:
        name = baseline.get("name") if isinstance(baseline, dict) else baseline
        value += f" ({_significant(claim['ratio'], style.ratio_digits)}× {name})"
    return value


def run_count(claim: dict) -> int | None:
    """How many runs a measured claim summarizes: refresh writes `spread` (with `runs`) when the
    claim is the median of several runs and nothing when it is one run's value; None for a claim
    no record backs."""
    if claim.get("evidence") != "measured":
        return None
    spread = claim.get("spread")
    runs = spread.get("runs") if isinstance(spread, dict) else None
    return runs if isinstance(runs, int) and not isinstance(runs, bool) and runs > 1 else 1


def runs_text(claim: dict, digits: int = 4) -> str:
    """'median of 3 runs, p10–p90 171.2–175 TFLOP/s' or '1 run' for a measured claim; '' otherwise."""
    runs = run_count(claim)
    if runs is None:
        return ""
    if runs == 1:
        return "1 run"
    spread = claim["spread"]
    unit = f" {claim['unit']}" if claim.get("unit") else ""
    gpus = f" on {spread['gpus']} GPUs" if isinstance(spread.get("gpus"), int) else ""
    return (f"median of {runs} runs{gpus}, p10–p90 {_significant(spread.get('p10'), digits)}–"
            f"{_significant(spread.get('p90'), digits)}{unit}")


def _significant(value: Any, digits: int) -> str:
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _joined(claim: dict, keys: tuple[str, ...], between: str) -> str:
    return between.join(str(claim[k]) for k in keys if claim.get(k))


def _conditions_cell(claim: dict, style: Style) -> str:
    """The claim's conditions alone in one cell: a mapping as key=value pairs, `|` escaped."""
    value = claim.get("conditions")
    if value is None:
        return ""
    if isinstance(value, dict):
        value = ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _from(claim: dict, style: Style) -> str:
    if claim.get("record") and style.record_label is not None:
        return style.record_label(str(claim["record"]))
    if claim.get("record") and style.record_link is not None:
        return f"[record]({style.record_link(str(claim['record']))})"
    return str(claim.get("record") or claim.get("source") or "")


def _cites(claim: dict, style: Style) -> str:
    return _from(claim, style) + (f"#{claim['case']}" if claim.get("case") else "")


COLUMNS: dict[str, tuple[str, Callable[[dict, Style], str]]] = {
    "claim": ("claim", lambda c, s: str(c.get("id", ""))),
    "claim (metric)": ("claim", lambda c, s: f"{c.get('id')} ({c.get('metric')})"),
    "value": ("value", value_text),
    "runs": ("runs", lambda c, s: runs_text(c)),
    "evidence": ("evidence", lambda c, s: str(c.get("evidence"))),
    "GPU / arch": ("GPU / arch", lambda c, s: _joined(c, ("gpu", "arch"), " / ")),
    "conditions": ("conditions", lambda c, s: _joined(c, ("dtype", "shape", "conditions"), "; ")),
    "conditions (cell)": ("conditions", _conditions_cell),
    "from": ("from", _from),
    "cites": ("cites", _cites),
    **{key: (key, lambda c, s, key=key: str(c.get(key, ""))) for key in ("gpu", "arch", "dtype", "shape")},
}
"""column key -> (header, cell text of a claim)."""


def markdown_rows(claims: list[dict], style: Style) -> list[str]:
    """The table's lines: header, separator and one line per claim, every cell through cell()."""
    headers = [COLUMNS[key][0] for key in style.columns]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for claim in _grouped(claims) if style.grouped else claims:
        cells = [cell(COLUMNS[key][1](claim, style)) for key in style.columns]
        if style.grouped and claim.get("reproduces"):
            cells[0] = f"↳ {cells[0]}"
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _grouped(claims: list[dict]) -> list[dict]:
    """The claims of claim_rows one after another: each label once, then its reproductions."""
    out: list[dict] = []
    seen: set[int] = set()
    for row in claim_rows(claims):
        if id(row.label) not in seen:
            seen.add(id(row.label))
            out.append(row.label)
        if row.reproduction is not None:
            out.append(row.reproduction)
    return out
