"""Software exp2 on the FMA pipe vs the MUFU's ex2.approx, in CuTe DSL (sm_90a and later).

What it does
    `ex2_software(x)` computes 2^x for x <= 0 without the special-function unit:
      1. clamp x at -127;
      2. n = floor(x) by adding 1.5 * 2^23 with round-toward-minus-infinity (add.rm): the sum's low
         mantissa bits then hold n as an integer, and subtracting the constant gives n as a float;
      3. f = x - n in [0, 1), and p(f) ~ 2^f by Horner's rule (FMAs only);
      4. 2^n * p(f) by adding n into p's exponent field (an integer shift and add).
    The polynomial's coefficients are fitted here (`fit_poly`), not taken from anywhere: least
    squares on the relative error at Chebyshev nodes of [0, 1), with p(0) = 1 pinned.

    `Exp2Throughput` runs chains x <- -(2^x) - 0.5 in registers (the map stays in [-1.5, -0.5]),
    `vec` independent chains per thread, `repeats` steps each, so that the exponentials dominate;
    `software_of_8` of every 8 chains use the software path, the rest ex2.approx (0 = all hardware,
    8 = all software). `Exp2Map` applies one exp2 per element of a tensor, for accuracy sweeps.

Run it: through probes/probe-software-exp2 (kernelwiki probe run --probe probe-software-exp2).
Compile only: python -m artifacts.kernels.software_exp2.exp2 --arch sm_90a
"""

from __future__ import annotations

import argparse
import math
import struct
import os
import tempfile

import cutlass
import cutlass.cute as cute
from cutlass import Float32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

ROUND_CONSTANT = 1.5 * 2**23  # adding it leaves floor(x) in the low mantissa bits (with .rm)
BROKEN_C1_FACTOR = 1.05
"""The negative control's polynomial: c1 5% high, which puts the 256-step chains about 3x over the
tf32 gate (dropping the 2^floor(x) factor, the earlier control, missed it by ~360x)."""

# --keep-ptx/--keep-cubin also write files; keep them out of the working directory.
DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)  # the DSL names files there but does not create the directory


def fit_poly(degree: int = 3, nodes: int = 64) -> list[float]:
    """Coefficients c0..c_degree of p(f) ~ 2^f on [0, 1), c0 = 1, minimizing the relative error
    in the least-squares sense at Chebyshev nodes. Plain Python: no numpy needed to compile."""
    points = [0.5 - 0.5 * math.cos(math.pi * (k + 0.5) / nodes) for k in range(nodes)]
    # unknowns c1..cd; residual (1 + sum c_j f^j - 2^f) / 2^f
    rows = [[f**j / 2**f for j in range(1, degree + 1)] for f in points]
    rhs = [(2**f - 1) / 2**f for f in points]
    normal = [[sum(r[i] * r[j] for r in rows) for j in range(degree)] for i in range(degree)]
    vector = [sum(r[i] * b for r, b in zip(rows, rhs)) for i in range(degree)]
    for col in range(degree):  # Gaussian elimination with partial pivoting
        pivot = max(range(col, degree), key=lambda r: abs(normal[r][col]))
        normal[col], normal[pivot] = normal[pivot], normal[col]
        vector[col], vector[pivot] = vector[pivot], vector[col]
        for row in range(col + 1, degree):
            factor = normal[row][col] / normal[col][col]
            normal[row] = [a - factor * b for a, b in zip(normal[row], normal[col])]
            vector[row] -= factor * vector[col]
    solution = [0.0] * degree
    for row in reversed(range(degree)):
        solution[row] = (vector[row] - sum(normal[row][j] * solution[j] for j in range(row + 1, degree))) / normal[row][row]
    return [1.0] + solution


def _ptx_f32(value: float) -> str:
    return "0f" + struct.pack(">f", value).hex().upper()


