"""The row-wise kernels (artifacts/kernels/rowwise): the row plan, the refusals, the softmax order on
special values and the negative controls' size against the derived gate (numpy, bf16/fp16 rounding
emulated), the probe's cases and compile jobs, and what the sm_90a kernels compile to (no GPU)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from conftest import ROOT, load_probe_script

from kernelwiki.harness import gates

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.rowwise import norm, rowwise_common, softmax  # noqa: E402

from kernelwiki.harness import compile as compile_mod  # noqa: E402

SMEM_PER_SM = 227 * 1024
REGISTERS_PER_SM = 65536


def bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (nearest even), kept as float32."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def fp16(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)


ROUND = {"bf16": bf16, "fp16": fp16}


# --- the plan ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [16, 32])
@pytest.mark.parametrize("inputs", [1, 2])
@pytest.mark.parametrize("n", [8, 64, 256, 1000, 1024, 2928, 4096, 7168, 16288, 16384, 16392, 32768, 50000, 65536,
                               100000, 131072, 200000, 262144])
def test_the_plan_covers_the_row_within_the_limits(width, inputs, n):
    vec = 128 // width
    n = n - n % vec
    plan = rowwise_common.plan_row(n, width, inputs)
    assert plan.vec == vec and plan.threads_per_row & (plan.threads_per_row - 1) == 0
    assert plan.cta_threads <= rowwise_common.MAX_CTA_THREADS and plan.cluster_n <= rowwise_common.MAX_CLUSTER
    assert plan.rows_per_cta * plan.threads_per_row == plan.cta_threads
    assert plan.cta_cols * plan.cluster_n >= n                       # the cluster's tile holds the row
    assert (plan.cluster_n - 1) * plan.cta_cols < n                  # and no CTA of it is all padding
    assert plan.cluster_n == 1 or plan.rows_per_cta == 1             # a split row is the CTA's only row
    assert plan.stage_bytes(inputs, width) <= rowwise_common.MAX_STAGE_BYTES
    assert plan.stage_bytes(inputs, width) + 4096 <= SMEM_PER_SM      # it launches


def test_long_rows_go_to_a_cluster_short_rows_share_a_cta():
    plan = rowwise_common.plan_row
    assert plan(256, 16).rows_per_cta == 32 and plan(1024, 16).rows_per_cta == 8
    assert plan(16384, 16).cluster_n == 1 and plan(32768, 16).cluster_n == 2
    assert plan(131072, 16).cluster_n == 8 and plan(262144, 16).cluster_n == 16
    assert plan(262144, 32).stage_bytes(1, 32) == 64 * 1024          # the longest fp32 rows stage more per CTA
    assert plan(131072, 16, inputs=2).cluster_n == 16                 # residual add: two rows staged


def test_a_cta_stages_32_kib_so_six_fit_an_sm_and_norms_hold_their_weights_in_five():
    for n in (16384, 65536, 131072, 262144):
        plan = rowwise_common.choose_plan(n, 16)
        assert plan.stage_bytes(1, 16) == rowwise_common.STAGE_BYTES and plan.ctas_per_sm(1, 16) == 6
        weighted = rowwise_common.choose_plan(n, 16, weighted=True)
        assert weighted.cta_threads == 128 and weighted.vecs_per_thread == 16 and weighted.ctas_per_sm(1, 16, 1) == 5


def test_a_launch_of_less_than_a_wave_spreads_each_row_thin():
    for m, n in ((1, 4096), (8, 4096), (1, 16384), (8, 16384), (4, 7168)):
        plan = rowwise_common.choose_plan(n, 16, weighted=True, m=m, sms=132)
        assert plan.vecs_per_thread <= rowwise_common.LATENCY_VECS and plan.cluster_n == 1
    assert rowwise_common.choose_plan(4096, 16, m=8192, sms=132).vecs_per_thread == 8
    assert rowwise_common.choose_plan(4096, 16, m=1) == rowwise_common.choose_plan(4096, 16)   # no SM count: by N


@pytest.mark.parametrize("n, message", [(0, r"N=0: rows must have at least one element"),
                                        (1001, r"N=1001 is not a multiple of 8"),
                                        (262152, r"N=262152 exceeds 262144")])
def test_row_length_errors_name_n(n, message):
    for kernel in (norm.NormForward, softmax.SoftmaxForward):
        with pytest.raises(ValueError, match=message):
            kernel.can_implement(cutlass.BFloat16, n)
    with pytest.raises(ValueError, match=r"N=1002 is not a multiple of 4"):
        softmax.SoftmaxForward.can_implement(cutlass.Float32, 1002)


def test_unsupported_dtypes_and_variants_are_named():
    for dtype in (cutlass.Float64, cutlass.Int8, cutlass.Float8E4M3FN):
        with pytest.raises(ValueError, match=rf"dtype .*{dtype.__name__}.* unsupported; supported: BFloat16, Float16, Float32"):
            norm.NormForward.can_implement(dtype, 4096)
    plan = rowwise_common.plan_row(4096, 16)
    with pytest.raises(ValueError, match=r"op 'groupnorm' unknown; supported: rmsnorm, add_rmsnorm, layernorm"):
        norm.NormForward("groupnorm", cutlass.BFloat16, plan, True)
    with pytest.raises(ValueError, match=r"broken variant 'nan' unknown"):
        softmax.SoftmaxForward(cutlass.BFloat16, plan, True, broken="nan")


# --- softmax on special values: the order of the subtraction and the scaling ---------------------------------

def _torch_softmax(x: np.ndarray) -> np.ndarray:
    """torch.softmax's arithmetic (fp32): the maximum, exp(x - max), its sum, the quotient."""
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(np.where(np.isnan(x), -np.inf, x), axis=-1, keepdims=True)
        e = np.exp(x - m)
        return e / e.sum(axis=-1, keepdims=True)


