"""`kernelwiki records compress`: every `.json` run record to `.json.gz`, and every reference to it.

References name a record's file as it is (a claim's `record`, a record's `ceilings.record`), so
compressing a record renames it and the references follow: in the frontmatter of the pages (only
the value on the claim's `record:` line changes; the rest of the page stays byte-identical) and in
the records whose ceilings came from a converted calibration run (`ceilings.record` is where the
ceilings were read, a path, not a measurement: such a record is written again in the runner's text
layout with that one value changed). Nothing else in a record changes: a record's text inflated
from its `.json.gz` is the text of its `.json`. A reference to a record that is not in the tree
keeps its name (it never had another).

Idempotent: a second run finds nothing to do. A run left half done (a `.json.gz` written, its
`.json` not yet removed, or a `.json.gz` made by hand with `gzip -n`) is finished: the `.json` is
removed once the `.json.gz` holds the same text, before or after its references are rewritten.
Symbolic links, unreadable records, a run whose two files differ and a `.json` whose `.json.gz`
name holds something unreadable (a folder, a link, a damaged file: never replaced) are refused with
a line each and left as they are, references to them too; what can be converted still is.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwiki.model.files import UnsafeFile, replace_file
from kernelwiki.model.pages import parse_page, read_page_bytes
from kernelwiki.storage.index import scan_pages
from kernelwiki.storage.record_file import GZIP, JSON, RecordFileError, encode, is_gzip, read_text, record_text, without_suffix
from kernelwiki.storage.records import RecordProblem, parse_record, probe_ids, scan
from kernelwiki.storage.repo import OutsideRepo, Repo


@dataclass
class Result:
    """What compress_records did, and what it left alone."""

    done: list[str] = field(default_factory=list)
    """What was changed, one line each."""
    refused: list[str] = field(default_factory=list)
    """`path:line: field: message` for each thing left as it was, and why."""
    compressed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    references: int = 0


@dataclass
class _Record:
    rel: str
    text: str
    data: Any


def compress_records(repo: Repo) -> Result:
    """Convert the records under artifacts/evidence and rewrite the references in wiki/ and in the
    records; call it holding the runner lock (a runner writing meanwhile would be missed)."""
    result = Result()
    plain, packed = _read_records(repo, result)
    renamed = {f"{without_suffix(r.rel)}{JSON}": f"{without_suffix(r.rel)}{GZIP}" for r in [*plain, *packed]}
    kept = {r.rel for r in plain if _refusal(repo, r, _with_references(r, renamed), packed, result)}
    renamed = {old: new for old, new in renamed.items() if old not in kept}   # what stays .json keeps its name
    for record in plain:
        if record.rel not in kept:
            _convert(repo, record, _with_references(record, renamed), packed, result)
    for record in packed:
        text = _with_references(record, renamed)
        if text != record.text:
            replace_file(repo.root / record.rel, encode(text))
            result.references += 1
            result.done.append(f"{record.rel}: ceilings.record now names {renamed[record.data['ceilings']['record']]}")
    for rel, _ in scan_pages(repo.root)[0]:
        _rewrite_page(repo, rel, renamed, result)
    return result


def _read_records(repo: Repo, result: Result) -> tuple[list[_Record], list[_Record]]:
    """The readable records, `.json` and `.json.gz`; a refused line for each one that is not
    (a link, a name or text that no reader takes, a folder outside the repository)."""
    plain, packed = [], []
    for found in scan(repo, probe_ids(repo)):
        if found.data is None:   # scan said why: a link, a name or text no reader takes
            result.refused.append(f"{found.problems[0]}; {_left(found.path)}")
            continue
        try:
            repo.inside(found.path.parent)   # the folder written to stays inside the repository
            text = read_text(found.path)     # the text as it is, not as scan expanded it
            data = parse_record(text)
        except (OutsideRepo, RecordFileError, RecordProblem) as err:   # changed since scan read it
            result.refused.append(f"{found.rel}:1: -: {getattr(err, 'message', err)}; {_left(found.path)}")
            continue
        (packed if is_gzip(found.path) else plain).append(_Record(found.rel, text, data))
    return plain, packed


def _left(path: Path) -> str:
    """What the converter did with a record it cannot read."""
    return "left as it is (its references were not rewritten)" if is_gzip(path) else "not converted"


def _with_references(record: _Record, renamed: dict[str, str]) -> str:
    """The record's text with `ceilings.record` naming the compressed calibration record (the
    runner's text layout then), or its text unchanged when there is nothing to rewrite."""
    ceilings = record.data.get("ceilings") if isinstance(record.data, dict) else None
    source = ceilings.get("record") if isinstance(ceilings, dict) else None
    if not isinstance(source, str) or source not in renamed:
        return record.text
    data = copy.deepcopy(record.data)
    data["ceilings"]["record"] = renamed[source]
    return record_text(data)


