"""The headline strip under a page's first sentence: its key measured numbers against their
strongest baseline, with the GPU, the date and a link to the record, before any code or table.

Kernel pages summarise their kernel probes' latest runs (per probe, one geomean and worst case per
baseline, every set in a folded table); other measured pages show their headline claim and their
first record-backed claims, each with its shape.
"""

from __future__ import annotations

import html

from kernelwiki.docsite.render import claim_anchor, claim_figure, fmt, href, is_number, record_uri, text
from kernelwiki.docsite.summary import SetSummary, overall
from kernelwiki.harness.env import short_gpu_name
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record

MAX_CLAIMS = 3


def _when(record: Record, src_uri: str) -> str:
    gpu = short_gpu_name((record.data.get("environment") or {}).get("gpu")) or "GPU"
    return (f'<span class="kw-note">{text(gpu)} · {text(record.started[:10])} · '
            f'<a href="{text(href(src_uri, record_uri(record.path)))}">record</a></span>')


def _line(spec: ProbeSpec, record: Record, sets: list[SetSummary], src_uri: str) -> str:
    aggregates = overall(sets)
    variant = aggregates[0].variant
    label = "teaching variant" if variant else "kernel"
    cases = [c for a in aggregates for c in a.cases if not c.aggregate] or [c for a in aggregates for c in a.cases]
    top = max(cases, key=lambda c: c.value)
    base = f" vs {text(top.baseline)} {fmt(top.baseline_value)}" if top.baseline_value is not None else ""
    each = "; ".join(a.html() for a in aggregates)
    return (f'<li><b>{text(spec.id)}</b> <span class="kw-note">({label})</span>: {each}; fastest '
            f"{fmt(top.value)} {text(top.unit)}{base} <code>{text(top.label)}</code> {_when(record, src_uri)}</li>")


def _sets_table(runs: list[tuple[ProbeSpec, Record, list[SetSummary]]]) -> str:
    rows = []
    for spec, _, sets in runs:
        for s in sets:
            note = ' <span class="kw-note">(teaching variant)</span>' if s.variant else ""
            for a in s.aggregates:
                rows.append(f"<tr><td>{text(spec.id)}</td><td>{text(s.name or '—')}{note}</td>"
                            f"<td>{text(a.baseline)}</td><td>{a.html()}</td></tr>")
    return ('<details class="kw-fold"><summary>every case set, per baseline</summary><div class="kw-claims"><table>'
            "<thead><tr><th>probe</th><th>set</th><th>baseline</th><th>ours ÷ baseline</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div></details>")


def kernel_strip(runs: list[tuple[ProbeSpec, Record, list[SetSummary]]], src_uri: str) -> str:
    """The strip of a kernel page: one line per kernel probe (one geomean per baseline), the sets folded below."""
    if not runs:
        return ""
    lines = "".join(_line(spec, record, sets, src_uri) for spec, record, sets in runs)
    return (f'<div class="kw-strip" markdown="0">\n<p class="kw-strip-title">Measured (ours ÷ the strongest '
            f"baseline, per case, summarised per baseline)</p><ul>{lines}</ul>{_sets_table(runs)}\n</div>\n")


def claims_strip(claims: list[dict], src_uri: str, headline: str | None = None) -> str:
    """The strip of another measured page: its headline claim (`headline`, the page's own choice)
    and its first record-backed claims, each with its shape and baseline (render.claim_figure)."""
    measured = [c for c in claims if c.get("evidence") == "measured" and c.get("record") and is_number(c.get("value"))
                and not c.get("candidate")]
    measured.sort(key=lambda c: c.get("id") != headline)
    if not measured:
        return ""
    items = []
    for claim in measured[:MAX_CLAIMS]:
        where = " · ".join(text(x) for x in (claim.get("gpu"), str(claim.get("measured_at") or "")[:10]) if x)
        items.append(f'<li><a href="#{claim_anchor(str(claim.get("id")))}">{claim_figure(claim, claims)}</a> '
                     f'<code>{html.escape(str(claim.get("id")))}</code> '
                     f'<span class="kw-note">{where} · <a href="{text(href(src_uri, record_uri(str(claim["record"]))))}">'
                     f"record</a></span></li>")
    return (f'<div class="kw-strip" markdown="0">\n<p class="kw-strip-title">Measured here</p>'
            f"<ul>{''.join(items)}</ul>\n</div>\n")
