"""The measured configuration choice (artifacts/kernels/hopper_gemm/autotune.py) on the CPU: what it
sweeps, how it keys a problem, and that a hostile or broken tuning file is ignored, never trusted.
The timing itself runs on the GPU (tests/test_hopper_gemm_gpu.py)."""

from __future__ import annotations

import json

import pytest

autotune = pytest.importorskip("artifacts.kernels.hopper_gemm.autotune")
from artifacts.kernels.hopper_gemm.config import GemmConfig  # noqa: E402


def test_the_sweep_is_the_cost_models_best_ranked_and_starts_with_choose_config():
    from artifacts.kernels.hopper_gemm import config

    for m, n, k in ((1, 4096, 4096), (160, 4096, 14336), (4096, 4096, 4096)):
        found = autotune.sweep(m, n, k)
        assert len(found) == min(autotune.TUNE_CANDIDATES, len(config.candidates(m, n, k, allow_swap=True)))
        assert found[0] == config.choose_config(m, n, k, allow_swap=True)
        assert set(found) <= set(config.candidates(m, n, k, allow_swap=True))
    assert any(c.swap_ab for c in autotune.sweep(1, 4096, 4096))                  # swap-AB is tuned too
    assert not any(c.swap_ab for c in autotune.sweep(1, 4096, 4096, allow_swap=False))
    assert not any(c.split_k > 1 for c in autotune.sweep(64, 4096, 4096, batch=8))   # batches fill the SMs


def test_a_bucket_rounds_m_up_to_16_then_to_a_power_of_two_and_keeps_the_rest_exact():
    key = autotune.bucket_key("NVIDIA H200", 132, "torch.bfloat16", "torch.bfloat16", "k", "k", 1, 100, 4096, 7168)
    assert key == "NVIDIA H200|132|torch.bfloat16|torch.bfloat16|kk|L1|M112|N4096|K7168"
    same = autotune.bucket_key("NVIDIA H200", 132, "torch.bfloat16", "torch.bfloat16", "k", "k", 1, 97, 4096, 7168)
    assert same == key
    assert "|M16|" in autotune.bucket_key("g", 1, "a", "d", "k", "k", 1, 1, 8, 8)
    assert "|M64|" in autotune.bucket_key("g", 1, "a", "d", "k", "k", 1, 64, 8, 8)
    assert "|M1024|" in autotune.bucket_key("g", 1, "a", "d", "k", "k", 1, 1017, 8, 8)
    assert "|M2048|" in autotune.bucket_key("g", 1, "a", "d", "k", "k", 1, 1025, 8, 8)


def test_the_cache_round_trips_and_keeps_other_entries(tmp_path):
    path = tmp_path / "t.json"
    autotune.write_cache(path, "a", GemmConfig(64, 256, (1, 1), 4))
    autotune.write_cache(path, "b", GemmConfig(128, 192, (2, 1), 1))
    autotune.write_cache(path, "c", GemmConfig(128, 80, (1, 2), 2, swap_ab=True))
    assert autotune.read_cache(path) == {"a": GemmConfig(64, 256, (1, 1), 4), "b": GemmConfig(128, 192, (2, 1), 1),
                                         "c": GemmConfig(128, 80, (1, 2), 2, swap_ab=True)}
    assert not list(tmp_path.glob("*.tmp"))   # written atomically: no leftovers


@pytest.mark.parametrize("entry", [
    {"tile_m": 96, "tile_n": 256, "cluster_mn": [1, 1], "split_k": 1},          # no such tile
    {"tile_m": 128, "tile_n": 256, "cluster_mn": [4, 1], "split_k": 1},         # no such cluster
    {"tile_m": 128, "tile_n": 88, "cluster_mn": [2, 1], "split_k": 4},          # widths are multiples of 16
    {"tile_m": 128, "tile_n": 80, "cluster_mn": [1, 2], "split_k": 2, "swap_ab": "yes"},   # a string is no bool
    {"tile_m": 128, "tile_n": 256, "cluster_mn": [1, 1], "split_k": 99},
    {"tile_m": True, "tile_n": 256, "cluster_mn": [1, 1], "split_k": 1},        # a bool is no tile
    {"tile_m": 128.0, "tile_n": 256, "cluster_mn": [1, 1], "split_k": 1},
    {"tile_m": 128, "tile_n": 256, "cluster_mn": "1x1", "split_k": 1},
    {"tile_m": 128, "tile_n": 256, "cluster_mn": [1, 1], "split_k": 1, "schedule": "x; rm -rf /"},
    "128x256", None, [],
])
def test_an_entry_the_kernel_does_not_implement_is_ignored_with_a_warning(tmp_path, entry):
    path = tmp_path / "t.json"
    good = {"tile_m": 64, "tile_n": 128, "cluster_mn": [1, 1], "split_k": 1}
    path.write_text(json.dumps({"version": 1, "entries": {"bad": entry, "good": good}}))
    with pytest.warns(UserWarning, match=r"entries\['bad'\]"):
        assert autotune.read_cache(path) == {"good": GemmConfig(64, 128, (1, 1), 1)}


