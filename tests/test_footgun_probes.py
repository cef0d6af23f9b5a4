"""The footgun probes show the wrong and the right usage (issue 23): their pure-Python verdicts."""

from __future__ import annotations

import pytest

from conftest import load_probe_script


def test_nested_layout_facts_come_from_the_comparisons_not_constants():
    pytest.importorskip("cutlass")
    probe = load_probe_script("probe-footgun-nested-layout", "nested_layout")
    same = {"nested": [0, 1, 2], "flat": [0, 1, 2], "swapped": [0, 2, 1]}
    printed = {"nested": "((2),1)", "flat": "(2)", "swapped": "((2),1)'"}
    coalesced = {"nested": "3:1", "flat": "3:1", "swapped": "(3):(2)"}
    assert set(probe.facts(printed, same, coalesced)) == {"coalesced:3:1", "printed-text-differs",
                                                          "same-offsets-every-coordinate", "coalesced-equal",
                                                          "swapped-view-told-apart"}
    differ = dict(same, flat=[0, 2, 1])
    assert "same-offsets-every-coordinate" not in probe.facts(printed, differ, coalesced)
    blind = dict(same, swapped=[0, 1, 2])
    assert "swapped-view-told-apart" not in probe.facts(printed, same | blind, dict(coalesced, swapped="3:1"))


def test_blackwell_counts_reads_the_release_from_the_ptx_not_a_constant():
    pytest.importorskip("cutlass")
    probe = load_probe_script("probe-footgun-blackwell-counts", "blackwell_counts")
    init = "mbarrier.init.shared.b64 \t[%r1], %r32;\nmbarrier.init.shared.b64 \t[%r54], %r38;\n"
    every_thread = init + "mbarrier.arrive.shared.b64 %rd46, [%r54], %r186;\n"
    elected = init + "@%p40 mbarrier.arrive.shared.b64 %rd46, [%r54], %r186;\n"
    other_barrier = init + "mbarrier.arrive.shared.b64 %rd46, [%r1], %r186;\n"
    assert probe.accumulator_release(every_thread) == "unpredicated"
    assert probe.accumulator_release(elected) == "predicated"
    assert probe.accumulator_release(other_barrier) == "none"