def _ours(x: np.ndarray, scale_first: bool = False) -> np.ndarray:
    """Our kernel's arithmetic in fp32: exp2((x - max) * log2 e), or the first version's
    exp2(x * log2 e - max * log2 e)."""
    x = x.astype(np.float32)
    log2e = np.float32(math.log2(math.e))
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(np.where(np.isnan(x), -np.inf, x), axis=-1, keepdims=True)
        t = (x * log2e - m * log2e) if scale_first else (x - m) * log2e
        e = np.exp2(t.astype(np.float32))
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_softmax_subtracts_the_max_first_and_special_rows_behave_as_torch(dtype):
    big = {"bf16": float(bf16(np.float32(3.3895314e38))), "fp16": 65504.0, "fp32": float(np.finfo(np.float32).max)}[dtype]
    rng = np.random.default_rng(0)
    normal = rng.standard_normal(64).astype(np.float32)
    rows = np.stack([np.full(64, big), np.full(64, -big), np.where(np.arange(64) == 7, big, normal),
                     np.tile([big, -big], 32), np.full(64, -np.inf), np.full(64, np.inf),
                     np.where(np.arange(64) == 3, -np.inf, normal), np.where(np.arange(64) == 3, np.inf, normal),
                     np.where(np.arange(64) == 9, np.nan, normal), normal]).astype(np.float32)
    expected, ours = _torch_softmax(rows), _ours(rows)
    assert np.array_equal(np.isnan(expected), np.isnan(ours))
    assert np.isnan(expected[4:6]).all() and np.isnan(expected[7:9]).all()     # -inf, +inf, NaN rows: NaN as torch
    finite = ~np.isnan(expected)
    assert np.allclose(ours[finite], expected[finite], rtol=1e-5, atol=1e-7)
    assert np.allclose(expected[0], 1 / 64) and np.allclose(expected[3][::2], 1 / 32)
    if dtype != "fp16":   # the first version's order overflows fp32 at the largest values
        assert np.isnan(_ours(rows[:1], scale_first=True)).all()


