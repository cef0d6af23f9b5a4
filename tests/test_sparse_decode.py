"""The sparse MLA decode kernels (artifacts/kernels/sparse_decode): cache format, split planning, input
checks, the torch reference (where torch is installed), and what the sm_90a kernels compile to (no GPU)."""

from __future__ import annotations

import math
import re

import pytest

from artifacts.kernels.sparse_decode import cache_format


def test_cache_row_is_the_v32_format():
    # 512 e4m3 + 4 float32 scales + 64 bf16 = 656 bytes (src-flashmla-readme)
    assert (cache_format.SCALE_OFFSET, cache_format.ROPE_OFFSET, cache_format.ROW_BYTES) == (512, 528, 656)
    assert cache_format.D_QK == 576 and cache_format.D_V == 512
    assert cache_format.ROW_BYTES % 16 == 0   # the kernels' 16-byte loads need aligned rows


cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.sparse_decode import sparse_decode_sm90 as kernel  # noqa: E402
from artifacts.kernels.sparse_decode.gather import FP8RowGather  # noqa: E402

from kernelwiki.harness import compile as compile_mod  # noqa: E402



@pytest.mark.parametrize("batch, heads", [(b, h) for b in (1, 16, 64, 128) for h in (16, 64, 128)] + [(3, 100)])
def test_plan_splits_covers_every_tile_once_with_no_empty_split(batch, heads):
    tiles = 2048 // kernel.BLOCK_T
    splits, per_split = kernel.plan_splits(batch, heads, 2048)
    assert splits * per_split >= tiles > (splits - 1) * per_split
    ctas = batch * math.ceil(heads / kernel.BLOCK_H)
    assert splits == 1 or ctas * splits <= kernel.NUM_SMS   # split only to fill, never past, one wave


def test_plan_splits_splits_a_single_sequence_over_the_gpu():
    assert kernel.plan_splits(1, 16, 2048) == (32, 1)
    assert kernel.plan_splits(128, 128, 2048) == (1, 32)


@pytest.mark.parametrize("kwargs, message", [
    ({"d_qk": 512}, r"d_qk=512 unsupported; use 576"),
    ({"d_v": 128}, r"d_v=128 unsupported; use 512"),
    ({"topk": 100}, r"topk=100 unsupported; use a positive multiple of 64"),
    ({"topk": 0}, r"topk=0 unsupported"),
    ({"query_tokens": 2}, r"query tokens per sequence=2 unsupported; use 1"),
    ({"heads": 0}, r"must be positive"),
])
def test_can_implement_names_the_value(kwargs, message):
    args = {"batch": 2, "heads": 64, "topk": 2048, **kwargs}
    with pytest.raises(ValueError, match=message):
        kernel.SparseDecodeSm90.can_implement(**args)


def test_gather_rejects_a_thread_count_it_cannot_map():
    with pytest.raises(ValueError, match="threads=96 with block_t=64 unsupported"):
        FP8RowGather(96)


