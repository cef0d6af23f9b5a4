"""The default (cooperative) Hopper GEMM's SASS, pinned: a new opt-in path must not change it.

Each entry is a sha256 prefix of the SASS (nvdisasm's instruction lines, section headers and labels
dropped) of one cooperative configuration, computed from main before the ping-pong schedule was
added (commit c1acf82). A change in any of them means the default kernels changed, which the
ping-pong work promised not to do; when a change is meant, recompute the digests (`python -m
tests.test_hopper_gemm_sass_pinned`) and say why in the commit. Pinned to the compiler that made them:
nvidia-cutlass-dsl 4.8.1 and nvdisasm 13.5 (another version may schedule differently; the test skips).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess

import pytest

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.hopper_gemm import hopper_gemm  # noqa: E402
from kernelwiki.harness import compile as compile_mod  # noqa: E402

DSL_VERSION = "4.8.1"
NVDISASM_RELEASE = "release 13.5"

BF16, FP16, FP32 = cutlass.BFloat16, cutlass.Float16, cutlass.Float32
FP8, TF32 = cutlass.Float8E4M3FN, cutlass.TFloat32

# (compile_for keywords, digest); the first 16 are every tile of the bf16 kernel in both clusters
PINNED = [
    (dict(tile_m=64, tile_n=64, cluster_mn=(1, 1)), "dcd6e2f0b08c2e5a"),
    (dict(tile_m=64, tile_n=64, cluster_mn=(2, 1)), "22a948940b6854d7"),
    (dict(tile_m=64, tile_n=128, cluster_mn=(1, 1)), "c59c0c41fb371b07"),
    (dict(tile_m=64, tile_n=128, cluster_mn=(2, 1)), "10fa0b397b70166a"),
    (dict(tile_m=64, tile_n=192, cluster_mn=(1, 1)), "5e680f65e188f2b4"),
    (dict(tile_m=64, tile_n=192, cluster_mn=(2, 1)), "ae25a519c97b3dc4"),
    (dict(tile_m=64, tile_n=256, cluster_mn=(1, 1)), "0c83cc753d3cd184"),
    (dict(tile_m=64, tile_n=256, cluster_mn=(2, 1)), "324f5ad13f8152f3"),
    (dict(tile_m=128, tile_n=64, cluster_mn=(1, 1)), "f192bdabd6c934d1"),
    (dict(tile_m=128, tile_n=64, cluster_mn=(2, 1)), "ff5117efdea09127"),
    (dict(tile_m=128, tile_n=128, cluster_mn=(1, 1)), "bb3ec04efda60454"),
    (dict(tile_m=128, tile_n=128, cluster_mn=(2, 1)), "376e41f26905700b"),
    (dict(tile_m=128, tile_n=192, cluster_mn=(1, 1)), "26f196f5f63bfc71"),
    (dict(tile_m=128, tile_n=192, cluster_mn=(2, 1)), "6a76d108a8d2f6e3"),
    (dict(tile_m=128, tile_n=256, cluster_mn=(1, 1)), "4ed3d0d4790258ac"),
    (dict(tile_m=128, tile_n=256, cluster_mn=(2, 1)), "42bde50136cdddc3"),
    (dict(tile_n=128, ab_dtype=FP8), "0eed21ead32a6fbf"),
    (dict(tile_n=128, ab_dtype=TF32, d_dtype=FP32), "5de6cf095dd7eb39"),
    (dict(tile_n=128, a_major="mn", b_major="mn"), "6b222be0c646e451"),
    (dict(tile_n=128, ab_dtype=FP16, d_dtype=FP16), "92353715da9c2795"),
    (dict(tile_n=128, cluster_mn=(1, 2)), "5453082057ea96fa"),
    (dict(tile_n=128, cluster_mn=(1, 1), skip_last_k_tile=True), "59f39c5127707bf4"),
    (dict(tile_n=256, ab_dtype=FP8), "d082872bd8d72716"),
    (dict(tile_n=256, ab_dtype=TF32, d_dtype=FP32), "2d0416161049c6e4"),
    (dict(tile_n=256, a_major="mn", b_major="mn"), "ecf039cfe40ca8f2"),
    (dict(tile_n=256, ab_dtype=FP16, d_dtype=FP16), "77195ba7d5fbcec4"),
    (dict(tile_n=256, cluster_mn=(1, 2)), "d98c745c268056af"),
    (dict(tile_n=256, cluster_mn=(1, 1), skip_last_k_tile=True), "0958771f6c3ae111"),
    (dict(tile_m=64, tile_n=64, cluster_mn=(1, 1), ab_dtype=FP16, d_dtype=FP16), "706e5d8b677c30a9"),
    (dict(tile_n=256, d_dtype=FP32), "7d1b32ed9623ea08"),
    (dict(tile_m=64, tile_n=128, cluster_mn=(1, 1), ab_dtype=FP8), "933a0058ee7af8ae"),
    (dict(tile_m=64, tile_n=256, cluster_mn=(1, 1), d_dtype=FP32), "f63bc7b75b2169fa"),
]


def sass_digest(sass: str) -> str:
    """sha256 prefix of the instruction lines: headers, directives and labels (which name the kernel
    and the file it came from) left out."""
    body = "\n".join(line for line in sass.splitlines() if not line.lstrip().startswith(("//", ".")))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _compiler_is_the_pinned_one() -> str | None:
    """Why the digests cannot be compared here, or None."""
    version = importlib.metadata.version("nvidia-cutlass-dsl")
    if version != DSL_VERSION:
        return f"nvidia-cutlass-dsl {version}, digests are of {DSL_VERSION}"
    tool = compile_mod.nvdisasm()
    if tool is None:
        return "no nvdisasm"
    release = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
    if NVDISASM_RELEASE not in release:
        return f"nvdisasm is not {NVDISASM_RELEASE}"
    return None


def _label(entry) -> str:
    return ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in sorted(entry[0].items()))


def test_thirty_two_configurations_are_pinned():
    assert len(PINNED) == 32 and len({_label(entry) for entry in PINNED}) == 32


@pytest.mark.parametrize("kwargs, digest", PINNED, ids=[_label(entry) for entry in PINNED])
def test_default_schedule_sass_is_unchanged(kwargs, digest):
    why_not = _compiler_is_the_pinned_one()
    if why_not:
        pytest.skip(why_not)
    emitted = compile_mod.from_cute(hopper_gemm.compile_for("sm_90a", **kwargs), "sm_90a")
    assert sass_digest(emitted.sass) == digest


if __name__ == "__main__":
    for kwargs, _ in PINNED:
        emitted = compile_mod.from_cute(hopper_gemm.compile_for("sm_90a", **kwargs), "sm_90a")
        print(_label((kwargs, None)), sass_digest(emitted.sass))
