"""The correctness gate: it must fail on every kind of wrong output, and pass a correct one.

Runs on numpy arrays here (no torch on the CI machine); `check` takes torch tensors the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelwiki.harness import gates


def product(seed: int = 0, dtype=np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, exact FP64 product) of normal inputs."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((64, 256)).astype(dtype), rng.standard_normal((256, 48)).astype(dtype)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Round FP32 to bfloat16 (round to nearest even) and back, as a bf16 kernel's output would be."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def to_tf32(x: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def test_correct_output_passes_and_reports_its_error():
    a, b, ref = product()
    result = gates.check(to_bf16(a @ b), ref, "bf16")
    assert result["passed"] and result["all_written"] and result["tolerance_basis"] == "table"
    assert 0 < result["rel_err"] < gates.TOLERANCES["bf16"]


def test_nan_never_passes():
    a, b, ref = product()
    out = (a @ b).astype(np.float64)
    out[3, 7] = np.nan
    result = gates.check(out, ref, "fp32")
    assert not result["passed"] and not result["all_written"] and result["nan_count"] == 1
    assert result["rel_err"] is None and result["max_abs_err"] is None


def test_nan_in_the_reference_fails():
    _, _, ref = product()
    bad = ref.copy()
    bad[0, 0] = np.nan
    assert not gates.check(ref, bad, "fp32")["passed"]


def test_shape_mismatch_fails_with_a_reason():
    _, _, ref = product()
    result = gates.check(ref[:, :-1], ref, "fp32")
    assert not result["passed"] and "shape (64, 47) != reference (64, 48)" in result["reason"]


def test_exact_mode_counts_mismatches():
    src = np.arange(1000, dtype=np.float32).reshape(10, 100)
    assert gates.check(src.copy(), src, "exact")["passed"]
    out = src.copy()
    out[4, 2] += 1
    result = gates.check(out, src, "exact")
    assert not result["passed"] and result["mismatched"] == 1 and result["max_abs_err"] == 1.0


def test_one_corrupted_element_fails_though_the_frobenius_error_is_small():
    a, b, ref = product()
    out = (a @ b).astype(np.float64)
    out[10, 10] += 0.5 * np.sqrt(np.mean(ref ** 2))        # one element off by half the RMS
    result = gates.check(out, ref, "bf16")
    assert result["rel_err"] < gates.TOLERANCES["bf16"]      # the norm alone would let it through
    assert not result["passed"] and result["max_abs_err"] > result["max_abs_tolerance"]


def test_skipped_k_tile_fails():
    a, b, ref = product()
    out = a[:, :192] @ b[:192]                               # the last 64 of K never accumulated
    assert not gates.check(out, ref, "bf16")["passed"]


def test_zero_reference_allows_no_error():
    ref = np.zeros((8, 8))
    assert gates.check(np.zeros((8, 8)), ref, "bf16")["passed"]
    out = np.zeros((8, 8))
    out[1, 1] = 1e-3
    assert not gates.check(out, ref, "bf16")["passed"]


def test_unknown_dtype_is_an_error():
    with pytest.raises(ValueError, match="no tolerance for dtype 'fp12'"):
        gates.check(np.zeros(2), np.zeros(2), "fp12")


def test_derived_tolerance_catches_bf16_rounding_that_the_tf32_table_lets_through():
    a, b, _ = product()
    a, b = to_tf32(a), to_tf32(b)                            # inputs already representable in TF32
    ref = a.astype(np.float64) @ b.astype(np.float64)
    library = (a @ b).astype(np.float32)                      # same-precision computation, FP32 accumulation
    sloppy = to_bf16(library)                                # a kernel that rounded its result to bf16
    assert gates.check(sloppy, ref, "tf32")["passed"]        # the table is too loose to notice
    derived = gates.reference_tolerance(library, ref)
    assert derived["tol"] < gates.TOLERANCES["tf32"] / 10
    assert gates.check(library, ref, "tf32", **derived)["passed"]
    result = gates.check(sloppy, ref, "tf32", **derived)
    assert not result["passed"] and result["tolerance_basis"] == "derived"


def test_derived_tolerance_has_a_floor():
    _, _, ref = product()
    derived = gates.reference_tolerance(ref, ref)
    assert derived["tol"] == gates.DERIVED_FLOOR and derived["max_abs_tol"] > 0
    with pytest.raises(ValueError):
        gates.reference_tolerance(ref[:1], ref)


def test_relative_error_is_the_frobenius_ratio():
    ref = np.array([3.0, 4.0])
    assert gates.relative_error(np.array([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert gates.relative_error(np.array([0.0, 0.5]), np.zeros(2)) == pytest.approx(0.5)   # zero reference: absolute


def test_bit_exact_counts_every_differing_element_and_nan():
    other = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert gates.bit_exact(other.copy(), other, "cuBLAS")["passed"]
    out = other.copy()
    out[0, 1] = np.nextafter(out[0, 1], np.float32(100))      # one ulp: within any tolerance, still a change
    out[2, 3] = np.nan
    result = gates.bit_exact(out, other, "cuBLAS")
    assert not result["passed"] and result["differing"] == 2 and result["against"] == "cuBLAS"
    assert gates.bit_exact(out, other, "cuBLAS", allowed=2)["passed"]
    assert not gates.bit_exact(out[:2], other, "cuBLAS")["passed"]


def test_lse_gate_checks_finite_entries_and_the_empty_rows():
    ref = np.array([[1.5, np.inf], [2.0, 3.0]])
    assert gates.check_lse(ref + 1e-5, ref, 1e-3)["passed"]
    off = ref.copy()
    off[1, 0] += 2e-3                                          # a softmax denominator 0.2 % off
    assert not gates.check_lse(off, ref, 1e-3)["passed"]
    empty_row_written = ref.copy()
    empty_row_written[0, 1] = -np.inf                          # the split partials' convention leaked out
    result = gates.check_lse(empty_row_written, ref, 1e-3)
    assert not result["passed"] and not result["infinite_entries_match"]
    unwritten = ref.copy()
    unwritten[1, 1] = np.nan
    assert not gates.check_lse(unwritten, ref, 1e-3)["passed"]


def test_elementwise_relative_gate_sees_the_small_values_a_norm_hides():
    exact = 2.0 ** np.linspace(-120, 0, 1000)
    out = exact.copy()
    out[10] *= 1.01                                            # a tiny value 1 % off
    assert gates.check(out, exact, "fp32")["passed"]           # the norm is the largest values'
    result = gates.check_relative_elements(out, exact, 2.0**-12)
    assert not result["passed"] and result["rel_err"] == pytest.approx(0.01)
    assert gates.check_relative_elements(exact * (1 + 1e-6), exact, 2.0**-12)["passed"]
    assert gates.check_relative_elements(out, exact, 2.0**-12, where=np.arange(1000) != 10)["passed"]
    assert not gates.check_relative_elements(exact, np.zeros(1000), 1.0)["passed"]


def test_combine_fails_when_any_part_fails_and_keeps_the_first_parts_errors():
    _, _, ref = product()
    good = gates.check(ref, ref, "fp32")
    bad = gates.bit_exact(ref + 1, ref, "cuBLAS")
    combined = gates.combine({"d": good, "bit_exact": bad})
    assert not combined["passed"] and combined["rel_err"] == good["rel_err"]
    assert combined["parts"]["bit_exact"]["differing"] == ref.size
    assert gates.combine({"d": good, "again": good})["passed"]
    with pytest.raises(ValueError):
        gates.combine({})


def test_untouched_means_the_poison_is_still_everywhere():
    skipped = np.full((4, 8), np.nan, dtype=np.float32)
    assert gates.untouched(skipped)
    skipped[3, 7] = 0.0                                        # one padding element written
    assert not gates.untouched(skipped)
    assert gates.untouched(np.full(5, -1, dtype=np.int32))
    assert not gates.untouched(np.array([-1, 0], dtype=np.int32))


def test_metrics_become_scalars_the_record_schema_accepts():
    """A probe that reports a mapping or a list in its metrics (seen on the H200: three new probes
    failed the record schema) gets dotted keys and JSON text instead of a failed run."""
    from kernelwiki.harness.probe import scalar_metrics

    flat = scalar_metrics({"support": {"fa4": "supported", "cudnn": {"fp8": False}}, "sizes": [1, 2], "n": 3})
    assert flat == {"support.fa4": "supported", "support.cudnn.fp8": False, "sizes": "[1, 2]", "n": 3}
