"""Host side of gemv.cu: build it with nvcc, check a shape is supported, launch on torch tensors.

y = x @ w.T for x: (M, K) with M in {1, 4, 8, 16} and w: (N, K), both K contiguous; bf16 in, bf16 out
(FP32 accumulation) or int8 in, int32 out (exact). Launches go to the stream the caller passes, so
they can be captured in a CUDA graph.

Run it: `kernelwiki probe run --probe probe-small-m-gemv` on an H200 (`--compile-only` needs nvcc).
"""

from __future__ import annotations

from pathlib import Path

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness.cubin import Cubin

SOURCE = Path(__file__).resolve().parent / "gemv.cu"
WARPS_PER_BLOCK = 4
UNROLL = 4
ROWS = {1: 2, 4: 2, 8: 4, 16: 4}          # w rows per warp, by M (as GEMV_ENTRY in gemv.cu)
CHUNK = {"bf16": 256, "s8": 512}          # K elements one warp covers per chunk (16 bytes per lane)
DTYPES = tuple(CHUNK)


def can_implement(dtype: str, m: int, n: int, k: int) -> None:
    """Raise ValueError naming the value and what is supported."""
    if dtype not in CHUNK:
        raise ValueError(f"dtype {dtype!r} not supported; use one of {', '.join(DTYPES)}")
    if m not in ROWS:
        raise ValueError(f"M={m} not supported; use one of {sorted(ROWS)}")
    if n <= 0 or n % ROWS[m]:
        raise ValueError(f"N={n} not supported at M={m}: N must be a positive multiple of {ROWS[m]}")
    step = CHUNK[dtype] * UNROLL
    if k <= 0 or k % step:
        raise ValueError(f"K={k} not supported for {dtype}: K must be a positive multiple of {step}")


def grid(m: int, n: int) -> int:
    """CTAs for N outputs: one warp per ROWS[m] rows of w, WARPS_PER_BLOCK warps per CTA."""
    warps = n // ROWS[m]
    return -(-warps // WARPS_PER_BLOCK)


def kernel_name(dtype: str, m: int) -> str:
    return f"gemv_{dtype}_m{m}"


def build(arch: str = "sm_90a") -> compile_mod.Emitted:
    """PTX, cubin and SASS of every entry point for one architecture."""
    return compile_mod.nvcc(SOURCE, arch)


class Gemv:
    """The built kernels loaded into torch's CUDA context."""

    def __init__(self, cubin: bytes):
        self._cubin = Cubin(cubin)

    def __call__(self, x, w, y, *, stream: int, skip_chunks: int = 0) -> None:
        """y (M, N) = x (M, K) @ w (N, K).T; dtype from w (bfloat16 or int8)."""
        dtype = "s8" if str(w.dtype) == "torch.int8" else "bf16"
        (m, k), (n, kw) = x.shape, w.shape
        if kw != k or tuple(y.shape) != (m, n):
            raise ValueError(f"expected x (M, K), w (N, K), y (M, N); got {tuple(x.shape)}, {tuple(w.shape)}, "
                             f"{tuple(y.shape)}")
        for name, t in (("x", x), ("w", w), ("y", y)):
            if not t.is_contiguous():
                raise ValueError(f"{name} must be contiguous")
        can_implement(dtype, m, n, k)
        self._cubin.launch(kernel_name(dtype, m), grid(m, n), WARPS_PER_BLOCK * 32,
                           [("ptr", x), ("ptr", w), ("ptr", y), ("i32", n), ("i32", k), ("i32", skip_chunks)],
                           stream)


def reference(x, w):
    """x @ w.T in float64 (exact for the int8 cases: |sum| < 2^53)."""
    return x.double() @ w.double().t()
