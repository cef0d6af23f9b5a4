"""One HTML page per run record: what ran where, how it was timed, and every case, with a link to
the JSON itself (published next to it)."""

from __future__ import annotations

import html
import json
import posixpath
from typing import Any

from kernelwiki.storage.records import Record
from kernelwiki.docsite.render import badge, cell, code, fmt, fmt_ratio, is_number, record_uri, rel_link, text


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    return fmt(value) if is_number(value) else html.escape(str(value))


def _pairs(title: str, data: dict | None) -> list[str]:
    rows = [(k, v) for k, v in (data or {}).items() if v is not None and v != ""]
    if not rows:
        return []
    return [f"## {title}\n", "| | |\n|---|---|", *(f"| {cell(k)} | {_value(v).replace('|', '&#124;')} |" for k, v in rows), ""]


def record_page(record: Record, page_uris: dict[str, str], pages_of_probe: list[str]) -> str:
    """Markdown for the page of one run record."""
    data = record.data
    uri = record_uri(record.path)
    probe = str(data.get("probe") or record.path.split("/")[-2])
    env = data.get("environment") or {}
    json_name = posixpath.basename(record.path)
    backs = ", ".join(f"[{p}]({rel_link(uri, page_uris[p])})" for p in pages_of_probe if p in page_uris)
    out = [
        # A JSON string is a YAML string: a run id like `x: [y` cannot break the frontmatter.
        f"---\ntitle: {json.dumps(str(data.get('run_id') or json_name))}\nsearch:\n  exclude: true\n---\n",
        f"# Run record {text(data.get('run_id') or json_name)}\n",
        f"Probe [{text(probe)}]({rel_link(uri, 'evidence/probes.md')}#{text(probe)}), mode {code(data.get('mode'))}, "
        f"status {badge('status-run', data.get('status'))}, started {text(data.get('started_at', '?'))}, "
        f"{fmt(data.get('wall_s')) if is_number(data.get('wall_s')) else '?'} s on "
        f"{html.escape(str(env.get('gpu') or 'no GPU'))}." + (f" Backs {backs}." if backs else ""),
        f"\nThe record as the runner wrote it: [{json_name}]({json_name}).\n",
    ]
    if data.get("reason"):
        out.append(f"!!! note \"Why\"\n    {html.escape(str(data['reason']))}\n")
    cases = [c for c in data.get("cases") or [] if isinstance(c, dict)]
    if cases:
        out += ["## Cases\n", "| case | status | value | baseline | ratio | error | parameters |",
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
    out += _pairs("Ceilings", data.get("ceilings"))
    control = data.get("negative_control")
    if isinstance(control, dict):
        out += _pairs("Negative control", {"description": control.get("description"),
                                           "failed the gate": control.get("failed_gate"),
                                           **(control.get("correctness") or {})})
    return "\n".join(out) + "\n"
