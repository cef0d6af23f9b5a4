"""probe-2cta-mma: our 2-CTA GEMM (tcgen05.mma.cta_group::2, paired TMEM allocation), compiled for sm_100a."""

from __future__ import annotations

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness.probe import Probe

from artifacts.kernels.tcgen05_gemm import pair_gemm


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.from_cute(pair_gemm.compile_for(arch), arch)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
