"""`kernelwiki mcp` driven over stdio as a subprocess, the way an agent's MCP client runs it."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from conftest import ROOT, record_text

from kernelwiki.storage.record_form import expand

pytest.importorskip("mcp")


class StdioClient:
    """Newline-delimited JSON-RPC over the server's stdin/stdout."""

    def __init__(self, root):
        # An upstream URL nothing listens on: no test here may reach the network.
        env = dict(os.environ, PYTHONPATH=str(ROOT), KERNELWIKI_UPSTREAM_URL="http://127.0.0.1:9/{repo}/{commit}/{path}")
        self.proc = subprocess.Popen([sys.executable, "-m", "kernelwiki", "mcp", "--root", str(root)], cwd=root,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.next_id = 0

    def request(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        while True:
            line = self.proc.stdout.readline()
            assert line, f"server closed stdout; stderr:\n{self.proc.stderr.read()}"
            message = json.loads(line)
            if message.get("id") == self.next_id:
                return message

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": {}})

    def call(self, name: str, **arguments) -> dict:
        return self.request("tools/call", {"name": name, "arguments": arguments})["result"]

    def raw(self, data: bytes) -> dict:
        """Write bytes as they are (one line, not necessarily JSON) and read the one line answering them."""
        self.proc.stdin.flush()
        self.proc.stdin.buffer.write(data + b"\n")
        self.proc.stdin.buffer.flush()
        # Before the fix the server sent nothing and a plain readline waited forever: a deadline instead.
        reader = ThreadPoolExecutor(1)
        try:
            line = reader.submit(self.proc.stdout.readline).result(timeout=60)
        except FutureTimeout:
            self.proc.kill()
            pytest.fail(f"no answer to {data[:80]!r} in 60 s")
        finally:
            reader.shutdown(wait=False)
        assert line, f"server closed stdout; stderr:\n{self.proc.stderr.read()}"
        return json.loads(line)

    def _send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def close(self) -> int:
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def client():
    client = StdioClient(ROOT)
    init = client.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "pytest", "version": "0"}})
    assert init["result"]["serverInfo"]["name"] == "kernelwiki"
    assert {"tools", "resources"} <= set(init["result"]["capabilities"])
    client.notify("notifications/initialized")
    yield client
    assert client.close() == 0


