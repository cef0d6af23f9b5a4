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
from artifacts.kernels.sparse_decode import schedule  # noqa: E402
from artifacts.kernels.sparse_decode import sparse_decode_sm90 as kernel  # noqa: E402
from artifacts.kernels.sparse_decode.gather import FP8RowGather  # noqa: E402

from kernelwiki.harness import compile as compile_mod  # noqa: E402



@pytest.mark.parametrize("batch, heads, topk", [(b, h, k) for b in (1, 16, 64, 128) for h in (16, 64, 128)
                                                 for k in (64, 2048)] + [(3, 100, 192), (5, 200, 448), (1000, 64, 128)])
def test_schedule_walks_every_tile_once_in_equal_parts(batch, heads, topk):
    sched = kernel.plan(batch, heads, topk)
    parts = schedule.parts_for(kernel.NUM_SMS, math.ceil(heads / kernel.BLOCK_H))
    assert len(sched.parts) == parts
    seen = [[0] * sched.tiles for _ in range(batch)]
    work = [0] * parts
    for part, b, begin, end, split in schedule.segments(sched, batch):
        assert 0 <= begin < end <= sched.tiles
        for t in range(begin, end):
            seen[b][t] += 1
        work[part] += end - begin + schedule.OVERHEAD_TILES
        # a cut sequence's partial goes to its own slot; a whole one is written by the main kernel
        whole = begin == 0 and end == sched.tiles
        assert whole == (sched.splits(b) == 1)
        assert 0 <= split < sched.splits(b)
    assert all(count == 1 for row in seen for count in row)
    payload = math.ceil(batch * (sched.tiles + schedule.OVERHEAD_TILES) / parts) + schedule.OVERHEAD_TILES
    assert max(work) <= payload + schedule.OVERHEAD_TILES
    assert sched.split_base[-1] <= batch + parts and sched.slots >= 1


def test_schedule_matches_flashmlas_sizing_on_the_v32_shapes():
    """FlashMLA 9241ae3's get_decoding_sched_meta on 132 SMs: 66 parts at 128 heads; a single sequence is
    cut into one tile per part; at batch 64 every part holds one sequence, at 128 two."""
    one = kernel.plan(1, 128, 2048)
    assert len(one.parts) == 66 and one.splits(0) == 32
    assert all(p.first == 1 for p in one.parts[32:])                 # the rest of the parts are empty
    b64 = kernel.plan(64, 128, 2048)
    assert all(b64.splits(b) == 1 for b in range(64)) and sum(p.first < 64 for p in b64.parts) == 64
    b128 = kernel.plan(128, 128, 2048)
    assert all(p.last - p.first == 1 for p in b128.parts[:64])
    assert kernel.plan(128, 64, 64).splits(0) == 1 and len(kernel.plan(128, 64, 64).parts) == 132


def test_schedule_refuses_what_it_cannot_cut():
    with pytest.raises(ValueError, match="topk=100"):
        schedule.plan(2, 100, 10)
    with pytest.raises(ValueError, match="sms=0"):
        schedule.parts_for(0, 1)


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


def _spill_stores(sass: str) -> int:
    return len(re.findall(r"\bSTL(?:\.\w+)*\b", sass))


def test_main_kernel_compiles_warp_specialized_fp16_wgmma():
    """The 36 S wgmmas (m64n64k16, K = 576) and 8 P.V wgmmas (m64n256k16, two warpgroups), setmaxnreg as
    planned (load 120, S 216: below 216 ptxas serializes the wgmmas, and a serialized build waits after
    every HGMMA: ~44 WARPGROUP.DEPBAR), stmatrix for P, no cluster; the producer holds two rounds of rows
    in registers and spills at most a word or two (one store per tile)."""
    emitted = compile_mod.from_cute(kernel.compile_for("sm_90a", heads=128), "sm_90a")
    assert emitted.ptx.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16") == 36
    assert emitted.ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 8
    assert "cvt.rn.f16x2.e4m3x2" in emitted.ptx and "stmatrix.sync.aligned.m8n8.x4" in emitted.ptx
    assert "st.async" not in emitted.ptx and "barrier.cluster" not in emitted.ptx
    if emitted.sass is None:
        pytest.skip("no nvdisasm")
    assert f"USETMAXREG.DEALLOC.CTAPOOL {kernel.LOAD_REGISTERS:#x}" in emitted.sass
    assert f"USETMAXREG.TRY_ALLOC.CTAPOOL UP0, {kernel.S_REGISTERS:#x}" in emitted.sass
    assert emitted.sass.count("WARPGROUP.DEPBAR") < 12, "ptxas serialized the wgmmas"
    assert _spill_stores(emitted.sass) <= 4, "register spills"
    assert kernel.S_REGISTERS + kernel.V_REGISTERS + kernel.LOAD_REGISTERS <= 3 * 168


def test_combine_kernel_compiles_without_local_memory():
    emitted = compile_mod.from_cute(kernel.compile_combine_for("sm_90a"), "sm_90a")
    assert "ld.global.v4.f32" in emitted.ptx or "ld.global.v4.b32" in emitted.ptx
    if emitted.sass is not None:
        assert not re.search(r"\b(STL|LDL)\b", emitted.sass)


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


def test_sm100_kernel_walks_the_same_schedule_in_32_token_tiles():
    """The Blackwell kernel's persistent walk: schedule.plan over 148 SMs, two CTAs (value halves) per
    128-head block, 32-token tiles; every tile once."""
    from artifacts.kernels.sparse_decode import sparse_decode_sm100 as sm100

    sched = sm100.plan(64, 128, 2048)
    assert sched.tiles == 2048 // sm100.BLOCK_T and len(sched.parts) == sm100.NUM_SMS // 2
    covered = sum(end - begin for _, _, begin, end, _ in schedule.segments(sched, 64))
    assert covered == 64 * sched.tiles
