/* The FMA throughput kernel of the performance profile: each block runs
 * |iterations| rounds of kAccumulators independent vector fused multiply-adds
 * (independent, so the FMA pipes stay full rather than waiting on latency),
 * then stores a sum so nothing is optimised away. The widest vector unit the
 * host has is chosen at run time; lanes_out[0] says how many lanes it used,
 * from which the suite counts 2 FLOPs per lane per FMA. */
#include <stdint.h>

#include "hal/cpu_kernel.h"

#define ACCUMULATORS 10

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static float fma_avx512(uint32_t iterations, float seed) {
  __m512 acc[ACCUMULATORS];
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int k = 0; k < ACCUMULATORS; ++k) acc[k] = _mm512_set1_ps(seed + (float)k);
  for (uint32_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < ACCUMULATORS; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  }
  for (int k = 1; k < ACCUMULATORS; ++k) acc[0] = _mm512_add_ps(acc[0], acc[k]);
  return _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(uint32_t iterations, float seed) {
  __m256 acc[ACCUMULATORS];
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int k = 0; k < ACCUMULATORS; ++k) acc[k] = _mm256_set1_ps(seed + (float)k);
  for (uint32_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < ACCUMULATORS; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  }
  float lanes[8];
  for (int k = 1; k < ACCUMULATORS; ++k) acc[0] = _mm256_add_ps(acc[0], acc[k]);
  _mm256_storeu_ps(lanes, acc[0]);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}
#endif

/* Four lanes of plain C the compiler may vectorise (SSE2, NEON). */
static float fma_generic(uint32_t iterations, float seed) {
  float acc[ACCUMULATORS][4];
  for (int k = 0; k < ACCUMULATORS; ++k) {
    for (int l = 0; l < 4; ++l) acc[k][l] = seed + (float)k;
  }
  for (uint32_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < ACCUMULATORS; ++k) {
      for (int l = 0; l < 4; ++l) acc[k][l] = acc[k][l] * 0.999999f + 1e-7f;
    }
  }
  float sum = 0;
  for (int k = 0; k < ACCUMULATORS; ++k) sum += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
  return sum;
}

HAL_CPU_KERNEL_SIGNATURE(fma_throughput, "ptr,ptr,u32");
HAL_CPU_KERNEL void fma_throughput(const hal_cpu_block_context_t* ctx, float* out,
                                   uint32_t* lanes_out, uint32_t iterations) {
  const float seed = (float)ctx->block_id[0];
  uint32_t lanes = 4;
  float sum;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) {
    lanes = 16;
    sum = fma_avx512(iterations, seed);
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    lanes = 8;
    sum = fma_avx2(iterations, seed);
  } else {
    sum = fma_generic(iterations, seed);
  }
#else
  sum = fma_generic(iterations, seed);
#endif
  out[ctx->block_id[0]] = sum;
  if (ctx->block_id[0] == 0) lanes_out[0] = lanes * ACCUMULATORS;
}
