/* The vector_add sample's kernel for the cpu plugin: c[i] = a[i] + b[i].
 * Called once per block; the block's threads are the inner loop. */
#include "hal/cpu_kernel.h"

HAL_CPU_KERNEL_SIGNATURE(vector_add, "ptr,ptr,ptr,u32");

HAL_CPU_KERNEL void vector_add(const hal_cpu_block_context_t* ctx, const float* a, const float* b,
                               float* c, uint32_t n) {
  const uint32_t first = ctx->block_id[0] * ctx->block[0];
  uint32_t end = first + ctx->block[0];
  if (end > n) end = n;
  for (uint32_t i = first; i < end; ++i) c[i] = a[i] + b[i];
}
