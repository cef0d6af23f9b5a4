"""probe-footgun-nested-layout: two views of the same columns that print differently.

Compile-only, on any machine. At trace time the probe builds the two views the page compares - the
nested view of the DeepSeek-V4 kernel's P fragment, ((128,16),1,(4,2)):((65536,1),0,(16,64)), and the
same 128 x 128 columns as one row mode and one flat K mode, (128,(16,4,2)):(65536,(1,16,64)) - plus a
control view that really differs (the two K sub-modes swapped: ((128,16),1,(2,4)):((65536,1),0,(64,16))).
The wrong comparison (the printed layouts) calls the first two different; the right ones (every
coordinate's offset, and `cute.coalesce`) find them equal and still tell the control view apart.
"""

from __future__ import annotations

import cutlass.cute as cute

from kernelwiki.harness.compile import Emitted
from kernelwiki.harness.probe import Probe

VIEWS = {
    "nested": (((128, 16), 1, (4, 2)), ((65536, 1), 0, (16, 64))),
    "flat": ((128, (16, 4, 2)), (65536, (1, 16, 64))),
    "swapped": (((128, 16), 1, (2, 4)), ((65536, 1), 0, (64, 16))),   # the control: a different function
}


def facts(printed: dict[str, str], offsets: dict[str, list[int]], coalesced: dict[str, str]) -> list[str]:
    """What the comparisons found, as expected_instructions facts: the wrong test (printed text) and
    the right ones (offsets over every coordinate, coalesced form) for nested vs flat, and the right
    ones for the control view, which must differ."""
    out = [f"coalesced:{coalesced['nested']}"]
    if printed["nested"] != printed["flat"]:
        out.append("printed-text-differs")
    if offsets["nested"] == offsets["flat"]:
        out.append("same-offsets-every-coordinate")
    if coalesced["nested"] == coalesced["flat"]:
        out.append("coalesced-equal")
    if offsets["nested"] != offsets["swapped"] and coalesced["nested"] != coalesced["swapped"]:
        out.append("swapped-view-told-apart")
    return out


def compile_kernel(arch: str) -> Emitted:
    seen: dict = {"printed": {}, "offsets": {}, "coalesced": {}}

    @cute.jit
    def evaluate():
        for name, (shape, stride) in VIEWS.items():
            layout = cute.make_layout(shape, stride=stride)
            seen["printed"][name] = str(layout)
            seen["offsets"][name] = [int(layout(i)) for i in range(cute.size(layout))]
            seen["coalesced"][name] = str(cute.coalesce(layout))

    cute.compile(evaluate, options=f"--gpu-arch {arch}")
    return Emitted(arch, facts=facts(seen["printed"], seen["offsets"], seen["coalesced"]))


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
