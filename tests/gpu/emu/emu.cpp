/* The emulation's per-thread and shared state (cuda_emu_core.h). */
#include "cuda_emu_core.h"
thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
namespace emu {
thread_local Block *cur;
thread_local int tid;
std::mutex atomic_mu;
Pool &pool = *new Pool;
} // namespace emu
