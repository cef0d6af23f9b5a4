"""One fence rule (CommonMark's) for every reader: spans, audit, refresh's generated blocks and the site.

Each case below was misread by at least one of the parsers it replaced: the toggling rule closed a
```` fence at its first ``` line and a ``` block at a ~~~ line; the three-space rule missed a
fence indented in a list item, so refresh rewrote the claim spans in it."""

from __future__ import annotations

import pytest

from test_refresh import setup

from kernelwiki.commands.audit import Audit, audit_body
from kernelwiki.commands.refresh.blocks import render_blocks
from kernelwiki.docsite.links import Linker
from kernelwiki.docsite.render import claim_spans
from kernelwiki.model.fences import code_mask, map_prose, prose_lines
from kernelwiki.model.spans import find_spans, render_spans

SPAN = "<!-- claim:peak -->example<!-- /claim -->"
NESTED = f"````markdown\n```\n{SPAN}\n```\n````\n"
TILDE_IN_BACKTICKS = f"```\n~~~\n{SPAN}\n```\n"
IN_LIST_ITEM = f"- a step:\n\n    ```\n    {SPAN}\n    ```\n"
UNCLOSED = f"prose\n\n```\n{SPAN}\n"
CASES = {"nested": NESTED, "tilde-in-backticks": TILDE_IN_BACKTICKS, "in-list-item": IN_LIST_ITEM,
         "unclosed": UNCLOSED}


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_the_span_is_code_in_each_case(text):
    lines = text.splitlines()
    span_line = next(i for i, line in enumerate(lines) if SPAN in line)
    assert code_mask(lines)[span_line]
    assert find_spans(text) == []
    claims = [{"id": "peak", "value": 1, "unit": "W"}]
    assert render_spans(text, claims) == text


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_prose_after_a_closed_fence_is_prose(text):
    if text is UNCLOSED:
        text = text + "more\n"
        assert [line for _, line in prose_lines(text)] == ["prose\n", "\n"]   # runs to the end
        return
    text = text + f"\nafter {SPAN}\n"
    assert len(find_spans(text)) == 1 and find_spans(text)[0].line == len(text.splitlines()) - 1


def test_closing_fence_needs_the_same_character_and_length():
    lines = ["````", "```", "~~~~", "`````", "after"]
    assert code_mask(lines) == [True, True, True, True, False]
    assert code_mask(["~~~", "```", "~~~", "x"]) == [True, True, True, False]
    assert code_mask(["```python", "```python", "```", "x"]) == [True, True, True, False]  # info closes nothing


def test_indentation_rules():
    assert code_mask(["    ```", "x"]) == [False, False]       # four spaces: an indented block, not a fence
    assert code_mask(["   ```", "x", "   ```"]) == [True, True, True]
    assert code_mask(["- ```", "  x", "  ```", "y"]) == [True, True, True, False]
    assert code_mask(["1. item", "", "   ~~~", "   x", "   ~~~", "back"]) == [False, False, True, True, True, False]
    assert code_mask(["``` a ` b", "x"]) == [False, False]     # a backtick in the info: inline code


def test_map_prose_changes_only_prose():
    text = "a\n```\na\n```\na\n"
    assert map_prose(text, str.upper) == "A\n```\na\n```\nA\n"


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_audit_ignores_numbers_in_every_kind_of_fence(text):
    result = Audit()
    audit_body("p.md", text.replace(SPAN, "reaches 90% of peak"), 1, result)
    assert result.problems == [] and result.total == 0


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_generated_block_markers_in_code_are_examples(text):
    body = text.replace(SPAN, "<!-- kernelwiki:begin claims -->\nexample\n<!-- kernelwiki:end claims -->")
    assert render_blocks(body, {"claims": []}, "\n") == body


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_the_site_links_nothing_in_code(text):
    assert claim_spans(text, {"peak"}, "a.md") == text
    body = text.replace(SPAN, "see hw-wgmma")
    assert Linker({"hw-wgmma": "hardware/wgmma.md"}, {}).link(body, "a.md", None) == body


def test_refresh_leaves_spans_in_a_list_item_fence_alone(mini):
    """Issue 24: refresh rewrote the claim spans of a fenced block indented in a list item."""
    body = f"# Example\n\n1. Write the span like this:\n\n    ```markdown\n    {SPAN}\n    ```\n\n" \
           f"Prose <!-- claim:peak -->0 TFLOP/s<!-- /claim -->.\n"
    page = setup(mini, body=body)
    assert mini.run("refresh")[0] == 0
    text = page.read_text(encoding="utf-8")
    assert f"    {SPAN}\n" in text
    assert "Prose <!-- claim:peak -->100 TFLOP/s<!-- /claim -->." in text
    assert mini.run("refresh", "--check")[0] == 0
