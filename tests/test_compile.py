"""Compile-only helpers: nvcc for an sm_90a target and the PTX/SASS scan, without a GPU."""

from __future__ import annotations

import shutil

import pytest

from kernelwiki.harness import compile as compile_mod

WGMMA_FENCE = r"""
__global__ void k(float* out) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  out[threadIdx.x] = 1.0f;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_sm90a_and_scan(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(WGMMA_FENCE)
    emitted = compile_mod.nvcc(source, "sm_90a")
    assert ".target sm_90a" in emitted.ptx
    result = compile_mod.scan(emitted, ["wgmma.fence.sync.aligned", "tcgen05.mma"])
    assert result["found"] == ["wgmma.fence.sync.aligned"] and result["missing"] == ["tcgen05.mma"]
    if emitted.sass is not None:
        assert "WARPGROUP" in emitted.sass or "wgmma" in emitted.sass.lower()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_error_is_reported(tmp_path):
    source = tmp_path / "bad.cu"
    source.write_text("__global__ void k() { this is not C++ }\n")
    with pytest.raises(RuntimeError, match="nvcc failed for sm_90a"):
        compile_mod.nvcc(source, "sm_90a")


def test_scan_without_sass_reports_sass_mnemonics_missing():
    emitted = compile_mod.Emitted("sm_90a", ptx="wgmma.mma_async.sync.aligned", sass=None,
                                  notes=["no SASS: nvdisasm not found"])
    result = compile_mod.scan(emitted, ["wgmma.mma_async", "HGMMA"])
    assert result == {"found": ["wgmma.mma_async"], "missing": ["HGMMA"], "ptx_bytes": 28, "sass_scanned": False,
                      "notes": ["no SASS: nvdisasm not found"]}


def test_kernel_compile_helpers_leave_no_files_behind(tmp_path, monkeypatch):
    """--keep-ptx/--keep-cubin dumps go to a temp dir, and the harness still reads PTX and SASS."""
    pytest.importorskip("cutlass")
    monkeypatch.chdir(tmp_path)
    from artifacts.kernels.tma_copy import tma_copy

    emitted = compile_mod.from_cute(tma_copy.compile_for("sm_90a"), "sm_90a")
    assert ".target sm_90a" in emitted.ptx and "cp.async.bulk.tensor" in emitted.ptx
    assert list(tmp_path.iterdir()) == []
