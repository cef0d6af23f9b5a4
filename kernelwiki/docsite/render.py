"""HTML and Markdown for the site, as pure functions of the wiki's pages, probes and records.

Markdown links between pages are relative to the .md file (mkdocs rewrites them and `--strict`
checks them); links inside raw HTML are relative to the page URL (`href`), since mkdocs leaves raw
HTML alone. tests/test_site.py crawls the built site for both kinds.
"""

from __future__ import annotations

import html
import math
import posixpath
import re
from typing import Any

from kernelwiki.model.claims import ClaimRow, claim_rows, page_claims, runs_text
from kernelwiki.model.spans import find_spans
from kernelwiki.storage.record_file import without_suffix
from kernelwiki.docsite.sanitize import code_block

LEVEL_TEXT = {
    "spec": "stated by vendor documentation",
    "source-reported": "reported by an upstream source under stated conditions",
    "compiled": "our probe compiled for the architecture and found the expected instructions",
    "measured": "our probe ran on matching hardware, passed its correctness gate and negative control",
}
STATUS_TEXT = {
    "draft": "incomplete: no probe backs it yet, a probe has not run, or a goal the page states is missed",
    "verified": "every linked probe's latest record passed, every claim cites a source or a record",
    "regressed": "a linked probe's latest record failed, or fell more than 10% behind the previous one",
    "stale": "the newest evidence is old, or from another toolchain than the project pins",
}
_FACT = re.compile(r"fact:([^:,]+):(.*?)(?=, fact:|$)")


_MARKDOWN = {ord(c): f"&#{ord(c)};" for c in "[]{}"}
"""Markdown's link, image and attribute-list brackets: as entities, `[x](javascript:...)`,
`![p](http://host/p.png)` and `{: onclick=... }` stay text."""


def text(value: Any) -> str:
    """Untrusted text (anything from a page, spec or record) for HTML or Markdown: markup
    characters as entities, so that no value ever becomes a tag, an attribute, a link or an image."""
    return html.escape(str(value)).translate(_MARKDOWN)


def cell(value: Any) -> str:
    """Untrusted text for a Markdown table cell: escaped, and a `|` cannot end the cell."""
    return text(value).replace("|", "&#124;")


def code(value: Any) -> str:
    """Untrusted text as a Markdown code span (Markdown escapes what it holds), fenced with more
    backticks than the value has in a row, so that a backtick in it cannot end the span early."""
    value = " ".join(str(value).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)


def prose(value: Any) -> str:
    """Untrusted prose (a summary, a fact, a description) for Markdown: markup characters outside
    code spans as entities; code spans are left to Markdown, which escapes what they hold."""
    value, out, start = str(value), [], 0
    for match in _CODE_SPAN.finditer(value):
        out += [text(value[start:match.start()]), match.group()]
        start = match.end()
    return "".join(out + [text(value[start:])])


def web_url(value: Any) -> str | None:
    """An http(s) URL, escaped for an attribute, or None (a javascript: or data: URL is never a link)."""
    url = str(value or "")
    return html.escape(url) if re.match(r"https?://[^\s]+$", url, re.I) else None


def rel_link(from_uri: str, to_uri: str) -> str:
    """Relative link from one docs file to another (both docs-relative, e.g. 'hardware/wgmma.md'),
    for Markdown links: mkdocs rewrites them to page URLs and `--strict` checks them."""
    return posixpath.relpath(to_uri, posixpath.dirname(from_uri) or ".")


def page_url(src_uri: str) -> str:
    """The URL (site-relative) mkdocs gives a docs file with directory URLs: 'a/b.md' -> 'a/b/'."""
    if not src_uri.endswith(".md"):
        return src_uri
    stem = src_uri.removesuffix(".md")
    if stem == "index" or stem.endswith("/index"):
        return stem.removesuffix("index")
    return stem + "/"


