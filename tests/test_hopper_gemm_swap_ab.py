"""Swap-AB in our Hopper GEMM without a GPU: the M-major D store (what can_implement refuses, that it
compiles for sm_90a with the transposed stmatrix while the default keeps the plain one), the
narrow tile widths, the operand views compile_gemm hands the kernel when it swaps, what swap_ab
refuses, and choose_config's swap rule (off by default)."""

from __future__ import annotations

import re

import pytest

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.hopper_gemm import config, hopper_gemm  # noqa: E402
from artifacts.kernels.hopper_gemm.fused_epilogue import EpilogueSpec  # noqa: E402
from kernelwiki.harness import compile as compile_mod  # noqa: E402

BF16, FP16, FP32 = cutlass.BFloat16, cutlass.Float16, cutlass.Float32
STMATRIX_TRANSPOSED = re.compile(r"\bSTSM\.16\.MT88\.4\b")
STMATRIX_PLAIN = re.compile(r"\bSTSM\.16\.M88\.4\b")


@pytest.mark.parametrize("kwargs, message", [
    (dict(d_dtype=FP32), r"D dtype Float32 with d_major='m' unsupported.*use one of"),
    (dict(epilogue=EpilogueSpec(bias=True)), r"d_major='m' with a fused epilogue \(bias\) unsupported"),
    (dict(schedule="pingpong", tile_m=64), r"d_major='m' with schedule='pingpong' unsupported"),
    (dict(m=260), r"M=260: columns of D must be a multiple of 16 bytes for TMA \(M a multiple of 8"),
])
def test_can_implement_refuses_what_the_m_major_store_does_not_support(kwargs, message):
    args = {"ab_dtype": BF16, "d_dtype": BF16, "m": 256, "n": 256, "k": 256, "d_major": "m", **kwargs}
    with pytest.raises(ValueError, match=message):
        hopper_gemm.HopperGemm.can_implement(**args)


def test_can_implement_takes_an_m_major_d_at_any_n_and_narrow_tiles():
    # the kernel's N is the user's M under swap-AB: 1, 13, 100 rows need no 16-byte multiple
    for n in (1, 13, 100):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 6144, n, 4096, tile_n=16, cluster_mn=(1, 1), tile_m=64,
                                             d_major="m")
    with pytest.raises(ValueError, match=r"N=13: rows of D"):   # N-major D still needs it
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 6144, 13, 4096, tile_n=16, d_major="n")
    with pytest.raises(ValueError, match=r"d_major='k' unsupported"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, d_major="k")
    with pytest.raises(ValueError, match=r"tile_n=32 unsupported with ping-pong"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_n=32, tile_m=64, schedule="pingpong")
    with pytest.raises(ValueError, match=r"d_major='m' with D dtype Float32 unsupported"):
        hopper_gemm.HopperGemm(BF16, FP32, d_major="m")


def test_narrow_tiles_slice_the_epilogue_at_their_width():
    assert hopper_gemm.HopperGemm(BF16, BF16, tile_n=16, cluster_mn=(1, 1), tile_m=64, d_major="m").epi_tile == (64, 16)
    assert hopper_gemm.HopperGemm(BF16, BF16, tile_n=32, cluster_mn=(1, 1)).epi_tile == (128, 32)
    assert hopper_gemm.HopperGemm(BF16, BF16, tile_n=256).epi_tile == (128, 32)   # the default: unchanged
    assert hopper_gemm.HopperGemm().d_layout.is_n_major_c()


def _sass(**kwargs) -> str:
    sass = compile_mod.from_cute(hopper_gemm.compile_for("sm_90a", **kwargs), "sm_90a").sass
    if sass is None:
        pytest.skip("no nvdisasm")
    return sass


@pytest.mark.parametrize("kwargs", [
    dict(tile_m=64, tile_n=16, cluster_mn=(1, 1)),
    dict(tile_m=64, tile_n=32, cluster_mn=(1, 1), ab_dtype=FP16, d_dtype=FP16),
    dict(tile_m=128, tile_n=64, cluster_mn=(2, 1), b_major="mn"),
    dict(tile_m=128, tile_n=16, cluster_mn=(1, 1), ab_dtype=cutlass.Float8E4M3FN),
    dict(tile_m=128, tile_n=256, cluster_mn=(1, 2)),
    dict(tile_m=128, tile_n=80, cluster_mn=(1, 2), split_k=2),      # sized to 160 token rows, split, clustered
    dict(tile_m=128, tile_n=208, cluster_mn=(2, 1)),                # 200 token rows in one tile: 16-wide slices
], ids=["64x16", "64x32-fp16", "128x64-2x1-b-mn", "128x16-fp8", "128x256-1x2", "128x80-1x2-split", "128x208-2x1"])
def test_m_major_store_compiles_with_the_transposed_stmatrix(kwargs):
    sass = _sass(d_major="m", **kwargs)
    assert STMATRIX_TRANSPOSED.search(sass) and not STMATRIX_PLAIN.search(sass)
    assert "UTMASTG" in sass and not re.search(r"\b(STL|LDL)\b", sass)
    assert re.search(rf"GMMA\.64x{kwargs['tile_n']}x", sass)


def test_default_store_keeps_the_plain_stmatrix_and_narrow_tiles_compile_n_major():
    for kwargs in (dict(tile_n=128), dict(tile_m=64, tile_n=16, cluster_mn=(1, 1))):
        sass = _sass(**kwargs)
        assert STMATRIX_PLAIN.search(sass) and not STMATRIX_TRANSPOSED.search(sass)


