"""Loading an nvcc-built cubin (harness.compile.nvcc's `Emitted.cubin`) into torch's CUDA context and
launching its kernels on torch tensors, through the driver API of cuda.bindings.

Why one shared loader: CUDA C++ probes build their kernels with nvcc and launch them from Python;
each writing its own cuModuleLoadData / cuLaunchKernel wrapper would repeat the same error
handling and argument packing. Kernels must be `extern "C"` (unmangled names) and take the
stream from the caller, so a launch lands on the stream current at the call and graph capture
works (`stream=torch.cuda.current_stream().cuda_stream`).
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

# The C types a kernel argument may have, by the short names probes write.
ARG_TYPES = {"ptr": ctypes.c_void_p, "i32": ctypes.c_int, "u32": ctypes.c_uint, "i64": ctypes.c_longlong,
             "u64": ctypes.c_ulonglong, "f32": ctypes.c_float}


def pack_args(args: Sequence[tuple[str, Any]]) -> tuple[tuple, tuple]:
    """[(type, value), ...] -> the (values, ctypes) pair cuLaunchKernel takes. A tensor passed as
    "ptr" contributes its data_ptr()."""
    values, types = [], []
    for kind, value in args:
        if kind not in ARG_TYPES:
            raise ValueError(f"kernel argument type {kind!r} unknown; use one of {', '.join(ARG_TYPES)}")
        if kind == "ptr" and hasattr(value, "data_ptr"):
            value = value.data_ptr()
        values.append(value)
        types.append(ARG_TYPES[kind])
    return tuple(values), tuple(types)


def check(result):
    """The value(s) of a cuda.bindings call, or RuntimeError naming the failed status."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(getattr(err, "value", err)) != 0:
        raise RuntimeError(f"CUDA call failed: {err}")
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)


class Cubin:
    """A cubin loaded into the current CUDA context (make torch's current first, e.g. by creating a
    CUDA tensor), with its kernels looked up once by name."""

    def __init__(self, cubin: bytes):
        from cuda.bindings import driver

        self._driver = driver
        check(driver.cuInit(0))
        self._module = check(driver.cuModuleLoadData(cubin))
        self._functions: dict[str, Any] = {}

    def function(self, name: str):
        if name not in self._functions:
            self._functions[name] = check(self._driver.cuModuleGetFunction(self._module, name.encode()))
        return self._functions[name]

    def launch(self, name: str, grid: int | tuple[int, int, int], block: int | tuple[int, int, int],
               args: Sequence[tuple[str, Any]], stream: int, shared_bytes: int = 0) -> None:
        """Launch kernel `name` on the raw stream handle `stream` with [(type, value), ...] arguments."""
        gx, gy, gz = grid if isinstance(grid, tuple) else (grid, 1, 1)
        bx, by, bz = block if isinstance(block, tuple) else (block, 1, 1)
        driver = self._driver
        check(driver.cuLaunchKernel(self.function(name), gx, gy, gz, bx, by, bz, shared_bytes,
                                    driver.CUstream(stream), pack_args(args) if args else 0, 0))