def href(from_uri: str, to_uri: str, anchor: str = "") -> str:
    """Relative URL for raw HTML (which mkdocs does not rewrite): from the page URL of one docs
    file to the page URL of another, so that it resolves in the browser under any site URL."""
    target = page_url(to_uri)
    link = posixpath.relpath("/" + target, "/" + page_url(from_uri))
    if target.endswith("/") or not target:
        link = "./" if link == "." else link + "/"
    return link + (f"#{anchor}" if anchor else "")


def record_uri(record_path: str) -> str:
    """The docs URI of the HTML page of a run record ('artifacts/evidence/p/r.json.gz' or '.json' ->
    'records/p/r.md')."""
    return "records/" + without_suffix(record_path.removeprefix("artifacts/evidence/")) + ".md"


def record_json_uri(record_path: str) -> str:
    """Where the site publishes a run record's JSON text, inflated whatever the form of its file
    ('artifacts/evidence/p/r.json.gz' -> 'records/p/r.json'): a browser shows it, and the address
    stays the one the record had before it was compressed."""
    return "records/" + without_suffix(record_path.removeprefix("artifacts/evidence/")) + ".json"


def claim_anchor(claim_id: str) -> str:
    return "claim-" + re.sub(r"[^A-Za-z0-9_-]", "-", claim_id)


def fmt(value: Any) -> str:
    """A number as a reader wants it in a table: 3-4 significant digits, no exponent below 10^6."""
    if not is_number(value):
        return text(value)
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    magnitude = abs(value)
    if magnitude >= 1e6 or magnitude < 1e-3:
        return f"{value:.3g}"
    if magnitude >= 1000:
        return f"{value:.0f}"
    digits = 3 - int(math.floor(math.log10(magnitude))) if magnitude else 0
    return f"{value:.{max(digits, 0)}f}".rstrip("0").rstrip(".") if digits > 0 else f"{value:.0f}"


def fmt_ratio(value: Any) -> str:
    return f"{value:.3g}×" if is_number(value) else "—"


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def badge(kind: str, value: str | None) -> str:
    value = value or "none"
    return f'<span class="kw-badge kw-{kind}-{html.escape(value)}">{html.escape(value)}</span>'


def own_evidence(meta: dict) -> tuple[dict | None, str | None]:
    """The page's headline measurement and the date of the page's own newest measured claim: the
    card speaks for this page's evidence, not for the newest record of any probe it links. The
    headline is the claim the page names in `headline` (a ping-pong page's ping-pong over
    cooperative), else its first record-backed claim with a baseline ratio, else its first measured
    claim."""
    measured = [c for c in page_claims(meta) if c.get("evidence") == "measured" and c.get("record")
                and is_number(c.get("value"))]
    named = next((c for c in measured if c.get("id") == meta.get("headline")), None)
    # A teaching variant's measurement is not the page's headline (its probe id ends in -naive).
    kernel = [c for c in measured if "-naive/" not in str(c.get("record"))] or measured
    # A case set's summary first (its geomean over the set; a held-out set before the tuning set),
    # then a throughput against its baseline (not a profiler counter), then any ratio, then any value.
    def summary_rank(claim: dict) -> int:
        conditions = str(claim.get("conditions") or "")
        if "headline_statistic=geomean" not in conditions:
            return 2
        return 0 if "set=held-out" in conditions else 1

    ranked = sorted(kernel, key=lambda c: (summary_rank(c), c.get("candidate") is not None,
                                           not is_number(c.get("ratio")), not str(c.get("unit", "")).endswith("/s")))
    head = named or (ranked[0] if ranked else None)
    dates = sorted(str(c.get("measured_at"))[:10] for c in measured if c.get("measured_at"))
    return head, (dates[-1] if dates else None)


def is_geomean(claim: dict) -> bool:
    """A claim whose value is a geomean over shapes (a held-out set's summary case): its absolute
    value names no shape, so only its ratio is shown as a headline."""
    return "headline_statistic=geomean" in str(claim.get("conditions") or "")


