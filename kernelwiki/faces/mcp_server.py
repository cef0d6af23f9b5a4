"""`kernelwiki mcp`: the lookups of the command line as a Model Context Protocol server over stdio.

Tools (arguments and results described by JSON Schemas; results are the documents of
kernelwiki.faces.output and kernelwiki.commands.get, the same ones `--json` prints): query, get_page,
list_probes, latest_record, validate. Resources: every page as `kernelwiki://page/<id>`
(Markdown, as `kernelwiki get` prints it).

A tool that fails (unknown page, bad argument, an upstream file whose hash does not match)
answers with an error result (`isError: true`) whose text is the message the CLI prints, so the
agent can read it and correct itself; an unknown tool or resource is a JSON-RPC error. The page
index is re-read on every call (a few milliseconds), so edits show without a restart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from kernelwiki import __version__
from kernelwiki.faces import output
from kernelwiki.storage.index import UnknownPage, Wiki
from kernelwiki.storage.repo import OutsideRepo, Repo

PAGE_URI = "kernelwiki://page/"
INSTRUCTIONS = (
    "kernelwiki: GPU kernel knowledge (Hopper sm_90a, Blackwell sm_100a) where every number is cited "
    "(evidence spec or source-reported, with its source page) or measured by a probe (compiled or measured, "
    "with its run record). Find pages with `query`, read one with `get_page` (include_code for the kernels, "
    "probe code and latest measurements; fetch_upstream for pinned upstream kernels, hash-checked). "
    "Quote numbers with their evidence level and conditions (GPU, arch, dtype, shape); never present a "
    "source-reported number as measured."
)
_TYPES = ["hardware", "kernel", "technique", "footgun", "language", "source"]
_EVIDENCE = ["spec", "source-reported", "compiled", "measured"]
_STATUSES = ["draft", "verified", "regressed", "stale"]


class ToolFailure(Exception):
    """A tool call that cannot answer; the message is the CLI's."""


def _strings(description: str, enum: list[str] | None = None) -> dict:
    items: dict[str, Any] = {"type": "string"}
    if enum:
        items["enum"] = enum
    return {"type": "array", "items": items, "description": description}


def _object(properties: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


@dataclass(frozen=True)
class ToolSpec:
    description: str
    input_schema: dict
    output: str
    """schema_version of the structured result (schemas/output/<output>.schema.json)."""
    run: Callable[[Repo, dict], tuple[dict, str]]
    """(structured result, text for the model)."""


# --- the tools -------------------------------------------------------------------------------------
def _query(repo: Repo, args: dict) -> tuple[dict, str]:
    from kernelwiki.commands.query import Filters, search, unknown_tag_messages

    wiki = Wiki.load(repo)
    problems = unknown_tag_messages(wiki, args.get("tag") or [])
    if problems:
        raise ToolFailure("; ".join(problems))
    words = str(args.get("words") or "").split()
    filters = Filters(args.get("type") or [], args.get("tag") or [], args.get("arch") or [],
                      args.get("evidence") or [], args.get("status") or [])
    document = output.query_document(search(wiki, words, filters, int(args.get("limit", 20))))
    return document, _json_text(document)


def _get_page(repo: Repo, args: dict) -> tuple[dict, str]:
    from kernelwiki.commands.get import Options, build

    wiki = Wiki.load(repo)
    entry = _resolve(wiki, str(args["page"]))
    options = Options(args.get("part", "page"), bool(args.get("follow_sources")), bool(args.get("include_code")),
                      "json", bool(args.get("fetch_upstream")))
    if options.fetch_upstream and not options.include_code:
        raise ToolFailure("fetch_upstream works with include_code")
    result = build(wiki, entry, options)
    if result.errors:
        raise ToolFailure("\n".join(result.errors))
    _check_json(result.document, f"{entry.rel}: ")
    return result.document, result.markdown()


def _list_probes(repo: Repo, args: dict) -> tuple[dict, str]:
    from kernelwiki.probing.specs import load_probes

    document = output.probe_list_document(Wiki.load(repo), load_probes(repo))
    return document, _json_text(document)


def _latest_record(repo: Repo, args: dict) -> tuple[dict, str]:
    from kernelwiki.probing.specs import load_probes
    from kernelwiki.model.vocab import did_you_mean

    probes = load_probes(repo)
    probe_id = str(args["probe"])
    if probe_id not in probes:
        raise ToolFailure(f"no probe {probe_id!r}{did_you_mean(probe_id, probes)}")
    try:
        document = output.latest_record_document(Wiki.load(repo), probes[probe_id], args.get("case"))
    except output.UnknownCase as err:
        raise ToolFailure(str(err)) from None
    return document, _json_text(document)


def _validate(repo: Repo, args: dict) -> tuple[dict, str]:
    from kernelwiki.commands.validate import validate

    report = validate(Wiki.load(repo))
    document = output.validate_document(report)
    lines = [str(p) for p in report.problems] or ["no problems"]
    lines.append(f"{report.pages} pages, {report.probes} probes, {report.provenance} provenance files, "
                 f"{report.records} run records")
    return document, "\n".join(lines)


TOOLS: dict[str, ToolSpec] = {
    "query": ToolSpec(
        "Search the pages: every word must match (aliases understood: UMMA->tcgen05, B200->sm_100a, "
        "H100/H200->sm_90a); ranked by where the words occur. Filters combine. Returns ids, titles, "
        "evidence levels (per architecture) and summaries.",
        _object({
            "words": {"type": "string", "description": "words to look for, separated by spaces"},
            "type": _strings("page types to keep", _TYPES),
            "tag": _strings("tags the page must all carry"),
            "arch": _strings("architectures: sm_90a, sm_100a, H100, B200, ..."),
            "evidence": _strings("evidence levels to keep (of the given arch when arch is set)", _EVIDENCE),
            "status": _strings("page statuses to keep", _STATUSES),
            "limit": {"type": "integer", "minimum": 0, "default": 20, "description": "at most this many (0: all)"},
        }),
        output.QUERY, _query),
    "get_page": ToolSpec(
        "Read one page by id, alias or repository path: frontmatter (claims with their evidence, sources, "
        "records), Markdown body; optionally the cited sources, and with include_code the artifact code "
        "(our kernels; pinned upstream files from the installed package, or downloaded with fetch_upstream "
        "and checked against their SHA-256), the probes' code and each probe's latest run record.",
        _object({
            "page": {"type": "string", "description": "page id (hw-wgmma), alias (skill-wgmma) or path"},
            "part": {"type": "string", "enum": ["page", "frontmatter", "body", "claims"], "default": "page"},
            "include_code": {"type": "boolean", "default": False},
            "follow_sources": {"type": "boolean", "default": False},
            "fetch_upstream": {"type": "boolean", "default": False,
                               "description": "with include_code: download pinned upstream files not installed"},
        }, ("page",)),
        "get.v1", _get_page),
    "list_probes": ToolSpec(
        "Every probe: kind, architectures, the pages it backs, and a summary of its latest run record.",
        _object({}), output.PROBE_LIST, _list_probes),
    "latest_record": ToolSpec(
        "The newest run record of a probe (status, environment, per-case headline values, baseline, ratio); "
        "with case, only that case.",
        _object({"probe": {"type": "string", "description": "probe id, e.g. probe-tma-copy"},
                 "case": {"type": "string", "description": "case id"}}, ("probe",)),
        output.LATEST_RECORD, _latest_record),
    "validate": ToolSpec(
        "Check every page, probe, provenance file and run record (schemas, references, hashes); "
        "problems as path:line: field: message.",
        _object({}), output.VALIDATE, _validate),
}


# --- helpers ---------------------------------------------------------------------------------------
def _resolve(wiki: Wiki, name: str):
    try:
        return wiki.resolve(name)
    except (UnknownPage, OutsideRepo) as err:
        raise ToolFailure(str(err)) from None


def _check_json(document: dict, where: str = "") -> None:
    try:
        output.check(document)
    except output.NotJson as err:
        raise ToolFailure(f"{where}{err}") from None


def _json_text(document: dict) -> str:
    try:
        return output.dumps(document)
    except output.NotJson as err:
        raise ToolFailure(str(err)) from None


def _check_arguments(name: str, schema: dict, arguments: dict) -> None:
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        field = ".".join(str(p) for p in error.absolute_path) or "-"
        raise ToolFailure(f"{name}: {field}: {error.message}")


def output_schema(repo: Repo, version: str) -> dict:
    path = repo.schemas / "output" / f"{version}.schema.json"
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"type": "object"}
    return {k: v for k, v in schema.items() if k not in ("$schema", "$id")}


