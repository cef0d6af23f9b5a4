"""The pages the site generates from the wiki: home, evidence dashboard, probe catalogue,
architecture x page coverage, footgun index, symptom index, tags index."""

from __future__ import annotations

import html

from kernelwiki.model.claims import page_claims
from kernelwiki.storage.index import Entry
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record, latest_by
from kernelwiki.docsite.render import (LEVEL_TEXT, STATUS_TEXT, badge, cell, code, fmt, fmt_ratio, is_number,
                                       prose, record_uri, rel_link, text)
from kernelwiki.harness.env import short_gpu_name
from kernelwiki.docsite import summary

SECTION_TITLES = {"hardware": "Hardware", "kernels": "Kernels", "techniques": "Techniques",
                  "footguns": "Footguns", "languages": "Languages", "sources": "Sources"}


def page_uri(entry: Entry) -> str:
    return entry.rel.removeprefix("wiki/")


def headline_rows(probes: dict[str, ProbeSpec], records: dict[str, list[Record]],
                  ids: dict[str, Entry], titles: dict[str, str]) -> list[str]:
    """Per kernel probe, its latest run over the cases of the kernel page it links (the cases that
    page's strip summarises, so the two agree): one row per baseline, with the geomean and the
    worst case of ours over that baseline (never the best case, never two baselines in one
    geomean), teaching variants labelled as such."""
    uri = "index.md"
    rows = []
    for spec in probes.values():
        pages = [p for p in spec.pages if p in ids]
        page = next((p for p in pages if ids[p].get("type") == "kernel"), pages[0] if pages else None)
        found = summary.kernel_runs({spec.id: spec}, records, page)
        if not found:
            continue
        _, record, sets = found[0]
        name = (f"[{cell(titles.get(page) or ids[page].get('title'))}]({rel_link(uri, page_uri(ids[page]))}#measurements)"
                if page else cell(spec.id))
        if summary.is_variant(spec):
            name += " — *teaching variant, not the kernel*"
        env = record.data.get("environment") or {}
        when = (f"{cell(short_gpu_name(env.get('gpu')))} [{cell(record.started[:10])}]"
                f"({rel_link(uri, record_uri(record.path))})")
        for aggregate in summary.overall(sets):
            rows.append(f"| {name} | {cell(aggregate.baseline)} | {aggregate.html().replace('|', '&#124;')} | {when} |")
    return rows


def home(entries: list[Entry], records: dict[str, list[Record]], probes: dict[str, ProbeSpec],
         ids: dict[str, Entry], titles: dict[str, str]) -> str:
    measured = sum(1 for e in entries if e.get("evidence_level") == "measured")
    record_count = sum(len(r) for r in records.values())
    levels = "\n".join(f"| {badge('level', level)} | {text} |" for level, text in LEVEL_TEXT.items())
    statuses = "\n".join(f"| {badge('status', status)} | {text} |" for status, text in STATUS_TEXT.items())
    sections = "\n".join(
        f"- **{title}** — " + ", ".join(f"[{text(e.get('title'))}]({page_uri(e)})" for e in entries
                                        if page_uri(e).startswith(section + "/"))
        for section, title in SECTION_TITLES.items() if section != "sources")
    headlines = headline_rows(probes, records, ids, titles)
    headline_table = ("## Headline measurements\n\nEach kernel probe's latest run over the cases its kernel page "
                      "shows (the held-out ones included): per baseline, the geometric mean and the worst case "
                      "of ours ÷ that baseline, timed in the same process, case by case (a case's baseline is "
                      "the strongest one that ran in it; cases of different baselines are never averaged "
                      "together). Above 1× is faster than the baseline.\n\n<div class=\"kw-home-table\" markdown>\n\n"
                      "| kernel | baseline | ours ÷ baseline | GPU, date |\n"
                      "|---|---|---|---|\n" + "\n".join(headlines) + "\n\n</div>\n") if headlines else ""
    return f"""---
title: kernelwiki
---
# kernelwiki

A knowledge base about fast GPU kernels on NVIDIA Hopper (sm_90a) and Blackwell (sm_100a) in which
every number is either **cited** — it names the source page it comes from — or **measured** by an
executable probe in this repository, with the GPU and toolchain it ran on. Pages show the
reported value and our reproduction side by side. {len(entries)} pages, {measured} of them backed
by measurements, {record_count} run records.

Evidence pages: [dashboard](evidence/index.md) (every claim), [probe catalogue](evidence/probes.md),
[architecture coverage](evidence/coverage.md), [footguns](evidence/footguns.md), [tags](evidence/tags.md).

{headline_table}
## Reading the evidence

Every page opens with an evidence card. Evidence is kept per architecture, weakest first:

| level | meaning |
|---|---|
{levels}

A Blackwell page measured only on Hopper does not become `measured`: the level of the page is
the level of its first-listed (primary) architecture. The status says how current the evidence is:

| status | meaning |
|---|---|
{statuses}

## Where to start

{sections}
"""


