"""Our block-scaled FP8 GEMM: input checks name the value, the tiling choice, and every layout and
tile width compiles for sm_90a into unserialized QGMMA without local memory (no GPU needed)."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from conftest import ROOT

cutlass = pytest.importorskip("cutlass")
sys.path.insert(0, str(ROOT / "artifacts" / "kernels" / "fp8-blockscale-gemm"))
import fp8_blockscale_gemm as kernel  # noqa: E402


def _load(name: str, path):
    """Import a file under its own module name: the Hopper GEMM's teaching variant is naive.py too."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


naive = _load("fp8_blockscale_naive", ROOT / "artifacts" / "kernels" / "fp8-blockscale-gemm" / "variants" / "naive.py")

from kernelwiki.harness import compile as compile_mod  # noqa: E402

GEMM = kernel.Fp8BlockScaleGemm


@pytest.mark.parametrize("args, kwargs, message", [
    (("dense", 256, 256, 256), {}, "layout 'dense' unsupported"),
    (("normal", 256, 256, 256), {"tile_n": 256}, r"tile_n=256 unsupported; use one of \(64, 128, 192\)"),
    (("normal", 256, 256, 256), {"cluster_mn": (2, 2)}, r"cluster_mn=\(2, 2\) unsupported"),
    (("masked", 256, 256, 256, 4), {"cluster_mn": (2, 1)}, "the masked layout needs cluster_m == 1"),
    (("contiguous", 256, 256, 256, 4), {"cluster_mn": (2, 1)}, "the contiguous layout needs cluster_m == 1"),
    (("normal", 0, 256, 256), {}, "must be positive"),
    (("normal", 256, 256, 200), {}, "K=200 must be a multiple of 128"),
    (("normal", 256, 260, 256), {}, "N=260 must be a multiple of 8"),
    (("contiguous", 200, 256, 256, 2), {"cluster_mn": (1, 2)}, "M=200: the contiguous layout needs M a multiple of 128"),
])
def test_can_implement_names_the_value(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        GEMM.can_implement(*args, **kwargs)


def test_partial_tiles_and_grouped_layouts_are_accepted():
    GEMM.can_implement("normal", 260, 200, 384)               # partial M and N tiles, odd K tile count
    GEMM.can_implement("masked", 320, 2112, 512, 3, cluster_mn=(1, 2))
    GEMM.can_implement("contiguous", 512, 384, 256, 3, tile_n=64, cluster_mn=(1, 1))


@pytest.mark.parametrize("rows, n, tile_n", [
    (4096, 2112, 192),    # 11 tiles of 192 per row of tiles: 3 waves on 132 SMs instead of 5 at 128
    (4096, 24576, 192),
    (128, 2112, 64),      # one row of tiles: narrower tiles put more SMs to work
    (64, 32768, 128),
])
def test_choose_tiling(rows, n, tile_n):
    assert kernel.choose_tiling("normal", rows, n, 132) == (tile_n, (1, 2))


@pytest.mark.parametrize("tile_n", kernel.TILE_NS)
def test_stages_fill_shared_memory(tile_n):
    op = GEMM(tile_n=tile_n)
    stage = (kernel.TILE_M + tile_n) * kernel.BLOCK + kernel.TILE_M * 4
    epilogue = kernel.EPI_STAGES * kernel.TILE_M * kernel.EPI_TILE_N * 2
    assert op.stages >= 4
    assert op.stages * stage + epilogue <= kernel.SMEM_BYTES < (op.stages + 1) * (stage + 16) + epilogue + 1024


@pytest.mark.parametrize("layout, tile_n, cluster", [
    ("normal", 192, (2, 1)),        # the straddled-scale promotion with B multicast
    ("masked", 64, (1, 2)),
    ("contiguous", 128, (1, 2)),
])
def test_every_layout_compiles_to_unserialized_qgmma(layout, tile_n, cluster):
    groups = 1 if layout == "normal" else 4
    emitted = compile_mod.from_cute(kernel.compile_for("sm_90a", layout, groups=groups, tile_n=tile_n,
                                                       cluster_mn=cluster), "sm_90a")
    assert f"wgmma.mma_async.sync.aligned.m64n{tile_n}k32.f32.e4m3.e4m3" in emitted.ptx
    sass = emitted.sass
    if sass is None:
        pytest.skip("no nvdisasm here")
    qgmma = len(re.findall(r"\bQGMMA\b", sass))
    assert qgmma == 4                                      # one K tile: four k32 steps, issued once
    assert sass.count("WARPGROUP.DEPBAR") < qgmma          # not one wait per wgmma (ptxas serialization)
    assert not re.search(r"\b(STL|LDL)\b", sass)           # no spills
    promotions = len(re.findall(r"\bFFMA\b", sass))
    assert promotions >= tile_n // 2                       # one FFMA per accumulator element per K tile


def test_naive_variant_checks_and_compiles():
    with pytest.raises(ValueError, match="N=200 must be a positive multiple of its tile 128"):
        naive.NaiveBlockScaleGemm.can_implement(256, 200, 256)
    emitted = compile_mod.from_cute(naive.compile_for("sm_90a"), "sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in emitted.ptx
