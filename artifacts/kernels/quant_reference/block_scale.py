"""MXFP8, MXFP4 and NVFP4 quantization along the last axis, and the scale-factor byte order of tcgen05.

MX (OCP MX v1.0): blocks of 32 values share a power-of-two scale X = 2**(floor(log2(amax)) - emax),
emax being the element type's largest exponent (8 for E4M3, 2 for E2M1); elements are x / X rounded
to the element type, saturating (the largest values of a block can clip by up to a factor of 2).
NVFP4: a tensor scale s_t = amax(tensor) / (448 * 6) in FP32, then per 16 values a UE4M3 scale
s_b = round(amax(block) / 6 / s_t), elements x / (s_b * s_t) rounded to E2M1.

The block-scaled tcgen05 MMAs read scale factors in 512-byte atoms of 128 rows x 4 scale columns:
row r and scale column c of an atom sit at byte 16 * (r % 32) + 4 * (r // 32) + c, and the atoms are
laid out with the K direction fastest (`sf_offsets`). A row-major scale matrix handed to the kernel
gives every row the wrong scales, the bug the probes' negative control commits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import minifloat as mf

ATOM_ROWS, ATOM_COLS = 128, 4


@dataclass(frozen=True)
class BlockFormat:
    name: str
    element: mf.MiniFloat
    block: int
    scale: str            # "ue8m0" or "ue4m3"
    tensor_scale: bool    # NVFP4's second, per-tensor FP32 level


MXFP8 = BlockFormat("mxfp8", mf.E4M3, 32, "ue8m0", False)
MXFP4 = BlockFormat("mxfp4", mf.E2M1, 32, "ue8m0", False)
NVFP4 = BlockFormat("nvfp4", mf.E2M1, 16, "ue4m3", True)
FORMATS = {f.name: f for f in (MXFP8, MXFP4, NVFP4)}


@dataclass
class Quantized:
    """x ~= elements * scales (per block, broadcast over the block) * tensor_scale."""

    fmt: BlockFormat
    elements: np.ndarray      # values of the element type, shape of x
    scale_codes: np.ndarray   # uint8, shape (..., K // block)
    tensor_scale: float = 1.0

    def scales(self, codes: np.ndarray | None = None) -> np.ndarray:
        codes = self.scale_codes if codes is None else codes
        if self.fmt.scale == "ue8m0":
            return mf.e8m0_decode(codes)
        return mf.decode(codes, mf.UE4M3)

    def dequantize(self, scale_codes: np.ndarray | None = None) -> np.ndarray:
        scales = np.repeat(self.scales(scale_codes), self.fmt.block, axis=-1)
        return self.elements * scales * self.tensor_scale


def _blocks(x: np.ndarray, block: int) -> np.ndarray:
    if x.shape[-1] % block:
        raise ValueError(f"last axis {x.shape[-1]} is not a multiple of the block size {block}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def quantize(x: np.ndarray, fmt: BlockFormat) -> Quantized:
    x = np.asarray(x, dtype=np.float64)
    blocks = _blocks(x, fmt.block)
    amax = np.abs(blocks).max(axis=-1)
    if fmt.scale == "ue8m0":
        _, exp = np.frexp(np.where(amax > 0, amax, 1.0))
        shared = np.clip(exp.astype(np.int64) - 1 - fmt.element.emax, -mf.E8M0_BIAS, mf.E8M0_BIAS)
        codes, tensor_scale = mf.e8m0_encode(shared), 1.0
        scales = np.exp2(shared.astype(np.float64))
    else:
        tensor_amax = float(np.abs(x).max())
        tensor_scale = float(np.float32(tensor_amax / (mf.UE4M3.max_value * fmt.element.max_value))) or 1.0
        scales = mf.round_to(amax / fmt.element.max_value / tensor_scale, mf.UE4M3)
        codes = mf.encode(scales, mf.UE4M3)
    safe = np.where(scales > 0, scales, 1.0)[..., None] * tensor_scale
    elements = np.where(scales[..., None] > 0, mf.round_to(blocks / safe, fmt.element), 0.0)
    return Quantized(fmt, elements.reshape(x.shape), codes, tensor_scale)


def padded(rows: int, scale_cols: int) -> tuple[int, int]:
    """The scale matrix filled out to whole 128 x 4 atoms."""
    return -(-rows // ATOM_ROWS) * ATOM_ROWS, -(-scale_cols // ATOM_COLS) * ATOM_COLS


def sf_offsets(rows: int, scale_cols: int) -> np.ndarray:
    """Byte offset of scale (r, c) in the tcgen05 layout, an int64 (rows, scale_cols) array."""
    _, cols_padded = padded(rows, scale_cols)
    r = np.arange(rows)[:, None]
    c = np.arange(scale_cols)[None, :]
    atom = (r // ATOM_ROWS) * (cols_padded // ATOM_COLS) + c // ATOM_COLS
    return atom * (ATOM_ROWS * ATOM_COLS) + 16 * (r % 32) + 4 * ((r // 32) % 4) + c % ATOM_COLS


def pack_scales(codes: np.ndarray) -> np.ndarray:
    """A (rows, scale_cols) uint8 scale matrix as the flat buffer the MMA reads (padding bytes 0)."""
    rows, cols = codes.shape
    rows_p, cols_p = padded(rows, cols)
    buffer = np.zeros(rows_p * cols_p, dtype=np.uint8)
    buffer[sf_offsets(rows, cols)] = codes
    return buffer


def unpack_scales(buffer: np.ndarray, rows: int, scale_cols: int) -> np.ndarray:
    return np.asarray(buffer)[sf_offsets(rows, scale_cols)]


def unpack_scales_row_major(buffer: np.ndarray, rows: int, scale_cols: int) -> np.ndarray:
    """The broken reader: treats the tcgen05 buffer as a plain row-major matrix."""
    rows_p, cols_p = padded(rows, scale_cols)
    return np.asarray(buffer).reshape(rows_p, cols_p)[:rows, :scale_cols]


def pack_e2m1_pairs(codes: np.ndarray) -> np.ndarray:
    """Two FP4 codes per byte along the last axis, the even element in the low nibble."""
    codes = np.asarray(codes, dtype=np.uint8)
    if codes.shape[-1] % 2:
        raise ValueError("an odd number of FP4 values cannot be packed in pairs")
    return (codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4)


def unpack_e2m1_pairs(packed: np.ndarray) -> np.ndarray:
    packed = np.asarray(packed, dtype=np.uint8)
    out = np.empty((*packed.shape[:-1], packed.shape[-1] * 2), dtype=np.uint8)
    out[..., 0::2], out[..., 1::2] = packed & 0xF, packed >> 4
    return out
