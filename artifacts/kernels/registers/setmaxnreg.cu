// Compile-only: what ptxas does with setmaxnreg in three shapes of a warp-specialized kernel
// (384 threads: warpgroup 0 a producer that gives registers back, warpgroups 1-2 consumers that
// take them). The probe builds this file three times:
//   -DSHAPE=0  __launch_bounds__(384, 1), the roles as one if/else        (the documented shape)
//   -DSHAPE=1  the same roles, no __launch_bounds__ and no -maxrregcount  (no register count at entry)
//   -DSHAPE=2  __launch_bounds__(384, 1), the roles as two separate ifs
// and records, for each, whether USETMAXREG is in the SASS and whether ptxas warned (C7508).

#ifndef SHAPE
#define SHAPE 0
#endif

#if SHAPE == 1
#define BOUNDS
#else
#define BOUNDS __launch_bounds__(384, 1)
#endif

__global__ void BOUNDS roles(float* out) {
  const int warpgroup = threadIdx.x / 128;
  const float v = out[threadIdx.x];
#if SHAPE == 2
  if (warpgroup == 0) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
  if (warpgroup != 0) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  out[threadIdx.x] = warpgroup == 0 ? v + 1.f : v * 2.f;
#else
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    out[threadIdx.x] = v + 1.f;
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    out[threadIdx.x] = v * 2.f;
  }
#endif
}
