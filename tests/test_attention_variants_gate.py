"""probe-attention-variants' gate and negative control on the CPU, in NumPy at the paged-decode shape:
a flash-style bf16 kernel passes the gate derived from the rounded bf16 math (twice its error), the
stale-cache-length control (seqused_k short by the probe's STALE_KEYS) fails it within 10x, and the
earlier control (one page of sequence 0 taken from sequence 1) lands past 10x."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT, load_probe_script

from kernelwiki.harness import gates
from kernelwiki.model import yamlio

probe = load_probe_script("probe-attention-variants", "attention_variants_probe")


def _cases() -> dict:
    spec, _ = yamlio.load((ROOT / "probes" / "probe-attention-variants" / "probe.yaml").read_text(encoding="utf-8"))
    return {case["id"]: case["params"] for case in spec["cases"]}


def _bf16(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)


def _decode(q: np.ndarray, k: np.ndarray, v: np.ndarray, how: str) -> np.ndarray:
    """One decode query per head (kv_heads, group, d) against k, v (kv_heads, keys, d). how: "exact"
    (FP64), "math" (the probe's rounded reference: normalized P and the output rounded to bf16) or
    "kernel" (a flash kernel: unnormalized P rounded to bf16, the FP32 row sum of the unrounded P)."""
    s = q @ k.transpose(0, 2, 1) * q.shape[-1] ** -0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    if how == "kernel":
        return _bf16(_bf16(p) @ v / p.sum(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    return p @ v if how == "exact" else _bf16(_bf16(p) @ v)


@pytest.fixture(scope="module")
def paged_outputs() -> dict:
    return model_paged_outputs(seed=7)


def model_paged_outputs(seed: int) -> dict:
    """{name: flat output} over the PAGED batch: exact, math, kernel, stale (STALE_KEYS short), page
    (sequence 0's last page holding sequence 1's first)."""
    cfg = probe.PAGED
    rng = np.random.default_rng(seed)
    hkv, group, d, sk = cfg["kv_heads"], cfg["heads"] // cfg["kv_heads"], cfg["head_dim"], cfg["sk"]
    seqs = [tuple(_bf16(rng.standard_normal(shape)) for shape in ((hkv, group, d), (hkv, sk, d), (hkv, sk, d)))
            for _ in range(cfg["batch"])]
    out: dict[str, list] = {name: [] for name in ("exact", "math", "kernel", "stale", "page")}
    page = cfg["page_size"]
    for b, (q, k, v) in enumerate(seqs):
        out["exact"].append(_decode(q, k, v, "exact"))
        out["math"].append(_decode(q, k, v, "math"))
        out["kernel"].append(_decode(q, k, v, "kernel"))
        keep = sk - probe.STALE_KEYS
        out["stale"].append(_decode(q, k[:, :keep], v[:, :keep], "kernel"))
        if b == 0:
            k, v = k.copy(), v.copy()
            k[:, -page:], v[:, -page:] = seqs[1][1][:, :page], seqs[1][2][:, :page]
        out["page"].append(_decode(q, k, v, "kernel"))
    return {name: np.concatenate([o.ravel() for o in outs]) for name, outs in out.items()}


def test_the_control_runs_at_the_paged_case_shape():
    params = dict(_cases()["paged-decode-gqa4-d128"])
    params.pop("dtype")
    assert params == probe.PAGED
    assert set(probe.NEGATIVE_CONTROLS) == {"stale-cache-length"} and probe.STALE_KEYS >= 1


def test_a_flash_style_kernel_passes_the_derived_gate_and_the_stale_length_fails_it_within_10x(paged_outputs):
    ref = paged_outputs["exact"]
    gate = gates.reference_tolerance(paged_outputs["math"], ref, k=probe.ERROR_FACTOR)
    assert gates.check(paged_outputs["kernel"], ref, "bf16", **gate)["passed"]
    stale = gates.check(paged_outputs["stale"], ref, "bf16", **gate)
    assert not stale["passed"]
    assert 1.5 < gates.error_over_gate(stale) < gates.CONTROL_BLUNT_FACTOR


def test_a_page_of_another_sequence_is_too_blunt_a_control(paged_outputs):
    ref = paged_outputs["exact"]
    gate = gates.reference_tolerance(paged_outputs["math"], ref, k=probe.ERROR_FACTOR)
    assert gates.error_over_gate(gates.check(paged_outputs["page"], ref, "bf16", **gate)) > gates.CONTROL_BLUNT_FACTOR


@pytest.mark.parametrize("case_id, kind", [
    ("gqa8-d128-causal", "flash-sdpa"), ("mqa-d64", "flash-sdpa"), ("mha-d256-causal", "flash-sdpa"),
    ("gqa4-d128-causal-sq512-sk4096", "flash-sdpa"), ("varlen-gqa4-d128-causal", "bf16-math"),
    ("paged-decode-gqa4-d128", "bf16-math")])
def test_each_case_names_its_bf16_yardstick(case_id, kind):
    cases = _cases()
    assert set(cases) == {"gqa8-d128-causal", "mqa-d64", "mha-d256-causal", "gqa4-d128-causal-sq512-sk4096",
                          "varlen-gqa4-d128-causal", "paged-decode-gqa4-d128"}
    assert probe.baseline_kind(cases[case_id]) == kind