def dashboard(entries: list[Entry]) -> str:
    """Every page's claims counted by evidence level, then every claim (behind a fold: a thousand rows)."""
    uri = "evidence/index.md"
    levels = list(LEVEL_TEXT)
    counts = ["| page | claims | " + " | ".join(badge("level", level) for level in levels) + " |",
              "|---|---|" + "---|" * len(levels)]
    for entry in entries:
        claims = [c for c in entry.get("claims") or [] if isinstance(c, dict)]
        if claims:
            counts.append(f"| [{cell(entry.id)}]({rel_link(uri, page_uri(entry))}) | {len(claims)} | " + " | ".join(
                str(sum(1 for c in claims if c.get("evidence") == level) or "") for level in levels) + " |")
    rows = ["| page | claim | level | value | GPU | arch | date | cites |", "|---|---|---|---|---|---|---|---|"]
    for entry in entries:
        for claim in page_claims(entry.meta or {}):
            cites = claim.get("source") or ""
            if claim.get("record"):
                cites = f"[record]({rel_link(uri, record_uri(claim['record']))})"
            value = cell(f"{claim.get('value')} {claim.get('unit', '')}".strip())
            cites = cites if claim.get("record") else cell(cites)
            rows.append(f"| [{cell(entry.id)}]({rel_link(uri, page_uri(entry))}) | {cell(claim.get('id'))} | "
                        f"{badge('level', claim.get('evidence'))} | {value} | {cell(claim.get('gpu', ''))} | "
                        f"{cell(claim.get('arch', ''))} | {cell(str(claim.get('measured_at', ''))[:10])} | {cites} |")
    return ("---\ntitle: Evidence dashboard\n---\n# Evidence dashboard\n\nEvery claim on every page, with its "
            "evidence level and what it cites: first counted per page, then each one.\n\n" + "\n".join(counts)
            + f'\n\n<details class="kw-fold" markdown="1">\n<summary>every claim ({len(rows) - 2}), with its value, '
            "GPU, architecture, date and what it cites</summary>\n\n" + "\n".join(rows) + "\n\n</details>\n")


def probe_catalogue(probes: dict[str, ProbeSpec], records: dict[str, list[Record]], ids: dict[str, Entry]) -> str:
    uri = "evidence/probes.md"
    out = ["---\ntitle: Probe catalogue\n---\n# Probe catalogue\n",
           "Each probe is an executable experiment; its latest record per GPU decides the status of the "
           "pages it backs. Run them with `kernelwiki probe run`.\n"]
    for spec in probes.values():
        pages = ", ".join(f"[{text(p)}]({rel_link(uri, page_uri(ids[p]))})" if p in ids else text(p) for p in spec.pages)
        claims = ", ".join(code(c) for c in spec.data.get("claims") or [])
        probe_records = records.get(spec.id, [])
        runs = [r for r in probe_records if r.data.get("mode") == "run"]
        out.append(f"## {spec.id}\n\n**{text(spec.data.get('title'))}** — kind {code(spec.kind)}, targets "
                   f"{text(', '.join(spec.archs))}. **Backs** {pages}" + (f" (claims {claims})" if claims else "") + ".  \n"
                   f"**Backed by** {len(runs)} run record{'s' if len(runs) != 1 else ''} on a GPU and "
                   f"{len(probe_records) - len(runs)} compile-only record{'s' if len(probe_records) - len(runs) != 1 else ''}.\n")
        headline = _headline_history(runs)
        if headline:
            out.append(headline)
        newest = latest_by(probe_records, lambda r: [((r.data.get("environment") or {}).get("gpu") or "no GPU", r.mode)])
        # What it measures and its latest records, behind a fold: 48 probes, each its own screen, were 30,000 px.
        out.append('<details class="kw-fold" markdown="1">\n<summary>what it measures, and its latest records'
                   f"</summary>\n\n{prose(spec.data.get('description', ''))}\n")
        if not newest:
            out.append("Not run yet.\n\n</details>\n")
            continue
        out.append("| GPU | mode | status | date | record |\n|---|---|---|---|---|")
        for (gpu, mode), record in sorted(newest.items()):
            link = rel_link(uri, record_uri(record.path))
            out.append(f"| {cell(gpu)} | {cell(mode)} | {badge('status-run', record.data.get('status'))} | "
                       f"{cell(record.started[:10])} | [{cell(record.path.rsplit('/', 1)[-1])}]({link}) |")
        out.append("\n</details>\n")
    return "\n".join(out) + "\n"