def test_split_kernel_compiles_to_fp16_wgmma_without_local_memory():
    emitted = compile_mod.from_cute(kernel.compile_for("sm_90a", split=True), "sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16" in emitted.ptx      # S, half a tile per warpgroup
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in emitted.ptx     # O, half of d_v per warpgroup
    assert "cvt.rn.f16x2.e4m3x2" in emitted.ptx
    if emitted.sass is None:
        pytest.skip("no nvdisasm")
    assert not re.search(r"\b(STL|LDL)\b", emitted.sass), "register spills"


def test_teaching_variant_compiles_with_a_full_tile_s():
    from artifacts.kernels.sparse_decode.variants import simple

    emitted = compile_mod.from_cute(simple.compile_for("sm_90a"), "sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in emitted.ptx
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in emitted.ptx


# ---- the torch reference (skips where torch is not installed) ----

def _torch():
    return pytest.importorskip("torch")


def test_quantized_rows_dequantize_close_with_power_of_two_scales():
    torch = _torch()
    from artifacts.kernels.sparse_decode import reference

    latent = torch.randn(64, 576, generator=torch.Generator().manual_seed(0))
    rows = reference.quantize_cache(latent)
    assert rows.shape == (64, 656) and rows.dtype == torch.uint8
    scales = rows[:, 512:528].contiguous().view(torch.float32)
    assert torch.equal(scales, torch.exp2(torch.log2(scales).round()))
    back = reference.dequantize_rows(rows)
    assert torch.equal(back[:, 512:], latent[:, 512:].bfloat16().float())            # RoPE kept in bf16
    rel = (back[:, :512] - latent[:, :512]).norm() / latent[:, :512].norm()
    assert 1e-3 < rel < 0.1                                                          # e4m3: a few percent


def test_reference_masks_invalid_indices_and_marks_empty_queries():
    torch = _torch()
    from artifacts.kernels.sparse_decode import reference

    g = torch.Generator().manual_seed(1)
    q, cache, idx = reference.random_problem(2, 4, 128, 512, g, device="cpu")
    idx[0, 64:] = -1
    idx[1, :] = -1
    out, lse = reference.sparse_decode(q, cache, idx)
    kept, _ = reference.sparse_decode(q[:1], cache, idx[:1, :64].contiguous())
    assert torch.allclose(out[0], kept[0], atol=1e-5)
    assert torch.equal(out[1], torch.zeros_like(out[1])) and torch.isposinf(lse[1]).all()


def test_sdpa_baseline_and_bf16_reference_agree_with_the_fp32_reference():
    torch = _torch()
    from artifacts.kernels.sparse_decode import reference

    q, cache, idx = reference.random_problem(2, 8, 256, 1024, torch.Generator().manual_seed(2), device="cpu")
    ref, _ = reference.sparse_decode(q, cache, idx)
    for other in (reference.sdpa_baseline(q, cache, idx), reference.sparse_decode_bf16(q, cache, idx)):
        assert ((other.float() - ref).norm() / ref.norm()) < 2e-2


# ---- the sm_100a kernel: its TMEM column plan (pure Python) ----

def test_tmem_plan_of_the_sm100_kernel_is_sound():
    from artifacts.kernels.sparse_decode.sparse_decode_sm100 import PLAN as plan
    from artifacts.kernels.sparse_decode.tmem_plan import TmemPlan

    assert plan.problems() == []
    assert plan.s_cols == (0, 32) and plan.p_cols == (0, 16) and plan.o_cols == (256, 512)
    assert plan.alloc_cols == 512
    assert TmemPlan(block_t=64, value_dims=256).problems() == []      # a 64-token tile would fit too


@pytest.mark.parametrize("plan, message", [
    ({"block_t": 32, "value_dims": 512}, "needs 1024 columns"),                  # all of d_v in one CTA
    ({"block_t": 32, "value_dims": 256, "o_offset": 0}, r"S columns \[0, 32\) overlap O"),
    ({"block_t": 32, "value_dims": 256, "p_offset": 24}, r"P columns \[24, 40\) are not inside S"),
    ({"block_t": 32, "value_dims": 256, "p_offset": 256}, "P columns .* overlap O"),
    ({"block_t": 32, "value_dims": 256, "o_offset": 250}, "multiple of 32"),
])
def test_tmem_plan_catches_overlaps_and_overflow(plan, message):
    from artifacts.kernels.sparse_decode.tmem_plan import TmemPlan

    assert any(re.search(message, problem) for problem in TmemPlan(**plan).problems())


def test_sm100_kernel_checks_inputs_like_the_sm90_kernel():
    from artifacts.kernels.sparse_decode import sparse_decode_sm100 as sm100

    with pytest.raises(ValueError, match="topk=2016 unsupported; use a positive multiple of 64"):
        sm100.compile_for("sm_100a", topk=2016)
