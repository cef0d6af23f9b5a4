// GEMM-style epilogues that write an output tile from shared memory through TMA, against plain
// global stores and atomics.
//
// The "accumulator" of output tile element (r, c) is the rank-1 product a[r] * b[c] (fp32), so a
// kernel reads M + N floats and writes M x N outputs: the store path is all there is to measure.
// Tiles are TILE_M x TILE_N; each CTA walks tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... and
// reuses one shared-memory tile buffer (a persistent epilogue), so a TMA engine that read the
// buffer before the threads' new values were visible to it would store the previous tile's values.
//
// Store (bf16 out, M x N, row-major):
//   ep_st_global  - each thread rounds its values to bf16 and writes 16-byte vectors to global.
//   ep_tma_store  - threads write the tile to shared memory (st.shared), then fence.proxy.async
//                   (when `fence` is 1), a CTA barrier, and one thread issues the TMA store
//                   (cp.async.bulk.tensor.2d.global.shared::cta.bulk_group), commits the group and,
//                   before the buffer is rewritten, waits until the TMA has read it
//                   (cp.async.bulk.wait_group.read 0). fence 0 is the missing-fence footgun.
// Reduce (fp32 out += partials, split-K style: `splits` partials a_s[r] * b_s[c] per element):
//   ep_atomic     - one atomicAdd per element (RED.E.ADD.F32), or float4 atomicAdd (vector 1).
//   ep_tma_reduce - the partial tile written to shared memory, fenced, and added into global by
//                   cp.reduce.async.bulk.tensor.2d.global.shared::cta.add. `round_fp16` rounds each
//                   partial through fp16 first (a precision slip; the tests show the fp32 gate
//                   catches it).
//
// Host side: extern "C" functions take the caller's stream and return a cudaError_t; tensor maps
// are encoded with cuTensorMapEncodeTiled, reached through cudaGetDriverEntryPointByVersion (no
// link against libcuda).

#include <cstdint>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

constexpr int TILE_M = 64;
constexpr int TILE_N = 128;
constexpr int THREADS = 256;
constexpr int VEC = 8;                                          // bf16 per 16-byte vector
constexpr int STORE_VECS = TILE_M * TILE_N / VEC / THREADS;     // 4 vectors per thread per tile
constexpr int REDUCE_VECS = TILE_M * TILE_N / 4 / THREADS;      // 8 float4 per thread per tile

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void tile_origin(int tile, int tiles_n, int& r0, int& c0) {
  r0 = (tile / tiles_n) * TILE_M;
  c0 = (tile % tiles_n) * TILE_N;
}

// the 8 bf16 values of vector v (0 .. TILE_M * TILE_N / 8) of a tile at (r0, c0)
__device__ __forceinline__ uint4 product_vec(const float* a, const float* b, int r0, int c0, int v) {
  const int r = r0 + v / (TILE_N / VEC), c = c0 + (v % (TILE_N / VEC)) * VEC;
  const float ar = a[r];
  __align__(16) __nv_bfloat16 out[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = __float2bfloat16_rn(ar * b[c + j]);
  return *reinterpret_cast<uint4*>(out);
}

__global__ void __launch_bounds__(THREADS)
    ep_st_global(const float* __restrict__ a, const float* __restrict__ b, __nv_bfloat16* __restrict__ out, int m,
                 int n) {
  const int tiles_n = n / TILE_N, tiles = (m / TILE_M) * tiles_n;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int r0, c0;
    tile_origin(tile, tiles_n, r0, c0);
#pragma unroll
    for (int i = 0; i < STORE_VECS; ++i) {
      const int v = threadIdx.x + i * THREADS;
      const int r = r0 + v / (TILE_N / VEC), c = c0 + (v % (TILE_N / VEC)) * VEC;
      *reinterpret_cast<uint4*>(out + static_cast<size_t>(r) * n + c) = product_vec(a, b, r0, c0, v);
    }
  }
}

