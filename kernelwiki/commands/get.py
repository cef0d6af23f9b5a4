"""`kernelwiki get` / scripts/get_page.py: one page, as Markdown or JSON, optionally with its
sources, claims, artifact code, probe code and the latest run record of each probe."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from fnmatch import fnmatch, fnmatchcase
from pathlib import Path
from typing import Any

from kernelwiki.storage.index import Entry, Wiki
from kernelwiki.storage.records import latest, load_records
from kernelwiki.model.claims import Style, cell, markdown_rows, page_claims, run_count
from kernelwiki.model.fences import code_mask, fill_blocks
from kernelwiki.model.files import UnsafeFile, read_regular, stays_below
from kernelwiki.model.terminal import printable, printable_line

LANGUAGES = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".h": "cpp", ".hpp": "cpp",
             ".yaml": "yaml", ".yml": "yaml", ".json": "json", ".sh": "bash", ".md": "markdown", ".ptx": "ptx"}
MAX_FILE_BYTES = 256 * 1024
SCHEMA_VERSION = "get.v2"
"""The JSON document follows schemas/output/get.v2.schema.json (v1 plus the prose part)."""
DEFAULT_CHARS = 80_000
"""`--include-code` without `--files` sends the kernel's own files while the answer stays under this many
characters (about 20k tokens); every other file is listed with its size."""


@dataclass
class Options:
    part: str = "page"
    """page | frontmatter | body | claims | prose (the body without generated blocks, code and claim marks)"""
    follow_sources: bool = False
    include_code: bool = False
    fmt: str = "md"
    fetch_upstream: bool = False
    """--include-code: download pinned upstream files that are not installed (kernelwiki.commands.upstream)."""
    files: tuple[str, ...] = ()
    """--include-code: only code files whose path or name matches one of these shell patterns, and not the
    page (empty: the kernel's own files within DEFAULT_CHARS, the others listed)."""
    cases: tuple[str, ...] = ()
    """Only the claims whose case (or id, where a claim cites no case) matches one of these (see matches)."""
    shapes: tuple[str, ...] = ()
    """Only the claims whose shape matches one of these."""
    section: str | None = None
    """Only the body's sections whose heading holds this text (any case), each whole with its code."""

    def wants(self, path: str) -> bool:
        return not self.files or any(fnmatch(path, p) or fnmatch(path.rsplit("/", 1)[-1], p) for p in self.files)

    @property
    def filtered(self) -> bool:
        return bool(self.cases or self.shapes)

    def keeps(self, claim: dict) -> bool:
        """Whether a claim passes --case and --shape."""
        case = claim.get("case") or claim.get("id")
        return (not self.cases or any(matches(case, p) for p in self.cases)) and \
            (not self.shapes or any(matches(claim.get("shape"), p) for p in self.shapes))


def matches(value: Any, pattern: str) -> bool:
    """A shell pattern (`bf16-*`, `*x4096x*`) matches the whole value, other text any part of it; any case."""
    if value is None:
        return False
    value, pattern = str(value).lower(), pattern.lower()
    return fnmatchcase(value, pattern) if any(c in pattern for c in "*?[") else pattern in value


@dataclass
class Result:
    """One page as the get.v2 JSON document, plus what the Markdown rendering needs."""

    document: dict[str, Any]
    frontmatter_text: str
    body: str
    options: Options

    @property
    def errors(self) -> list[str]:
        """Upstream files that could not be shown (download failed or hash mismatch): exit 1."""
        files = (self.document.get("artifacts") or {}).get("files") or []
        return [item["note"] for item in files if item.get("error")]

    def markdown(self) -> str:
        """The page for a terminal or an agent: control characters in any part of it (a page body,
        a probe file, a record's reason) shown as escapes, never obeyed."""
        return printable(_markdown(self.frontmatter_text, self.body, self.document, self.options))


def get_page(wiki: Wiki, entry: Entry, options: Options) -> str:
    """The page as Markdown (JSON documents are written by kernelwiki.faces.output)."""
    return build(wiki, entry, options).markdown()


def build(wiki: Wiki, entry: Entry, options: Options) -> Result:
    """The page as asked for. Each thing is sent once: in Markdown the claims stand as the body's table
    (the frontmatter says where), in JSON as the frontmatter's list (the body's claims block stays empty,
    as the file keeps it)."""
    entry = wiki.current(entry)  # the page as the file is now, whatever the cache says
    meta = entry.meta or {}
    frontmatter_text, body = _split(wiki, entry)
    claims = [c for c in page_claims(meta) if options.keeps(c)]
    if options.section is not None:
        body = section(body, options.section)
    table_body = fill_blocks(body, meta, "\n", {"claims": lambda m: page_table(claims, options)})
    result: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "id": entry.id, "path": entry.rel,
                              "part": options.part}
    page_wanted = not options.files and options.section is None
    if options.part == "page" and not page_wanted:
        pass   # a section, or code files by name: only what was asked for
    elif options.part in ("page", "frontmatter"):
        result["frontmatter"] = meta
    if options.part == "page" and page_wanted:
        result["body"] = body if options.fmt == "json" else table_body
        if options.fmt != "json" and table_body != body:
            frontmatter_text = _without_claims(frontmatter_text, meta, len(claims), len(page_claims(meta)))
    elif options.part == "body" or (options.part == "page" and options.section is not None):
        result["body"] = table_body
    if options.part == "prose":
        result["body"] = prose(body, keep_code=options.section is not None)
    if options.part == "claims":
        # How many runs each measured figure summarizes, said outright (a single run's claim has no spread).
        result["claims"] = [c if run_count(c) is None else {**c, "runs": run_count(c)} for c in claims]
    if options.follow_sources:
        ids = wiki.by_id()
        result["sources"] = [_source_summary(ids[s]) if s in ids else {"id": s, "missing": True}
                             for s in meta.get("sources") or [] if isinstance(s, str)]
    if options.include_code:
        result["artifacts"] = artifact_bundle(wiki, meta, fetch_upstream=options.fetch_upstream, wants=options.wants)
        result["probes"] = [probe_bundle(wiki, p, options.wants) for p in meta.get("probes") or [] if isinstance(p, str)]
    built = Result(result, frontmatter_text, body, options)
    if options.include_code and not options.files:
        _within_budget(built)
    return built


