"""probe-register-caps without a GPU: ptxas's -v report and SASS counts parsed, the fp64 reference
against a thread-by-thread loop, the negative control's fp16 rounding against the fp32 gate, and
(with nvcc) that a cap below the kernel's need spills and that -maxrregcount loses to
__launch_bounds__."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from artifacts.kernels.registers import registers
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates

REPORT = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'
ptxas info    : Function properties for _Z1kPf
    432 bytes stack frame, 1716 bytes spill stores, 1500 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 432 bytes cumulative stack size
ptxas info    : Function properties for _Z1gv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""


def test_ptxas_report_is_read_per_kernel():
    usage = compile_mod.parse_ptxas_usage(REPORT)
    assert usage["_Z1kPf"] == {"registers": 32, "stack_frame_bytes": 432, "spill_store_bytes": 1716,
                               "spill_load_bytes": 1500}
    assert usage["_Z1gv"]["registers"] == 8 and usage["_Z1gv"]["spill_store_bytes"] == 0


def test_sass_counts_local_loads_and_stores_with_suffixes():
    sass = ("LDL.LU R1, [R1+0x4] ;\nSTL [R1], R2 ;\nSTL.64 [R1+0x8], R4 ;\nLDG.E.CONSTANT R3, desc[UR4][R2.64] ;\n"
            "LDL R5, [R1] ;\nFFMA R12, R48.reuse, R12, UR12 ;\nFFMA R11, R48, R11, R3 ;")
    assert registers.sass_counts(sass) == {"ldl": 2, "stl": 2, "ldg": 1, "ffma_uniform": 1}


def test_build_flags():
    assert registers.build_flags(registers.UNCAPPED) == []
    assert registers.build_flags(64) == ["-maxrregcount=64"]
    assert registers.build_flags(0, bounds=4) == ["-DBOUNDS=4"]


def _loop(x, coef, iters, n):
    out = []
    for t in range(n):
        acc = coef.astype(np.float64).copy()
        for k in range(iters):
            acc = acc * float(x[k * n + t]) + coef
        out.append(acc.sum())
    return np.array(out)


def test_reference_is_the_kernels_recurrence_and_fp16_output_fails_the_gate():
    rng = np.random.default_rng(3)
    iters, n = 128, 64
    x = rng.uniform(-0.9, 0.9, size=iters * n).astype(np.float32)
    coef = rng.standard_normal(registers.ACC).astype(np.float32)
    ref = registers.reference(x, coef, iters, n)
    assert np.allclose(ref, _loop(x, coef, iters, n), rtol=1e-12)
    assert gates.check(ref.astype(np.float32), ref, "fp32")["passed"]
    assert not gates.check(ref.astype(np.float16).astype(np.float32), ref, "fp32")["passed"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cap_below_need_spills_and_launch_bounds_beat_maxrregcount():
    usage = lambda flags: compile_mod.ptxas_usage(registers.SOURCE, "sm_90a", flags)[0]["_Z8pressurePKfS0_Pfiii"]  # noqa: E731
    capped, free, bounded = usage(registers.build_flags(32)), usage([]), usage(registers.build_flags(32, bounds=1))
    assert capped["registers"] <= 32 and capped["spill_store_bytes"] > 0
    assert free["spill_store_bytes"] == 0 and free["registers"] > 2 * registers.ACC
    assert bounded["registers"] == free["registers"]
