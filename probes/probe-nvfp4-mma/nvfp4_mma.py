"""probe-nvfp4-mma: the NVFP4 block-scaled MMA path, compiled for sm_100a (compile-only here)."""

from __future__ import annotations


from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness.probe import Probe

from artifacts.kernels.tcgen05_gemm import block_scaled_gemm


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.from_cute(block_scaled_gemm.compile_for(arch, fmt="nvfp4"), arch)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
