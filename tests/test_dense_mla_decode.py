"""probe-dense-mla-decode on the CPU: its FLOP and byte counts, the causal mask of MTP, its cases, the
skip where FlashMLA is not built, and a NumPy model showing that the softmax-scale control fails the
derived bf16 gate by less than 10x."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROOT, load_probe_script
from kernelwiki.harness import gates
from kernelwiki.model import yamlio


def _probe():
    return load_probe_script("probe-dense-mla-decode", "dense_mla_probe")


def _spec() -> dict:
    spec, _ = yamlio.load((ROOT / "probes/probe-dense-mla-decode/probe.yaml").read_text())
    return spec


def test_mtp_tokens_see_the_keys_up_to_their_own_position():
    probe = _probe()
    assert probe.visible_keys(1, 1024) == [1024]
    assert probe.visible_keys(2, 1024) == [1023, 1024]   # the first of two tokens does not see the second


def test_flops_and_bytes_follow_the_absorbed_form():
    probe = _probe()
    # 2 x (576 + 512) FLOP per head per attended key; MTP attends 2L - 1 pairs per head
    assert probe.flops(1, 1024, 1) == 2 * 1088 * 128 * 1024
    assert probe.flops(2, 1024, 2, heads=16) == 2 * 1088 * 16 * 2 * 2047
    # the latent rows are read once for all heads: 576 bf16 values per token
    assert probe.kv_bytes(4, 4096) == 4 * 4096 * 1152
    moved = probe.bytes_moved(1, 1024, 1)
    assert moved == 1024 * 1152 + 128 * (1152 + 1024 + 4) + 4 * 16 + 4
    ratio = probe.per_token(1)
    assert ratio["flops_per_kv_token"] == 2 * 128 * 1088 and ratio["bytes_per_kv_token"] == 1152
    assert ratio["flop_per_byte_kv"] == pytest.approx(241.78, abs=0.01)   # about 2 x heads x s_q
    assert probe.per_token(2, 16)["flop_per_byte_kv"] == pytest.approx(2 * probe.per_token(1, 16)["flop_per_byte_kv"])


def test_the_cases_are_the_deepseek_v3_grid():
    spec = _spec()
    grid = {(b, kv, sq, 128) for b in (1, 16, 64, 128) for kv in (1024, 4096, 16384) for sq in (1, 2)}
    grid |= {(128, 4096, 1, 16), (128, 16384, 1, 16)}
    seen = {(c["params"]["batch"], c["params"]["kv_len"], c["params"]["s_q"], c["params"]["heads"]) for c in spec["cases"]}
    assert seen == grid and len(spec["cases"]) == len(grid)
    for case in spec["cases"]:
        p = case["params"]
        assert p["kv_len"] % p["page_block"] == 0 and (p["d_qk"], p["d_v"], p["dtype"]) == (576, 512, "bf16")
        assert case["id"] == p["shape"]


def test_every_control_is_described_and_flashmla_absent_is_a_skip():
    probe = _probe()
    assert set(probe.NEGATIVE_CONTROLS) == set(_spec()["negative_control"])
    reason = probe.flashmla.unavailable()
    assert reason is None or ("not importable" in reason and "flashmla-dense.sh" in reason)


def _bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)


def _attention(q, k, scale, low=False):
    """softmax(q k^T scale) k[:, :512]; `low`: what torch-matmul does (bf16 scores, bf16 P, bf16 O)."""
    s = q @ k.T
    s = (_bf16(s) if low else s) * scale
    p = np.exp(s - s.max(1, keepdims=True))
    l = p.sum(1, keepdims=True)
    return _bf16((_bf16(p) @ k[:, :512]) / l) if low else (p / l) @ k[:, :512]


@pytest.mark.parametrize("kv_len", [1024, 4096])
def test_the_softmax_scale_control_fails_the_derived_gate_by_less_than_ten_times(kv_len):
    """16 heads of normal bf16 q and cache rows: the gate is DERIVED_FACTOR x torch bf16's error; the
    1/sqrt(512) scale lands between 1 and 10 times it, and a correct bf16 computation passes."""
    probe = _probe()
    rng = np.random.default_rng(kv_len)
    q, k = _bf16(rng.standard_normal((16, 576))), _bf16(rng.standard_normal((kv_len, 576)))
    ref = _attention(q, k, probe.SCALE)
    tol = gates.reference_tolerance(_attention(q, k, probe.SCALE, low=True), ref)
    wrong = gates.check(_bf16(_attention(q, k, probe.WRONG_SCALE)), ref, "bf16", **tol)
    assert not wrong["passed"] and 1 < gates.error_over_gate(wrong) < gates.CONTROL_BLUNT_FACTOR
    assert gates.check(_bf16(ref), ref, "bf16", **tol)["passed"]