def _headline_history(runs: list[Record]) -> str:
    """The latest run's fastest case (value, baseline, ratio) and its ratio over the last runs."""
    if not runs:
        return ""
    best = None
    for case in runs[-1].data.get("cases") or []:
        head = case.get("headline") or {}
        if case.get("status") == "passed" and is_number(head.get("value")) and (
                best is None or head["value"] > best["headline"]["value"]):
            best = case
    if best is None:
        return ""
    head = best["headline"]
    line = f"**Headline** {code(best.get('id'))}: {fmt(head['value'])} {text(head.get('unit', ''))}".rstrip()
    if "baseline_value" in head:
        line += f", {fmt_ratio(head.get('ratio'))} {text(head.get('baseline'))}"
        ratios = []
        for record in runs[-5:]:
            case = next((c for c in record.data.get("cases") or [] if c.get("id") == best.get("id")), None)
            ratio = ((case or {}).get("headline") or {}).get("ratio")
            if is_number(ratio):
                ratios.append(f"{fmt_ratio(ratio)} ({text(record.started[5:10])})")
        if len(ratios) > 1:
            line += f"; last {len(ratios)} runs: " + " → ".join(ratios)
    return line + ".\n"


def coverage(entries: list[Entry], archs: list[str]) -> str:
    uri = "evidence/coverage.md"
    used = [a for a in archs if any(a in (e.get("evidence_by_arch") or {}) for e in entries)]
    rows = ["| page | " + " | ".join(used) + " |", "|---|" + "---|" * len(used)]
    for entry in entries:
        if entry.get("type") == "source":
            continue
        by_arch = entry.get("evidence_by_arch") or {}
        cells = " | ".join(badge("level", by_arch[a]) if a in by_arch else "" for a in used)
        rows.append(f"| [{cell(entry.id)}]({rel_link(uri, page_uri(entry))}) | {cells} |")
    return "---\ntitle: Architecture coverage\n---\n# Architecture × page coverage\n\n" \
           "The evidence level of every page on every architecture it covers.\n\n" + "\n".join(rows) + "\n"


def footgun_index(entries: list[Entry]) -> str:
    uri = "evidence/footguns.md"
    rows = ["| footgun | symptom | architectures | evidence |", "|---|---|---|---|"]
    for entry in entries:
        if entry.get("type") == "footgun":
            rows.append(f"| [{cell(entry.get('title'))}]({rel_link(uri, page_uri(entry))}) | "
                        f"{prose(entry.get('symptom') or entry.headline).replace('|', '&#124;')} | "
                        f"{cell(', '.join(map(str, entry.get('architectures') or [])))} | {badge('level', entry.get('evidence_level'))} |")
    return "---\ntitle: Footguns\n---\n# Footguns\n\nThings that crash, hang, give wrong results or " \
           "mislead benchmarks, each with a probe that shows it.\n\n" + "\n".join(rows) + "\n"


