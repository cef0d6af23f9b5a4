// The block-scaled MMA of consumer Blackwell (sm_120a): mma.sync, issued by a whole warp from
// registers, with the scale factors passed in registers too. One m16n8k32 MXFP8 MMA (E4M3 operands,
// UE8M0 scales, one per 32 K-values) and one m16n8k64 NVFP4 MMA (E2M1 operands, UE4M3 scales, one per
// 16 K-values). Each lane loads its fragment registers (A: 4 x 32 bit, B: 2 x 32 bit) and one 32-bit
// word of scale factors for A and for B; the selectors {byte, thread} are 0 (lane 0's first byte).
// sm_120a accepts both (SASS: QMMA.SF, OMMA.SF); ptxas refuses them for sm_100a and for plain sm_120.
#include <cstdint>

struct Fragments {
  uint32_t a[4], b[2], scale_a, scale_b;
};

__device__ inline Fragments load_fragments(const uint32_t* a, const uint32_t* b, const uint32_t* scales) {
  const int lane = threadIdx.x % 32;
  Fragments f;
  for (int i = 0; i < 4; ++i) f.a[i] = a[lane * 4 + i];
  for (int i = 0; i < 2; ++i) f.b[i] = b[lane * 2 + i];
  f.scale_a = scales[lane];
  f.scale_b = scales[32 + lane];
  return f;
}

__device__ inline void store_accumulator(float* d, const float (&acc)[4]) {
  const int lane = threadIdx.x % 32;
  for (int i = 0; i < 4; ++i) d[lane * 4 + i] = acc[i];
}

extern "C" __global__ void mxfp8_mma(const uint32_t* a, const uint32_t* b, const uint32_t* scales, float* d) {
  const Fragments f = load_fragments(a, b, scales);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {0, 0}, %11, {0, 0};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(f.a[0]), "r"(f.a[1]), "r"(f.a[2]), "r"(f.a[3]), "r"(f.b[0]), "r"(f.b[1]), "r"(f.scale_a),
        "r"(f.scale_b));
  store_accumulator(d, acc);
}

extern "C" __global__ void nvfp4_mma(const uint32_t* a, const uint32_t* b, const uint32_t* scales, float* d) {
  const Fragments f = load_fragments(a, b, scales);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  asm volatile(
      "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {0, 0}, %11, {0, 0};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(f.a[0]), "r"(f.a[1]), "r"(f.a[2]), "r"(f.a[3]), "r"(f.b[0]), "r"(f.b[1]), "r"(f.scale_a),
        "r"(f.scale_b));
  store_accumulator(d, acc);
}
