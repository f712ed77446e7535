/* The kernels halconform launches on devices that load
 * HAL_MODULE_FORMAT_CPU_SHARED_OBJECT, written against hal/cpu_kernel.h the
 * way a user writes one. Each exports its signature. Blocks run concurrently,
 * so a kernel writes only what its own block owns. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, sched_yield */
#include <sched.h>
#include <stdint.h>
#include <time.h>

#include "hal/cpu_kernel.h"

/* Every covered element gets its global (x, y, z) and a count of its writes,
 * so the suite sees each element written exactly once, by the right block. */
HAL_CPU_KERNEL_SIGNATURE(write_index, "ptr,u32,u32,u32");
HAL_CPU_KERNEL void write_index(const hal_cpu_block_context_t* ctx, uint32_t* out, uint32_t nx,
                                uint32_t ny, uint32_t nz) {
  for (uint32_t tz = 0; tz < ctx->block[2]; ++tz) {
    for (uint32_t ty = 0; ty < ctx->block[1]; ++ty) {
      for (uint32_t tx = 0; tx < ctx->block[0]; ++tx) {
        const uint64_t gx = (uint64_t)ctx->block_id[0] * ctx->block[0] + tx;
        const uint64_t gy = (uint64_t)ctx->block_id[1] * ctx->block[1] + ty;
        const uint64_t gz = (uint64_t)ctx->block_id[2] * ctx->block[2] + tz;
        if (gx >= nx || gy >= ny || gz >= nz) continue;
        uint32_t* slot = out + 4 * ((gz * ny + gy) * nx + gx);
        slot[0] = (uint32_t)gx;
        slot[1] = (uint32_t)gy;
        slot[2] = (uint32_t)gz;
        slot[3] += 1;
      }
    }
  }
}

/* x[i] = x[i] * a + b (mod 2^32): exact, so a long chain is checkable. */
HAL_CPU_KERNEL_SIGNATURE(affine_u32, "ptr,u32,u32,u32");
HAL_CPU_KERNEL void affine_u32(const hal_cpu_block_context_t* ctx, uint32_t* x, uint32_t n,
                               uint32_t a, uint32_t b) {
  const uint64_t first = (uint64_t)ctx->block_id[0] * ctx->block[0];
  for (uint32_t t = 0; t < ctx->block[0]; ++t) {
    if (first + t < n) x[first + t] = x[first + t] * a + b;
  }
}

/* One argument of every type; each lands in out[] as its bit pattern. */
HAL_CPU_KERNEL_SIGNATURE(echo_mixed, "ptr,i32,u32,i64,u64,f32,f64,ptr");
HAL_CPU_KERNEL void echo_mixed(const hal_cpu_block_context_t* ctx, uint64_t* out, int32_t a,
                               uint32_t b, int64_t c, uint64_t d, float e, double f,
                               const void* g) {
  union {
    float f32;
    uint32_t u32;
  } fe;
  union {
    double f64;
    uint64_t u64;
  } fd;
  if (ctx->block_id[0] != 0) return;
  fe.f32 = e;
  fd.f64 = f;
  out[0] = (uint64_t)(int64_t)a;
  out[1] = b;
  out[2] = (uint64_t)c;
  out[3] = d;
  out[4] = fe.u32;
  out[5] = fd.u64;
  out[6] = (uint64_t)(uintptr_t)g;
}

/* The most arguments a kernel may take (HAL_MAX_KERNEL_ARGS = 64): a pointer
 * and 63 u64 values, each echoed into out[]. */
#define ARGS8(p)                                                                            \
  uint64_t p##0, uint64_t p##1, uint64_t p##2, uint64_t p##3, uint64_t p##4, uint64_t p##5, \
      uint64_t p##6, uint64_t p##7
#define STORE8(p, base) \
  out[base + 0] = p##0; \
  out[base + 1] = p##1; \
  out[base + 2] = p##2; \
  out[base + 3] = p##3; \
  out[base + 4] = p##4; \
  out[base + 5] = p##5; \
  out[base + 6] = p##6; \
  out[base + 7] = p##7
HAL_CPU_KERNEL_SIGNATURE(echo_64,
                         "ptr,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,"
                         "u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,"
                         "u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,u64,"
                         "u64,u64,u64,u64,u64,u64,u64,u64,u64,u64");
