"""probe-blackwell-targets: which Blackwell MMA family each target accepts (compile-only).

For each architecture both kernels of artifacts/kernels/blackwell_targets are compiled: the tcgen05 /
TMEM kernel and the warp-level block-scaled mma.sync kernel. Accepted code is scanned for its
instructions; a refusal is recorded as a fact ("<kernel>-refused:<arch>") with ptxas's message in the
notes, so the record shows both halves: sm_100a takes tcgen05 and refuses mma.sync block_scale,
sm_120a the other way round.
"""

from __future__ import annotations

from kernelwiki.harness.compile import Emitted
from kernelwiki.harness.probe import Probe

from artifacts.kernels.blackwell_targets import targets


def compile_kernels(arch: str) -> Emitted:
    combined = Emitted(arch, sass="")
    for kernel in targets.KERNELS:
        outcome = targets.accepts(kernel, arch)
        if outcome.accepted:
            combined.extend(outcome.emitted)
            combined.notes += outcome.emitted.notes
            combined.facts.append(f"{kernel}-accepted:{arch}")
        else:
            combined.facts.append(f"{kernel}-refused:{arch}")
            combined.notes.append(f"{kernel} on {arch}: " + "; ".join(outcome.refusals))
    return combined


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernels)
