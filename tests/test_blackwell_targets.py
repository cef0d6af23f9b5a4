"""hw-sm100-vs-sm120's kernels: ptxas refusals are parsed into the probe's facts, and (where nvcc is
installed) each target accepts exactly its own tensor-core family."""

from __future__ import annotations

import shutil

import pytest

from artifacts.kernels.blackwell_targets import targets

LOG = """ptxas /tmp/x.ptx, line 31; error   : Instruction 'tcgen05.alloc' not supported on .target 'sm_120a'
ptxas /tmp/x.ptx, line 31; error   : Feature '.cta_group::1' not supported on .target 'sm_120a'
ptxas /tmp/x.ptx, line 40; error   : Instruction 'tcgen05.alloc' not supported on .target 'sm_120a'
ptxas fatal   : Ptx assembly aborted due to errors"""


def test_refusals_are_deduplicated_in_order():
    assert targets.refusals_in(LOG) == ["Instruction 'tcgen05.alloc' not supported on .target 'sm_120a'",
                                        "Feature '.cta_group::1' not supported on .target 'sm_120a'"]


def test_an_error_that_is_not_a_refusal_is_raised(monkeypatch):
    def broken(source, arch, extra=None):
        raise RuntimeError("nvcc failed for sm_100a:\nerror: expected a ';'")

    monkeypatch.setattr(targets.compile_mod, "nvcc", broken)
    with pytest.raises(RuntimeError, match="expected a ';'"):
        targets.accepts("tcgen05", "sm_100a")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA 13)")
@pytest.mark.parametrize("arch, accepted, refused", [("sm_100a", "tcgen05", "warp-block-scale"),
                                                     ("sm_120a", "warp-block-scale", "tcgen05")])
def test_each_target_takes_only_its_own_family(arch, accepted, refused):
    assert targets.accepts(accepted, arch).accepted
    outcome = targets.accepts(refused, arch)
    assert not outcome.accepted and all(arch in message for message in outcome.refusals)
