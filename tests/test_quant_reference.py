"""The reference quantizers behind hw-block-scaled-formats and technique-fp8-scaling-recipes: element
codes, rounding, MX/NVFP4 scales, the tcgen05 scale-factor byte order, the FP8 recipes' scaled GEMM,
and the probes' rebuild gate with its negative control."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load_probe_script

from artifacts.kernels.quant_reference import block_scale, distributions, fp8_recipes
from artifacts.kernels.quant_reference import minifloat as mf


@pytest.mark.parametrize("fmt, value, code", [
    (mf.E4M3, 448.0, 0x7E), (mf.E4M3, 1.0, 0x38), (mf.E4M3, -1.0, 0xB8), (mf.E4M3, 2.0 ** -9, 0x01),
    (mf.E5M2, 57344.0, 0x7B), (mf.E5M2, 1.0, 0x3C), (mf.E5M2, 2.0 ** -16, 0x01),
    (mf.E2M1, 6.0, 0x7), (mf.E2M1, 0.5, 0x1), (mf.E2M1, 1.0, 0x2), (mf.E2M1, -6.0, 0xF),
    (mf.UE4M3, 448.0, 0x7E),
])
def test_known_codes(fmt, value, code):
    assert int(mf.encode(np.array([value]), fmt)[0]) == code
    assert float(mf.decode(np.array([code]), fmt)[0]) == value


@pytest.mark.parametrize("fmt, nan_codes", [(mf.E4M3, {0x7F, 0xFF}), (mf.E5M2, set(range(0x7C, 0x80)) | set(range(0xFC, 0x100))),
                                            (mf.E2M1, set())])
def test_every_code_round_trips(fmt, nan_codes):
    width = 1 + fmt.exp_bits + fmt.man_bits
    codes = np.array([c for c in range(1 << width) if c not in nan_codes])
    values = mf.decode(codes, fmt)
    assert np.array_equal(mf.round_to(values, fmt), values)
    assert np.array_equal(mf.encode(values, fmt)[values != 0], codes[values != 0].astype(np.uint8))


def test_e2m1_grid_and_ties_to_even():
    assert list(mf.decode(np.arange(8), mf.E2M1)) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    # ties: 0.25 -> 0, 2.5 -> 2, 3.5 -> 4, 5 -> 4 (even mantissa); past the range saturates
    assert list(mf.round_to(np.array([0.25, 2.5, 3.5, 5.0, 7.0, -100.0]), mf.E2M1)) == [0, 2, 4, 4, 6, -6]
    assert mf.round_to(np.array([1000.0]), mf.E4M3)[0] == 448.0


def test_unrepresentable_values_are_refused():
    with pytest.raises(ValueError, match="not representable"):
        mf.encode(np.array([2.5]), mf.E2M1)
    with pytest.raises(ValueError, match="unsigned"):
        mf.round_to(np.array([-1.0]), mf.UE4M3)


def test_e8m0():
    assert list(mf.e8m0_encode(np.array([-127, 0, 127]))) == [0, 127, 254]
    assert np.isnan(mf.e8m0_decode(np.array([0xFF]))[0]) and mf.e8m0_decode(np.array([130]))[0] == 8.0
    with pytest.raises(ValueError):
        mf.e8m0_encode(np.array([128]))


def test_block_sizes_and_scale_types():
    assert (block_scale.MXFP8.block, block_scale.MXFP4.block, block_scale.NVFP4.block) == (32, 32, 16)
    assert (block_scale.MXFP8.scale, block_scale.MXFP4.scale, block_scale.NVFP4.scale) == ("ue8m0", "ue8m0", "ue4m3")
    q = block_scale.quantize(np.ones((4, 64)), block_scale.NVFP4)
    assert q.scale_codes.shape == (4, 4) and q.elements.shape == (4, 64)
    with pytest.raises(ValueError, match="multiple of the block size"):
        block_scale.quantize(np.ones((4, 48)), block_scale.MXFP4)


def test_mx_scale_is_the_ocp_floor_rule_and_clips():
    block = np.zeros((1, 32))
    block[0, 0], block[0, 1] = 7.0, 1.0
    q = block_scale.quantize(block, block_scale.MXFP4)
    # floor(log2 7) - emax(E2M1) = 2 - 2: scale 2^0, so 7 saturates to 6
    assert mf.e8m0_decode(q.scale_codes)[0, 0] == 1.0 and q.elements[0, 0] == 6.0 and q.elements[0, 1] == 1.0
    q8 = block_scale.quantize(block, block_scale.MXFP8)
    assert mf.e8m0_decode(q8.scale_codes)[0, 0] == 2.0 ** (2 - 8)


def test_nvfp4_two_levels():
    x = distributions.sample("normal", (8, 64), np.random.default_rng(1))
    q = block_scale.quantize(x, block_scale.NVFP4)
    assert q.tensor_scale == pytest.approx(np.abs(x).max() / (448 * 6), rel=1e-6)
    scales = q.scales()
    block_amax = np.abs(q.elements).reshape(8, 4, 16).max(axis=-1)
    assert np.all(scales <= 448) and block_amax.max() == 6.0   # the tensor's largest block uses E2M1's top
    assert np.linalg.norm(q.dequantize() - x) / np.linalg.norm(x) < 0.15


def test_sf_offsets_follow_the_128x4_atom():
    offsets = block_scale.sf_offsets(256, 8)
    assert offsets[0, 0] == 0 and offsets[1, 0] == 16 and offsets[32, 0] == 4 and offsets[0, 1] == 1
    assert offsets[0, 4] == 512            # the next atom along K comes first
    assert offsets[128, 0] == 2 * 512      # then the next 128 rows
    assert sorted(offsets.ravel()) == list(range(256 * 8))


def test_scale_buffer_round_trip_and_padding():
    codes = np.random.default_rng(2).integers(0, 255, (130, 5)).astype(np.uint8)
    buffer = block_scale.pack_scales(codes)
    assert buffer.size == 256 * 8
    assert np.array_equal(block_scale.unpack_scales(buffer, 130, 5), codes)
    assert not np.array_equal(block_scale.unpack_scales_row_major(buffer, 130, 5), codes)


def test_fp4_pairs_low_nibble_first():
    packed = block_scale.pack_e2m1_pairs(np.array([[0x1, 0x7, 0xF, 0x2]]))
    assert list(packed[0]) == [0x71, 0x2F]
    assert list(block_scale.unpack_e2m1_pairs(packed)[0]) == [0x1, 0x7, 0xF, 0x2]


def test_outlier_channels():
    x = distributions.sample("outlier-channels", (16, 2048), np.random.default_rng(3))
    assert int((np.abs(x).max(axis=0) > 20).sum()) == 16
    with pytest.raises(ValueError, match="unknown distribution"):
        distributions.sample("uniform", (2, 2), np.random.default_rng(0))


@pytest.mark.parametrize("recipe", fp8_recipes.RECIPES)
def test_scaled_gemm_applies_each_recipe_on_the_right_axes(recipe):
    rng = np.random.default_rng(4)
    a, b = distributions.sample("student-t", (256, 512), rng), rng.standard_normal((256, 512))
    qa, qb = fp8_recipes.quantize_operand(a, recipe, "a"), fp8_recipes.quantize_operand(b, recipe, "b")
    out = fp8_recipes.scaled_gemm(qa, qb, np.matmul)
    assert np.allclose(out, qa.dequantize() @ qb.dequantize().T, rtol=1e-12, atol=1e-9)
    assert np.linalg.norm(out - a @ b.T) / np.linalg.norm(a @ b.T) < 0.1


def test_misapplied_row_scales_are_caught():
    rng = np.random.default_rng(5)
    a, b = distributions.sample("outlier-channels", (256, 512), rng), rng.standard_normal((256, 512))
    qa, qb = fp8_recipes.quantize_operand(a, "per-row", "a"), fp8_recipes.quantize_operand(b, "per-row", "b")
    wrong = fp8_recipes.scaled_gemm(qa, qb, np.matmul, misapply_a_scales=True)
    ref = qa.dequantize() @ qb.dequantize().T
    assert np.linalg.norm(wrong - ref) / np.linalg.norm(ref) > 0.05


def test_recipe_groups_must_divide_the_shape():
    with pytest.raises(ValueError, match="multiple of the scale group"):
        fp8_recipes.quantize_operand(np.ones((100, 256)), "block-1x128", "b")
    with pytest.raises(ValueError, match="unknown recipe"):
        fp8_recipes.quantize_operand(np.ones((4, 4)), "per-channel", "a")


def test_block_scaled_probe_gate_and_control():
    probe = load_probe_script("probe-block-scaled-formats", "block_scaled_formats")
    x = distributions.sample("student-t", (128, 256), np.random.default_rng(6))
    for fmt in block_scale.FORMATS.values():
        q = block_scale.quantize(x, fmt)
        codes, buffer = probe.stored_bytes(q)
        assert np.array_equal(probe.rebuilt(q, codes, buffer), q.dequantize())
        assert not np.array_equal(probe.rebuilt(q, codes, buffer, row_major=True), q.dequantize())