def symptom_index(entries: list[Entry]) -> str:
    """Every page's `symptoms` phrases, sorted, each with the pages that explain it: a reader who
    knows only what they see ("hangs", "slow at small M") finds the page. Every string is
    HTML-escaped (and its table bars escaped), since the phrases come from page frontmatter."""
    uri = "evidence/symptoms.md"
    by_symptom: dict[str, list[Entry]] = {}
    for entry in entries:
        symptoms = entry.get("symptoms")
        for symptom in symptoms if isinstance(symptoms, list) else []:
            if isinstance(symptom, str) and symptom.strip():
                by_symptom.setdefault(symptom.strip(), []).append(entry)

    def cell(text: object) -> str:
        return html.escape(str(text)).replace("|", "&#124;")

    rows = ["| symptom | explained by |", "|---|---|"]
    for symptom in sorted(by_symptom, key=str.lower):
        links = ", ".join(f"[{cell(e.get('title') or e.id)}]({rel_link(uri, page_uri(e))}) ({cell(e.get('type'))})"
                          for e in by_symptom[symptom])
        rows.append(f"| {cell(symptom)} | {links} |")
    return "---\ntitle: Symptoms\n---\n# Symptom index\n\nWhat you see, and the page that explains it. " \
           "Generated from the `symptoms` field of every page.\n\n" + "\n".join(rows) + "\n"


def tags_index() -> str:
    return "---\ntitle: Tags\n---\n# Tags\n\n<!-- material/tags -->\n"