def _software_asm(coefficients: list[float]) -> str:
    c = [_ptx_f32(v) for v in coefficients]
    horner = [f"fma.rn.f32 p, p, f, {c[j]};" for j in range(len(c) - 2, -1, -1)]
    combine = ["mov.b32 ri, xr;", "shl.b32 ri, ri, 23;", "mov.b32 pi, p;", "add.s32 pi, pi, ri;", "mov.b32 $0, pi;"]
    body = [
        ".reg .f32 xc, xr, n, f, p;", ".reg .b32 ri, pi;",
        "max.f32 xc, $1, 0fC2FE0000;",                      # clamp at -127
        f"add.rm.f32 xr, xc, {_ptx_f32(ROUND_CONSTANT)};",  # floor into the mantissa
        f"sub.f32 n, xr, {_ptx_f32(ROUND_CONSTANT)};",
        "sub.f32 f, xc, n;",
        f"mov.f32 p, {c[-1]};",
        *horner, *combine,
    ]
    return "{\n" + "\n".join(body) + "\n}"


@dsl_user_op
def ex2_software(x: Float32, *, coefficients: tuple = tuple(fit_poly()), loc=None, ip=None) -> Float32:
    return Float32(llvm.inline_asm(
        T.f32(), [Float32(x).ir_value(loc=loc, ip=ip)], _software_asm(list(coefficients)),
        "=f,f", has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT))


class Exp2Throughput:
    """`vec` chains per thread of `repeats` steps x <- -(2^x) - 0.5; out = the final x."""

    def __init__(self, software_of_8: int, vec: int = 8, repeats: int = 256, threads: int = 256,
                 degree: int = 3, broken: bool = False):
        if not 0 <= software_of_8 <= 8 or vec % 8:
            raise ValueError(f"software_of_8={software_of_8} must be in 0..8 and vec={vec} a multiple of 8")
        self.software_of_8, self.vec, self.repeats, self.threads = software_of_8, vec, repeats, threads
        self.coefficients = tuple(fit_poly(degree))
        if broken:   # the negative control: the linear coefficient 5% off (a constant typed wrong)
            self.coefficients = (self.coefficients[0], BROKEN_C1_FACTOR * self.coefficients[1], *self.coefficients[2:])

    @cute.jit
    def __call__(self, mX: cute.Tensor, mY: cute.Tensor, stream):
        # mX, mY: (threads_total * vec,) fp32
        blocks = cute.size(mX, mode=[0]) // (self.threads * self.vec)
        self.kernel(mX, mY).launch(grid=[blocks, 1, 1], block=[self.threads, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        base = (bidx * self.threads + tidx) * self.vec
        rX = cute.make_rmem_tensor((self.vec,), Float32)
        for v in cutlass.range_constexpr(self.vec):
            rX[v] = mX[base + v]
        for _ in cutlass.range(self.repeats, unroll=4):
            for v in cutlass.range_constexpr(self.vec):
                if cutlass.const_expr(v % 8 < self.software_of_8):
                    y = ex2_software(rX[v], coefficients=self.coefficients)
                else:
                    y = cute.arch.exp2(rX[v])
                rX[v] = -y - Float32(0.5)
        for v in cutlass.range_constexpr(self.vec):
            mY[base + v] = rX[v]


class Exp2Map:
    """mY[i] = 2^mX[i], by software (`software=True`) or by ex2.approx."""

    def __init__(self, software: bool, degree: int = 3, threads: int = 256):
        self.software, self.threads = software, threads
        self.coefficients = tuple(fit_poly(degree))

    @cute.jit
    def __call__(self, mX: cute.Tensor, mY: cute.Tensor, stream):
        # mX, mY: (n,) fp32, n a multiple of threads
        self.kernel(mX, mY).launch(grid=[cute.size(mX, mode=[0]) // self.threads, 1, 1],
                                   block=[self.threads, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * self.threads + tidx
        if cutlass.const_expr(self.software):
            mY[i] = ex2_software(mX[i], coefficients=self.coefficients)
        else:
            mY[i] = cute.arch.exp2(mX[i])


def compile_for(arch: str, software_of_8: int = 4):
    """Compile the throughput kernel with fake tensors (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    n = 132 * 256 * 8
    fake = lambda: make_fake_compact_tensor(Float32, (n,), assumed_align=16)  # noqa: E731
    return cute.compile(Exp2Throughput(software_of_8), fake(), fake(), make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    print("coefficients:", fit_poly())
    compile_for(args.arch)
    print(f"compiled for {args.arch}")