def _without_claims(frontmatter_text: str, meta: dict, shown: int, total: int) -> str:
    """The frontmatter text with its top-level `claims:` list replaced by a comment saying where they
    stand (the body's table); unchanged when the rest would not read back as the same frontmatter."""
    from kernelwiki.model import yamlio

    lines = frontmatter_text.splitlines(keepends=True)
    out: list[str] = []
    at = None
    skipping = False
    for line in lines:
        if skipping and (line.startswith((" ", "-")) or not line.strip()):
            continue
        skipping = False
        if line.rstrip("\r\n") == "claims:" and at is None:
            at, skipping = len(out), True
            continue
        out.append(line)
    if at is None:
        return frontmatter_text
    try:
        rest, _ = yamlio.load("".join(out))
    except yamlio.YamlProblem:
        return frontmatter_text
    if rest != {k: v for k, v in meta.items() if k != "claims"}:
        return frontmatter_text
    count = f"{shown} of {total}" if shown != total else str(total)
    out.insert(at, f"# claims: {count}, as the table under the body's claims heading (get --claims: each with "
                   "its conditions; --format json: every field)\n")
    return "".join(out)


def _split(wiki: Wiki, entry: Entry) -> tuple[str, str]:
    """Frontmatter text and body as read (LF line endings); the parsed frontmatter is in the index."""
    page = wiki.page(entry.rel)
    return page.frontmatter_text, page.body


def _source_summary(entry: Entry) -> dict:
    keys = ("id", "title", "kind", "url", "authors", "published", "retrieved", "pin", "facts")
    return {k: entry.get(k) for k in keys if entry.get(k) is not None}


