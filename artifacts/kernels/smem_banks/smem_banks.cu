// Shared-memory bank conflicts: the cost of a warp access by the number of distinct words per bank,
// and ldmatrix / stmatrix with and without the 128-byte XOR swizzle.
//
// banks_kernel: the CTA copies `words` 32-bit words from x into shared memory, then every warp
// issues `iters` x 8 independent 32-bit loads (ld.shared.u32). Lane l reads word offsets[l] (+ a
// multiple of 32 words per unrolled load, which keeps each load's bank pattern). The offsets come
// from the caller, so one kernel serves every stride, padding and swizzle pattern. Thread 0 reads
// clock64 around the loop; cycles / (warps x loads per warp) = cycles per warp-wide access with the
// shared-memory pipe saturated. Warp 0 also writes what its first load returned, for the gate.
//
// matrix_kernel: the CTA stores a 64-row x 128-byte tile (bf16, 64 per row) from x into shared
// memory, 16-byte chunk c of row r at chunk c ^ (r % 8) when `swizzle_store` is set. Lane l of
// every warp addresses row l % 8 of 8x8 matrix l / 8 (x1: matrices 0, x2: 0-1, x4: 0-3); matrix j
// is chunk j of rows 0..7, at chunk j ^ r when `swizzle_load` is set. Without the swizzle the eight
// rows of a matrix are 128 bytes apart: all in the same four banks, an 8-way conflict. In the
// check the loaded fragments go to out; then stmatrix writes them back into a second tile with the
// store layout, which is read back through the load layout (a round trip that must be the identity).
// Timed: `iters` x 8 ldmatrix (or stmatrix) per warp, clock64 around them.
#include <cstdint>
#include <cuda_runtime.h>

__device__ __forceinline__ uint32_t ld_shared(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

extern "C" __global__ void banks_kernel(const uint32_t* x, const int* offsets, uint32_t* out, long long* cycles,
                                        int words, int iters) {
  extern __shared__ __align__(16) uint32_t s[];
  for (int i = threadIdx.x; i < words; i += blockDim.x) s[i] = x[i];
  const int lane = threadIdx.x & 31;
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(s) + 4u * offsets[lane];
  __syncthreads();
  out[lane] = ld_shared(base);  // every warp writes the same words; warp 0's are checked
  uint32_t acc = 0;
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= ld_shared(base + 128u * u);  // +32 words: same banks
  }
  __syncthreads();
  long long t1 = clock64();
  if (threadIdx.x == 0) cycles[0] = t1 - t0;
  if (acc == 0x9e3779b9u) out[32 + threadIdx.x] = acc;  // practically never; keeps the loads
}

