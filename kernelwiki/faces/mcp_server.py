"""`kernelwiki mcp`: the lookups of the command line as a Model Context Protocol server over stdio.

Tools: query, get_page, get_record, probe_show, list_probes, latest_record, validate. Each answer is sent once:
get_page answers Markdown text only (as `kernelwiki get` prints it; with format json, the get.v2
document as structured content and a one-line text), the other tools answer their JSON document
(schemas/output/, as `--json` prints it) as structured content with a short plain-text summary.
Resources: every page as `kernelwiki://page/<id>` (Markdown).

Arguments are checked by kernelwiki.faces.arguments, as on the command line: a bad one, an
unknown page or probe, an upstream file whose hash does not match, all answer an error result
(`isError: true`) whose text is the line the CLI prints, `error: ...`; an unknown tool or
resource is a JSON-RPC error with the same prefix, and so is the answer to a line that is no JSON-RPC
message (not JSON, a batch, params that is not an object: kernelwiki.faces.mcp_wire). When stdin
closes, requests already read are answered before the server exits. The page index is re-read on every call (a few milliseconds),
so edits show without a restart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from kernelwiki import __version__
from kernelwiki.faces import arguments, output
from kernelwiki.faces.arguments import ArgumentError
from kernelwiki.faces.mcp_wire import ERROR, claimed_stdio, run_wire
from kernelwiki.storage.index import UnknownPage, Wiki
from kernelwiki.storage.repo import OutsideRepo, Repo

PAGE_URI = "kernelwiki://page/"
INSTRUCTIONS = (
    "kernelwiki: GPU kernel knowledge (Hopper sm_90a, Blackwell sm_100a) where every number is cited "
    "(evidence spec or source-reported, with its source page) or measured by a probe (compiled or measured, "
    "with its run record). Find pages with `query` (hits carry each page's size and its code's size), read one "
    "with `get_page` (part prose for the reasoning alone; include_code for the kernels, probe code and latest "
    "measurements, files to choose among them, max_bytes and offset to read a long answer in pieces; "
    "fetch_upstream for pinned upstream kernels, hash-checked), and see how a number was measured with "
    "`get_record` (protocol, timings, clocks, correctness, environment). Quote numbers with their evidence "
    "level and conditions (GPU, arch, dtype, shape); never present a source-reported number as measured."
)


class ToolFailure(Exception):
    """A tool call that cannot answer; the message is the CLI's, without its prefix."""


def _strings(description: str, enum: tuple[str, ...] | None = None) -> dict:
    items: dict[str, Any] = {"type": "string"}
    if enum:
        items["enum"] = list(enum)
    return {"type": "array", "items": items, "description": description}