def worst_of_geomean(claim: dict, claims: list[dict]) -> dict | None:
    """The metric claim (`ID.worst_ratio`, or `ID.<chooser>_worst_ratio` of the chooser whose
    `ID.<chooser>_geomean_ratio` is the claim's ratio) that gives a geomean claim's worst shape."""
    if not is_number(claim.get("ratio")):
        return None
    own = {str(c.get("id"))[len(str(claim.get("id"))) + 1:]: c for c in claims
           if isinstance(c, dict) and str(c.get("id", "")).startswith(f"{claim.get('id')}.") and is_number(c.get("value"))}
    if "worst_ratio" in own:
        return own["worst_ratio"]
    for name, other in own.items():
        if (name.endswith("_geomean_ratio") and "_class_" not in name
                and abs(float(other["value"]) - float(claim["ratio"])) <= 5e-4):
            return own.get(f"{name[:-len('_geomean_ratio')]}_worst_ratio")
    return None


def claim_figure(claim: dict, claims: list[dict] | None = None) -> str:
    """A measured claim as a headline: the value with its shape (or case) and its ratio to its
    baseline; for a geomean over shapes, the ratio alone, over how many shapes, and its worst shape's
    ratio where `claims` (the page's) hold it as a metric claim. Escaped HTML."""
    baseline = claim.get("baseline") if isinstance(claim.get("baseline"), dict) else None
    ratio = (f"{fmt_ratio(claim['ratio'])} {text(baseline.get('name', 'baseline'))}"
             if baseline and is_number(claim.get("ratio")) else "")
    if is_geomean(claim) and ratio:
        shapes = re.search(r"(?:^|, )(?:count|shapes)=(\d+)", str(claim.get("conditions") or ""))
        over = f" over {shapes.group(1)} shapes" if shapes else ""
        name = text(baseline.get("name", "baseline"))
        worst = worst_of_geomean(claim, claims or [])
        low = f"; worst shape {fmt_ratio(worst['value'])}" if worst else ""
        return (f'<span class="kw-agg" data-baseline="{name}">geomean {fmt_ratio(claim["ratio"])} vs {name}{over}{low} '
                f'<span class="kw-note">(case {text(claim.get("case", ""))})</span></span>')
    where = claim.get("shape") or claim.get("case") or ""
    value = f"{fmt(claim['value'])} {text(claim.get('unit', ''))}".strip()
    return f"{value}{f' — {ratio}' if ratio else ''} <span class=\"kw-note\">{text(where)}</span>"


def evidence_card(meta: dict, src_uri: str) -> str:
    """The box every page opens with: evidence per architecture, status, the headline measurement
    and the record it comes from, and the date of this page's own evidence."""
    by_arch = meta.get("evidence_by_arch") or {}
    archs = [a for a in meta.get("architectures") or [] if isinstance(a, str)]
    arch_cells = " ".join(f'<span class="kw-arch">{html.escape(a)}</span> {badge("level", by_arch.get(a))}'
                          for a in archs) or "—"
    head, date = own_evidence(meta)
    status = meta.get("status") or ""
    if status == "verified" and head is None:
        # Verified means every linked probe passed; with nothing measured that is a compile, not a
        # measurement, and the badge says so instead of showing green beside "not measured yet".
        status_cell = (f'<span title="{html.escape(STATUS_TEXT["verified"])}">'
                       '<span class="kw-badge kw-status-verified-compiled">verified: compiled only</span></span>')
    else:
        status_cell = f'<span title="{html.escape(STATUS_TEXT.get(status, ""))}">{badge("status", meta.get("status"))}</span>'
    rows = [("Evidence", arch_cells), ("Status", status_cell)]
    if head is not None:
        where = " · ".join(text(x) for x in (head.get("gpu"), head.get("dtype")) if x)
        rows.append(("Headline", f'<a href="#{claim_anchor(str(head.get("id")))}">{claim_figure(head, meta.get("claims") or [])}</a> '
                                 f'<span class="kw-note">{where}</span> '
                                 f'<a href="{text(href(src_uri, record_uri(str(head["record"]))))}">record</a>'))
        rows.append(("Measured on", html.escape(str(meta.get("measured_on") or head.get("gpu") or ""))
                     + (f' <span class="kw-note">(this page\'s evidence: {html.escape(date)})</span>' if date else "")))
    else:
        rows.append(("Measured on", "not measured yet"))
    if meta.get("requires_sm"):
        rows.append(("Requires", html.escape(f"sm {meta['requires_sm']}")))
    if meta.get("probes"):
        links = ", ".join(f'<a href="{href(src_uri, "evidence/probes.md", text(p))}">{text(p)}</a>' for p in meta["probes"])
        rows.append(("Probes", links))
    body = "\n".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<div class="kw-card" markdown="0">\n<table class="kw-card-table">\n{body}\n</table>\n</div>\n'


