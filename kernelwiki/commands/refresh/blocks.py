"""The generated blocks of a page body (`<!-- kernelwiki:begin NAME -->` ...
`<!-- kernelwiki:end NAME -->`, outside fenced code): `claims` (the page's claims table, stored
empty and rendered from the frontmatter when the page is read), `runs`
(each case's ratio to its baseline in every passing run) and `versus` (ours against the kernels a
case reproduces and our own variants). Both choose each case on its own, from the runs that hold it,
as the claims do (claims.case_evidence): the newest run of a probe may hold only some of its cases.
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
    each of the latest VERSUS_RUNS passing runs that hold the case, made from the same commit on the
    same GPU as the newest of them (that case's own kernel version), oldest first, and their median.
    Above 1, ours is faster. Each case is chosen on its own, as its claim is: a newer run of other
    cases (a `--case` run, a held-out-only run) leaves its rows where they were, and a case in no
    passing run has none. Cases that time a teaching variant as ours (params `variant`) are left out.
    """
    rows = ["", "| probe | case | candidate | ours / candidate per run, oldest first | median |", "|---|---|---|---|---|"]
    for spec in linked:
        by_case: dict[str, list[tuple[Record, dict]]] = {}
        for record, case in _page_cases(spec, records, page_id):
            if not (case.get("params") or {}).get("variant"):
                by_case.setdefault(case["id"], []).append((record, case))
        ratios: dict[tuple[str, str], list[float]] = {}
        for case_id, pairs in by_case.items():
            version = _kernel_version(pairs[-1][0])
            case_spec = spec.case(case_id) or {}
            for record, case in [pair for pair in pairs if _kernel_version(pair[0]) == version][-VERSUS_RUNS:]:
                for entry in case.get("baselines") or []:
                    name = str(entry.get("name", "")) if isinstance(entry, dict) else ""
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


def _page_cases(spec: ProbeSpec, records: dict[str, list[Record]], page_id: str | None) -> list[tuple[Record, dict]]:
    """(record, case) for each case of the page in each passing run of the probe, oldest first,
    where the case may stand in a generated block (`evidence`)."""
    out = []
    for record in records.get(spec.id, []):
        if record.mode != "run" or record.status != "passed":
            continue
        for case in record.data.get("cases") or []:
            pages = (spec.case(case.get("id", "")) or {}).get("pages") if isinstance(case, dict) else None
            if evidence(record, case, spec.data) and (pages is None or page_id in pages):
                out.append((record, case))
    return out


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
    that holds the case, oldest first, and their min / median / max. Each case is read from the runs
    that hold it, so a newer run of fewer cases hides none.
    """
    rows = ["", "| probe | case | baseline | ratio per run, oldest first | min | median | max |",
            "|---|---|---|---|---|---|---|"]
    for spec in linked:
        ratios: dict[tuple[str, str], list[float]] = {}
        for record, case in _page_cases(spec, records, page_id):
            headline = case.get("headline") or {}
            if _ratio(headline) is not None:
                ratios.setdefault((case["id"], str(headline.get("baseline", ""))), []).append(_ratio(headline))
        for (case_id, baseline), values in sorted(ratios.items()):
            cells = ", ".join(f"{v:.3g}" for v in values)
            rows.append(f"| {spec.id} | {_cell(case_id)} | {_cell(baseline)} | {cells} | {min(values):.3g} | "
                        f"{statistics.median(values):.3g} | {max(values):.3g} |")
    if len(rows) == 3:
        rows = ["", "No passing run of a linked probe carries a ratio to a baseline yet."]
    rows.append("")
    return "\n".join(rows) + "\n"