def _object(properties: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


@dataclass(frozen=True)
class Answer:
    """What a tool sends: a text, and a structured document when the tool declares an output schema."""

    text: str
    document: dict | None = None


@dataclass(frozen=True)
class ToolSpec:
    description: str
    input_schema: dict
    output: str | None
    """schema_version of the structured result (schemas/output/<output>.schema.json); None: text only."""
    run: Callable[[Repo, dict], Answer]


# --- the tools -------------------------------------------------------------------------------------
def _query(repo: Repo, args: dict) -> Answer:
    from kernelwiki.commands.query import ask
    from kernelwiki.storage.termindex import open_index

    index = open_index(repo)
    words, filters, limit = arguments.query(index, args)
    index, result = ask(repo, index, words, filters, limit)
    lines, notes = output.query_text(result)
    left_out = [str(problem) for problem in index.misnamed_problems()]
    return Answer("\n".join(left_out + notes + lines) + "\n", _checked(output.query_document(result)))


def _get_page(repo: Repo, args: dict) -> Answer:
    from kernelwiki.commands.get import NoSection, build, window
    from kernelwiki.storage.lookup import open_page

    request = arguments.get(args)
    try:
        wiki, entry = open_page(repo, request.page)   # as `kernelwiki get` finds it: the same answer
        result = build(wiki, entry, request.options)
    except (UnknownPage, OutsideRepo, NoSection) as err:
        raise ToolFailure(str(err)) from None
    if result.errors:
        raise ToolFailure(f"\n{ERROR}".join(result.errors))
    if request.options.fmt == "json":
        document = _checked(result.document, f"{entry.rel}: ")
        return Answer(f"{entry.id}: the get.v2 document is the structured content "
                      f"({len(output.dumps(document).encode())} bytes)", document)
    text, next_offset, total = window(result.markdown(), request.offset, request.max_bytes)
    return Answer(text + output.continuation(next_offset, total))


def _get_record(repo: Repo, args: dict) -> Answer:
    from kernelwiki.probing.specs import load_probes

    probe_id = arguments.probe_id(load_probes(repo), args.get("probe"))
    case = arguments.case_id(args.get("case"))
    record = arguments.record_name(args.get("record"))
    try:
        document = output.record_document(Wiki.load(repo), probe_id, record, case)
    except LookupError as err:
        raise ToolFailure(str(err)) from None
    return Answer(output.record_text(document), _checked(document))


def _probe_show(repo: Repo, args: dict) -> Answer:
    from kernelwiki.probing.specs import load_probes

    probes = load_probes(repo)
    spec = probes[arguments.probe_id(probes, args.get("probe"))]
    document = _checked(output.probe_show_document(Wiki.load(repo), spec))
    return Answer(output.probe_show_text(document), document)


def _list_probes(repo: Repo, args: dict) -> Answer:
    from kernelwiki.probing.specs import load_probes

    document = _checked(output.probe_list_document(Wiki.load(repo), load_probes(repo)))
    return Answer(output.probe_list_text(document), document)


def _latest_record(repo: Repo, args: dict) -> Answer:
    from kernelwiki.probing.specs import load_probes

    probes = load_probes(repo)
    probe_id = arguments.probe_id(probes, args.get("probe"))
    case = arguments.case_id(args.get("case"))
    try:
        document = output.latest_record_document(Wiki.load(repo), probes[probe_id], case)
    except output.UnknownCase as err:
        raise ToolFailure(str(err)) from None
    record = document["latest_record"]
    text = (f"{probe_id}: no record yet" if record is None else
            f"{probe_id}: {record['path']}, {record['status']} ({record['mode']}) at {record['started_at']}, "
            f"{len(record['cases'])} case(s); get_record has the protocol, timings, clocks and correctness")
    return Answer(text, _checked(document))


def _validate(repo: Repo, args: dict) -> Answer:
    from kernelwiki.commands.validate import validate

    report = validate(Wiki.load(repo))
    lines = [str(p) for p in report.problems] or ["no problems"]
    lines.append(f"{report.pages} pages, {report.probes} probes, {report.provenance} provenance files, "
                 f"{report.records} run records")
    return Answer("\n".join(lines), _checked(output.validate_document(report)))


TOOLS: dict[str, ToolSpec] = {
    "query": ToolSpec(
        "Search the pages: every word must match (aliases understood: UMMA->tcgen05, B200->sm_100a, "
        "H100/H200->sm_90a; plurals and -ing/-ed forms; stop words such as 'vs' left out); ranked by where the "
        "words occur. When no page holds every word, the nearest pages by any word, with the words no page holds "
        "(matched any, covered false); total and truncated say what the limit left out. Hits carry ids, titles, "
        "evidence levels (per architecture), summaries and sizes (bytes of the page and of its code). Answers the "
        "query.v3 document as structured content and the hits as short text lines.",
        _object({
            "words": {"type": "string", "description": "words to look for, separated by spaces"},
            "type": _strings("page types to keep", arguments.PAGE_TYPES),
            "tag": _strings("tags the page must all carry"),
            "arch": _strings("architectures: sm_90a, sm_100a, H100, B200, ..."),
            "evidence": _strings("evidence levels to keep (of the given arch when arch is set)", arguments.EVIDENCE),
            "status": _strings("page statuses to keep", arguments.STATUSES),
            "limit": {"type": "integer", "minimum": 0, "default": arguments.DEFAULT_LIMIT,
                      "description": "at most this many (0: all)"},
        }),
        output.QUERY, _query),
    "get_page": ToolSpec(
        "Read one page by id, alias or repository path: frontmatter, Markdown body and its claims table (each "
        "claim with its evidence and conditions, once); part claims for the claims alone (case and shape "
        "choose among them), part prose for the reasoning without generated tables and code (but the code "
        "under a Fix or Solution heading), section for the sections whose heading holds a text. Optionally "
        "the cited sources, and with include_code the artifact code: the kernel's own files while the answer "
        "stays under 80,000 characters (with their requires and run lines), every other file (probe code; "
        "pinned upstream files, from the installed package or with fetch_upstream from a mirror or a "
        "download, checked against their SHA-256) listed with its size, and each probe's latest run record; "
        "files sends only the code files it names, without the page. Answers Markdown text only (what "
        "`kernelwiki get` prints, byte for byte); max_bytes cuts it after a whole line and its last line gives "
        "the offset to continue from. With format json: the get.v2 document as structured content and a "
        "one-line text.",
        _object({
            "page": {"type": "string", "description": "page id (hw-wgmma), alias (skill-wgmma) or path"},
            "part": {"type": "string", "enum": list(arguments.PARTS), "default": "page"},
            "include_code": {"type": "boolean", "default": False},
            "files": _strings("with include_code: shell patterns (*.py, hopper_gemm.py, * for all) choosing the "
                              "code files sent by path or name, without the page; the others are named only"),
            "case": _strings("only the claims whose case (or id) holds this text or matches this shell pattern"),
            "shape": _strings("only the claims whose shape holds this text or matches this shell pattern"),
            "section": {"type": "string", "description": "only the body's sections whose heading holds this text"},
            "follow_sources": {"type": "boolean", "default": False},
            "fetch_upstream": {"type": "boolean", "default": False,
                               "description": "with include_code: upstream files not installed, from a mirror or "
                                              "downloaded"},
            "max_bytes": {"type": "integer", "minimum": arguments.MIN_MAX_BYTES,
                          "description": "send at most this many bytes of the Markdown"},
            "offset": {"type": "integer", "minimum": 0, "default": 0,
                       "description": "with max_bytes: the byte to start from (the last answer's last line says it)"},
            "format": {"type": "string", "enum": ["md", "json"], "default": "md"},
        }, ("page",)),
        None, _get_page),
    "get_record": ToolSpec(
        "How a number was measured: one run record whole - protocol (timing method, warmup, iterations, order, "
        "L2 policy, seed), each case's parameters, timings, correctness (errors and tolerances), metrics and "
        "baselines, ceilings, negative control, and the full environment (GPU, clocks before and after, power "
        "limit, driver, CUDA, library versions, commit). The newest record of the probe unless record names one "
        "(a path or file name, as claims cite it); with case, only that case. Answers the record.v1 document as "
        "structured content and a plain-text summary.",
        _object({"probe": {"type": "string", "description": "probe id, e.g. probe-hopper-gemm"},
                 "record": {"type": "string", "description": "artifacts/evidence/<probe>/<run>.json.gz or "
                                                             "<run>.json.gz (.json also names the run)"},
                 "case": {"type": "string", "description": "case id"}}, ("probe",)),
        output.RECORD, _get_record),
    "probe_show": ToolSpec(
        "One probe's spec - what it measures, for which pages and claims, its architectures, cases and their "
        "params, baselines, timeout, requires, expected instructions and negative control - and a summary of its "
        "latest run record. Answers the probe-show.v1 document as structured content and a short text.",
        _object({"probe": {"type": "string", "description": "probe id, e.g. probe-hopper-gemm"}}, ("probe",)),
        output.PROBE_SHOW, _probe_show),
    "list_probes": ToolSpec(
        "Every probe: kind, architectures, the pages it backs, and a summary of its latest run record. Answers "
        "the probe-list.v1 document as structured content and one text line per probe.",
        _object({}), output.PROBE_LIST, _list_probes),
    "latest_record": ToolSpec(
        "A summary of the newest run record of a probe (status, environment, per-case headline values, baseline, "
        "ratio); with case, only that case (get_record has the whole record). Answers the latest-record.v1 "
        "document as structured content and a one-line text.",
        _object({"probe": {"type": "string", "description": "probe id, e.g. probe-tma-copy"},
                 "case": {"type": "string", "description": "case id"}}, ("probe",)),
        output.LATEST_RECORD, _latest_record),
    "validate": ToolSpec(
        "Check every page, probe, provenance file and run record (schemas, references, hashes). Answers the "
        "validate.v1 document as structured content and the problems as text, path:line: field: message.",
        _object({}), output.VALIDATE, _validate),
}


# --- helpers ---------------------------------------------------------------------------------------
def _resolve(wiki: Wiki, name: str):
    try:
        return wiki.resolve(name)
    except (UnknownPage, OutsideRepo) as err:
        raise ToolFailure(str(err)) from None


def _checked(document: dict, where: str = "") -> dict:
    try:
        output.check(document)
    except output.NotJson as err:
        raise ToolFailure(f"{where}{err}") from None
    return document


def output_schema(repo: Repo, version: str) -> dict:
    path = repo.schemas / "output" / f"{version}.schema.json"
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"type": "object"}
    return {k: v for k, v in schema.items() if k not in ("$schema", "$id")}


