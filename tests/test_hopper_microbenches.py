"""The three Hopper microbenchmarks built by nvcc (PDL, DSMEM, shared-memory banks): their pure-Python
references, the bank arithmetic behind the expected conflict degrees, that each negative control's
broken variant really differs from the reference, the shared-library build, and (with nvcc) that
each kernel's PTX/SASS holds the instructions its probe.yaml expects."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import ROOT

from artifacts.kernels.dsmem import cluster as dsmem
from artifacts.kernels.pdl import chain
from artifacts.kernels.smem_banks import patterns
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.model import yamlio


# --- shared-memory banks -------------------------------------------------------------------------
@pytest.mark.parametrize("stride, degree", [(1, 1), (2, 2), (3, 1), (4, 4), (8, 8), (16, 16), (32, 32), (33, 1),
                                            (64, 32)])
def test_conflict_degree_of_strides(stride, degree):
    assert patterns.conflict_degree(patterns.stride_offsets(stride)) == degree


def test_same_word_is_a_broadcast_not_a_conflict():
    assert patterns.conflict_degree([7] * 32) == 1
    assert patterns.conflict_degree([0, 32, 0, 32]) == 2


def test_column_layouts():
    """A column of a row-major 32-word-wide tile is the 32-way case; padding and XOR swizzle fix it."""
    assert patterns.PATTERNS["column-row-major"].degree == 32
    assert patterns.PATTERNS["column-padded"].degree == 1
    assert patterns.PATTERNS["column-swizzled"].degree == 1
    for layout in ("row-major", "padded", "swizzled"):  # a row (lanes = columns) stays conflict-free
        row_major_row = [patterns.column_offsets(layout, c)[3] for c in range(32)]
        assert patterns.conflict_degree(row_major_row) == 1
    with pytest.raises(ValueError, match="supported: row-major"):
        patterns.column_offsets("diagonal")


def test_every_pattern_fits_the_shared_words():
    for pattern in patterns.PATTERNS.values():
        assert max(pattern.offsets) + 7 * 32 < patterns.WORDS  # banks_kernel adds 32 words per unrolled load


@pytest.mark.parametrize("num", [1, 2, 4])
def test_matrix_wavefronts(num):
    """Eight 16-byte rows 128 bytes apart share four banks: 8 wavefronts per matrix; SW128 makes it one."""
    assert patterns.matrix_wavefronts(num, swizzle=False) == 8 * num
    assert patterns.matrix_wavefronts(num, swizzle=True) == num


def _tile(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1 << 16, size=(patterns.TILE_ROWS, 64)).tolist()


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("swizzle", [False, True])
def test_ldmatrix_fragment_is_the_ptx_layout_whatever_the_swizzle(num, swizzle):
    """Lane l, register j: row l // 4, columns 2 (l % 4) and +1 of matrix j (chunk j of rows 0-7)."""
    tile = _tile(num)
    fragment = patterns.ldmatrix_fragment(tile, num, swizzle, swizzle)
    for j in range(num):
        for lane in range(32):
            row, col = lane // 4, 8 * j + 2 * (lane % 4)
            assert fragment[j * 32 + lane] == tile[row][col] | (tile[row][col + 1] << 16)


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("swizzle", [False, True])
def test_stmatrix_round_trip_gives_the_tile_back(num, swizzle):
    tile = _tile(10 + num)
    words = patterns.round_trip(tile, num, swizzle, swizzle)
    expected = [tile[r][8 * m + 2 * k] | (tile[r][8 * m + 2 * k + 1] << 16)
                for m in range(num) for r in range(8) for k in range(4)]
    assert words == expected


def test_negative_control_swizzle_on_store_only_gives_wrong_fragments():
    tile = _tile(77)
    right = patterns.ldmatrix_fragment(tile, 4, True, True)
    wrong = patterns.ldmatrix_fragment(tile, 4, True, False)
    result = gates.check(np.array(wrong, dtype=np.int64), np.array(right, dtype=np.int64), "exact")
    assert not result["passed"]
    assert wrong[:4] == right[:4]  # row 0 is not permuted by the swizzle: only rows 1-7 come out wrong


def test_ldmatrix_num_is_checked():
    with pytest.raises(ValueError, match="x1, x2 or x4"):
        patterns.ldmatrix_addresses(3, swizzle=False)


# --- programmatic dependent launch -------------------------------------------------------------------
def test_pdl_reference_and_a_stale_read():
    rng = np.random.default_rng(0)
    x, bias = rng.standard_normal(64, dtype=np.float32), rng.standard_normal(64, dtype=np.float32)
    ref = chain.reference(x, bias, 8)
    assert ref.dtype == np.float32 and np.allclose(ref, x + 8 * (1 + bias), atol=1e-4)
    assert chain.steps_missed(ref, x, bias, 8) == 0
    stale = chain.reference(x, bias, 7)        # every consumer of one round read the previous buf
    stale[:10] = ref[:10]
    assert chain.steps_missed(stale, x, bias, 8) == 54
    assert not gates.check(stale, ref, "exact")["passed"]


def test_pdl_modes():
    assert [(m.pdl, m.early_trigger) for m in chain.MODES.values()] == [(False, False), (True, False), (True, True)]


# --- distributed shared memory -----------------------------------------------------------------------
def test_dsmem_ring_reference_and_chase():
    x = np.arange(3 * 4 * dsmem.CHECK_WORDS, dtype=np.int32)
    ring = dsmem.ring_reference(x, 4).reshape(3, 4, dsmem.CHECK_WORDS)
    assert ring[1, 0, 0] == x.reshape(3, 4, -1)[1, 1, 0] and ring[1, 3, 5] == x.reshape(3, 4, -1)[1, 0, 5]
    assert np.array_equal(dsmem.ring_reference(x, 1), x)  # a cluster of one is its own peer
    assert dsmem.chase_end(1) == dsmem.CHASE_STRIDE and dsmem.chase_end(dsmem.CHASE_WORDS) == 0
    chain_words = {(i * dsmem.CHASE_STRIDE) % dsmem.CHASE_WORDS for i in range(dsmem.CHASE_WORDS)}
    assert len(chain_words) == dsmem.CHASE_WORDS  # the chain visits every word: no short cycle
    assert dsmem.SMEM_BYTES > 228 * 1024 // 2      # one CTA per SM: peers are always on other SMs


# --- the build ---------------------------------------------------------------------------------------
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


@needs_nvcc
def test_nvcc_library_builds_and_loads(tmp_path):
    source = tmp_path / "lib.cu"
    source.write_text('__global__ void k(int* p) { *p = 1; }\nextern "C" int seven() { return 7; }\n')
    assert compile_mod.nvcc_library(source, "sm_90a").seven() == 7
    assert not list(tmp_path.glob("*.so"))


@needs_nvcc
@pytest.mark.parametrize("probe, source", [("probe-pdl", chain.SOURCE), ("probe-dsmem", dsmem.SOURCE),
                                           ("probe-smem-banks", patterns.SOURCE)])
def test_expected_instructions_are_emitted(probe, source):
    spec, _ = yamlio.load((ROOT / "probes" / probe / "probe.yaml").read_text(encoding="utf-8"))
    result = compile_mod.scan(compile_mod.nvcc(source, "sm_90a"), spec["expected_instructions"]["sm_90a"])
    if not result["sass_scanned"]:
        pytest.skip("no nvdisasm")
    assert result["missing"] == []