# --- the negative controls are realistic: they fail the derived gate by a few times, not by orders -------------

def _inputs(m: int, n: int, dtype: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = ROUND[dtype](rng.standard_normal((m, n), dtype=np.float32))
    w = ROUND[dtype](1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32))
    return x, w


def _ratios(broken, ref, library) -> tuple[float, float]:
    """(relative error / gate, largest-element error / gate) of a broken output under the derived gate."""
    tolerances = gates.reference_tolerance(library, ref)
    assert gates.check(library, ref, "bf16", **tolerances)["passed"]
    result = gates.check(broken, ref, "bf16", **tolerances)
    return result["rel_err"] / tolerances["tol"], result["max_abs_err"] / tolerances["max_abs_tol"]


@pytest.mark.parametrize("dtype, n", [("bf16", 2928), ("fp16", 16288)])
def test_rmsnorm_over_the_tile_width_fails_both_gates_by_a_few_times(dtype, n):
    plan = rowwise_common.choose_plan(n, 16, weighted=True)
    tile = plan.cta_cols * plan.cluster_n
    assert tile > n
    x, w = _inputs(256, n, dtype)
    sum_sq = (x.astype(np.float64) ** 2).sum(axis=1, keepdims=True)
    ref = x / np.sqrt(sum_sq / n + 1e-6) * w
    library = ROUND[dtype](ref)                                   # torch's fused rms_norm: one rounding
    broken = ROUND[dtype](x / np.sqrt(sum_sq / tile + 1e-6) * w)
    rel, largest = _ratios(broken, ref, library)
    assert 1.5 < rel < 10 and 1.5 < largest < 10, (rel, largest)


@pytest.mark.parametrize("dtype, n", [("bf16", 2928), ("fp16", 16288)])
def test_softmax_with_zero_padding_fails_both_gates_by_a_few_times(dtype, n):
    padding = rowwise_common.choose_plan(n, 16).cta_cols - n
    x, _ = _inputs(256, n, dtype, seed=1)
    shifted = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    ref = shifted / shifted.sum(axis=1, keepdims=True)
    zeros_term = padding * np.exp(-x.max(axis=1, keepdims=True).astype(np.float64))
    broken = ROUND[dtype](shifted / (shifted.sum(axis=1, keepdims=True) + zeros_term))
    rel, largest = _ratios(broken, ref, ROUND[dtype](ref))
    assert 1.5 < rel < 10 and 1.5 < largest < 10, (rel, largest)


# --- the probe ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def probe():
    return load_probe_script("probe-rowwise-membound", "rowwise_probe")


@pytest.fixture(scope="module")
def spec():
    from kernelwiki.model import yamlio

    loaded, _ = yamlio.load((ROOT / "probes" / "probe-rowwise-membound" / "probe.yaml").read_text(encoding="utf-8"))
    return loaded


def test_probe_cases_cover_every_op_dtype_and_row_length_and_decode(probe, spec):
    ops = load_probe_script("probe-rowwise-membound", "rowwise_ops")
    bandwidth, decode = set(), set()
    for case in spec["cases"]:
        params = case["params"]
        if params.get("set") == "decode":
            decode.add((params["op"], int(params["m"]), int(params["n"])))
        elif params.get("set") is None:
            op, dtype, m, n = probe.case_shape(params)
            assert m * n * ops.element_bytes(dtype) == ops.INPUT_BYTES
            assert case["id"] == f"{op}-{dtype}-{n}"
            bandwidth.add((op, dtype, n))
    assert {op for op, _, _ in bandwidth} == set(ops.OPS) and {dtype for _, dtype, _ in bandwidth} == set(ops.DTYPES)
    assert {n for _, dtype, n in bandwidth if dtype == "bf16"} == {256, 1024, 16384, 131072, 262144}
    assert len(bandwidth) == len(ops.OPS) * 8
    assert {(m, n) for _, m, n in decode} == {(1, 4096), (8, 16384)}
    assert {op for op, _, _ in decode} == set(ops.OPS)
    assert any(case["params"].get("set") == "special values" for case in spec["cases"])
    assert set(spec["negative_control"]) == {f"{op}-{dtype}" for op, dtype in probe.CONTROLS}
    assert set(probe.CONTROLS) == {(op, dtype) for op in ops.OPS for dtype in ops.DTYPES}


