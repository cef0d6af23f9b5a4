"""The fused epilogue's math as a reference, for numpy arrays or torch tensors (CPU or GPU) alike.

    D = act(alpha * (A @ B^T) + bias) + beta * C

`xp` is the array module (numpy or torch): only operations both spell the same way are used
(`xp.tanh`, broadcasting arithmetic), so one function checks the kernel on the GPU (torch) and is
tested on a machine without torch (numpy). Both activations go through tanh, the textbook forms:
GELU's tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as torch's
gelu(approximate="tanh"), and SiLU x * sigmoid(x) = x * 0.5 (1 + tanh(x / 2)) (no exp to overflow).
The kernel computes the same functions another way (fused_epilogue.py: one exp2-based sigmoid),
so a kernel that shares a mistake with its reference is not what this checks against.
"""

from __future__ import annotations

import math
from typing import Any

ACTIVATIONS = ("gelu_tanh", "silu")


def activate(x: Any, activation: str | None, xp: Any) -> Any:
    """act(x) elementwise; None is the identity."""
    if activation is None:
        return x
    if activation == "gelu_tanh":
        return 0.5 * x * (1.0 + xp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
    if activation == "silu":
        return x * 0.5 * (1.0 + xp.tanh(0.5 * x))
    raise ValueError(f"activation={activation!r} unsupported; use one of {ACTIVATIONS} or None")


def fused_epilogue(product: Any, xp: Any, alpha: float = 1.0, bias: Any = None, activation: str | None = None,
                   residual: Any = None, beta: float = 1.0) -> Any:
    """act(alpha * product + bias) + beta * residual, in product's precision (pass FP32/FP64 operands):
    product ([L,] M, N) = A @ B^T, bias (N,) broadcast over rows and batches, residual like product."""
    x = alpha * product
    if bias is not None:
        x = x + bias
    x = activate(x, activation, xp)
    if residual is not None:
        x = x + beta * residual
    return x