# --- code bundles --------------------------------------------------------------------------------
def _everything(path: str) -> bool:
    return True


LEFT_OUT = "left out: its path matches none of the files patterns"


def artifact_bundle(wiki: Wiki, meta: dict, fetch_upstream: bool = False, wants=_everything) -> dict:
    """The page's artifact directory: PROVENANCE, our files' text, upstream files from the installed
    package after their hashes check out, else fetched at the pinned commit when asked (or how to
    get them)."""
    directory = meta.get("artifact_dir")
    if not isinstance(directory, str):
        return {"dir": None, "files": [], "note": "this page has no artifact_dir"}
    try:
        root = wiki.repo.inside(directory)
    except ValueError as err:
        return {"dir": directory, "files": [], "note": str(err)}
    if not root.is_dir():
        return {"dir": directory, "files": [], "note": f"{directory} does not exist"}
    provenance_path = root / "PROVENANCE.yaml"
    provenance: dict = {}
    if provenance_path.is_file() or provenance_path.is_symlink():
        from kernelwiki.model import yamlio
        from kernelwiki.model.schema import check as schema_check

        data, _, problem = yamlio.read_mapping(provenance_path)
        # Used only when validate would accept it: its paths and pins are what the bundle acts on.
        if problem is None and not schema_check(wiki.repo.schemas, "provenance", data, "PROVENANCE.yaml", lambda p: 1):
            provenance = data
    listed = _listing(root)
    files = [_file_item(wiki, path, wants) for path in listed]
    files += _unlisted_items(wiki, root, provenance, listed)
    files += _shared_items(wiki, root, provenance, wants)
    upstream = provenance.get("upstream") or {}
    for item in provenance.get("files") or []:
        if isinstance(item, dict) and item.get("origin") == "upstream":
            if wants(str(item.get("path"))):
                files.append(_upstream_item(wiki, item, upstream, fetch_upstream))
            else:
                files.append({"path": item.get("path"), "origin": "upstream", "note": LEFT_OUT})
    return {"dir": directory, "provenance": provenance or None, "files": files}


def _listing(root: Path) -> list[Path]:
    """Files under an artifact or probe directory; symbolic links, FIFOs and other non-files are listed
    (and refused by _file_item), never followed or opened."""
    return sorted(p for p in root.rglob("*")
                  if (p.is_symlink() or not p.is_dir()) and "__pycache__" not in p.parts)


def _file_item(wiki: Wiki, path: Path, wants=_everything) -> dict:
    rel = wiki.repo.rel(path.parent) + "/" + path.name  # the link's own path, not its target's
    if not wants(rel):
        return {"path": rel, "origin": "own", "note": LEFT_OUT}
    try:
        text = read_regular(path, MAX_FILE_BYTES).decode("utf-8")
    except UnsafeFile as err:
        return {"path": rel, "origin": "own", "note": f"{err}; not printed"}
    except UnicodeDecodeError:
        return {"path": rel, "origin": "own", "note": "binary file; not printed"}
    return {"path": rel, "origin": "own", "text": text}


def _upstream_item(wiki: Wiki, item: dict, upstream: dict, fetch_upstream: bool) -> dict:
    package, version = upstream.get("package"), upstream.get("version")
    install = upstream.get("install") or (f"pip install {package}=={version}" if package else None)
    out = {"path": item.get("path"), "origin": "upstream", "package": package, "version": version,
           "repo": upstream.get("repo"), "commit": upstream.get("commit"), "sha256": item.get("sha256")}
    if package:
        _from_installed(out, item, package, version, install)
        if "text" in out:
            return out
    elif not fetch_upstream:
        out["note"] = (f"pinned at {upstream.get('repo')}@{upstream.get('commit')}; not installable as a "
                       "package; add --fetch-upstream (MCP: fetch_upstream) to download it and check its SHA-256")
        return out
    if not fetch_upstream:
        return out
    if not (upstream.get("repo") and upstream.get("commit")):
        # A wheel pin names no commit: the wheel, not a repository file, is what the hashes describe.
        why = (f"{package} {version} is pinned by its wheel, not by a repository commit" if package
               else "PROVENANCE.yaml names no upstream repo and commit")
        out["note"] = f"{out.get('note', 'not shown')}; --fetch-upstream cannot help: {why}"
        return out
    from kernelwiki.commands.upstream import UpstreamError, fetch

    try:
        text, url, cached = fetch(str(upstream["repo"]), str(upstream["commit"]), str(item.get("path")),
                                  str(item.get("sha256")), wiki.repo.root)
    except UpstreamError as err:
        out["note"], out["error"] = str(err), True
        return out
    out.pop("note", None)
    out.update(text=text, fetched_from=url)
    if cached is not None:
        out["cached_at"] = str(cached)
    return out