def source_card(meta: dict) -> str:
    url = web_url(meta.get("url"))
    where = f'<a href="{url}">{url}</a>' if url else text(meta.get("url") or meta.get("location") or "")
    rows = [("Kind", meta.get("kind")), ("Where", where),
            ("Authors", ", ".join(text(a) for a in meta.get("authors") or [])), ("Published", meta.get("published")),
            ("Retrieved", meta.get("retrieved")), ("Pinned at", meta.get("pin"))]
    body = "\n".join(f"<tr><th>{k}</th><td>{v if k in ('Where', 'Authors') else text(v)}</td></tr>"
                     for k, v in rows if v)
    facts = "\n".join(f"- {prose(fact)}" for fact in meta.get("facts") or [])
    return (f'<div class="kw-card" markdown="0">\n<table class="kw-card-table">\n{body}\n</table>\n</div>\n\n'
            f"**Facts taken from it**\n\n{facts}\n")


def claim_spans(markdown: str, claim_ids: set[str], src_uri: str) -> str:
    """Inline claim spans (`<!-- claim:ID -->text<!-- /claim -->`, filled by refresh) as their text,
    linked to the claim's row of the claims table. Only the spans refresh and validate see as spans
    (model.spans.find_spans): one inside a code block is an example and stays as written."""
    lines = markdown.splitlines(keepends=True)
    for span in sorted(find_spans(markdown), key=lambda s: (s.line, -s.start)):
        line = lines[span.line]
        shown = span.text if span.name not in claim_ids else \
            f'<a class="kw-claim-ref" href="#{claim_anchor(span.name)}">{span.text}</a>'
        lines[span.line] = line[:span.start] + shown + line[span.end:]
    return "".join(lines)


_SET = re.compile(r"(?:^|, )set=(.*?)(?=, [\w-]+=|$)")


def case_set(claim: dict | None) -> str:
    """The case set a claim's measurement belongs to (`set=` of its conditions; '' when none)."""
    match = _SET.search(str((claim or {}).get("conditions") or ""))
    return match.group(1) if match else ""


