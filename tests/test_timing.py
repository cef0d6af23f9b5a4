"""Timing rounds: interleaving, and clocks read per candidate (not one reading copied onto all)."""

from __future__ import annotations

import itertools

import pytest

from kernelwiki.harness.timing import iteration_order, timed_rounds


def test_each_candidate_gets_the_clock_of_its_own_span():
    calls: list[str] = []
    clock = itertools.count(1000, -10)          # the clock falls with every reading

    def time_one(name: str) -> float:
        calls.append(name)
        return {"a": 1.0, "b": 2.0, "c": 3.0}[name] + len(calls) * 1e-3

    result = timed_rounds(["a", "b", "c"], time_one, iters=4, order="interleaved", read_clock=lambda: next(clock))
    assert calls == ["a", "b", "c"] * 4
    assert [result[n]["sm_clock_mhz_before"] for n in "abc"] == [1000, 990, 980]
    assert [result[n]["sm_clock_mhz_after"] for n in "abc"] == [970, 960, 950]
    assert result["b"]["median_ms"] == pytest.approx(2.0065)


def test_shuffled_rounds_read_each_clock_around_that_candidate():
    seen: list[tuple[str, str]] = []
    readings = itertools.count()

    def time_one(name: str) -> float:
        seen.append(("run", name))
        return 1.0

    def read_clock() -> float:
        seen.append(("clock", ""))
        return float(next(readings))

    result = timed_rounds(["a", "b", "c", "d"], time_one, iters=3, order="shuffled", read_clock=read_clock)
    first = iteration_order(["a", "b", "c", "d"], 0, "shuffled")
    assert [e for e in seen[:8]] == [x for name in first for x in (("clock", ""), ("run", name))]
    assert len({result[n]["sm_clock_mhz_before"] for n in "abcd"}) == 4
    assert len({result[n]["sm_clock_mhz_after"] for n in "abcd"}) == 4


def test_unknown_order_is_refused():
    with pytest.raises(ValueError):
        timed_rounds(["a"], lambda n: 1.0, iters=1, order="random", read_clock=lambda: None)


def test_fraction_of_ceiling_needs_the_ceilings_provenance():
    """Only ceilings named by the run id of this invocation's calibration count; a path alone (what a
    committed record of another run gave) or none does not."""
    from kernelwiki.harness.probe import Context

    named = Context(seed=0, gpu_short="H200", gpu_name="NVIDIA H200", protocol={"method": "bench"},
                    ceilings={"bf16": 800.0, "run_id": "20261201T144953Z-h200-run", "record": None, "protocol": "bench"})
    assert named.headline("tflops", 400.0, "TFLOP/s", ceiling_key="bf16")["fraction_of_ceiling"] == 0.5
    # a value timed another way (sustained blocks, events around one launch) is no fraction of it
    for method in (None, "sustained"):
        named.protocol = {"method": method} if method else {}
        assert "fraction_of_ceiling" not in named.headline("tflops", 400.0, "TFLOP/s", ceiling_key="bf16")
    for ceilings in ({"bf16": 800.0}, {"bf16": 800.0, "record": "artifacts/evidence/probe-calibration/r.json"}):
        anonymous = Context(seed=0, gpu_short="H200", gpu_name="NVIDIA H200", ceilings=ceilings)
        assert "fraction_of_ceiling" not in anonymous.headline("tflops", 400.0, "TFLOP/s", ceiling_key="bf16")
