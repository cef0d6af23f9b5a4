"""`kernelwiki refresh`: rewrite the managed parts of every page from the run records.

Managed: the record-backed claims (`evidence: measured` or `compiled`), `evidence_by_arch`,
`evidence_level`, `status`, `measured_on`, `last_measured`, the body's generated blocks
(`<!-- kernelwiki:begin NAME -->` ... `<!-- kernelwiki:end NAME -->`, outside code fences) and the
text of inline claim spans (`<!-- claim:ID -->...<!-- /claim -->`, see kernelwiki.model.spans).
Everything else — other fields, their order, the prose, its line endings — is left byte-identical.

Refresh is a pure function of (pages, records, probe specs, the pins in pyproject.toml): running it
twice changes nothing the second time. "Now", for staleness, is the newest record in the
repository, not the wall clock, so the result does not depend on when it runs.

This module drives the rewrite of each page; `claims` derives the record-backed claims, `status`
holds the status and regression policy, `frontmatter` places the managed fields and `blocks`
renders the generated blocks.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass

from kernelwiki.commands.refresh.blocks import RENDERERS, render_blocks, render_runs, render_versus
from kernelwiki.commands.refresh.frontmatter import implied_meta
from kernelwiki.model import yamlio
from kernelwiki.model.files import UnsafeFile, replace_file
from kernelwiki.model.pages import FENCE, MAX_PAGE_BYTES, parse_page, read_page_bytes
from kernelwiki.model.schema import check as schema_check
from kernelwiki.model.spans import render_spans
from kernelwiki.model.vocab import Vocabulary
from kernelwiki.probing.specs import ProbeSpec, load_probes
from kernelwiki.storage.index import scan_pages
from kernelwiki.storage.records import Record, in_the_future, load_and_refused
from kernelwiki.storage.repo import Repo


@dataclass
class Change:
    rel: str
    fields: list[str]
    refused: str = ""
    """Why the page was left as it is although the records imply a change ('' when written)."""


SETTINGS = {"freshness_days": int, "pins": dict}
"""`[tool.kernelwiki]` keys refresh reads, with their types; a value of another type is ignored."""


def load_pins(repo: Repo) -> dict:
    """`[tool.kernelwiki]` of pyproject.toml: the freshness window and the toolchain pins. A value of
    the wrong type is left out with a message on stderr (the defaults apply), never a traceback."""
    try:
        config = tomllib.loads((repo.root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    tool = config.get("tool") if isinstance(config.get("tool"), dict) else {}
    section = tool.get("kernelwiki") if isinstance(tool.get("kernelwiki"), dict) else {}
    out = {}
    for key, value in section.items():
        wanted = SETTINGS.get(key)
        if wanted is None:
            out[key] = value
        elif isinstance(value, wanted) and not isinstance(value, bool) and (
                all(isinstance(v, str) for v in value.values()) if wanted is dict else 0 < value <= 36500):
            out[key] = value
        else:
            print(f"pyproject.toml: tool.kernelwiki.{key}: {value!r} is not "
                  f"{'a number of days (1 to 36500)' if wanted is int else 'a table of version strings'};"
                  " ignored, the default applies", file=sys.stderr)
    return out


def refresh(repo: Repo, check: bool = False) -> list[Change]:
    """Rewrite (or with check=True only compare) every page; return the pages that change.
    A page whose frontmatter would change but holds YAML comments is not written (the rewrite
    would drop them): its Change carries `refused`."""
    vocab = Vocabulary.load(repo.schemas)
    probes = load_probes(repo)
    records, refused = load_and_refused(repo)
    if refused and not records and all(in_the_future(r) for r in refused):
        # A clock behind the records would otherwise strip every page of its measured evidence.
        return [Change("artifacts/evidence", [], refused=f"artifacts/evidence:1: -: not refreshed: every run record "
                       f"({len(refused)}) is dated after this machine's clock; check the clock")]
    settings = load_pins(repo)
    newest = max((r.started for rs in records.values() for r in rs), default="")
    changes = []
    for rel, _ in scan_pages(repo.root)[0]:   # a page whose name is not UTF-8 is left out; validate names it
        path = repo.root / rel
        try:
            raw = read_page_bytes(path)
        except UnsafeFile:
            continue  # a link or an unreadable file: validate names it, refresh never writes through it
        page = parse_page(raw, rel)
        if page.meta is not None and schema_check(repo.schemas, "page", page.meta, rel, page.line):
            # Refresh relies on the shapes the schema guarantees; validate says what is wrong.
            changes.append(Change(rel, [], refused=f"{rel}:1: -: not refreshed: the frontmatter fails the page "
                                  "schema; run kernelwiki validate"))
            continue
        new = refresh_text(raw, rel, vocab, probes, records, settings, newest)
        if new is None or new[0] == raw:
            continue
        comment = yamlio.comment_line(page.frontmatter_text)
        if comment is not None and any(not f.startswith("(") for f in new[1]):
            changes.append(Change(rel, new[1], refused=f"{rel}:{comment + 2}: -: not refreshed: its frontmatter "
                                  "holds a YAML comment, which the rewrite would drop; move it into the prose"))
            continue
        unwritable = written_page_problem(new[0], rel, repo)
        if unwritable:
            changes.append(Change(rel, new[1], refused=unwritable))
            continue
        changes.append(Change(rel, new[1]))
        if not check:
            try:
                replace_file(path, new[0])
            except OSError as err:   # a read-only folder, a full disk, `ulimit -f`: one line per page
                changes[-1] = Change(rel, new[1], refused=f"{rel}:1: -: not refreshed: cannot write it "
                                     f"({err.strerror or err})")
    return changes


def written_page_problem(data: bytes, rel: str, repo: Repo) -> str | None:
    """Why refresh must not write these bytes (what it writes always passes validate), naming the
    records the page's claims come from; None when they are fine."""
    page = parse_page(data, rel)
    # The line endings and byte-order mark are the page's own; refresh keeps them as they were.
    problems = [p for p in page.problems if "CRLF" not in p.message and "byte-order" not in p.message]
    why = None
    if len(data) > MAX_PAGE_BYTES:
        why = f"it would be {len(data):,} bytes, over the {MAX_PAGE_BYTES:,}-byte page limit"
    elif page.meta is None or problems:
        why = "; ".join(p.message for p in problems) or "its frontmatter would not parse"
    else:
        problems = schema_check(repo.schemas, "page", page.meta, rel, page.line)
        why = "; ".join(p.message for p in problems[:3]) if problems else None
    if why is None:
        return None
    records = sorted({m.decode() for m in re.findall(rb"record: (artifacts/\S+\.json(?:\.gz)?)", data)})
    return (f"{rel}:1: -: not refreshed: {why}; from {', '.join(records[:5]) or 'its records'}"
            f"{' and others' if len(records) > 5 else ''}")


