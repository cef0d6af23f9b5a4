"""The TF32 warpgroup MMA op that CuTe DSL 4.8.1 does not expose.

`cute.nvgpu.warpgroup` ships MmaF16BF16Op, MmaF8Op and MmaI8Op only, but the MLIR atom type
underneath (`MmaAtomSM90Type`) accepts tf32 operands, and the rest of the stack - partitioning,
smem descriptors, lowering to `wgmma.mma_async ... .f32.tf32.tf32` / `HGMMA.64xNx8.F32.TF32` - works
unchanged. This op builds that atom. It uses DSL internals (`cute_nvgpu` dialect bindings,
`_pack_shape`, `make_atom`) as of the pinned nvidia-cutlass-dsl 4.8.1: re-check on a version bump.

TF32 operands are K-major only (wgmma transposes 16-bit types only); K per instruction is 8.
"""

from __future__ import annotations

import cutlass
import cutlass._mlir.dialects.cute_nvgpu as _cute_nvgpu_ir
import cutlass.cute as cute
from cutlass.cute.atom import make_atom
from cutlass.cute.core import _pack_shape
from cutlass.cute.nvgpu.warpgroup import mma as warpgroup_mma

INSTRUCTION_K = 8


class MmaTF32Op(warpgroup_mma.MmaOp):
    descriptive_name = "warpgroup TF32 MMA Operation (kernelwiki)"

    def __init__(self, instruction_mn: tuple[int, int], a_major, b_major,
                 a_src=cute.nvgpu.warpgroup.OperandSource.SMEM) -> None:
        super().__init__(cutlass.TFloat32, cutlass.TFloat32, cutlass.Float32, (*instruction_mn, INSTRUCTION_K), a_src,
                         a_major, b_major)
        k_major = cute.nvgpu.OperandMajorMode.K
        if self.a_major_mode != k_major or self.b_major_mode != k_major:
            raise ValueError("TF32 wgmma reads A and B K-major only")

    def _make_trait(self, *, loc=None, ip=None, **kwargs):
        shape_mnk = _pack_shape(self.shape_mnk, loc=loc, ip=ip)
        atom_type = _cute_nvgpu_ir.MmaAtomSM90Type.get(
            shape_mnk.type.attribute, self.a_major_mode._to_ir(), self.b_major_mode._to_ir(),
            self.a_dtype.mlir_type, self.b_dtype.mlir_type, self.acc_dtype.mlir_type, self.a_src._to_ir())
        # the ACCUMULATE field starts False, as in the DSL's own ops
        return warpgroup_mma.MmaF16BF16Trait(
            make_atom(atom_type, [cutlass.Boolean(False).ir_value(loc=loc, ip=ip)], loc=loc, ip=ip))


def make_tiled_mma_tf32(atom_layout_mnk: tuple[int, int, int], tiler_mn: tuple[int, int]) -> cute.TiledMma:
    """A tiled TF32 MMA, K-major A and B, as sm90_utils.make_trivial_tiled_mma builds for other types."""
    k_major = cute.nvgpu.OperandMajorMode.K
    return cute.make_tiled_mma(cute.make_mma_atom(MmaTF32Op(tiler_mn, k_major, k_major)), atom_layout_mnk)
