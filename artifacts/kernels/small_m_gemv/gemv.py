"""Host side of gemv.cu: check a shape is supported and launch through the library's launchers.

y = x @ w.T for x: (M, K) with M in {1, 4, 8, 16} and w: (N, K), both K contiguous; bf16 in, bf16 out
(FP32 accumulation) or int8 in, int32 out (exact). Launches go to the stream the caller passes, so
they can be captured in a CUDA graph. Build the library with the harness
(`kernelwiki.harness.compile.nvcc_library(SOURCE, "sm_90a")`) and pass it to `Gemv`.

Run it: `kernelwiki probe run --probe probe-small-m-gemv` on an H200 (`--compile-only` needs nvcc).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

SOURCE = Path(__file__).with_name("gemv.cu")
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


class Gemv:
    """gemv.cu's launchers in a loaded library."""

    def __init__(self, library: ctypes.CDLL):
        ptr, i32 = ctypes.c_void_p, ctypes.c_int
        self._lib = library
        for name in ("gemv_launch_bf16", "gemv_launch_s8"):
            getattr(library, name).argtypes = [ptr, ptr, ptr, i32, i32, i32, i32, ptr]
        library.gemv_error_string.restype = ctypes.c_char_p
        library.gemv_error_string.argtypes = [i32]
        self._check(library.gemv_prepare(), "loading the kernels")

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"gemv: {what} failed: {self._lib.gemv_error_string(err).decode(errors='replace')}")

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
        launch = self._lib.gemv_launch_s8 if dtype == "s8" else self._lib.gemv_launch_bf16
        self._check(launch(x.data_ptr(), w.data_ptr(), y.data_ptr(), m, n, k, skip_chunks, stream), "launch")


def reference(x, w):
    """x @ w.T in float64 (exact for the int8 cases: |sum| < 2^53)."""
    return x.double() @ w.double().t()
