"""The communication probe's counting rules (nccl-tests' busbw), message sizes and its skip on one GPU;
no GPU or torch needed."""

from __future__ import annotations

import pytest

from conftest import ROOT, load_probe_script
from kernelwiki.harness.env import Gpu
from kernelwiki.probing.specs import load_probes
from kernelwiki.storage.repo import Repo

co = load_probe_script("probe-nccl-collectives", "collectives")


@pytest.mark.parametrize("op, ranks, factor", [("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0),
                                               ("one_shot_all_reduce", 4, 1.5), ("all_gather", 8, 0.875),
                                               ("reduce_scatter", 2, 0.5), ("all_to_all", 4, 0.75), ("p2p_copy", 2, 1.0)])
def test_bus_factor_is_the_nccl_tests_rule(op, ranks, factor):
    assert co.bus_factor(op, ranks) == factor


def test_bus_factor_refuses_one_rank_and_unknown_ops():
    with pytest.raises(ValueError, match="2 or more ranks"):
        co.bus_factor("all_reduce", 1)
    with pytest.raises(ValueError, match="unknown op"):
        co.bus_factor("broadcastt", 2)


def test_bandwidths_count_the_whole_buffer():
    band = co.bandwidths("all_reduce", 2 * 10**9, 1.0, 8)
    assert band == {"algbw_gb_s": 2.0, "busbw_gb_s": 3.5}


@pytest.mark.parametrize("ranks", [2, 3, 8])
@pytest.mark.parametrize("nbytes, dtype", [(4096, "bf16"), (65536, "fp32"), (268435456, "fp32"), (100, "fp32")])
def test_every_rank_gets_an_equal_aligned_chunk(ranks, nbytes, dtype):
    n = co.elements("all_reduce", nbytes, dtype, ranks)
    assert n % (ranks * co.ALIGN_ELEMENTS) == 0 and n > 0
    assert n * co.ELEMENT_BYTES[dtype] <= max(nbytes, ranks * co.ALIGN_ELEMENTS * co.ELEMENT_BYTES[dtype])


def test_every_rank_and_case_draws_its_own_input():
    seeds = {co.input_seed(7, rank, salt) for rank in range(8) for salt in (0, 1, 2)}
    assert len(seeds) == 24


def test_the_probe_skips_one_gpu_with_the_gpu_count():
    spec = load_probes(Repo(ROOT))["probe-nccl-collectives"]
    assert spec.min_gpus == 2
    bare = type(spec)(spec.id, spec.directory, dict(spec.data, requires=[]))   # as on a GPU machine with torch
    h200 = Gpu("NVIDIA H200", "sm_90a", "580")
    assert bare.skip_reason("run", h200, 1) == "requires 2 or more GPUs; this machine has 1"
    assert bare.skip_reason("run", h200, 8) is None
    assert bare.skip_reason("compile-only", None, 0) is None
