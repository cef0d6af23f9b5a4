"""probe-flash-attention-4's controls on the CPU: the softmax-scale error they plant lands within 10x
of the gate (twice a bf16 attention's own error), where the 1.25x of earlier records landed ~100x."""

from __future__ import annotations

import numpy as np

from conftest import load_probe_script
from kernelwiki.harness import gates


def _bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)


def _attention(q, k, v, scale, round_p=lambda p: p):
    s = q @ k.T * scale
    p = np.exp(s - s.max(1, keepdims=True))
    return round_p(p) @ v / p.sum(1, keepdims=True)


def test_the_forward_control_misses_by_a_few_times_the_gate():
    probe = load_probe_script("probe-flash-attention-4", "fa4_probe")
    rng = np.random.default_rng(0)
    q, k, v = (_bf16(rng.standard_normal((2048, 128))) for _ in range(3))
    exact = _attention(q, k, v, 128 ** -0.5)
    bf16 = _bf16(_attention(q, k, v, 128 ** -0.5, _bf16))            # what PyTorch's bf16 SDPA is off by
    gate = gates.reference_tolerance(bf16, exact, k=probe.ERROR_FACTOR)
    wrong = gates.check(_bf16(_attention(q, k, v, probe.CONTROL_SCALE * 128 ** -0.5)), exact, "bf16", **gate)
    assert gates.check(bf16, exact, "bf16", **gate)["passed"] and not wrong["passed"]
    assert 1 < gates.error_over_gate(wrong) < gates.CONTROL_BLUNT_FACTOR
    assert set(probe.NEGATIVE_CONTROLS) == {"forward-scale", "backward-scale"}
