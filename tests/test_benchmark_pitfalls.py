"""probe-benchmark-pitfalls without a GPU: the cached-output hack returns a stale product after an
in-place update (same address), and that stale product misses the bf16 gate by a small factor,
while a real recomputation passes."""

from __future__ import annotations

import importlib.util

import numpy as np

from conftest import ROOT
from kernelwiki.harness import gates

spec = importlib.util.spec_from_file_location("pitfalls", ROOT / "probes" / "probe-benchmark-pitfalls" / "pitfalls.py")
pitfalls = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pitfalls)


def _matmul(a, b, out):
    np.matmul(a, b, out=out)


def test_cached_output_skips_the_second_call_on_the_same_buffers():
    calls = []
    fake = pitfalls.CachedOutput(lambda a, b, out: calls.append(1) or _matmul(a, b, out))
    a, b = np.ones((4, 8), np.float32), np.ones((8, 2), np.float32)
    out = np.empty((4, 2), np.float32)
    fake(a, b, out)
    fake(a, b, out)
    assert len(calls) == 1
    fake(a.copy(), b, out)
    assert len(calls) == 2


def test_stale_product_after_an_in_place_step_fails_the_gate_near_its_tolerance():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 256)).astype(np.float32), rng.standard_normal((256, 128)).astype(np.float32)
    out = np.empty((64, 128), np.float32)
    fake = pitfalls.CachedOutput(_matmul)
    fake(a, b, out)
    a += pitfalls.DRIFT * np.sqrt((a ** 2).mean()) * rng.standard_normal(a.shape).astype(np.float32)
    fake(a, b, out)
    stale = gates.check(out, a.astype(np.float64) @ b, "bf16")
    assert not stale["passed"]
    assert gates.tolerance("bf16") < stale["rel_err"] < 10 * gates.tolerance("bf16")
    _matmul(a, b, out)
    assert gates.check(out, a.astype(np.float64) @ b, "bf16")["passed"]