@pytest.mark.parametrize("text", ["{not json", json.dumps([1, 2]), json.dumps({"version": 2, "entries": {}}),
                                  json.dumps({"version": 1, "entries": []}), "\udcff"])
def test_a_file_that_is_not_the_format_is_ignored_with_a_warning(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.warns(UserWarning, match=str(path)):
        assert autotune.read_cache(path) == {}


def test_a_missing_file_is_an_empty_cache_and_a_folder_in_its_place_a_warning(tmp_path):
    assert autotune.read_cache(tmp_path / "absent.json") == {}
    (tmp_path / "dir.json").mkdir()
    with pytest.warns(UserWarning, match="unreadable"):
        assert autotune.read_cache(tmp_path / "dir.json") == {}


def test_an_unwritable_cache_costs_a_warning_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.warns(UserWarning, match="cannot store the tuning"):
        autotune.write_cache(blocker / "t.json", "a", GemmConfig())


@pytest.mark.parametrize("settings", [{"tile_n": 128}, {"split_k": 2}, {"cluster_mn": (1, 1)},
                                      {"activation": "silu"}, {"schedule": "pingpong"}, {"skip_last_k_tile": True}])
def test_tune_refuses_forced_settings_and_fused_epilogues_before_reading_a_tensor(settings):
    from artifacts.kernels.hopper_gemm import hopper_gemm

    with pytest.raises(ValueError, match="tune=True measures the configuration itself"):
        hopper_gemm.compile_gemm(object(), object(), tune=True, **settings)


def test_a_tuned_entry_this_problem_cannot_run_is_a_warning_and_a_tuning_run(tmp_path, monkeypatch):
    """An entry of the kernel's own shape (entry_config takes it) that the problem cannot run - tile_m
    192 with tile_n 256, which can_implement refuses; swap_ab with an fp32 out; a split wider than K -
    made gemm(tune=True) raise instead of tuning the bucket again. torch is faked: this runs on a CPU."""
    import sys
    import types

    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        get_device_properties=lambda device: types.SimpleNamespace(name="NVIDIA H200", multi_processor_count=132),
        is_current_stream_capturing=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setenv("KERNELWIKI_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(autotune, "_TUNED", {})
    monkeypatch.setattr(autotune, "_kernel_hash", lambda: "h")
    tensor = types.SimpleNamespace(shape=(256, 4096), dim=lambda: 2, dtype="torch.bfloat16", device="cuda:0")
    key = autotune.bucket_key("NVIDIA H200", 132, "torch.bfloat16", "torch.bfloat16", "k", "k", 1, 256, 256, 4096) + "|h"
    planted = GemmConfig(192, 256, (1, 1), 1)
    autotune.write_cache(autotune.cache_path(), key, planted)
    timed = GemmConfig(128, 128, (1, 1), 1)
    with pytest.warns(UserWarning, match=r"cannot run this problem"):
        chosen = autotune.tuned_config(tensor, types.SimpleNamespace(shape=(256, 4096)), "torch.bfloat16", "k", "k",
                                       lambda: {timed: 1.0}, usable=lambda config: config != planted)
    assert chosen == timed and autotune.read_cache(autotune.cache_path())[key] == timed
    monkeypatch.setattr(autotune, "_TUNED", {})
    assert autotune.tuned_config(tensor, types.SimpleNamespace(shape=(256, 4096)), "torch.bfloat16", "k", "k",
                                 lambda: pytest.fail("tuned again"), usable=lambda config: True) == timed


def test_compile_gemm_checks_a_tuned_entry_against_the_problem_before_using_it():
    import inspect

    from artifacts.kernels.hopper_gemm import hopper_gemm

    source = inspect.getsource(hopper_gemm.compile_gemm)
    assert "usable=" in source.split("autotune.tuned_config(", 1)[1].split("\n    elif", 1)[0]
