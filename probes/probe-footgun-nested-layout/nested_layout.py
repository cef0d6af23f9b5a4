"""probe-footgun-nested-layout: nested modes flatten sequentially.

Compile-only, on any machine: the layout from the DeepSeek-V4 kernel's P fragment is evaluated
at trace time over its K-like mode and coalesced.
"""

from __future__ import annotations

import cutlass.cute as cute

from kernelwiki.harness.compile import Emitted
from kernelwiki.harness.probe import Probe

SHAPE = ((128, 16), 1, (4, 2))
STRIDE = ((65536, 1), 0, (16, 64))


def compile_kernel(arch: str) -> Emitted:
    seen: dict = {}

    @cute.jit
    def evaluate():
        layout = cute.make_layout(SHAPE, stride=STRIDE)
        # k = k0 + 16*k1 + 64*k2, with m = 0
        seen["offsets"] = [int(layout(((0, k % 16), 0, ((k // 16) % 4, k // 64)))) for k in range(128)]
        seen["coalesced"] = str(cute.coalesce(layout))

    cute.compile(evaluate, options=f"--gpu-arch {arch}")
    facts = [f"coalesced:{seen['coalesced']}"]
    if seen["offsets"] == list(range(128)):
        facts.append("k-offsets-sequential")
    return Emitted(arch, facts=facts)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
