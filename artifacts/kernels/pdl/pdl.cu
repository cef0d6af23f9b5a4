// Programmatic dependent launch (PDL): a chain of producer/consumer kernel pairs.
//
// Pair k: the producer reads the previous consumer's output and writes buf = out + 1; the
// consumer reads buf and writes out = buf + bias (bias is an input no kernel writes, so the
// consumer may load it before it waits). After K pairs, out = x + K exactly (fp32 adds in the
// same order as the reference). A consumer that reads buf before its producer wrote it sees the
// previous round's value and the final out is short by one at that element.
//
// Each kernel:   [early trigger: griddepcontrol.launch_dependents]
//                independent prologue (the consumer loads bias)
//                griddepcontrol.wait          (a no-op when not launched with the PDL attribute)
//                read what the previous kernel wrote, write the result.
// The host launchers take the stream, so the launches can be captured into a CUDA graph; `pdl`
// sets cudaLaunchAttributeProgrammaticStreamSerialization on the launch.
#include <cstdint>
#include <cuda_runtime.h>

__device__ __forceinline__ void grid_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

__device__ __forceinline__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}

extern "C" __global__ void pdl_producer(float* buf, const float* out, int n, int early, long long delay) {
  if (early) launch_dependents();
  spin(delay);  // 0 in the measurement; the negative control widens the race window with it
  grid_wait();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) buf[i] = out[i] + 1.0f;
}

extern "C" __global__ void pdl_consumer(float* out, const float* buf, const float* bias, int n, int early, int wait) {
  if (early) launch_dependents();
  const int stride = gridDim.x * blockDim.x;
  const int first = blockIdx.x * blockDim.x + threadIdx.x;
  float b[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) b[j] = first + j * stride < n ? bias[first + j * stride] : 0.0f;  // independent of buf
  if (wait) grid_wait();
  int j = 0;
  for (int i = first; i < n; i += stride, ++j) out[i] = buf[i] + (j < 4 ? b[j] : bias[i]);
}

static cudaError_t launch(const void* kernel, int grid, int block, int pdl, void** args, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelExC(&config, kernel, args);
}

// Loads both kernels into the context before any capture (lazy loading inside a capture is avoided).
extern "C" int pdl_prepare() {
  cudaFuncAttributes attributes;
  cudaError_t err = cudaFuncGetAttributes(&attributes, (const void*)pdl_producer);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attributes, (const void*)pdl_consumer);
  return (int)err;
}

extern "C" int pdl_launch_producer(float* buf, const float* out, int n, int early, long long delay, int grid, int block,
                                   int pdl, cudaStream_t stream) {
  void* args[] = {&buf, &out, &n, &early, &delay};
  return (int)launch((const void*)pdl_producer, grid, block, pdl, args, stream);
}

extern "C" int pdl_launch_consumer(float* out, const float* buf, const float* bias, int n, int early, int wait, int grid,
                                   int block, int pdl, cudaStream_t stream) {
  void* args[] = {&out, &buf, &bias, &n, &early, &wait};
  return (int)launch((const void*)pdl_consumer, grid, block, pdl, args, stream);
}

extern "C" const char* pdl_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
