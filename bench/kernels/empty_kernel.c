/* Kernels of the launch-latency benchmark, a module of format
 * HAL_MODULE_FORMAT_CPU_SHARED_OBJECT:
 *   empty  takes no arguments and does nothing (the one that is timed);
 *   count  adds 1 to *counter (checks, after the timing, that launches run). */
#include <stdint.h>

#include "hal/cpu_kernel.h"

HAL_CPU_KERNEL void empty(const hal_cpu_block_context_t* ctx);
HAL_CPU_KERNEL void count(const hal_cpu_block_context_t* ctx, uint64_t* counter);

HAL_CPU_KERNEL void empty(const hal_cpu_block_context_t* ctx) {
  (void)ctx;
}
HAL_CPU_KERNEL_SIGNATURE(empty, "");

/* Launched with grid 1x1x1, block 1x1x1: one call per launch, no race. */
HAL_CPU_KERNEL void count(const hal_cpu_block_context_t* ctx, uint64_t* counter) {
  (void)ctx;
  ++*counter;
}
HAL_CPU_KERNEL_SIGNATURE(count, "ptr");
