"""`kernelwiki mcp` driven over stdio as a subprocess, the way an agent's MCP client runs it."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pytest
from jsonschema import Draft202012Validator

from conftest import ROOT

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
    assert set(tools) == {"query", "get_page", "get_record", "list_probes", "latest_record", "validate"}
    for tool in tools.values():
        assert tool["inputSchema"]["type"] == "object"
    # get_page answers Markdown text only (no output schema); the others structured content plus a short text.
    assert "outputSchema" not in tools["get_page"] and "Markdown text only" in tools["get_page"]["description"]
    assert tools["get_page"]["inputSchema"]["required"] == ["page"]
    served = {name: tool["outputSchema"] for name, tool in tools.items() if name != "get_page"}
    for name, version in (("query", "query.v2"), ("list_probes", "probe-list.v1"), ("get_record", "record.v1"),
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
    assert any(f["path"].endswith("hopper_gemm.py") and "text" in f for f in code["artifacts"]["files"])
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
    gemm = next(p for p in probes if p["id"] == "probe-hopper-gemm")
    case = gemm["latest_record"]["cases"][1]["id"]
    record = client.call("latest_record", probe="probe-hopper-gemm", case=case)["structuredContent"]
    assert [c["id"] for c in record["latest_record"]["cases"]] == [case]
    missing = client.call("latest_record", probe="probe-hopper-gemm", case="no-such-case")
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