HAL_CPU_KERNEL void echo_64(const hal_cpu_block_context_t* ctx, uint64_t* out, ARGS8(a), ARGS8(b),
                            ARGS8(c), ARGS8(d), ARGS8(e), ARGS8(f), ARGS8(g), uint64_t h0,
                            uint64_t h1, uint64_t h2, uint64_t h3, uint64_t h4, uint64_t h5,
                            uint64_t h6) {
  if (ctx->block_id[0] != 0) return;
  STORE8(a, 0);
  STORE8(b, 8);
  STORE8(c, 16);
  STORE8(d, 24);
  STORE8(e, 32);
  STORE8(f, 40);
  STORE8(g, 48);
  out[56] = h0;
  out[57] = h1;
  out[58] = h2;
  out[59] = h3;
  out[60] = h4;
  out[61] = h5;
  out[62] = h6;
}

/* Each block sums its slice of |in| through its dynamic group-shared memory;
 * writes -1 when the shared memory is missing, too small or misaligned. */
HAL_CPU_KERNEL_SIGNATURE(block_sum, "ptr,ptr,u32");
HAL_CPU_KERNEL void block_sum(const hal_cpu_block_context_t* ctx, const uint32_t* in, uint32_t* out,
                              uint32_t n) {
  uint32_t* shared = (uint32_t*)ctx->shared_memory;
  const uint32_t threads = ctx->block[0];
  const uint64_t first = (uint64_t)ctx->block_id[0] * threads;
  uint32_t sum = 0;
  if (shared == 0 || ((uintptr_t)shared & 63u) != 0 ||
      ctx->shared_memory_bytes < threads * sizeof(uint32_t)) {
    out[ctx->block_id[0]] = 0xffffffffu;
    return;
  }
  for (uint32_t t = 0; t < threads; ++t) shared[t] = first + t < n ? in[first + t] : 0;
  for (uint32_t t = 0; t < threads; ++t) sum += shared[t];
  out[ctx->block_id[0]] = sum;
}

HAL_CPU_KERNEL_SIGNATURE(empty, "");
HAL_CPU_KERNEL void empty(const hal_cpu_block_context_t* ctx) {
  (void)ctx;
}

/* Every word of the block's dynamic shared memory (|words| of them) is
 * written with a value of this block, then read back through another thread's
 * share of the words; out[block] counts the words that did not hold their
 * value; out[2 * block] counts the words that did not hold their value and
 * out[2 * block + 1] the threads that ran. The same kernel as core_kernels.hal's. */
HAL_CPU_KERNEL_SIGNATURE(shared_fill, "ptr,u32");
HAL_CPU_KERNEL void shared_fill(const hal_cpu_block_context_t* ctx, uint32_t* out, uint32_t words) {
  uint32_t* memory = (uint32_t*)ctx->shared_memory;
  const uint32_t block = ctx->block_id[0];
  const uint32_t threads = ctx->block[0];
  uint32_t wrong = 0;
  if (words != 0 && (memory == 0 || ctx->shared_memory_bytes < (uint64_t)words * 4u)) {
    out[2 * block] = 0xffffffffu;
    __atomic_add_fetch(&out[2 * block + 1], threads, __ATOMIC_SEQ_CST);
    return;
  }
  for (uint32_t t = 0; t < threads; ++t) {
    for (uint32_t w = t; w < words; w += threads) memory[w] = w * 2654435761u + block;
  }
  for (uint32_t t = 0; t < threads; ++t) {
    for (uint32_t w = (t + 1) % threads; w < words; w += threads) {
      if (memory[w] != w * 2654435761u + block) ++wrong;
    }
  }
  if (wrong != 0) __atomic_add_fetch(&out[2 * block], wrong, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&out[2 * block + 1], threads, __ATOMIC_SEQ_CST);
}

/* Measures how many blocks run at once. state[0]: blocks running now;
 * state[1]: the most seen at once; state[2]: the number the suite hopes to
 * see. Each block waits until the high-water mark reaches the target, at
 * most |spins| polls and at most 2 s (a poll yields the thread here), so the
 * launch is bounded whatever the device does. The same contract as
 * core_kernels.hal's. */
HAL_CPU_KERNEL_SIGNATURE(concurrency_probe, "ptr,u32");
HAL_CPU_KERNEL void concurrency_probe(const hal_cpu_block_context_t* ctx, uint32_t* state,
                                      uint32_t spins) {
  struct timespec now;
  (void)ctx;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t deadline =
      (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec + 2000000000ull;
  const uint32_t running = __atomic_add_fetch(&state[0], 1u, __ATOMIC_SEQ_CST);
  uint32_t high = __atomic_load_n(&state[1], __ATOMIC_SEQ_CST);
  while (running > high && !__atomic_compare_exchange_n(&state[1], &high, running, 0,
                                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  for (uint32_t i = 0; i < spins; ++i) {
    if (__atomic_load_n(&state[1], __ATOMIC_SEQ_CST) >= state[2]) break;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec >= deadline) break;
    sched_yield();
  }
  __atomic_sub_fetch(&state[0], 1u, __ATOMIC_SEQ_CST);
}