__global__ void __launch_bounds__(THREADS)
    ep_tma_store(const __grid_constant__ CUtensorMap map, const float* __restrict__ a, const float* __restrict__ b,
                 int m, int n, int fence) {
  __shared__ __align__(128) __nv_bfloat16 tile_buf[TILE_M * TILE_N];
  const int tiles_n = n / TILE_N, tiles = (m / TILE_M) * tiles_n;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int r0, c0;
    tile_origin(tile, tiles_n, r0, c0);
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // buffer free again
    __syncthreads();
#pragma unroll
    for (int i = 0; i < STORE_VECS; ++i) {
      const int v = threadIdx.x + i * THREADS;
      reinterpret_cast<uint4*>(tile_buf)[v] = product_vec(a, b, r0, c0, v);
    }
    if (fence) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                   :: "l"(&map), "r"(c0), "r"(r0), "r"(smem_addr(tile_buf)) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

__device__ __forceinline__ float4 partial_vec(const float* a, const float* b, int s, int m, int n, int r0, int c0,
                                              int v, int round_fp16) {
  const int r = r0 + v / (TILE_N / 4), c = c0 + (v % (TILE_N / 4)) * 4;
  const float ar = a[static_cast<size_t>(s) * m + r];
  const float* bs = b + static_cast<size_t>(s) * n + c;
  float4 p = make_float4(ar * bs[0], ar * bs[1], ar * bs[2], ar * bs[3]);
  if (round_fp16) {
    p.x = __half2float(__float2half_rn(p.x));
    p.y = __half2float(__float2half_rn(p.y));
    p.z = __half2float(__float2half_rn(p.z));
    p.w = __half2float(__float2half_rn(p.w));
  }
  return p;
}

__global__ void __launch_bounds__(THREADS)
    ep_atomic(const float* __restrict__ a, const float* __restrict__ b, float* out, int m, int n, int splits,
              int vector) {
  const int tiles_n = n / TILE_N, tiles = (m / TILE_M) * tiles_n;
  for (int work = blockIdx.x; work < tiles * splits; work += gridDim.x) {
    const int tile = work / splits, s = work % splits;
    int r0, c0;
    tile_origin(tile, tiles_n, r0, c0);
#pragma unroll
    for (int i = 0; i < REDUCE_VECS; ++i) {
      const int v = threadIdx.x + i * THREADS;
      const int r = r0 + v / (TILE_N / 4), c = c0 + (v % (TILE_N / 4)) * 4;
      const float4 p = partial_vec(a, b, s, m, n, r0, c0, v, 0);
      float* dst = out + static_cast<size_t>(r) * n + c;
      if (vector) {
        atomicAdd(reinterpret_cast<float4*>(dst), p);
      } else {
        atomicAdd(dst, p.x);
        atomicAdd(dst + 1, p.y);
        atomicAdd(dst + 2, p.z);
        atomicAdd(dst + 3, p.w);
      }
    }
  }
}

__global__ void __launch_bounds__(THREADS)
    ep_tma_reduce(const __grid_constant__ CUtensorMap map, const float* __restrict__ a, const float* __restrict__ b,
                  int m, int n, int splits, int round_fp16) {
  __shared__ __align__(128) float tile_buf[TILE_M * TILE_N];
  const int tiles_n = n / TILE_N, tiles = (m / TILE_M) * tiles_n;
  for (int work = blockIdx.x; work < tiles * splits; work += gridDim.x) {
    const int tile = work / splits, s = work % splits;
    int r0, c0;
    tile_origin(tile, tiles_n, r0, c0);
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    __syncthreads();
#pragma unroll
    for (int i = 0; i < REDUCE_VECS; ++i) {
      const int v = threadIdx.x + i * THREADS;
      reinterpret_cast<float4*>(tile_buf)[v] = partial_vec(a, b, s, m, n, r0, c0, v, round_fp16);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];"
                   :: "l"(&map), "r"(c0), "r"(r0), "r"(smem_addr(tile_buf)) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// a row-major m x n tensor of `bf16 ? bf16 : fp32`, boxes of TILE_M x TILE_N, no swizzle.
// pitch_in_elements (the probe's negative control) gives the row pitch in elements where the
// driver wants bytes, the classic unit slip: rows then land at the wrong addresses.
static int encode(CUtensorMap* map, void* base, int m, int n, int bf16, int pitch_in_elements = 0) {
  static EncodeTiled fn = nullptr;
  if (fn == nullptr) {
    cudaDriverEntryPointQueryResult found;
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&fn), 12000,
                                                       cudaEnableDefault, &found);
    if (err != cudaSuccess) return static_cast<int>(err);
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) return static_cast<int>(cudaErrorSymbolNotFound);
  }
  const size_t elem = bf16 ? 2 : 4;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(n), static_cast<cuuint64_t>(m)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(n) * (pitch_in_elements ? 1 : elem)};
  const cuuint32_t box[2] = {TILE_N, TILE_M}, unit[2] = {1, 1};
  CUresult res = fn(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims,
                    strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                    CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return res == CUDA_SUCCESS ? 0 : static_cast<int>(cudaErrorInvalidValue);
}

