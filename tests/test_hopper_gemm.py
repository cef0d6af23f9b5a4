"""Our Hopper GEMMs: input checks name the value, and both kernels compile for sm_90a (no GPU)."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

cutlass = pytest.importorskip("cutlass")
sys.path.insert(0, str(ROOT / "artifacts" / "kernels" / "hopper-gemm"))
sys.path.insert(0, str(ROOT / "artifacts" / "kernels" / "hopper-gemm" / "variants"))
import hopper_gemm  # noqa: E402
import naive  # noqa: E402

BF16 = cutlass.BFloat16


@pytest.mark.parametrize("args, message", [
    ((cutlass.Float32, BF16, 256, 256, 256), "A/B dtype"),
    ((BF16, cutlass.Int8, 256, 256, 256), "D dtype"),
    ((BF16, BF16, 200, 256, 256), "M=200 is not a multiple of its tile 128"),
    ((BF16, BF16, 256, 320, 256), "N=320 is not a multiple of its tile 256"),
    ((BF16, BF16, 256, 256, 100), "K=100 is not a multiple of its tile 64"),
])
def test_hopper_gemm_can_implement(args, message):
    with pytest.raises(ValueError, match=message):
        hopper_gemm.HopperGemm.can_implement(*args)


def test_hopper_gemm_rejects_unsupported_tile_and_cluster():
    with pytest.raises(ValueError, match="tile_n=96 unsupported"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_n=96)
    with pytest.raises(ValueError, match=r"cluster_mn=\(2, 2\) unsupported"):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, 256, 256, 256, cluster_mn=(2, 2))


def test_stage_count_fills_shared_memory():
    op = hopper_gemm.HopperGemm(tile_n=256)
    stage = (128 + 256) * 64 * 2
    assert op.stages >= 4 and op.stages * stage <= hopper_gemm.SMEM_BYTES


def test_naive_can_implement():
    with pytest.raises(ValueError, match="M=96 is not a multiple of its tile 64"):
        naive.NaiveWgmmaGemm.can_implement(BF16, BF16, 96, 128, 64)


@pytest.mark.parametrize("compile_for", [hopper_gemm.compile_for, naive.compile_for], ids=["persistent", "naive"])
def test_compiles_to_hgmma(compile_for):
    from kernelwiki.harness import compile as compile_mod

    emitted = compile_mod.from_cute(compile_for("sm_90a"), "sm_90a")
    assert "wgmma.mma_async.sync.aligned" in emitted.ptx
    if emitted.sass is not None:
        assert "HGMMA" in emitted.sass and "STL" not in emitted.sass.split()