def _mkl(t, leading: int = -1):
    return hopper_gemm.batch_last(hopper_gemm.canonical(t, leading))


@pytest.mark.parametrize("lead", [(), (3,)], ids=["2d", "batched"])
@pytest.mark.parametrize("m", [1, 13])
def test_swapped_operands_are_b_a_and_out_transposed_m_major(lead, m):
    torch = pytest.importorskip("torch")   # not on every CPU machine: then the H200 run checks it
    n, k = 264, 72
    a, b = torch.randn(*lead, m, k), torch.randn(*lead, n, k)
    out = torch.arange(float(torch.Size((*lead, m, n)).numel())).reshape(*lead, m, n)
    (ka, ka_major), (kb, kb_major), vd, d_major = hopper_gemm.kernel_operands(
        (_mkl(a), "k"), (_mkl(b), "mn"), out, swap=True)
    assert (ka.shape, ka_major, kb.shape, kb_major, d_major) == (_mkl(b).shape, "mn", _mkl(a).shape, "k", "m")
    assert vd.shape == (n, m, lead[0] if lead else 1) and vd.stride(0) == 1 and vd.data_ptr() == out.data_ptr()
    # element (i, j, l) of the kernel's D is out[l, j, i]: the kernel's M is the user's N
    expected = out.reshape(-1, m, n).permute(2, 1, 0)
    assert torch.equal(vd, expected)
    for mode, stride in enumerate(vd.stride()):
        assert mode == 0 or stride * out.element_size() % 16 == 0   # what TMA needs of the other strides
    _, _, vd_plain, plain_major = hopper_gemm.kernel_operands((_mkl(a), "k"), (_mkl(b), "k"), out, swap=False)
    assert plain_major == "n" and torch.equal(vd_plain, out.reshape(-1, m, n).permute(1, 2, 0))


@pytest.mark.parametrize("settings, message", [
    (dict(out_dtype="torch.float32", d_dtype=FP32), r"swap_ab=True with out dtype torch.float32 unsupported"),
    (dict(spec=EpilogueSpec(activation="silu")), r"swap_ab=True with a fused epilogue \(silu\) unsupported"),
    (dict(schedule="pingpong"), r"swap_ab=True with schedule='pingpong' unsupported"),
])
def test_swap_ab_refuses_what_it_cannot_run(settings, message):
    args = {"out_dtype": "torch.bfloat16", "d_dtype": BF16, "spec": EpilogueSpec(), "schedule": "cooperative",
            **settings}
    with pytest.raises(ValueError, match=message):
        hopper_gemm._check_swap_settings(**args)
    hopper_gemm._check_swap_settings("torch.float16", FP16, EpilogueSpec(), "cooperative")


@pytest.mark.parametrize("m, n, k, expected", [
    (1, 6144, 4096, (64, 16, (1, 1), 1)),        # 48 tiles of 128 rows would leave SMs idle: 64-row ones
    (13, 4096, 14336, (64, 16, (1, 1), 1)),
    (32, 6144, 4096, (64, 32, (1, 1), 1)),
    (33, 6144, 4096, (64, 64, (1, 1), 1)),
    (8, 32768, 4096, (128, 16, (1, 1), 1)),      # 256 tiles of 128 rows already fill the SMs
])
def test_swapped_config_narrowest_tile_that_holds_m(m, n, k, expected):
    config = hopper_gemm.swapped_config(m, n, k)
    assert (config.tile_m, config.tile_n, config.cluster_mn, config.split_k) == expected and config.swap_ab
    assert config.describe().endswith(", swap-AB")


def test_swapped_config_above_64_rows_is_the_swapped_shapes_choice_without_split():
    config = hopper_gemm.swapped_config(100, 2112, 1000)
    unswapped = hopper_gemm.choose_config(2112, 100, 1000, allow_split=False)
    assert config == hopper_gemm.GemmConfig(unswapped.tile_m, unswapped.tile_n, unswapped.cluster_mn, 1,
                                            swap_ab=True)


@pytest.mark.parametrize("m, n, k, swaps", [
    (1, 6144, 4096, True),      # 96 swapped CTAs
    (32, 4096, 14336, True),    # 64 swapped CTAs: a third of the SMs and more
    (64, 4096, 14336, True),    # the 64-row side is full, but unswapped it needs a split-K sum
    (16, 7168, 2048, True),
    (1, 2048, 16384, False),    # 32 swapped CTAs: under a third of the SMs; the unswapped split fills them
    (8, 1024, 4096, False),     # 16
    (65, 6144, 4096, False),    # more tokens than one 64-row wgmma
    (100, 6144, 4096, False),
])
def test_swap_rule_counts_padding_and_ctas(m, n, k, swaps):
    assert hopper_gemm.choose_config(m, n, k, allow_swap=True).swap_ab is swaps


def test_swap_rule_is_on_by_default_for_decode_shapes_only():
    assert config.SWAP_AB_AUTO is True
    for m in (1, 4, 16, 32, 64):
        assert hopper_gemm.choose_config(m, 6144, 4096, allow_swap=True).swap_ab
    for m in (65, 300):
        for n, k in ((6144, 4096), (4096, 14336), (264, 136)):
            chosen = hopper_gemm.choose_config(m, n, k, allow_swap=True)
            assert not chosen.swap_ab and chosen == config._unswapped_config(m, n, k, 1, 132, 16, True)


