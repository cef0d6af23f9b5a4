"""Host side of l2_cache.cu: launch the read and the pointer chase through the library's launchers,
and the exact host-side checks of both (the wrap-around checksum of what the read kernel reads, the
chain the chase follows). Build the library with the harness
(`kernelwiki.harness.compile.nvcc_library(SOURCE, "sm_90a")`) and pass it to `L2Kernels`.

Run it: `kernelwiki probe run --probe probe-l2-cache` on an H200 (`--compile-only` needs nvcc).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

SOURCE = Path(__file__).with_name("l2_cache.cu")
READ_THREADS = 256      # threads per CTA of l2_read
READ_CTAS_PER_SM = 8    # 2048 resident threads per SM
GROUP = 8               # loads in flight per thread; per_thread is a multiple of it
VECTOR_BYTES = 16
LINE_BYTES = 128        # the chase visits one 4-byte word per 128-byte line
CHASE_MAX_STEPS = 4096
WORD = 2**32


def read_threads(sms: int) -> int:
    return sms * READ_CTAS_PER_SM * READ_THREADS


def per_thread_for(total_bytes: int, threads: int) -> int:
    """Vectors each thread reads so that all threads together read about total_bytes (rounded to the
    nearest multiple of GROUP per thread, at least one GROUP)."""
    groups = max(1, round(total_bytes / (VECTOR_BYTES * GROUP * threads)))
    return groups * GROUP


def expected_checksum(total_vectors: int, n_vec: int, sum_all: int, prefix_sum) -> int:
    """The wrap-around sum of the 32-bit words l2_read reads: flat indices 0 .. total_vectors-1
    modulo n_vec cover the working set q times whole plus its first r vectors.
    prefix_sum(r) is the sum of the words of the first r vectors."""
    q, r = divmod(total_vectors, n_vec)
    return (q * sum_all + prefix_sum(r)) % WORD


def chain(order, steps: int, start_step: int) -> list[int]:
    """Word indices the chase visits: the lines in `order` form one cycle (line order[i] points to
    order[i+1]); after start_step steps from order[0], the next `steps` indices visited."""
    n = len(order)
    words = LINE_BYTES // 4
    return [int(order[(start_step + 1 + i) % n]) * words for i in range(steps)]


def latencies(clocks: list[int]) -> list[int]:
    """Cycles per load from the chase's clock readings (32-bit, wrapping)."""
    return [(b - a) % WORD for a, b in zip(clocks, clocks[1:])]


class L2Kernels:
    """l2_cache.cu's launchers in a loaded library."""

    def __init__(self, library: ctypes.CDLL):
        ptr, i32, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
        self._lib = library
        library.l2_launch_read.argtypes = [ptr, u32, u32, ptr, i32, i32, ptr]
        library.l2_launch_chase.argtypes = [ptr, u32, i32, i32, ptr, ptr, ptr]
        library.l2_error_string.restype = ctypes.c_char_p
        library.l2_error_string.argtypes = [i32]
        self._check(library.l2_prepare(), "loading the kernels")

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"l2_cache: {what} failed: {self._lib.l2_error_string(err).decode(errors='replace')}")

    def read(self, buf, per_thread: int, checksum, *, sms: int, stream: int, short_groups: int = 0) -> None:
        """Read the working set `buf` (bytes, a multiple of 16) as described in l2_cache.cu."""
        n_vec = buf.numel() * buf.element_size() // VECTOR_BYTES
        if n_vec == 0 or n_vec >= 2**32 or per_thread % GROUP:
            raise ValueError(f"working set of {n_vec} vectors / per_thread {per_thread} not supported: "
                             f"1 <= vectors < 2^32, per_thread a multiple of {GROUP}")
        self._check(self._lib.l2_launch_read(buf.data_ptr(), n_vec, per_thread, checksum.data_ptr(), short_groups,
                                             sms * READ_CTAS_PER_SM, stream), "read")

    def chase(self, next_words, start: int, warm_steps: int, steps: int, clocks, visited, *, stream: int) -> None:
        if not 0 < steps <= CHASE_MAX_STEPS:
            raise ValueError(f"steps={steps} not supported: 1 .. {CHASE_MAX_STEPS}")
        self._check(self._lib.l2_launch_chase(next_words.data_ptr(), start, warm_steps, steps, clocks.data_ptr(),
                                              visited.data_ptr(), stream), "chase")