def call(repo: Repo, name: str, arguments: dict | None) -> types.CallToolResult:
    """One tools/call; a failure becomes an error result with the CLI's message."""
    tool = TOOLS.get(name)
    if tool is None:
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {name!r}; tools: {', '.join(TOOLS)}")
    try:
        _check_arguments(name, tool.input_schema, arguments or {})
        document, text = tool.run(repo, arguments or {})
    except ToolFailure as err:
        return types.CallToolResult(content=[types.TextContent(type="text", text=str(err))], is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=document)


def read_page(repo: Repo, uri: str) -> str:
    from kernelwiki.commands.get import Options, get_page

    if not uri.startswith(PAGE_URI):
        raise MCPError(types.INVALID_PARAMS, f"unknown resource {uri!r}; pages are {PAGE_URI}<id>")
    wiki = Wiki.load(repo)
    try:
        entry = wiki.resolve(uri[len(PAGE_URI):])
    except (UnknownPage, OutsideRepo) as err:
        raise MCPError(types.INVALID_PARAMS, str(err)) from None
    return get_page(wiki, entry, Options())


def build_server(repo: Repo) -> Server:
    tools = [types.Tool(name=name, description=tool.description, input_schema=tool.input_schema,
                        output_schema=output_schema(repo, tool.output),
                        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=name == "get_page"))
             for name, tool in TOOLS.items()]

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await anyio.to_thread.run_sync(call, repo, params.name, params.arguments)

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        entries = Wiki.load(repo).by_id()
        return types.ListResourcesResult(resources=[
            types.Resource(uri=f"{PAGE_URI}{page_id}", name=page_id, title=str(e.get("title") or page_id),
                           description=e.headline or None, mime_type="text/markdown")
            for page_id, e in sorted(entries.items())])

    async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
            name="page", uri_template=PAGE_URI + "{id}", mime_type="text/markdown",
            description="a page by id, alias or repository path")])

    async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        text = await anyio.to_thread.run_sync(read_page, repo, str(params.uri))
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=str(params.uri), mime_type="text/markdown", text=text)])

    return Server("kernelwiki", version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool, on_list_resources=list_resources,
                  on_list_resource_templates=list_templates, on_read_resource=read_resource)


def serve(repo: Repo) -> int:
    """Serve on stdin/stdout until the client closes the connection."""
    server = build_server(repo)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
    return 0

