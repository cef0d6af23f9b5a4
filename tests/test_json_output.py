"""Every JSON the CLI prints follows its versioned schema in schemas/output/, for every real page and
probe; NaN or infinity anywhere is an error message, never output."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from functools import lru_cache

import pytest
from jsonschema import Draft202012Validator

from conftest import ROOT
from kernelwiki.faces.cli import main
from kernelwiki.storage.index import Wiki
from kernelwiki.faces.output import latest_record_document, record_document
from kernelwiki.probing.specs import load_probes
from kernelwiki.storage.repo import Repo

OUTPUT = ROOT / "schemas" / "output"
NAMES = ("get.v2", "query.v3", "probe-list.v1", "probe-show.v1", "latest-record.v1", "validate.v1", "record.v1")
"""The schemas of what the CLI and MCP write; superseded ones (get.v1, query.v1, query.v2) are in git history."""


@lru_cache(maxsize=None)
def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((OUTPUT / f"{name}.schema.json").read_text(encoding="utf-8")))


def conforms(name: str, document: dict) -> None:
    errors = [f"{'.'.join(map(str, e.absolute_path)) or '-'}: {e.message}" for e in validator(name).iter_errors(document)]
    assert not errors, "\n".join(errors[:10])
    assert document["schema_version"] == name


def run(*argv: str, root=ROOT) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([argv[0], *argv[1:], "--root", str(root)])
    return code, out.getvalue(), err.getvalue()


def _json(*argv: str) -> dict:
    code, out, err = run(*argv)
    assert code == 0, err
    return json.loads(out)


def page_ids() -> list[str]:
    return sorted(Wiki.load(Repo(ROOT)).by_id())


def probe_ids() -> list[str]:
    return sorted(load_probes(Repo(ROOT)))


def test_schemas_are_valid_and_share_their_definitions():
    names = sorted(p.name.removesuffix(".schema.json") for p in OUTPUT.glob("*.schema.json"))
    assert names == sorted(NAMES)
    record_defs = []
    for name in NAMES:
        schema = json.loads((OUTPUT / f"{name}.schema.json").read_text(encoding="utf-8"))
        Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema_version"]["const"] == name and schema["$id"].endswith(f"/{name}.schema.json")
        if "record_summary" in schema.get("$defs", {}):
            record_defs.append(schema["$defs"]["record_summary"])
    # Each file stands alone (MCP clients get it inline), so the shared part is repeated: keep it equal.
    assert len(record_defs) == 4 and all(d == record_defs[0] for d in record_defs)


@pytest.mark.parametrize("page_id", page_ids())
def test_get_json_of_every_page(page_id):
    conforms("get.v2", _json("get", page_id, "--format", "json", "--include-code", "--follow-sources"))
    for part in ("--frontmatter-only", "--body-only", "--claims", "--prose"):
        conforms("get.v2", _json("get", page_id, "--format", "json", part))


def test_query_json_lists_every_page():
    document = _json("query", "--json", "--limit", "0")
    conforms("query.v3", document)
    assert {h["id"] for h in document["hits"]} == set(page_ids())
    conforms("query.v3", _json("query", "UMMA", "--arch", "B200", "--json"))
    conforms("query.v3", _json("query", "stream-K", "vs", "split-K", "--json"))
    conforms("query.v3", _json("query", "zzzz-nothing", "--json"))


def test_probe_list_and_show_json():
    document = _json("probe", "list", "--json")
    conforms("probe-list.v1", document)
    assert [p["id"] for p in document["probes"]] == probe_ids()
    wiki, probes = Wiki.load(Repo(ROOT)), load_probes(Repo(ROOT))
    for probe_id in probe_ids():
        shown = _json("probe", "show", probe_id, "--json")
        conforms("probe-show.v1", shown)
        assert shown["spec"]["id"] == probe_id
        conforms("latest-record.v1", latest_record_document(wiki, probes[probe_id]))
        conforms("record.v1", record_document(wiki, probe_id))


def test_validate_json(mini):
    mini.write("wiki/hardware/broken.md", "---\nid: hw-broken\ntitle: 3\ntype: hardware\n---\n")
    code, out, _ = mini.run("validate", "--format", "json")
    document = json.loads(out)
    conforms("validate.v1", document)
    assert code == 1 and not document["ok"] and document["problems"]


def _nan_record(mini) -> None:
    mini.write("probes/probe-example/probe.yaml", "id: probe-example\ntitle: Example\nkind: microbench\n"
               "pages:\n- hw-example\narchs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
    mini.write("probes/probe-example/run.py", "print('probe')\n")
    # json.dumps writes NaN unless told not to; a record with one must not turn into output with one.
    mini.write("artifacts/evidence/probe-example/r1.json", json.dumps({
        "probe": "probe-example", "run_id": "r1", "mode": "run", "status": "passed",
        "started_at": "2026-11-02T00:00:00Z", "environment": {},
        "cases": [{"id": "c1", "status": "passed", "headline": {"metric": "tflops", "value": float("nan")}}]}))
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("summary:", "probes:\n- probe-example\nsummary:"))


def test_nan_in_a_record_is_never_output(mini):
    # A record with NaN is not standard JSON: validate refuses it, and every reader of records
    # (get, probe list/show, refresh) passes it over as if it were absent.
    _nan_record(mini)
    assert any("r1.json" in p["path"] and "NaN is not a number" in p["message"] for p in mini.problems())
    code, out, err = mini.run("get", "hw-example", "--include-code", "--format", "json")
    assert code == 0 and json.loads(out)["probes"][0]["latest_record"] is None and "Traceback" not in err
    for argv in (("probe", "list", "--json"), ("probe", "show", "probe-example", "--json")):
        code, out, err = run(*argv, root=mini.root)
        assert code == 0 and "NaN" not in out and "Traceback" not in err


def test_nan_in_frontmatter_is_an_error_not_output(mini):
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("value: 100", "value: .inf"))
    code, out, err = mini.run("get", "hw-example", "--format", "json")
    assert code == 1 and out == "" and "wiki/hardware/example.md: frontmatter.claims[0].value: is inf" in err
    code, out, _ = mini.run("get", "hw-example")  # Markdown shows the file as it is
    assert code == 0 and "value: .inf" in out


def test_nan_record_is_never_an_mcp_result_either(mini):
    pytest.importorskip("mcp")
    from kernelwiki.faces.mcp_server import call

    _nan_record(mini)
    for name, arguments in (("get_page", {"page": "hw-example", "include_code": True}), ("list_probes", {}),
                            ("latest_record", {"probe": "probe-example"}), ("get_record", {"probe": "probe-example"})):
        result = call(Repo(mini.root), name, arguments)
        assert "NaN" not in result.content[0].text, name
