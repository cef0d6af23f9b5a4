"""The default (cooperative) Hopper GEMM's SASS, pinned: a new opt-in path must not change it.

Each entry is a sha256 prefix of the SASS (nvdisasm's instruction lines, section headers and labels
dropped, the kernel's symbol read as one word) of one cooperative configuration, computed from main
before the ping-pong schedule was added (commit c1acf82); recomputed at 90b6955 with the symbol
normalised when the kernel moved from hopper_gemm.py to gemm_sm90.py (the symbol names the module:
every instruction line was unchanged). A change in any of them means the default kernels changed, which the
ping-pong work promised not to do; when a change is meant, recompute the digests (`python -m
tests.test_hopper_gemm_sass_pinned`) and say why in the commit. Pinned to the compiler that made them:
nvidia-cutlass-dsl 4.8.1 and nvdisasm 13.5 (another version may schedule differently; the test skips).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import subprocess

import pytest

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.hopper_gemm import hopper_gemm  # noqa: E402
from kernelwiki.harness import compile as compile_mod  # noqa: E402

DSL_VERSION = "4.8.1"
KERNEL_SYMBOL = re.compile(r"kernel_cutlass_kernel_\w+")
NVDISASM_RELEASE = "release 13.5"

BF16, FP16, FP32 = cutlass.BFloat16, cutlass.Float16, cutlass.Float32
FP8, TF32 = cutlass.Float8E4M3FN, cutlass.TFloat32

# (compile_for keywords, digest); the first 16 are every tile of the bf16 kernel in both clusters
PINNED = [
    (dict(tile_m=64, tile_n=64, cluster_mn=(1, 1)), "fae7eb1a3fc92adc"),
    (dict(tile_m=64, tile_n=64, cluster_mn=(2, 1)), "52ab638e2708f5f5"),
    (dict(tile_m=64, tile_n=128, cluster_mn=(1, 1)), "675ab5e333e7f314"),
    (dict(tile_m=64, tile_n=128, cluster_mn=(2, 1)), "421a9a9bac206fcd"),
    (dict(tile_m=64, tile_n=192, cluster_mn=(1, 1)), "7a316a37ff7cdcf5"),
    (dict(tile_m=64, tile_n=192, cluster_mn=(2, 1)), "f64fe92afbd0c656"),
    (dict(tile_m=64, tile_n=256, cluster_mn=(1, 1)), "accdff01928a5055"),
    (dict(tile_m=64, tile_n=256, cluster_mn=(2, 1)), "344de90a9a8a9039"),
    (dict(tile_m=128, tile_n=64, cluster_mn=(1, 1)), "0eb73cc4119a0914"),
    (dict(tile_m=128, tile_n=64, cluster_mn=(2, 1)), "4061322ad547f2c7"),
    (dict(tile_m=128, tile_n=128, cluster_mn=(1, 1)), "c432fd72fee00201"),
    (dict(tile_m=128, tile_n=128, cluster_mn=(2, 1)), "4caba2463cea9716"),
    (dict(tile_m=128, tile_n=192, cluster_mn=(1, 1)), "97ab436d475da91c"),
    (dict(tile_m=128, tile_n=192, cluster_mn=(2, 1)), "cf77b89d612fc084"),
    (dict(tile_m=128, tile_n=256, cluster_mn=(1, 1)), "9b87490017da0692"),
    (dict(tile_m=128, tile_n=256, cluster_mn=(2, 1)), "88643f2e51531ca7"),
    (dict(tile_n=128, ab_dtype=FP8), "c0284dc3e6b84355"),
    (dict(tile_n=128, ab_dtype=TF32, d_dtype=FP32), "671b1847c79d0cef"),
    (dict(tile_n=128, a_major="mn", b_major="mn"), "624be6882e821fa7"),
    (dict(tile_n=128, ab_dtype=FP16, d_dtype=FP16), "44998f09f69de543"),
    (dict(tile_n=128, cluster_mn=(1, 2)), "12206ea2db9bdaef"),
    (dict(tile_n=128, cluster_mn=(1, 1), skip_last_k_tile=True), "47ee62424ea4c966"),
    (dict(tile_n=256, ab_dtype=FP8), "e58ddf0f430d97cf"),
    (dict(tile_n=256, ab_dtype=TF32, d_dtype=FP32), "c5d3b1f77130e72b"),
    (dict(tile_n=256, a_major="mn", b_major="mn"), "ac2741fa8772107a"),
    (dict(tile_n=256, ab_dtype=FP16, d_dtype=FP16), "7668f2b6a3a36db0"),
    (dict(tile_n=256, cluster_mn=(1, 2)), "19f68e20c95aa110"),
    (dict(tile_n=256, cluster_mn=(1, 1), skip_last_k_tile=True), "edffabc3cc19686e"),
    (dict(tile_m=64, tile_n=64, cluster_mn=(1, 1), ab_dtype=FP16, d_dtype=FP16), "b124ca032556f6fe"),
    (dict(tile_n=256, d_dtype=FP32), "8737c6c85b9d335c"),
    (dict(tile_m=64, tile_n=128, cluster_mn=(1, 1), ab_dtype=FP8), "bcd9ef44810affce"),
    (dict(tile_m=64, tile_n=256, cluster_mn=(1, 1), d_dtype=FP32), "1b2813ca7cde9d85"),
]


def sass_digest(sass: str) -> str:
    """sha256 prefix of the instruction lines: headers, directives and labels left out, and the kernel's
    symbol (which names the module it came from, cut to a length) read as one word."""
    body = "\n".join(line for line in sass.splitlines() if not line.lstrip().startswith(("//", ".")))
    return hashlib.sha256(KERNEL_SYMBOL.sub("KERNEL", body).encode()).hexdigest()[:16]


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