def _refusal(repo: Repo, record: _Record, text: str, packed: list[_Record], result: Result) -> bool:
    """Whether `<run>.json` must stay as it is (a refused line says why): its `.json.gz` is there
    but holds another record of the run, or is no record that reads (a folder, a link, a damaged
    file: its own line says why), which converting would replace."""
    target = f"{without_suffix(record.rel)}{GZIP}"
    twin = next((p for p in packed if p.rel == target), None)
    if twin is not None and twin.text not in (record.text, text):   # the same record, references rewritten or not
        why = "holds another record of the same run; keep the right one and remove the other by hand"
    elif twin is None and os.path.lexists(repo.root / target):
        why = "is there but is no record that reads (see its line); move it away or remove it"
    else:
        return False
    result.refused.append(f"{record.rel}:1: -: {target} {why}; not converted")
    return True


def _convert(repo: Repo, record: _Record, text: str, packed: list[_Record], result: Result) -> None:
    """Write `<run>.json.gz` holding `text`, then remove `<run>.json`; with a `.json.gz` of the run
    there already (_refusal found it holds the same record), only remove the `.json` (its
    references are rewritten with the other compressed records')."""
    target = f"{without_suffix(record.rel)}{GZIP}"
    twin = next((p for p in packed if p.rel == target), None)
    source, path = repo.root / record.rel, repo.root / target
    before = len(record.text.encode("utf-8"))
    if twin is None:
        data = encode(text)
        replace_file(path, data)
        result.compressed += 1
        result.bytes_before, result.bytes_after = result.bytes_before + before, result.bytes_after + len(data)
        result.references += text != record.text
        changed = " (ceilings.record rewritten)" if text != record.text else ""
        result.done.append(f"{record.rel} -> {target} ({before:,} -> {len(data):,} bytes){changed}")
    else:
        result.done.append(f"{record.rel}: removed; {target} holds the same record")
    os.unlink(source)


def _rewrite_page(repo: Repo, rel: str, renamed: dict[str, str], result: Result) -> None:
    """Rewrite the `record:` values of a page's claims that name a converted record: on the claim's
    own line, then checked by reading the page again (anything else in it would change: refused)."""
    try:
        raw = read_page_bytes(repo.root / rel)
    except UnsafeFile as err:
        result.refused.append(f"{rel}:1: -: {err}; its record references were not rewritten")
        return
    page = parse_page(raw, rel)
    if page.meta is None:
        if any(old.encode() in raw for old in renamed):
            result.refused.append(f"{rel}:1: -: its frontmatter does not read (run kernelwiki validate); its record "
                                  "references were not rewritten")
        return
    claims = page.meta.get("claims") if isinstance(page.meta.get("claims"), list) else []
    wanted = copy.deepcopy(page.meta)
    lines = raw.split(b"\n")
    count = 0
    for index, claim in enumerate(claims):
        old = claim.get("record") if isinstance(claim, dict) else None
        if not isinstance(old, str) or old not in renamed:
            continue
        wanted["claims"][index]["record"] = renamed[old]
        line = page.line(("claims", index, "record"))
        if b"record:" in lines[line - 1] and lines[line - 1].count(old.encode()) == 1:
            lines[line - 1] = lines[line - 1].replace(old.encode(), renamed[old].encode())
            count += 1
    if wanted == page.meta:
        return
    new = b"\n".join(lines)
    if parse_page(new, rel).meta != wanted:
        result.refused.append(f"{rel}:1: claims: a record reference is not on a `record:` line of its own; write "
                              f"the .json.gz names by hand; not rewritten")
        return
    replace_file(repo.root / rel, new)
    result.references += count
    result.done.append(f"{rel}: {count} record reference{'s' if count != 1 else ''} now name{'' if count != 1 else 's'} "
                       "the .json.gz")
