"""Our Hopper GEMMs: input checks name the value, and both kernels compile for sm_90a (no GPU)."""

from __future__ import annotations

import re

import pytest

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.hopper_gemm import hopper_gemm, sm90_common
from artifacts.kernels.hopper_gemm.fused_epilogue import EpilogueSpec
from artifacts.kernels.hopper_gemm.variants import naive

BF16 = cutlass.BFloat16


@pytest.mark.parametrize("args, message", [
    ((cutlass.Float32, BF16, 256, 256, 256), "A/B dtype"),
    ((BF16, cutlass.Int8, 256, 256, 256), "D dtype"),
    ((BF16, BF16, 0, 256, 256), "must be positive; got M=0"),
    ((BF16, BF16, 256, 256, 100), "K=100: the contiguous dimension of A must be a multiple of 16 bytes"),
    ((cutlass.Float8E4M3FN, BF16, 256, 256, 72), r"K=72: .* \(16 elements of Float8E4M3FN\)"),
    ((BF16, BF16, 256, 260, 256), "N=260: rows of D must be a multiple of 16 bytes"),
])
def test_hopper_gemm_can_implement(args, message):
    with pytest.raises(ValueError, match=message):
        hopper_gemm.HopperGemm.can_implement(*args)


def test_mn_major_only_for_16_bit_types():
    hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, a_major="mn", b_major="mn")
    with pytest.raises(ValueError, match="A is MN-major but TFloat32 is 32-bit"):
        hopper_gemm.HopperGemm.can_implement(cutlass.TFloat32, cutlass.Float32, 256, 256, 256, a_major="mn")
    with pytest.raises(ValueError, match="B is MN-major but Float8E4M3FN is 8-bit"):
        hopper_gemm.HopperGemm.can_implement(cutlass.Float8E4M3FN, BF16, 256, 256, 256, b_major="mn")
    with pytest.raises(ValueError, match="M=260: the contiguous dimension of A"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 260, 256, 256, a_major="mn")


def test_partial_tiles_are_accepted():
    hopper_gemm.HopperGemm.can_implement(BF16, BF16, 4000, 2104, 7000)


def test_hopper_gemm_rejects_unsupported_tile_and_cluster():
    with pytest.raises(ValueError, match="tile_n=88 unsupported"):       # widths are multiples of 16
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_n=88)
    with pytest.raises(ValueError, match="tile_n=272 unsupported"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_n=272)
    with pytest.raises(ValueError, match="tile_n=80 unsupported with a fused epilogue"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_n=80, epilogue=EpilogueSpec(True))
    with pytest.raises(ValueError, match="tile_n=96 unsupported with ping-pong"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_n=96, tile_m=64, schedule="pingpong")
    with pytest.raises(ValueError, match="tile_m=256 unsupported"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_m=256)
    with pytest.raises(ValueError, match="tile_m=192 with tile_n=256, .* up to tile_n=192"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_m=192, tile_n=256)
    with pytest.raises(ValueError, match="tile_m=192 with tile_n=128, .* epilogue 'bias' .* the plain epilogue only"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_m=192, tile_n=128,
                                             epilogue=EpilogueSpec(True))
    with pytest.raises(ValueError, match="split_k=17 unsupported"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, split_k=17)
    with pytest.raises(ValueError, match=r"cluster_mn=\(2, 2\) unsupported"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, cluster_mn=(2, 2))
    for tile_n in (80, 112, 208):   # what the swapped problem sizes to its rows, split and clustered alike
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 4096, 160, 4096, tile_n=tile_n, cluster_mn=(1, 2), split_k=2,
                                             d_major="m")
    hopper_gemm.HopperGemm.can_implement(BF16, BF16, 768, 6144, 4096, tile_m=192, tile_n=192, split_k=2)


def test_m1_keeps_two_dimensional_tma():
    """A static M = 1 used to be folded out of A's layout, giving a 1-D TMA for a 2-D box (the M = 1
    crash); with dynamic shapes every operand's TMA keeps all three modes (M or N, K, L)."""
    from kernelwiki.harness import compile as compile_mod

    ptx = compile_mod.from_cute(hopper_gemm.compile_for("sm_90a", m=1, tile_m=64, cluster_mn=(1, 1)), "sm_90a").ptx
    ranks = set(re.findall(r"cp\.async\.bulk\.tensor\.(\d)d", ptx))
    assert ranks == {"3"}


def test_stage_count_fills_shared_memory():
    for ab in (BF16, cutlass.Float8E4M3FN):
        op = hopper_gemm.HopperGemm(ab, tile_n=256)
        assert op.tile_mnk[2] * ab.width == 1024  # 128 bytes of K per stage row
        assert op.stages >= 4 and op.stages * (128 + 256) * 128 <= sm90_common.SMEM_BYTES


