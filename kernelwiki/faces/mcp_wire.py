"""The stdio wire of `kernelwiki mcp`: one JSON-RPC message a line, and every line that asks gets an answer.

The SDK's stdio transport drops a line it cannot turn into a message (not JSON, a batch, `params` that is
not an object, an object that is no JSON-RPC message) and its client then waits forever. Here each line is
checked before the SDK sees it, and answered as JSON-RPC 2.0 says when it is not a message the server can
take: -32700 (parse error, id null) for bytes that are not UTF-8 JSON, -32600 (invalid request; the
request's id when it has a usable one, else null) for a value that is not a JSON-RPC message, and -32602
(invalid params) for a request whose `params` is not an object, as MCP requires. A JSON array (a batch) is
one -32600: MCP removed batches in protocol 2025-06-18, and this server speaks 2025-11-25 unless the client
asks for an older one; in a session of 2025-03-26, the one version with batches, a batch is answered by
one array of the answers to its requests and its malformed elements (nothing when it holds only
notifications). A malformed notification (no id) is dropped with a line on stderr: JSON-RPC never
answers a notification. A blank line carries nothing and is skipped. A line is at most MAX_LINE bytes:
a longer one is answered -32600 (id null) after its bytes are skipped, never held in memory.

The server exits when its input ends and every request it read is answered or cancelled (the SDK
sends nothing for a request a `notifications/cancelled` names; a batch then goes out without it). Two
requests in flight with one id are each answered.

While serving, fd 0 reads /dev/null and fd 1 writes to stderr, so that a handler or a child process that
reads stdin or prints cannot take a message off the wire or tear one on it.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from contextlib import contextmanager
from typing import Any, AsyncIterator, BinaryIO, Iterator

import anyio
from mcp_types import (INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError,
                       JSONRPCMessage, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, jsonrpc_message_adapter)

from kernelwiki.model.problems import utf8_text

ERROR = "error: "
"""Every error an agent sees starts so, as on the command line (kernelwiki.faces.mcp_server)."""
BATCHES = ("a JSON-RPC batch (a JSON array) is not part of MCP since protocol 2025-06-18, which removed "
           "batches; send one message a line")
BATCH_PROTOCOLS = ("2025-03-26",)
"""The MCP versions whose servers must take batches (2025-03-26 added them, 2025-06-18 removed them)."""
MAX_LINE = 1 << 20
"""Bytes of one line (a message): every request of the tools is a few hundred bytes."""
TOO_LONG = object()
"""What read_lines yields for a line longer than MAX_LINE (its bytes skipped)."""
PARAMS = {"tools/call": (("name", str, True), ("arguments", dict, False)), "resources/read": (("uri", str, True),)}
"""(field, type, required) of the params of the methods that take arguments: the SDK refuses a wrong one
with a bare "Invalid request parameters"; checked here, the answer names the field."""


class _NotJson(ValueError):
    """NaN, Infinity and -Infinity: Python's json module reads them, JSON does not have them."""


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON value")


def _error(request_id: int | str | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=ERROR + message))


