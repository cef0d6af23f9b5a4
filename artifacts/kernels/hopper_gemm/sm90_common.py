"""What our two Hopper GEMMs (hopper_gemm.py, fp8-blockscale-gemm) share, in one place.

Kernel side: the TMA load atom (multicast inside a cluster or not) and the number of clusters that
fit on the GPU. Host side: how a torch tensor becomes the dynamic-layout CuTe view the kernels are
compiled for (fp8 through a uint8 view; size-1 modes given strides TMA accepts; an optional batch
mode moved last, where the kernels expect it), the fake tensors of the same type for compiling
without a GPU, the stream current at each call, and the compiled-kernel cache (in memory, and on
disk as object files so that a new process loads instead of compiling).

Why dynamic layouts: with static shapes CuTe folds a static extent of 1 out of a layout, so M = 1
gave a 1-D TMA atom for a 2-D box (and a crash); a run-time extent keeps every mode.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass.cute.nvgpu import cpasync

WARPGROUP_THREADS = 128
SMEM_BYTES = 232448     # 227 KiB usable per CTA on sm_90
ALIGN_BYTES = 16        # TMA: base address and every stride but the contiguous one

DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)


# --- kernel side -------------------------------------------------------------------------------------

def load_atom(tensor, smem_layout, tile, multicast: int):
    """The TMA load atom of one operand's tile: multicast to `multicast` CTAs of the cluster, or plain."""
    op = cpasync.CopyBulkTensorTileG2SMulticastOp() if multicast > 1 else cpasync.CopyBulkTensorTileG2SOp()
    return cpasync.make_tiled_tma_atom(op, tensor, cute.slice_(smem_layout, (None, None, 0)), tile,
                                       num_multicast=multicast)


def max_active_clusters(cluster_mn: tuple[int, int]) -> int:
    """How many clusters of this shape fit on the current GPU at one CTA per SM. Asked once per GPU
    and cluster size: the DSL answers by compiling and loading a probe kernel each time."""
    import torch

    return _max_active_clusters(torch.cuda.current_device(), cluster_mn[0] * cluster_mn[1])


@functools.lru_cache(maxsize=None)
def _max_active_clusters(device: int, cluster_size: int) -> int:
    return utils.HardwareInfo().get_max_active_clusters(cluster_size)


# --- host side: views ----------------------------------------------------------------------------------

