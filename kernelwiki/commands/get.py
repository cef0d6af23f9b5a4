"""`kernelwiki get` / scripts/get_page.py: one page, as Markdown or JSON, optionally with its
sources, claims, artifact code, probe code and the latest run record of each probe."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwiki.storage.index import Entry, Wiki
from kernelwiki.storage.records import order_key, probe_ids
from kernelwiki.storage.records import scan as scan_records
from kernelwiki.model.files import UnsafeFile, read_regular, stays_below
from kernelwiki.model.terminal import printable

LANGUAGES = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".h": "cpp", ".hpp": "cpp",
             ".yaml": "yaml", ".yml": "yaml", ".json": "json", ".sh": "bash", ".md": "markdown", ".ptx": "ptx"}
MAX_FILE_BYTES = 256 * 1024
SCHEMA_VERSION = "get.v1"
"""The JSON document follows schemas/output/get.v1.schema.json."""


@dataclass
class Options:
    part: str = "page"
    """page | frontmatter | body | claims"""
    follow_sources: bool = False
    include_code: bool = False
    fmt: str = "md"
    fetch_upstream: bool = False
    """--include-code: download pinned upstream files that are not installed (kernelwiki.commands.upstream)."""


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
    result: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "id": entry.id, "path": entry.rel,
                              "part": options.part}
    if options.part in ("page", "frontmatter"):
        result["frontmatter"] = meta
    if options.part in ("page", "body"):
        result["body"] = body
    if options.part == "claims":
        result["claims"] = all_claims(meta)
    if options.follow_sources:
        ids = wiki.by_id()
        result["sources"] = [_source_summary(ids[s]) if s in ids else {"id": s, "missing": True}
                             for s in meta.get("sources") or [] if isinstance(s, str)]
    if options.include_code:
        result["artifacts"] = artifact_bundle(wiki, meta, fetch_upstream=options.fetch_upstream)
        result["probes"] = [probe_bundle(wiki, p) for p in meta.get("probes") or [] if isinstance(p, str)]
    return Result(result, frontmatter_text, body, options)


def _split(wiki: Wiki, entry: Entry) -> tuple[str, str]:
    """Frontmatter text and body as read (LF line endings); the parsed frontmatter is in the index."""
    page = wiki.page(entry.rel)
    return page.frontmatter_text, page.body


def all_claims(meta: dict) -> list[dict]:
    """Claims in our format, with legacy performance_claims read as source-reported ones."""
    claims = [dict(c) for c in meta.get("claims") or [] if isinstance(c, dict)]
    for index, legacy in enumerate(meta.get("performance_claims") or []):
        if isinstance(legacy, dict):
            claim = {k: v for k, v in legacy.items() if k != "source_id"}
            claim.update(id=f"performance-claim-{index}", evidence="source-reported", source=legacy.get("source_id"))
            claims.append(claim)
    return claims


def _source_summary(entry: Entry) -> dict:
    keys = ("id", "title", "kind", "url", "authors", "published", "retrieved", "pin", "facts")
    return {k: entry.get(k) for k in keys if entry.get(k) is not None}


# --- code bundles --------------------------------------------------------------------------------
def artifact_bundle(wiki: Wiki, meta: dict, fetch_upstream: bool = False) -> dict:
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
    files = []
    for path in _listing(root):
        files.append(_file_item(wiki, path))
    files += _shared_items(wiki, root, provenance)
    upstream = provenance.get("upstream") or {}
    for item in provenance.get("files") or []:
        if isinstance(item, dict) and item.get("origin") == "upstream":
            files.append(_upstream_item(wiki, item, upstream, fetch_upstream))
    return {"dir": directory, "provenance": provenance or None, "files": files}


def _listing(root: Path) -> list[Path]:
    """Files under an artifact or probe directory; symbolic links are listed (and refused by
    _file_item), never followed."""
    return sorted(p for p in root.rglob("*")
                  if (p.is_symlink() or p.is_file()) and "__pycache__" not in p.parts)


def _file_item(wiki: Wiki, path: Path) -> dict:
    rel = wiki.repo.rel(path.parent) + "/" + path.name  # the link's own path, not its target's
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
    out.update(text=text, fetched_from=url, cached_at=str(cached))
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


def _shared_items(wiki: Wiki, root, provenance: dict) -> list[dict]:
    """Our own files the bundle uses from another bundle (PROVENANCE `files` with an own path outside
    the directory, e.g. ../hopper-gemm/sm90_common.py), so the printed bundle is complete."""
    items = []
    for item in provenance.get("files") or []:
        if not (isinstance(item, dict) and item.get("origin") == "own" and isinstance(item.get("path"), str)):
            continue
        try:
            path = wiki.repo.inside(root / item["path"])
        except ValueError:
            continue
        if path.is_file() and root not in path.parents:
            items.append(_file_item(wiki, path))
    return items


def probe_bundle(wiki: Wiki, probe_id: str) -> dict:
    directory = wiki.repo.probes / probe_id
    if not re.fullmatch(r"probe-[a-z0-9-]+", probe_id) or not directory.is_dir():
        return {"id": probe_id, "files": [], "note": f"no probe directory probes/{probe_id}"}
    files = [_file_item(wiki, p) for p in _listing(directory)]
    return {"id": probe_id, "files": files, "latest_record": latest_record(wiki, probe_id)}


def latest_record(wiki: Wiki, probe_id: str) -> dict | None:
    """Summary of the newest run record of a probe that validate accepts, or None."""
    newest: tuple[tuple, Path, dict] | None = None
    for record in scan_records(wiki.repo, probe_ids(wiki.repo), probe=probe_id):
        key = order_key(record.data.get("started_at"), record.rel) if record.ok else None
        if key and (newest is None or key > newest[0]):
            newest = (key, record.path, record.data)
    if newest is None:
        return None
    _, path, data = newest
    env = data.get("environment") or {}
    return {
        "path": wiki.repo.rel(path), "status": data.get("status"), "mode": data.get("mode"),
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
        for item in bundle["files"]:
            out.append(_code_block(item))
        out.append("\n## Probes\n")
        if not result["probes"]:
            out.append("No probe backs this page yet.")
        for probe in result["probes"]:
            out.append(f"### {probe['id']}\n")
            if probe.get("note"):
                out.append(probe["note"])
            for item in probe["files"]:
                out.append(_code_block(item))
            out.append(_record_summary(probe.get("latest_record")))
    return "\n".join(out).rstrip("\n") + "\n"


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


def claims_table(claims: list[dict]) -> str:
    if not claims:
        return "No claims on this page.\n"
    rows = ["| claim | value | gpu | arch | dtype | shape | evidence | cites |", "|---|---|---|---|---|---|---|---|"]
    for claim in claims:
        value = f"{claim.get('value')} {claim.get('unit', '')}".strip()
        baseline = claim.get("baseline")
        if claim.get("ratio") is not None and baseline:
            name = baseline.get("name") if isinstance(baseline, dict) else baseline
            value += f" ({_num(claim['ratio'])}× {name})"
        cites = claim.get("record") or claim.get("source") or ""
        if claim.get("case"):
            cites += f"#{claim['case']}"
        rows.append(f"| {claim.get('id')} ({claim.get('metric')}) | {value} | {claim.get('gpu', '')} | "
                    f"{claim.get('arch', '')} | {claim.get('dtype', '')} | {claim.get('shape', '')} | "
                    f"{claim.get('evidence')} | {cites} |")
    return "\n".join(rows) + "\n"


def _num(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
