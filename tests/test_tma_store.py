"""probe-tma-store without a GPU: the references (exact bf16 store, fp64 split sum), the shape
rule of the kernels, the negative control's fp16 staging against the fp32 gate, and (with nvcc)
that the library builds and exports the launchers its wrapper binds."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

from artifacts.kernels.tma_store import tma_store
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates


def test_reduce_reference_is_the_sum_of_the_split_products():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 64)), rng.standard_normal((4, 128))
    expected = sum(np.outer(a[s], b[s]) for s in range(4))
    assert np.allclose(tma_store.reduce_reference(a, b), expected, rtol=1e-12)


def test_fp16_staged_partials_fail_the_fp32_gate_by_a_small_factor():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal((4, 128)).astype(np.float32)
    ref = tma_store.reduce_reference(a, b)
    exact = sum(np.outer(a[s], b[s]).astype(np.float32) for s in range(4))
    staged = sum(np.outer(a[s], b[s]).astype(np.float32).astype(np.float16).astype(np.float32) for s in range(4))
    assert gates.check(exact, ref, "fp32")["passed"]
    bad = gates.check(staged, ref, "fp32")
    assert not bad["passed"] and bad["rel_err"] < 100 * gates.tolerance("fp32")


@pytest.mark.parametrize("m, n, splits", [(63, 128, 1), (64, 100, 1), (64, 128, 0), (0, 128, 1)])
def test_shapes_must_be_whole_tiles(m, n, splits):
    with pytest.raises(ValueError):
        tma_store.check_shape(m, n, splits)
    tma_store.check_shape(128, 256, 2)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_library_builds_and_exports_the_launchers():
    library = compile_mod.nvcc_library(tma_store.SOURCE, "sm_90a")
    for name in ("ep_launch_st_global", "ep_launch_tma_store", "ep_launch_atomic", "ep_launch_tma_reduce",
                 "ep_error_string"):
        assert isinstance(getattr(library, name), ctypes._CFuncPtr)
    tma_store.EpilogueKernels(library)
