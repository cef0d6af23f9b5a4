// The smallest kernel that proves it ran: one thread adds 1 to a counter. Launched 1 to 1000 times
// per measurement, it makes the launch path (host submission, the GPU front end, graph replay) the
// whole cost; the counter lets the host check that every launch, eager or replayed, executed.

#include <cstdint>

extern "C" __global__ void tick(uint32_t* counter) { atomicAdd(counter, 1u); }
