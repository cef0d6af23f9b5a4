"""Our block-scaled FP8 GEMM: input checks name the value, the tiling choice, and every layout and
tile width compiles for sm_90a into unserialized QGMMA without local memory (no GPU needed)."""

from __future__ import annotations

import re

import pytest
from conftest import load_probe_script

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.fp8_blockscale_gemm import fp8_blockscale_gemm as kernel


from artifacts.kernels.fp8_blockscale_gemm.variants import naive  # noqa: E402

from kernelwiki.harness import compile as compile_mod  # noqa: E402

GEMM = kernel.Fp8BlockScaleGemm


@pytest.mark.parametrize("args, kwargs, message", [
    (("dense", 256, 256, 256), {}, "layout 'dense' unsupported"),
    (("normal", 256, 256, 256), {"tile_n": 256}, r"tile_n=256 unsupported; use one of \(16, 32, 64, 128, 192\)"),
    (("normal", 256, 256, 256), {"tile_m": 192}, r"tile_m=192 unsupported; use one of \(64, 128, 256\)"),
    (("normal", 256, 256, 256), {"tile_m": 256, "tile_n": 192}, "a 256-row tile takes tile_n <= 128"),
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


@pytest.mark.parametrize("args, kwargs, message", [
    (("masked", 64, 256, 256, 4), {"tile_m": 64, "tile_n": 64, "cluster_mn": (1, 1)}, "streamk with layout 'masked'"),
    (("normal", 64, 256, 256), {"tile_m": 64, "tile_n": 64, "cluster_mn": (1, 2)}, r"cluster \(1, 2\): stream-K runs"),
    (("normal", 64, 256, 256), {"tile_m": 256, "tile_n": 64, "cluster_mn": (1, 1)}, "tile 256x64, cluster"),
    (("normal", 64, 256, 256), {"tile_m": 128, "tile_n": 192, "cluster_mn": (1, 1)}, "tile 128x192, cluster"),
    (("normal", 2 ** 20, 2 ** 20, 2 ** 16), {"tile_m": 64, "tile_n": 32, "cluster_mn": (1, 1)}, "past the kernel's 32-bit"),
])
def test_streamk_refusals_name_the_value(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        GEMM.can_implement(*args, **kwargs, streamk=True)
    if "layout 'masked'" not in message and "32-bit" not in message:
        with pytest.raises(ValueError, match="streamk: layout"):
            GEMM(args[0], kwargs["tile_n"], kwargs["cluster_mn"], tile_m=kwargs["tile_m"], streamk=True)


def test_streamk_units_and_the_choice():
    """Units are output tiles x K tiles; the streaming model weighs 64-row tiles, data-parallel and
    stream-K, only given K, in the normal layout, up to STREAM_MAX_M rows (no cluster, short A)."""
    assert kernel.streamk_units(16, 18432, 7168, 64, 128) == 144 * 56
    assert kernel.streamk_units(65, 200, 384, 128, 64) == 1 * 4 * 3
    assert not kernel.choose_tiling("normal", 16, 18432, 132)["streamk"]          # no K given
    assert not kernel.choose_tiling("masked", 16, 18432, 132, 4, k=7168)["streamk"]
    assert not kernel.choose_tiling("normal", 4096, 7168, 132, k=16384)["streamk"]
    assert not kernel.choose_tiling("normal", 96, 7168, 132, k=16384)["streamk"]
    for m, n, k in [(16, 18432, 7168), (1, 36864, 7168), (16, 1536, 7168), (64, 4096, 7168), (8, 7168, 18432)]:
        chosen = kernel.choose_tiling("normal", m, n, 132, k=k)
        assert chosen["tile_m"] == 64 and chosen["cluster_mn"] == (1, 1), (m, n, k, chosen)
        GEMM.can_implement("normal", m, n, k, 1, chosen["tile_n"], (1, 1), 64, chosen["streamk"], chosen["a_rows"])
    # long K, few tiles: a wave of tiles leaves most SMs idle, stream-K gives each the same share
    assert kernel.choose_tiling("normal", 32, 3584, 132, k=18944)["streamk"]
    # the model: fewer tiles than SMs stream faster per SM; stream-K is the same work on every SM
    one = kernel.stream_estimate(16, 128 * 66, 7168, 128, False, 16, 132)
    assert kernel.stream_estimate(16, 128 * 132, 7168, 128, False, 16, 132) < 2 * one


def test_short_a_sizes_and_refusals():
    """Short A (decode): a stage of a_rows rows of A gives B the bytes, for 64-row tiles in the normal
    layout and M <= a_rows only; opt-in."""
    full, short = GEMM("normal", 128, (1, 1), tile_m=64), GEMM("normal", 128, (1, 1), tile_m=64, a_rows=16)
    assert short.stages > full.stages and short.smem_bytes(short.stages, short.epi_stages) <= kernel.SMEM_BYTES
    with pytest.raises(ValueError, match="a_rows=16 with layout 'normal', tile_m=128"):
        GEMM("normal", 128, (1, 1), tile_m=128, a_rows=16)
    with pytest.raises(ValueError, match="a_rows=16 with M=17"):
        GEMM.can_implement("normal", 17, 256, 256, 1, 64, (1, 1), 64, a_rows=16)
    with pytest.raises(ValueError, match="a_rows=24 with layout"):
        GEMM.can_implement("normal", 8, 256, 256, 1, 64, (1, 1), 64, a_rows=24)
    for m in (1, 16, 17, 32):   # opt-in: the default keeps full A stages until an H200 run has checked short A
        chosen = kernel.choose_tiling("normal", m, 4096, 132, k=7168)
        assert chosen["a_rows"] == chosen["tile_m"]


def test_short_a_compiles_to_unserialized_qgmma():
    sass = compile_mod.from_cute(kernel.compile_for("sm_90a", tile_m=64, tile_n=128, cluster_mn=(1, 1), streamk=True,
                                                    a_rows=16), "sm_90a").sass
    assert len(re.findall(r"\bQGMMA\b", sass)) and not re.search(r"\b(STL|LDL)\b", sass)
    assert sass.count("WARPGROUP.DEPBAR") < sass.count("QGMMA")


def test_partial_tiles_and_grouped_layouts_are_accepted():
    GEMM.can_implement("normal", 260, 200, 384)               # partial M and N tiles, odd K tile count
    GEMM.can_implement("masked", 320, 2112, 512, 3, cluster_mn=(1, 2))
    GEMM.can_implement("contiguous", 512, 384, 256, 3, tile_n=64, cluster_mn=(1, 1))
    GEMM.can_implement("normal", 1, 8, 128, tile_m=64, tile_n=32)      # one row, one partial tile each way
    GEMM.can_implement("masked", 1, 4096, 7168, 4, tile_m=256, cluster_mn=(1, 2))


@pytest.mark.parametrize("layout, m, n, groups, tile, cluster", [
    ("normal", 4096, 2112, 1, (128, 192), (1, 2)),   # 12 tiles of 192 per row of tiles: 3 waves; 256x128 also 3
    ("normal", 4096, 7168, 1, (256, 128), (1, 2)),   # 7 waves of 256x128 instead of 10 of 128x192
    ("normal", 4096, 24576, 1, (256, 128), (1, 2)),
    ("normal", 64, 2112, 1, (64, 32), (1, 1)),       # few rows: K tiles in flight, no cluster
    ("normal", 1, 8, 1, (64, 32), (1, 1)),
    ("normal", 64, 24576, 1, (64, 128), (1, 1)),     # 64x192 has no K tiles in flight: never chosen
    ("normal", 128, 7168, 1, (128, 64), (1, 1)),
    ("normal", 128, 24576, 1, (128, 64), (1, 1)),    # nor 128x192 below 129 rows
    ("normal", 128, 4096, 1, (64, 64), (1, 1)),
    ("contiguous", 32768, 4096, 4, (128, 192), (1, 2)),   # no 256-row tiles in the contiguous layout
    ("contiguous", 1536, 4096, 5, (128, 192), (1, 2)),
    ("masked", 256, 4096, 4, (128, 128), (1, 2)),   # no 256-row tiles in the grouped layouts
])
def test_choose_tiling(layout, m, n, groups, tile, cluster):
    chosen = kernel.choose_tiling(layout, m, n, 132, groups)
    assert (chosen["tile_m"], chosen["tile_n"]) == tile and chosen["cluster_mn"] == cluster


def test_choose_tiling_within_given_heights():
    assert kernel.choose_tiling("normal", 4096, 7168, 132, tile_ms=(128,))["tile_m"] == 128
    with pytest.raises(ValueError, match=r"tile_ms=\(256,\): no tile of those heights for the normal layout with M=64"):
        kernel.choose_tiling("normal", 64, 4096, 132, tile_ms=(256,))
    with pytest.raises(ValueError, match="tile_ms=.256,.: no tile of those heights for the contiguous layout"):
        kernel.choose_tiling("contiguous", 4096, 4096, 132, 4, tile_ms=(256,))


def test_mainloop_defaults_follow_the_tile():
    """K tiles in flight up to 128 wide with one half; turns only for 128 x 192; the whole-tile
    epilogue for 256-row tiles; mma_ahead refused where the registers do not fit."""
    assert GEMM(tile_m=64, tile_n=32).mma_ahead and GEMM(tile_m=128, tile_n=128).mma_ahead
    wide, tall = GEMM(tile_m=128, tile_n=192), GEMM(tile_m=256, tile_n=128)
    assert not wide.mma_ahead and wide.order_warpgroups
    assert not tall.mma_ahead and not tall.order_warpgroups and tall.epi_stages == 8
    assert not GEMM(tile_m=128, tile_n=128).order_warpgroups   # K tiles in flight: no turns
    with pytest.raises(ValueError, match="mma_ahead: tile 256x128"):
        GEMM(tile_m=256, tile_n=128, mma_ahead=True)


def test_whole_tile_epilogue_trades_stages_for_a_buffer_per_slice():
    op = GEMM(tile_n=128, tile_m=256, whole_tile_epilogue=True)
    assert (op.stages, op.epi_stages) == (3, 8)                  # DeepGEMM's 256x128: 3 stages, all of D in smem
    assert op.smem_bytes(op.stages, op.epi_stages) <= kernel.SMEM_BYTES


@pytest.mark.parametrize("tile_m, tile_n, whole, stages, epi_stages", [
    (64, 32, None, 16, 2), (128, 64, None, 8, 2), (128, 128, None, 6, 3), (128, 192, None, 5, 2),
    (256, 128, False, 4, 3)])
def test_stages_fill_shared_memory(tile_m, tile_n, whole, stages, epi_stages):
    op = GEMM(tile_n=tile_n, tile_m=tile_m, whole_tile_epilogue=whole)
    assert (op.stages, op.epi_stages) == (stages, epi_stages)
    assert op.smem_bytes(op.stages, op.epi_stages) <= kernel.SMEM_BYTES
    slice_bytes = min(tile_m, 128) * min(32, tile_n) * 2
    stage_bytes = (tile_m + tile_n) * kernel.BLOCK + tile_m * 4
    # nothing that fits is left out: another stage, or (below one per slice) another epilogue buffer
    assert op.stages == kernel.MAX_STAGES or op.smem_bytes(op.stages + 1, 2) > kernel.SMEM_BYTES
    slices = tile_m // min(tile_m, 128) * tile_n // min(32, tile_n)
    assert op.epi_stages == max(2, slices) or op.smem_bytes(op.stages, op.epi_stages + 1) > kernel.SMEM_BYTES
    assert op.smem_bytes(op.stages, 2) >= op.stages * stage_bytes + 2 * slice_bytes


@pytest.mark.parametrize("layout, tile_m, tile_n, cluster", [
    ("normal", 128, 192, (2, 1)),        # the straddled-scale promotion with B multicast
    ("masked", 128, 64, (1, 2)),
    ("contiguous", 128, 128, (1, 2)),
    ("normal", 64, 32, (1, 2)),          # one consumer warpgroup
    ("normal", 64, 16, (1, 2)),          # the narrowest tile: one stmatrix.x4 and one TMA store per tile
    ("masked", 256, 128, (1, 2)),        # two halves through one temporary
    ("contiguous", 256, 128, (1, 2)),    # halves of two groups: a second pass over K (8 + 4 wgmmas)
])
def test_every_layout_compiles_to_unserialized_qgmma(layout, tile_m, tile_n, cluster):
    groups = 1 if layout == "normal" else 4
    emitted = compile_mod.from_cute(kernel.compile_for("sm_90a", layout, groups=groups, tile_n=tile_n,
                                                       cluster_mn=cluster, tile_m=tile_m), "sm_90a")
    assert f"wgmma.mma_async.sync.aligned.m64n{tile_n}k32.f32.e4m3.e4m3" in emitted.ptx
    sass = emitted.sass
    if sass is None:
        pytest.skip("no nvdisasm here")
    qgmma = len(re.findall(r"\bQGMMA\b", sass))
    halves = tile_m // min(tile_m, 128)
    passes = 1.5 if layout == "contiguous" and halves == 2 else 1   # the second pass runs the second half only
    ahead = GEMM(layout, tile_n, cluster, tile_m=tile_m).mma_ahead
    # four k32 steps per half, issued once a K tile; with two K tiles in flight from four places
    # (before the pairs, the pair's two steps, the even tail) and the in-flight wait leaving one group
    assert qgmma == 4 * halves * passes * (4 if ahead else 1)
    assert ("WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass) == ahead
    assert sass.count("WARPGROUP.DEPBAR") < qgmma          # not one wait per wgmma (ptxas serialization)
    assert not re.search(r"\b(STL|LDL)\b", sass)           # no spills
    promotions = len(re.findall(r"\bFFMA\b", sass))
    assert promotions >= tile_n // 2 * halves * passes   # one FFMA per accumulator element per K tile


TMA_RANK = re.compile(r"cp\.async\.bulk\.tensor\.(\d)d")


@pytest.mark.parametrize("layout, groups, cluster", [("normal", 1, (2, 1)), ("masked", 4, (1, 2)),
                                                     ("contiguous", 4, (1, 2))])
def test_tma_keeps_every_mode(layout, groups, cluster):
    """One compile serves every shape, M = 1 included: all TMA copies (A, B, A scales, D) are 3-D,
    (rows, K or N, L), because no extent is known at compile time and so none is dropped."""
    ptx = compile_mod.from_cute(kernel.compile_for("sm_90a", layout, groups=groups, tile_n=64, cluster_mn=cluster),
                                "sm_90a").ptx
    ranks = TMA_RANK.findall(ptx)
    assert len(ranks) == 5 and set(ranks) == {"3"}     # loads of A, B, A scales; the D store (two call sites)


def test_static_m_of_one_drops_the_mode():
    """The root cause of the M = 1 crash, kept as a check on CuTe: with a static M of 1 the M mode is
    dropped when the TMA atoms are built, and A's load and D's store become 1-D copies."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    e4m3, f32 = cutlass.Float8E4M3FN, cutlass.Float32
    fake = lambda dtype, shape, order: make_fake_compact_tensor(dtype, shape, stride_order=order,  # noqa: E731
                                                                assumed_align=16)
    k_major, m_major = (1, 0, 2), (0, 1, 2)
    tensors = (fake(e4m3, (1, 128, 1), k_major), fake(f32, (1, 1, 1), m_major), fake(e4m3, (128, 128, 1), k_major),
               fake(f32, (1, 1, 1), k_major), fake(cutlass.BFloat16, (1, 128, 1), k_major),
               fake(cutlass.Int32, (1,), (0,)), fake(f32, (1,), (0,)), fake(cutlass.Int32, (1,), (0,)))
    compiled = kernel.cute.compile(GEMM("normal", 64, (1, 1)), *tensors, cutlass.Int32(0), 132, make_fake_stream(),
                                   options=f"--gpu-arch sm_90a --keep-ptx --keep-cubin --dump-dir {kernel.DUMP_DIR}")
    assert "1" in TMA_RANK.findall(compile_mod.from_cute(compiled, "sm_90a").ptx)


@pytest.mark.parametrize("leading, shape, strides", [(1, (1, 256, 1), (256, 1, 256)), (0, (1, 4, 1), (1, 4, 4)),
                                                     (0, (5,), (1,))])
def test_fake_tensors_match_runtime_views(leading, shape, strides):
    """The compiled kernel reads each argument's descriptor as it was compiled: the fake tensors of
    compile_for must have the types of the views that run() passes (32-bit extents, 64-bit strides)."""
    np = pytest.importorskip("numpy")
    from cutlass._mlir import ir
    from cutlass.cute.runtime import from_dlpack

    array = np.lib.stride_tricks.as_strided(np.empty(64, np.float32), shape, [4 * s for s in strides])
    layout = re.compile(r'"(.*)"')
    with ir.Context(), ir.Location.unknown():
        fake = kernel.fake_tensor(cutlass.Float32, leading, rank=len(shape), aligned=False).__get_mlir_types__()
        view = from_dlpack(array, assumed_align=16).mark_layout_dynamic(leading_dim=leading).__get_mlir_types__()
        assert layout.search(str(fake[0])).group(1) == layout.search(str(view[0])).group(1)


def _probe_module():
    return load_probe_script("probe-fp8-blockscale-gemm", "fp8_blockscale_probe")


def test_probe_precompiles_each_deepgemm_configuration_once():
    probe = _probe_module()
    shapes = probe._deepgemm_shapes(probe.PROBE.spec["cases"])
    assert len(shapes) == len({tuple(sorted(s.items())) for s in shapes})         # the tiling cases repeat shapes
    assert {"layout": "masked", "m": 256, "n": 4096, "k": 7168, "groups": 4} in shapes
    assert {"layout": "contiguous", "m": 32768, "n": 4096, "k": 7168, "groups": 8} in shapes
    assert not any(s["layout"] == "contiguous" and s["m"] == 1536 for s in shapes)  # padding rows: DeepGEMM skipped
    assert len([s for s in shapes if s["layout"] == "normal"]) == 21   # 18 DeepGEMM shapes, two M = 1, the views case


def test_probe_marks_bit_exact_only_where_cublas_matched_before():
    cases = {c["id"]: c["params"] for c in _probe_module().PROBE.spec["cases"]}
    assert all(p.get("bit_exact") for i, p in cases.items()
               if i.startswith(("normal-64x", "normal-4096x", "tiling-")) and p["layout"] == "normal")
    assert not any(cases[i].get("bit_exact") for i in ("normal-1x8x128", "normal-1x4096x7168"))


def test_probe_summary_table(capsys):
    _probe_module().print_summary([
        {"case": "normal-4096x4096x7168", "ours": 1100.0, "tall": 1000.0, "DeepGEMM": 1375.0, "cuBLAS": 1300.0,
         "differing": 0, "differing_deepgemm": 0, "passed": True},
        {"case": "normal-1x8x128", "ours": 0.01, "DeepGEMM": None, "cuBLAS": None, "differing": None,
         "differing_deepgemm": None, "passed": False}])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:7] == ["case", "ours", "128-row", "epiFlip", "DeepGEMM", "cuBLAS", "ours/DG"]
    assert lines[1].split() == ["normal-4096x4096x7168", "1100", "1000", "-", "1375", "1300", "0.800", "0", "0", "yes"]
    assert lines[2].split() == ["normal-1x8x128", "0", "-", "-", "-", "-", "-", "-", "-", "NO"]


def test_naive_variant_checks_and_compiles():
    with pytest.raises(ValueError, match="N=200 must be a positive multiple of its tile 128"):
        naive.NaiveBlockScaleGemm.can_implement(256, 200, 256)
    emitted = compile_mod.from_cute(naive.compile_for("sm_90a"), "sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in emitted.ptx


# --- the negative controls are subtle: each fails both tests of the rounding gate by 1.5-10x, not by orders ---
def _bf16(x):
    import numpy as np

    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("rows_total, rows_bad, n", [(512, 128, 2048), (640, 128, 1024), (512, 128, 1024),
                                                     (32, 8, 2048)],
                         ids=["normal", "contiguous", "masked", "streamk"])
def test_each_control_fails_each_test_of_the_gate_by_1_5_to_10x(rows_total, rows_bad, n):
    """A NumPy simulation of each control's bug (CONTROL_SCALE_FACTOR on the A scale of rows_bad of
    rows_total rows in one K block, K = 1024) against the probe's gate, whose tolerances derive from
    the bf16 rounding of the exact result: the correct output passes; the control's relative error
    and its largest element error each miss their tolerance by 1.5-10x."""
    import numpy as np

    from kernelwiki.harness import gates

    probe = _probe_module()
    rng = np.random.default_rng(0)
    k = 1024
    x, w = rng.standard_normal((rows_total, k)), rng.standard_normal((n, k))
    ref = x @ w.T
    kb = slice(probe.CONTROL_K_BLOCK * 128, (probe.CONTROL_K_BLOCK + 1) * 128)
    bug = ref.copy()
    bug[:rows_bad] += (probe.CONTROL_SCALE_FACTOR - 1) * x[:rows_bad, kb] @ w[:, kb].T
    tol = probe.ROUNDING_FACTOR * gates.relative_error(_bf16(ref), ref)
    max_abs_tol = probe.MAX_ABS_FACTOR * np.abs(_bf16(ref) - ref).max()
    correct = gates.check(_bf16(ref), ref, probe.GATE, tol=tol, max_abs_tol=max_abs_tol)
    control = gates.check(_bf16(bug), ref, probe.GATE, tol=tol, max_abs_tol=max_abs_tol)
    assert correct["passed"] and not control["passed"]
    over = probe.over_gate({"parts": {"rounding": control}})
    assert 1.5 <= over["rounding.rel_err"] <= gates.CONTROL_BLUNT_FACTOR, over
    assert 1.5 <= over["rounding.max_abs_err"] <= gates.CONTROL_BLUNT_FACTOR, over
    assert set(probe.NEGATIVE_CONTROLS) == set(probe.PROBE.spec["negative_control"])


def test_the_headline_is_the_fastest_correct_baseline_and_bf16_is_never_the_fallback():
    from kernelwiki.harness.probe import Context

    probe = _probe_module()
    ctx = Context(seed=1, gpu_short="H200", gpu_name="NVIDIA H200", ceilings={})
    tiling = {"tile_m": 128, "tile_n": 128, "cluster_mn": (1, 1)}
    masked = probe._result(ctx, {"passed": True, "deepgemm_passed": True, "cublas_blockwise_passed": True}, {},
                           {"ours": 600.0, probe.CUBLAS_GROUPS: 375.0, probe.deepgemm.NAME: 700.0}, tiling)
    assert masked["headline"]["baseline"] == probe.deepgemm.NAME and masked["headline"]["ratio"] == 0.8571
    contiguous = probe._result(ctx, {"passed": True, "deepgemm_passed": True}, {},
                               {"ours": 600.0, "ours, normal layout": 605.0, probe.deepgemm.NAME: 690.0}, tiling)
    assert contiguous["headline"]["baseline"] == probe.deepgemm.NAME
    refused = probe._result(ctx, {"passed": True}, {}, {"ours": 600.0, "cuBLAS bf16": 500.0}, tiling,
                            [{"name": probe.CUBLAS, "value": None, "skipped": "refused"}])
    assert "baseline" not in refused["headline"]
    assert {b["name"]: b.get("headline_candidate", True) for b in refused["baselines"]} == {
        probe.CUBLAS: True, "cuBLAS bf16": False}


def _held_out_module():
    return load_probe_script("probe-fp8-blockscale-gemm", "held_out")


def test_held_out_draw_leaves_out_what_the_choice_was_fitted_on():
    held_out = _held_out_module()
    cases = _probe_module().PROBE.spec["cases"]
    fitted = held_out.tuning_set(cases)
    assert (4096, 7168, 16384) in fitted and (16, 18432, 7168) in fitted   # a probe case, a sweep shape
    first = held_out.draw(1234, 20, cases)
    assert first == held_out.draw(1234, 20, cases) and first != held_out.draw(1235, 20, cases)
    assert len({(s["m"], s["n"], s["k"]) for s in first}) == 20
    for s in first:
        assert (s["m"], s["n"], s["k"]) not in fitted and s["k"] % 128 == 0 and s["n"] % 64 == 0
        assert max(s["m"] * s["k"], s["n"] * s["k"], s["m"] * s["n"]) <= held_out.MAX_ELEMENTS
    case = next(c for c in cases if c["id"] == "held-out-fp8")
    assert case["params"]["set"] == "held-out" and int(case["params"]["count"]) == 20


def test_held_out_summary_and_labels():
    held_out = _held_out_module()
    rows = [{"m": 16, "n": 4096, "k": 7168, "model": "X", "layer": "up", "tiling": "64x128 1x1 sk132", "ratio": 1.2},
            {"m": 64, "n": 4096, "k": 7168, "model": "X", "layer": "up", "tiling": "64x64 1x1", "ratio": 0.9},
            {"m": 4096, "n": 4096, "k": 7168, "model": "X", "layer": "up", "tiling": "256x128 1x2", "ratio": 0.8},
            {"m": 8, "n": 4096, "k": 7168, "model": "X", "layer": "up", "tiling": "64x32 1x1"}]
    out = held_out.summary(rows)
    assert out["ratios"] == 3 and out["worst_ratio"] == 0.8
    assert out["geomean_ratio"] == round((1.2 * 0.9 * 0.8) ** (1 / 3), 4)
    assert out["class_decode_geomean_ratio"] == 1.2 and out["class_prefill_geomean_ratio"] == 0.8
    assert held_out.summary([])["geomean_ratio"] is None
    assert held_out.compact(rows[0]) == "16x4096x7168 X/up 64x128 1x1 sk132 1.200"
    assert held_out.compact(rows[3]).endswith("no ratio")
    assert held_out.label({"tile_m": 64, "tile_n": 128, "cluster_mn": (1, 1), "streamk": True, "ctas": 132,
                           "a_rows": 16}) == "64x128 1x1 a16 sk132"
    assert held_out.label({"tile_m": 256, "tile_n": 128, "cluster_mn": (1, 2), "streamk": False}) == "256x128 1x2"
