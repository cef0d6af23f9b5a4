"""dsmem.cu launched through ctypes: the ring copy that checks DSMEM, the pointer chase, the streams.

One CTA per SM: every CTA asks for SMEM_BYTES of dynamic shared memory, more than half of what an
H100/H200 SM has (228 KiB), so peers are always on other SMs. Cluster sizes above 8 are
non-portable; dsmem_prepare sets cudaFuncAttributeNonPortableClusterSizeAllowed, and a size the
GPU cannot schedule reports zero active clusters (the case then says the launch is refused).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

SOURCE = Path(__file__).with_name("dsmem.cu")
SMEM_BYTES = 120 * 1024
BLOCK = 512
CHECK_WORDS = 8192          # words each CTA writes and its peer copies out in the check
CHASE_WORDS = 8192          # 32 KiB pointer chain
CHASE_STRIDE = 33           # odd: the chain visits every word before it repeats
BW_WORDS = SMEM_BYTES // 4  # the whole window is streamed
BW_UNROLL = 8               # 16-byte accesses per thread per loop iteration (dsmem.cu)
MODES = {"check": 0, "lat-local": 1, "lat-peer": 2, "bw-local-load": 3, "bw-peer-load": 4, "bw-local-store": 5,
         "bw-peer-store": 6}


def peer_rank(rank: int, size: int) -> int:
    return (rank + 1) % size


def chase_end(iters: int, words: int = CHASE_WORDS, stride: int = CHASE_STRIDE) -> int:
    """Where the chain next = (i + stride) % words ends after `iters` loads from 0."""
    return (iters * stride) % words


def ring_reference(x, size: int):
    """What the check writes: CTA c copies its peer's words, x viewed as (clusters, size, words)
    (a torch tensor or a numpy array)."""
    peers = [peer_rank(rank, size) for rank in range(size)]
    return x.reshape(-1, size, CHECK_WORDS)[:, peers].reshape(-1)


def bandwidth_bytes(iters: int) -> int:
    """Bytes one CTA moves in a bandwidth mode."""
    return iters * BW_UNROLL * BLOCK * 16


class Cluster:
    """dsmem.cu's launcher in a loaded library (compile.nvcc_library(SOURCE, "sm_90a"))."""

    def __init__(self, library: ctypes.CDLL):
        ptr, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        self._lib = library
        library.dsmem_launch.argtypes = [ptr, ptr, ptr, i32, i32, i32, i32, i64, i32, i32, i32, i32, i32, ptr]
        library.dsmem_max_active_clusters.argtypes = [i32, i32, i32, ctypes.POINTER(ctypes.c_int)]
        library.dsmem_error_string.restype = ctypes.c_char_p
        library.dsmem_error_string.argtypes = [i32]
        self._check(library.dsmem_prepare(SMEM_BYTES), "setting the kernel attributes")

    def error(self, err: int) -> str:
        return self._lib.dsmem_error_string(err).decode(errors="replace")

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"dsmem: {what} failed: {self.error(err)}")

    def max_active_clusters(self, size: int) -> tuple[int, str]:
        """(clusters of `size` that fit at once, the error text when the query refuses the size)."""
        count = ctypes.c_int(0)
        err = self._lib.dsmem_max_active_clusters(size, BLOCK, SMEM_BYTES, ctypes.byref(count))
        return (count.value, "") if err == 0 else (0, self.error(err))

    def launch(self, x, out, cycles, *, mode: str, size: int, clusters: int, words: int, iters: int = 0,
               delay: int = 0, skip_barrier: bool = False, stream: int) -> None:
        """x, out: uint32 buffers as torch int32 tensors; cycles: int64, one per CTA."""
        err = self._lib.dsmem_launch(x.data_ptr(), out.data_ptr(), cycles.data_ptr(), words, MODES[mode], iters,
                                     CHASE_STRIDE, delay, int(skip_barrier), clusters * size, BLOCK, size, SMEM_BYTES,
                                     stream)
        self._check(err, f"launching {mode} with clusters of {size}")
