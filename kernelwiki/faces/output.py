"""The JSON documents that `--json` / `--format json` print and the MCP tools return.

Each document carries `schema_version`, the stem of the schema it follows in
schemas/output/<schema_version>.schema.json; a change that could break a reader gets a new
version. Output is standard JSON only: a NaN or an infinity anywhere is refused with a message
naming where it is, never written as the non-standard `NaN` token.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `get --format json` imports this module; it needs none of these at run time
    from kernelwiki.storage.index import Wiki
    from kernelwiki.probing.specs import ProbeSpec
    from kernelwiki.commands.query import Answer

QUERY = "query.v2"
PROBE_LIST = "probe-list.v1"
PROBE_SHOW = "probe-show.v1"
LATEST_RECORD = "latest-record.v1"
VALIDATE = "validate.v1"


class NotJson(ValueError):
    """A value standard JSON cannot hold (NaN, an infinity)."""


def dumps(document: Any) -> str:
    """Indented standard JSON with a final newline; raises NotJson naming the offending field."""
    check(document)
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False, default=str) + "\n"


def check(document: Any) -> None:
    """Raise NotJson when a NaN or an infinity hides anywhere in the document."""
    found = non_finite(document)
    if found:
        path, value = found
        raise NotJson(f"{path}: is {value}, which standard JSON cannot hold; "
                      "fix the page or run record it comes from")


def non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """(dotted path such as `frontmatter.claims[0].value`, value) of the first NaN or infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "-", value
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = non_finite(item, f"{path}[{index}]")
            if found:
                return found
    return None


def query_document(answer: Answer) -> dict:
    return {"schema_version": QUERY,
            "hits": [{**hit.to_json(), "bytes": answer.sizes[hit.entry.id or ""]} for hit in answer.hits],
            "words": answer.words, "ignored": answer.ignored, "matched": answer.matched, "covered": answer.covered,
            "unmatched": answer.unmatched, "in_passing": answer.in_passing, "total": answer.total, "truncated": answer.truncated,
            "limit": answer.limit, "suggested_tags": answer.suggested_tags}


def query_text(answer: Answer) -> tuple[list[str], list[str]]:
    """The answer as a terminal or an agent reads it: one line per hit, and notes on how it matched
    (not covered, the limit cut, stop words left out, tags to filter by)."""
    notes = []
    if answer.matched == "none" and answer.words:
        notes.append(f"no pages match: not covered, no page holds {', '.join(repr(w) for w in answer.unmatched)}")
    elif answer.matched == "any":
        missing = f" ({', '.join(repr(w) for w in answer.unmatched)} on no page)" if answer.unmatched else ""
        notes.append(f"not covered: no page holds every word of {' '.join(answer.words)!r}{missing}; "
                     "these are the nearest pages by the words they hold")
    elif answer.in_passing:
        notes.append(f"not covered: {', '.join(repr(w) for w in answer.in_passing)} only mentioned in passing "
                     "(no page is about it); these are the nearest pages")
    elif not answer.hits:
        notes.append("no pages match")
    lines = []
    for hit in answer.hits:
        e, size = hit.entry, answer.sizes[hit.entry.id or ""]
        evidence = e.get("evidence_level") or "-"
        lines.append(f"{e.id:<40} {str(e.get('type')):<10} {evidence:<16} {str(e.get('status') or '-'):<9} "
                     f"[{_kb(size['page'])} + {_kb(size['code'])} code] {e.get('title')}")
        if e.headline:
            lines.append(f"    {e.headline[:110]}")
    if answer.truncated:
        notes.append(f"{len(answer.hits)} of {answer.total} pages shown; raise the limit (0: all) for the rest")
    if answer.ignored:
        notes.append(f"ignored: {', '.join(answer.ignored)}")
    if answer.suggested_tags:
        notes.append(f"tags to filter by: {', '.join(answer.suggested_tags)}")
    return lines, notes


def _kb(size: int) -> str:
    return f"{size / 1000:.0f} kB" if size >= 1000 else f"{size} B"


def probe_summary(wiki: Wiki, spec: ProbeSpec) -> dict:
    from kernelwiki.commands.get import latest_record

    return {"id": spec.id, "title": spec.data.get("title"), "kind": spec.kind, "archs": spec.archs,
            "pages": spec.pages, "latest_record": latest_record(wiki, spec.id)}


def probe_list_document(wiki: Wiki, probes: dict[str, ProbeSpec]) -> dict:
    return {"schema_version": PROBE_LIST, "probes": [probe_summary(wiki, spec) for spec in probes.values()]}


def probe_show_document(wiki: Wiki, spec: ProbeSpec) -> dict:
    return {"schema_version": PROBE_SHOW, **probe_summary(wiki, spec), "path": wiki.repo.rel(spec.directory),
            "spec": spec.data}


class UnknownCase(LookupError):
    pass


def latest_record_document(wiki: Wiki, spec: ProbeSpec, case: str | None = None) -> dict:
    """A probe's newest run record summary; with `case`, only that case (UnknownCase if absent)."""
    from kernelwiki.commands.get import latest_record

    record = latest_record(wiki, spec.id)
    if record is not None and case is not None:
        cases = [c for c in record["cases"] if c.get("id") == case]
        if not cases:
            known = ", ".join(str(c.get("id")) for c in record["cases"]) or "none"
            raise UnknownCase(f"probe {spec.id!r} has no case {case!r} in its latest record "
                              f"{record['path']} (cases: {known})")
        record = {**record, "cases": cases}
    return {"schema_version": LATEST_RECORD, "probe": spec.id, "case": case, "latest_record": record}


def validate_document(report: Any) -> dict:
    return {"schema_version": VALIDATE, "ok": report.ok, "problems": [p.to_json() for p in report.problems],
            "counts": {"pages": report.pages, "probes": report.probes, "provenance": report.provenance,
                       "records": report.records}}