def _usable_id(value: Any) -> bool:
    """JSON-RPC ids as MCP allows them: a string or an integer (not a boolean, a fraction or null)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def check_line(line: bytes, protocol: str | None = None) -> JSONRPCMessage | list[JSONRPCMessage | None] | None:
    """The message a line carries, the JSONRPCError that answers it when it carries none, or None when
    nothing is to be sent (a blank line, a malformed notification). Under `protocol` 2025-03-26, the one
    MCP version with batches, a non-empty JSON array is a batch: a list with one of those per element."""
    text = line.strip()
    if not text:
        return None
    try:
        value = json.loads(text.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as err:
        return _error(None, PARSE_ERROR, f"parse error: the line is not UTF-8 (byte {err.start})")
    except RecursionError:
        return _error(None, PARSE_ERROR, "parse error: the line nests too deeply to read")
    except ValueError as err:
        return _error(None, PARSE_ERROR, f"parse error: the line is not JSON ({err})")
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        return _error(None, PARSE_ERROR, "parse error: the line nests too deeply to read")
    except UnicodeEncodeError:
        return _error(None, PARSE_ERROR, "parse error: a \\u escape of the line is half a character (a lone "
                                         "surrogate), which no answer could carry back")
    if isinstance(value, list) and value and protocol in BATCH_PROTOCOLS:
        return [check_value(element) for element in value]
    if isinstance(value, list):
        return _error(None, INVALID_REQUEST, "an empty batch" if protocol in BATCH_PROTOCOLS else
                      f"{BATCHES} (this session speaks protocol {protocol or 'no protocol yet'})")
    return check_value(value)


def check_value(value: Any) -> JSONRPCMessage | None:
    """check_line for one JSON value (a line's, or a batch element's)."""
    if not isinstance(value, dict):
        return _error(None, INVALID_REQUEST, f"a JSON-RPC message is an object, not {type(value).__name__} "
                                             f"{json.dumps(value)[:40]!r}")
    if "id" in value and not _usable_id(value["id"]):
        return _error(None, INVALID_REQUEST, f"id: {value['id']!r} is not a string or an integer")
    request_id = value.get("id")
    params = value.get("params")
    if isinstance(value.get("method"), str) and "params" in value and not isinstance(params, dict):
        if request_id is None:
            return _dropped(f"notification {value['method']!r}: params is {type(params).__name__}, not an object")
        return _error(request_id, INVALID_PARAMS, f"{value['method']}: params must be an object, "
                                                  f"not {type(params).__name__}")
    problem = _params_problem(value.get("method"), params)
    if problem and request_id is not None:
        return _error(request_id, INVALID_PARAMS, f"{value['method']}: {problem}")
    try:
        return jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValueError:
        what = _what_is_wrong(value)
        if request_id is None and "method" in value:
            return _dropped(f"notification: {what}")
        return _error(request_id, INVALID_REQUEST, f"not a JSON-RPC 2.0 message: {what}")


def _params_problem(method: Any, params: dict | None) -> str | None:
    for field, kind, required in PARAMS.get(method, ()) if isinstance(method, str) else ():
        value = (params or {}).get(field)
        if value is None and not required:
            continue
        if value is None:
            return f"params.{field} is missing"
        if not isinstance(value, kind):
            return f"params.{field} must be {'a string' if kind is str else 'an object'}, not {type(value).__name__}"
    return None


def _what_is_wrong(value: dict) -> str:
    if value.get("jsonrpc") != "2.0":
        return f"jsonrpc must be \"2.0\", not {value.get('jsonrpc')!r}"
    if "method" in value:
        return f"method must be a string, not {type(value['method']).__name__}"
    if "id" not in value:
        return "a request needs method and id, a notification method"
    return "a response needs an object result or error"


async def read_lines(wire_in: BinaryIO, limit: int = MAX_LINE) -> AsyncIterator[bytes | object]:
    """Each line of `wire_in`, or TOO_LONG for a line of more than `limit` bytes, whose rest is read
    in pieces and dropped: memory stays bounded whatever the client sends, newline or not."""
    while True:
        line = await anyio.to_thread.run_sync(wire_in.readline, limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            while True:
                rest = await anyio.to_thread.run_sync(wire_in.readline, 1 << 16)
                if not rest or rest.endswith(b"\n"):
                    break
            yield TOO_LONG
        else:
            yield line


def _too_long() -> JSONRPCError:
    return _error(None, INVALID_REQUEST, f"the line is longer than {MAX_LINE:,} bytes; it was not read "
                                         "(a message of this server is a few hundred bytes)")


def _dropped(why: str) -> None:
    print(f"kernelwiki mcp: dropped a malformed {why} (JSON-RPC answers no notification)", file=sys.stderr)
    return None


@contextmanager
def claimed_stdio() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """The wire on private duplicates of fd 0 and 1; fd 0 on /dev/null and fd 1 on stderr until the end."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        # closefd=False on the input: a worker thread may still block reading it when serving ends.
        yield os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False)
    finally:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_out)


def _encoded(message: JSONRPCMessage) -> str | None:
    """The message as JSON text; an answer that text cannot carry (a lone surrogate) becomes an error
    answer to the same request, anything else such is dropped with a line on stderr."""
    try:
        return message.model_dump_json(by_alias=True, exclude_unset=True)
    except ValueError as err:
        if not isinstance(message, (JSONRPCResponse, JSONRPCError)):
            print(f"kernelwiki mcp: dropped a message that is not JSON text: {err}", file=sys.stderr)
            return None
        return _error(message.id, INTERNAL_ERROR, "the answer could not be written as JSON text "
                                                  f"({utf8_text(str(err))})").model_dump_json()