def _from_installed(out: dict, item: dict, package: str, version: Any, install: str | None) -> None:
    """Fill `out` with the installed copy's text when its hash matches the pin, else a note saying why not."""
    from importlib import metadata  # slow to import; only --include-code with upstream files needs it

    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        out["note"] = f"not installed; get it with: {install}"
        return
    path = item.get("path")
    base = Path(str(dist.locate_file(""))).resolve()
    located = Path(str(dist.locate_file(path))) if stays_below(path) else None
    if located is None or base not in located.resolve().parents:
        out["note"] = f"{path!r} is not a path inside the {package} distribution; not read (validate reports it)"
        return
    if not located.is_file():
        out["note"] = f"{package} {dist.version} is installed but has no {item.get('path')}; the pin is {version}: {install}"
        return
    try:
        data = read_regular(located, MAX_FILE_BYTES * 16)
        actual, text = hashlib.sha256(data).hexdigest(), data.decode("utf-8")
    except (UnsafeFile, UnicodeDecodeError) as err:
        out["note"] = f"{located} cannot be shown ({err}); not printed"
        return
    if actual != item.get("sha256"):
        out["note"] = (f"{located} has SHA-256 {actual}, not the pinned {item.get('sha256')} "
                       f"(installed {package} {dist.version}, pinned {version}); not printed. Pin: {install}")
        return
    out["text"] = text
    out["installed_at"] = str(located)


def _unlisted_items(wiki: Wiki, root: Path, provenance: dict, listed: list[Path]) -> list[dict]:
    """Our own files PROVENANCE names inside the directory that are no regular files (a FIFO, a folder,
    missing): named, so that the bundle says what it cannot print."""
    items = []
    for item in provenance.get("files") or []:
        path = item.get("path") if isinstance(item, dict) and item.get("origin") == "own" else None
        if not isinstance(path, str) or not stays_below(path) or (root / path) in listed:
            continue
        what = "missing" if not os.path.lexists(root / path) else "not a regular file"
        items.append({"path": wiki.repo.rel(root) + "/" + path, "origin": "own", "note": f"{what}; not printed"})
    return items


def _shared_items(wiki: Wiki, root, provenance: dict, wants=_everything) -> list[dict]:
    """Our own files the bundle uses from another bundle (PROVENANCE `files` with an own path outside
    the directory, e.g. ../hopper_gemm/sm90_common.py), so the printed bundle is complete."""
    items = []
    for item in provenance.get("files") or []:
        if not (isinstance(item, dict) and item.get("origin") == "own" and isinstance(item.get("path"), str)):
            continue
        try:
            path = wiki.repo.inside(root / item["path"])
        except ValueError:
            continue
        if path.is_file() and root not in path.parents:
            items.append(_file_item(wiki, path, wants))
    return items


def probe_bundle(wiki: Wiki, probe_id: str, wants=_everything) -> dict:
    directory = wiki.repo.probes / probe_id
    if not re.fullmatch(r"probe-[a-z0-9-]+", probe_id) or not directory.is_dir():
        return {"id": probe_id, "files": [], "note": f"no probe directory probes/{probe_id}"}
    files = [_file_item(wiki, p, wants) for p in _listing(directory)]
    return {"id": probe_id, "files": files, "latest_record": latest_record(wiki, probe_id)}


