"""FP8 GEMM scaling recipes for D = A @ B.T (A: M x K activations, B: N x K weights, both K-major).

A recipe gives each operand a scale per group of (rows x K) elements; elements are x / scale
rounded to the FP8 type, and the GEMM applies the scales where a kernel would:

  per-tensor       one scale per operand (amax / max_value), E4M3 or E5M2
  per-row          A per row (token), B per row (output channel): scales come out of the
                   K-sum and are applied in the epilogue
  block-1x128      A per row and 128 K-values, B per 128 x 128 block (DeepSeek-V3): the scales
                   change along K, so each 128-wide K slice's partial product is scaled before it
                   is added (DeepGEMM's promotion)
  mxfp8            both per row and 32 K-values with power-of-two (UE8M0) scales (OCP MX)

`scaled_gemm` takes any `matmul` (NumPy here, torch on the GPU), so the same code is the CPU test's
and the probe's. `misapply_a_scales` is the negative control's bug: A's per-row scales applied
along the output's columns (it runs on square problems without an error).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from . import block_scale
from . import minifloat as mf

RECIPES = ("per-tensor-e4m3", "per-tensor-e5m2", "per-row", "block-1x128", "mxfp8")


@dataclass
class Operand:
    """x ~= elements * scales, each scale covering `group` = (rows, k) elements."""

    elements: Any            # (rows, K) FP8 values, float64 (or a tensor once moved)
    scales: Any              # (rows // group[0], K // group[1])
    group: tuple[int, int]

    def dequantize(self) -> np.ndarray:
        rows, k = np.asarray(self.elements).shape
        expanded = np.repeat(np.repeat(np.asarray(self.scales), self.group[0], axis=0), self.group[1], axis=1)
        return np.asarray(self.elements) * expanded[:rows, :k]

    def moved(self, to: Callable[[np.ndarray], Any]) -> "Operand":
        return replace(self, elements=to(np.asarray(self.elements)), scales=to(np.asarray(self.scales)))


def quantize_groups(x: np.ndarray, group: tuple[int, int], fmt: mf.MiniFloat) -> Operand:
    """amax / max_value scales (FP32) over (rows, k) groups, elements rounded to `fmt`."""
    x = np.asarray(x, dtype=np.float64)
    rows, k = x.shape
    gr, gk = group
    if rows % gr or k % gk:
        raise ValueError(f"shape {x.shape} is not a multiple of the scale group {group}")
    blocks = x.reshape(rows // gr, gr, k // gk, gk)
    amax = np.abs(blocks).max(axis=(1, 3))
    scales = np.where(amax > 0, amax / fmt.max_value, 1.0).astype(np.float32).astype(np.float64)
    elements = mf.round_to(blocks / scales[:, None, :, None], fmt)
    return Operand(elements.reshape(rows, k), scales, group)


def quantize_operand(x: np.ndarray, recipe: str, role: str) -> Operand:
    """Quantize A (role "a") or B (role "b") by `recipe`."""
    rows, k = np.asarray(x).shape
    if recipe == "per-tensor-e4m3":
        return quantize_groups(x, (rows, k), mf.E4M3)
    if recipe == "per-tensor-e5m2":
        return quantize_groups(x, (rows, k), mf.E5M2)
    if recipe == "per-row":
        return quantize_groups(x, (1, k), mf.E4M3)
    if recipe == "block-1x128":
        return quantize_groups(x, (1, 128) if role == "a" else (128, 128), mf.E4M3)
    if recipe == "mxfp8":
        q = block_scale.quantize(x, block_scale.MXFP8)
        return Operand(q.elements, q.scales(), (1, block_scale.MXFP8.block))
    raise ValueError(f"unknown recipe {recipe!r}; use one of {RECIPES}")


def scaled_gemm(a: Operand, b: Operand, matmul: Callable[[Any, Any], Any], misapply_a_scales: bool = False):
    """sum over K groups of (A_q slice @ B_q slice.T) scaled by both operands' scales of that slice."""
    m, k = a.elements.shape
    n = b.elements.shape[0]
    step = a.group[1]
    if b.group[1] % step and step % b.group[1]:
        raise ValueError(f"K groups {a.group[1]} and {b.group[1]} do not nest")
    step = min(a.group[1], b.group[1])
    (ar, ak), (br, bk) = a.group, b.group
    out = None
    for k0 in range(0, k, step):
        part = matmul(a.elements[:, k0:k0 + step], b.elements[:, k0:k0 + step].T)
        sa, sb = a.scales[:, k0 // ak], b.scales[:, k0 // bk]
        if misapply_a_scales:      # A's row scales laid along the columns (needs m == n, ar == br)
            part = (part.reshape(m, n // ar, ar) * sa[None, :, None]).reshape(m, n)
        else:
            part = (part.reshape(m // ar, ar, n) * sa[:, None, None]).reshape(m, n)
        part = (part.reshape(m, n // br, br) * sb[None, :, None]).reshape(m, n)
        out = part if out is None else out + part
    return out
