"""Markdown for the site, as pure functions of the wiki's pages, probes and records.

Links between pages are relative to the page that carries them, so they work under any site URL
and `mkdocs build --strict` can check every one of them.
"""

from __future__ import annotations

import html
import posixpath
from typing import Any

LEVEL_TEXT = {
    "spec": "stated by vendor documentation",
    "source-reported": "reported by an upstream source under stated conditions",
    "compiled": "our probe compiled for the architecture and found the expected instructions",
    "measured": "our probe ran on matching hardware, passed its correctness gate and negative control",
}
STATUS_TEXT = {
    "draft": "incomplete: no probe backs it yet, or a probe has not run",
    "verified": "every linked probe's latest record passed, every claim cites a source or a record",
    "regressed": "a linked probe's latest record failed, or fell more than 10% behind the previous one",
    "stale": "the newest evidence is old, or from another toolchain than the project pins",
}


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


def badge(kind: str, value: str | None) -> str:
    value = value or "none"
    return f'<span class="kw-badge kw-{kind}-{html.escape(value)}">{html.escape(value)}</span>'


def evidence_card(meta: dict, src_uri: str) -> str:
    """The box every page opens with: evidence per architecture, status, where it was measured."""
    by_arch = meta.get("evidence_by_arch") or {}
    archs = [a for a in meta.get("architectures") or [] if isinstance(a, str)]
    arch_cells = " ".join(f'<span class="kw-arch">{html.escape(a)}</span> {badge("level", by_arch.get(a))}'
                          for a in archs) or "—"
    rows = [
        ("Evidence", arch_cells),
        ("Status", f'{badge("status", meta.get("status"))} <span class="kw-note">'
                   f'{html.escape(STATUS_TEXT.get(meta.get("status") or "", ""))}</span>'),
        ("Measured on", html.escape(str(meta.get("measured_on") or "not measured yet"))),
        ("Last measured", html.escape(str(meta.get("last_measured") or "—"))),
    ]
    if meta.get("requires_sm"):
        rows.append(("Requires", html.escape(f"sm {meta['requires_sm']}")))
    if meta.get("probes"):
        links = ", ".join(f'<a href="{href(src_uri, "evidence/probes.md", p)}">{p}</a>'
                          for p in meta["probes"])
        rows.append(("Probes", links))
    body = "\n".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<div class="kw-card" markdown="0">\n<table class="kw-card-table">\n{body}\n</table>\n</div>\n'


def source_card(meta: dict) -> str:
    rows = [("Kind", meta.get("kind")), ("Where", f'<a href="{html.escape(meta.get("url", ""))}">'
                                                 f'{html.escape(meta.get("url", ""))}</a>'),
            ("Authors", ", ".join(meta.get("authors") or [])), ("Published", meta.get("published")),
            ("Retrieved", meta.get("retrieved")), ("Pinned at", meta.get("pin"))]
    body = "\n".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows if v)
    facts = "\n".join(f"- {fact}" for fact in meta.get("facts") or [])
    return (f'<div class="kw-card" markdown="0">\n<table class="kw-card-table">\n{body}\n</table>\n</div>\n\n'
            f"**Facts taken from it**\n\n{facts}\n")


def claims_table(meta: dict, src_uri: str, page_uris: dict[str, str]) -> str:
    """Source-reported (or spec) values next to our measurements of the same quantity."""
    claims = [c for c in meta.get("claims") or [] if isinstance(c, dict)]
    claims += [{**c, "id": f"performance-claim-{i}", "evidence": "source-reported", "source": c.get("source_id")}
               for i, c in enumerate(meta.get("performance_claims") or []) if isinstance(c, dict)]
    if not claims:
        return ""
    by_id = {c.get("id"): c for c in claims}
    reproductions: dict[str, list[dict]] = {}
    for claim in claims:
        if claim.get("reproduces") in by_id:
            reproductions.setdefault(claim["reproduces"], []).append(claim)
    rows = ["| claim | reported | measured here | measured / reported | conditions | evidence |",
            "|---|---|---|---|---|---|"]
    for claim in claims:
        if claim.get("reproduces") in by_id:
            continue
        if claim.get("evidence") in ("measured", "compiled"):
            rows.append(_row(claim, None, claim, src_uri, page_uris))
            continue
        for measured in reproductions.get(claim.get("id"), [None]):
            rows.append(_row(claim, claim, measured, src_uri, page_uris))
    return "\n".join(rows) + "\n"


def _value(claim: dict | None) -> str:
    if claim is None:
        return "—"
    value = f"{claim.get('value')} {claim.get('unit', '')}".strip()
    if claim.get("baseline"):
        value += f" ({claim.get('ratio')}× {claim['baseline'].get('name')})"
    return value.replace("|", "\\|")


def _row(label: dict, reported: dict | None, measured: dict | None, src_uri: str, page_uris: dict[str, str]) -> str:
    ratio = "—"
    if reported and measured and _is_number(reported.get("value")) and _is_number(measured.get("value")) \
            and reported.get("unit") == measured.get("unit") and reported["value"]:
        ratio = f"{measured['value'] / reported['value']:.3f}"
    where = " · ".join(str(x) for x in (label.get("gpu"), label.get("arch"), label.get("dtype"), label.get("shape")) if x)
    if label.get("conditions"):
        where += f" — {label['conditions']}" if where else label["conditions"]
    cites = []
    for claim in (reported, measured):
        if claim and claim.get("source") in page_uris:
            cites.append(f"[{claim['source']}]({rel_link(src_uri, page_uris[claim['source']])})")
        if claim and claim.get("record"):
            target = "records/" + claim["record"].removeprefix("artifacts/evidence/")
            cites.append(f"[record]({rel_link(src_uri, target)})")
    level = " → ".join(badge("level", c.get("evidence")) for c in (reported, measured) if c)
    return (f"| {label.get('id')} | {_value(reported)} | {_value(measured)} | {ratio} | "
            f"{where.replace('|', chr(92) + '|')} | {level} {' '.join(cites)} |")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def code_tabs(files: list[tuple[str, str]]) -> str:
    """Content tabs, one per file, each a snippet include of the file itself (never a pasted copy)."""
    out = []
    for label, path in files:
        language = {".py": "python", ".cu": "cuda", ".yaml": "yaml", ".sh": "bash", ".json": "json"}.get(
            posixpath.splitext(path)[1], "text")
        out.append(f'=== "{label}"\n\n    ```{language}\n    --8<-- "{path}"\n    ```\n')
    return "\n".join(out)
