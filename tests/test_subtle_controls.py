"""Negative controls a realistic bug trips (issue 23): NumPy models of the planted bugs of
probe-software-exp2, probe-wgmma-zoo and probe-hopper-gemm-naive land between 1x and 10x their gates
(the bugs they replace missed by 360x, 700x and 18x)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelwiki.harness import gates


def _rn(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)


def _rz(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return (u & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)


def test_software_exp2_control_misses_the_chain_gate_by_a_few_times():
    exp2 = pytest.importorskip("artifacts.kernels.software_exp2.exp2")
    coefficients = exp2.fit_poly(3)
    broken = [coefficients[0], exp2.BROKEN_C1_FACTOR * coefficients[1], *coefficients[2:]]

    def software(x, c):
        n = np.floor(x)
        f, p = x - n, np.full_like(x, c[-1])
        for cj in c[-2::-1]:
            p = p * f + cj
        return p * 2.0 ** n

    def chain(fn, x):
        for _ in range(256):
            x = -fn(x) - 0.5
        return x

    x0 = -1.0 - 0.5 * np.random.default_rng(0).random(20000)
    ref = chain(lambda x: 2.0 ** x, x0)
    good = gates.check(chain(lambda x: software(x, coefficients), x0), ref, "tf32")
    bad = gates.check(chain(lambda x: software(x, broken), x0), ref, "tf32")
    assert good["passed"] and not bad["passed"]
    assert 1 < gates.error_over_gate(bad) < gates.CONTROL_BLUNT_FACTOR


def test_wgmma_zoo_truncated_operands_miss_the_gate_by_a_few_times():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 16)), rng.standard_normal((64, 16))
    ref = _rn(a) @ _rn(b).T
    bad = gates.check(_rz(a) @ _rz(b).T, ref, "tf32")     # the zoo gates bf16 with the tf32 table
    assert not bad["passed"] and 1 < gates.error_over_gate(bad) < gates.CONTROL_BLUNT_FACTOR


def test_naive_gemm_control_one_of_64_k_tiles_is_within_ten_times_the_bf16_gate():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((64, 64 * 64)), rng.standard_normal((64, 64 * 64))   # K = 4096, 64 K tiles
    ref = x @ w.T
    bad = gates.check(x[:, :-64] @ w[:, :-64].T, ref, "bf16")
    assert not bad["passed"] and 1 < gates.error_over_gate(bad) < gates.CONTROL_BLUNT_FACTOR