def _cli_error(*argv: str) -> str:
    """What the CLI prints on stderr for the same request (`error: ...`), the text MCP answers."""
    done = subprocess.run([sys.executable, "-m", "kernelwiki", *argv, "--root", str(ROOT)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode != 0
    assert done.stderr.startswith("error: "), done.stderr
    return done.stderr.strip()


def test_tools_list_has_schemas(client):
    tools = {t["name"]: t for t in client.request("tools/list")["result"]["tools"]}
    assert set(tools) == {"query", "get_page", "get_record", "probe_show", "list_probes", "latest_record", "validate"}
    for tool in tools.values():
        assert tool["inputSchema"]["type"] == "object"
    # get_page answers Markdown text only (no output schema); the others structured content plus a short text.
    assert "outputSchema" not in tools["get_page"] and "Markdown text only" in tools["get_page"]["description"]
    assert tools["get_page"]["inputSchema"]["required"] == ["page"]
    served = {name: tool["outputSchema"] for name, tool in tools.items() if name != "get_page"}
    for name, version in (("query", "query.v3"), ("list_probes", "probe-list.v1"), ("get_record", "record.v1"),
                          ("probe_show", "probe-show.v1"),
                          ("latest_record", "latest-record.v1"), ("validate", "validate.v1")):
        schema = json.loads((ROOT / "schemas/output" / f"{version}.schema.json").read_text(encoding="utf-8"))
        assert served[name] == {k: v for k, v in schema.items() if k not in ("$schema", "$id")}


def test_every_page_is_a_resource_and_answers_get_page_fast(client):
    schema = json.loads((ROOT / "schemas/output/get.v2.schema.json").read_text(encoding="utf-8"))
    check = Draft202012Validator(schema)
    resources = client.request("resources/list")["result"]["resources"]
    ids = [r["name"] for r in resources]
    assert len(ids) > 20 and all(r["uri"] == f"kernelwiki://page/{r['name']}" for r in resources)
    seconds = []
    for page_id in ids:
        start = time.perf_counter()
        result = client.call("get_page", page=page_id, include_code=True)
        seconds.append(time.perf_counter() - start)
        assert not result.get("isError"), result["content"][0]["text"]
        assert "structuredContent" not in result and len(result["content"]) == 1
        assert result["content"][0]["text"].startswith(f"---\nid: {page_id}\n")
        document = client.call("get_page", page=page_id, format="json")
        assert document["structuredContent"]["id"] == page_id and len(document["content"][0]["text"]) < 200
        check.validate(document["structuredContent"])
    # The goal is 0.3 s for any page on a 2-core machine shared with other work: the median must meet it.
    assert statistics.median(seconds) < 0.3, sorted(seconds)[-5:]


def test_get_page_parts_and_code(client):
    claims = client.call("get_page", page="skill-wgmma", part="claims", format="json")["structuredContent"]
    assert claims["id"] == "hw-wgmma" and claims["part"] == "claims" and "body" not in claims
    assert all("evidence" in c for c in claims["claims"])
    code = client.call("get_page", page="kernel-hopper-gemm", include_code=True, format="json")["structuredContent"]
    assert any(f["path"].endswith("/hopper_gemm.py") and f["note"].startswith("not sent: ")
               for f in code["artifacts"]["files"])   # listed with its size: the whole answer would not fit
    code = client.call("get_page", page="kernel-hopper-gemm", include_code=True, files=["hopper_gemm.py"],
                       format="json")["structuredContent"]
    assert any(f["path"].endswith("/hopper_gemm.py") and "text" in f for f in code["artifacts"]["files"])
    assert all("latest_record" in p for p in code["probes"])


def test_read_resource(client):
    contents = client.request("resources/read", {"uri": "kernelwiki://page/hw-tma"})["result"]["contents"]
    assert contents[0]["mimeType"] == "text/markdown" and contents[0]["text"].startswith("---\nid: hw-tma\n")
    error = client.request("resources/read", {"uri": "kernelwiki://page/hw-tmaa"})["error"]
    assert error["message"] == _cli_error("get", "hw-tmaa")


def test_errors_carry_the_cli_message(client):
    result = client.call("get_page", page="hw-wgmmma")
    assert result["isError"] and result["content"][0]["text"] == _cli_error("get", "hw-wgmmma")
    result = client.call("query", words="wgmma", tag=["wgmmma"])
    assert result["isError"] and result["content"][0]["text"] == _cli_error("query", "--tag", "wgmmma")
    result = client.call("latest_record", probe="probe-tma-copyy")
    assert result["isError"] and result["content"][0]["text"] == _cli_error("probe", "show", "probe-tma-copyy")
    result = client.call("get_page", page="hw-tma", include_code="yes")
    assert result["isError"] and "include_code" in result["content"][0]["text"]
    result = client.call("query", type=["kernal"])
    assert result["isError"] and "'kernal' is not one of" in result["content"][0]["text"]
    assert result["content"][0]["text"] == _cli_error("query", "--type", "kernal")
    error = client.request("tools/call", {"name": "nope", "arguments": {}})["error"]
    assert error["code"] == -32602 and error["message"].startswith("error: ")


def test_query_list_probes_latest_record(client):
    hits = client.call("query", words="UMMA", arch=["B200"], limit=3)["structuredContent"]["hits"]
    assert hits and hits[0]["id"] == "hw-tcgen05-mma" and len(hits) <= 3
    listed = client.call("list_probes")
    probes = listed["structuredContent"]["probes"]
    # Sent once: the text is one short line per probe, not the document again.
    assert len(listed["content"][0]["text"].splitlines()) == len(probes)
    assert len(listed["content"][0]["text"]) < len(json.dumps(listed["structuredContent"])) / 4
    tma = next(p for p in probes if p["id"] == "probe-tma-copy")
    assert "hw-tma" in tma["pages"] and tma["latest_record"]["status"]
    gemm = next(p for p in probes if p["id"] == "probe-tma-copy")
    case = gemm["latest_record"]["cases"][1]["id"]
    record = client.call("latest_record", probe="probe-tma-copy", case=case)["structuredContent"]
    assert [c["id"] for c in record["latest_record"]["cases"]] == [case]
    missing = client.call("latest_record", probe="probe-tma-copy", case="no-such-case")
    assert missing["isError"] and "no case 'no-such-case'" in missing["content"][0]["text"]


@pytest.mark.slow
def test_validate_tool(client):
    result = client.call("validate")["structuredContent"]
    assert result["ok"] is True and result["counts"]["pages"] > 20 and result["problems"] == []


def test_without_the_mcp_package_says_how_to_install_it():
    code = "import sys; sys.modules['mcp'] = None; from kernelwiki.faces.cli import main; sys.exit(main(['mcp']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 1 and "pip install 'kernelwiki[mcp]'" in done.stderr and "Traceback" not in done.stderr


# --- one argument layer: each bad argument is refused with the same line over both faces --------------
def _cli_line(*argv: str) -> tuple[int, str]:
    """The CLI in this process (so that a NUL byte can be passed): exit code and its stderr."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from kernelwiki.faces.cli import main

    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = main([*argv, "--root", str(ROOT)])
    return code, err.getvalue().strip()


@pytest.mark.parametrize("argv, tool, arguments, fragment", [
    (["query", "--arch", "sm_91"], "query", {"arch": ["sm_91"]}, "arch: unknown architecture 'sm_91'"),
    (["query", "--tag", "wgmmma"], "query", {"tag": ["wgmmma"]}, "did you mean 'wgmma'"),
    (["query", "--type", "kernal"], "query", {"type": ["kernal"]}, "type: 'kernal' is not one of"),
    (["query", "--evidence", "measurd"], "query", {"evidence": ["measurd"]}, "did you mean 'measured'"),
    (["query", "--status", "verifed"], "query", {"status": ["verifed"]}, "did you mean 'verified'"),
    (["query", "x", "--limit", "-1"], "query", {"words": "x", "limit": -1}, "limit: -1 is negative"),
    (["query", "wg\x00mma"], "query", {"words": "wg\x00mma"}, "contains a NUL byte"),
    (["get", "hw-wg\x00mma"], "get_page", {"page": "hw-wg\x00mma"}, "page: 'hw-wg\\x00mma' contains a NUL byte"),
    (["get", "hw-wgmma", "--max-bytes", "10"], "get_page", {"page": "hw-wgmma", "max_bytes": 10}, "max_bytes: 10 is below"),
    (["get", "hw-wgmma", "--offset", "5"], "get_page", {"page": "hw-wgmma", "offset": 5}, "give max_bytes too"),
    (["get", "hw-wgmma", "--files", "*.py"], "get_page", {"page": "hw-wgmma", "files": ["*.py"]}, "files: "),
    (["get", "hw-wgmma", "--fetch-upstream"], "get_page", {"page": "hw-wgmma", "fetch_upstream": True},
     "--fetch-upstream works with --include-code"),
    (["get", "hw-wgmma", "--format", "json", "--max-bytes", "1000"], "get_page",
     {"page": "hw-wgmma", "format": "json", "max_bytes": 1000}, "the JSON document is sent whole"),
    (["probe", "show", "probe-tma-copyy"], "latest_record", {"probe": "probe-tma-copyy"}, "no probe 'probe-tma-copyy'"),
    (["probe", "show", "probe-tma-copyy"], "get_record", {"probe": "probe-tma-copyy"}, "no probe 'probe-tma-copyy'"),
    (["probe", "run", "--probe", "probe-tma-copy", "--case", "c\x00"], "latest_record",
     {"probe": "probe-tma-copy", "case": "c\x00"}, "case: 'c\\x00' contains a NUL byte"),
])
def test_each_argument_is_refused_alike_over_both_faces(client, argv, tool, arguments, fragment):
    code, cli = _cli_line(*argv)
    result = client.call(tool, **arguments)
    assert code == 2 and cli.startswith("error: ") and fragment in cli
    assert result["isError"] and result["content"][0]["text"] == cli


def test_a_nul_byte_in_a_resource_uri_is_the_cli_message(client):
    """Issue 24: a NUL byte in a page argument or a resource URI was a traceback; now the CLI's line."""
    error = client.request("resources/read", {"uri": "kernelwiki://page/hw-wg\x00mma"})["error"]
    code, cli = _cli_line("get", "hw-wg\x00mma")
    assert error["code"] == -32602 and error["message"] == cli and "contains a NUL byte" in cli
    assert client.call("query", words="wgmma", limit=1)["structuredContent"]["hits"]


def test_query_arch_sm_91_is_refused_not_answered_empty(client):
    result = client.call("query", words="wgmma", arch=["sm_91"])
    assert result["isError"] and "structuredContent" not in result


# --- answers sent once, and affordable -------------------------------------------------------------------
def test_get_page_sends_the_markdown_once_and_it_is_the_cli_answer(client):
    result = client.call("get_page", page="kernel-hopper-gemm", include_code=True)
    text = result["content"][0]["text"]
    assert "structuredContent" not in result and len(result["content"]) == 1
    assert text == subprocess.run([sys.executable, "-m", "kernelwiki", "get", "kernel-hopper-gemm", "--include-code",
                                   "--root", str(ROOT)], capture_output=True, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout
    # 443 kB before (210 kB of Markdown and 233 kB of the same content structured); the Markdown alone
    # now: the page and each file of its bundles once, with a heading per file, up to the answer's
    # budget; the files past it are listed by name and size (the bound is what it is made of).
    files = [ROOT / "wiki" / "kernels" / "hopper-gemm.md"]
    for fence in re.finditer(r"^#### (\S+) \(", text, re.M):   # "#### artifacts/kernels/x/y.py (own)"
        path = ROOT / fence.group(1)
        if path.is_file() and path not in files:
            files.append(path)
    made_of = sum(path.stat().st_size for path in files)
    assert len(files) >= 3 and "Listed, not sent (" in text
    assert len(text.encode()) < 1.1 * made_of + 20_000, (len(text.encode()), made_of)


def test_structured_answers_come_with_a_short_text_not_the_document_again(client):
    result = client.call("query", words="wgmma", limit=3)
    text, document = result["content"][0]["text"], result["structuredContent"]
    assert document["schema_version"] == "query.v3" and len(document["hits"]) == 3 and document["truncated"]
    assert text.startswith(f"3 of {document['total']} pages shown") and "hw-wgmma" in text
    assert len(text) < len(json.dumps(document)) / 2


def test_get_page_in_pieces_and_prose_and_files(client):
    whole = client.call("get_page", page="kernel-hopper-gemm", include_code=True)["content"][0]["text"]
    pieces, offset = [], 0
    while True:
        text = client.call("get_page", page="kernel-hopper-gemm", include_code=True, max_bytes=60000,
                           offset=offset)["content"][0]["text"]
        marker = text.rfind("\n[cut at byte ")
        if marker < 0:
            pieces.append(text)
            break
        pieces.append(text[:marker])
        offset = int(text[marker:].split("continue with --offset ")[1].split(" ")[0])
    assert "".join(pieces) == whole
    prose = client.call("get_page", page="kernel-hopper-gemm", part="prose")["content"][0]["text"]
    assert "```" not in prose and len(prose) < len(whole) / 3
    chosen = client.call("get_page", page="kernel-hopper-gemm", include_code=True, files=["hopper_gemm.py"])
    assert "#### artifacts/kernels/hopper_gemm/sm90_common.py" not in chosen["content"][0]["text"]
    assert "#### artifacts/kernels/hopper_gemm/hopper_gemm.py (own)" in chosen["content"][0]["text"]


def test_query_that_the_wiki_does_not_cover(client):
    result = client.call("query", words="Pallas vs Triton")
    assert not result.get("isError") and result["structuredContent"]["covered"] is False
    assert result["content"][0]["text"].startswith("not covered: no page holds every word")
    assert result["structuredContent"]["hits"] and result["structuredContent"]["ignored"] == ["vs"]


# --- how a number was measured -------------------------------------------------------------------------
def test_get_record_returns_the_whole_record(client):
    summary = client.call("latest_record", probe="probe-tma-copy")["structuredContent"]["latest_record"]
    case = summary["cases"][0]["id"]
    result = client.call("get_record", probe="probe-tma-copy", case=case)
    document = result["structuredContent"]
    record = expand(json.loads(record_text(ROOT / document["path"])))   # as readers see it
    assert document["path"] == summary["path"] and document["record"]["protocol"] == record["protocol"]
    assert document["record"]["environment"] == record["environment"]
    assert "sm_clock_mhz_before" in document["record"]["environment"]
    [ours] = document["record"]["cases"]
    assert ours == next(c for c in record["cases"] if c["id"] == case)
    assert {"timing", "correctness", "params"} <= set(ours) and "timing_shared" not in ours
    assert all("floor_ms" in entry["protocol"] for entry in ours["timing"].values())   # each entry whole
    text = result["content"][0]["text"]
    assert "protocol: " in text and "environment: " in text and f"case {case}: " in text and "correctness" in text
    cli = subprocess.run([sys.executable, "-m", "kernelwiki", "probe", "record", "probe-tma-copy", "--case", case,
                          "--root", str(ROOT)], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert cli.returncode == 0 and cli.stdout == text  # the command line says the same
    by_name = client.call("get_record", probe="probe-tma-copy", record=Path(summary["path"]).name)
    assert by_name["structuredContent"]["path"] == summary["path"]
    missing = client.call("get_record", probe="probe-tma-copy", record="nope.json")
    assert missing["isError"] and missing["content"][0]["text"].startswith("error: probe 'probe-tma-copy' has no")
    escape = client.call("get_record", probe="probe-tma-copy", record="../../x.json")
    assert escape["isError"] and "is not a record path" in escape["content"][0]["text"]


def test_claims_view_keeps_conditions(client):
    text = client.call("get_page", page="kernel-hopper-gemm", part="claims")["content"][0]["text"]
    assert "| conditions |" in text.splitlines()[0] and "| tile_n=128 |" in text


# --- shutdown and errors ----------------------------------------------------------------------------------
def test_requests_in_flight_are_answered_when_stdin_closes():
    proc = subprocess.Popen([sys.executable, "-m", "kernelwiki", "mcp", "--root", str(ROOT)], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}}]
    messages += [{"jsonrpc": "2.0", "id": n, "method": "tools/call",
                  "params": {"name": "get_page", "arguments": {"page": "kernel-hopper-gemm", "include_code": True}}}
                 for n in range(2, 6)]
    out, err = proc.communicate("".join(json.dumps(m) + "\n" for m in messages), timeout=120)
    answered = sorted(json.loads(line)["id"] for line in out.splitlines() if line.strip())
    assert proc.returncode == 0 and answered == [1, 2, 3, 4, 5], err[-2000:]


def test_every_error_starts_with_one_prefix(client):
    texts = [client.call("get_page", page="hw-wgmmma")["content"][0]["text"],
             client.call("get_page", page="hw-wgmma", nonsense=True)["content"][0]["text"],
             client.call("latest_record", probe="probe-tma-copy", case="no-such-case")["content"][0]["text"],
             client.request("tools/call", {"name": "nope", "arguments": {}})["error"]["message"],
             client.request("resources/read", {"uri": "kernelwiki://page/hw-tmaa"})["error"]["message"],
             client.request("resources/read", {"uri": "file:///etc/passwd"})["error"]["message"]]
    assert all(text.startswith("error: ") for text in texts), texts


def test_every_argument_of_every_tool_is_checked(client):
    """A value of the wrong shape in any field is refused, naming the field, before the tool runs:
    the argument layer checks each field (there is no second, schema-only check to fall back on)."""
    tools = client.request("tools/list")["result"]["tools"]
    valid = {"page": "hw-wgmma", "probe": "probe-tma-copy"}
    checked = 0
    for tool in tools:
        required = {field: valid[field] for field in tool["inputSchema"]["required"]}
        for field in tool["inputSchema"]["properties"]:
            result = client.call(tool["name"], **{**required, field: {"not": "this"}})
            assert result.get("isError") and result["content"][0]["text"].startswith(f"error: {field}: "), \
                (tool["name"], field, result["content"][0]["text"][:200])
            checked += 1
    assert checked >= 20


# --- every line that asks is answered (JSON-RPC 2.0), the malformed ones too -------------------------------
# (bytes on the wire, the JSON-RPC error code, the id answered, a fragment of the message)
MALFORMED = [
    (b"not json", -32700, None, "parse error: the line is not JSON"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list"', -32700, None, "parse error"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/\xff"}', -32700, None, "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, -32700, None, "nests too deeply"),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"x": NaN}}', -32700, None, "NaN"),
    (b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "tools/list"}', -32700, None, "lone surrogate"),
    (b'[{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}]', -32600, None, "not part of MCP since protocol 2025-06-18"),
    (b"[]", -32600, None, "batch"),
    (b"5", -32600, None, "a JSON-RPC message is an object, not int"),
    (b'{"id": 41}', -32600, 41, 'jsonrpc must be "2.0"'),
    (b'{"jsonrpc": "2.0", "id": null, "method": "tools/list"}', -32600, None, "id: None is not a string or an integer"),
    (b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', -32600, None, "id: True is not"),
    (b'{"jsonrpc": "2.0", "id": 42, "method": 7}', -32600, 42, "method must be a string"),
    (b'{"jsonrpc": "2.0", "id": 43, "method": "tools/list", "params": [1]}', -32602, 43,
     "tools/list: params must be an object, not list"),
    (b'{"jsonrpc": "2.0", "id": "s", "method": "tools/call", "params": "get_page"}', -32602, "s", "params must be an object"),
    (b'{"jsonrpc": "2.0", "id": 44, "method": "tools/call", "params": {"name": "query", "arguments": [1]}}', -32602, 44,
     "params.arguments must be an object, not list"),
    (b'{"jsonrpc": "2.0", "id": 45, "method": "resources/read", "params": {}}', -32602, 45, "params.uri is missing"),
]


@pytest.mark.parametrize("data, code, request_id, fragment", MALFORMED, ids=[m[3][:30] for m in MALFORMED])
def test_a_malformed_line_is_answered_in_a_live_session(client, data, code, request_id, fragment):
    """In a session set up by the MCP handshake, each malformed line gets its one JSON-RPC error, and the
    session goes on answering."""
    reply = client.raw(data)
    assert reply["jsonrpc"] == "2.0" and reply["id"] == request_id and reply["error"]["code"] == code, reply
    assert reply["error"]["message"].startswith("error: ") and fragment in reply["error"]["message"], reply
    assert client.call("query", words="wgmma", limit=1)["structuredContent"]["hits"]


def test_raw_bytes_on_stdin_are_each_answered_and_the_server_exits_cleanly():
    """The same lines as bytes on a pipe that then closes, with a malformed notification and a blank line
    (nothing to answer), between real requests: one answer for each line that asks, nothing else lost."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    lines = [json.dumps(init).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}']
    lines += [data for data, *_ in MALFORMED]
    lines += [b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]}', b"   ",
              b'{"jsonrpc": "2.0", "id": 99, "method": "tools/list"}']
    done = subprocess.run([sys.executable, "-m", "kernelwiki", "mcp", "--root", str(ROOT)], cwd=ROOT,
                          input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr[-2000:]
    assert [r["id"] for r in replies] == [1] + [m[2] for m in MALFORMED] + [99]
    assert [r["error"]["code"] for r in replies[1:-1]] == [m[1] for m in MALFORMED]
    assert "tools" in replies[-1]["result"] and b"dropped a malformed notification" in done.stderr
    assert replies[0]["result"]["protocolVersion"] == "2025-11-25"  # the version whose spec has no batches


def test_a_handler_that_prints_or_reads_stdin_cannot_touch_the_wire():
    """While serving, fd 0 reads /dev/null and fd 1 goes to stderr: the wire is on private descriptors."""
    code = ("import os, sys\n"
            "from kernelwiki.faces.mcp_wire import claimed_stdio\n"
            "with claimed_stdio() as (wire_in, wire_out):\n"
            "    print('stray print', flush=True)\n"
            "    assert os.read(0, 100) == b''\n"
            "    wire_out.write(wire_in.readline().upper()); wire_out.flush()\n"
            "print('after')\n")
    done = subprocess.run([sys.executable, "-c", code], input=b"line\nrest\n", capture_output=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"LINE\nafter\n" and b"stray print" in done.stderr


def test_an_answer_that_json_text_cannot_carry_is_answered_with_an_error():
    """A lone surrogate in an answer (from an OS name that is not UTF-8) cannot be written as JSON text;
    the request still gets an answer (-32603) and the server goes on, where the write used to end it."""
    import io

    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server

    from kernelwiki.faces.mcp_wire import run_wire

    async def list_tools(ctx, params):
        tool = types.Tool(name="t", description="a \udcff byte", input_schema={"type": "object"})
        return types.ListToolsResult(tools=[tool])

    async def list_resources(ctx, params):
        return types.ListResourcesResult(resources=[])

    server = Server("t", on_list_tools=list_tools, on_list_resources=list_resources)
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {"jsonrpc": "2.0", "id": 3, "method": "resources/list"}]
    wire_in, wire_out = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in messages)), io.BytesIO()
    anyio.run(run_wire, server, wire_in, wire_out)
    replies = {reply["id"]: reply for reply in map(json.loads, wire_out.getvalue().splitlines())}
    assert replies[2]["error"]["code"] == -32603 and "could not be written as JSON" in replies[2]["error"]["message"]
    assert replies[3]["result"] == {"resources": []}


def test_a_batch_in_a_2025_03_26_session_is_answered_by_one_array():
    """Protocol 2025-03-26, the one MCP version with batches, says a server must take them: each request
    of a batch and each malformed element is answered in one array; a batch of notifications gets none.
    In a session of a later version (the module's client) a batch is one -32600 (MALFORMED above)."""
    client = StdioClient(ROOT)
    try:
        init = client.request("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                             "clientInfo": {"name": "pytest", "version": "0"}})
        assert init["result"]["protocolVersion"] == "2025-03-26"
        client.notify("notifications/initialized")
        batch = [{"jsonrpc": "2.0", "id": 11, "method": "tools/call",
                  "params": {"name": "query", "arguments": {"words": "wgmma", "limit": 1}}},
                 {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
                 5, {"jsonrpc": "2.0", "id": 12, "method": "tools/list", "params": [1]},
                 {"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "get_page", "arguments": {}}}]
        answers = client.raw(json.dumps(batch).encode())
        assert isinstance(answers, list) and sorted(map(str, (a["id"] for a in answers))) == ["11", "12", "13", "None"]
        by_id = {a["id"]: a for a in answers}
        assert by_id[11]["result"]["structuredContent"]["hits"][0]["id"] == "hw-wgmma"
        assert by_id[12]["error"]["code"] == -32602 and by_id[None]["error"]["code"] == -32600
        assert by_id[13]["result"]["isError"] and by_id[13]["result"]["content"][0]["text"].startswith("error: page: ")
        assert client.raw(b"[5]") == [by_id[None]]
        assert client.raw(b"[]")["error"]["code"] == -32600      # an empty array is no batch
        client.proc.stdin.write(json.dumps([batch[1]]) + "\n")   # notifications only: no answer at all
        assert client.raw(b'{"jsonrpc": "2.0", "id": 14, "method": "tools/list"}')["id"] == 14
    finally:
        assert client.close() == 0


# --- issue 38: nothing a client sends makes the server hang or hold a line in memory ---------------
def _serve(*messages, raw: bytes = b"", version: str = "2025-11-25") -> tuple[bool, list, int]:
    """Run the wire (with a tool that sleeps `seconds`) on the lines of `messages` after initialize, then
    `raw`; (whether it ended within 20 s, what it sent, the peak of the memory it allocated)."""
    import io
    import tracemalloc

    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server

    from kernelwiki.faces.mcp_wire import run_wire

    async def call_tool(ctx, params):
        await anyio.sleep(float(params.arguments["seconds"]))
        return types.CallToolResult(content=[types.TextContent(type="text", text="done")])

    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    lines = [init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *messages]
    wire_in = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in lines) + raw)
    wire_out, ended = io.BytesIO(), []

    async def main():
        with anyio.move_on_after(20):
            await run_wire(Server("t", on_call_tool=call_tool), wire_in, wire_out)
            ended.append(True)

    tracemalloc.start()
    anyio.run(main)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return bool(ended), [json.loads(line) for line in wire_out.getvalue().splitlines()], peak


def _sleep(request_id, seconds: float) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": seconds}}}


def _cancel(request_id) -> dict:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}


def test_a_cancelled_request_then_end_of_input_lets_the_server_exit():
    """The SDK answers nothing for a cancelled request; the wire waited for that answer forever."""
    ended, replies, _ = _serve(_sleep(2, 30), _cancel(2))
    assert ended and [r["id"] for r in replies] == [1]


def test_cancelling_one_request_of_a_batch_sends_the_other_answers():
    ended, replies, _ = _serve([_sleep(2, 30), _sleep(3, 0)], _cancel(2), version="2025-03-26")
    assert ended and [r["id"] for r in replies[-1]] == [3], replies


def test_two_requests_with_one_id_are_each_answered():
    ended, replies, _ = _serve(_sleep(2, 0.2), _sleep(2, 0.6))
    assert ended and [r["id"] for r in replies] == [1, 2, 2] and "error" not in replies[2], replies


@pytest.mark.parametrize("newline", [True, False])
def test_an_overlong_line_is_answered_without_being_held(newline):
    """A 100 MB line took 557 MB and 20 s; one without a newline grew without bound: -32600, rest skipped."""
    from kernelwiki.faces.mcp_wire import MAX_LINE

    huge = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"x": "' + b"a" * (4 * MAX_LINE) + b'"}}'
    after = b'\n{"jsonrpc": "2.0", "id": 8, "method": "tools/list"}\n' if newline else b""
    ended, replies, peak = _serve(raw=huge + after)
    assert ended and replies[1]["id"] is None and "longer than" in replies[1]["error"]["message"]
    assert [r["id"] for r in replies] == ([1, None, 8] if newline else [1, None]) and peak < 3 * MAX_LINE, peak


# --- the same answer over MCP as on the command line (issue 39) ----------------------------------------
SAME = [
    (["get", "kernel-hopper-gemm"], {"page": "kernel-hopper-gemm"}),
    (["get", "kernel-hopper-gemm", "--include-code"], {"page": "kernel-hopper-gemm", "include_code": True}),
    (["get", "kernel-fp8-blockscale-gemm", "--include-code", "--files", "quantize.py"],
     {"page": "kernel-fp8-blockscale-gemm", "include_code": True, "files": ["quantize.py"]}),
    (["get", "skill-wgmma", "--claims", "--shape", "8192"], {"page": "skill-wgmma", "part": "claims", "shape": ["8192"]}),
    (["get", "kernel-deepgemm", "--claims", "--case", "m*"], {"page": "kernel-deepgemm", "part": "claims", "case": "m*"}),
    (["get", "footgun-st32x32b-16bit", "--prose"], {"page": "footgun-st32x32b-16bit", "part": "prose"}),
    (["get", "kernel-hopper-gemm", "--section", "fix"], {"page": "kernel-hopper-gemm", "section": "fix"}),
    (["get", "hw-tma", "--follow-sources", "--max-bytes", "3000", "--offset", "1000"],
     {"page": "hw-tma", "follow_sources": True, "max_bytes": 3000, "offset": 1000}),
]


@pytest.mark.parametrize("argv, arguments", SAME, ids=[" ".join(argv[1:]) for argv, _ in SAME])
def test_get_page_answers_what_the_cli_prints_byte_for_byte(client, argv, arguments):
    from conftest import run_cli

    code, out, _ = run_cli(argv, ROOT)
    result = client.call("get_page", **arguments)
    assert code == 0 and not result.get("isError")
    text = result["content"][0]["text"]
    assert text.encode() == out.encode()


def test_query_answers_what_the_cli_prints(client):
    from conftest import run_cli

    for words in ("TMEM capacity per SM on B200", "Pallas vs Triton", "wgmma"):
        code, out, err = run_cli(["query", *words.split()], ROOT)
        text = client.call("query", words=words)["content"][0]["text"]
        assert code == 0 and text == err + out   # the notes (stderr on the command line), then the hits


def test_probe_show_gives_the_spec(client):
    result = client.call("probe_show", probe="probe-tma-copy")
    document = result["structuredContent"]
    assert document["schema_version"] == "probe-show.v1" and document["spec"]["timeout_s"] == 600
    assert [c["id"] for c in document["spec"]["cases"]][:2] == ["f32-128x64-s2", "f32-128x64-s4"]
    text = result["content"][0]["text"]
    assert "timeout_s: 600" in text and 'requires: ["torch", "cutlass"]' in text
    assert '- bf16-128x128-s4: {"dtype": "bf16", "shape": "16384x16384", "tile": [128, 128], "stages": 4}' in text
    error = client.call("probe_show", probe="probe-tma-cpy")
    assert error["isError"] and error["content"][0]["text"].startswith("error: no probe 'probe-tma-cpy'")