STYLE = """
.kw-card { border: 1px solid var(--md-default-fg-color--lightest); border-radius: .3rem; margin: 0 0 1rem; }
.kw-card-table { margin: 0 !important; font-size: .7rem !important; }
.kw-card-table th { width: 8rem; text-align: left; }
.kw-badge { display: inline-block; padding: 0 .45em; border-radius: .6em; font-size: .65rem; font-weight: 700;
  color: #fff; background: #757575; white-space: nowrap; }
.kw-level-measured, .kw-status-verified, .kw-status-run-passed, .kw-status-run-compiled { background: #2e7d32; }
.kw-level-compiled { background: #1565c0; }
.kw-level-source-reported, .kw-status-stale { background: #ef6c00; }
.kw-level-spec, .kw-status-draft { background: #616161; }
.kw-status-regressed, .kw-status-run-incorrect, .kw-status-run-failed, .kw-status-run-crashed,
.kw-status-run-timeout, .kw-status-run-control-passed, .kw-status-run-compile-failed { background: #c62828; }
.kw-arch { font-family: var(--md-code-font-family); margin-left: .4em; }
.kw-note { opacity: .7; margin-left: .4em; }
.kw-runs { margin-left: 0; font-size: .85em; white-space: normal; }
.kw-claims { overflow-x: auto; margin: 0 0 1rem; }
.kw-claims table { font-size: .64rem; border-collapse: collapse; width: 100%; }
.kw-claims th, .kw-claims td { padding: .3em .5em; vertical-align: top; text-align: left;
  border-bottom: 1px solid var(--md-default-fg-color--lightest); }
.kw-claims th { font-weight: 700; }
.kw-claims td.kw-num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
.kw-claims .kw-badge { font-size: .55rem; }
.kw-where { opacity: .75; display: block; }
.md-typeset details.kw-cond { display: block; margin: 0; padding: 0; border: 0; box-shadow: none; background: none;
  font-size: inherit; }
.md-typeset details.kw-cond > summary { padding: 0; margin: 0; background: none; border: 0; font-weight: 400;
  color: var(--md-typeset-a-color); cursor: pointer; display: inline; }
.md-typeset details.kw-cond > summary::before, .md-typeset details.kw-cond > summary::after { display: none; }
.kw-facts { margin: 0 !important; padding-left: 1em; }
.kw-facts li { margin: 0 !important; }

/* Navigation status icons, one shape and colour per status (inline SVG: no request). */
.md-status--verified::after { -webkit-mask-image: url("data:image/svg+xml;charset=utf-8,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24'%3E%3Cpath d='M12 2C6.5 2 2 6.5 2 12s4.5 10 10 10 10-4.5 10-10S17.5 2 12 2m-2 15-5-5 1.41-1.41L10 14.17l7.59-7.59L19 8z'/%3E%3C/svg%3E"); mask-image: url("data:image/svg+xml;charset=utf-8,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24'%3E%3Cpath d='M12 2C6.5 2 2 6.5 2 12s4.5 10 10 10 10-4.5 10-10S17.5 2 12 2m-2 15-5-5 1.41-1.41L10 14.17l7.59-7.59L19 8z'/%3E%3C/svg%3E"); background-color: #2e7d32; }
.md-status--draft::after { -webkit-mask-image: url("data:image/svg+xml;charset=utf-8,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24'%3E%3Cpath d='M20.71 7.04c.39-.39.39-1.04 0-1.41l-2.34-2.34c-.37-.39-1.02-.39-1.41 0l-1.84 1.83 3.75 3.75M3 17.25V21h3.75L17.81 9.93l-3.75-3.75z'/%3E%3C/svg%3E"); mask-image: url("data:image/svg+xml;charset=utf-8,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24'%3E%3Cpath d='M20.71 7.04c.39-.39.39-1.04 0-1.41l-2.34-2.34c-.37-.39-1.02-.39-1.41 0l-1.84 1.83 3.75 3.75M3 17.25V21h3.75L17.81 9.93l-3.75-3.75z'/%3E%3C/svg%3E"); background-color: #757575; }
.md-status--regressed::after { -webkit-mask-image: url("data:image/svg+xml;charset=utf-8,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24'%3E%3Cpath d='M13 14h-2V9h2m0 9h-2v-2h2M1 21h22L12 2z'/%3E%3C/svg%3E"); mask-image: url("data:image/svg+xml;charset=utf-8,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24'%3E%3Cpath d='M13 14h-2V9h2m0 9h-2v-2h2M1 21h22L12 2z'/%3E%3C/svg%3E"); background-color: #c62828; }
.md-status--stale::after { -webkit-mask-image: url("data:image/svg+xml;charset=utf-8,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24'%3E%3Cpath d='M12 20a8 8 0 0 0 8-8 8 8 0 0 0-8-8 8 8 0 0 0-8 8 8 8 0 0 0 8 8m0-18a10 10 0 0 1 10 10 10 10 0 0 1-10 10C6.47 22 2 17.5 2 12A10 10 0 0 1 12 2m.5 5v5.25l4.5 2.67-.75 1.23L11 13V7z'/%3E%3C/svg%3E"); mask-image: url("data:image/svg+xml;charset=utf-8,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24'%3E%3Cpath d='M12 20a8 8 0 0 0 8-8 8 8 0 0 0-8-8 8 8 0 0 0-8 8 8 8 0 0 0 8 8m0-18a10 10 0 0 1 10 10 10 10 0 0 1-10 10C6.47 22 2 17.5 2 12A10 10 0 0 1 12 2m.5 5v5.25l4.5 2.67-.75 1.23L11 13V7z'/%3E%3C/svg%3E"); background-color: #ef6c00; }
.md-typeset a > code { color: var(--md-typeset-a-color); }  /* cross-linked ids look like links */
.kw-strip { border-left: .2rem solid var(--md-primary-fg-color); padding: .1rem .8rem; margin: 0 0 1rem; }
.kw-strip-title { font-weight: 700; margin: .3rem 0 !important; }
.kw-strip ul { margin-top: .2rem !important; }
.kw-who { display: inline-block; font-size: .6rem; font-weight: 700; padding: 0 .35em; margin-right: .3em;
  border: 1px solid var(--md-default-fg-color--lighter); border-radius: .3em; }
.kw-claims tr.kw-set th { background: var(--md-default-fg-color--lightest); font-weight: 700; }
.kw-cond { display: block; opacity: .75; font-size: .95em; }
.md-typeset details.kw-fold { border: 1px solid var(--md-default-fg-color--lightest); box-shadow: none; }
.md-typeset details.kw-fold > summary { background: none; font-weight: 700; }
.md-typeset details.kw-fold > summary::before { background-color: var(--md-default-fg-color--light); }
.kw-status-verified-compiled { background: #1565c0; }
.kw-home-table td:last-child, .kw-home-table th:last-child { white-space: nowrap; }
.kw-home-table table { font-size: .68rem !important; }
.kw-home-table .kw-note { display: block; margin-left: 0; word-break: break-all; }
.kw-chart { display: block; margin: .5rem auto 1rem; max-width: 100%; }
/* the tags index: each tag a short heading and its pages on one line, not a screen per tag */
.md-typeset:has(> h1#tags) h2 { font-size: .8rem; margin: .8em 0 .1em; }
.md-typeset:has(> h1#tags) ul { margin: 0 0 .4em; padding: 0; }
.md-typeset:has(> h1#tags) ul li { display: inline; margin: 0 1em 0 0; }
.md-typeset:has(> h1#tags) ul li::before { display: none; }
[data-md-color-scheme="slate"] .kw-badge { filter: brightness(.9); }
"""