def test_naive_can_implement():
    with pytest.raises(ValueError, match="M=96 is not a multiple of its tile 64"):
        naive.NaiveWgmmaGemm.can_implement(BF16, BF16, 96, 128, 64)


@pytest.mark.parametrize("compile_for, kwargs, sass", [
    (hopper_gemm.compile_for, {}, "HGMMA"),
    (hopper_gemm.compile_for, {"ab_dtype": cutlass.Float8E4M3FN}, "QGMMA"),
    (hopper_gemm.compile_for, {"m": 4000, "n": 2104, "k": 7000}, "HGMMA"),
    (hopper_gemm.compile_for, {"a_major": "mn", "b_major": "mn"}, "HGMMA"),
    (hopper_gemm.compile_for, {"ab_dtype": cutlass.TFloat32, "d_dtype": cutlass.Float32}, "HGMMA.64x256x8.F32.TF32"),
    (hopper_gemm.compile_for, {"m": 1, "tile_m": 64, "tile_n": 192, "cluster_mn": (1, 1),
                               "d_dtype": cutlass.Float32}, "HGMMA.64x192x16"),
    (hopper_gemm.compile_for, {"tile_n": 256, "cluster_mn": (1, 1), "skip_last_k_tile": True}, "HGMMA"),
    (hopper_gemm.compile_for, {"tile_n": 128, "cluster_mn": (1, 1), "d_dtype": cutlass.Float32,
                               "skip_last_k_tile": True}, "HGMMA"),
    (naive.compile_for, {}, "HGMMA"),
], ids=["persistent-bf16", "persistent-fp8", "persistent-partial-tiles", "persistent-mn-major", "persistent-tf32",
        "persistent-decode-split-k", "control-one-tile", "control-split-k", "naive"])
def test_compiles_to_tensor_core_sass_without_spills(compile_for, kwargs, sass):
    from kernelwiki.harness import compile as compile_mod

    emitted = compile_mod.from_cute(compile_for("sm_90a", **kwargs), "sm_90a")
    assert "wgmma.mma_async.sync.aligned" in emitted.ptx
    if emitted.sass is not None:
        assert sass in emitted.sass and not re.search(r"\bSTL\b", emitted.sass)  # no register spills


def test_host_checks_name_the_value():
    """Host-side checks on CPU tensors (torch only, no GPU): views the kernel would misread are refused."""
    torch = pytest.importorskip("torch")

    x = torch.empty(32, 64, dtype=torch.bfloat16)
    view, major = hopper_gemm._as_mkl("a", x[:1], "M")           # one row: K-major, canonical strides
    assert major == "k" and view.shape == (1, 64, 1) and view.stride()[1] == 1
    sm90_common.check_alignment("a", x, view, 1)
    with pytest.raises(ValueError, match="stride 0 in mode 0"):
        broadcast, _ = hopper_gemm._as_mkl("a", x[:1].expand(32, 64), "M")
        sm90_common.check_alignment("a", x, broadcast, 1)
    with pytest.raises(ValueError, match="neither M nor K is contiguous"):
        hopper_gemm._as_mkl("a", x[:, ::2], "M")
    assert hopper_gemm._overlap(x, x[3:5]) and not hopper_gemm._overlap(x[:16], x[16:])


@pytest.mark.parametrize("m, n, k, tile_m, tile_n, k_tile", [(2048, 1024, 1024, 128, 256, 64),
                                                              (128, 1024, 8192, 128, 128, 64)],
                         ids=["one-tile-last-k", "split-k-last-range"])
def test_each_control_misses_by_a_few_times_the_gate(m, n, k, tile_m, tile_n, k_tile):
    """The controls' bug (output tile (0, 0) without one K tile) in NumPy, at a smaller scale with the
    same fractions (one tile of (m/tile_m)(n/tile_n), one K tile of k/k_tile), against a gate of
    DERIVED_FACTOR x the bf16 output rounding (what cuBLAS's error is): between 1 and 10 times it."""
    import numpy as np

    from kernelwiki.harness import gates

    tiles = (m // tile_m) * (n // tile_n)
    k_tiles = k // k_tile
    rng = np.random.default_rng(0)
    # one output tile's worth of rows and columns per tile is enough: the error is in one tile of `tiles`
    x, w = rng.standard_normal((64, 16 * k_tiles)), rng.standard_normal((64 * tiles, 16 * k_tiles))
    ref = x @ w.T
    bug = ref.copy()
    bug[:, :64] -= x[:, -16:] @ w[:64, -16:].T
    ratio = gates.relative_error(bug, ref) / (gates.DERIVED_FACTOR * 1.6e-3)   # cuBLAS bf16: ~1.6e-3
    assert 1 < ratio < gates.CONTROL_BLUNT_FACTOR
