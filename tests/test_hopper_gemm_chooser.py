"""The configuration choice of our Hopper GEMM on the CPU (config.py, fit.py): the candidates it
considers, that the kernel implements every one of them, the cost model it ranks them by, the file
that model is read from (untrusted: validated, never trusted), the compact sweep table, and the fit."""

from __future__ import annotations

import json
import math

import pytest

from artifacts.kernels.hopper_gemm import config
from artifacts.kernels.hopper_gemm.config import GemmConfig

SHAPES = [(1, 4096, 4096), (13, 6144, 4096), (64, 4096, 14336), (96, 6144, 4096), (129, 3072, 8192),
          (160, 4096, 14336), (200, 2112, 7168), (257, 14336, 4096), (768, 6144, 4096), (1025, 4096, 4096),
          (4096, 4096, 4096), (8192, 8192, 8192), (3, 520, 200), (40, 264, 512)]


@pytest.mark.parametrize("m, n, k", SHAPES)
def test_every_candidate_is_one_the_kernel_implements(m, n, k):
    cutlass = pytest.importorskip("cutlass")
    from artifacts.kernels.hopper_gemm.gemm_sm90 import HopperGemm

    found = config.candidates(m, n, k, allow_swap=True)
    assert found and len(found) == len(set(found))
    for c in found:
        km, kn = (n, m) if c.swap_ab else (m, n)
        HopperGemm.can_implement(cutlass.BFloat16, cutlass.BFloat16, km, kn, k, c.tile_n, c.cluster_mn,
                                 tile_m=c.tile_m, split_k=c.split_k, d_major="m" if c.swap_ab else "n")


