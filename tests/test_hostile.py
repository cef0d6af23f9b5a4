"""Hostile input: every command answers bad pages, records, paths and arguments with
`path:line` problems or a one-line error - never a traceback, never a write outside the repository."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import HW_PAGE, PROBLEM_LINE, MiniRepo, messages, record_files, record_text

RECORD = {
    "schema_version": 1, "probe": "probe-x", "run_id": "20261129T100000Z-h200-run", "mode": "run",
    "status": "passed", "started_at": "2026-11-29T10:00:00Z",
    "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a", "cuda_runtime": "13.0", "cutlass_dsl": "4.8.1",
                    "torch": "2.11.0", "driver": "580"},
    "negative_control": {"description": "broken", "failed_gate": True},
    "cases": [{"id": "c1", "status": "passed", "params": {"dtype": "bf16"},
               "headline": {"metric": "tflops", "value": 123.4, "unit": "TFLOP/s"}}],
}


def page_with(extra: str, page_id: str = "hw-bad") -> str:
    return HW_PAGE.replace("id: hw-example", f"id: {page_id}").replace("aliases:\n- skill-example\n", "") \
        .replace("claims:", extra + "claims:", 1)


def every_command(mini: MiniRepo, page: str = "hw-example") -> list[tuple[int, str, str]]:
    """validate, get (md and json), query, refresh --check: none may raise or print a traceback."""
    results = [mini.run("validate"), mini.run("get", page), mini.run("get", page, "--format", "json"),
               mini.run("query", "example"), mini.run("refresh", "--check")]
    for code, out, err in results:
        assert code in (0, 1), (code, out, err)
        assert "Traceback" not in out + err
    return results


def problem_lines(out: str) -> list[str]:
    lines = out.splitlines()
    for line in lines:
        assert PROBLEM_LINE.match(line), f"malformed problem line: {line!r}"
    return lines


# --- YAML ----------------------------------------------------------------------------------------
BOMB = "lol: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"l{i}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))


@pytest.mark.parametrize("extra, line, field, fragment", [
    (BOMB, 13, "l0", "anchors and aliases"),
    ("big: " + "9" * 5000 + "\n", 12, "big", "an integer of 5000 characters"),
    ("1: one\n", 12, "-", "keys must be plain text (got int '1')"),
    ("null: x\n", 12, "-", "keys must be plain text (got null"),
    ("deep: " + "[" * 300 + "]" * 300 + "\n", 12, "deep", "nest"),
    ("deep2:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 60)) + "  " * 60 + "x: 1\n", 0, "deep2", "nested more than"),
    ("bell: \"a\\x07\"\nraw: a\x07b\n", 13, "-", "control character U+0007"),
])
def test_hostile_yaml_is_one_problem_on_its_line(mini, extra, line, field, fragment):
    mini.write("wiki/hardware/bad.md", page_with(extra))
    start = time.monotonic()
    every_command(mini)
    assert time.monotonic() - start < 20
    problems = [p for p in mini.problems() if p["path"] == "wiki/hardware/bad.md"]
    assert problems and fragment in problems[0]["message"], messages(problems)
    if line:
        assert int(problems[0]["line"]) == line, messages(problems)
    if field != "-" or line:
        assert problems[0]["field"].startswith(field)


@pytest.mark.parametrize("value", [".nan", ".NaN", ".inf", "-.inf", "+.Inf", "1.0e+999"])
def test_non_finite_numbers_are_refused(mini, value):
    mini.write("wiki/hardware/example.md", HW_PAGE.replace("value: 100", f"value: {value}"))
    [problem] = [p for p in mini.problems() if p["field"] != "-"]  # (.NaN is also not canonical: .nan)
    assert (problem["line"], problem["field"]) == ("17", "claims[0].value") and "not a finite number" in problem["message"]
    code, out, err = mini.run("get", "hw-example", "--format", "json")
    assert code == 1 and out == "" and "frontmatter.claims[0].value: is" in err


def test_fence_with_trailing_space_is_reported_fixed_and_never_crashes_refresh(mini):
    page = mini.write("wiki/hardware/example.md", HW_PAGE.replace("\n---\n# Example", "\n--- \n# Example"))
    [problem] = mini.problems()
    assert problem["line"] == "26" and "trailing whitespace" in problem["message"]
    every_command(mini)
    assert mini.run("refresh")[0] == 0
    assert mini.run("validate", "--fix")[0] == 0
    assert page.read_text() == HW_PAGE


def test_page_size_limit(mini):
    mini.write("wiki/hardware/big.md", HW_PAGE.replace("hw-example", "hw-big") + "x" * (1 << 20))
    every_command(mini)
    problems = [p for p in mini.problems() if p["path"] == "wiki/hardware/big.md"]
    assert [p["line"] for p in problems] == ["1"] and "the limit is 1,048,576" in problems[0]["message"]


def test_reader_error_is_one_line_on_the_right_line(mini):
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: \x01bad\n")
    code, out, _ = mini.run("validate")
    lines = [line for line in problem_lines(out) if line.startswith("probes/probe-x/probe.yaml")]
    assert lines == ["probes/probe-x/probe.yaml:3: -: YAML: control character U+0001 is not allowed; remove it"]


# --- comments ------------------------------------------------------------------------------------
def test_comments_are_never_dropped(mini):
    text = HW_PAGE.replace("tags:\n", "tags:  # keep me\n").replace("title: An", "title:   An")
    page = mini.write("wiki/hardware/example.md", text)
    [problem] = mini.problems()
    assert problem["line"] == "10" and "YAML comment" in problem["message"]
    mini.run("validate", "--fix")
    assert page.read_text() == text  # not rewritten: the rewrite would lose the comment
    # refresh must change the frontmatter (a probe now backs the page): it refuses instead
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
               "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
    mini.write("probes/probe-x/run.py", "")
    page.write_text(text.replace("summary:", "probes:\n- probe-x\nsummary:"))
    mini.write("artifacts/evidence/probe-x/20261129T100000Z-h200-run.json", json.dumps(RECORD))
    before = page.read_text()
    code, out, _ = mini.run("refresh")
    assert code == 1 and "wiki/hardware/example.md:12: -: not refreshed" in out and "YAML comment" in out
    assert page.read_text() == before


# --- paths ---------------------------------------------------------------------------------------
def test_root_that_is_not_a_checkout(mini, tmp_path, monkeypatch, capsys):
    from kernelwiki.faces.cli import main

    for argv in (["validate", "--root", str(tmp_path)], ["get", "x", "--root", "/nonexistent"],
                 ["probe", "run", "--all", "--root", str(tmp_path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "not a kernelwiki checkout" in err and "Traceback" not in err
    monkeypatch.setenv("KERNELWIKI_ROOT", "/nonexistent")
    assert main(["query", "x"]) == 2
    assert "$KERNELWIKI_ROOT /nonexistent: not a kernelwiki checkout" in capsys.readouterr().err


def test_symlinked_page_is_refused_and_never_written_through(mini, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text(HW_PAGE.replace("hw-example", "hw-secret").replace("title: An", "title:   An"))
    before = outside.read_bytes()
    os.symlink(outside, mini.root / "wiki/hardware/secret.md")
    problems = [p for p in mini.problems() if p["path"] == "wiki/hardware/secret.md"]
    assert problems and "symbolic link" in problems[0]["message"]
    code, _, err = mini.run("get", "hw-secret")
    assert code == 1 and "no page" in err
    assert "hw-secret" not in mini.run("query", "secret", "--json")[1]
    mini.run("validate", "--fix")
    mini.run("refresh")
    assert outside.read_bytes() == before
    os.symlink(tmp_path / "missing.md", mini.root / "wiki/hardware/dangling.md")
    assert any(p["path"] == "wiki/hardware/dangling.md" for p in mini.problems())


def test_symlink_in_artifact_dir_is_not_printed(mini, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    mini.write("artifacts/kernels/example/kernel.py", "print('ours')\n")
    os.symlink(secret, mini.root / "artifacts/kernels/example/leak.py")
    mini.write("wiki/hardware/example.md", HW_PAGE.replace("summary:", "artifact_dir: artifacts/kernels/example\nsummary:"))
    for fmt in ("md", "json"):
        code, out, _ = mini.run("get", "hw-example", "--include-code", "--format", fmt)
        assert code == 0 and "TOP SECRET" not in out and "print('ours')" in out
        assert "leak.py" in out and "symbolic link" in out


# --- records -------------------------------------------------------------------------------------
def with_probe(mini: MiniRepo) -> Path:
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
               "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
    mini.write("probes/probe-x/run.py", "")
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(HW_PAGE.replace("summary:", "probes:\n- probe-x\nsummary:"))
    mini.write(f"artifacts/evidence/probe-x/{RECORD['run_id']}.json", json.dumps(RECORD))
    assert mini.run("refresh")[0] == 0
    assert mini.problems() == []
    return page


@pytest.mark.parametrize("change, field, fragment", [
    ({"started_at": "2099-01-01T00:00:00Z"}, "started_at", "in the future"),
    ({"started_at": "yesterday"}, "started_at", "is not a UTC time"),
    ({"finished_at": "2026-11-29T09:00:00Z"}, "finished_at", "before started_at"),
    ({"cases": "lots"}, "cases", "must be a list"),
    ({"cases": [{"id": "c1", "status": "passed", "headline": {"metric": "tflops", "value": "fast"}}]},
     "cases[0].headline.value", "must be a number"),
    # Issue 24: a case id refresh would turn into a claim validate rejects, and a case id given twice.
    ({"cases": [dict(RECORD["cases"][0], id="c 1")]}, "cases[0].id", "does not match"),
    ({"cases": [RECORD["cases"][0], RECORD["cases"][0]]}, "cases[1].id", "duplicate case id 'c1'"),
])
def test_bad_records_are_refused_by_validate_and_unseen_by_refresh(mini, change, field, fragment):
    page = with_probe(mini)
    before = page.read_text()
    bad = dict(RECORD, run_id="20261129T110000Z-h200-run", **change)
    mini.write(f"artifacts/evidence/probe-x/{bad['run_id']}.json", json.dumps(bad))
    problems = mini.problems()
    assert any(p["field"] == field and fragment in p["message"] for p in problems), messages(problems)
    code, _, err = mini.run("refresh")
    assert code == 0 and "record ignored" in err and "Traceback" not in err
    assert page.read_text() == before


def test_nan_and_unknown_probe_and_unreadable_records(mini):
    with_probe(mini)
    text = json.dumps(RECORD).replace("123.4", "NaN").replace(RECORD["run_id"], "20261129T110000Z-h200-run")
    mini.write("artifacts/evidence/probe-x/20261129T110000Z-h200-run.json", text)
    stray = dict(RECORD, probe="probe-gone", run_id="r1")
    mini.write("artifacts/evidence/probe-gone/r1.json", json.dumps(stray))
    locked = mini.write("artifacts/evidence/probe-x/20261129T120000Z-h200-run.json", json.dumps(RECORD))
    (mini.root / "artifacts/evidence/probe-x/20261129T130000Z-h200-run.json").mkdir()  # unreadable as root too
    locked.chmod(0)
    try:
        found = messages(mini.problems())
        code, _, err = mini.run("refresh")
    finally:
        locked.chmod(0o644)
    assert code == 0 and "20261129T130000Z-h200-run.json:1: -: is not a regular file; not read (record ignored" in err
    assert "probe-x/20261129T110000Z-h200-run.json:1: -: not a JSON run record: NaN is not a number" in found
    assert "probe-gone/r1.json:1: probe: no probe probes/probe-gone/probe.yaml" in found
    assert "probe-x/20261129T130000Z-h200-run.json:1: -: is not a regular file; not read" in found
    if os.geteuid() != 0:  # root reads any file
        assert "probe-x/20261129T120000Z-h200-run.json:1: -: cannot be read" in found


def test_same_second_records_sort_by_counter(mini):
    page = with_probe(mini)
    later = dict(RECORD, run_id=RECORD["run_id"] + "-2")
    later["cases"] = [dict(RECORD["cases"][0], headline={"metric": "tflops", "value": 222.2, "unit": "TFLOP/s"})]
    later["environment"] = dict(RECORD["environment"], commit="newer")   # the newest kernel version's runs count
    mini.write(f"artifacts/evidence/probe-x/{later['run_id']}.json", json.dumps(later))
    assert mini.run("refresh")[0] == 0
    assert "value: 222.2" in page.read_text()
    code, out, _ = mini.run("get", "hw-example", "--include-code")
    assert f"{later['run_id']}.json" in out


def test_cache_follows_content_not_mtime(mini):
    page = mini.root / "wiki/hardware/example.md"
    assert mini.problems() == [] and "Example hardware" in mini.run("get", "hw-example")[1]
    stat = page.stat()
    page.write_text(HW_PAGE.replace("dtype: bf16", "dtype: xx16"))  # same size
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # mtime restored, as cp -p would
    assert page.stat().st_size == stat.st_size
    assert any("unknown dtype 'xx16'" in p["message"] for p in mini.problems())
    assert "dtype: xx16" in mini.run("get", "hw-example")[1]


def test_duplicate_id_blames_only_the_duplicates(mini):
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
               "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
    mini.write("probes/probe-x/run.py", "")
    mini.write("wiki/hardware/example.md", HW_PAGE.replace("summary:", "probes:\n- probe-x\nsummary:"))
    mini.write("wiki/hardware/a-copy.md", HW_PAGE.replace("- skill-example\n", "- skill-other\n"))
    problems = mini.problems()
    assert not [p for p in problems if p["path"].startswith("probes/")], messages(problems)
    assert {p["path"] for p in problems if "duplicate id" in p["message"]} == {
        "wiki/hardware/example.md", "wiki/hardware/a-copy.md"}


# --- arguments -----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, fragment", [
    (["query", "x", "--limit", "-3"], "is negative"),
    (["query", "--arch", "bogus"], "unknown architecture 'bogus'"),
    (["probe", "run", "--all", "--timeout", "-5"], "not a positive number of seconds"),
    (["probe", "run", "--all", "--timeout", "nan"], "not a positive number of seconds"),
    (["probe", "run", "--all", "--compile-only", "--arch", "sm_99z"], "unknown architecture 'sm_99z'"),
])
def test_bad_numbers_and_names_are_refused(mini, capsys, argv, fragment):
    from kernelwiki.faces.cli import main

    try:
        code = main([argv[0], *argv[1:2], "--root", str(mini.root), *argv[2:]] if argv[0] == "probe"
                    else [argv[0], "--root", str(mini.root), *argv[1:]])
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    assert fragment in capsys.readouterr().err


# --- the fast schema check -------------------------------------------------------------------------
def test_fast_schema_check_agrees_with_jsonschema_on_the_real_files():
    from conftest import ROOT
    from kernelwiki.model import yamlio
    from kernelwiki.model.fastschema import passes
    from kernelwiki.model.pages import read_page
    from kernelwiki.model.schema import _validators

    schemas = ROOT / "schemas"
    documents = [("page", read_page(p, p.name).meta) for p in sorted((ROOT / "wiki").rglob("*.md"))]
    documents += [("record", json.loads(record_text(p)))
                  for folder in sorted((ROOT / "artifacts/evidence").iterdir()) for p in record_files(folder)]
    documents += [("probe", yamlio.load(p.read_text())[0]) for p in sorted((ROOT / "probes").glob("*/probe.yaml"))]
    broken = dict(documents[0][1], claims=[{"id": "x", "value": [1]}], status="done")
    documents += [("page", broken), ("record", {"cases": "lots"}), ("probe", {"id": 3})]
    for name, data in documents:
        assert passes(schemas, name, data) is _validators(str(schemas))[name].is_valid(data), (name, data)


def test_parsing_shared_among_cpus_gives_the_same_answers(mini, monkeypatch):
    import kernelwiki.storage.index

    mini.write("wiki/hardware/bad.md", page_with("1: one\n"))
    mini.write("wiki/hardware/odd.md", page_with("tags2: [x]\n", page_id="hw-odd"))
    mini.write("wiki/hardware/example.md", HW_PAGE.replace("dtype: bf16", "dtype: bf17"))
    one = mini.run("validate", "--no-cache")
    monkeypatch.setattr(kernelwiki.storage.index, "PARALLEL_MIN", 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert mini.run("validate", "--no-cache") == one and one[0] == 1
    assert mini.run("validate") == one  # builds the cache in parallel
    assert mini.run("validate") == one  # and reads it back


def test_a_process_with_other_threads_reads_pages_without_forking(mini, monkeypatch):
    """A fork copies the locks other threads hold (Ray's native threads, after an in-process
    `probe run --ray`, left a forked reader waiting forever): with a second thread alive the scan
    reads serially, and answers the same."""
    import threading

    import kernelwiki.storage.index

    mini.write("wiki/hardware/bad.md", page_with("1: one\n"))
    one = mini.run("validate", "--no-cache")
    monkeypatch.setattr(kernelwiki.storage.index, "PARALLEL_MIN", 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    forks = []
    import multiprocessing   # the index imports it only when it forks

    monkeypatch.setattr(multiprocessing, "get_context",
                        lambda method: forks.append(method) or (_ for _ in ()).throw(AssertionError("forked")))
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert not kernelwiki.storage.index._single_threaded()
        assert mini.run("validate", "--no-cache") == one and forks == []
    finally:
        stop.set()
        other.join()


def test_get_reads_one_page_and_trusts_no_stale_name(mini, monkeypatch):
    import kernelwiki.storage.index

    assert "skill-example" in mini.run("get", "skill-example")[1]  # full load; writes the alias map
    with monkeypatch.context() as patch:  # by id, alias or path: the one page file, not the index
        patch.setattr(kernelwiki.storage.index.Wiki, "load", None)
        for name in ("hw-example", "skill-example", "SKILL-EXAMPLE", "wiki/hardware/example.md"):
            code, out, _ = mini.run("get", name)
            assert code == 0 and "id: hw-example" in out
    # the alias moves to another page: the cached map now points at a page that no longer has it
    mini.write("wiki/hardware/example.md", HW_PAGE.replace("- skill-example\n", "- skill-old\n"))
    mini.write("wiki/hardware/other.md", HW_PAGE.replace("hw-example", "hw-other"))
    code, out, _ = mini.run("get", "skill-example")
    assert code == 0 and "id: hw-other" in out
    code, out, _ = mini.run("get", "hw-example", "--follow-sources")  # needs every page: loads them
    assert code == 0 and "src-example: An example source" in out


def test_ctrl_c_in_any_command_is_a_clean_exit(mini, monkeypatch, capsys):
    import kernelwiki.commands.validate
    from kernelwiki.faces.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(kernelwiki.commands.validate, "validate", interrupted)
    assert main(["validate", "--root", str(mini.root)]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_page_that_is_a_directory_or_a_fifo(mini):
    (mini.root / "wiki/hardware/dir.md").mkdir()
    os.mkfifo(mini.root / "wiki/hardware/pipe.md")  # opening it must not block
    every_command(mini)
    found = {p["path"]: p["message"] for p in mini.problems()}
    assert "not a regular file" in found["wiki/hardware/dir.md"]
    assert "not a regular file" in found["wiki/hardware/pipe.md"]
