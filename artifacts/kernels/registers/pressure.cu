// A kernel whose register demand is set by one constant, for building at several register caps.
//
// pressure: each thread keeps ACC accumulators and ACC coefficients live across a loop of `iters`
// steps (2 * ACC values, about 2 * ACC registers when nothing spills). Step k loads one value
// v = x[k * n + t] (coalesced) and updates every accumulator, acc[i] = fma(acc[i], v, coef[i]);
// the ACC updates are independent, so a warp has ACC-way instruction-level parallelism and needs
// few resident warps to keep the FMA pipe busy. At the end each thread writes the sum of its
// accumulators to y[t]. Built with -maxrregcount below what it needs, ptxas keeps the rest in
// local memory (spill stores STL, loads LDL) and reloads them every step.
// `round_fp16` (the probe's negative control) rounds the sum through fp16 before the store, as an
// epilogue that stores a half-precision result by mistake would.
//
// Host side: extern "C" functions take the caller's stream and return a cudaError_t; the kernel's
// register count, local memory and resident blocks per SM come from the runtime's attributes and
// occupancy calculator.

#include <cuda_fp16.h>
#include <cuda_runtime.h>

constexpr int ACC = 64;
constexpr int THREADS = 256;

// Without BOUNDS the only cap is -maxrregcount; -DBOUNDS=B builds __launch_bounds__(THREADS, B) instead
// (at least B resident blocks: ptxas then caps registers at what B blocks leave per thread), and
// -DBOUNDS=B with -maxrregcount shows which of the two wins.
#ifdef BOUNDS
#define LAUNCH_BOUNDS __launch_bounds__(THREADS, BOUNDS)
#else
#define LAUNCH_BOUNDS
#endif

__global__ void LAUNCH_BOUNDS
    pressure(const float* __restrict__ x, const float* __restrict__ coef, float* __restrict__ y, int n, int iters,
             int round_fp16) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  float acc[ACC], c[ACC];
#pragma unroll
  for (int i = 0; i < ACC; ++i) {
    c[i] = __ldg(coef + i);
    acc[i] = c[i];
  }
  for (int k = 0; k < iters; ++k) {
    const float v = __ldg(x + static_cast<size_t>(k) * n + t);
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = fmaf(acc[i], v, c[i]);
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < ACC; ++i) sum += acc[i];
  y[t] = round_fp16 ? __half2float(__float2half_rn(sum)) : sum;
}

extern "C" {

int pressure_launch(const float* x, const float* coef, float* y, int n, int iters, int round_fp16,
                    cudaStream_t stream) {
  const int blocks = (n + THREADS - 1) / THREADS;
  pressure<<<blocks, THREADS, 0, stream>>>(x, coef, y, n, iters, round_fp16);
  return static_cast<int>(cudaGetLastError());
}

// registers per thread, local (spill) bytes per thread, resident blocks per SM at THREADS threads
int pressure_attributes(int* registers, int* local_bytes, int* blocks_per_sm) {
  cudaFuncAttributes attributes;
  cudaError_t err = cudaFuncGetAttributes(&attributes, pressure);
  if (err != cudaSuccess) return static_cast<int>(err);
  *registers = attributes.numRegs;
  *local_bytes = static_cast<int>(attributes.localSizeBytes);
  return static_cast<int>(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, pressure, THREADS, 0));
}

const char* pressure_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

}  // extern "C"