def latest_record(wiki: Wiki, probe_id: str) -> dict | None:
    """Summary of the newest run record of a probe that validate accepts (any mode, any status), or None."""
    record = latest(load_records(wiki.repo, probe=probe_id, quiet=True).get(probe_id, []))
    if record is None:
        return None
    data = record.data
    env = data.get("environment") or {}
    return {
        "path": record.path, "status": data.get("status"), "mode": data.get("mode"),
        "started_at": data.get("started_at"), "reason": data.get("reason"),
        "environment": {k: env.get(k) for k in ("gpu", "arch", "driver", "cuda_runtime", "cutlass_dsl", "torch")},
        "cases": [
            {"id": c.get("id"), "status": c.get("status"), **(c.get("headline") or {})}
            for c in data.get("cases") or [] if isinstance(c, dict)
        ],
    }


# --- what --include-code sends by default ---------------------------------------------------------
LISTED_CHARS = 100   # about the line that lists a file not sent
WITHHELD = "not sent: {size:,} bytes{role}; ask for it by name with files (--files NAME)"
"""The note of a file --include-code lists instead of sending (its text stays out of the answer)."""


def _within_budget(result: Result) -> None:
    """Without --files: the kernel's own files (the artifact directory's, role `kernel` first, in
    PROVENANCE order), each whole, while the Markdown answer stays under DEFAULT_CHARS; every other
    file (probe code, another bundle's shared files, upstream files unless fetch_upstream asked for
    them, what does not fit) keeps only a note with its size."""
    document = result.document
    bundle, probes = document["artifacts"], document["probes"]
    provenance = bundle.get("provenance") or {}
    roles = {str(item.get("path")): str(item.get("role") or "") for item in provenance.get("files") or []
             if isinstance(item, dict)}
    directory = bundle.get("dir") or ""
    order = {f"{directory}/{path}": number for number, path in enumerate(roles)}

    def withhold(item: dict, role: str = "") -> None:
        size = len(item.pop("text").encode("utf-8"))
        item.pop("installed_at", None)
        role = role.split(" (")[0]
        item["note"] = WITHHELD.format(size=size, role=f", {role}" if role else "")

    own: list[tuple[tuple, dict]] = []
    for item in bundle["files"]:
        if "text" not in item:
            continue
        path = str(item["path"])
        local = path[len(directory) + 1:] if path.startswith(directory + "/") else None
        if item["origin"] == "upstream":
            if not result.options.fetch_upstream:
                withhold(item, "upstream")
        elif local is None or local == "PROVENANCE.yaml":
            withhold(item, roles.get(local or "", "") or ("another bundle's file" if local is None else "provenance"))
        else:
            role = roles.get(local, "")
            own.append(((not role.startswith("kernel"), order.get(path, len(order)), path), item))
    for probe in probes:
        for item in probe["files"]:
            if "text" in item:
                withhold(item, "probe code")
    files = bundle["files"]
    bundle["files"] = [item for item in files if all(item is not other for _, other in own)]
    room = DEFAULT_CHARS - len(result.markdown()) - LISTED_CHARS * len(own)   # as if every own file were listed
    bundle["files"] = files
    sent = []
    for _, item in sorted(own, key=lambda pair: pair[0]):
        block = len(_code_block(item)) + 1
        role = roles.get(str(item["path"])[len(directory) + 1:], "")
        if block - LISTED_CHARS <= room:   # a file sent is not listed
            room -= block - LISTED_CHARS
            sent.append((item, role))
        else:
            withhold(item, role)
    while sent and len(result.markdown()) > DEFAULT_CHARS:   # the listing lines took the last of the room
        withhold(*sent.pop())


