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

from kernelwiki.model.terminal import CONTROL, printable, printable_line

if TYPE_CHECKING:  # `get --format json` imports this module; it needs none of these at run time
    from kernelwiki.storage.index import Wiki
    from kernelwiki.probing.specs import ProbeSpec
    from kernelwiki.commands.query import Answer

QUERY = "query.v3"
PROBE_LIST = "probe-list.v1"
PROBE_SHOW = "probe-show.v1"
LATEST_RECORD = "latest-record.v1"
VALIDATE = "validate.v1"
RECORD = "record.v1"


class NotJson(ValueError):
    """A value standard JSON cannot hold (NaN, an infinity)."""


def dumps(document: Any) -> str:
    """Indented standard JSON with a final newline; raises NotJson naming the offending field."""
    check(document)
    return escaped_json(json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False, default=str)) + "\n"


def escaped_json(text: str) -> str:
    """JSON text with the control characters JSON leaves raw (DEL, C1, bidi overrides: only inside
    strings) as \\u escapes, the same values for a reader and nothing a terminal obeys (a run record's
    strings may hold them; validate checks records' shapes, not their characters)."""
    return CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


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
        lines.append(printable_line(f"{e.id:<40} {str(e.get('type')):<10} {evidence:<16} {str(e.get('status') or '-'):<9} "
                                    f"[{_kb(size['page'])} + {_kb(size['code'])} code] {e.get('title')}"))
        if e.headline:   # the query index is a cache: its text is shown, never obeyed
            lines.append(printable_line(f"    {e.headline[:110]}"))
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


def continuation(next_offset: int | None, total: int) -> str:
    """The line that ends a cut answer: where it stopped and how to go on, the same words on either face
    (so that a cut answer too is byte for byte the CLI's over MCP)."""
    if next_offset is None:
        return ""
    return f"\n[cut at byte {next_offset} of {total}; continue with --offset {next_offset} (MCP: offset)]\n"


def probe_list_text(document: dict) -> str:
    lines = []
    for probe in document["probes"]:
        latest = probe["latest_record"]
        state = f"{latest['status']} ({latest['mode']}, {latest['started_at']})" if latest else "never run"
        lines.append(f"{probe['id']} [{probe['kind']}; {', '.join(probe['archs'])}] {state}; pages: {', '.join(probe['pages'])}")
    return "\n".join(lines) + "\n"


def probe_show_text(document: dict) -> str:
    """A probe spec as an agent reads it: what it measures, where it runs, its timeout and requirements,
    each case with its params, and its latest record (the structured content has every field)."""
    spec = document["spec"]
    lines = [f"{document['id']}: {spec.get('title')} [{document['kind']}; {', '.join(document['archs'])}; "
             f"{document['path']}]", f"description: {spec.get('description')}",
             f"pages: {', '.join(document['pages'])}; timeout_s: {spec.get('timeout_s')}; entry: {spec.get('entry')}"]
    for key in ("requires", "compile_requires", "tools", "ceilings", "min_gpus", "baselines", "negative_control",
                "expected_instructions"):
        if spec.get(key) is not None:
            lines.append(f"{key}: {json.dumps(spec[key], ensure_ascii=False, default=str)}")
    cases = [c for c in spec.get("cases") or [] if isinstance(c, dict)]
    lines.append(f"{len(cases)} case(s):")
    lines += [f"- {c.get('id')}: {json.dumps(c.get('params'), ensure_ascii=False, default=str)}"
              + "".join(f"; {k} {json.dumps(v, ensure_ascii=False, default=str)}" for k, v in c.items()
                        if k not in ("id", "params")) for c in cases]
    latest = document["latest_record"]
    lines.append("latest record: " + (f"{latest['path']}, {latest['status']} ({latest['mode']}) at {latest['started_at']}"
                                      if latest else "none yet"))
    return printable("\n".join(lines)) + "\n"


def record_document(wiki: Wiki, probe_id: str, record: str | None = None, case: str | None = None) -> dict:
    """One run record whole (the newest valid one unless `record` names it); with `case`, that case only.
    LookupError names what is missing and what there is."""
    from kernelwiki.storage.record_file import without_suffix
    from kernelwiki.storage.records import order_key, probe_ids
    from kernelwiki.storage.records import scan as scan_records

    found = [r for r in scan_records(wiki.repo, probe_ids(wiki.repo), probe=probe_id) if r.ok]
    if record is not None:
        wanted = without_suffix(record)   # a run named as .json finds it compressed, and the other way
        chosen = [r for r in found if wanted in (without_suffix(r.rel), without_suffix(r.rel.rsplit("/", 1)[-1]))]
        if not chosen:
            names = ", ".join(sorted(r.rel.rsplit("/", 1)[-1] for r in found)[-5:]) or "none"
            raise LookupError(f"probe {probe_id!r} has no valid record {record!r} (newest: {names})")
    else:
        chosen = sorted(found, key=lambda r: order_key(r.data.get("started_at"), r.rel) or ())[-1:]
    if not chosen:
        return {"schema_version": RECORD, "probe": probe_id, "path": None, "case": case, "record": None}
    data = dict(chosen[0].data)
    if case is not None:
        cases = [c for c in data.get("cases") or [] if isinstance(c, dict) and c.get("id") == case]
        if not cases:
            known = ", ".join(str(c.get("id")) for c in data.get("cases") or [] if isinstance(c, dict)) or "none"
            raise LookupError(f"probe {probe_id!r} has no case {case!r} in {chosen[0].rel} (cases: {known})")
        data["cases"] = cases
    return {"schema_version": RECORD, "probe": probe_id, "path": chosen[0].rel, "case": case, "record": data}


def record_text(document: dict) -> str:
    """A record as an agent reads it: protocol and environment, then one line per case, or, for one
    case, its timing, correctness, metrics and headline (the structured content has every field)."""
    record = document["record"]
    if record is None:
        return f"{document['probe']}: no valid run record yet\n"
    lines = [f"{document['path']}: {record.get('status')} ({record.get('mode')}), {record.get('started_at')} to "
             f"{record.get('finished_at')}, seed {record.get('seed')}"]
    for key in ("protocol", "environment", "ceilings", "negative_control"):
        if record.get(key):
            lines.append(f"{key}: {json.dumps(record[key], ensure_ascii=False, default=str)}")
    cases = [c for c in record.get("cases") or [] if isinstance(c, dict)]
    detailed = len(cases) <= 1
    for case in cases:
        lines.append(f"case {case.get('id')}: {case.get('status')}; params {json.dumps(case.get('params'), default=str)}")
        if not detailed:
            headline = case.get("headline") or {}
            lines[-1] += (f"; {headline.get('metric')} {headline.get('value')} {headline.get('unit', '')}, "
                          f"{headline.get('ratio')}x {headline.get('baseline')}" if headline else "")
            continue
        for key in ("timing", "correctness", "metrics", "baselines", "headline"):
            if case.get(key) is not None:
                value = json.dumps(case[key], ensure_ascii=False, default=str)
                lines.append(f"  {key}: {value if len(value) <= 600 else value[:600] + ' ...'}")
    if not detailed:
        lines.append(f"{len(cases)} cases: ask for one (case) for its timing, correctness and metrics here; "
                     "the structured content has every field of every case")
    return printable("\n".join(lines)) + "\n"
