"""wgmma in isolation: one CUDA C++ kernel per configuration, inline PTX, built by nvcc for sm_90a.

What each generated kernel does. A CTA copies a 64-row A tile and a B tile into shared memory,
128 bytes of K per row (4 instructions of K: 16 elements of bf16/fp16, 8 of tf32, 32 of s8), in the
128-byte-swizzled layout the wgmma matrix descriptor names (16-byte chunk c of row r lands at chunk
c ^ (r % 8); tiles 1024-byte aligned). Then, by `mode`:

- MODE_CHECK (one warpgroup): one K block of 4 instructions into a zeroed accumulator, written to
  global memory in the accumulator fragment layout, so the caller can compare it with a reference;
- MODE_THROUGHPUT (WARPGROUPS warpgroups per CTA, one CTA per SM): `iters` K blocks, each
  fence / 4 x wgmma / commit / wait_group 1, as a GEMM main loop issues them; thread 0 reads
  clock64 around the loop, so the result is FLOP per SM clock, independent of the clock speed;
- MODE_LATENCY (one warpgroup, one CTA): `iters` times fence / 1 x wgmma / commit / wait_group 0;
  clock64 cycles per iteration = issue-to-completion latency of one instruction.

Configurations (CONFIGS): bf16 N = 8 ... 256, fp16, tf32 and s8 at N = 64, bf16 with B MN-major
(the "NT" case, imm-trans-b = 1) and bf16 with A from registers (RS).

Constraints: sm_90a only (wgmma does not exist on plain sm_90); M = 64 per instruction; tf32 and
s8 K-major only; N must be a multiple of 8 (s8: 8, 16, 24, or a multiple of 16); MN-major B is
written for N = 64 (one swizzle atom wide).

Run it: `kernelwiki probe run --probe probe-wgmma-zoo` on an H200 (compile only:
`--compile-only`, needs nvcc 12.3+ on PATH).
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MODE_CHECK, MODE_THROUGHPUT, MODE_LATENCY = 0, 1, 2
WARPGROUPS = 2           # consumer warpgroups per CTA in MODE_THROUGHPUT, as in a ping-pong GEMM
K_BYTES = 128            # bytes of K per tile row: one 128-byte swizzle row, 4 instructions
INSTRUCTIONS_PER_BLOCK = 4
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "s8": 1}
PTX_TYPE = {"bf16": "bf16", "fp16": "f16", "tf32": "tf32", "s8": "s8"}


@dataclass(frozen=True)
class ZooConfig:
    """One wgmma configuration of the page's table."""

    name: str
    dtype: str            # bf16 | fp16 | tf32 | s8 (inputs); the accumulator is f32, s32 for s8
    n: int                # instruction N
    a_from_registers: bool = False   # RS: A fragment in registers instead of a shared-memory descriptor
    b_mn_major: bool = False         # B read MN-major (imm-trans-b = 1); 16-bit types only

    @property
    def k(self) -> int:
        """K of one instruction: always 32 bytes of K."""
        return 32 // ELEMENT_BYTES[self.dtype]

    @property
    def k_block(self) -> int:
        return self.k * INSTRUCTIONS_PER_BLOCK

    @property
    def integer(self) -> bool:
        return self.dtype == "s8"

    @property
    def kernel_name(self) -> str:
        return "zoo_" + self.name.replace("-", "_")

    @property
    def b_rows(self) -> int:
        """Rows of 128 bytes in the B tile: N rows K-major, K rows MN-major."""
        return self.k_block if self.b_mn_major else self.n

    def flops_per_instruction(self) -> int:
        return 2 * 64 * self.n * self.k

    def ptx(self) -> str:
        """The wgmma.mma_async instruction. Operand numbers follow the asm statement in the kernel:
        accumulators %0.., then the A descriptor, the B descriptor, the scale-d flag, the A registers."""
        acc = "s32" if self.integer else "f32"
        t = PTX_TYPE[self.dtype]
        shape = f"m64n{self.n}k{self.k}"
        regs = self.n // 2
        d = "{" + ", ".join(f"%{i}" for i in range(regs)) + "}"
        if self.a_from_registers:
            a = "{" + ", ".join(f"%{regs + 3 + i}" for i in range(4)) + "}"
            b = f"%{regs + 1}"
            tail = f"p, 1, 1, {int(self.b_mn_major)}"
        else:
            a, b = f"%{regs}", f"%{regs + 1}"
            if self.integer:
                tail = "p"
            elif self.dtype == "tf32":
                tail = "p, 1, 1"
            else:
                tail = f"p, 1, 1, 0, {int(self.b_mn_major)}"
        return f"wgmma.mma_async.sync.aligned.{shape}.{acc}.{t}.{t} {d}, {a}, {b}, {tail};"

    def sass_mnemonic(self) -> str:
        return "IGMMA" if self.integer else "HGMMA"


