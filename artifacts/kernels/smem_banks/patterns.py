"""Bank arithmetic for smem_banks.cu: which word each lane touches, how many wavefronts that costs.

Shared memory has 32 banks of 4 bytes; word w lives in bank w % 32. A warp access needs as many
passes (wavefronts) as the most distinct words any one bank must deliver; lanes reading the same
word share it (broadcast). `conflict_degree` is that number, computed from the addresses alone, so
the probe can put the expected cost beside the measured cycles.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("smem_banks.cu")
BANKS = 32
WORD_BYTES = 4
LANES = 32
WORDS = 4096              # shared words banks_kernel fills (16 KiB)
TILE_ROWS, ROW_BYTES, CHUNK_BYTES = 64, 128, 16   # the ldmatrix tile (smem_banks.cu)


def conflict_degree(word_addresses: list[int]) -> int:
    """Wavefronts one warp-wide access to these word addresses needs: the most distinct words in one bank."""
    per_bank: dict[int, set[int]] = {}
    for word in word_addresses:
        per_bank.setdefault(word % BANKS, set()).add(word)
    return max(len(words) for words in per_bank.values())


def stride_offsets(stride: int) -> list[int]:
    """Lane l reads word l * stride."""
    return [lane * stride for lane in range(LANES)]


def column_offsets(layout: str, column: int = 0) -> list[int]:
    """Lane l reads element (row l, `column`) of a 32 x 32 word tile stored as `layout`:
    row-major (row stride 32 words), padded (row stride 33), or swizzled (column XOR row)."""
    if layout == "row-major":
        return [row * 32 + column for row in range(LANES)]
    if layout == "padded":
        return [row * 33 + column for row in range(LANES)]
    if layout == "swizzled":
        return [row * 32 + (column ^ row) for row in range(LANES)]
    raise ValueError(f"layout {layout!r} not supported; supported: row-major, padded, swizzled")


def chunk_offset(row: int, chunk: int, swizzle: bool) -> int:
    """Byte offset of 16-byte chunk `chunk` of tile row `row` (128-byte rows, SW128 when swizzled)."""
    return row * ROW_BYTES + CHUNK_BYTES * ((chunk ^ (row % 8)) if swizzle else chunk)


def ldmatrix_addresses(num: int, swizzle: bool) -> list[list[int]]:
    """Byte addresses of each 8x8 matrix's rows, as smem_banks.cu's lanes supply them:
    matrix j is chunk j of rows 0..7 (num = 1, 2 or 4 matrices)."""
    if num not in (1, 2, 4):
        raise ValueError(f"num={num} not supported; ldmatrix/stmatrix take x1, x2 or x4")
    return [[chunk_offset(row, j, swizzle) for row in range(8)] for j in range(num)]


def matrix_wavefronts(num: int, swizzle: bool) -> int:
    """Wavefronts of one ldmatrix/stmatrix: each matrix is one phase of eight 16-byte rows."""
    total = 0
    for rows in ldmatrix_addresses(num, swizzle):
        words = [address // WORD_BYTES + k for address in rows for k in range(CHUNK_BYTES // WORD_BYTES)]
        total += conflict_degree(words)
    return total


def ldmatrix_fragment(tile: list[list[int]], num: int, swizzle_store: bool = False, swizzle_load: bool = False
                      ) -> list[int]:
    """The 32-bit words ldmatrix.m8n8.b16 hands lane l in register j (out[j * 32 + l]), from a tile of
    16-bit values tile[row][col] (64 per row) stored with `swizzle_store` and addressed with
    `swizzle_load`: lane l gets row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1 of matrix j."""
    flat = _stored_bytes(tile, swizzle_store)
    out = []
    for rows in ldmatrix_addresses(num, swizzle_load):
        for lane in range(LANES):
            start = rows[lane // 4] + 4 * (lane % 4)
            out.append(int.from_bytes(bytes(flat[start:start + 4]), "little"))
    return out


def round_trip(tile: list[list[int]], num: int, swizzle_store: bool = False, swizzle_load: bool = False
               ) -> list[int]:
    """What the round trip (ldmatrix, stmatrix into a second tile with the store layout, read back
    through the load layout) writes: row r of matrix m as four words at out[128 + 4 (8 m + r) ...]."""
    fragment = ldmatrix_fragment(tile, num, swizzle_store, swizzle_load)
    second = bytearray(TILE_ROWS * ROW_BYTES)
    for j, rows in enumerate(ldmatrix_addresses(num, swizzle_store)):  # stmatrix: the inverse placement
        for lane in range(LANES):
            start = rows[lane // 4] + 4 * (lane % 4)
            second[start:start + 4] = fragment[j * 32 + lane].to_bytes(4, "little")
    out = []
    for rows in ldmatrix_addresses(num, swizzle_load):
        for address in rows:
            out += [int.from_bytes(second[address + 4 * k:address + 4 * k + 4], "little") for k in range(4)]
    return out


def _stored_bytes(tile: list[list[int]], swizzle: bool) -> bytearray:
    """The tile as smem_banks.cu stores it: chunk c of row r at chunk_offset(r, c, swizzle)."""
    flat = bytearray(TILE_ROWS * ROW_BYTES)
    for row in range(TILE_ROWS):
        for chunk in range(ROW_BYTES // CHUNK_BYTES):
            values = tile[row][8 * chunk:8 * chunk + 8]
            start = chunk_offset(row, chunk, swizzle)
            flat[start:start + 16] = b"".join(v.to_bytes(2, "little") for v in values)
    return flat


@dataclass(frozen=True)
class Pattern:
    """One 32-bit access pattern of the page's table."""

    name: str
    offsets: tuple[int, ...]

    @property
    def degree(self) -> int:
        return conflict_degree(list(self.offsets))


