"""Host side of tick.cu: one launch per call (tick_launch) or many from a C++ loop (tick_launch_many),
on the stream the caller passes. Build the library with the harness
(`kernelwiki.harness.compile.nvcc_library(SOURCE, "sm_90a")`) and pass it to `Tick`.

Run it: `kernelwiki probe run --probe probe-launch-overhead` on an H200 (`--compile-only` needs nvcc).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

SOURCE = Path(__file__).with_name("tick.cu")


class Tick:
    """tick.cu's launchers in a loaded library."""

    def __init__(self, library: ctypes.CDLL):
        ptr, i32 = ctypes.c_void_p, ctypes.c_int
        self._lib = library
        library.tick_launch.argtypes = [ptr, ptr]
        library.tick_launch_many.argtypes = [ptr, i32, ptr]
        library.tick_error_string.restype = ctypes.c_char_p
        library.tick_error_string.argtypes = [i32]
        self._check(library.tick_prepare(), "loading the kernel")

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"tick: {what} failed: {self._lib.tick_error_string(err).decode(errors='replace')}")

    def __call__(self, counter, *, stream: int) -> None:
        """counter: a one-element int32 CUDA tensor, incremented by one."""
        self._check(self._lib.tick_launch(counter.data_ptr(), stream), "launch")

    def many(self, counter, count: int, *, stream: int) -> None:
        """`count` launches from one C++ loop (no Python between them)."""
        self._check(self._lib.tick_launch_many(counter.data_ptr(), count, stream), "launch")
