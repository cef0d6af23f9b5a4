"""Run records as `.json.gz` (kernelwiki.storage.record_file): the runner writes them with the same
bytes for the same record, every reader takes both forms, a hostile gzip file is a problem line
naming it, and `kernelwiki records compress` converts a tree of `.json` records and the references
to them so that validate, refresh --check and audit stay clean and the answers change only in paths."""

from __future__ import annotations

import gzip
import json
import re
import zlib

import pytest

from conftest import ROOT, MiniRepo, messages, record_files
from test_runner import _run, records
from test_same_run_ceilings import calibration, quoting_probe

from kernelwiki.faces import mcp_server
from kernelwiki.storage import record_file
from kernelwiki.storage.records import probe_ids, scan
from kernelwiki.storage.repo import Repo

EVIDENCE = "artifacts/evidence"


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", "NVIDIA H200,sm_90a")


def _measured(mini: MiniRepo) -> tuple[str, str]:
    """A calibration run and a probe quoting its ceiling, through the runner: (calibration, quoting)."""
    calib, quoting = calibration(mini, 800.0), quoting_probe(mini)
    code, _, err = _run(mini, "--probe", quoting)
    assert code == 0, err
    return calib, quoting


def _as_before_compression(mini: MiniRepo) -> dict[str, bytes]:
    """Turn the runner's `.json.gz` records (and every reference to them) into the `.json` records an
    older runner wrote; returns the `.json.gz` files as they were (path -> bytes)."""
    written = {}
    for path in sorted((mini.root / EVIDENCE).glob(f"*/*{record_file.GZIP}")):
        written[path.relative_to(mini.root).as_posix()] = path.read_bytes()
        text = record_file.read_text(path).replace(record_file.GZIP + '"', record_file.JSON + '"')
        path.with_name(path.name.removesuffix(".gz")).write_text(text, encoding="utf-8")
        path.unlink()
    for page in (mini.root / "wiki").rglob("*.md"):
        page.write_text(page.read_text(encoding="utf-8").replace(record_file.GZIP, record_file.JSON), encoding="utf-8")
    return written


def _answers(mini: MiniRepo, probe_id: str) -> list[str]:
    """What agents read about the page and its records: get, query, probe record and the MCP tools."""
    repo = Repo(mini.root)
    texts = [_cli(mini, *argv)[1] for argv in (("get", "hw-example"), ("get", "hw-example", "--format", "json"),
                                             ("get", "hw-example", "--claims"), ("query", "example", "--json"),
                                             ("probe", "record", probe_id, "--json"), ("probe", "list", "--json"))]
    for tool, args in (("get_record", {"probe": probe_id}), ("latest_record", {"probe": probe_id}),
                       ("probe_show", {"probe": probe_id}), ("get_page", {"page": "hw-example"})):
        answer = mcp_server.TOOLS[tool].run(repo, args)
        texts.append(answer.text + json.dumps(answer.document, sort_keys=True))
    return texts


