"""audit: performance numbers in prose must sit in claim spans or on lines marked unclaimed."""

from __future__ import annotations

import pytest

from conftest import HW_PAGE

from kernelwiki.commands.audit import PERFORMANCE_NUMBER, Audit, audit_body


def numbers(text: str) -> list[str]:
    return [m.group(0).strip() for m in PERFORMANCE_NUMBER.finditer(text)]


@pytest.mark.parametrize("text, found", [
    ("reaches 1613 TFLOP/s and 71% of peak", ["1613 TFLOP/s", "71%"]),
    ("1.3× cuDNN, 2.7x Triton, 20–30× faster", ["1.3×", "2.7x", "30×"]),
    ("4.8 TB/s, 3350 GB/s, 1980 MHz, 700 W, 12 µs, 3 us, 1.5 ms, 40 ns", None),
    ("32 cycles, 1 ulp, 2 ulps, 1024 FLOP/clk/SM, 740 TFLOPS", None),
    ("a 128×256 tile, 64×K by K×N, 4 × wgmma, 2 × 1 cluster, 128 × N", []),
    ("hex 0x1F, 4x4 grid, 7 Warps, 128 threads, v2.7x", []),
])
def test_what_counts_as_a_performance_number(text, found):
    if found is None:
        assert len(numbers(text)) == text.count(",") + 1, numbers(text)
    else:
        assert numbers(text) == found


BODY = """# Title

Spans are fine: <!-- claim:peak -->100 TFLOP/s<!-- /claim -->.
So is `1.2x in code` and <!-- a comment with 5 W -->.
A bare 99 TFLOP/s on line 6.
Marked: 64 ulp is the definition <!-- unclaimed: definitional constant, not a measurement -->
Empty reason 3 W <!-- unclaimed: -->

```
90% inside a fence
```
<!-- kernelwiki:begin claims -->
| x | 1.0× |
<!-- kernelwiki:end claims -->
"""


def test_audit_body_counts_and_locates():
    result = Audit()
    audit_body("wiki/x.md", BODY, 10, result)
    assert (result.spans, result.unclaimed, result.bare, result.total) == (1, 1, 2, 4)   # an empty reason exempts nothing
    lines = [(p.line, p.field) for p in result.problems]
    assert lines == [(14, "prose"), (16, "unclaimed"), (16, "prose")], [str(p) for p in result.problems]
    assert "'99 TFLOP/s'" in result.problems[0].message


def test_cli_exit_codes_and_summary(mini):
    page = mini.root / "wiki/hardware/example.md"
    assert mini.run("audit")[0] == 0
    page.write_text(HW_PAGE + "It reaches 100 TFLOP/s.\n", encoding="utf-8")
    code, out, err = mini.run("audit")
    line = HW_PAGE.count("\n") + 1
    assert code == 1 and out.startswith(f"wiki/hardware/example.md:{line}: prose: performance number '100 TFLOP/s'")
    assert "1 performance numbers in prose: 0 in claim spans, 0 marked unclaimed (0.0%), 1 bare" in err
    page.write_text(HW_PAGE + "It reaches <!-- claim:peak -->100 TFLOP/s<!-- /claim -->.\n", encoding="utf-8")
    assert mini.run("audit")[0] == 0


def test_frontmatter_numbers_need_a_claim_that_carries_them(mini):
    """Title, summary and a source page's facts cannot hold a span: their numbers must be claims' values."""
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(HW_PAGE.replace("summary: A feature", "summary: At 100 TFLOP/s, a feature"), encoding="utf-8")
    assert mini.run("audit")[0] == 0   # the page's claim `peak` carries 100
    page.write_text(HW_PAGE.replace("summary: A feature", "summary: At 250 TFLOP/s, a feature"), encoding="utf-8")
    code, out, _ = mini.run("audit")
    assert code == 1 and "example.md:5: summary: performance number '250 TFLOP/s' in the frontmatter" in out
    source = mini.root / "wiki/sources/example.md"
    source.write_text(source.read_text().replace("reaches 100 TFLOP/s.", "reaches 100 TFLOP/s and 3.2 TB/s."))
    page.write_text(HW_PAGE, encoding="utf-8")
    code, out, _ = mini.run("audit")
    assert code == 1 and out.splitlines() == [
        "wiki/sources/example.md:9: facts[0]: performance number '3.2 TB/s' in the frontmatter that no claim "
        "carries; make it the value of a claim of a page citing this source (the number in its value or quote), "
        "or leave it out"]


def test_a_sentence_that_promises_evidence_is_reported(mini):
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(HW_PAGE + "Its results appear in the table once the runner has recorded them.\n", encoding="utf-8")
    code, out, _ = mini.run("audit")
    assert code == 1 and "prose: promises evidence that is not there" in out
    page.write_text(HW_PAGE + "The table has the results of its one run.\n", encoding="utf-8")
    assert mini.run("audit")[0] == 0


def test_a_ratio_span_names_its_baseline_in_its_sentence():
    """The headline moved from a serial cuBLAS loop to DeepGEMM (issue 23); the prose that still said
    "against cuBLAS blockwise ... 0.859x" credited DeepGEMM's ratio to the loop."""
    from kernelwiki.commands.audit import baseline_word, unattributed_ratios

    claims = {"m": {"id": "m", "ratio": 0.859, "baseline": {"name": "DeepGEMM", "value": 1.0}},
              "n": {"id": "n", "ratio": 0.541, "baseline": {"name": "ours, production kernel", "value": 1.0}}}
    wrong = ("- **Masked.** Against cuBLAS blockwise called once per expert, ours is at\n"
             "  <!-- claim:m.ratio -->0.859×<!-- /claim --> with four experts. DeepGEMM is in the table.\n"
             "- The teaching variant (<!-- claim:n.ratio -->0.541×<!-- /claim --> of cuBLAS blockwise).\n")
    found = unattributed_ratios("wiki/x.md", wrong, 10, claims)
    assert [(p.line, p.message.split(",")[0]) for p in found] == [(11, "ratio m.ratio is against 'DeepGEMM'"),
                                                                  (12, "ratio n.ratio is against 'ours")]
    right = wrong.replace("cuBLAS blockwise called", "DeepGEMM, not cuBLAS blockwise called").replace(
        "of cuBLAS blockwise", "of our production kernel")
    assert unattributed_ratios("wiki/x.md", right, 10, claims) == []
    assert baseline_word("cuBLAS blockwise FP8") == "cuBLAS" and baseline_word("ours, production kernel") == "production"
