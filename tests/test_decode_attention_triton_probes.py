"""The host-side parts of probe-decode-gemm, probe-attention-variants and probe-triton-hopper, without a
GPU: swap-AB without padding, split-K's costs, the attended pairs of a bottom-right causal mask (the
FLOPs the attention headline divides by), each probe's cases against what its helpers accept, and
the compile-only verdicts the runner gives on this machine."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT, load_probe_script

from kernelwiki.model import yamlio

decode = load_probe_script("probe-decode-gemm", "decode_gemm_probe")
attention = load_probe_script("probe-attention-variants", "attention_variants_probe")


def _cases(probe_id: str) -> list[dict]:
    spec, _ = yamlio.load((ROOT / "probes" / probe_id / "probe.yaml").read_text(encoding="utf-8"))
    return spec["cases"]


def test_swap_ab_runs_every_case_unpadded():
    """The in-kernel swap takes x as it is: the kernel's problem (N, M, K) with D^T stored M-major is
    one can_implement accepts at every case's M, in the configuration swapped_config gives it."""
    hopper_gemm = pytest.importorskip("artifacts.kernels.hopper_gemm.hopper_gemm")
    bf16 = hopper_gemm.cutlass.BFloat16
    for case in _cases("probe-decode-gemm"):
        m, n, k = (int(case["params"][key]) for key in ("m", "n", "k"))
        config = hopper_gemm.swapped_config(m, n, k)
        assert config.swap_ab and config.tile_n >= m
        hopper_gemm.HopperGemm.can_implement(bf16, bf16, n, m, k, config.tile_n, config.cluster_mn,
                                             tile_m=config.tile_m, split_k=config.split_k, d_major="m")


def test_compulsory_bytes():
    # the split-K workspace is tests/test_hopper_gemm_splitk.py's
    assert decode.compulsory_bytes(1, 4096, 14336) == 2 * (4096 * 14336 + 14336 + 4096)


def test_decode_cases_are_the_m_values_and_weight_shapes_the_page_names():
    cases = _cases("probe-decode-gemm")
    assert sorted({c["params"]["m"] for c in cases}) == [1, 4, 16, 32, 64]
    assert {(c["params"]["n"], c["params"]["k"]) for c in cases} == {(6144, 4096), (4096, 14336)}


def _pairs_by_mask(sq: int, sk: int, causal: bool) -> int:
    keep = np.ones((sq, sk), dtype=bool)
    if causal:
        keep = np.tril(keep, k=sk - sq)
    return int(keep.sum())


@pytest.mark.parametrize("sq, sk", [(1, 1), (4, 4), (3, 8), (512, 4096), (8, 3), (1, 4096)])
@pytest.mark.parametrize("causal", [True, False])
def test_attended_pairs_match_a_bottom_right_mask(sq, sk, causal):
    assert attention.attended_pairs(sq, sk, causal) == _pairs_by_mask(sq, sk, causal)


def test_attention_flops_sum_over_varlen_sequences():
    params = {"seqlens": "256,1024", "heads": 16, "head_dim": 128, "causal": True}
    assert attention.flops(params) == 4 * 16 * 128 * (256 * 257 // 2 + 1024 * 1025 // 2)
    assert attention.sequences({"batch": 2, "sq": 1, "sk": 4096}) == [(1, 4096), (1, 4096)]


def test_attention_cases_cover_the_variants_the_page_lists():
    cases = {c["id"]: c["params"] for c in _cases("probe-attention-variants")}
    ratios = {p["heads"] // p["kv_heads"] for p in cases.values()}
    assert {1, 4, 8, 32} <= ratios                                 # MHA, GQA, MQA
    assert {p["head_dim"] for p in cases.values()} == {64, 128, 256}
    assert any("seqlens" in p for p in cases.values()) and any("page_size" in p for p in cases.values())
    assert any(p.get("sq") and p["sq"] != p["sk"] and p["causal"] for p in cases.values())
    for p in cases.values():
        assert p["heads"] % p["kv_heads"] == 0
        if "page_size" in p:
            assert p["sk"] % p["page_size"] == 0


def test_triton_probe_compile_only_is_skipped_where_triton_is_missing():
    """CI has no Triton: the runner skips the compile-only run with the missing module as the reason."""
    import importlib.util

    from kernelwiki.probing.specs import load_probes
    from kernelwiki.storage.repo import Repo

    spec = load_probes(Repo(ROOT))["probe-triton-hopper"]
    reason = spec.skip_reason("compile-only", None)
    if importlib.util.find_spec("triton") is not None:
        assert reason is None or "torch" in reason
    else:
        assert reason is not None and "triton" in reason


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to bf16, as float32 (what a bf16 output stores)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("m, n, k", [(16, 512, 14336), (64, 256, 16384)])
def test_a_dropped_64_wide_k_tile_fails_the_derived_gate_by_about_ten_times(m, n, k):
    """The decode and Triton probes' negative controls (the last 64-element K tile never read) against
    the gate derived from a bf16-output library's error: fails it, by roughly the ~10x the brief asks."""
    from kernelwiki.harness import gates

    rng = np.random.default_rng(k)
    x = _round_bf16(rng.standard_normal((m, k))).astype(np.float64)
    w = _round_bf16(rng.standard_normal((n, k))).astype(np.float64)
    ref = x @ w.T
    tolerance = gates.reference_tolerance(_round_bf16(ref), ref)
    broken = gates.check(_round_bf16(x[:, :-64] @ w[:, :-64].T), ref, "bf16", **tolerance)
    assert not broken["passed"]
    assert 4 < broken["rel_err"] / tolerance["tol"] < 16
