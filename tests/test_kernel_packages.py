"""Our kernels are Python packages (artifacts.kernels.<name>): importable by name from the repository
root, with no sys.path tricks, and a copied kernel folder runs where it lands."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, run_cli

KERNELS = ROOT / "artifacts" / "kernels"


def test_every_kernel_folder_with_code_is_a_package():
    for folder in sorted(p for p in KERNELS.iterdir() if p.is_dir()):
        code = [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]
        for directory in {p.parent for p in code}:
            assert (directory / "__init__.py").is_file(), f"{directory.relative_to(ROOT)} has code but no __init__.py"
        assert "-" not in folder.name, f"{folder.name}: a package name cannot hold '-'"


def test_no_path_manipulation_in_kernels_probes_or_tests():
    offenders = [str(p.relative_to(ROOT)) for base in ("artifacts", "probes", "tests")
                 for p in (ROOT / base).rglob("*.py")
                 if "sys.path.insert" in p.read_text(encoding="utf-8") and p.name != "test_kernel_packages.py"]
    assert offenders == []


def test_the_bundle_lists_every_file_a_kernel_imports():
    """get --include-code prints the files the FP8 GEMM needs, the shared Hopper module and the package
    __init__ chain included, so a copy of them is complete."""
    code, out, _ = run_cli(["get", "kernel-fp8-blockscale-gemm", "--include-code", "--format", "json"], ROOT)
    assert code == 0
    paths = {item["path"] for item in json.loads(out)["artifacts"]["files"] if item.get("origin") == "own"}
    for needed in ("artifacts/__init__.py", "artifacts/kernels/__init__.py", "artifacts/kernels/hopper_gemm/__init__.py",
                   "artifacts/kernels/hopper_gemm/sm90_common.py", "artifacts/kernels/fp8_blockscale_gemm/__init__.py",
                   "artifacts/kernels/fp8_blockscale_gemm/fp8_blockscale_gemm.py"):
        assert needed in paths, needed


@pytest.mark.slow
def test_a_copied_kernel_folder_runs_on_its_own(tmp_path):
    pytest.importorskip("cutlass")
    shutil.copytree(KERNELS / "tma_copy", tmp_path / "tma_copy", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "tma_copy.tma_copy", "--compile-only", "--arch", "sm_90a"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CUTE_DSL_DUMP_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_copied_bundle_imports_where_it_lands(tmp_path):
    """The files of the FP8 GEMM's bundle, copied with their paths, import as they do here."""
    pytest.importorskip("cutlass")
    code, out, _ = run_cli(["get", "kernel-fp8-blockscale-gemm", "--include-code", "--files", "*", "--format", "json"], ROOT)
    for item in json.loads(out)["artifacts"]["files"]:
        if item.get("origin") == "own" and item["path"].endswith(".py"):
            target = tmp_path / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(item["text"], encoding="utf-8")
    result = subprocess.run([sys.executable, "-c", "import artifacts.kernels.fp8_blockscale_gemm.fp8_blockscale_gemm as k; "
                             "print(k.__file__)"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert str(tmp_path) in result.stdout


def test_the_kernel_cache_keys_name_files_that_exist():
    """Each GEMM keys its on-disk kernel cache by the bytes of its source files: every one must exist
    (a path written with the old folder name only failed on the GPU, at the first compile)."""
    pytest.importorskip("cutlass")
    from artifacts.kernels.fp8_blockscale_gemm import fp8_blockscale_gemm
    from artifacts.kernels.hopper_gemm import hopper_gemm

    for module in (hopper_gemm, fp8_blockscale_gemm):
        assert module.KERNEL_SOURCES and all(path.is_file() for path in module.KERNEL_SOURCES), module.KERNEL_SOURCES
