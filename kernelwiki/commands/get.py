"""`kernelwiki get` / scripts/get_page.py: one page, as Markdown or JSON, optionally with its
sources, claims, artifact code, probe code and the latest run record of each probe."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from kernelwiki.storage.index import Entry, Wiki
from kernelwiki.storage.records import latest, load_records
from kernelwiki.commands.refresh.blocks import fill_claims
from kernelwiki.model.claims import Style, markdown_rows, page_claims, run_count
from kernelwiki.model.files import UnsafeFile, read_regular, stays_below
from kernelwiki.model.terminal import printable

LANGUAGES = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".h": "cpp", ".hpp": "cpp",
             ".yaml": "yaml", ".yml": "yaml", ".json": "json", ".sh": "bash", ".md": "markdown", ".ptx": "ptx"}
MAX_FILE_BYTES = 256 * 1024
SCHEMA_VERSION = "get.v2"
"""The JSON document follows schemas/output/get.v2.schema.json (v1 plus the prose part)."""


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
    """--include-code: only code files whose path or name matches one of these shell patterns (all when empty)."""

    def wants(self, path: str) -> bool:
        return not self.files or any(fnmatch(path, p) or fnmatch(path.rsplit("/", 1)[-1], p) for p in self.files)


@dataclass
class Result:
    """One page as the get.v1 JSON document, plus what the Markdown rendering needs."""

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
    entry = wiki.current(entry)  # the page as the file is now, whatever the cache says
    meta = entry.meta or {}
    frontmatter_text, body = _split(wiki, entry)
    body = fill_claims(body, meta)   # the file keeps its claims block empty; readers get the table
    result: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "id": entry.id, "path": entry.rel,
                              "part": options.part}
    if options.part in ("page", "frontmatter"):
        result["frontmatter"] = meta
    if options.part in ("page", "body"):
        result["body"] = body
    if options.part == "prose":
        result["body"] = prose(body)
    if options.part == "claims":
        # How many runs each measured figure summarizes, said outright (a single run's claim has no spread).
        result["claims"] = [c if run_count(c) is None else {**c, "runs": run_count(c)} for c in page_claims(meta)]
    if options.follow_sources:
        ids = wiki.by_id()
        result["sources"] = [_source_summary(ids[s]) if s in ids else {"id": s, "missing": True}
                             for s in meta.get("sources") or [] if isinstance(s, str)]
    if options.include_code:
        result["artifacts"] = artifact_bundle(wiki, meta, fetch_upstream=options.fetch_upstream, wants=options.wants)
        result["probes"] = [probe_bundle(wiki, p, options.wants) for p in meta.get("probes") or [] if isinstance(p, str)]
    return Result(result, frontmatter_text, body, options)


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
    files = [_file_item(wiki, path, wants) for path in _listing(root)]
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
    """Files under an artifact or probe directory; symbolic links are listed (and refused by
    _file_item), never followed."""
    return sorted(p for p in root.rglob("*")
                  if (p.is_symlink() or p.is_file()) and "__pycache__" not in p.parts)


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


# --- Markdown rendering --------------------------------------------------------------------------
def _markdown(frontmatter_text: str, body: str, result: dict, options: Options) -> str:
    out: list[str] = []
    if options.part == "page":
        out.append(f"---\n{frontmatter_text}---\n{body}")
    elif options.part == "frontmatter":
        out.append(frontmatter_text)
    elif options.part == "body":
        out.append(body)
    elif options.part == "prose":
        out.append(result["body"])
    else:
        out.append(claims_table(result["claims"]))
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
            out.append(_record_summary(probe.get("latest_record")))
    return "\n".join(out).rstrip("\n") + "\n"


def _code_blocks(items: list[dict]) -> list[str]:
    """Each file's block; files a --files pattern left out are named on one line, not one block each."""
    shown = [_code_block(item) for item in items if item.get("note") != LEFT_OUT]
    left_out = [str(item["path"]) for item in items if item.get("note") == LEFT_OUT]
    if left_out:
        shown.append(f"\n{len(left_out)} file(s) left out by the files patterns: {', '.join(left_out)}\n")
    return shown


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


def _record_summary(record: dict | None) -> str:
    if not record:
        return "\nLatest run record: none yet.\n"
    env = record["environment"]
    lines = [f"\nLatest run record: {record['path']} — {record['status']} ({record['mode']}) at {record['started_at']}",
             f"on {env.get('gpu')} {env.get('arch')}, driver {env.get('driver')}, CUDA {env.get('cuda_runtime')}, "
             f"cutlass-dsl {env.get('cutlass_dsl')}, torch {env.get('torch')}"]
    if record.get("reason"):
        lines.append(f"reason: {record['reason']}")
    if record["cases"]:
        lines += ["", "| case | status | metric | value | baseline | ratio |", "|---|---|---|---|---|---|"]
        for case in record["cases"]:
            lines.append(f"| {case.get('id')} | {case.get('status')} | {case.get('metric', '')} | "
                         f"{_num(case.get('value'))} {case.get('unit', '')} | {case.get('baseline', '')} "
                         f"{_num(case.get('baseline_value'))} | {_num(case.get('ratio'))} |")
    return "\n".join(lines) + "\n"


CLAIMS_STYLE = Style(columns=("claim (metric)", "value", "runs", "gpu", "arch", "dtype", "shape", "conditions (cell)",
                              "evidence", "cites"), grouped=False, ratio_digits=4)
"""`get --claims`: every claim in page order, with its metric, and the record and case it cites."""


def claims_table(claims: list[dict]) -> str:
    if not claims:
        return "No claims on this page.\n"
    return "\n".join(markdown_rows(claims, CLAIMS_STYLE)) + "\n"


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


def prose(body: str) -> str:
    """The body as prose only: generated blocks (claims, runs, versus tables) and fenced code become
    one line saying what was left out and how to get it; claim span marks are dropped, their words kept."""
    out: list[str] = []
    fence: str | None = None
    generated: str | None = None
    language, count = "", 0
    for line in body.splitlines(keepends=True):
        if generated is not None:
            if line.strip() == _GENERATED_END.format(generated):
                out.append(f"[generated `{generated}` block left out: part claims, or the full page, has it]\n")
                generated = None
            continue
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence) and not opened.group(2):
                out.append(f"[{count} line(s) of {language or 'code'} left out: part body has them]\n")
                fence = None
            else:
                count += 1
            continue
        if opened:
            fence, language, count = opened.group(1), opened.group(2), 0
            continue
        begin = _GENERATED_BEGIN.match(line)
        if begin:
            generated = begin.group(1)
            continue
        out.append(_CLAIM_MARK.sub("", line))
    return "".join(out)


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
