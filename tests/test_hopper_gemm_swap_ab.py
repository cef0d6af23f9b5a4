"""Swap-AB in our Hopper GEMM without a GPU: the M-major D store (what can_implement refuses, that it
compiles for sm_90a with the transposed stmatrix while the default keeps the plain one), the
narrow tile widths, the operand views compile_gemm hands the kernel when it swaps, what swap_ab
refuses, and choose_config's swap choice (on by default, SWAP_AB_AUTO)."""

from __future__ import annotations

import math
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


def test_swapped_config_sizes_the_tile_to_the_token_rows():
    for m, n, k in ((1, 6144, 4096), (13, 4096, 14336), (33, 6144, 4096), (160, 4096, 14336), (200, 2112, 7168)):
        chosen = hopper_gemm.swapped_config(m, n, k)
        tiles = math.ceil(m / chosen.tile_n)
        assert chosen.swap_ab and chosen.tile_n % 16 == 0 and 1 <= tiles <= 4
        assert chosen.tile_n == min(256, -(-math.ceil(m / tiles) // 16) * 16)   # the least padding for its tiles
        assert chosen.describe().endswith(", swap-AB")


def test_swap_rule_is_on_by_default_and_switched_off_by_its_flag(monkeypatch):
    assert config.SWAP_AB_AUTO is True
    for m in (1, 4, 16, 32):
        assert hopper_gemm.choose_config(m, 6144, 4096, allow_swap=True).swap_ab
    for m, n, k in ((1, 6144, 4096), (160, 4096, 14336), (300, 264, 136)):
        assert not hopper_gemm.choose_config(m, n, k).swap_ab          # the caller's settings forbid it
    monkeypatch.setattr(config, "SWAP_AB_AUTO", False)
    hopper_gemm.choose_config.cache_clear()
    try:
        assert not hopper_gemm.choose_config(1, 6144, 4096, allow_swap=True).swap_ab
    finally:
        hopper_gemm.choose_config.cache_clear()


