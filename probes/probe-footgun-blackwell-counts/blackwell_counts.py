"""probe-footgun-blackwell-counts: what the compiler emits for right and wrong arrival counts.

Compile-only (sm_100a). The accumulator pipeline's empty barrier is the last mbarrier the kernel
initializes; its expected arrival count is a constant moved into the register mbarrier.init uses, and
the epilogue's release is an mbarrier.arrive on it without a guard predicate (every thread that
reaches it arrives; that all 128 epilogue threads reach it is the kernel's code, which no compile shows).
The TMEM allocation barrier is named barrier 1, emitted as `bar.sync 1, <threads>`.
"""

from __future__ import annotations

import re

from kernelwiki.harness.compile import Emitted, from_cute
from kernelwiki.harness.probe import Probe

from artifacts.kernels.tcgen05_gemm import tcgen05_gemm


def mbarrier_init_counts(ptx: str) -> list[str]:
    counts = []
    for register in re.findall(r"mbarrier\.init\.shared(?:::cta)?\.b64\s+\[[^\]]+\],\s*(%r\d+);", ptx):
        move = re.search(r"mov\.[usb]32\s+" + re.escape(register) + r",\s*(\d+);", ptx)
        counts.append(move.group(1) if move else register)
    return counts


def accumulator_release(ptx: str) -> str:
    """How the PTX arrives on the accumulator pipeline's empty barrier (the last one initialized):
    'unpredicated' when its mbarrier.arrive carries no guard predicate (every thread that reaches it
    arrives, not one elected lane), 'predicated' when it does, 'none' when no arrive names it."""
    barriers = re.findall(r"mbarrier\.init\.shared(?:::cta)?\.b64\s+(\[[^\]]+\]),", ptx)
    if not barriers:
        return "none"
    arrives = re.findall(r"^\s*(@!?%p\d+\s+)?mbarrier\.arrive\.shared(?:::cta)?\.b64\s+[^,]+,\s*" + re.escape(barriers[-1]),
                         ptx, flags=re.MULTILINE)
    if not arrives:
        return "none"
    return "predicated" if any(guard for guard in arrives) else "unpredicated"


def allocation_barrier(ptx: str) -> str:
    found = re.findall(r"\bbar(?:rier)?\.sync(?:\.aligned)?\s+(1,\s*\d+);", ptx)
    return "bar.sync " + found[0].replace(",", ", ").replace(",  ", ", ") if found else "none"


def compile_kernel(arch: str) -> Emitted:
    right = from_cute(tcgen05_gemm.compile_for(arch), arch).ptx
    as_warps = from_cute(tcgen05_gemm.compile_for(arch, acc_consumer_arrivals=4), arch).ptx
    missing_warp = from_cute(tcgen05_gemm.compile_for(arch, tmem_barrier_threads=96), arch).ptx
    facts = [
        f"accumulator-release-arrive:{accumulator_release(right)}",
        f"consumer-group-in-threads-expects:{mbarrier_init_counts(right)[-1]}",
        f"consumer-group-in-warps-expects:{mbarrier_init_counts(as_warps)[-1]}",
        f"allocation-barrier-all-warps:{allocation_barrier(right)}",
        f"allocation-barrier-missing-a-warp:{allocation_barrier(missing_warp)}",
    ]
    return Emitted(arch, ptx=right, facts=facts)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
