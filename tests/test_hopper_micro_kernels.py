"""The host-side parts of the L2, launch-overhead and small-M GEMV kernels, without a GPU: the read
kernel's exact checksum and the chase's chain (against a simulation of the kernels' indexing), the
GEMV's shape checks and its negative control's error against a cuBLAS-like gate, and (with nvcc)
that each kernel builds to the instructions its probe expects and into a library that exports the
launchers its Python wrapper calls."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from artifacts.kernels.l2_cache import l2_cache
from artifacts.kernels.launch_overhead import tick
from artifacts.kernels.small_m_gemv import gemv
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates


# --- l2_read: the checksum the host expects is what the kernel's indexing reads ------------------
def simulate_read(words: np.ndarray, threads: int, per_thread: int, short_groups: int = 0) -> int:
    """l2_read's loads, thread by thread, as l2_cache.cu writes them: start at t % n_vec, step
    (threads % n_vec), wrap, GROUP loads per group; sum of the 32-bit words modulo 2^32."""
    vectors = words.reshape(-1, 4).astype(np.uint64)
    n_vec = len(vectors)
    step = threads % n_vec
    total = 0
    for t in range(threads):
        idx = t % n_vec
        for _ in range((per_thread // l2_cache.GROUP - short_groups) * l2_cache.GROUP):
            total += int(vectors[idx].sum())
            idx = (idx + step) % n_vec
    return total % l2_cache.WORD


@pytest.mark.parametrize("n_vec, threads, per_thread", [(64, 48, 16), (40, 100, 8), (7, 3, 24), (1000, 64, 8)])
def test_expected_checksum_matches_the_kernels_indexing(n_vec, threads, per_thread):
    words = np.random.default_rng(n_vec).integers(0, 2**32, size=n_vec * 4, dtype=np.uint64)
    flat = words.reshape(-1, 4).sum(axis=1)
    expected = l2_cache.expected_checksum(threads * per_thread, n_vec, int(flat.sum()), lambda r: int(flat[:r].sum()))
    assert expected == simulate_read(words, threads, per_thread)


def test_negative_control_read_misses_the_checksum():
    """One group of eight loads short changes the sum (the probe's negative control)."""
    words = np.random.default_rng(1).integers(0, 2**32, size=256 * 4, dtype=np.uint64)
    flat = words.reshape(-1, 4).sum(axis=1)
    expected = l2_cache.expected_checksum(32 * 64, 256, int(flat.sum()), lambda r: int(flat[:r].sum()))
    assert simulate_read(words, 32, 64, short_groups=1) != expected


def test_per_thread_rounds_to_whole_groups():
    threads = l2_cache.read_threads(132)
    assert threads == 132 * 2048
    per = l2_cache.per_thread_for(2 * 2**30, threads)
    assert per % l2_cache.GROUP == 0 and abs(per * threads * 16 - 2 * 2**30) < l2_cache.GROUP * threads * 16
    assert l2_cache.per_thread_for(1, threads) == l2_cache.GROUP


def test_chain_and_latencies():
    order = [3, 0, 2, 1]
    words = l2_cache.LINE_BYTES // 4
    # after 0 warm steps from line 3, the chase visits 0, 2, 1, 3, 0, ...
    assert l2_cache.chain(order, 5, 0) == [0, 2 * words, 1 * words, 3 * words, 0]
    assert l2_cache.chain(order, 2, 4) == [0, 2 * words]
    assert l2_cache.latencies([10, 25, 2**32 - 5, 7]) == [15, 2**32 - 30, 12]


# --- the GEMV: shapes, grid, and the negative control against a cuBLAS-like gate -----------------
def test_gemv_can_implement_names_the_problem():
    gemv.can_implement("bf16", 16, 8192, 28672)
    with pytest.raises(ValueError, match="M=3 not supported"):
        gemv.can_implement("bf16", 3, 4096, 4096)
    with pytest.raises(ValueError, match="K=4000 not supported for bf16"):
        gemv.can_implement("bf16", 1, 4096, 4000)
    with pytest.raises(ValueError, match="K=1024 not supported for s8"):
        gemv.can_implement("s8", 1, 4096, 1024)
    with pytest.raises(ValueError, match="N=4098 not supported at M=8"):
        gemv.can_implement("bf16", 8, 4098, 4096)
    with pytest.raises(ValueError, match="dtype 'fp8'"):
        gemv.can_implement("fp8", 1, 4096, 4096)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Float32 rounded to bf16 (nearest even), back as float32."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def test_skipped_k_chunk_fails_a_gate_derived_from_bf16_output_rounding():
    """The probe's negative control at its K (131072): the kernel's output without the last 256-element
    chunk (1/512 of K), against a gate 4x a bf16-output library's error. It must fail both the
    relative and the element test by 1.5-10x (at K = 28672, 1/112 of K failed the relative one by 14x)."""
    rng = np.random.default_rng(0)
    m, n, k = 4, 256, 131072
    x, w = round_bf16(rng.standard_normal((m, k))), round_bf16(rng.standard_normal((n, k)))
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    library = round_bf16(ref.astype(np.float32))
    chunk = gemv.CHUNK["bf16"]
    broken = round_bf16((x[:, :-chunk].astype(np.float64) @ w[:, :-chunk].astype(np.float64).T).astype(np.float32))
    tolerance = gates.reference_tolerance(library, ref)
    assert gates.check(library, ref, "bf16", **tolerance)["passed"]
    result = gates.check(broken, ref, "bf16", **tolerance)
    assert not result["passed"]
    assert gates.control_reach([{"name": "skip-chunk", "correctness": result}]) == [], gates.gate_ratios(result)


# --- with nvcc: every kernel builds to the instructions its probe lists, and into a library ---------
NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
KERNELS = [
    (gemv.SOURCE, ["ld.global.nc.L1::no_allocate.v4.u32", "fma.rn.f32", "dp4a.s32.s32"],
     ["gemv_launch_bf16", "gemv_launch_s8", "gemv_prepare", "gemv_error_string"]),
    (l2_cache.SOURCE, ["ld.global.cg.v4.u32", "ld.global.cg.u32", "%clock64"],
     ["l2_launch_read", "l2_launch_chase", "l2_prepare", "l2_error_string"]),
    (tick.SOURCE, ["atom.global.add.u32"], ["tick_launch", "tick_launch_many", "tick_prepare", "tick_error_string"]),
]


@NVCC
@pytest.mark.parametrize("source, instructions, launchers", KERNELS, ids=lambda v: getattr(v, "stem", None))
def test_kernels_build_for_sm90a(source, instructions, launchers):
    assert compile_mod.scan(compile_mod.nvcc(source, "sm_90a"), instructions)["missing"] == []
    library = compile_mod.nvcc_library(source, "sm_90a")
    assert all(hasattr(library, name) for name in launchers)


NCU_CSV = '''==PROF== Connected to process 1234
DRIVER_RESULT {"passed": true}
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1234","python3","h","l2_read","1","7","(256, 1, 1)","(1056, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Gbyte","1.63"
"0","1234","python3","h","l2_read","1","7","(256, 1, 1)","(1056, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","434.50"
"0","1234","python3","h","l2_read","1","7","(256, 1, 1)","(1056, 1, 1)","0","9.0","Command line profiler metrics","lts__t_sector_hit_rate.pct","%","24.1"
'''


def test_the_l2_probe_reads_ncu_csv_in_base_units():
    from conftest import load_probe_script

    probe = load_probe_script("probe-l2-cache", "l2_cache_probe")
    values = probe.ncu_values(NCU_CSV)
    assert values == pytest.approx({"dram__bytes_read.sum": 1.63e9, "gpu__time_duration.sum": 434.5e-6,
                                    "lts__t_sector_hit_rate.pct": 24.1})
    assert probe.ncu_values("==ERROR== no kernel profiled") == dict.fromkeys(probe.NCU_METRICS)
    # what ncu 2025 on the H200 printed (run 20261202T063046Z, whose case failed on "ns")
    seen = NCU_CSV.replace('"Gbyte","1.63"', '"byte","1,838,137,856"').replace('"usecond","434.50"', '"ns","413,728"')
    assert probe.ncu_values(seen) == pytest.approx({"dram__bytes_read.sum": 1838137856.0,
                                                    "gpu__time_duration.sum": 413728e-9, "lts__t_sector_hit_rate.pct": 24.1})