template <int N> __device__ __forceinline__ void ldmatrix(uint32_t (&r)[4], uint32_t addr);
template <> __device__ __forceinline__ void ldmatrix<1>(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr) : "memory");
}
template <> __device__ __forceinline__ void ldmatrix<2>(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr)
               : "memory");
}
template <> __device__ __forceinline__ void ldmatrix<4>(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
template <int N> __device__ __forceinline__ void stmatrix(uint32_t addr, const uint32_t (&r)[4]);
template <> __device__ __forceinline__ void stmatrix<1>(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n" :: "r"(addr), "r"(r[0]) : "memory");
}
template <> __device__ __forceinline__ void stmatrix<2>(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n" :: "r"(addr), "r"(r[0]), "r"(r[1])
               : "memory");
}
template <> __device__ __forceinline__ void stmatrix<4>(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

constexpr int TILE_ROWS = 64, ROW_BYTES = 128, TILE_BYTES = TILE_ROWS * ROW_BYTES;

__device__ __forceinline__ uint32_t chunk_offset(int row, int chunk, bool swizzle) {
  return (uint32_t)(row * ROW_BYTES + 16 * (swizzle ? chunk ^ (row & 7) : chunk));
}

template <int N>
__device__ void matrix_body(const uint4* x, uint32_t* out, long long* cycles, int iters, int timed_store,
                            bool swizzle_store, bool swizzle_load) {
  __shared__ __align__(1024) uint8_t tile[2][TILE_BYTES];
  const int lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < TILE_ROWS * 8; i += blockDim.x)  // 16-byte chunk i: row i / 8, chunk i % 8
    *reinterpret_cast<uint4*>(tile[0] + chunk_offset(i >> 3, i & 7, swizzle_store)) = x[i];
  __syncthreads();
  const uint32_t base0 = (uint32_t)__cvta_generic_to_shared(tile[0]);
  const uint32_t base1 = (uint32_t)__cvta_generic_to_shared(tile[1]);
  const int matrix = (lane >> 3) % N, row = lane & 7;
  const uint32_t addr = chunk_offset(row, matrix, swizzle_load);
  uint32_t r[4] = {0u, 0u, 0u, 0u};
  ldmatrix<N>(r, base0 + addr);
  if (threadIdx.x < 32) {
    for (int j = 0; j < N; ++j) out[j * 32 + lane] = r[j];
  }
  // round trip: stmatrix into tile 1 through the store layout, read back through the load layout
  stmatrix<N>(base1 + chunk_offset(row, matrix, swizzle_store), r);
  __syncthreads();
  if (threadIdx.x < 8 * N) {
    const int m = threadIdx.x >> 3, rr = threadIdx.x & 7;
    const uint4 v = *reinterpret_cast<const uint4*>(tile[1] + chunk_offset(rr, m, swizzle_load));
    reinterpret_cast<uint4*>(out + 128)[threadIdx.x] = v;  // row rr of matrix m: 8 bf16
  }
  __syncthreads();
  uint32_t acc = 0;
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const uint32_t rows = 8u * ROW_BYTES * (u & 7);  // the next 8 rows: same bank pattern
      if (timed_store) {
        stmatrix<N>(base1 + rows + addr, r);
      } else {
        ldmatrix<N>(r, base0 + rows + addr);
        acc ^= r[0] ^ r[N - 1];
      }
    }
  }
  __syncthreads();
  long long t1 = clock64();
  if (threadIdx.x == 0) cycles[0] = t1 - t0;
  if (acc == 0x9e3779b9u) out[512 + threadIdx.x] = acc;
}

extern "C" __global__ void matrix_kernel(const uint4* x, uint32_t* out, long long* cycles, int num, int iters,
                                         int timed_store, int swizzle_store, int swizzle_load) {
  if (num == 1) matrix_body<1>(x, out, cycles, iters, timed_store, swizzle_store, swizzle_load);
  else if (num == 2) matrix_body<2>(x, out, cycles, iters, timed_store, swizzle_store, swizzle_load);
  else matrix_body<4>(x, out, cycles, iters, timed_store, swizzle_store, swizzle_load);
}

extern "C" int banks_prepare(int smem_bytes) {
  cudaError_t err = cudaFuncSetAttribute((const void*)banks_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem_bytes);
  cudaFuncAttributes attributes;
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attributes, (const void*)matrix_kernel);
  return (int)err;
}

extern "C" int banks_launch(const uint32_t* x, const int* offsets, uint32_t* out, long long* cycles, int words,
                            int iters, int threads, int smem_bytes, cudaStream_t stream) {
  banks_kernel<<<1, threads, smem_bytes, stream>>>(x, offsets, out, cycles, words, iters);
  return (int)cudaGetLastError();
}

extern "C" int matrix_launch(const void* x, uint32_t* out, long long* cycles, int num, int iters, int timed_store,
                             int swizzle_store, int swizzle_load, int threads, cudaStream_t stream) {
  matrix_kernel<<<1, threads, 0, stream>>>((const uint4*)x, out, cycles, num, iters, timed_store, swizzle_store,
                                           swizzle_load);
  return (int)cudaGetLastError();
}

extern "C" const char* banks_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
