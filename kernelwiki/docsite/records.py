"""One HTML page per run record: what ran where, how it was timed, and every case, with a link to
the JSON itself (published next to it)."""

from __future__ import annotations

import html
import json
import posixpath
from typing import Any

from kernelwiki.storage.record_file import is_gzip
from kernelwiki.storage.records import Record
from kernelwiki.model.claims import runs_text
from kernelwiki.docsite.render import (badge, cell, code, fmt, fmt_ratio, is_number, record_json_uri, record_uri, rel_link,
                                       text)


def _value(value: Any) -> str:
    """A record value as text; an integer in full (a seed of 1347767963 must be typed back exactly)."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return fmt(value) if is_number(value) else text(value)


def ceiling_units(calibration: Record | None) -> dict[str, str]:
    """The unit of each measured ceiling, from the calibration record it was read from (the case
    whose `params.ceiling` names it)."""
    units = {}
    for case in (calibration.data.get("cases") if calibration else None) or []:
        if isinstance(case, dict) and isinstance(case.get("params"), dict) and case["params"].get("ceiling"):
            units[str(case["params"]["ceiling"])] = str((case.get("headline") or {}).get("unit") or "")
    return units


def _ceilings(data: Any, uri: str, records: dict[str, Record]) -> list[str]:
    if not isinstance(data, dict) or not data:
        return []
    source = records.get(str(data.get("record")))
    units = ceiling_units(source)
    rows = []
    for key, value in data.items():
        if value is None:
            shown = "none"
        elif key == "record":
            shown = (f"[{cell(posixpath.basename(str(value)))}]({rel_link(uri, record_uri(source.path))})"
                     if source else cell(value))
        elif is_number(value):
            shown = f"{_value(value)} {cell(units.get(str(key), ''))}".strip()
        else:   # a run id, a protocol, a reason: untrusted text in a table cell
            shown = cell(value)
        rows.append(f"| {cell(key)} | {shown} |")
    where = ("Measured by the calibration probe on the same GPU in the same invocation (its run id); a case's "
             "fraction of the ceiling is its throughput over the ceiling of its kind.\n" if data.get("run_id") else
             "No usable calibration ran in this invocation (the reason below): no fraction of a ceiling is shown.\n"
             if data.get("reason") else
             "Read from another run's calibration record (before ceilings were measured in the same invocation): "
             "no fraction of these ceilings is shown.\n")
    return ["## Ceilings\n", where,
            "| ceiling | value |", "|---|---|", *rows, ""]


def _other_runs(record: Record, siblings: list[Record], uri: str) -> list[str]:
    others = [r for r in siblings if r.path != record.path]
    if not others:
        return []
    rows = [f"| [{cell(r.started[:16].replace('T', ' '))}]({rel_link(uri, record_uri(r.path))}) | {cell(r.mode)} | "
            f"{badge('status-run', r.data.get('status'))} | {cell((r.data.get('environment') or {}).get('gpu') or 'no GPU')} |"
            for r in reversed(others)]
    return ["## Other runs of this probe\n", "| started (UTC) | mode | status | GPU |", "|---|---|---|---|", *rows, ""]


def _claims_from(record: Record, citing: list[tuple[str, dict]], uri: str, page_uris: dict[str, str]) -> list[str]:
    """The pages' measured claims whose value is this run's (refresh cites the median run of those it
    summarizes), each with how many runs it summarizes and their spread."""
    rows = []
    for page_id, claim in citing:
        page = (f"[{cell(page_id)}]({rel_link(uri, page_uris[page_id])})" if page_id in page_uris else cell(page_id))
        value = f"{fmt(claim['value'])} {cell(claim.get('unit', ''))}".strip() if is_number(claim.get("value")) else "—"
        rows.append(f"| {code(claim.get('id'))} | {page} | {code(claim.get('case')) if claim.get('case') else '—'} | "
                    f"{value} | {cell(runs_text(claim))} |")
    if not rows:
        return []
    return ["## Claims from this run\n",
            "A page's measured claim is the median of the case's latest passing runs (at most three, of one kernel "
            "version and GPU model) and cites the run whose value is that median; these cite this run.\n",
            *fold(["| claim | page | case | value | runs |", "|---|---|---|---|---|", *rows], f"{len(rows)} claims"), ""]


FOLDED_ROWS = 12
"""A table longer than this stands behind a fold (its summary says what it holds): no page is taller
than 15,000 px at 1440 px."""


def fold(table: list[str], what: str) -> list[str]:
    """The lines of a Markdown table, behind a closed fold when it has more than FOLDED_ROWS rows."""
    if len(table) - 2 <= FOLDED_ROWS:
        return table
    return [f'<details class="kw-fold" markdown="1">\n<summary>{html.escape(what)}</summary>\n', *table, "\n</details>"]


def _pairs(title: str, data: dict | None) -> list[str]:
    rows = [(k, v) for k, v in (data or {}).items() if v is not None and v != ""]
    if not rows:
        return []
    return [f"## {title}\n", "| | |\n|---|---|", *(f"| {cell(k)} | {_value(v).replace('|', '&#124;')} |" for k, v in rows), ""]


def record_page(record: Record, page_uris: dict[str, str], pages_of_probe: list[str],
                siblings: list[Record] | None = None, records: dict[str, Record] | None = None,
                citing: list[tuple[str, dict]] | None = None) -> str:
    """Markdown for the page of one run record; `siblings` are the probe's records (its other runs
    are linked), `records` every record by path (the calibration record its ceilings come from),
    `citing` the (page id, claim) pairs whose measured claim cites this run."""
    data = record.data
    uri = record_uri(record.path)
    probe = str(data.get("probe") or record.path.split("/")[-2])
    env = data.get("environment") or {}
    json_name = posixpath.basename(record_json_uri(record.path))   # the site publishes the text inflated
    backs = ", ".join(f"[{p}]({rel_link(uri, page_uris[p])})" for p in pages_of_probe if p in page_uris)
    out = [
        # A JSON string is a YAML string: a run id like `x: [y` cannot break the frontmatter.
        f"---\ntitle: {json.dumps(str(data.get('run_id') or json_name))}\nsearch:\n  exclude: true\n---\n",
        f"# Run record {text(data.get('run_id') or json_name)}\n",
        f"Probe [{text(probe)}]({rel_link(uri, 'evidence/probes.md')}#{text(probe)}), mode {code(data.get('mode'))}, "
        f"status {badge('status-run', data.get('status'))}, started {text(data.get('started_at', '?'))}, "
        f"{fmt(data.get('wall_s')) if is_number(data.get('wall_s')) else '?'} s on "
        f"{text(env.get('gpu') or 'no GPU')}." + (f" Backs {backs}." if backs else "")
        + (f" Seed {code(_value(data['seed']))}." if data.get("seed") is not None else ""),
        f"\nThe record as the runner wrote it: [{json_name}]({json_name})"
        + (f" (the text of {text(posixpath.basename(record.path))}, inflated).\n" if is_gzip(record.path) else ".\n"),
    ]
    if data.get("reason"):
        out.append(f"!!! note \"Why\"\n    {text(data['reason'])}\n")
    cases = [c for c in data.get("cases") or [] if isinstance(c, dict)]
    if cases:
        protocol = data.get("protocol") if isinstance(data.get("protocol"), dict) else {}
        repeats = protocol.get("iterations")
        out += ["## Cases\n",
                (f"Each value is this one run's: the median of {_value(repeats)} timed repetitions of the case "
                 "(see Protocol); what a page states summarizes several runs (Claims from this run).\n"
                 if isinstance(repeats, int) and not isinstance(repeats, bool) else
                 "Each value is this one run's; what a page states summarizes several runs (Claims from this run).\n"),
                "| case | status | value | baseline | ratio | error | parameters |",
                "|---|---|---|---|---|---|---|"]
        for case in cases:
            head = case.get("headline") or {}
            corr = case.get("correctness") or {}
            value = f"{fmt(head['value'])} {cell(head.get('unit', ''))}".strip() if "value" in head else "—"
            base = (f"{cell(head.get('baseline'))} {fmt(head['baseline_value'])}"
                    if "baseline_value" in head else "—")
            error = f"rel {fmt(corr['rel_err'])}" if is_number(corr.get("rel_err")) else "—"
            params = _value(case.get("params") or {})
            out.append(f"| {code(case.get('id'))} | {badge('status-run', case.get('status'))} | {value} | {base} | "
                       f"{fmt_ratio(head.get('ratio'))} | {error} | {params.replace('|', '&#124;')} |")
        out.append("")
    instructions = data.get("instructions") or {}
    if instructions:
        out += ["## Instructions found\n", "| arch | found | missing |", "|---|---|---|"]
        for arch, found in instructions.items():
            found = found or {}
            out.append(f"| {cell(arch)} | {', '.join(code(i) for i in found.get('found') or []) or '—'} | "
                       f"{', '.join(code(i) for i in found.get('missing') or []) or '—'} |")
        out.append("")
    out += _pairs("Environment", env)
    out += _pairs("Protocol", data.get("protocol"))
    out += _ceilings(data.get("ceilings"), uri, records or {})
    control = data.get("negative_control")
    if isinstance(control, dict):
        out += _pairs("Negative control", {"description": control.get("description"),
                                           "failed the gate": control.get("failed_gate"),
                                           **(control.get("correctness") or {})})
    out += _claims_from(record, citing or [], uri, page_uris)
    out += _other_runs(record, siblings or [], uri)
    return "\n".join(out) + "\n"
