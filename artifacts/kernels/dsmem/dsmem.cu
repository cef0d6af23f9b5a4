// Distributed shared memory (DSMEM) in a thread block cluster: correctness, latency, bandwidth.
//
// One kernel, launched with a 1-D cluster of `size` CTAs (cudaLaunchAttributeClusterDimension).
// Each CTA asks for more than half of an SM's shared memory, so no two CTAs share an SM and every
// peer access crosses the SM-to-SM network. The peer of a CTA is rank (rank + 1) % size; with a
// cluster of one it is the CTA itself (through its own shared::cluster window).
//
// Modes:
//  CHECK      every CTA spins (rank x delay cycles), writes words x[...] into its shared memory, passes the cluster
//             barrier (arrive.release / wait.acquire), then copies its peer's words to `out`.
//             `skip_barrier` omits that barrier: the realistic mistake the negative control makes.
//  LAT_LOCAL  thread 0 of rank 0 follows a pointer chain (next = s[next]) in its own shared memory
//  LAT_PEER   ... in its peer's, through ld.shared::cluster; clock64 around `iters` dependent loads.
//  BW_*       every thread streams 16-byte loads (or stores) over the local or the peer window,
//             clock64 around the loop; bytes per clock per SM from the cycles of each CTA.
// Every mode begins with a cluster barrier (all CTAs of the cluster are running before anyone
// touches a peer) and ends with one (no CTA exits while a peer still reads its memory).
#include <cstdint>
#include <cuda_runtime.h>

enum Mode { CHECK = 0, LAT_LOCAL = 1, LAT_PEER = 2, BW_LOCAL_LOAD = 3, BW_PEER_LOAD = 4, BW_LOCAL_STORE = 5,
            BW_PEER_STORE = 6 };

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The shared::cluster address of the same offset in CTA `rank`.
__device__ __forceinline__ uint32_t map_to(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ uint32_t ld_cluster(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_local(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld4_cluster(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld4_local(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st4_cluster(uint32_t addr, uint4 v) {
  asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};\n" :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w) : "memory");
}
__device__ __forceinline__ void st4_local(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

extern "C" __global__ void dsmem_kernel(const uint32_t* x, uint32_t* out, long long* cycles, int words, int mode,
                                        int iters, int chase_stride, long long delay, int skip_barrier) {
  extern __shared__ __align__(16) uint32_t s[];
  const uint32_t rank = cluster_rank(), size = cluster_size();
  const uint32_t peer = (rank + 1) % size;
  const uint32_t local = (uint32_t)__cvta_generic_to_shared(s);
  const uint32_t remote = map_to(local, peer);
  const long long cta = blockIdx.x;
  cluster_sync();

  if (mode == CHECK) {
    long long start = clock64();
    while (clock64() - start < delay * rank) {}  // rank r spins r x delay before writing
    for (int i = threadIdx.x; i < words; i += blockDim.x) s[i] = x[cta * words + i];
    if (!skip_barrier) cluster_sync();
    for (int i = threadIdx.x; i < words; i += blockDim.x) out[cta * words + i] = ld_cluster(remote + 4u * i);
    cluster_sync();
    return;
  }
  if (mode == LAT_LOCAL || mode == LAT_PEER) {
    for (int i = threadIdx.x; i < words; i += blockDim.x) s[i] = (uint32_t)((i + chase_stride) % words);
    cluster_sync();
    if (rank == 0 && threadIdx.x == 0) {
      uint32_t next = 0;
      long long t0 = clock64(), t1;
      if (mode == LAT_PEER) {
        for (int it = 0; it < iters; ++it) next = ld_cluster(remote + 4u * next);
      } else {
        for (int it = 0; it < iters; ++it) next = ld_local(local + 4u * next);
      }
      t1 = clock64();
      out[cta] = next;
      cycles[cta] = t1 - t0;
    }
    cluster_sync();
    return;
  }
  // bandwidth: 16-byte accesses, consecutive threads on consecutive 16-byte chunks (conflict-free)
  for (int i = threadIdx.x; i < words; i += blockDim.x) s[i] = (uint32_t)i;
  cluster_sync();
  const bool peer_window = mode == BW_PEER_LOAD || mode == BW_PEER_STORE;
  const bool store = mode == BW_LOCAL_STORE || mode == BW_PEER_STORE;
  const uint32_t base = peer_window ? remote : local;
  const uint32_t chunks = (uint32_t)words / 4u;
  uint4 acc = make_uint4(threadIdx.x, rank, 0u, 0u);
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const uint32_t chunk = (threadIdx.x + (uint32_t)(it * 8 + u) * blockDim.x) % chunks;
      const uint32_t addr = base + 16u * chunk;
      if (store) {
        if (peer_window) st4_cluster(addr, acc); else st4_local(addr, acc);
        acc.z += 1u;
      } else {
        uint4 v = peer_window ? ld4_cluster(addr) : ld4_local(addr);
        acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
      }
    }
  }
  __syncthreads();
  long long t1 = clock64();
  cluster_sync();
  if (threadIdx.x == 0) cycles[cta] = t1 - t0;
  out[cta * blockDim.x + threadIdx.x] = acc.x ^ acc.y ^ acc.z ^ acc.w;  // keeps the loop alive
}

// Sets the attributes every launch needs: the dynamic shared memory size and, for clusters above the
// portable 8, cudaFuncAttributeNonPortableClusterSizeAllowed.
extern "C" int dsmem_prepare(int smem_bytes) {
  cudaError_t err = cudaFuncSetAttribute((const void*)dsmem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem_bytes);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute((const void*)dsmem_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  return (int)err;
}

static cudaLaunchConfig_t config_for(int grid, int block, int smem_bytes, cudaLaunchAttribute* attribute, int size,
                                     cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  attribute->id = cudaLaunchAttributeClusterDimension;
  attribute->val.clusterDim.x = size;
  attribute->val.clusterDim.y = 1;
  attribute->val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}

// How many clusters of `size` CTAs can be resident at once (0 when the size cannot be scheduled).
extern "C" int dsmem_max_active_clusters(int size, int block, int smem_bytes, int* clusters) {
  cudaLaunchAttribute attribute;
  cudaLaunchConfig_t config = config_for(size, block, smem_bytes, &attribute, size, 0);
  return (int)cudaOccupancyMaxActiveClusters(clusters, (const void*)dsmem_kernel, &config);
}

extern "C" int dsmem_launch(const uint32_t* x, uint32_t* out, long long* cycles, int words, int mode, int iters,
                            int chase_stride, long long delay, int skip_barrier, int grid, int block, int size,
                            int smem_bytes, cudaStream_t stream) {
  cudaLaunchAttribute attribute;
  cudaLaunchConfig_t config = config_for(grid, block, smem_bytes, &attribute, size, stream);
  void* args[] = {&x, &out, &cycles, &words, &mode, &iters, &chase_stride, &delay, &skip_barrier};
  cudaError_t err = cudaLaunchKernelExC(&config, (const void*)dsmem_kernel, args);
  return (int)(err == cudaSuccess ? cudaGetLastError() : err);
}

extern "C" const char* dsmem_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