# --- Markdown rendering --------------------------------------------------------------------------
def _markdown(frontmatter_text: str, body: str, result: dict, options: Options) -> str:
    out: list[str] = []
    if options.part == "page" and options.section is not None:
        out.append(result["body"])
    elif options.part == "page" and "body" in result:
        out.append(f"---\n{frontmatter_text}---\n{result['body']}")
    elif options.part == "page":
        out.append(f"{result['id']}: the code files matching {', '.join(options.files)}")
    elif options.part == "frontmatter":
        out.append(frontmatter_text)
    elif options.part in ("body", "prose"):
        out.append(result["body"])
    else:
        out.append(claims_table(result["claims"], options))
    if options.follow_sources:
        out.append("\n## Sources cited\n")
        for source in result["sources"]:
            if source.get("missing"):
                out.append(f"- {source['id']}: (no such source page)")
                continue
            out.append(f"### {source['id']}: {source.get('title', '')}\n")
            for key in ("kind", "url", "authors", "published", "retrieved", "pin"):
                if key in source:
                    value = ", ".join(map(str, source[key])) if isinstance(source[key], list) else source[key]
                    out.append(f"- {key}: {value}")
            facts = source.get("facts")  # a list of text by the schema; validate reports anything else
            for fact in facts if isinstance(facts, list) else [facts] if facts is not None else []:
                out.append(f"- fact: {fact}")
            out.append("")
    if options.include_code:
        bundle = result["artifacts"]
        out.append(f"\n## Artifact bundle: {bundle['dir'] or '(none)'}\n")
        if bundle.get("note"):
            out.append(bundle["note"])
        out += _how_to_run(bundle.get("provenance") or {})
        out += _code_blocks(bundle["files"])
        out.append("\n## Probes\n")
        if not result["probes"]:
            out.append("No probe backs this page yet.")
        for probe in result["probes"]:
            out.append(f"### {probe['id']}\n")
            if probe.get("note"):
                out.append(probe["note"])
            out += _code_blocks(probe["files"])
            out.append(_record_summary(probe.get("latest_record"), cases=any("text" in f for f in probe["files"])))
    return "\n".join(out).rstrip("\n") + "\n"


def _code_blocks(items: list[dict]) -> list[str]:
    """Each file sent as a block; each file listed as one line with its size; files a --files
    pattern left out named on one line."""
    shown = [_code_block(item) for item in items if not _listed(item) and item.get("note") != LEFT_OUT]
    listed = [f"- {item['path']}: {item['note'][len('not sent: '):].split(';')[0]}" for item in items if _listed(item)]
    if listed:
        shown.append(f"\nListed, not sent ({', '.join(_sizes(items))}; ask for one by name with --files NAME, "
                     "MCP files):\n" + "\n".join(listed) + "\n")
    left_out = [str(item["path"]) for item in items if item.get("note") == LEFT_OUT]
    if left_out:
        shown.append(f"\n{len(left_out)} file(s) left out by the files patterns: {', '.join(left_out)}\n")
    return shown


def _listed(item: dict) -> bool:
    return "text" not in item and str(item.get("note", "")).startswith("not sent: ")


def _sizes(items: list[dict]) -> list[str]:
    total = sum(int(re.match(r"not sent: ([0-9,]+)", item["note"]).group(1).replace(",", ""))
                for item in items if _listed(item))
    return [f"{sum(1 for item in items if _listed(item))} file(s), {total:,} bytes"]


def _how_to_run(provenance: dict) -> list[str]:
    """The bundle's `requires` / `run` line and, when upstream files need their project's build, a warning."""
    lines = []
    requires = provenance.get("requires")
    if requires:
        lines.append(f"Requires: {'; '.join(map(str, requires)) if isinstance(requires, list) else requires}")
    if provenance.get("run"):
        lines.append(f"Run: {provenance['run']}")
    upstream = provenance.get("upstream") or {}
    if upstream.get("compiles_alone") is False:
        lines.append(f"Upstream files do not compile alone: {upstream.get('build_note') or 'they need the rest of their project'}")
    return [("\n" + "\n".join(lines) + "\n")] if lines else []


