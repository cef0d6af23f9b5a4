"""Host side of tick.cu: build it and launch it (one thread) on the stream the caller passes.

Run it: `kernelwiki probe run --probe probe-launch-overhead` on an H200 (`--compile-only` needs nvcc).
"""

from __future__ import annotations

from pathlib import Path

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness.cubin import Cubin

SOURCE = Path(__file__).resolve().parent / "tick.cu"


def build(arch: str = "sm_90a") -> compile_mod.Emitted:
    return compile_mod.nvcc(SOURCE, arch)


class Tick:
    """The built kernel in torch's CUDA context."""

    def __init__(self, cubin: bytes):
        self._cubin = Cubin(cubin)
        self._cubin.function("tick")   # looked up once, outside any timed loop

    def __call__(self, counter, *, stream: int) -> None:
        """counter: a one-element int32 CUDA tensor, incremented by one."""
        self._cubin.launch("tick", 1, 1, [("ptr", counter)], stream)