@pytest.mark.parametrize("m, n, k", SHAPES)
def test_the_candidates_size_swapped_tiles_to_the_rows_and_split_only_under_a_wave(m, n, k):
    k_tiles = math.ceil(k / 64)
    for c in config.candidates(m, n, k, allow_swap=True):
        km, kn = (n, m) if c.swap_ab else (m, n)
        tiles = math.ceil(km / c.tile_m) * math.ceil(kn / c.tile_n)
        if c.swap_ab:   # the tokens in one to four column tiles, each a multiple of 16 wide
            assert c.tile_n % 16 == 0 and c.tile_n >= min(256, math.ceil(m / 4)) and c.tile_n <= max(16, -(-m // 16) * 16)
        else:   # the power-of-two widths, or one that fills whole waves
            assert c.tile_n in config.TILE_NS or c.tile_n in config.wave_widths(math.ceil(m / c.tile_m), n, 132, 64, 256)
        if c.split_k > 1:
            assert tiles < 132 and 2 <= c.split_k <= min(config.MAX_SPLIT_K, k_tiles // 2)
            assert math.ceil(tiles / 132) * c.split_k <= 132   # the splits keep one wave
        if c.cluster_mn == (2, 1):
            assert math.ceil(km / c.tile_m) >= 2
        if c.cluster_mn == (1, 2):
            assert c.swap_ab and math.ceil(kn / c.tile_n) >= 2


def test_no_swap_without_leave_and_the_fused_epilogue_keeps_its_widths_and_k_whole():
    for m, n, k in SHAPES:
        assert not any(c.swap_ab for c in config.candidates(m, n, k))
        assert not config.choose_config(m, n, k).swap_ab
        fused = config.choose_config(m, n, k, allow_swap=True, fused=True)
        assert not fused.swap_ab and fused.split_k == 1 and fused.tile_n in config.TILE_NS
        assert config.choose_config(m, n, k, allow_split=False).split_k == 1


@pytest.mark.parametrize("m, n, k", SHAPES)
def test_choose_config_is_the_cost_models_least_and_ranked_starts_with_it(m, n, k):
    chosen = config.choose_config(m, n, k, allow_swap=True)
    times = {c: config.predicted_us(c, m, n, k) for c in config.candidates(m, n, k, allow_swap=True)}
    assert times[chosen] == min(times.values())
    assert config.ranked(m, n, k, count=4)[0] == chosen
    swapped = config.swapped_config(m, n, k)
    assert swapped.swap_ab and times[swapped] == min(t for c, t in times.items() if c.swap_ab)


def test_the_epilogue_slice_is_the_skeletons():
    pytest.importorskip("cutlass")
    from artifacts.kernels.hopper_gemm import gemm_base

    assert config.EPI_TILE_N == gemm_base.EPI_TILE_N
    assert [config.epilogue_slice_n(w) for w in (16, 32, 48, 80, 96, 208, 256)] == [16, 32, 16, 16, 32, 16, 32]


def test_never_a_split_beyond_the_k_tiles():
    assert config.choose_config(1, 64, 64).split_k == 1          # one K tile
    assert all(c.split_k == 1 for c in config.candidates(1, 4096, 128, allow_swap=True))   # two K tiles


def test_the_predicted_time_grows_with_the_work_and_splits_pay_only_under_a_wave():
    base = GemmConfig(128, 256, (2, 1), 1)
    assert config.predicted_us(base, 4096, 4096, 8192) > config.predicted_us(base, 4096, 4096, 4096)
    assert config.predicted_us(base, 8192, 8192, 4096) > 3 * config.predicted_us(base, 4096, 4096, 4096)
    # 160 x 4096 x 14336: 64 swapped tiles of 128 x 80 fill half the SMs; split in two, a wave
    split = config.predicted_us(GemmConfig(128, 80, (1, 2), 2, swap_ab=True), 160, 4096, 14336)
    whole = config.predicted_us(GemmConfig(128, 80, (1, 2), 1, swap_ab=True), 160, 4096, 14336)
    assert split < whole


@pytest.mark.parametrize("content, message", [
    ("{not json", "unreadable"),
    (json.dumps({"terms": {}}), "must hold exactly"),
    (json.dumps({"terms": {**config.COST, "extra": 1.0}}), "must hold exactly"),
    (json.dumps({"terms": {**config.COST, "mma_us": -1.0}}), "positive finite"),
    (json.dumps({"terms": {**config.COST, "mma_us": "0.1"}}), "positive finite"),
    (json.dumps({"terms": {**config.COST, "mma_us": True}}), "positive finite"),
    (json.dumps([1, 2]), "must hold exactly"),
])
def test_a_cost_model_file_that_is_not_the_format_is_refused_with_its_path(tmp_path, content, message):
    path = tmp_path / "cost.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        config._load_cost_model(path)
    assert str(path) in str(err.value)


def test_the_committed_cost_model_and_table_read_back():
    assert config._load_cost_model(config.COST_MODEL_FILE) == config.COST
    from artifacts.kernels.hopper_gemm import fit

    table = config.COST_MODEL_FILE.parent / "sweep_h200.csv"
    shapes = fit.read_table(table)
    assert shapes and all(len(s["times"]) >= 2 and s["cublas_us"] > 0 for s in shapes)
    assert table.stat().st_size < 60_000   # compact: a few tens of KB


def test_the_table_round_trips_and_the_fit_recovers_a_planted_model(tmp_path):
    pytest.importorskip("numpy")
    from artifacts.kernels.hopper_gemm import fit

    planted = {**config.COST, "mma_us": config.COST["mma_us"] * 1.3, "load_us": config.COST["load_us"] * 0.7}
    shapes = []
    for i, (m, n, k) in enumerate(SHAPES):
        times = {c: config.predicted_us(c, m, n, k, cost=planted) for c in config.candidates(m, n, k, allow_swap=True)}
        shapes.append({"m": m, "n": n, "k": k, "family": f"f{i % 4}", "cublas_us": 10.0, "times": times})
    path = tmp_path / "t.csv"
    fit.write_table(shapes, path, top=len(max(shapes, key=lambda s: len(s["times"]))["times"]))
    back = fit.read_table(path)
    assert [(s["m"], s["n"], s["k"], s["family"]) for s in back] == sorted(
        [(s["m"], s["n"], s["k"], s["family"]) for s in shapes], key=lambda t: (t[3], t[0], t[1], t[2]))
    assert all(set(b["times"]) == set(s["times"]) for b in back for s in shapes if (b["m"], b["n"], b["k"]) == (s["m"], s["n"], s["k"]))
    fitted = fit.fit(back)
    assert fit.score(back, fitted)["pick_over_oracle"] <= 1.01   # picks (nearly) the planted model's best
