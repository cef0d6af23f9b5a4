"""probe-footgun-tmem-store: storing 16-bit values into TMEM with St32x32bOp.

Compile-only (sm_100a). A 128-thread kernel allocates TMEM, loads a 128 x 64 fp32 tile from it
into registers (one row per thread), converts it to bf16 and stores it back three ways:
  f32              the fp32 values with a Float32 store atom (the baseline);
  bf16-atom        the bf16 values with St32x32bOp built on BFloat16 over a bf16 view of TMEM
                   (what crashed for the DeepSeek-V4 kernel's authors);
  f32-recast       the bf16 values packed two per 32-bit word (a Float32 recast view of the
                   registers) with a Float32 store atom over half the columns (their fix).
For each, the probe records whether it compiles and the tcgen05.st forms in the PTX.
"""

from __future__ import annotations

import os
import re
import tempfile

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import tcgen05

from kernelwiki.harness.compile import Emitted, from_cute
from kernelwiki.harness.probe import Probe

THREADS, COLS = 128, 64
DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"


class TmemStore:
    def __init__(self, mode: str):
        self.mode = mode

    @cute.jit
    def __call__(self, mOut: cute.Tensor, stream):
        # mOut: (128, 64) fp32, written so that nothing is dead code
        mma = cute.make_tiled_mma(tcgen05.MmaF16BF16Op(
            cutlass.BFloat16, cutlass.Float32, (128, COLS, 16), tcgen05.CtaGroup.ONE,
            tcgen05.OperandSource.SMEM, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K))

        @cute.struct
        class Storage:
            tmem_base: cutlass.Int32

        self.storage = Storage
        self.kernel(mma, mOut).launch(grid=[1, 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mma: cute.TiledMma, mOut: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        storage = cutlass.memory.SmemAllocator().allocate(self.storage)
        tmem = cutlass.memory.TmemAllocator(
            storage.tmem_base, barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS))
        tmem.allocate(128)
        tmem.wait_for_alloc()
        tAcc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32),
                                mma.make_fragment_C(mma.partition_shape_C((128, COLS))).layout)
        load = tcgen05.make_tmem_copy(
            cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition(COLS)), cutlass.Float32), tAcc)
        thr_load = load.get_slice(tidx)
        tLtAcc = thr_load.partition_S(tAcc)
        rAcc = cute.make_rmem_tensor(thr_load.partition_D(tAcc).shape, cutlass.Float32)
        cute.copy(load, tLtAcc, rAcc)
        rP = cute.make_rmem_tensor(rAcc.shape, cutlass.BFloat16)
        rP.store(rAcc.load().to(cutlass.BFloat16))
        if cutlass.const_expr(self.mode == "f32"):
            store = tcgen05.make_tmem_copy(
                cute.make_copy_atom(tcgen05.St32x32bOp(tcgen05.Repetition(COLS)), cutlass.Float32), tAcc)
            cute.copy(store, rAcc, store.get_slice(tidx).partition_D(tAcc))
        if cutlass.const_expr(self.mode == "bf16-atom"):
            tP = cute.recast_tensor(tAcc, cutlass.BFloat16)
            store = tcgen05.make_tmem_copy(
                cute.make_copy_atom(tcgen05.St32x32bOp(tcgen05.Repetition(COLS)), cutlass.BFloat16), tP)
            cute.copy(store, rP, store.get_slice(tidx).partition_D(tP))
        if cutlass.const_expr(self.mode == "f32-recast"):
            rWords = cute.recast_tensor(rP, cutlass.Float32)  # two bf16 per 32-bit word
            # the first COLS / 2 fp32 columns of the tile hold the packed P
            tHalf = cute.zipped_divide(tAcc, ((cute.size(tAcc, mode=[0, 0]), cute.size(tAcc, mode=[0, 1]) // 2),))[None, 0]
            store = tcgen05.make_tmem_copy(
                cute.make_copy_atom(tcgen05.St32x32bOp(tcgen05.Repetition(COLS // 2)), cutlass.Float32), tHalf)
            thr_store = store.get_slice(tidx)
            rW = cute.make_rmem_tensor(thr_store.partition_S(tHalf).shape, cutlass.Float32)
            for i in cutlass.range_constexpr(cute.size(rW)):
                rW[i] = rWords[i]
            cute.copy(store, rW, thr_store.partition_D(tHalf))
        for i in cutlass.range_constexpr(cute.size(rAcc)):
            mOut[tidx, i] = rAcc[i]
        pipeline.sync(barrier_id=1)
        tmem.free(tAcc.iterator)


def outcome(arch: str, mode: str) -> tuple[str, str]:
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    os.makedirs(DUMP_DIR, exist_ok=True)
    out = make_fake_compact_tensor(cutlass.Float32, (128, COLS), stride_order=(1, 0), assumed_align=16)
    try:
        compiled = cute.compile(TmemStore(mode), out, make_fake_stream(),
                                options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")
    except Exception as err:  # what the compiler rejects is part of the answer
        return f"rejected ({type(err).__name__}: {str(err).splitlines()[0][:120]})", ""
    ptx = from_cute(compiled, arch).ptx
    stores = sorted(set(re.findall(r"tcgen05\.st\.sync\.aligned\.[0-9a-z.]+", ptx)))
    return "compiles", ",".join(stores)


def compile_kernel(arch: str) -> Emitted:
    facts = []
    for mode in ("f32", "bf16-atom", "f32-recast"):
        result, stores = outcome(arch, mode)
        facts.append(f"{mode}:{result}")
        if stores:
            facts.append(f"{mode}-stores:{stores}")
    return Emitted(arch, facts=facts)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