def _configs() -> list[ZooConfig]:
    out = [ZooConfig(f"bf16-n{n}", "bf16", n) for n in (8, 16, 32, 64, 128, 256)]
    out += [ZooConfig("fp16-n64", "fp16", 64), ZooConfig("tf32-n64", "tf32", 64), ZooConfig("s8-n64", "s8", 64),
            ZooConfig("bf16-n64-nt", "bf16", 64, b_mn_major=True),
            ZooConfig("bf16-n64-rs", "bf16", 64, a_from_registers=True)]
    return out


CONFIGS: dict[str, ZooConfig] = {c.name: c for c in _configs()}


def can_implement(config: ZooConfig) -> None:
    """Raise ValueError naming the value and the supported set."""
    if config.dtype not in ELEMENT_BYTES:
        raise ValueError(f"{config.name}: dtype {config.dtype!r} not supported; supported: {', '.join(ELEMENT_BYTES)}")
    if not 8 <= config.n <= 256 or config.n % 8:
        raise ValueError(f"{config.name}: N={config.n} not supported; N must be a multiple of 8 in [8, 256]")
    if config.integer and config.n > 24 and config.n % 16:
        raise ValueError(f"{config.name}: N={config.n} not supported for s8; above 24, N must be a multiple of 16")
    if (config.b_mn_major or config.a_from_registers) and ELEMENT_BYTES[config.dtype] != 2:
        raise ValueError(f"{config.name}: MN-major B and A from registers need a 16-bit type; got {config.dtype}")
    if config.b_mn_major and config.n != 64:
        raise ValueError(f"{config.name}: MN-major B is written for N=64 (one 128-byte swizzle atom); got N={config.n}")


_PRELUDE = r"""
#include <cstdint>

// 64-bit wgmma matrix descriptor: start address, leading and stride byte offsets (all >> 4),
// layout type 1 = 128-byte swizzle in bits 62-63; base offset 0 because tiles are 1024-byte aligned.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16)
       | ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | ((uint64_t)1 << 62);
}

// rows of 128 bytes from global memory into the 128-byte-swizzled shared layout
__device__ __forceinline__ void load_swizzled(uint8_t* s, const uint8_t* g, int rows) {
  for (int i = threadIdx.x; i < rows * 8; i += blockDim.x) {
    int r = i >> 3, c = i & 7;
    reinterpret_cast<uint4*>(s + r * 128)[c ^ (r & 7)] = reinterpret_cast<const uint4*>(g)[i];
  }
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
"""