def _code_block(item: dict) -> str:
    header = f"#### {item['path']} ({item['origin']}"
    if item.get("package"):
        header += f", {item['package']} {item.get('version')}, sha256 {str(item.get('sha256'))[:12]}…"
    elif item.get("origin") == "upstream":
        header += f", {item.get('repo')}@{str(item.get('commit'))[:12]}, sha256 {str(item.get('sha256'))[:12]}…"
    header += ")\n"
    if "text" not in item:
        return header + f"\n{item.get('note', '')}\n"
    text = item["text"].replace("\r\n", "\n")
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    language = LANGUAGES.get(Path(str(item["path"])).suffix, "")
    return f"{header}\n{fence}{language}\n{text.rstrip()}\n{fence}\n"


def _longest_backtick_run(text: str) -> int:
    return max((len(m) for m in re.findall(r"`+", text)), default=0)


def _record_summary(record: dict | None, cases: bool = True) -> str:
    """The probe's newest record: where, when, on what; with `cases`, each case's headline (otherwise
    their count: the claims table holds the figures the page cites, `probe record` every case)."""
    if not record:
        return "\nLatest run record: none yet.\n"
    env = record["environment"]
    lines = [f"\nLatest run record: {record['path']} — {record['status']} ({record['mode']}) at {record['started_at']}",
             f"on {env.get('gpu')} {env.get('arch')}, driver {env.get('driver')}, CUDA {env.get('cuda_runtime')}, "
             f"cutlass-dsl {env.get('cutlass_dsl')}, torch {env.get('torch')}"]
    if record.get("reason"):
        lines.append(f"reason: {record['reason']}")
    if record["cases"] and not cases:
        probe = str(record["path"]).split("/")[-2]
        lines.append(f"{len(record['cases'])} case(s): their headlines come with the probe's files (--files probe.yaml), "
                     f"the whole record with `kernelwiki probe record {probe}` (MCP: get_record)")
    elif record["cases"]:
        lines += ["", "| case | status | metric | value | baseline | ratio |", "|---|---|---|---|---|---|"]
        for case in record["cases"]:
            lines.append("| " + " | ".join(cell(text) for text in (
                case.get("id"), case.get("status"), case.get("metric", ""),
                f"{_num(case.get('value'))} {case.get('unit', '')}",
                f"{case.get('baseline', '')} {_num(case.get('baseline_value'))}", _num(case.get("ratio")))) + " |")
    return "\n".join(lines) + "\n"


CLAIMS_STYLE = Style(columns=("claim (metric)", "value", "runs", "gpu", "arch", "dtype", "shape", "conditions (cell)",
                              "evidence", "cites"), grouped=False, ratio_digits=4)
"""`get --claims`: every claim in page order, with its metric, and the record and case it cites."""


def claims_table(claims: list[dict], options: Options | None = None) -> str:
    if not claims:
        return ("No claims match." if options is not None and options.filtered else "No claims on this page.") + "\n"
    return "\n".join(markdown_rows(claims, CLAIMS_STYLE)) + "\n"


def page_table(claims: list[dict], options: Options) -> str:
    """The body's claims block as get prints it: one row per claim (a reproduction under the claim it
    reproduces), each cited record once, as a reference below the table ([R1]: path)."""
    records = list(dict.fromkeys(str(c["record"]) for c in claims if c.get("record")))
    label = {path: f"[R{number}]" for number, path in enumerate(records, 1)}
    style = Style(columns=("claim", "value", "runs", "evidence", "GPU / arch", "conditions", "from"),
                  record_label=label.__getitem__)
    note = [f"{len(claims)} claim(s) match {_filters(options)}."] if options.filtered else []
    if not claims:
        return "\n".join(["", *note, ""]) + "\n"
    references = [f"{label[path]}: {path}" for path in records]
    return "\n".join(["", *note, *markdown_rows(claims, style), "", *references, ""]) + "\n"


def _filters(options: Options) -> str:
    return " and ".join(f"--{name} {' '.join(values)}" for name, values in (("case", options.cases),
                                                                            ("shape", options.shapes)) if values)