def natural_key(value: Any) -> list:
    """Sort key in which digit runs compare as numbers: 512 before 1024, 2x4096 before 16x4096."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part.lower())
            for part in re.split(r"(\d+)", str(value)) if part]


def claims_tables(meta: dict, src_uri: str, page_uris: dict[str, str]) -> str:
    """Source-reported (or spec) values next to our measurements of the same quantity: one compact
    table per unit (the unit in the header), rows grouped by case set and sorted numerically, the
    `reported` column only where a reported value exists, facts in a table of their own; all of it
    folded in a closed <details>, since the page's first screen is for the result."""
    claims = page_claims(meta)
    if not claims:
        return ""
    rows_all = claim_rows(claims)
    # Who a measurement belongs to, where one reported claim has several (ours and DeepGEMM's).
    shared = {}
    for row in rows_all:
        if row.reproduction is not None:
            shared.setdefault(id(row.label), []).append(row.reproduction)
    labelled = {id(m) for ms in shared.values() if len(ms) > 1 or any(m.get("candidate") for m in ms) for m in ms}
    groups: dict[str, list[ClaimRow]] = {}
    for row in rows_all:
        numeric = all(c is None or is_number(c.get("value")) for c in (row.reported, row.measured))
        groups.setdefault(str(row.label.get("unit") or "") if numeric else "\0facts", []).append(row)
    out = []
    for unit in sorted(groups, key=lambda u: (u == "\0facts", -len(groups[u]), u)):
        rows = groups[unit]
        if unit == "\0facts":
            head = "<tr><th>claim</th><th>value</th><th>evidence</th></tr>"
            body = [_fact_row(row.label, src_uri, page_uris) for row in rows]
        else:
            suffix = f" ({html.escape(unit)})" if unit else ""
            reported = any(row.reported is not None for row in rows)
            head = (f"<tr><th>claim</th>{f'<th>reported{suffix}</th>' if reported else ''}"
                    f"<th>measured here{suffix}</th><th>ratio</th><th>evidence</th></tr>")
            by_set: dict[str, list[ClaimRow]] = {}
            for row in rows:
                by_set.setdefault(case_set(row.measured or row.label), []).append(row)
            body = []
            width = 5 if reported else 4
            for name in sorted(by_set, key=natural_key):
                if len(by_set) > 1:
                    body.append(f'<tr class="kw-set"><th colspan="{width}">{html.escape(name or "other claims")}</th></tr>')
                members = sorted(by_set[name], key=lambda r: natural_key(
                    (r.measured or r.label).get("shape") or (r.measured or r.label).get("id")))
                body += [_row(row.label, row.reported, row.measured, src_uri, page_uris, reported,
                              id(row.measured) in labelled) for row in members]
        out.append(f'<div class="kw-claims" markdown="0">\n<table>\n<thead>{head}</thead>\n<tbody>\n'
                   + "\n".join(body) + "\n</tbody>\n</table>\n</div>\n")
    measured = sum(1 for c in claims if c.get("evidence") == "measured")
    return (f'<details class="kw-fold" markdown="0">\n<summary>{len(claims)} claims, {measured} measured '
            f"(table by case set)</summary>\n" + "\n".join(out) + "</details>\n")


def _conditions(label: dict) -> str:
    """Where a claim holds, visible in the row: GPU, arch, dtype, shape, then its conditions
    (the case set is the group heading, so it is left out here)."""
    where = " · ".join(html.escape(str(x)) for x in (label.get("gpu"), label.get("arch"), label.get("dtype"),
                                                       label.get("shape")) if x)
    extra = [html.escape(_SET.sub("", str(label[k])).strip(", ")) for k in ("conditions", "note") if label.get(k)]
    extra = [e for e in extra if e]
    details = f'<span class="kw-cond">{"<br>".join(extra)}</span>' if extra else ""
    return f'<span class="kw-where">{where}</span>{details}' if where or details else ""


def _claim_cell(label: dict) -> str:
    return (f'<td id="{claim_anchor(str(label.get("id")))}"><code>{html.escape(str(label.get("id")))}</code>'
            f"{_conditions(label)}</td>")


def _cites(claims: tuple[dict | None, ...], src_uri: str, page_uris: dict[str, str]) -> str:
    cites = []
    for claim in claims:
        if claim and claim.get("source") in page_uris:
            cites.append(f'<a href="{href(src_uri, page_uris[claim["source"]])}" title="{text(claim["source"])}">'
                         f'{html.escape(claim["source"].removeprefix("src-"))}</a>')
        if claim and claim.get("record"):
            cites.append(f'<a href="{text(href(src_uri, record_uri(str(claim["record"]))))}">record</a>')
    level = " → ".join(badge("level", c.get("evidence")) for c in claims if c)
    return f"{level} {' '.join(cites)}".strip()


