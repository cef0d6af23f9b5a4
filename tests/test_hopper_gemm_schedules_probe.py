"""probe-hopper-gemm's schedules cases on the CPU: the shapes the task names, one run timing both
schedules at the same wgmma per warpgroup with the same cluster, and every setting they force one
that can_implement accepts (a refused one would fail the case on the GPU, costing the run)."""

from __future__ import annotations

import pytest

from conftest import ROOT, load_probe_script

cutlass = pytest.importorskip("cutlass")


@pytest.fixture(scope="module")
def probe():
    return load_probe_script("probe-hopper-gemm", "hopper_gemm_probe")


@pytest.fixture(scope="module")
def schedule_cases():
    from kernelwiki.model import yamlio

    spec, _ = yamlio.load((ROOT / "probes/probe-hopper-gemm/probe.yaml").read_text())
    return [c for c in spec["cases"] if c["params"].get("set") == "schedules"]


def test_the_schedules_cases_are_the_small_k_shapes_and_4096_cubed(schedule_cases):
    shapes = {c["params"]["shape"] for c in schedule_cases}
    assert shapes == {"4096x4096x512", "8192x8192x1024", "4096x7168x2048", "4096x4096x4096"}
    assert all(c["pages"] == ["technique-pingpong-consumers"] and c["metric"] == "tflops" for c in schedule_cases)


def test_both_schedules_share_the_wgmma_per_warpgroup_and_the_cluster(probe, schedule_cases):
    from artifacts.kernels.hopper_gemm import hopper_gemm

    bf16 = cutlass.BFloat16
    for case in schedule_cases:
        settings = probe.schedule_settings(case["params"])
        assert set(settings) == {"ours-pingpong", "ours-cooperative", "ours-cooperative-64"}
        pingpong, cooperative = settings["ours-pingpong"], settings["ours-cooperative"]
        assert pingpong["schedule"] == "pingpong" and "schedule" not in cooperative
        assert pingpong["tile_n"] == cooperative["tile_n"] and pingpong["cluster_mn"] == cooperative["cluster_mn"]
        # 64 rows per warpgroup in both: ping-pong's one warpgroup per tile, cooperative's two per 128 rows
        rows_per_warpgroup = {name: s["tile_m"] // (1 if s.get("schedule") == "pingpong" else s["tile_m"] // 64)
                              for name, s in settings.items()}
        assert set(rows_per_warpgroup.values()) == {64}
        m, n, k = (int(x) for x in case["params"]["shape"].split("x"))
        for setting in settings.values():
            hopper_gemm.HopperGemm.can_implement(bf16, bf16, m, n, k, setting["tile_n"], setting["cluster_mn"],
                                                 tile_m=setting["tile_m"], split_k=setting["split_k"],
                                                 schedule=setting.get("schedule", "cooperative"))
        # the cooperative candidate is what choose_config picks at these shapes (the one users get)
        chosen = hopper_gemm.choose_config(m, n, k)
        assert (chosen.tile_m, chosen.tile_n, chosen.cluster_mn, chosen.split_k) == \
            (cooperative["tile_m"], cooperative["tile_n"], cooperative["cluster_mn"], 1)