def refresh_text(raw: bytes, rel: str, vocab: Vocabulary, probes: dict[str, ProbeSpec],
                 records: dict[str, list[Record]], settings: dict, newest: str) -> tuple[bytes, list[str]] | None:
    """The refreshed bytes of one page and the fields that changed; None for pages it cannot read."""
    page = parse_page(raw, rel)
    meta = page.meta
    if meta is None or meta.get("type") == "source" or page.problems and any(
            "CRLF" not in p.message and "byte-order" not in p.message for p in page.problems):
        return None
    bom = raw.startswith(b"\xef\xbb\xbf")
    text = raw.decode("utf-8-sig")
    newline = "\r\n" if "\r\n" in text.split("\n", 1)[0] + "\n" else "\n"
    lines = text.splitlines(keepends=True)
    close = next(i for i in range(1, len(lines)) if lines[i].rstrip() == FENCE)
    header, body = "".join(lines[:close + 1]), "".join(lines[close + 1:])

    implied = implied_meta(meta, vocab, probes, records, settings, newest)
    changed = [k for k in set(meta) | set(implied) if meta.get(k) != implied.get(k)]
    if changed:
        header = f"{FENCE}\n{yamlio.dump(implied)}{FENCE}\n".replace("\n", newline)
    linked = [probes[p] for p in meta.get("probes") or [] if isinstance(p, str) and p in probes]
    renderers = {**RENDERERS, "runs": lambda _: render_runs(linked, records, meta.get("id")),
                 "versus": lambda _: render_versus(linked, records, meta.get("id"))}
    new_body = render_blocks(body, implied, newline, renderers)
    if new_body != body:
        changed.append("(generated blocks)")
    spanned = render_spans(new_body, implied.get("claims") or [])
    if spanned != new_body:
        changed.append("(claim spans)")
        new_body = spanned
    out = ("\ufeff" if bom else "") + header + new_body
    return out.encode("utf-8"), sorted(changed)
