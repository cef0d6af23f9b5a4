"""The producer/consumer chain of pdl.cu, launched through ctypes on a caller's stream.

Pair k: producer buf = out + 1, consumer out = buf + bias; after K pairs out = x + K steps of
(+1, +bias) in fp32, the same adds in the same order as `reference`, so the gate is exact. A
consumer that reads buf before its producer wrote it takes the previous round's value and the
element comes out short by one step.

Modes (MODES): serial = plain stream order; pdl = launched with
cudaLaunchAttributeProgrammaticStreamSerialization, each kernel waits (griddepcontrol.wait) before
it reads what the previous kernel wrote; pdl-early = the same plus griddepcontrol.launch_dependents
at the start of every kernel, so the next kernel is scheduled while this one still runs.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("pdl.cu")
BLOCK = 256
CTAS_PER_SM = 2


@dataclass(frozen=True)
class Mode:
    name: str
    pdl: bool            # the launch attribute
    early_trigger: bool  # griddepcontrol.launch_dependents at the start of each kernel


MODES: dict[str, Mode] = {m.name: m for m in (Mode("serial", False, False), Mode("pdl", True, False),
                                              Mode("pdl-early", True, True))}


def reference(x, bias, pairs: int):
    """out after `pairs` pairs, in the kernels' fp32 order: (out + 1) + bias, `pairs` times."""
    out = x  # each step makes a new array; x is not modified (torch tensors or numpy arrays)
    for _ in range(pairs):
        out = (out + 1.0) + bias
    return out


def steps_missed(out, x, bias, pairs: int) -> int:
    """How many elements differ from the reference: each stale read costs one step at its element."""
    return int((out != reference(x, bias, pairs)).sum())


class Chain:
    """pdl.cu's launchers in a loaded library (compile.nvcc_library(SOURCE, "sm_90a"))."""

    def __init__(self, library: ctypes.CDLL):
        ptr, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        self._lib = library
        library.pdl_launch_producer.argtypes = [ptr, ptr, i32, i32, i64, i32, i32, i32, ptr]
        library.pdl_launch_consumer.argtypes = [ptr, ptr, ptr, i32, i32, i32, i32, i32, i32, ptr]
        library.pdl_error_string.restype = ctypes.c_char_p
        library.pdl_error_string.argtypes = [i32]
        self._check(library.pdl_prepare(), "loading the kernels")

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"pdl: {what} failed: {self._lib.pdl_error_string(err).decode(errors='replace')}")

    def pairs(self, buf, out, bias, *, pairs: int, mode: Mode, grid: int, stream: int, consumer_waits: bool = True,
              producer_delay: int = 0) -> None:
        """Launch `pairs` producer/consumer pairs on `stream` (torch tensors of n float32 each)."""
        n = out.numel()
        for _ in range(pairs):
            self._check(self._lib.pdl_launch_producer(buf.data_ptr(), out.data_ptr(), n, int(mode.early_trigger),
                                                      producer_delay, grid, BLOCK, int(mode.pdl), stream), "producer")
            self._check(self._lib.pdl_launch_consumer(out.data_ptr(), buf.data_ptr(), bias.data_ptr(), n,
                                                      int(mode.early_trigger), int(consumer_waits), grid, BLOCK,
                                                      int(mode.pdl), stream), "consumer")