def test_moved_bytes_count_every_tensor_once():
    ops = load_probe_script("probe-rowwise-membound", "rowwise_ops")
    assert ops.moved_bytes("softmax", 4, 8, 2) == 2 * 4 * 8 * 2
    assert ops.moved_bytes("rmsnorm", 4, 8, 2) == (2 * 4 * 8 + 8) * 2
    assert ops.moved_bytes("add_rmsnorm", 4, 8, 4) == (4 * 4 * 8 + 8) * 4
    assert ops.moved_bytes("layernorm", 4, 8, 2) == (2 * 4 * 8 + 2 * 8) * 2


def test_precompile_covers_every_case_once_compile_jobs_last(probe, spec):
    jobs = probe.precompile_jobs(spec["cases"])
    assert len(jobs) == len(set(jobs))
    kinds = [job[0] for job in jobs]
    assert kinds == sorted(kinds, key=("compile", "quack", "ours").index)     # the longest jobs first
    assert ("ours", "softmax", "fp32", 262144, None, 512) in jobs and ("quack", "layernorm", "fp16", 131072) in jobs
    assert ("compile", "add_rmsnorm", "bf16", 8, 16384) in jobs and ("ours", "add_rmsnorm", "bf16", 16384, None, 8) in jobs
    assert ("ours", "rmsnorm", "bf16", 2928, "tile_mean", probe.CONTROL_ROWS) in jobs


# --- what the kernels compile to -----------------------------------------------------------------------------

SASS_CASES = [(op, cutlass.BFloat16, n, None) for op in (*norm.OPS, "softmax") for n in (1024, 2928, 131072)] \
    + [(op, cutlass.Float32, 262144, None) for op in (*norm.OPS, "softmax")] \
    + [(op, cutlass.BFloat16, 7168, 1) for op in (*norm.OPS, "softmax")] + [("layernorm", cutlass.BFloat16, 4096, 1)]
"""Several rows per CTA, column predicates, clusters of 8 and 16, fp32's 64 KiB stages (128 KiB with the
residual), and the latency plan of a one-row launch (for LayerNorm also at 1 x 4096, the decode case)."""


def _compiled(op, dtype, n, m):
    if op == "softmax":
        kernel = softmax._settings(dtype, n, None, None, m, 132)
        return kernel, softmax._compile(kernel, "sm_90a")
    kernel = norm._settings(op, dtype, n, True, op == "layernorm", None, None, m, 132)
    return kernel, norm._compile(kernel, "sm_90a")


@pytest.fixture(scope="module")
def sass():
    out = {}
    for op, dtype, n, m in SASS_CASES:
        kernel, compiled = _compiled(op, dtype, n, m)
        out[op if dtype is cutlass.BFloat16 and m is None else f"{op}-{dtype.__name__}-{m}", n] = \
            (kernel, compile_mod.from_cute(compiled, "sm_90a").sass)
    if any(text is None for _, text in out.values()):
        pytest.skip("no nvdisasm")
    return out


