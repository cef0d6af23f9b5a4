"""The headline strip under a page's first sentence: its key measured numbers against their
strongest baseline, with the GPU, the date and a link to the record, before any code or table.

Kernel pages summarise their kernel probes' latest runs (geomean and worst case per probe, every
set in a folded table); other measured pages show their first record-backed claims.
"""

from __future__ import annotations

import html

from kernelwiki.docsite.render import claim_anchor, fmt, fmt_ratio, href, is_number, record_uri, text
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
    whole = overall(sets)
    variant = whole is None
    if whole is None:
        whole = SetSummary(spec.id, "all sets", True, tuple(c for s in sets for c in s.cases))
    worst = whole.worst
    top = max(whole.cases, key=lambda c: c.value)
    label = "teaching variant" if variant else "kernel"
    base = f" vs {text(top.baseline)} {fmt(top.baseline_value)}" if top.baseline_value is not None else ""
    return (f'<li><b>{text(spec.id)}</b> <span class="kw-note">({label})</span>: geomean '
            f"<b>{fmt_ratio(whole.geomean)}</b> {text(', '.join(whole.baselines))} over {len(whole.cases)} cases; "
            f"worst <b>{fmt_ratio(worst.ratio)}</b> <code>{text(worst.case)}</code>; fastest "
            f"{fmt(top.value)} {text(top.unit)}{base} <code>{text(top.case)}</code> {_when(record, src_uri)}</li>")


def _sets_table(runs: list[tuple[ProbeSpec, Record, list[SetSummary]]]) -> str:
    rows = []
    for spec, _, sets in runs:
        for s in sets:
            worst = s.worst
            note = ' <span class="kw-note">(teaching variant)</span>' if s.variant else ""
            rows.append(f"<tr><td>{text(spec.id)}</td><td>{text(s.name or '—')}{note}</td>"
                        f'<td class="kw-num">{len(s.cases)}</td><td class="kw-num">{fmt_ratio(s.geomean)}</td>'
                        f'<td class="kw-num">{fmt_ratio(worst.ratio)} <code>{text(worst.case)}</code></td>'
                        f"<td>{text(', '.join(s.baselines))}</td></tr>")
    return ('<details class="kw-fold"><summary>every case set</summary><div class="kw-claims"><table>'
            "<thead><tr><th>probe</th><th>set</th><th>cases</th><th>geomean</th><th>worst</th><th>baseline</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div></details>")


def kernel_strip(runs: list[tuple[ProbeSpec, Record, list[SetSummary]]], src_uri: str) -> str:
    """The strip of a kernel page: one line per kernel probe, the sets folded below."""
    if not runs:
        return ""
    lines = "".join(_line(spec, record, sets, src_uri) for spec, record, sets in runs)
    return (f'<div class="kw-strip" markdown="0">\n<p class="kw-strip-title">Measured (ours ÷ the strongest '
            f"baseline, per case)</p><ul>{lines}</ul>{_sets_table(runs)}\n</div>\n")


def claims_strip(claims: list[dict], src_uri: str) -> str:
    """The strip of another measured page: its first record-backed claims with their baseline."""
    measured = [c for c in claims if c.get("evidence") == "measured" and c.get("record") and is_number(c.get("value"))
                and not c.get("candidate")]
    if not measured:
        return ""
    items = []
    for claim in measured[:MAX_CLAIMS]:
        baseline = claim.get("baseline") if isinstance(claim.get("baseline"), dict) else None
        ratio = (f" — {fmt_ratio(claim['ratio'])} {text(baseline.get('name'))}"
                 if baseline and is_number(claim.get("ratio")) else "")
        where = " · ".join(text(x) for x in (claim.get("gpu"), str(claim.get("measured_at") or "")[:10]) if x)
        items.append(f'<li><a href="#{claim_anchor(str(claim.get("id")))}">{fmt(claim["value"])} '
                     f'{text(claim.get("unit", ""))}</a>{ratio} <code>{html.escape(str(claim.get("id")))}</code> '
                     f'<span class="kw-note">{where} · <a href="{text(href(src_uri, record_uri(str(claim["record"]))))}">'
                     f"record</a></span></li>")
    return (f'<div class="kw-strip" markdown="0">\n<p class="kw-strip-title">Measured here</p>'
            f"<ul>{''.join(items)}</ul>\n</div>\n")