_KERNEL = r"""
// ---- __NAME__: __PTX__
__device__ __forceinline__ void mma___NAME__(__ACC_T__ (&d)[__REGS__], uint64_t da, uint64_t db, const uint32_t* a) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %__SCALE__, 0;\n__PTX__\n}\n"
               : __D_OPERANDS__
               : "l"(da), "l"(db), "r"(1)__A_OPERANDS__);
}

extern "C" __global__ void __launch_bounds__(__MAX_THREADS__, 1)
__KERNEL__(const uint8_t* gA, const uint8_t* gB, __ACC_T__* gD, long long* cycles, int iters, int mode) {
  __shared__ __align__(1024) uint8_t sA[64 * 128];
  __shared__ __align__(1024) uint8_t sB[__B_ROWS__ * 128];
  load_swizzled(sA, gA, 64);
  load_swizzled(sB, gB, __B_ROWS__);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy stores -> wgmma reads
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const uint32_t a_base = (uint32_t)__cvta_generic_to_shared(sA);
  const uint32_t b_base = (uint32_t)__cvta_generic_to_shared(sB);
  uint64_t da[4], db[4];
  uint32_t ra[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    da[j] = smem_desc(a_base + 32 * j, 16, 1024);              // K-major: next K step is 32 bytes on
    db[j] = __B_MN__ ? smem_desc(b_base + 2048 * j, 8192, 1024)  // MN-major: 16 K rows of 128 bytes on
                     : smem_desc(b_base + 32 * j, 16, 1024);
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // A fragment (RS): rows lane/4 (+8), K pairs 2*(lane%4) (+8)
      int row = 16 * warp + (lane >> 2) + 8 * (r & 1);
      int k = __K__ * j + 2 * (lane & 3) + 8 * (r >> 1);
      ra[j][r] = __A_RS__ ? *reinterpret_cast<const uint32_t*>(gA + row * 128 + k * __ELEM_BYTES__) : 0u;
    }
  }
  __ACC_T__ d[__REGS__];
#pragma unroll
  for (int i = 0; i < __REGS__; ++i) d[i] = 0;

  if (mode == 0) {
    if (threadIdx.x >= 128) return;
    wg_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) mma___NAME__(d, da[j], db[j], ra[j]);
    wg_commit();
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < __REGS__; ++i) {  // accumulator fragment: row lane/4 (+8), column pairs per 8
      int row = 16 * warp + (lane >> 2) + 8 * ((i >> 1) & 1);
      int col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
      gD[row * __N__ + col] = d[i];
    }
    return;
  }
  const bool latency = mode == 2;
  __syncthreads();
  long long start = clock64();
  if (latency) {
    for (int it = 0; it < iters; ++it) {
      wg_fence();
      mma___NAME__(d, da[0], db[0], ra[0]);
      wg_commit();
      wg_wait<0>();
    }
  } else {
    for (int it = 0; it < iters; ++it) {
      wg_fence();
#pragma unroll
      for (int j = 0; j < 4; ++j) mma___NAME__(d, da[j], db[j], ra[j]);
      wg_commit();
      wg_wait<1>();
    }
    wg_wait<0>();
  }
  __syncthreads();
  long long stop = clock64();
  // keep the accumulators alive: one value per thread, so the loop cannot be removed
  __ACC_T__ sum = 0;
#pragma unroll
  for (int i = 0; i < __REGS__; ++i) sum += d[i];
  gD[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x == 0) cycles[blockIdx.x] = stop - start;
}
"""


def render_kernel(config: ZooConfig) -> str:
    can_implement(config)
    regs = config.n // 2
    constraint = "+r" if config.integer else "+f"
    d_operands = ", ".join(f'"{constraint}"(d[{i}])' for i in range(regs))
    a_operands = "".join(f', "r"(a[{i}])' for i in range(4)) if config.a_from_registers else ""
    ptx = config.ptx()
    values = {
        "__NAME__": config.name.replace("-", "_"), "__KERNEL__": config.kernel_name, "__PTX__": ptx,
        "__ACC_T__": "int" if config.integer else "float", "__REGS__": str(regs), "__N__": str(config.n),
        "__K__": str(config.k), "__ELEM_BYTES__": str(ELEMENT_BYTES[config.dtype]),
        "__B_ROWS__": str(config.b_rows), "__B_MN__": "true" if config.b_mn_major else "false",
        "__A_RS__": "true" if config.a_from_registers else "false", "__SCALE__": str(regs + 2),
        "__D_OPERANDS__": d_operands, "__A_OPERANDS__": a_operands,
        "__MAX_THREADS__": str(128 * WARPGROUPS),
    }
    text = _KERNEL
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def render_source(configs: list[ZooConfig] | None = None) -> str:
    """The whole .cu file: the shared helpers and one kernel per configuration."""
    return _PRELUDE + "".join(render_kernel(c) for c in (configs or list(CONFIGS.values())))


