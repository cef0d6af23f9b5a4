"""Answers that fit an agent's context (issue 39, item 2): the claims sent once, --include-code within
80,000 characters by default, --files sending only what it names, claims filtered by case and shape,
--prose keeping a footgun's fix, --section, and one escaper for every cell of a claims table."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, run_cli
from kernelwiki.commands.get import DEFAULT_CHARS, Options, page_table, prose, section
from kernelwiki.commands.get import claims_table
from kernelwiki.storage.index import Wiki
from kernelwiki.storage.repo import Repo


def cli(*argv: str) -> str:
    code, out, err = run_cli(list(argv), ROOT)
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def page_ids() -> list[str]:
    return sorted(Wiki.load(Repo(ROOT)).by_id())


def test_every_page_with_its_code_fits_by_default(page_ids):
    sizes = {page_id: len(cli("get", page_id, "--include-code")) for page_id in page_ids}
    assert max(sizes.values()) < DEFAULT_CHARS, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
    assert len(sizes) > 90


def test_the_claims_are_sent_once():
    page = cli("get", "kernel-hopper-gemm")
    frontmatter, body = page.split("\n---\n", 1)
    assert "\nclaims:" not in frontmatter and "\n# claims: " in frontmatter   # it says where they are
    meta = Wiki.load(Repo(ROOT)).resolve("kernel-hopper-gemm").meta
    for claim in meta["claims"]:
        assert page.count(f"| {claim['id']} |") == 1, claim["id"]
    assert "[R1]: artifacts/evidence/" in body   # each cited record once, below the table
    document = json.loads(cli("get", "kernel-hopper-gemm", "--format", "json"))
    assert len(document["frontmatter"]["claims"]) == len(meta["claims"])
    assert "| claim |" not in document["body"]   # JSON: the frontmatter's list, not a table as well


def test_files_send_only_the_files_they_name():
    text = cli("get", "kernel-fp8-blockscale-gemm", "--include-code", "--files", "quantize.py")
    assert not text.startswith("---") and "#### artifacts/kernels/fp8_blockscale_gemm/quantize.py (own)" in text
    assert text.count("\n#### ") == 1 and len(text) < 20_000


def test_include_code_lists_what_it_does_not_send_with_sizes():
    text = cli("get", "kernel-hopper-gemm", "--include-code")
    assert "- artifacts/kernels/hopper_gemm/hopper_gemm.py: " in text and " bytes, kernel" in text
    assert "- probes/probe-hopper-gemm/probe.yaml: " in text and "probe code" in text
    assert "ask for one by name with --files NAME" in text


def test_claims_of_one_case_or_shape():
    text = cli("get", "kernel-hopper-gemm", "--claims", "--case", "bf16-4096*")
    rows = text.splitlines()[2:]
    assert rows and all("#bf16-4096" in row for row in rows)
    assert len(rows) < len(cli("get", "kernel-hopper-gemm", "--claims").splitlines()) - 2
    shaped = cli("get", "kernel-hopper-gemm", "--claims", "--shape", "*x7168").splitlines()[2:]
    assert shaped and all("x7168 |" in row for row in shaped)
    page = cli("get", "kernel-hopper-gemm", "--case", "tf32-m1")
    assert "claim(s) match --case tf32-m1" in page and "# claims: 1 of " in page
    assert cli("get", "kernel-hopper-gemm", "--claims", "--case", "no-such-case") == "No claims match.\n"
    code, _, err = run_cli(["get", "kernel-hopper-gemm", "--prose", "--case", "x"], ROOT)
    assert code == 2 and "case: chooses among the claims" in err


def test_prose_keeps_the_code_of_a_fix_and_section_picks_a_heading():
    text = cli("get", "footgun-st32x32b-16bit", "--prose")
    assert "cute.recast_tensor(rP_bf16, cutlass.Float32)" in text   # the fix, the code an agent needs
    body = "# T\n\n## Cause\n\n```python\nbad()\n```\n\n## Fix\n\n```python\ngood()\n```\n"
    assert prose(body) == "# T\n\n## Cause\n\n[1 line(s) of python left out: part body has them]\n\n## Fix\n\n" \
                          "```python\ngood()\n```\n"
    assert section(body, "cause") == "## Cause\n\n```python\nbad()\n```\n"
    picked = cli("get", "kernel-hopper-gemm", "--section", "M = 1")
    assert picked.startswith("### M = 1: why it crashed") and "### Choosing a configuration" not in picked
    code, _, err = run_cli(["get", "kernel-hopper-gemm", "--section", "no such heading"], ROOT)
    assert code == 1 and "no section heading holds 'no such heading'; the headings: Our Hopper GEMM;" in err


HOSTILE = {"id": "m.x|y", "metric": "tflops", "value": 1.0, "unit": "TFLOP/s", "gpu": "H|200", "arch": "sm_90a",
           "dtype": "bf|16", "shape": "1|2x3", "conditions": "a|b\nc", "evidence": "measured",
           "record": "artifacts/evidence/probe-x/r.json", "case": "c|1"}


def test_one_escaper_for_every_cell_of_every_claims_table():
    """A `|` in any field of a claim stays inside its cell: as many cells as headers in the page's
    table and in --claims (before, the shape, gpu and dtype of --claims were not escaped)."""
    for table in (page_table([HOSTILE], Options()), claims_table([HOSTILE])):
        lines = [line for line in table.splitlines() if line.startswith("|")]
        header = lines[0].count(" | ") + 1
        for line in lines[2:]:
            cells = [c for c in line.replace("\\|", "").split("|")[1:-1]]
            assert len(cells) == header, line
        assert "\n" not in lines[-1]
