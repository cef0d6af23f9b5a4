"""probe-hopper-gemm's held-out set on the CPU: shapes drawn by the seed outside the tuning set, the
oracle's sweep, and the summaries the record keeps (issue 27 item 1)."""

from __future__ import annotations

import pytest

from conftest import load_probe_script

pytest.importorskip("cutlass")   # held_out imports the kernel module's configuration types


@pytest.fixture(scope="module")
def held_out():
    return load_probe_script("probe-hopper-gemm", "held_out")


@pytest.fixture(scope="module")
def cases():
    from conftest import ROOT
    from kernelwiki.model import yamlio

    spec, _ = yamlio.load((ROOT / "probes/probe-hopper-gemm/probe.yaml").read_text())
    return spec["cases"]


def test_the_held_out_shapes_are_reproducible_and_never_the_tuning_set(held_out, cases):
    tuning = held_out.tuning_set(cases)
    assert len(tuning) == 54
    drawn = held_out.draw(1234, 24, cases)
    assert drawn == held_out.draw(1234, 24, cases) and drawn != held_out.draw(1235, 24, cases)
    assert len({(s["m"], s["n"], s["k"]) for s in drawn}) == 24
    assert not {(s["m"], s["n"], s["k"]) for s in drawn} & tuning
    assert all(max(s["m"] * s["k"], s["n"] * s["k"], s["m"] * s["n"]) <= held_out.MAX_ELEMENTS for s in drawn)


def test_the_case_is_declared_with_its_count_and_after_the_llm_shapes_it_summarizes(cases):
    ids = [c["id"] for c in cases]
    held = cases[ids.index("held-out-bf16")]["params"]
    assert held == {"set": "held-out", "count": 24, "dtype": "bf16"}
    last_llm = max(i for i, c in enumerate(cases) if c["params"].get("set") == "llm-shapes")
    assert ids.index("llm-shapes-summary") > last_llm


def test_summaries_are_geomean_and_worst_and_missing_when_a_shape_lacks_a_ratio(held_out):
    rows = [{"choose_config": 0.5, "oracle": 1.0, "nvmmh": None}, {"choose_config": 2.0, "oracle": 1.0, "nvmmh": 1.0}]
    out = held_out.summary(rows, ("choose_config", "oracle", "nvmmh"))
    assert out == {"choose_config_geomean_ratio": 1.0, "choose_config_worst_ratio": 0.5,
                   "oracle_geomean_ratio": 1.0, "oracle_worst_ratio": 1.0,
                   "nvmmh_geomean_ratio": None, "nvmmh_worst_ratio": None}
    row = {"m": 3, "n": 4096, "k": 14336, "model": "Llama-3-8B", "layer": "down_proj", "config": "64x256 1x1 s4",
           "choose_config": 0.8123, "oracle": 0.9, "oracle_config": "64x128 1x1 s8"}
    assert held_out.compact(row) == "3x4096x14336 Llama-3-8B/down_proj 64x256 1x1 s4 0.812 (oracle 64x128 1x1 s8 0.900)"


def test_the_llm_shapes_summary_refuses_a_partial_run_and_summarizes_a_full_one():
    from kernelwiki.harness.probe import Context

    probe = load_probe_script("probe-hopper-gemm", "hopper_gemm_probe")
    ctx = Context(seed=1, gpu_short="H200", gpu_name="NVIDIA H200", ceilings={})
    probe.LLM_ROWS[:] = [{"passed": True, "ours": 400.0, "best": 500.0, "choose_config": 0.8}]
    with pytest.raises(ValueError, match="needs the 54 llm-shapes cases"):
        probe.llm_shapes_summary(ctx)
    probe.LLM_ROWS[:] = [{"passed": True, "ours": 400.0, "best": 500.0, "choose_config": 0.8}] * 53 + [
        {"passed": True, "ours": 500.0, "best": 400.0, "choose_config": 1.25}]
    out = probe.llm_shapes_summary(ctx)
    assert out["correctness"]["passed"] and out["metrics"]["choose_config_worst_ratio"] == 0.8
    assert out["headline"]["baseline"] == probe.STRONGEST
    assert out["headline"]["ratio"] == pytest.approx(out["metrics"]["choose_config_geomean_ratio"], abs=1e-3)


def test_the_first_pass_keeps_the_fastest_configurations(held_out):
    times = {"64x64 1x1 s1": 0.9, "128x256 2x1 s1": 0.2, "128x128 1x1 s2": 0.5, "64x256 1x1 s1": 0.3}
    assert held_out.finalists(times, 2) == ["128x256 2x1 s1", "64x256 1x1 s1"]
    assert held_out.finalists(times) == ["128x256 2x1 s1", "64x256 1x1 s1", "128x128 1x1 s2"]
    assert held_out.finalists({}) == []


def test_a_label_says_when_the_configuration_is_swapped(held_out):
    from artifacts.kernels.hopper_gemm.config import GemmConfig

    assert held_out.label(GemmConfig(64, 16, (1, 1), 1, swap_ab=True)) == "64x16 1x1 s1 swap"
    assert held_out.label(GemmConfig(128, 256, (2, 1), 1)) == "128x256 2x1 s1"