@dataclass
class Build:
    cubin: bytes
    ptx: str
    ptxas_log: str    # ptxas -v output: registers per kernel and any wgmma serialization warning


def build(arch: str = "sm_90a", configs: list[ZooConfig] | None = None) -> Build:
    """Compile every configuration with nvcc into one cubin (and PTX) for an sm_90a-class target."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("nvcc not found on PATH: install the CUDA toolkit 12.3+ (wgmma needs sm_90a)")
    if not arch.endswith("a") or not arch.startswith("sm_9"):
        raise ValueError(f"arch {arch!r} not supported: wgmma needs sm_90a")
    number = arch.removeprefix("sm_")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "wgmma_zoo.cu"
        source.write_text(render_source(configs), encoding="utf-8")
        base = [nvcc, "-std=c++17", "-O3", str(source)]
        result = subprocess.run([*base, "-cubin", f"-arch=sm_{number}", "-Xptxas", "-v", "-o", f"{tmp}/z.cubin"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"nvcc failed for {arch}:\n{result.stderr[-4000:]}")
        ptx = subprocess.run([*base, "-ptx", f"-arch=compute_{number}", "-o", f"{tmp}/z.ptx"],
                             capture_output=True, text=True)
        if ptx.returncode != 0:
            raise RuntimeError(f"nvcc -ptx failed for {arch}:\n{ptx.stderr[-4000:]}")
        return Build(Path(f"{tmp}/z.cubin").read_bytes(), Path(f"{tmp}/z.ptx").read_text(), result.stderr)


def sass_by_kernel(sass: str) -> dict[str, str]:
    """nvdisasm output split into {kernel name: its SASS}."""
    parts = re.split(r"^\s*\.text\.(\w+):\s*$", sass, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def serialization_warnings(ptxas_log: str) -> list[str]:
    """ptxas lines saying it serialized wgmma (a performance loss the zoo must not have)."""
    return [line.strip() for line in ptxas_log.splitlines() if "serializ" in line.lower()]


class ZooModule:
    """The cubin loaded into the current CUDA context (torch's), kernels launched on torch tensors."""

    def __init__(self, cubin: bytes):
        from cuda.bindings import driver

        self._driver = driver
        _check(driver.cuInit(0))
        self._module = _check(driver.cuModuleLoadData(cubin))
        self._functions: dict[str, object] = {}

    def launch(self, config: ZooConfig, a, b, d, cycles, *, iters: int, mode: int, grid: int, threads: int,
               stream: int) -> None:
        """a: (64, 128 bytes) and b: (b_rows, 128 bytes) as raw tensors; d: (64, N) for MODE_CHECK,
        else (grid * threads,); cycles: (grid,) int64."""
        driver = self._driver
        if config.kernel_name not in self._functions:
            self._functions[config.kernel_name] = _check(driver.cuModuleGetFunction(self._module,
                                                                                     config.kernel_name.encode()))
        args = ((a.data_ptr(), b.data_ptr(), d.data_ptr(), cycles.data_ptr(), iters, mode),
                (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int))
        _check(driver.cuLaunchKernel(self._functions[config.kernel_name], grid, 1, 1, threads, 1, 1, 0,
                                     driver.CUstream(stream), args, 0))


def _check(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(getattr(err, "value", err)) != 0:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)


def reference(config: ZooConfig, a, b):
    """D = A . B^T in float64 from the operands as the tensor core sees them.
    a: (64, k_block); b: (N, k_block) K-major or (k_block, N) MN-major; tf32 inputs already rounded."""
    b_nk = b.t() if config.b_mn_major else b
    return a.double() @ b_nk.double().t()
