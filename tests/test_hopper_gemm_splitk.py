"""Split-K reduced inside the Hopper GEMM (no GPU): the workspace's size, what the settings accept,
the instructions the reduction compiles to for sm_90a (and that the kernel without a split has none
of them), and the decode probe's negative control by the reference math: its error must fail the
gate, by less than 10x."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from conftest import ROOT, load_probe_script

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.hopper_gemm import config, hopper_gemm  # noqa: E402
from artifacts.kernels.hopper_gemm.fused_epilogue import EpilogueSpec  # noqa: E402
from artifacts.kernels.hopper_gemm.config import GemmConfig  # noqa: E402
from artifacts.kernels.hopper_gemm.gemm_sm90 import HopperGemm  # noqa: E402
from kernelwiki.harness import compile as compile_mod  # noqa: E402
from kernelwiki.harness import gates  # noqa: E402

BF16 = cutlass.BFloat16
# the reduction's memory-model pieces: the count (acq_rel RMW), the fences, the 128-bit stores and loads
# of the partials (fragment order: one vector of four FP32 values per access)
REDUCTION_PTX = ("atom.global.acq_rel.add.u32", "fence.acq_rel.gpu", "st.global.v4.b32", "ld.global.v4.b32")


@pytest.mark.parametrize("m, n, batch, config, expected", [
    (1, 6144, 1, GemmConfig(64, 256, (1, 1), 4), (24 * 4 * 64 * 256, 24)),     # whole tiles: 64 rows for M = 1
    (130, 520, 3, GemmConfig(128, 128, (1, 1), 5), (3 * 2 * 5 * 5 * 128 * 128, 3 * 2 * 5)),   # ragged M and N
    (16, 4096, 1, GemmConfig(64, 256, (1, 1), 1), (0, 0)),                      # no split, no workspace
])
def test_split_workspace_holds_whole_tiles_and_one_counter_per_tile(m, n, batch, config, expected):
    assert hopper_gemm.split_workspace(m, n, batch, config) == expected


def test_split_k_accepts_a_fused_epilogue_clusters_and_swap_and_refuses_pingpong():
    # the last split applies act(sum) once, so a fused epilogue with a split is exact
    HopperGemm.can_implement(BF16, BF16, 16, 4096, 4096, tile_m=64, cluster_mn=(1, 1), split_k=4,
                             epilogue=EpilogueSpec(True, "gelu_tanh", True))
    # a cluster's partner past D's last tile reduces nothing (reduce_partials), and the workspace is in
    # fragment order whatever D's major mode: clusters and the swapped (M-major) store split too
    for cluster in ((2, 1), (1, 2)):
        HopperGemm.can_implement(BF16, BF16, 256, 256, 256, split_k=2, cluster_mn=cluster)
    HopperGemm.can_implement(BF16, BF16, 4096, 160, 14336, tile_n=80, cluster_mn=(1, 2), split_k=2, d_major="m")
    with pytest.raises(ValueError, match="schedule='pingpong' with split_k=2"):
        HopperGemm.can_implement(BF16, BF16, 256, 256, 256, tile_m=64, split_k=2, schedule="pingpong")
    with pytest.raises(ValueError, match="reduce_splits with schedule='pingpong'"):
        HopperGemm(tile_m=64, cluster_mn=(1, 1), schedule="pingpong", reduce_splits=True)
    with pytest.raises(ValueError, match="skip_last_slice without reduce_splits"):
        HopperGemm(cluster_mn=(1, 1), skip_last_slice=True)


def test_the_flag_word_costs_no_stage():
    """The reduction's shared-memory word sits in front of the barriers' 1024-byte block: the same
    stage counts as the kernel without it."""
    for tile_m, tile_n in ((64, 256), (128, 256), (128, 64)):
        plain = HopperGemm(tile_m=tile_m, tile_n=tile_n, cluster_mn=(1, 1))
        split = HopperGemm(tile_m=tile_m, tile_n=tile_n, cluster_mn=(1, 1), reduce_splits=True)
        assert (split.stages, split.epi_stages) == (plain.stages, plain.epi_stages)
        assert split.smem_bytes(split.stages, split.epi_stages) == plain.smem_bytes(plain.stages, plain.epi_stages)


def _ptx(**settings) -> str:
    return compile_mod.from_cute(hopper_gemm.compile_for("sm_90a", m=1, cluster_mn=(1, 1), **settings), "sm_90a").ptx


@pytest.mark.parametrize("settings", [dict(tile_m=64, tile_n=256),
                                      dict(tile_m=128, tile_n=128, epilogue=EpilogueSpec(True, "silu", True))],
                         ids=["decode-tile", "fused-epilogue"])
def test_the_split_kernel_compiles_the_reduction_and_the_plain_one_does_not(settings):
    split = _ptx(split_k=2, **settings)
    for instruction in REDUCTION_PTX:
        assert instruction in split, instruction
    assert split.count("atom.global") == 1            # one count per (tile, split), by one thread
    assert split.count("fence.acq_rel.gpu") == 2      # release before the count, acquire after it
    assert not re.search(r"ld\.global(\.cg)?\.b32", split)   # no scalar loads of partials
    assert split.count("st.global.b32") == 1          # and no scalar stores: the counter's reset only
    plain = _ptx(**settings)
    assert not any(instruction in plain for instruction in REDUCTION_PTX)


def test_the_control_kernel_compiles():
    assert "atom.global.acq_rel.add.u32" in _ptx(tile_m=64, tile_n=256, split_k=2, skip_last_slice=True)


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round to bf16 (nearest even) and back to float64."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32).astype(np.float64)


def test_decode_probe_control_fails_the_gate_within_10x():
    """The control's output by the reference math: the exact product less output tile (0, 0)'s last
    K range (the slice its last split skips), rounded to bf16; the gate's tolerance from the exact
    product rounded to bf16 (what cuBLAS's FP32 accumulation gives, to first order). The kernel's
    range rule (ceil(k_tiles / split_k) K tiles per range) must leave that range non-empty."""
    probe = load_probe_script("probe-decode-gemm", "decode_gemm_probe")
    m, n, k = probe.CONTROL_SHAPE
    split_k, (tile_m, tile_n) = probe.CONTROL_SPLIT_K, probe.CONTROL_TILE
    tile_k = config.K_TILE_BYTES // 2
    k_tiles = math.ceil(k / tile_k)
    per_split = math.ceil(k_tiles / split_k)
    last_first = (split_k - 1) * per_split * tile_k
    assert 0 < k - last_first <= 2 * tile_k     # a short last range: one or two K tiles
    rng = np.random.default_rng(7)
    x, w = _bf16(rng.standard_normal((m, k))), _bf16(rng.standard_normal((n, k)))
    ref = (x.astype(np.float32) @ w.T.astype(np.float32)).astype(np.float64)
    broken = ref.copy()
    broken[:tile_m, :tile_n] -= x[:tile_m, last_first:] @ w[:tile_n, last_first:].T
    result = gates.check(_bf16(broken), ref, "bf16", **gates.reference_tolerance(_bf16(ref), ref))
    assert not result["passed"]
    assert 1.0 < gates.error_over_gate(result) <= 10.0, result


def test_decode_probe_workspace_bytes_follow_the_kernel():
    probe = load_probe_script("probe-decode-gemm", "decode_gemm_probe")
    config = GemmConfig(64, 256, (1, 1), 4)
    assert probe.workspace_bytes(1, 6144, config) == 4 * (24 * 4 * 64 * 256 + 24)
    assert probe.workspace_bytes(1, 6144, GemmConfig(64, 256, (1, 1), 1)) == 0



def test_decode_probe_controls_are_described():
    from kernelwiki.model import yamlio

    probe = load_probe_script("probe-decode-gemm", "decode_gemm_probe")
    spec, _ = yamlio.load((ROOT / "probes/probe-decode-gemm/probe.yaml").read_text())
    assert set(probe.NEGATIVE_CONTROLS) == set(spec["negative_control"]) == {"split-k-skips-last-slice"}
