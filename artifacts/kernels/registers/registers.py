"""Host side of pressure.cu and setmaxnreg.cu: the register caps the probe builds, the launcher
and attribute calls of a built library, the fp64 reference of what the kernel computes, and what
ptxas and the SASS say about one build (registers, spill bytes, local loads and stores).

Build a library with the harness (`kernelwiki.harness.compile.nvcc_library(SOURCE, "sm_90a",
build_flags(cap))`) and pass it to `PressureKernel`.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

SOURCE = Path(__file__).with_name("pressure.cu")
SETMAXNREG_SOURCE = Path(__file__).with_name("setmaxnreg.cu")
ACC = 64                 # accumulators per thread (and as many coefficients): pressure.cu's ACC
THREADS = 256
UNCAPPED = 0             # a cap of 0: no -maxrregcount (ptxas takes what the kernel needs)
SETMAXNREG_SHAPES = {0: "bounded-if-else", 1: "no-bounds", 2: "bounded-split-ifs"}
_LOCAL = re.compile(r"\b(LDL|STL)(?:\.[A-Z0-9]+)*\b")
_GLOBAL_LOAD = re.compile(r"\bLDG(?:\.[A-Z0-9]+)*\b")
_FFMA_UNIFORM = re.compile(r"\bFFMA\b[^;\n]*\bUR\d+")


def build_flags(cap: int, bounds: int | None = None) -> list[str]:
    """nvcc flags for one build: -maxrregcount=cap (none for UNCAPPED) and, with `bounds`,
    -DBOUNDS=bounds (__launch_bounds__(THREADS, bounds))."""
    flags = [f"-maxrregcount={cap}"] if cap != UNCAPPED else []
    return flags + ([f"-DBOUNDS={bounds}"] if bounds is not None else [])


def sass_counts(sass: str) -> dict[str, int]:
    """Local-memory instructions (spill traffic: LDL loads, STL stores), global loads, and FFMAs
    that read a uniform register (URn: a warp-uniform value, such as pressure.cu's coefficients,
    kept outside the per-thread registers a cap counts) in a SASS listing."""
    local = [m[1] for m in _LOCAL.finditer(sass)]
    return {"ldl": local.count("LDL"), "stl": local.count("STL"), "ldg": len(_GLOBAL_LOAD.findall(sass)),
            "ffma_uniform": len(_FFMA_UNIFORM.findall(sass))}


def _fp64(a):
    return a.double() if hasattr(a, "double") else a.astype("float64")


def reference(x, coef, iters: int, n: int):
    """What pressure computes, in fp64 (torch tensors on any device, or numpy arrays): acc_i <-
    acc_i * v_k + c_i from acc_i = c_i, then the sum over i, per thread t with v_k = x[k * n + t]."""
    c = _fp64(coef)[None, :]
    xs = _fp64(x).reshape(iters, n)
    acc = c + 0 * xs[0][:, None]
    for k in range(iters):
        acc = acc * xs[k][:, None] + c
    return acc.sum(1)


class PressureKernel:
    """pressure.cu's host functions in one built library (one register cap)."""

    def __init__(self, library: ctypes.CDLL):
        ptr, i32 = ctypes.c_void_p, ctypes.c_int
        self._lib = library
        library.pressure_launch.argtypes = [ptr, ptr, ptr, i32, i32, i32, ptr]
        library.pressure_attributes.argtypes = [ctypes.POINTER(i32)] * 3
        library.pressure_error_string.restype = ctypes.c_char_p
        library.pressure_error_string.argtypes = [i32]

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"registers: {what} failed: {self._lib.pressure_error_string(err).decode(errors='replace')}")

    def launch(self, x, coef, y, n: int, iters: int, *, stream: int, round_fp16: bool = False) -> None:
        if x.numel() != n * iters or coef.numel() != ACC or y.numel() != n:
            raise ValueError(f"shapes: x {x.numel()} (want {n * iters}), coef {coef.numel()} (want {ACC}), "
                             f"y {y.numel()} (want {n})")
        self._check(self._lib.pressure_launch(x.data_ptr(), coef.data_ptr(), y.data_ptr(), n, iters,
                                              int(round_fp16), stream), "launch")

    def attributes(self) -> dict[str, int]:
        """Registers per thread and local bytes per thread (cudaFuncGetAttributes), resident blocks
        and warps per SM at THREADS threads (cudaOccupancyMaxActiveBlocksPerMultiprocessor)."""
        registers, local, blocks = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        self._check(self._lib.pressure_attributes(ctypes.byref(registers), ctypes.byref(local), ctypes.byref(blocks)),
                    "attributes")
        return {"registers": registers.value, "local_bytes": local.value, "blocks_per_sm": blocks.value,
                "warps_per_sm": blocks.value * THREADS // 32}
