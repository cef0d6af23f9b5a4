"""probe-sparse-decode-sm100: the Blackwell sparse-decode kernel (the sm_90a kernel's persistent, warp-specialized
design on tcgen05 and TMEM), compiled for sm_100a, with the combine kernel it shares with sm_90a.

Compile-only here (no B200): the kernels are built with fake tensors and the PTX/SASS scanned. The facts it
adds: which tcgen05.mma reads A from shared memory (S = Q.K^T: the A operand is a 64-bit descriptor) and
which from tensor memory (O += P.V: the A operand is a bracketed TMEM address), whether the TMEM column
plan is sound (tmem_plan.TmemPlan.problems() is empty), and whether the main kernel compiles without
local-memory spills.

Run through the runner: kernelwiki probe run --probe probe-sparse-decode-sm100 --compile-only
"""

from __future__ import annotations

import re

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness.probe import Probe

from artifacts.kernels.sparse_decode import sparse_decode_sm90, sparse_decode_sm100

# tcgen05.mma ... [d_tmem], a, b_desc, idesc, ...: a is a descriptor register (%rd) or a TMEM address ([%r])
A_FROM_SMEM = re.compile(r"tcgen05\.mma\.[^;]*\[%r\d+\],\s*%rd\d+,")
A_FROM_TMEM = re.compile(r"tcgen05\.mma\.[^;]*\[%r\d+\],\s*\[%r\d+\],")


def compile_kernel(arch: str) -> compile_mod.Emitted:
    emitted = compile_mod.from_cute(sparse_decode_sm100.compile_for(arch), arch)
    if A_FROM_SMEM.search(emitted.ptx):
        emitted.facts.append("qk-mma-a-from-smem")
    if A_FROM_TMEM.search(emitted.ptx):
        emitted.facts.append("pv-mma-a-from-tmem")
    if not sparse_decode_sm100.PLAN.problems():
        emitted.facts.append("tmem-plan-sound")
    if emitted.sass is not None and not re.search(r"\b(STL|LDL)\b", emitted.sass):
        emitted.facts.append("no-local-memory")
    emitted.extend(compile_mod.from_cute(sparse_decode_sm90.compile_combine_for(arch), arch))
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
