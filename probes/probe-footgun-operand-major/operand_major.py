"""probe-footgun-operand-major: the compiler accepts a B operand whose declared major mode does not
match its storage. Compile-only (sm_100a)."""

from __future__ import annotations


from kernelwiki.harness.compile import Emitted, from_cute
from kernelwiki.harness.probe import Probe

from artifacts.kernels.tcgen05_gemm import tcgen05_gemm


def outcome(arch: str, data: str, declared: str) -> tuple[str, str]:
    try:
        compiled = tcgen05_gemm.compile_for(arch, b_data_major=data, b_major=declared)
    except Exception as err:  # a rejection is exactly what we want to record
        return f"rejected ({type(err).__name__})", ""
    return "compiles", from_cute(compiled, arch).ptx


def compile_kernel(arch: str) -> Emitted:
    facts, ptx = [], ""
    for data, declared in (("mn", "k"), ("mn", "mn"), ("k", "k")):
        result, text = outcome(arch, data, declared)
        facts.append(f"{data}-data-declared-{declared}-major:{result}")
        ptx = ptx or text
    return Emitted(arch, ptx=ptx, facts=facts)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
