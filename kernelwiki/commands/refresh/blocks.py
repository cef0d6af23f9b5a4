"""The generated blocks of a page body (`<!-- kernelwiki:begin NAME -->` ...
`<!-- kernelwiki:end NAME -->`, outside fenced code): `claims` (the page's claims table, stored
empty and rendered from the frontmatter when the page is read), `runs`
(each case's ratio to its baseline in every passing run) and `versus` (ours against the kernels a
case reproduces and our own variants).
"""

from __future__ import annotations

import html
import math
import re
import statistics

from kernelwiki.commands.evidence import claim_source_problem
from kernelwiki.model.fences import fill_blocks
from kernelwiki.model.terminal import printable_line
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record

_MARKUP = {ord(c): f"&#{ord(c)};" for c in "[]{}|"}


def _cell(value: object) -> str:
    """A name from a run record (a candidate, a baseline) as the text of a Markdown table cell in the
    page file: one line, control characters as escapes, and no character that Markdown or HTML would
    read as markup (a tag, a link, an image, a new column or row)."""
    return html.escape(printable_line(str(value)), quote=False).translate(_MARKUP)


def render_blocks(body: str, meta: dict, newline: str, renderers: dict | None = None) -> str:
    """Replace the inside of each known generated block (kernelwiki.model.fences.fill_blocks)."""
    return fill_blocks(body, meta, newline, renderers or RENDERERS)


def stored_claims(meta: dict) -> str:
    """The `claims` block as a page file holds it: empty. The table only repeats the frontmatter's
    claims (stored, it was a fifth of the wiki's bytes), so it is rendered when the page is read:
    kernelwiki.commands.get.page_table for get and MCP, the site's own claims table on the site."""
    return "\n"


RENDERERS = {"claims": stored_claims}


# --- run history block -----------------------------------------------------------------------------
VERSUS_RUNS = 3   # the latest passing runs of one commit whose median the versus block shows
OUR_VARIANT = re.compile(r"^ours[ ,][^@]*$")   # our kernel with something changed (not another timing protocol: "@")


def render_versus(linked: list[ProbeSpec], records: dict[str, list[Record]], page_id: str | None) -> str:
    """`<!-- kernelwiki:begin versus -->`: ours against the kernel each case reproduces
    (`reproduced_by`) and against our own variants (baselines named "ours, ...", "ours with ...",
    "ours without ...", not those timed under another protocol, "... @ ..."): ours / candidate in
    each of the latest VERSUS_RUNS passing runs that hold the case and were made from the same commit
    on the same GPU as the newest of them (one kernel version per case: a run of a few cases does not
    hide the others), oldest first, and their median. Above 1, ours is faster.
    Cases that time a teaching variant as ours (params `variant`) are left out.
    """
    rows = ["", "| probe | case | candidate | ours / candidate per run, oldest first | median |", "|---|---|---|---|---|"]
    for spec in linked:
        passing = [r for r in records.get(spec.id, []) if r.mode == "run" and r.status == "passed"]
        newest: dict[str, Record] = {}   # case id -> the newest passing run that holds it
        for record in passing:
            for case in record.data.get("cases") or []:
                if isinstance(case, dict):
                    newest[str(case.get("id", ""))] = record
        ratios: dict[tuple[str, str], list[float]] = {}
        for case_id, last in newest.items():
            version = _kernel_version(last)
            same = [r for r in passing if _kernel_version(r) == version
                    and any(isinstance(c, dict) and str(c.get("id", "")) == case_id for c in r.data.get("cases") or [])]
            for record in same[-VERSUS_RUNS:]:
                for case in record.data.get("cases") or []:
                    if not isinstance(case, dict) or str(case.get("id", "")) != case_id:
                        continue
                    case_spec = spec.case(case_id) or {}
                    pages = case_spec.get("pages")
                    if (not evidence(record, case, spec.data) or (pages is not None and page_id not in pages)
                            or (case.get("params") or {}).get("variant")):
                        continue
                    for entry in case.get("baselines") or []:
                        name = str(entry.get("name", ""))
                        if _ratio(entry) is None or not (name == case_spec.get("reproduced_by") or OUR_VARIANT.match(name)):
                            continue
                        ratios.setdefault((case_id, name), []).append(_ratio(entry))
        for (case_id, name), values in sorted(ratios.items()):
            cells = ", ".join(f"{v:.3g}" for v in values)
            rows.append(f"| {spec.id} | {_cell(case_id)} | {_cell(name)} | {cells} | {statistics.median(values):.3g} |")
    if len(rows) == 3:
        rows = ["", "No passing run of a linked probe compares ours with another kernel or a variant of ours yet."]
    rows.append("")
    return "\n".join(rows) + "\n"


def _ratio(entry: dict) -> float | None:
    """An entry's ratio as a finite float, or None (absent, or an integer past float range)."""
    value = entry.get("ratio") if isinstance(entry, dict) else None
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    except OverflowError:
        return None
    return number if number is not None and math.isfinite(number) else None


def evidence(record: Record, case: dict, probe: dict | None = None) -> bool:
    """Whether a case of a passing run may stand in a generated block: it passed and may be a claim's
    source (kernelwiki.commands.evidence.claim_source_problem: the rules the measured claims follow)."""
    return isinstance(case, dict) and case.get("status") == "passed" and claim_source_problem(record.data, case, probe) is None


def _kernel_version(record: Record) -> tuple:
    """What makes runs comparable for the versus block: the commit they ran and the GPU."""
    environment = record.data.get("environment") or {}
    return environment.get("commit"), environment.get("gpu")


def render_runs(linked: list[ProbeSpec], records: dict[str, list[Record]], page_id: str | None) -> str:
    """`<!-- kernelwiki:begin runs -->`: each case's ratio to its baseline in every passing run.

    What a sentence like "below 0.9× in every run" would say, written from the records so it cannot
    drift: one row per case of the page (cases that carry a ratio), the ratio of each passing run
    oldest first, and their min / median / max.
    """
    rows = ["", "| probe | case | baseline | ratio per run, oldest first | min | median | max |",
            "|---|---|---|---|---|---|---|"]
    for spec in linked:
        runs = [r for r in records.get(spec.id, []) if r.data.get("mode") == "run" and r.data.get("status") == "passed"]
        ratios: dict[tuple[str, str], list[float]] = {}
        for record in runs:
            for case in record.data.get("cases") or []:
                headline = case.get("headline") or {}
                pages = (spec.case(case.get("id", "")) or {}).get("pages")
                if not evidence(record, case, spec.data) or _ratio(headline) is None or (
                        pages is not None and page_id not in pages):
                    continue
                ratios.setdefault((case["id"], str(headline.get("baseline", ""))), []).append(_ratio(headline))
        for (case_id, baseline), values in sorted(ratios.items()):
            cells = ", ".join(f"{v:.3g}" for v in values)
            rows.append(f"| {spec.id} | {_cell(case_id)} | {_cell(baseline)} | {cells} | {min(values):.3g} | "
                        f"{statistics.median(values):.3g} | {max(values):.3g} |")
    if len(rows) == 3:
        rows = ["", "No passing run of a linked probe carries a ratio to a baseline yet."]
    rows.append("")
    return "\n".join(rows) + "\n"
