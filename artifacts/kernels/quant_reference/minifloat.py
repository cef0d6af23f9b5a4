"""Small floating-point formats: round to them, and encode/decode their bit codes.

One description covers every element type the FP8 and block-scaled formats use: E4M3 (the `fn`
variant: no infinities, 448 the largest value), E5M2, E2M1 (FP4) and, unsigned, the UE4M3 block
scale of NVFP4. E8M0, the power-of-two MX scale, has no mantissa and gets its own two functions.
Rounding is to nearest, ties to even, and saturates at the largest finite value, which is what the
scaling recipes want (a value just past the range clips instead of becoming NaN).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MiniFloat:
    name: str
    exp_bits: int
    man_bits: int
    bias: int
    max_value: float
    signed: bool = True

    @property
    def min_exp(self) -> int:
        """Exponent of the smallest normal value; below it the spacing stays 2**(min_exp - man_bits)."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest value (the OCP MX spec's emax_elem)."""
        return int(np.floor(np.log2(self.max_value)))


E4M3 = MiniFloat("e4m3", 4, 3, 7, 448.0)
E5M2 = MiniFloat("e5m2", 5, 2, 15, 57344.0)
E2M1 = MiniFloat("e2m1", 2, 1, 1, 6.0)
UE4M3 = MiniFloat("ue4m3", 4, 3, 7, 448.0, signed=False)


def _exponent(magnitude: np.ndarray, fmt: MiniFloat) -> np.ndarray:
    """floor(log2(magnitude)) exactly (frexp, not log2), never below the format's normal range."""
    _, exp = np.frexp(magnitude)
    return np.maximum(exp.astype(np.int64) - 1, fmt.min_exp)


def round_to(x: np.ndarray, fmt: MiniFloat) -> np.ndarray:
    """The nearest value of `fmt` (ties to even), saturating at +-max_value; float64."""
    x = np.asarray(x, dtype=np.float64)
    if not fmt.signed and np.any(x < 0):
        raise ValueError(f"{fmt.name} is unsigned: negative input")
    magnitude = np.minimum(np.abs(x), fmt.max_value)
    quantum = np.exp2((_exponent(magnitude, fmt) - fmt.man_bits).astype(np.float64))
    rounded = np.minimum(np.round(magnitude / quantum) * quantum, fmt.max_value)  # np.round: ties to even
    return np.copysign(rounded, x)


def encode(values: np.ndarray, fmt: MiniFloat) -> np.ndarray:
    """Bit codes (uint8, sign in the top used bit) of values already representable in `fmt`."""
    values = np.asarray(values, dtype=np.float64)
    if not np.array_equal(round_to(values, fmt), values):
        raise ValueError(f"values not representable in {fmt.name}: round them first")
    magnitude = np.abs(values)
    exp = _exponent(magnitude, fmt)
    subnormal = magnitude < 2.0 ** fmt.min_exp
    exp_field = np.where(subnormal, 0, exp + fmt.bias)
    scaled = magnitude / np.exp2(exp.astype(np.float64))             # in [1, 2) for normals, [0, 1) below
    mantissa = np.round(np.where(subnormal, scaled, scaled - 1.0) * 2 ** fmt.man_bits).astype(np.int64)
    codes = (exp_field << fmt.man_bits) | mantissa
    if fmt.signed:
        codes |= np.signbit(values).astype(np.int64) << (fmt.exp_bits + fmt.man_bits)
    return codes.astype(np.uint8)


def decode(codes: np.ndarray, fmt: MiniFloat) -> np.ndarray:
    """Values (float64) of bit codes of `fmt`."""
    codes = np.asarray(codes).astype(np.int64)
    mantissa = codes & ((1 << fmt.man_bits) - 1)
    exp_field = (codes >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)
    fraction = mantissa / 2 ** fmt.man_bits
    magnitude = np.where(exp_field == 0, fraction * 2.0 ** fmt.min_exp,
                         (1.0 + fraction) * np.exp2((exp_field - fmt.bias).astype(np.float64)))
    if not fmt.signed:
        return magnitude
    negative = (codes >> (fmt.exp_bits + fmt.man_bits)) & 1
    return np.where(negative == 1, -magnitude, magnitude)


E8M0_BIAS = 127
E8M0_NAN = 0xFF


def e8m0_encode(exponents: np.ndarray) -> np.ndarray:
    """UE8M0 codes of scales 2**exponent; exponent in [-127, 127] (code 255 is NaN)."""
    exponents = np.asarray(exponents, dtype=np.int64)
    if np.any((exponents < -E8M0_BIAS) | (exponents > E8M0_BIAS)):
        raise ValueError("E8M0 exponents are limited to [-127, 127]")
    return (exponents + E8M0_BIAS).astype(np.uint8)


def e8m0_decode(codes: np.ndarray) -> np.ndarray:
    codes = np.asarray(codes).astype(np.int64)
    return np.where(codes == E8M0_NAN, np.nan, np.exp2((codes - E8M0_BIAS).astype(np.float64)))