def past(tensor) -> int:
    """A stride, in elements, past every element of the tensor and a multiple of 16 bytes."""
    per_16_bytes = max(1, ALIGN_BYTES // tensor.element_size())
    span = max((s * n for s, n in zip(tensor.stride(), tensor.shape)), default=1)
    return -(-max(span, 1) // per_16_bytes) * per_16_bytes


def canonical(tensor, leading: int):
    """The same tensor with canonical strides in its size-1 modes, whose strides address nothing and
    may be anything in torch (M = 1, one K block, one group): 1 in the contiguous mode, elsewhere a
    16-byte multiple past the whole tensor, so the stride checks and TMA's alignment rules hold."""
    if 1 not in tensor.shape or tensor.dim() == 0:
        return tensor
    beyond = past(tensor)
    leading %= tensor.dim()
    strides = [stride if size != 1 else (1 if mode == leading else beyond)
               for mode, (size, stride) in enumerate(zip(tensor.shape, tensor.stride()))]
    return tensor.as_strided(tensor.shape, strides)


def batch_last(tensor):
    """A (rows, cols, L) view of a 2-D (rows, cols) or 3-D (L, rows, cols) torch tensor: the batch
    (group) mode last, where the kernels expect it; L = 1 gets a stride past the whole tensor."""
    if tensor.dim() == 2:
        tensor = tensor.as_strided((1, *tensor.shape), (past(tensor), *tensor.stride()))
    return tensor.permute(1, 2, 0)


def cute_view(tensor, leading: int, element_type=None):
    """A dynamic-layout CuTe view of a torch tensor with stride 1 in mode `leading`; fp8 through a
    uint8 view with the element type set afterwards (as cutlass.torch does for every float of 8 bits
    or fewer). `element_type` overrides the type the kernel reads (fp32 operands read as tf32)."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    if tensor.dtype == torch.float8_e4m3fn:
        view = from_dlpack(tensor.view(torch.uint8), assumed_align=ALIGN_BYTES).mark_layout_dynamic(leading_dim=leading)
        view.element_type = cutlass.Float8E4M3FN
    else:
        view = from_dlpack(tensor, assumed_align=ALIGN_BYTES).mark_layout_dynamic(leading_dim=leading)
    if element_type is not None:
        view.element_type = element_type
    return view


def fake_tensor(dtype, leading: int, rank: int = 3, aligned: bool = True):
    """A fake tensor of the type `cute_view` passes at run time: 32-bit dynamic extents, 64-bit dynamic
    strides, stride 1 in mode `leading` (the compiled function reads the caller's descriptor as it
    was compiled, so the two must agree). `aligned`: the other strides are multiples of 16 bytes."""
    from cutlass.cute.runtime import make_fake_tensor

    div = max(1, 128 // dtype.width) if aligned else 1
    shape = tuple(cute.sym_int32() for _ in range(rank))
    stride = tuple(1 if mode == leading else cute.sym_int64(divisibility=div) for mode in range(rank))
    return make_fake_tensor(dtype, shape, stride, assumed_align=ALIGN_BYTES)


def check_alignment(name: str, tensor, view, leading: int) -> None:
    """TMA reads 16-byte-aligned rows: the base address and every stride but the contiguous one
    (mode `leading` of `view`, the tensor as the kernel sees it, with canonical strides in its
    size-1 modes) must be multiples of 16 bytes, and none of them 0 (a broadcast view)."""
    size = tensor.element_size()
    if tensor.data_ptr() % ALIGN_BYTES:
        raise ValueError(f"{name}: data_ptr {tensor.data_ptr():#x} is not {ALIGN_BYTES}-byte aligned (TMA); "
                         f"pass a tensor that starts on a {ALIGN_BYTES}-byte boundary, e.g. .clone()")
    for mode, (extent, stride) in enumerate(zip(view.shape, view.stride())):
        if mode == leading:
            continue
        if stride == 0 and extent > 1:
            raise ValueError(f"{name}: stride 0 in mode {mode} (a broadcast view); TMA needs distinct rows: "
                             f"call .contiguous()")
        if stride * size % ALIGN_BYTES:
            raise ValueError(f"{name}: stride {stride} (mode {mode}) is not a multiple of {ALIGN_BYTES} bytes "
                             f"({ALIGN_BYTES // size} elements); TMA needs 16-byte-aligned rows")


def current_stream(device=None):
    """The CUDA stream torch has current now (on `device`, default the current one): read at every
    launch, so a launch can be captured in a CUDA graph on any stream."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream(device).cuda_stream)


# --- compiled-kernel cache -------------------------------------------------------------------------------

_KERNELS: dict = {}


def cache_dir() -> Path:
    """Where compiled kernels are kept between processes: $KERNELWIKI_KERNEL_CACHE, else the user cache."""
    base = os.environ.get("KERNELWIKI_KERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kernelwiki", "kernels")
    return Path(base)


def sources_hash(sources: list[Path]) -> str:
    """The CuTe DSL version and the kernel source files, hashed: what a cached kernel or tuning depends on."""
    h = hashlib.sha256(cutlass.__version__.encode())
    for path in sorted(sources):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cached_kernel(key: tuple, compile_fn: Callable[[], Any], sources: list[Path]) -> Any:
    """The compiled kernel for `key` (everything that is compile-time: configuration, dtypes, GPU):
    from memory, else from the disk cache (keyed also by the CuTe DSL version and the kernel's source
    files), else `compile_fn()`, exported to the disk cache for the next process."""
    from cutlass.cute.runtime import load_module

    if key in _KERNELS:
        return _KERNELS[key]
    name = "k_" + hashlib.sha256(repr((key, sources_hash(sources))).encode()).hexdigest()[:24]
    directory = cache_dir()
    obj = directory / f"{name}.o"
    compiled = None
    if obj.is_file():
        try:
            compiled = getattr(load_module(str(obj)), name)
        except Exception as err:   # noqa: BLE001  (a truncated or foreign file: compile over it)
            warnings.warn(f"{obj}: cached kernel unreadable ({type(err).__name__}: {err}); recompiling")
    if compiled is None:
        compiled = compile_fn()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=directory) as tmp:
                compiled.export_to_c(tmp, name)
                os.replace(os.path.join(tmp, f"{name}.o"), obj)
        except Exception as err:   # noqa: BLE001  (a cache that cannot be written costs a compile next time)
            warnings.warn(f"{directory}: cannot store the compiled kernel ({type(err).__name__}: {err})")
    _KERNELS[key] = compiled
    return compiled
