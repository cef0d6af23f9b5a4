"""probe-footgun-const-expr: a run-time `if` traces both branches; `if const_expr(...)` one.

Compile-only, on any machine.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from kernelwiki.harness.compile import Emitted
from kernelwiki.harness.probe import Probe


def compile_kernel(arch: str) -> Emitted:
    # The DSL resolves names in traced code from the module's globals: import cutlass at the top.
    runtime_branches: list[str] = []
    const_branches: list[str] = []

    @cute.jit
    def branches(x: cutlass.Int32):
        if x > 0:                       # run-time condition: both bodies are traced
            runtime_branches.append("then")
        else:
            runtime_branches.append("else")
        if cutlass.const_expr(2 > 1):   # trace-time condition: only the taken body
            const_branches.append("then")
        else:
            const_branches.append("else")

    cute.compile(branches, cutlass.Int32(1), options=f"--gpu-arch {arch}")
    return Emitted(arch, facts=[f"runtime-if-traced:{','.join(runtime_branches)}",
                                f"const-expr-if-traced:{','.join(const_branches)}"])


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
