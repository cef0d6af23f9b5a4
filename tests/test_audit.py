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


# --- issue 37: verdict words need their numbers ----------------------------------------------------
def _verdicts(body: str, claims: dict | None = None, goals: list | None = None) -> list[str]:
    from kernelwiki.commands.audit import verdict_problems

    return [p.message for p in verdict_problems("p.md", body, 1, claims or {}, goals or [], Audit())]


RATIO = {"m.pp": {"id": "m.pp", "value": 689.1, "ratio": 0.8703, "baseline": {"name": "cuBLAS", "value": 791.8}},
         "m.lead": {"id": "m.lead", "value": 727.9, "ratio": 1.018, "within_spread": True,
                    "baseline": {"name": "ours-cooperative", "value": 715.0}},
         "m.win": {"id": "m.win", "value": 566.9, "ratio": 1.065, "baseline": {"name": "ours-cooperative", "value": 532.3}}}


@pytest.mark.parametrize("sentence, problem", [
    ("With the window the hot read runs at L2 speed.", "'at L2 speed' judges without a claim span"),
    ("The shorter K, the more ping-pong wins.", "'wins' judges without a claim span"),
    ("Fusion should pay under ping-pong; it beats the cooperative kernel.", "without a claim span"),
    ("Our kernel reaches the ceiling on every shape.", "'reaches the ceiling' judges"),
    ("Ping-pong was faster, at <!-- claim:m.pp.ratio -->0.87×<!-- /claim --> cuBLAS.", "'faster' over ratio(s) below 1"),
    ("Ping-pong led cooperative, at <!-- claim:m.lead.ratio -->1.02×<!-- /claim --> ours-cooperative.",
     "inside the spread neither is ahead"),
])
def test_audit_flags_planted_verdicts(sentence, problem):
    found = _verdicts(f"# Page\n\nSome context first.\n{sentence}\n", RATIO)
    assert any(problem in message for message in found), found


@pytest.mark.parametrize("sentence", [
    "Ping-pong was faster, at <!-- claim:m.win.ratio -->1.07×<!-- /claim --> ours-cooperative.",
    "cuBLAS was faster than ours, which ran at <!-- claim:m.pp.ratio -->0.87×<!-- /claim --> cuBLAS.",
    "Ours was slower: <!-- claim:m.pp.ratio -->0.87×<!-- /claim --> cuBLAS.",
    "## When cooperative wins",
    "This leads to a deadlock when the arrive count is wrong.",
    "The headline is against the faster of cuBLAS and quack: <!-- claim:m.pp.ratio -->0.87×<!-- /claim --> cuBLAS.",
    "```\nfaster in a code block\n```",
    "A bank conflict serializes the warp, so the access is slower. <!-- no-verdict: a mechanism, not a measurement -->",
])
def test_audit_passes_verdicts_with_their_numbers(sentence):
    assert _verdicts(f"# Page\n\n{sentence}\n", RATIO) == []


def test_a_stated_goal_is_said_met_or_missed_from_its_claims_span():
    goal = {"claim": "m.pp.ratio", "at_least": 0.95, "statement": "at least 0.95 of cuBLAS"}
    missed = "The goal, at least 0.95 of cuBLAS, is missed: <!-- claim:m.pp.ratio -->0.87×<!-- /claim --> cuBLAS.\n"
    assert _verdicts(missed, RATIO, [goal]) == []
    said_met = missed.replace("is missed", "is met")
    assert any("is missed" in m for m in _verdicts(said_met, RATIO, [goal]))
    assert any("must say so" in m for m in _verdicts("Nothing about it.\n", RATIO, [goal]))
    assert any("whether the goal is met" in m for m in _verdicts("Our goal is 0.95 of the copy ceiling.\n", RATIO))


def test_a_page_whose_goal_is_missed_is_not_verified():
    from kernelwiki.commands.refresh.status import goal_met, page_status

    claims = list(RATIO.values())
    assert goal_met({"claim": "m.pp.ratio", "at_least": 0.95}, claims) is False
    assert goal_met({"claim": "m.win", "at_least": 500}, claims) is True
    assert goal_met({"claim": "absent", "at_least": 1}, claims) is None
    spec = type("Spec", (), {"id": "p", "archs": []})()
    record = type("R", (), {"started": "2026-12-01T00:00:00Z", "data": {"environment": {}}})()
    claims = [{**c, "record": "r.json"} for c in claims]
    assert page_status([spec], {"p": [record]}, claims, [record], {}, "2026-12-01T00:00:00Z") == "verified"
    assert page_status([spec], {"p": [record]}, claims, [record], {}, "2026-12-01T00:00:00Z",
                       [{"claim": "m.pp.ratio", "at_least": 0.95, "statement": "0.95 of cuBLAS"}]) == "draft"
