"""The row-wise kernels (artifacts/kernels/rowwise): the row plan, the input checks, the negative
controls' size against the derived gate (numpy, bf16 rounding emulated), the probe's cases, and what
the sm_90a kernels compile to (no GPU)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import load_probe_script

from kernelwiki.harness import gates

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.rowwise import rmsnorm, rowwise_common, softmax  # noqa: E402

from kernelwiki.harness import compile as compile_mod  # noqa: E402

BF16_BITS = 16


def bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (nearest even), kept as float32."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("n", [8, 64, 1000, 1024, 2928, 3000, 4096, 8192, 16384, 16392, 32768, 65536, 100000, 131072])
def test_the_plan_covers_the_row_within_the_limits(n):
    plan = rowwise_common.plan_row(n, BF16_BITS)
    assert plan.vec == 8 and plan.vecs_per_thread <= rowwise_common.VECS_PER_THREAD
    assert plan.threads_per_row <= rowwise_common.MAX_CTA_THREADS and plan.cluster_n <= rowwise_common.MAX_CLUSTER
    assert plan.threads_per_row & (plan.threads_per_row - 1) == 0
    assert plan.rows_per_cta * plan.threads_per_row == plan.cta_threads
    assert plan.cta_cols * plan.cluster_n >= n                       # the cluster's tile holds the row
    assert (plan.cluster_n - 1) * plan.cta_cols < n                  # and no CTA of it is all padding
    assert plan.cluster_n == 1 or plan.rows_per_cta == 1             # a split row is the CTA's only row


def test_long_rows_go_to_a_cluster_short_rows_share_a_cta():
    assert rowwise_common.plan_row(1024, BF16_BITS).rows_per_cta == 4
    assert rowwise_common.plan_row(16384, BF16_BITS).cluster_n == 1
    assert rowwise_common.plan_row(32768, BF16_BITS).cluster_n == 2
    assert rowwise_common.plan_row(131072, BF16_BITS).cluster_n == 8


@pytest.mark.parametrize("n, message", [(0, r"N=0: rows must have at least one element"),
                                        (1001, r"N=1001 is not a multiple of 8"),
                                        (131080, r"N=131080 exceeds 131072")])
def test_row_length_errors_name_n(n, message):
    for kernel in (rmsnorm.RMSNormForward, softmax.SoftmaxForward):
        with pytest.raises(ValueError, match=message):
            kernel.can_implement(cutlass.BFloat16, n)


def test_unsupported_dtype_is_named():
    with pytest.raises(ValueError, match=r"dtype .*Float32.* unsupported; supported: BFloat16, Float16"):
        softmax.SoftmaxForward.can_implement(cutlass.Float32, 4096)


# --- the negative controls are realistic: they fail the derived gate by a few times, not by orders ---

def _inputs(m: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = bf16(rng.standard_normal((m, n), dtype=np.float32))
    w = bf16(1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32))
    return x, w


def _assert_fails_by_a_few_times(broken, ref, library, correct):
    tolerances = gates.reference_tolerance(library, ref)
    assert gates.check(correct, ref, "bf16", **tolerances)["passed"]
    result = gates.check(broken, ref, "bf16", **tolerances)
    assert not result["passed"]
    assert result["rel_err"] < 10 * tolerances["tol"]


def test_rmsnorm_over_the_tile_width_fails_the_gate_by_a_few_times():
    n = 2928
    tile = rowwise_common.plan_row(n, BF16_BITS).cta_cols
    assert tile == 3072
    x, w = _inputs(512, n)
    sum_sq = (x.astype(np.float64) ** 2).sum(axis=1, keepdims=True)
    ref = x / np.sqrt(sum_sq / n + 1e-6) * w
    library = bf16(bf16(x / np.sqrt(sum_sq / n + 1e-6)) * w)      # torch eager: x_hat rounded, then * w
    correct = bf16(ref)
    broken = bf16(x / np.sqrt(sum_sq / tile + 1e-6) * w)
    _assert_fails_by_a_few_times(broken, ref, library, correct)


def test_softmax_with_zero_padding_fails_the_gate_by_a_few_times():
    n = 2928
    padding = rowwise_common.plan_row(n, BF16_BITS).cta_cols - n
    x, _ = _inputs(512, n, seed=1)
    shifted = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    ref = shifted / shifted.sum(axis=1, keepdims=True)
    zeros_term = padding * np.exp(-x.max(axis=1, keepdims=True).astype(np.float64))
    broken = bf16(shifted / (shifted.sum(axis=1, keepdims=True) + zeros_term))
    _assert_fails_by_a_few_times(broken, ref, bf16(ref), bf16(ref))


# --- the probe ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def probe():
    return load_probe_script("probe-rowwise-membound", "rowwise_probe")


def test_probe_cases_are_2_gib_sweeps_plus_anchor_and_ragged(probe):
    from kernelwiki.model import yamlio
    from conftest import ROOT

    spec, _ = yamlio.load((ROOT / "probes" / "probe-rowwise-membound" / "probe.yaml").read_text(encoding="utf-8"))
    shapes = {}
    for case in spec["cases"]:
        m, n = probe.parse_shape(case["params"]["shape"])
        shapes.setdefault(case["params"]["op"], set()).add((m, n))
        if case["params"]["set"] == "2 GiB input":
            assert m * n * 2 == 2**31
    for op in ("rmsnorm", "softmax"):
        assert {n for _, n in shapes[op]} == {1024, 4096, 8192, 32768, 131072, probe.RAGGED_N}
        assert (32768, 4096) in shapes[op]
    assert probe.moved_bytes("softmax", 4, 8) == 2 * 4 * 8 * 2
    assert probe.moved_bytes("rmsnorm", 4, 8) == 2 * 4 * 8 * 2 + 8 * 2


# --- what the kernels compile to -----------------------------------------------------------------

@pytest.fixture(scope="module")
def sass():
    out = {}
    for name, module in (("rmsnorm", rmsnorm), ("softmax", softmax)):
        for n in (1024, 2928, 4096, 131072):
            emitted = compile_mod.from_cute(module.compile_for("sm_90a", n), "sm_90a")
            if emitted.sass is None:
                pytest.skip("no nvdisasm")
            out[name, n] = emitted.sass
    return out


def test_every_global_access_is_a_16_byte_vector_and_nothing_spills(sass):
    for key, text in sass.items():
        loads = re.findall(r"\bLDG\.E(\.\d+)?\b", text)
        stores = re.findall(r"\bSTG\.E(\.\d+)?\b", text)
        assert loads and set(loads) == {".128"}, key
        assert stores and set(stores) == {".128"}, key
        assert not re.search(r"\b(STL|LDL)\b", text), f"{key}: local memory"


def test_cluster_rows_reduce_with_st_async_and_no_fence(sass):
    for op in ("rmsnorm", "softmax"):
        cluster, single = sass[op, 131072], sass[op, 4096]
        assert "STAS" in cluster and "SYNCS.ARRIVE.TRANS64" in cluster
        assert "MEMBAR" not in cluster and not re.search(r"\bST\.E\b", cluster)
        assert "STAS" not in single and "UCGABAR" not in single


def test_softmax_uses_one_ex2_per_element(sass):
    # 4 vectors of 8 per thread
    assert sass["softmax", 4096].count("MUFU.EX2") == 32
