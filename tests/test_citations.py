"""audit --sources: quotes are checked against pinned wheels, git mirrors and given files; counts are reported."""

from __future__ import annotations

import subprocess
import zipfile

from conftest import HW_PAGE, SOURCE_PAGE

from kernelwiki.commands.citations import normalize
from kernelwiki.model.pages import parse_page, render_page

def claim(cid: str, src: str, locator: str, quote: str) -> dict:
    return {"id": cid, "metric": "tflops", "value": 100, "evidence": "source-reported", "source": src,
            "locator": locator, "quote": quote}


def page_with(claims: list[dict], sources: list[str]) -> str:
    page = parse_page(HW_PAGE.encode(), "x")
    page.meta["sources"] = sources
    page.meta["claims"] = page.meta["claims"] + claims
    return render_page(page.meta, page.body)


def source(page_id: str, origin: str) -> str:
    return SOURCE_PAGE.replace("id: src-example", f"id: {page_id}").replace("facts:", origin + "facts:")


def test_quotes_checked_in_wheels_mirrors_and_files(mini, tmp_path):
    wheels, mirrors, refs = tmp_path / "wheels", tmp_path / "mirrors", tmp_path / "refs"
    wheels.mkdir(), refs.mkdir()
    with zipfile.ZipFile(wheels / "some_pkg-1.2.3-py3-none-any.whl", "w") as archive:
        archive.writestr("some_pkg/mod.py", "TABLE = {\n    128:   {'regs': 184},\n}\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("| 64 | 2112 | **206 TFLOPS** |\nSee [the docs](http://x) now.\n")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    commit = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "own+repo" / "repo")], check=True)
    (refs / "notes.txt").write_text("Result: cosine 0.999999\n")

    mini.write("wiki/sources/pkg.md", source("src-pkg", "origin:\n  package: some-pkg\n  version: 1.2.3\n"))
    mini.write("wiki/sources/gh.md", source("src-gh", f"origin:\n  repo: own/repo\n  commit: {commit}\n"))
    mini.write("wiki/sources/ref.md", source("src-ref", "origin:\n  file: notes.txt\n"))
    mini.write("wiki/sources/old.md", source("src-old", "origin:\n  package: some-pkg\n  version: '9.9'\n"))
    claims = [
        claim("a", "src-pkg", "some_pkg/mod.py:2", "128: {'regs': 184}"),
        claim("b", "src-gh", "README.md:1", "| 64 | 2112 | 206 TFLOPS |"),
        claim("c", "src-gh", "README.md:2", "See the docs now."),
        claim("d", "src-ref", "line 1", "cosine 0.999999"),
        claim("e", "src-pkg", "some_pkg/mod.py:2", "'regs': 999"),
        claim("f", "src-pkg", "some_pkg/other.py", "x"),
        claim("g", "src-old", "some_pkg/mod.py", "anything"),
        claim("h", "src-example", "Table 1", "not checkable offline"),
    ]
    text = page_with(claims, ["src-example", "src-pkg", "src-gh", "src-ref", "src-old"])
    page = mini.write("wiki/hardware/example.md", text)
    assert mini.problems() == []
    code, out, err = mini.run("audit", "--sources", "--wheels", str(wheels), "--mirror", str(mirrors),
                              "--references", str(refs))
    assert code == 1, (out, err)
    assert "9 spec/source-reported claims: 9 with a quote (100%), 6 checkable here, 4 matched" in err
    lines = page.read_text().splitlines()
    e_quote = next(i for i, line in enumerate(lines) if "regs'': 999" in line) + 1
    f_locator = lines.index("  locator: some_pkg/other.py") + 1
    assert out.splitlines() == [
        f"wiki/hardware/example.md:{e_quote}: claims[5].quote: not found in some-pkg@1.2.3 some_pkg/mod.py at line 2",
        f"wiki/hardware/example.md:{f_locator}: claims[6].locator: no file 'some_pkg/other.py' in some-pkg@1.2.3",
    ]


def test_a_quote_is_checked_at_its_line_not_anywhere_in_the_file(mini, tmp_path):
    """`path:N` says where the quote stands: words that stand elsewhere in the file do not match."""
    refs = tmp_path / "refs"
    refs.mkdir()
    (refs / "notes.txt").write_text("intro\nResult: cosine 0.999999\n" + "filler\n" * 10 + "late: 42 TFLOP/s\n")
    mini.write("wiki/sources/ref.md", source("src-ref", "origin:\n  file: notes.txt\n"))
    claims = [claim("a", "src-ref", "notes.txt:2", "cosine 0.999999"),
              claim("b", "src-ref", "notes.txt:1-3", "cosine 0.999999"),
              claim("c", "src-ref", "notes.txt:2", "late: 42 TFLOP/s"),      # stands at line 13
              claim("d", "src-ref", "end of the notes", "late: 42 TFLOP/s")]   # no line: the whole file
    mini.write("wiki/hardware/example.md", page_with(claims, ["src-example", "src-ref"]))
    code, out, _ = mini.run("audit", "--sources", "--references", str(refs))
    assert code == 1
    assert [line.split(": ", 2)[1:] for line in out.splitlines()] == [
        ["claims[3].quote", "not found in notes.txt notes.txt at line 2"]]


def test_nothing_checkable_passes(mini):
    code, _, err = mini.run("audit", "--sources")
    assert code == 0 and "1 spec/source-reported claims: 1 with a quote (100%), 0 checkable here, 0 matched" in err


def test_normalize_drops_markup_and_whitespace():
    assert normalize("|  **1550 TFLOPS**  on\n `H800` [see](http://x) |") == "| 1550 TFLOPS on H800 see |"