def _num(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# --- views an agent can afford -----------------------------------------------------------------
_GENERATED_BEGIN = re.compile(r"^<!-- kernelwiki:begin ([a-z0-9-]+) -->\s*$")
_GENERATED_END = "<!-- kernelwiki:end {} -->"
_CLAIM_MARK = re.compile(r"<!-- (?:claim:[A-Za-z0-9][A-Za-z0-9._-]*|/claim) -->")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
FIX_HEADING = re.compile(r"\b(fix|fixes|fixed|solution|workaround|remedy|instead)\b", re.I)
"""A heading whose code --prose keeps: the snippet a footgun page gives as the fix is the code an agent needs."""


def prose(body: str, keep_code: bool = False) -> str:
    """The body as prose only: generated blocks (claims, runs, versus tables) and fenced code become
    one line saying what was left out and how to get it, except code under a fix or solution heading
    (or every block, with `keep_code`); claim span marks are dropped, their words kept."""
    out: list[str] = []
    lines = body.splitlines(keepends=True)
    mask = code_mask(lines)
    generated: str | None = None
    keep, block, language = False, [], ""
    for line, code in zip(lines, mask):
        if generated is not None:
            if line.strip() == _GENERATED_END.format(generated):
                out.append(f"[generated `{generated}` block left out: part claims, or the full page, has it]\n")
                generated = None
            continue
        if code:
            if not block:
                opened = _FENCE.match(line.lstrip())
                language = opened.group(2) if opened else ""
            block.append(line)
            continue
        if block:
            out += block if keep or keep_code else [f"[{max(len(block) - 2, 0)} line(s) of {language or 'code'} "
                                                    "left out: part body has them]\n"]
            block = []
        heading = _HEADING.match(line)
        if heading:
            keep = bool(FIX_HEADING.search(heading.group(2)))
        begin = _GENERATED_BEGIN.match(line)
        if begin:
            generated = begin.group(1)
            continue
        out.append(_CLAIM_MARK.sub("", line))
    if block:   # a block never closed runs to the end of the body
        out += block if keep or keep_code else [f"[{max(len(block) - 1, 0)} line(s) of {language or 'code'} "
                                                "left out: part body has them]\n"]
    return "".join(out)


class NoSection(LookupError):
    """--section names no heading of the page; the message lists the headings it has."""


def section(body: str, name: str) -> str:
    """The sections of the body whose heading holds `name` (any case): each from its heading to the next
    heading of the same or a higher level, outside fenced code."""
    lines = body.splitlines(keepends=True)
    headings = [(index, len(m.group(1)), m.group(2)) for index, (line, code) in enumerate(zip(lines, code_mask(lines)))
                if not code and (m := _HEADING.match(line.rstrip("\r\n")))]
    wanted = name.lower()
    out: list[str] = []
    for number, (index, level, title) in enumerate(headings):
        if wanted not in title.lower():
            continue
        end = next((i for i, lv, _ in headings[number + 1:] if lv <= level), len(lines))
        out.append("".join(lines[index:end]).rstrip("\n") + "\n")
    if not out:
        raise NoSection(f"no section heading holds {name!r}; the headings: "
                        + printable_line("; ".join(title for _, _, title in headings)))
    return "\n".join(out)


def window(text: str, offset: int, max_bytes: int | None) -> tuple[str, int | None, int]:
    """(at most max_bytes of the UTF-8 text from byte `offset`, cut after a whole line where one fits,
    the offset to continue from or None at the end, the text's size in bytes)."""
    data = text.encode("utf-8")
    total = len(data)
    start = min(offset, total)
    while 0 < start < total and (data[start] & 0xC0) == 0x80:  # never start inside a character
        start += 1
    if max_bytes is None or total - start <= max_bytes:
        return data[start:].decode("utf-8"), None, total
    end = start + max_bytes
    line_end = data.rfind(b"\n", start, end)
    if line_end >= start:
        end = line_end + 1
    while end > start and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[start:end].decode("utf-8"), end, total