def _row(label: dict, reported: dict | None, measured: dict | None, src_uri: str, page_uris: dict[str, str],
         with_reported: bool = True, name_who: bool = False) -> str:
    ratios = []
    if measured and isinstance(measured.get("baseline"), dict) and is_number(measured.get("ratio")):
        ratios.append(f'{fmt_ratio(measured["ratio"])} <span class="kw-note">'
                      f'{html.escape(str(measured["baseline"].get("name")))}, same run</span>')
    # A ratio to the reported value only where the record says it reproduces the same kernel on
    # comparable hardware; otherwise the two numbers answer different questions.
    if reported and measured and measured.get("comparable") is True and is_number(reported.get("value")) \
            and is_number(measured.get("value")) and reported["value"]:
        ratios.append(f'{fmt_ratio(measured["value"] / reported["value"])} <span class="kw-note">of reported</span>')
    # One reported claim measured for several candidates: each value says whose it is.
    who = (f'<span class="kw-who">{html.escape(str(measured.get("candidate") or "our kernel"))}</span> '
           if name_who and measured else "")
    cells = [_claim_cell(label)]
    if with_reported:
        cells.append(f'<td class="kw-num">{fmt(reported["value"]) if reported else "—"}</td>')
    cells += [f'<td class="kw-num">{_anchor_of(label, measured)}{who}{fmt(measured["value"]) if measured else "—"}'
              f'{_other_gpu(label, measured)}{_runs(measured)}</td>',
              f'<td>{"<br>".join(ratios) or "—"}</td>',
              f"<td>{_cites((reported, measured), src_uri, page_uris)}</td>"]
    return "<tr>" + "".join(cells) + "</tr>"


def _runs(measured: dict | None) -> str:
    """How many runs the measured value summarizes and their spread, under the value."""
    said = runs_text(measured) if measured else ""
    return f'<br><span class="kw-note kw-runs">{html.escape(said)}</span>' if said else ""


def _anchor_of(label: dict, measured: dict | None) -> str:
    """A reproduction shares its row with the claim it reproduces: its own id still resolves, so a
    claim span in the prose can link to it."""
    if measured is None or measured is label:
        return ""
    return f'<span id="{claim_anchor(str(measured.get("id")))}"></span>'


def _other_gpu(label: dict, measured: dict | None) -> str:
    if measured is None or measured is label or not measured.get("gpu") or measured.get("gpu") == label.get("gpu"):
        return ""
    return f'<br><span class="kw-note">on {html.escape(str(measured["gpu"]))}</span>'


def fact_html(value: Any) -> str:
    """A compiled or fact value, readable: `fact:name:value` lists as name: value items,
    instruction lists as code."""
    text = str(value)
    facts = _FACT.findall(text)
    if facts:
        items = "".join(f"<li>{html.escape(name.replace('-', ' '))}: <code>{html.escape(v)}</code></li>"
                        for name, v in facts)
        return f'<ul class="kw-facts">{items}</ul>'
    if isinstance(value, str) and re.fullmatch(r"[\w.:]+(, [\w.:]+)*", text):
        return ", ".join(f"<code>{html.escape(part)}</code>" for part in text.split(", "))
    return fmt(value)


def _fact_row(label: dict, src_uri: str, page_uris: dict[str, str]) -> str:
    unit = f" {html.escape(str(label['unit']))}" if label.get("unit") else ""
    return (f"<tr>{_claim_cell(label)}<td>{fact_html(label.get('value'))}{unit}</td>"
            f"<td>{_cites((label,), src_uri, page_uris)}</td></tr>")


CODE_LANGUAGES = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".yaml": "yaml", ".sh": "bash", ".json": "json"}


def code_tabs(files: list[tuple[str, str, str]], what: str = "source") -> str:
    """Content tabs, one per (label, path, text) of a file, each the file's text read when the site
    is built (never a copy pasted into a page), folded in a closed <details> whose summary gives the
    line count; excluded from the search index, so a search finds the page about a thing, not code
    using it."""
    lines = sum(len(text.splitlines()) for _, _, text in files)
    count = f", {lines} lines"
    out = [f'<details class="kw-fold kw-code" data-search-exclude markdown>\n'
           f"<summary>{html.escape(what)}: {len(files)} file{'s' if len(files) != 1 else ''}{count}</summary>\n"]
    for label, path, content in files:
        language = CODE_LANGUAGES.get(posixpath.splitext(path)[1], "text")
        out.append(f'=== "{text(label)}"\n\n{code_block(content, language, "    ")}')
    out.append("</details>\n")
    return "\n".join(out)