def _failure(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=ERROR + message)], is_error=True)


def call(repo: Repo, name: str, arguments: dict | None) -> types.CallToolResult:
    """One tools/call; a failure becomes an error result with the CLI's message."""
    tool = TOOLS.get(name)
    if tool is None:
        raise MCPError(types.INVALID_PARAMS, f"{ERROR}unknown tool {name!r}; tools: {', '.join(TOOLS)}")
    arguments = arguments or {}
    try:
        _check_shape(name, tool, arguments)
        answer = tool.run(repo, arguments)
    except (ToolFailure, ArgumentError) as err:
        return _failure(str(err))
    content = [types.TextContent(type="text", text=answer.text)]
    if answer.document is None:
        return types.CallToolResult(content=content)
    return types.CallToolResult(content=content, structured_content=answer.document)


def _check_shape(name: str, tool: ToolSpec, arguments: dict) -> None:
    """Unknown fields are refused before the tool runs; every known field's value is checked by
    kernelwiki.faces.arguments, so that its message (the CLI's) is the one sent."""
    known = tool.input_schema["properties"]
    unknown = sorted(set(arguments) - set(known))
    if unknown:
        raise ToolFailure(f"{name}: {', '.join(unknown)}: not an argument of {name}; its arguments: {', '.join(known)}")


def read_page(repo: Repo, uri: str) -> str:
    from kernelwiki.commands.get import Options, get_page

    if not uri.startswith(PAGE_URI):
        raise MCPError(types.INVALID_PARAMS, f"{ERROR}unknown resource {uri!r}; pages are {PAGE_URI}<id>")
    wiki = Wiki.load(repo)
    try:
        entry = wiki.resolve(arguments.page_name(uri[len(PAGE_URI):]))
    except (UnknownPage, OutsideRepo, ArgumentError) as err:
        raise MCPError(types.INVALID_PARAMS, f"{ERROR}{err}") from None
    return get_page(wiki, entry, Options())
def build_server(repo: Repo) -> Server:
    tools = [types.Tool(name=name, description=tool.description, input_schema=tool.input_schema,
                        output_schema=output_schema(repo, tool.output) if tool.output else None,
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
    """Serve on stdin/stdout until the client closes stdin and every request read is answered
    (kernelwiki.faces.mcp_wire answers every line that asks, the malformed ones too)."""
    server = build_server(repo)

    async def main() -> None:
        with claimed_stdio() as (wire_in, wire_out):
            await run_wire(server, wire_in, wire_out)

    anyio.run(main)
    return 0
