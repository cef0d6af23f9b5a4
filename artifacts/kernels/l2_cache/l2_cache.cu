// Two kernels for measuring the L2 cache.
//
// l2_read: streams a working set of n_vec 16-byte vectors through the L2 and nothing else.
// Thread t reads the vectors at flat indices j = t + i * stride (i < per_thread, stride = all
// threads), taken modulo n_vec, so a working set smaller than the total read is read over and over
// (served by the L2 once it fits) and a larger one once (served by DRAM). Loads are ld.global.cg
// (cached in L2 only, not L1), eight independent ones in flight per thread. The 32-bit words read are
// summed with wrap-around into *sum: an order-independent checksum the host recomputes exactly.
// `short_groups` drops that many groups of eight loads at the end: 0 in real use, 1 for the probe's
// negative control (the last unrolled group lost to an off-by-one loop bound).
//
// l2_chase: one thread follows a pointer chain (next[p] is the next index) through `warm_steps`
// untimed loads, then `steps` more, reading the clock once per step. Each step's load needs the
// previous one's value (its address) and stores it to shared memory, and a warp issues in order, so
// the difference of consecutive clock readings is one load's latency plus a few cycles of loop
// (the same for every step). Clocks and the indices visited go to global memory at the end, so the
// host can take the differences and check that the chain was followed.
//
// Host side: extern "C" launchers take the caller's stream and return a cudaError_t.

#include <cstdint>
#include <cuda_runtime.h>

constexpr int READ_THREADS = 256;
constexpr int GROUP = 8;
constexpr int CHASE_MAX_STEPS = 4096;

__global__ void __launch_bounds__(READ_THREADS)
    l2_read(const uint4* __restrict__ buf, uint32_t n_vec, uint32_t per_thread, uint32_t* sum, int short_groups) {
  const uint32_t stride = gridDim.x * blockDim.x;
  const uint32_t step = stride % n_vec;
  uint32_t idx = (blockIdx.x * blockDim.x + threadIdx.x) % n_vec;
  uint32_t acc = 0;
  const uint32_t groups = per_thread / GROUP - short_groups;
  for (uint32_t g = 0; g < groups; ++g) {
    uint32_t at[GROUP];
#pragma unroll
    for (int u = 0; u < GROUP; ++u) {
      at[u] = idx;
      idx += step;
      if (idx >= n_vec) idx -= n_vec;
    }
    uint4 v[GROUP];
#pragma unroll
    for (int u = 0; u < GROUP; ++u) v[u] = __ldcg(buf + at[u]);
#pragma unroll
    for (int u = 0; u < GROUP; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, acc);
}

__global__ void l2_chase(const uint32_t* __restrict__ next, uint32_t start, int warm_steps, int steps,
                         uint32_t* clocks, uint32_t* visited) {
  __shared__ uint32_t clock_at[CHASE_MAX_STEPS];
  __shared__ uint32_t seen[CHASE_MAX_STEPS];
  uint32_t p = start;
  for (int i = 0; i < warm_steps; ++i) p = __ldcg(next + p);
  steps = steps < CHASE_MAX_STEPS ? steps : CHASE_MAX_STEPS;
  for (int i = 0; i < steps; ++i) {
    clock_at[i] = (uint32_t)clock64();
    p = __ldcg(next + p);
    seen[i] = p;
  }
  for (int i = 0; i < steps; ++i) {
    clocks[i] = clock_at[i];
    visited[i] = seen[i];
  }
}

extern "C" int l2_launch_read(const uint4* buf, uint32_t n_vec, uint32_t per_thread, uint32_t* sum, int short_groups,
                              int ctas, cudaStream_t stream) {
  l2_read<<<ctas, READ_THREADS, 0, stream>>>(buf, n_vec, per_thread, sum, short_groups);
  return (int)cudaGetLastError();
}

extern "C" int l2_launch_chase(const uint32_t* next, uint32_t start, int warm_steps, int steps, uint32_t* clocks,
                               uint32_t* visited, cudaStream_t stream) {
  l2_chase<<<1, 1, 0, stream>>>(next, start, warm_steps, steps, clocks, visited);
  return (int)cudaGetLastError();
}

extern "C" const char* l2_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

// Loads both kernels into the context before any timing (no lazy loading inside a measurement).
extern "C" int l2_prepare() {
  cudaFuncAttributes attributes;
  cudaError_t err = cudaFuncGetAttributes(&attributes, (const void*)l2_read);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attributes, (const void*)l2_chase);
  return (int)err;
}
