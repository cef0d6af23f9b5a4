// tcgen05 / tensor memory in the smallest kernel that uses it: one warp allocates 32 TMEM columns,
// gives up its allocation permit, frees the columns and writes the TMEM address it got.
// sm_100a accepts it (SASS: UTCATOMSWS); sm_120a has no tensor memory and ptxas refuses it.
#include <cstdint>

extern "C" __global__ void tmem_roundtrip(uint32_t* tmem_address_out) {
  __shared__ uint32_t tmem_base;
  const bool first_warp = threadIdx.x < 32;
  if (first_warp) {
    const uint32_t slot = static_cast<uint32_t>(__cvta_generic_to_shared(&tmem_base));
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;" ::"r"(slot));
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;");
  }
  __syncthreads();
  const uint32_t base = tmem_base;
  if (first_warp) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" ::"r"(base));
  }
  if (threadIdx.x == 0) tmem_address_out[0] = base;
}
