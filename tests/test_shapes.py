"""The held-out GEMM shapes: reproducible from the seed, never in the tuning set, from real layers."""

import pytest

from kernelwiki.harness import shapes


def test_same_seed_same_shapes_other_seed_other_shapes():
    assert shapes.held_out(7, 24) == shapes.held_out(7, 24)
    assert shapes.held_out(7, 24) != shapes.held_out(8, 24)


def test_tuning_shapes_are_never_drawn():
    tuning = {(s["m"], s["n"], s["k"]) for s in shapes.held_out(1, 200)}
    drawn = {(s["m"], s["n"], s["k"]) for seed in range(20) for s in shapes.held_out(seed, 24, exclude=tuning)}
    assert not drawn & tuning


def test_shapes_come_from_the_layer_table_and_cover_decode_and_ragged_m():
    layer_shapes = {(layer.n, layer.k) for layer in shapes.LAYERS}
    drawn = shapes.held_out(3, 300)
    assert all((s["n"], s["k"]) in layer_shapes and s["m"] in shapes.M_VALUES for s in drawn)
    assert {1, 3, 24}.issubset({s["m"] for s in drawn})


def test_bounds_and_errors_name_the_value():
    small = shapes.held_out(0, 10, max_elements=4096 * 4096)
    assert all(max(s["m"] * s["k"], s["n"] * s["k"], s["m"] * s["n"]) <= 4096 * 4096 for s in small)
    with pytest.raises(ValueError, match="count=-1"):
        shapes.held_out(0, -1)
    with pytest.raises(ValueError, match="count=100000"):
        shapes.held_out(0, 100000)
