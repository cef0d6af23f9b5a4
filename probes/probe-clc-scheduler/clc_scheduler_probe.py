"""probe-clc-scheduler: a dynamic persistent tile loop built on cluster launch control, compiled for sm_100a."""

from __future__ import annotations

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness.probe import Probe

from artifacts.kernels.clc_scheduler import clc_scale


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.from_cute(clc_scale.compile_for(arch), arch)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
