"""The second configuration choice (NVIDIA's matmul heuristics mapped onto our configurations)."""

import pytest

pytest.importorskip("cutlass")
from artifacts.kernels.hopper_gemm import config, hopper_gemm, nvmmh  # noqa: E402


@pytest.mark.parametrize("given, expected", [
    ((1, 4096, 128, 128, 1, 4, 3), hopper_gemm.GemmConfig(128, 128, (1, 1), 3)),   # split-K: no cluster
    ((4096, 4096, 128, 128, 2, 1, 1), hopper_gemm.GemmConfig(128, 128, (2, 1), 1)),
    ((64, 4096, 128, 128, 2, 1, 1), hopper_gemm.GemmConfig(128, 128, (1, 1), 1)),   # one row tile: no 2x1
    ((3, 28672, 64, 120, 1, 4, 1), hopper_gemm.GemmConfig(64, 128, (1, 2), 1)),     # nearest width, 1x2
    ((8, 512, 64, 256, 1, 1, 40), hopper_gemm.GemmConfig(64, 256, (1, 1), config.MAX_SPLIT_K)),
])
def test_mapping_onto_our_configurations(given, expected):
    config = nvmmh.mapped(*given)
    assert config == expected
    hopper_gemm.HopperGemm.can_implement(hopper_gemm.cutlass.BFloat16, hopper_gemm.cutlass.BFloat16, given[0],
                                         given[1], 4096, config.tile_n, config.cluster_mn, tile_m=config.tile_m,
                                         split_k=config.split_k)


def test_refuses_a_dtype_it_is_not_asked_for():
    with pytest.raises(ValueError, match="dtype='e4m3'"):
        nvmmh.configs([(1, 8, 8)], "e4m3")


def test_the_child_answers_every_shape_despite_the_crash_at_exit():
    pytest.importorskip("nvMatmulHeuristics")
    shapes = [(1, 4096, 4096), (333, 6144, 4096), (8192, 8192, 8192)]
    answer = nvmmh.configs(shapes)
    assert answer is not None and len(answer) == 3 and all(isinstance(c, hopper_gemm.GemmConfig) for c in answer)