def _cli(mini: MiniRepo, *argv: str) -> tuple[int, str, str]:
    """A nested command (`records compress`, `probe record`): --root goes after the subcommand."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from kernelwiki.faces.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*argv, "--root", str(mini.root)])
    return code, out.getvalue(), err.getvalue()


def _gzip_file(mini: MiniRepo, rel: str, data: bytes) -> str:
    mini.write(rel, data)
    return rel


def _problems_of(mini: MiniRepo, rel: str) -> str:
    return messages([p for p in mini.problems() if p["path"] == rel])


# --- the form on disk ----------------------------------------------------------------------------------
def test_a_committed_record_round_trips_through_gzip():
    repo = Repo(ROOT)
    for found in scan(repo, probe_ids(repo))[:5]:
        text = record_file.read_text(found.path)
        assert record_file.gunzip(record_file.encode(text), record_file.MAX_TEXT_BYTES).decode("utf-8") == text
        assert gzip.decompress(record_file.encode(text)).decode("utf-8") == text   # zcat reads it too


def test_the_same_record_gives_the_same_bytes_with_no_time_or_name_in_them(mini, gpu):
    text = record_file.record_text({"schema_version": 1, "run_id": "r", "cases": [{"id": "c1"}, {"id": "c2"}]})
    assert text == '{"schema_version":1,"run_id":"r","cases":[\n{"id":"c1"},\n{"id":"c2"}\n]}\n'
    data = record_file.encode(text)
    assert data == record_file.encode(text)
    assert data[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"   # no FNAME flag, mtime 0
    from kernelwiki.probing.runner import _write_record

    repo, record = Repo(mini.root), {"schema_version": 1, "probe": "probe-x", "run_id": "r1", "cases": []}
    first = mini.root / _write_record(repo, "probe-x", dict(record))
    before = first.read_bytes()
    first.unlink()
    assert (mini.root / _write_record(repo, "probe-x", dict(record))).read_bytes() == before
    assert first.name == "r1.json.gz"


def test_the_runner_writes_json_gz_and_every_reader_takes_it(mini, gpu):
    _, quoting = _measured(mini)
    [path] = record_files(mini.root / EVIDENCE / quoting)
    assert path.name.endswith(".json.gz") and mini.problems() == []
    assert records(mini, quoting)[0]["ceilings"]["record"].endswith(".json.gz")
    assert f"record: {EVIDENCE}/{quoting}/{path.name}" in (mini.root / "wiki/hardware/example.md").read_text()
    assert mini.run("refresh", "--check")[0] == 0
    code, out, _ = _cli(mini, "probe", "record", quoting, "--record", path.name.removesuffix(".gz"))
    assert code == 0 and path.name in out   # a run named as .json finds it compressed


# --- hostile files -------------------------------------------------------------------------------------
def test_a_gzip_bomb_is_refused_with_a_message_naming_the_file(mini):
    inflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = inflater.compress(b" " * (64 << 20)) + inflater.flush()   # 64 MiB of spaces in ~64 kB
    assert len(bomb) < record_file.MAX_TEXT_BYTES
    rel = _gzip_file(mini, f"{EVIDENCE}/probe-x/r1.json.gz", bomb)
    assert "inflates to more than 4,194,304 bytes" in _problems_of(mini, rel)
    code, _, err = mini.run("refresh")
    assert code == 0 and rel in err and "Traceback" not in err


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)   # the same bytes in every test worker


@pytest.mark.parametrize("data, said", [
    (_gz(b'{"probe": "probe-x"}')[:-6], "truncated gzip data"),
    (b"", "truncated gzip data"),
    (b'{"probe": "probe-x"}', "cannot be inflated (Error -3 while decompressing data: incorrect header check)"),
    (_gz(b"{}") + b"junk", "4 bytes after the end of the gzip stream"),
    (_gz(b'{"run_id": "\xff"}'), "not valid UTF-8 (byte 12 of the inflated text)"),
    (_gz(b'{"value": 1e999}'), "too large for a number"),
    (_gz(b'{"value": NaN}'), "NaN is not a number in standard JSON"),
    (_gz(b"{}")[:-8] + b"\0" * 8, "incorrect data check"),
], ids=["truncated", "empty", "not-gzip", "trailing-bytes", "not-utf8", "too-large-number", "nan", "bad-checksum"])
def test_a_broken_json_gz_is_a_problem_line_naming_it(mini, data, said):
    rel = _gzip_file(mini, f"{EVIDENCE}/probe-x/r1.json.gz", data)
    assert said in _problems_of(mini, rel), mini.problems()


def test_a_linked_json_gz_is_not_read(mini, tmp_path):
    secret = tmp_path / "secret.json.gz"
    secret.write_bytes(_gz(b'{"secret": 1}'))
    (mini.root / EVIDENCE / "probe-x").mkdir(parents=True)
    (mini.root / EVIDENCE / "probe-x/r1.json.gz").symlink_to(secret)
    assert "symbolic link" in messages(mini.problems())


def test_one_run_as_both_json_and_json_gz_is_a_problem(mini, gpu):
    _, quoting = _measured(mini)
    [path] = record_files(mini.root / EVIDENCE / quoting)
    plain = path.with_name(path.name.removesuffix(".gz"))
    plain.write_text(record_file.read_text(path), encoding="utf-8")
    rel = plain.relative_to(mini.root).as_posix()
    assert f"the same run as {path.relative_to(mini.root).as_posix()}" in _problems_of(mini, rel)


# --- the converter -------------------------------------------------------------------------------------
def test_compress_converts_records_and_references_and_changes_no_answer_but_paths(mini, gpu):
    _, quoting = _measured(mini)
    written = _as_before_compression(mini)
    page = (mini.root / "wiki/hardware/example.md").read_bytes()
    assert mini.problems() == [] and mini.run("refresh", "--check")[0] == 0 and b".json.gz" not in page
    before = _answers(mini, quoting)

    code, out, err = _cli(mini, "records", "compress")
    assert code == 0, out + err
    assert f"{EVIDENCE}/{quoting}/" in out and "(ceilings.record rewritten)" in out
    assert "wiki/hardware/example.md: 2 record references now name the .json.gz" in out
    assert "2 record(s) compressed" in err and "3 reference(s) rewritten" in err   # two claims, one ceilings.record
    # what the converter writes is what the runner writes: the same bytes, ceilings path included
    assert {p.relative_to(mini.root).as_posix(): p.read_bytes()
            for p in (mini.root / EVIDENCE).glob("*/*")} == written
    assert (mini.root / "wiki/hardware/example.md").read_bytes() == page.replace(b".json\n", b".json.gz\n")
    assert mini.problems() == [] and mini.run("refresh", "--check")[0] == 0 and mini.run("audit")[0] == 0
    # the page's size in a query hit grows by the three bytes of each ".gz"; nothing else changes
    after = [text.replace(".json.gz", ".json") for text in _answers(mini, quoting)]
    sized = re.compile(r'("page": )(\d+)')
    assert [sized.sub(r"\1N", text) for text in after] == [sized.sub(r"\1N", text) for text in before]
    assert after != before and [a for a, b in zip(after, before) if a != b] == [after[3]]

    snapshot = {p: p.read_bytes() for p in mini.root.rglob("*") if p.is_file() and ".kernelwiki-cache" not in p.parts}
    code, out, err = _cli(mini, "records", "compress")
    assert code == 0 and out == "" and "nothing to do" in err
    assert {p: p.read_bytes() for p in snapshot} == snapshot


def test_compress_finishes_a_half_done_conversion_and_refuses_two_different_records_of_one_run(mini, gpu):
    _, quoting = _measured(mini)
    [path] = record_files(mini.root / EVIDENCE / quoting)
    plain = path.with_name(path.name.removesuffix(".gz"))
    plain.write_text(record_file.read_text(path), encoding="utf-8")
    code, out, _ = _cli(mini, "records", "compress")
    assert code == 0 and "removed; " in out and not plain.exists() and mini.problems() == []

    plain.write_text(record_file.read_text(path).replace('"passed"', '"failed"', 1), encoding="utf-8")
    code, out, _ = _cli(mini, "records", "compress")
    assert code == 1 and "holds another record of the same run" in out and plain.exists() and path.exists()


def test_compress_takes_a_json_gz_gzipped_by_hand_beside_its_json_and_rewrites_it(mini, gpu):
    _, quoting = _measured(mini)
    written = _as_before_compression(mini)
    [plain] = record_files(mini.root / EVIDENCE / quoting)
    by_hand = plain.with_name(plain.name + ".gz")
    by_hand.write_bytes(_gz(plain.read_bytes()))   # `gzip -nk`: other header bytes, the old ceilings.record
    code, out, err = _cli(mini, "records", "compress")
    assert code == 0, out + err
    assert f"{plain.relative_to(mini.root).as_posix()}: removed; " in out and "ceilings.record now names" in out
    assert {p.relative_to(mini.root).as_posix(): p.read_bytes() for p in (mini.root / EVIDENCE).glob("*/*")} == written
    assert mini.problems() == []


def test_compress_leaves_a_broken_json_gz_as_it_is_and_converts_the_rest(mini, gpu):
    _, quoting = _measured(mini)
    _as_before_compression(mini)
    broken = _gzip_file(mini, f"{EVIDENCE}/{quoting}/20261129T100000Z-h200-run.json.gz", b"not gzip")
    code, out, _ = _cli(mini, "records", "compress")
    assert code == 1 and f"{broken}:1: -: cannot be inflated" in out and "left as it is" in out
    assert (mini.root / broken).read_bytes() == b"not gzip"
    assert not list((mini.root / EVIDENCE).glob(f"*/*{record_file.JSON}"))


@pytest.mark.parametrize("blocker", ["folder", "link", "damaged"])
def test_compress_never_replaces_what_holds_the_json_gz_name_nor_points_references_at_it(mini, gpu, tmp_path, blocker):
    """A `.json.gz` of the run that is no readable record (a folder, a link, a damaged file) was replaced
    by the converted `.json` (a folder: a traceback), and a refused `.json`'s references were pointed
    at it anyway: the `.json` stays, with a line naming the `.json.gz`, and so does every reference."""
    _, quoting = _measured(mini)
    _as_before_compression(mini)
    [plain] = record_files(mini.root / EVIDENCE / quoting)
    target = plain.with_name(plain.name + ".gz")
    if blocker == "folder":
        target.mkdir()
    elif blocker == "link":
        (tmp_path / "elsewhere").write_bytes(b"kept")
        target.symlink_to(tmp_path / "elsewhere")
    else:
        target.write_bytes(b"a damaged record, kept")
    page = mini.root / "wiki/hardware/example.md"
    code, out, err = _cli(mini, "records", "compress")
    rel = plain.relative_to(mini.root).as_posix()
    assert code == 1 and "Traceback" not in err, out + err
    assert f"{rel}:1: -: {rel}.gz is there but is no record that reads" in out and "not converted" in out
    assert plain.exists() and f"record: {rel}\n" in page.read_text()
    assert target.is_dir() if blocker == "folder" else (target.is_symlink() if blocker == "link"
                                                         else target.read_bytes() == b"a damaged record, kept")
    assert blocker != "link" or (tmp_path / "elsewhere").read_bytes() == b"kept"


def test_compress_keeps_the_references_of_a_run_whose_two_files_differ(mini, gpu):
    _, quoting = _measured(mini)
    _as_before_compression(mini)
    [plain] = record_files(mini.root / EVIDENCE / quoting)
    plain.with_name(plain.name + ".gz").write_bytes(record_file.encode(plain.read_text().replace('"passed"', '"failed"', 1)))
    code, out, _ = _cli(mini, "records", "compress")
    rel = plain.relative_to(mini.root).as_posix()
    assert code == 1 and "holds another record of the same run" in out
    assert f"record: {rel}\n" in (mini.root / "wiki/hardware/example.md").read_text()


def test_compress_refuses_a_reference_it_cannot_rewrite_on_its_line(mini, gpu):
    _measured(mini)
    _as_before_compression(mini)
    page = mini.root / "wiki/hardware/example.md"
    escaped = re.sub(r"record: (\S+)\.json\n", lambda m: f'record: "{m.group(1)}\\x2ejson"\n', page.read_text(), count=1)
    page.write_text(escaped)   # the same path in YAML (not canonical), with an escape: not on the line as text
    code, out, _ = _cli(mini, "records", "compress")
    assert code == 1 and "wiki/hardware/example.md:1: claims: a record reference is not on a `record:` line" in out
    assert page.read_text() == escaped
    assert "`kernelwiki records compress` rewrites the references" in messages(mini.problems())


def test_a_new_run_id_is_not_one_a_link_or_either_form_holds(tmp_path):
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "b.json.gz").write_bytes(_gz(b"{}"))
    (tmp_path / "c.json").symlink_to(tmp_path / "missing")
    assert [record_file.taken(tmp_path, run) for run in ("a", "b", "c", "d")] == [True, True, True, False]
    assert [record_file.run_id_of(n) for n in ("p/r.json.gz", "r.json", ".json", "r.gz", "r.json.gz.json")] == \
        ["r", "r", None, None, "r.json.gz"]


def test_compress_refuses_links_and_leaves_their_targets_alone(mini, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text('{"probe": "probe-x"}')
    (mini.root / EVIDENCE / "probe-x").mkdir(parents=True)
    (mini.root / EVIDENCE / "probe-x/r1.json").symlink_to(outside)
    (mini.root / EVIDENCE / "probe-y").symlink_to(tmp_path)
    code, out, err = _cli(mini, "records", "compress")
    assert code == 1 and "symbolic link" in out and "not converted" in out and "Traceback" not in err
    assert outside.read_text() == '{"probe": "probe-x"}' and not list(tmp_path.glob("*.gz"))
    assert (mini.root / EVIDENCE / "probe-x/r1.json").is_symlink()


def test_a_reference_left_naming_the_json_says_how_to_fix_it(mini, gpu):
    _measured(mini)
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace(".json.gz", ".json"))
    assert "`kernelwiki records compress` rewrites the references" in messages(mini.problems())
    assert _cli(mini, "records", "compress")[0] == 0 and mini.problems() == []


def test_the_site_publishes_the_inflated_json_where_the_json_stood(mini, gpu):
    from kernelwiki.docsite.records import record_page
    from kernelwiki.docsite.render import record_json_uri, record_uri
    from kernelwiki.storage.records import Record

    rel = f"{EVIDENCE}/probe-x/r1.json.gz"
    assert record_json_uri(rel) == "records/probe-x/r1.json" and record_uri(rel) == "records/probe-x/r1.md"
    text = record_page(Record(rel, {"run_id": "r1", "probe": "probe-x"}), {}, [])
    assert "[r1.json](r1.json) (the text of r1.json.gz, inflated)" in text


def test_control_characters_in_a_record_are_a_problem_and_the_runner_writes_them_escaped(mini, gpu):
    """A record's strings reach terminals, get answers and the site: an escape sequence in a probe's
    error text (a tool's colour codes) or a planted bidirectional override is refused by validate,
    named by its field; the runner writes such characters as escapes, so its own records pass."""
    _, quoting = _measured(mini)
    [path] = record_files(mini.root / EVIDENCE / quoting)
    record = json.loads(record_file.read_text(path))
    record["cases"][0]["reason"] = "ptxas \x1b[31merror\x1b[0m"
    record["cases"][0]["params"]["\u202eevil"] = "x"
    path.write_bytes(record_file.encode(json.dumps(record)))
    found = [p for p in mini.problems() if p["path"].endswith(path.name)]
    assert any(p["field"] == "cases[0].reason" and "U+001B" in p["message"] for p in found), messages(found)
    assert any("(its name)" in p["field"] and "U+202E" in p["message"] for p in found), messages(found)
    path.write_bytes(record_file.encode(record_file.record_text(record)))   # as the runner writes it
    assert not [p for p in mini.problems() if p["path"].endswith(path.name)]
    assert "ptxas \\x1b[31merror" in json.loads(record_file.read_text(path))["cases"][0]["reason"]
    deep: object = "\x07"
    for _ in range(5000):   # nested far past Python's recursion limit: walked without recursion
        deep = [deep]
    from kernelwiki.storage.records import control_characters

    assert control_characters(deep) == [("[0]" * 5000, "\x07")]


def test_control_characters_of_a_deep_record_of_many_keys_take_no_more_memory_than_the_record():
    """Each value's field path was spelled out before its string was looked at: 100,000 keys 900 levels
    down (1 MB of JSON) took 3.5 GB and 8 s, and 60 levels down (the most a record may nest is 72)
    250 MB; a path is spelled out only for a string that holds one."""
    import tracemalloc

    from kernelwiki.storage.records import control_characters, parse_record

    deep = ('{"' + "k" * 40 + '":') * 60
    text = deep + "{" + ",".join(f'"a{i}":0' for i in range(100000)) + ',"z":"\\u001b[2J"}' + "}" * 60
    data = parse_record(text)
    tracemalloc.start()
    try:
        found = control_characters(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak:,} bytes"
    [(where, char)] = found
    assert where == ".".join(["k" * 40] * 60 + ["z"]) and char == "\x1b"
    assert control_characters({"cases": [{"p": ["ok", {"\x9bx": 1}]}]}) == [("cases[0].p[1].\\x9bx (its name)", "\x9b")]


def test_a_record_nested_past_the_limit_is_a_problem_not_a_traceback_in_compress(mini, gpu):
    """A record nested 500 levels deep passed validate, and `records compress` (rewriting its
    ceilings.record) died of a RecursionError: a record is read at most MAX_DEPTH levels deep."""
    _, quoting = _measured(mini)
    _as_before_compression(mini)
    [plain] = record_files(mini.root / EVIDENCE / quoting)
    record = json.loads(plain.read_text())
    record["cases"][0]["params"]["deep"] = "@@"
    plain.write_text(json.dumps(record).replace('"@@"', "[" * 500 + "]" * 500))
    rel = plain.relative_to(mini.root).as_posix()
    said = f"{rel}:1: -: nested more than {record_file.MAX_DEPTH} levels deep"
    assert said in _problems_of(mini, rel)
    code, out, err = _cli(mini, "records", "compress")
    assert code == 1 and said in out and "not converted" in out and plain.exists(), out + err
