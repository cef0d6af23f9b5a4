// The smallest kernel that proves it ran: one thread adds 1 to a counter. Launched 1 to 1000 times
// per measurement, it makes the launch path (host submission, the GPU front end, graph replay) the
// whole cost; the counter lets the host check that every launch, eager or replayed, executed.
//
// Host side: tick_launch launches once on the caller's stream (one ctypes call per launch from
// Python); tick_launch_many launches `count` times in a C++ loop (the launch rate without Python in
// between). Both return a cudaError_t.

#include <cstdint>
#include <cuda_runtime.h>

__global__ void tick(uint32_t* counter) { atomicAdd(counter, 1u); }

extern "C" int tick_launch(uint32_t* counter, cudaStream_t stream) {
  tick<<<1, 1, 0, stream>>>(counter);
  return (int)cudaGetLastError();
}

extern "C" int tick_launch_many(uint32_t* counter, int count, cudaStream_t stream) {
  for (int i = 0; i < count; ++i) tick<<<1, 1, 0, stream>>>(counter);
  return (int)cudaGetLastError();
}

// Loads the kernel into the context before any capture (no lazy loading inside a graph capture).
extern "C" int tick_prepare() {
  cudaFuncAttributes attributes;
  return (int)cudaFuncGetAttributes(&attributes, (const void*)tick);
}

extern "C" const char* tick_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
