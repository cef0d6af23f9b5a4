"""Host side of tma_store.cu: launch its four epilogues through the library's launchers, and the
references they are checked against. Build the library with the harness
(`kernelwiki.harness.compile.nvcc_library(SOURCE, "sm_90a")`) and pass it to `EpilogueKernels`.

Run it: `kernelwiki probe run --probe probe-tma-store` on an H200 (`--compile-only` needs nvcc).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

SOURCE = Path(__file__).with_name("tma_store.cu")
TILE_M, TILE_N = 64, 128


def check_shape(m: int, n: int, splits: int = 1) -> None:
    """The kernels take whole tiles only (the probe's shapes are multiples of the tile)."""
    if m <= 0 or n <= 0 or m % TILE_M or n % TILE_N or splits < 1:
        raise ValueError(f"shape {m}x{n} (splits {splits}) not supported: m a multiple of {TILE_M}, "
                         f"n a multiple of {TILE_N}, splits >= 1")


def store_reference(a, b):
    """What the store epilogues write: the fp32 product a[r] * b[c] rounded once to bf16 (exact)."""
    import torch

    return (a.float()[:, None] * b.float()[None, :]).to(torch.bfloat16)


def reduce_reference(a, b):
    """What the reduce epilogues add into a zeroed output: sum over splits s of a[s, r] * b[s, c], fp64.
    a is (splits, m), b is (splits, n); works on torch tensors or numpy arrays."""
    a64 = a.double() if hasattr(a, "double") else a.astype("float64")
    b64 = b.double() if hasattr(b, "double") else b.astype("float64")
    return a64.T @ b64


class EpilogueKernels:
    """tma_store.cu's launchers in a loaded library."""

    def __init__(self, library: ctypes.CDLL):
        ptr, i32 = ctypes.c_void_p, ctypes.c_int
        self._lib = library
        library.ep_launch_st_global.argtypes = [ptr, ptr, ptr, i32, i32, ptr]
        library.ep_launch_tma_store.argtypes = [ptr, ptr, ptr, i32, i32, i32, i32, ptr]
        library.ep_launch_atomic.argtypes = [ptr, ptr, ptr, i32, i32, i32, i32, ptr]
        library.ep_launch_tma_reduce.argtypes = [ptr, ptr, ptr, i32, i32, i32, i32, ptr]
        library.ep_error_string.restype = ctypes.c_char_p
        library.ep_error_string.argtypes = [i32]

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"tma_store: {what} failed: {self._lib.ep_error_string(err).decode(errors='replace')}")

    def st_global(self, a, b, out, *, stream: int) -> None:
        m, n = out.shape
        check_shape(m, n)
        self._check(self._lib.ep_launch_st_global(a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, stream), "st.global")

    def tma_store(self, a, b, out, *, stream: int, fence: bool = True, pitch_in_elements: bool = False) -> None:
        m, n = out.shape
        check_shape(m, n)
        self._check(self._lib.ep_launch_tma_store(a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, int(fence),
                                                  int(pitch_in_elements), stream), "TMA store")

    def atomic(self, a, b, out, *, stream: int, vector: bool) -> None:
        (m, n), splits = out.shape, a.shape[0]
        check_shape(m, n, splits)
        self._check(self._lib.ep_launch_atomic(a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, splits, int(vector),
                                               stream), "atomicAdd")

    def tma_reduce(self, a, b, out, *, stream: int, round_fp16: bool = False) -> None:
        (m, n), splits = out.shape, a.shape[0]
        check_shape(m, n, splits)
        self._check(self._lib.ep_launch_tma_reduce(a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, splits,
                                                   int(round_fp16), stream), "TMA reduce-add")
