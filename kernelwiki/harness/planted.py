"""Planted bugs: the negative controls of the tool probes.

A tool probe claims "memcheck reports no error" and "racecheck reports no hazard" for our kernels.
That claim means something only if the tool, run the same way, reports the bug class it is there
to catch. So each tool probe also runs one of these two tiny CuTe DSL kernels under the tool:

- `oob`: thread 0 writes one element past the end of a global buffer (the index is a run-time
  argument, so nothing at compile time can see it). The buffer's own elements are untouched, so the
  output check passes; only memcheck can fail this run.
- `race`: threads of two different warps write the same shared-memory word, and a thread of a third
  warp reads it, with no barrier between them; the block then synchronizes and stores the word.
  Whichever write lands, the stored value is one of the two written, so the output check passes;
  only racecheck can fail this run.

`python -m kernelwiki.harness.planted oob|race SEED` runs one on the GPU and prints the driver line
(`tools.DRIVER_PREFIX` + the gate's JSON) that `tools.sanitize` reads. The driver disables
PyTorch's caching allocator so the buffer is its own cudaMalloc allocation and one element past its
end lies outside every allocation, where memcheck looks.
"""

from __future__ import annotations

import json
import os
import sys

import cutlass
import cutlass.cute as cute

KINDS = ("oob", "race")
# Not a multiple of the allocator's granularity: one element past the end then lies in the padding
# after the allocation, never in the next one (with 1024 floats the write landed on the first element
# of the next allocation, a valid address, and memcheck had nothing to report).
OOB_ELEMENTS = 1000
RACE_THREADS = 96   # three warps: two writers, one reader


@cute.kernel
def oob_kernel(buf: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    if tidx == 0:
        # n == the buffer's length: one element past its end. Through a pointer, not buf[n]: CuTe
        # folds a coordinate into the layout's shape, and buf[n] landed on an element of the buffer
        # (seen on the H200: the output check saw one changed element, memcheck saw nothing).
        past_end = cute.make_tensor(buf.iterator + n, cute.make_layout(1))
        past_end[0] = cutlass.Float32(1.0)


@cute.jit
def oob_launch(buf: cute.Tensor, n: cutlass.Int32):
    oob_kernel(buf, n).launch(grid=(1, 1, 1), block=(32, 1, 1))


@cute.kernel
def race_kernel(out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    smem = cutlass.memory.SmemAllocator()
    word = smem.allocate_tensor(cutlass.Float32, cute.make_layout(1), byte_alignment=16)
    if tidx == 0:
        word[0] = cutlass.Float32(1.0)   # warp 0 writes ...
    if tidx == 32:
        word[0] = cutlass.Float32(2.0)   # ... warp 1 writes the same word, no barrier between them ...
    if tidx == 64:
        out[1] = word[0]                 # ... and warp 2 reads it
    cute.arch.sync_threads()
    if tidx == 0:
        out[0] = word[0]


@cute.jit
def race_launch(out: cute.Tensor):
    race_kernel(out).launch(grid=(1, 1, 1), block=(RACE_THREADS, 1, 1))


def compile_planted(kind: str, arch: str):
    """Compile one planted kernel for `arch` with fake tensors (no GPU)."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    import tempfile

    dump_dir = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"   # never the working directory
    options = f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {dump_dir}"
    if kind == "oob":
        fake = make_fake_compact_tensor(cutlass.Float32, (OOB_ELEMENTS,), assumed_align=16)
        return cute.compile(oob_launch, fake, cutlass.Int32(OOB_ELEMENTS), options=options)
    if kind == "race":
        fake = make_fake_compact_tensor(cutlass.Float32, (2,), assumed_align=16)
        return cute.compile(race_launch, fake, options=options)
    raise ValueError(f"unknown planted bug {kind!r}; use one of {KINDS}")


def emitted(arch: str):
    """Compile-only evidence for a tool probe: both planted kernels build for `arch` (PTX and SASS of
    both, one fact per kernel)."""
    from kernelwiki.harness.compile import Emitted, from_cute

    parts = [from_cute(compile_planted(kind, arch), arch) for kind in KINDS]
    sass = [p.sass for p in parts if p.sass is not None]
    return Emitted(arch, ptx="".join(p.ptx for p in parts), sass="".join(sass) if len(sass) == len(parts) else None,
                   notes=sorted({n for p in parts for n in p.notes}), facts=[f"planted-{k}:compiles" for k in KINDS])


def run(kind: str, seed: int) -> dict:
    """Run the planted kernel on the GPU; the gate's verdict on the part of its output that is defined."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    from kernelwiki.harness import gates

    generator = torch.Generator(device="cuda").manual_seed(seed)
    if kind == "oob":
        buf = torch.randn(OOB_ELEMENTS, device="cuda", generator=generator)
        expected = buf.cpu()   # on the host: no device allocation right behind buf
        oob_launch(from_dlpack(buf, assumed_align=16), cutlass.Int32(OOB_ELEMENTS))
        torch.cuda.synchronize()
        return gates.check(buf.cpu(), expected, "exact")
    out = gates.poison(torch.empty(2, device="cuda"))
    race_launch(from_dlpack(out, assumed_align=16))
    torch.cuda.synchronize()
    stored = out[0].item()
    # The final value is whichever write landed last: 1 or 2. Gate "it is one of them" exactly.
    landed = torch.tensor([1.0 if stored in (1.0, 2.0) else 0.0])
    return {**gates.check(landed, torch.ones(1), "exact"), "stored": stored}


def main(argv: list[str]) -> None:
    from kernelwiki.harness.tools import DRIVER_PREFIX

    kind, seed = argv[0], int(argv[1])
    print(DRIVER_PREFIX + json.dumps(run(kind, seed)), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    main(sys.argv[1:])
