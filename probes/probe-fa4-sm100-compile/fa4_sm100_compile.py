"""probe-fa4-sm100-compile: the pinned FA4 sm100 forward, compiled for sm_100a with fake tensors.

Compile-only: needs torch (CPU is enough) and flash-attn-4 4.0.0b36 importable, not a GPU.
"""

from __future__ import annotations

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness.probe import Probe

B, S, H, D = 2, 1024, 8, 128


def compile_kernel(arch: str) -> compile_mod.Emitted:
    import os
    import tempfile

    os.makedirs(f"{tempfile.gettempdir()}/kernelwiki-cute-dumps", exist_ok=True)

    # FA4 checks the DSL's target architecture, which the DSL takes from the GPU it sees (sm_90a on
    # an H200) unless told otherwise; name the target before cutlass is imported.
    os.environ["CUTE_DSL_ARCH"] = arch
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream
    from flash_attn.cute.flash_fwd_sm100 import FlashAttentionForwardSm100

    def fake():  # (b, s, h, d), d contiguous
        return make_fake_compact_tensor(cutlass.BFloat16, (B, S, H, D), stride_order=(3, 2, 1, 0), assumed_align=16)

    # The static persistent scheduler asks the driver for the SM count; without a GPU use the
    # non-persistent one (same mainloop, softmax and epilogue code).
    kernel = FlashAttentionForwardSm100(head_dim=D, is_causal=False, is_static_persistent=False)
    compiled = cute.compile(kernel, fake(), fake(), fake(), fake(), None, cutlass.Float32(D ** -0.5),
                            stream=make_fake_stream(), options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {tempfile.gettempdir()}/kernelwiki-cute-dumps")
    return compile_mod.from_cute(compiled, arch)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