// persistent grid: as many CTAs as fit on the GPU at once (shared memory may allow fewer than the
// 2048 / THREADS that the thread limit allows), at most one per work item
template <typename Kernel>
static int grid_for(Kernel kernel, int work) {
  int device = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, 0) != cudaSuccess || per_sm < 1) {
    per_sm = 1;
  }
  const int ctas = sms * per_sm;
  return work < ctas ? work : ctas;
}

static int shape_ok(int m, int n) { return m > 0 && n > 0 && m % TILE_M == 0 && n % TILE_N == 0; }

extern "C" {

int ep_launch_st_global(const float* a, const float* b, void* out, int m, int n, cudaStream_t stream) {
  if (!shape_ok(m, n)) return static_cast<int>(cudaErrorInvalidValue);
  ep_st_global<<<grid_for(ep_st_global, (m / TILE_M) * (n / TILE_N)), THREADS, 0, stream>>>(
      a, b, static_cast<__nv_bfloat16*>(out), m, n);
  return static_cast<int>(cudaGetLastError());
}

int ep_launch_tma_store(const float* a, const float* b, void* out, int m, int n, int fence, int pitch_in_elements,
                        cudaStream_t stream) {
  if (!shape_ok(m, n)) return static_cast<int>(cudaErrorInvalidValue);
  CUtensorMap map;
  int err = encode(&map, out, m, n, 1, pitch_in_elements);
  if (err) return err;
  ep_tma_store<<<grid_for(ep_tma_store, (m / TILE_M) * (n / TILE_N)), THREADS, 0, stream>>>(map, a, b, m, n, fence);
  return static_cast<int>(cudaGetLastError());
}

int ep_launch_atomic(const float* a, const float* b, float* out, int m, int n, int splits, int vector,
                     cudaStream_t stream) {
  if (!shape_ok(m, n) || splits < 1) return static_cast<int>(cudaErrorInvalidValue);
  ep_atomic<<<grid_for(ep_atomic, (m / TILE_M) * (n / TILE_N) * splits), THREADS, 0, stream>>>(a, b, out, m, n, splits, vector);
  return static_cast<int>(cudaGetLastError());
}

int ep_launch_tma_reduce(const float* a, const float* b, float* out, int m, int n, int splits, int round_fp16,
                         cudaStream_t stream) {
  if (!shape_ok(m, n) || splits < 1) return static_cast<int>(cudaErrorInvalidValue);
  CUtensorMap map;
  int err = encode(&map, out, m, n, 0);
  if (err) return err;
  ep_tma_reduce<<<grid_for(ep_tma_reduce, (m / TILE_M) * (n / TILE_N) * splits), THREADS, 0, stream>>>(map, a, b, m, n, splits,
                                                                                         round_fp16);
  return static_cast<int>(cudaGetLastError());
}

const char* ep_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

}  // extern "C"
