"""probe-dsv4-stage-a: S = Q K^T (fp32 out) with our tcgen05 GEMM, compiled for sm_100a.

The DeepSeek-V4 decode kernel's stage A is exactly this: one 128-row query tile against one
128-key tile at head dim 128, accumulated in TMEM and written out. Compile-only here.
"""

from __future__ import annotations


from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness.probe import Probe

import cutlass  # noqa: E402
from artifacts.kernels.tcgen05_gemm import tcgen05_gemm


def compile_kernel(arch: str) -> compile_mod.Emitted:
    compiled = tcgen05_gemm.compile_for(arch, m=128, n=128, k=128, d_dtype=cutlass.Float32)
    return compile_mod.from_cute(compiled, arch)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