PATTERNS: dict[str, Pattern] = {p.name: p for p in (
    *(Pattern(f"stride-{s}", tuple(stride_offsets(s))) for s in (1, 2, 4, 8, 16, 32)),
    *(Pattern(f"column-{layout}", tuple(column_offsets(layout, 5))) for layout in ("row-major", "padded",
                                                                                   "swizzled")),
)}


class Banks:
    """smem_banks.cu's launchers in a loaded library (compile.nvcc_library(SOURCE, "sm_90a"))."""

    def __init__(self, library):
        import ctypes

        ptr, i32 = ctypes.c_void_p, ctypes.c_int
        self._lib = library
        library.banks_launch.argtypes = [ptr, ptr, ptr, ptr, i32, i32, i32, i32, ptr]
        library.matrix_launch.argtypes = [ptr, ptr, ptr, i32, i32, i32, i32, i32, i32, ptr]
        library.banks_error_string.restype = ctypes.c_char_p
        library.banks_error_string.argtypes = [i32]
        self._check(library.banks_prepare(WORDS * WORD_BYTES), "loading the kernels")

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"smem_banks: {what} failed: {self._lib.banks_error_string(err).decode(errors='replace')}")

    def strided(self, x, offsets, out, cycles, *, iters: int, threads: int, stream: int) -> None:
        """x: WORDS int32; offsets: 32 int32 word offsets; out: >= 32 + threads int32; cycles: 1 int64."""
        self._check(self._lib.banks_launch(x.data_ptr(), offsets.data_ptr(), out.data_ptr(), cycles.data_ptr(), WORDS,
                                           iters, threads, WORDS * WORD_BYTES, stream), "banks_kernel")

    def matrix(self, x, out, cycles, *, num: int, iters: int, timed_store: bool, swizzle_store: bool,
               swizzle_load: bool, threads: int, stream: int) -> None:
        """x: the 64 x 128-byte tile (8 KiB); out: >= 512 + threads int32; cycles: 1 int64."""
        self._check(self._lib.matrix_launch(x.data_ptr(), out.data_ptr(), cycles.data_ptr(), num, iters,
                                            int(timed_store), int(swizzle_store), int(swizzle_load), threads, stream),
                    "matrix_kernel")
