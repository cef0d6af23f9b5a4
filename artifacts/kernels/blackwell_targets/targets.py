"""Compile each Blackwell-family kernel for a target and say whether the target accepts it.

`accepts(kernel, arch)` compiles with nvcc (`-arch=compute_<N>` for PTX, `-arch=sm_<N>` for the
cubin) and returns the emitted code, or the ptxas lines that refused it. The refusal is the evidence:
"tcgen05 on sm_120a" is an error, not a slow path. Needs nvcc (CUDA 13.0); no GPU.

    python -m artifacts.kernels.blackwell_targets.targets --arch sm_120a
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from kernelwiki.harness import compile as compile_mod

HERE = Path(__file__).resolve().parent
KERNELS = {
    "tcgen05": HERE / "tcgen05_tmem.cu",            # datacenter Blackwell: tensor memory, tcgen05
    "warp-block-scale": HERE / "warp_block_scale_mma.cu",  # consumer Blackwell: mma.sync block_scale
}
_REFUSAL = re.compile(r"error\s*:\s*(.*not supported on \.target '[^']+')")


@dataclass
class Outcome:
    kernel: str
    arch: str
    emitted: compile_mod.Emitted | None
    refusals: list[str]
    """ptxas's 'not supported on .target' messages, deduplicated, in order; empty when accepted."""

    @property
    def accepted(self) -> bool:
        return self.emitted is not None


def refusals_in(log: str) -> list[str]:
    """The distinct 'Instruction/Feature ... not supported on .target ...' messages of a ptxas log."""
    seen: list[str] = []
    for message in _REFUSAL.findall(log):
        if message not in seen:
            seen.append(message)
    return seen


def accepts(kernel: str, arch: str) -> Outcome:
    """Compile `kernel` (a key of KERNELS) for `arch`; a failure that is not a target refusal is raised."""
    try:
        return Outcome(kernel, arch, compile_mod.nvcc(KERNELS[kernel], arch), [])
    except RuntimeError as err:
        refused = refusals_in(str(err))
        if not refused:
            raise
        return Outcome(kernel, arch, None, refused)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_120a")
    arch = parser.parse_args().arch
    for name in KERNELS:
        outcome = accepts(name, arch)
        print(f"{name} on {arch}: " + ("accepted" if outcome.accepted else "refused: " + "; ".join(outcome.refusals)))