def test_rows_are_staged_with_16_byte_cp_async_and_nothing_spills(sass):
    for key, (_, text) in sass.items():
        assert set(re.findall(r"\bLDGSTS\.E\.BYPASS(?:\.LTC128B)?(\.\d+)", text)) == {".128"}, key
        assert not re.search(r"\bLDG\.E(\.(?!128)\d+)?\s", text), f"{key}: a global load narrower than 16 bytes"
        assert set(re.findall(r"\bSTG\.E(\.\d+)?\b", text)) == {".128"}, key
        assert set(re.findall(r"\bLDS(\.\d+)?\b", text)) <= {".128", ""}, key
        assert not re.search(r"\b(STL|LDL)\b", text), f"{key}: local memory"


def test_the_registers_fit_the_ctas_per_sm_the_plan_counts_on(sass):
    for key, (kernel, text) in sass.items():
        registers = max(int(r) for r in re.findall(r"\bR(\d+)\b", text)) + 1
        inputs = 2 if key[0].startswith("add_rmsnorm") else 1
        ctas = kernel.plan.ctas_per_sm(inputs, kernel.dtype.width, getattr(kernel, "held_vectors", 0), kernel.exact)
        assert registers * kernel.plan.cta_threads * ctas <= REGISTERS_PER_SM, (key, registers, ctas)
    assert sass["softmax", 131072][0].plan.ctas_per_sm(1, 16) == 6       # softmax: shared memory is the limit


def test_cluster_rows_reduce_with_st_async_and_no_fence(sass):
    for op in (*norm.OPS, "softmax"):
        cluster, single = sass[op, 131072][1], sass[op, 1024][1]
        assert "STAS" in cluster and "SYNCS.ARRIVE.TRANS64" in cluster
        assert "MEMBAR" not in cluster and not re.search(r"\bST\.E\b", cluster)
        assert "STAS" not in single and "UCGABAR" not in single


def test_the_residual_variant_stores_two_rows_and_softmax_one_ex2_per_element_and_pass(sass):
    # the residual stored in the first pass (a loop of UNROLL vectors), the output in the unrolled last one
    add, plain = sass["add_rmsnorm", 1024], sass["rmsnorm", 1024]
    assert add[1].count("STG.E.128") == rowwise_common.UNROLL + add[0].plan.vecs_per_thread
    assert plain[1].count("STG.E.128") == plain[0].plan.vecs_per_thread
    # the weight loaded once per vector, and the bias
    assert plain[1].count("LDG.E.128") == plain[0].plan.vecs_per_thread
    assert sass["layernorm", 1024][1].count("LDG.E.128") == 2 * sass["layernorm", 1024][0].plan.vecs_per_thread
    # two passes (sum, quotients) x UNROLL vectors of 8 per loop body
    assert sass["softmax", 1024][1].count("MUFU.EX2") == 2 * rowwise_common.UNROLL * 8


def test_layernorm_loads_its_weight_and_bias_ahead_of_the_stores(sass):
    """ptxas keeps a load behind every earlier store that may alias it: the bias loaded vector by vector
    in the last pass was one LDG between each two STGs, one L2 round trip per vector. Now the bias is
    held from the start (under 4 vectors per thread), or the weight and bias of the next group are loaded
    before the current group's stores."""
    assert sass["layernorm-Float32-None", 262144][0].bias_group == 8
    for key in (("layernorm-Float32-None", 262144), ("layernorm", 131072), ("layernorm-BFloat16-1", 4096)):
        kernel, text = sass[key]
        vectors = kernel.plan.vecs_per_thread
        group = kernel.bias_group or vectors
        assert not re.search(r"\b(STL|LDL)\b", text), key
        flow = "".join("S" if op == "STG" else "L" for op in re.findall(r"\b(LDG|STG)\.E\.128\b", text))
        assert flow.count("L") == 2 * vectors and flow.count("S") == vectors, key    # the weight, the bias once
        first, *between, last = flow.split("S")
        assert len(first) >= 2 * min(2 * group, vectors), (key, flow)                # two groups before any store
        assert {len(loads) for loads in between} <= {0, 2 * group} and not last, (key, flow)