async def run_wire(server, wire_in: BinaryIO, wire_out: BinaryIO) -> None:
    """Run the server between the two ends of the wire, holding its input open after the input's end
    until each request it was given has its response: the SDK stops at end of input and drops requests
    still in flight, and a client that writes its requests and closes stdin (a pipe, a script) would
    lose them."""
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    to_server, server_input = create_context_streams[SessionMessage | Exception](0)
    server_output, from_server = create_context_streams[SessionMessage](0)
    out = anyio.wrap_file(wire_out)
    writing = anyio.Lock()
    pending: Counter = Counter()
    """request id -> how many requests with it are in flight (a client may reuse an id)."""
    answered = anyio.Event()
    session: dict[str, Any] = {"initialize": None, "protocol": None}
    batches: dict[Any, list[tuple[Counter, list]]] = {}
    """request id -> for each batch holding it, oldest first: (its request ids not yet answered, its
    answers so far)."""

    async def write(text: str | None) -> None:
        if text is not None:
            async with writing:
                await out.write(text.encode() + b"\n")
                await out.flush()

    async def send(message: JSONRPCMessage) -> None:
        await write(_encoded(message))

    async def send_batch(messages: list[JSONRPCMessage]) -> None:
        """A batch's answers, one JSON array on one line."""
        encoded = [text for text in map(_encoded, messages) if text is not None]
        await write("[" + ",".join(encoded) + "]" if encoded else None)

    async def done(request_id: Any, answer: JSONRPCMessage | None) -> bool:
        """One request with this id answered (or, answer None, cancelled): False when it is no batch's."""
        if pending[request_id] > 0:
            pending[request_id] -= 1
        answered.set()
        if not batches.get(request_id):
            return False
        waiting, answers = batches[request_id].pop(0)
        if not batches[request_id]:
            del batches[request_id]
        waiting[request_id] -= 1
        if answer is not None:
            answers.append(answer)
        if not +waiting:
            await send_batch(answers)
        return True

    async def take(message: JSONRPCMessage | None) -> None:
        if isinstance(message, JSONRPCError):
            await send(message)
        elif message is not None:
            if isinstance(message, JSONRPCRequest):
                pending[message.id] += 1
                if message.method == "initialize":
                    session["initialize"] = message.id
            await to_server.send(SessionMessage(message))
            if isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
                # The SDK sends nothing for a request it cancels: it is no longer waited for.
                cancelled = (message.params or {}).get("requestId")
                if _usable_id(cancelled) and pending[cancelled] > 0:
                    await done(cancelled, None)

    async def take_batch(messages: list[JSONRPCMessage | None]) -> None:
        errors = [m for m in messages if isinstance(m, JSONRPCError)]
        waiting = Counter(m.id for m in messages if isinstance(m, JSONRPCRequest))
        if not waiting and errors:
            await send_batch(errors)
        for request_id, count in waiting.items():
            batches.setdefault(request_id, []).extend([(waiting, errors)] * count)
        for message in messages:
            if not isinstance(message, JSONRPCError):
                await take(message)

    async def forward_input() -> None:
        nonlocal answered
        async with to_server:
            async for line in read_lines(wire_in):
                checked = _too_long() if line is TOO_LONG else check_line(line, session["protocol"])
                await (take_batch(checked) if isinstance(checked, list) else take(checked))
            while +pending:
                await answered.wait()
                answered = anyio.Event()

    async def forward_output() -> None:
        async with from_server:
            async for session_message in from_server:
                message = session_message.message
                if isinstance(message, JSONRPCResponse) and message.id == session["initialize"]:
                    session["protocol"] = message.result.get("protocolVersion")
                if not (isinstance(message, (JSONRPCResponse, JSONRPCError)) and await done(message.id, message)):
                    await send(message)

    async with anyio.create_task_group() as group:
        group.start_soon(forward_input)
        group.start_soon(forward_output)
        async with server_output:
            await server.run(server_input, server_output, server.create_initialization_options())
