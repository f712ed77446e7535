/* Kernels for the cpu plugin tests, written against hal/cpu_kernel.h. Each
 * kernel loops over its block's threads itself; blocks run concurrently, so
 * a kernel only writes what its own block owns. */
#include <stdint.h>

#include "hal/cpu_kernel.h"

/* The build hides symbols by default; kernels must be exported. */
#define KERNEL HAL_CPU_KERNEL

static uint32_t threads_per_block(const hal_cpu_block_context_t* ctx) {
  return ctx->block[0] * ctx->block[1] * ctx->block[2];
}

/* c[i] = a[i] + b[i] over a 1-D grid. */
HAL_CPU_KERNEL_SIGNATURE(vector_add, "ptr,ptr,ptr,u32");
KERNEL void vector_add(const hal_cpu_block_context_t* ctx, const float* a, const float* b, float* c,
                       uint32_t n) {
  const uint64_t first = (uint64_t)ctx->block_id[0] * ctx->block[0];
  for (uint32_t t = 0; t < ctx->block[0]; ++t) {
    const uint64_t i = first + t;
    if (i < n) c[i] = a[i] + b[i];
  }
}

/* x[i] = x[i] * a + b (mod 2^32): exact, so a long chain can be checked. */
HAL_CPU_KERNEL_SIGNATURE(affine_u32, "ptr,u32,u32,u32");
KERNEL void affine_u32(const hal_cpu_block_context_t* ctx, uint32_t* x, uint32_t n, uint32_t a,
                       uint32_t b) {
  const uint64_t first = (uint64_t)ctx->block_id[0] * ctx->block[0];
  for (uint32_t t = 0; t < ctx->block[0]; ++t) {
    const uint64_t i = first + t;
    if (i < n) x[i] = x[i] * a + b;
  }
}

/* Writes each covered element's global (x, y, z) index and counts its
 * writes, so a test sees every element written exactly once. */
HAL_CPU_KERNEL_SIGNATURE(write_index, "ptr,u32,u32,u32");
KERNEL void write_index(const hal_cpu_block_context_t* ctx, uint32_t* out, uint32_t nx, uint32_t ny,
                        uint32_t nz) {
  for (uint32_t tz = 0; tz < ctx->block[2]; ++tz) {
    for (uint32_t ty = 0; ty < ctx->block[1]; ++ty) {
      for (uint32_t tx = 0; tx < ctx->block[0]; ++tx) {
        const uint32_t gx = ctx->block_id[0] * ctx->block[0] + tx;
        const uint32_t gy = ctx->block_id[1] * ctx->block[1] + ty;
        const uint32_t gz = ctx->block_id[2] * ctx->block[2] + tz;
        if (gx >= nx || gy >= ny || gz >= nz) continue;
        uint32_t* slot = out + 4 * (((uint64_t)gz * ny + gy) * nx + gx);
        slot[0] = gx;
        slot[1] = gy;
        slot[2] = gz;
        slot[3] += 1;
      }
    }
  }
}

/* One block sums its part of |in| through group-shared memory: a load
 * phase, a "barrier" (the end of the loop), a reduction by thread 0. Writes
 * -1 when the shared memory is missing or misaligned. */
HAL_CPU_KERNEL_SIGNATURE(block_sum, "ptr,ptr,u32");
KERNEL void block_sum(const hal_cpu_block_context_t* ctx, const float* in, float* out, uint32_t n) {
  float* shared = (float*)ctx->shared_memory;
  const uint32_t threads = threads_per_block(ctx);
  if (shared == 0 || ((uintptr_t)shared & 63u) != 0 ||
      ctx->shared_memory_bytes < threads * sizeof(float)) {
    out[ctx->block_id[0]] = -1.0f;
    return;
  }
  const uint64_t first = (uint64_t)ctx->block_id[0] * threads;
  for (uint32_t t = 0; t < threads; ++t) shared[t] = first + t < n ? in[first + t] : 0.0f;
  float sum = 0.0f;
  for (uint32_t t = 0; t < threads; ++t) sum += shared[t];
  out[ctx->block_id[0]] = sum;
}

/* Declares 60 KiB of static group-shared memory, the way a dialect kernel
 * exports it: a launch's dynamic share must fit in what is left. */
HAL_CPU_KERNEL_SIGNATURE(static_shared, "");
HAL_CPU_KERNEL_EXTERN __attribute__((visibility("default")))
const uint32_t hal_kernel_static_shared_static_shared = 60u * 1024u;
KERNEL void static_shared(const hal_cpu_block_context_t* ctx) {
  (void)ctx;
}

HAL_CPU_KERNEL_SIGNATURE(empty, "");
KERNEL void empty(const hal_cpu_block_context_t* ctx) {
  (void)ctx;
}

/* 23 arguments of every type; block (0,0,0) echoes them into |out| as
 * 64-bit values (integers sign- or zero-extended, floats widened). No
 * exported signature: callers must declare it. */
KERNEL void many_args(const hal_cpu_block_context_t* ctx, int64_t* out, int32_t a0, uint32_t a1,
                      int64_t a2, uint64_t a3, float a4, double a5, int32_t a6, uint32_t a7,
                      int64_t a8, uint64_t a9, float a10, double a11, int32_t a12, uint32_t a13,
                      int64_t a14, uint64_t a15, float a16, double a17, float a18, double a19,
                      const void* a20, int32_t a21) {
  if (ctx->block_id[0] != 0 || ctx->block_id[1] != 0 || ctx->block_id[2] != 0) return;
  double* as_double = (double*)out;
  out[0] = a0;
  out[1] = a1;
  out[2] = a2;
  out[3] = (int64_t)a3;
  as_double[4] = a4;
  as_double[5] = a5;
  out[6] = a6;
  out[7] = a7;
  out[8] = a8;
  out[9] = (int64_t)a9;
  as_double[10] = a10;
  as_double[11] = a11;
  out[12] = a12;
  out[13] = a13;
  out[14] = a14;
  out[15] = (int64_t)a15;
  as_double[16] = a16;
  as_double[17] = a17;
  as_double[18] = a18;
  as_double[19] = a19;
  out[20] = (int64_t)(uintptr_t)a20;
  out[21] = a21;
  out[22] = (int64_t)ctx->struct_size;
}

/* A kernel whose exported signature is malformed. */
HAL_CPU_KERNEL_SIGNATURE(bad_signature, "ptr,float");
KERNEL void bad_signature(const hal_cpu_block_context_t* ctx, void* p, float f) {
  (void)ctx;
  (void)p;
  (void)f;
}

/* Signatures the grammar (SPEC.md §8) refuses although a lenient reader
   would take them: a blank after the comma, a trailing comma, an upper-case
   token. */
HAL_CPU_KERNEL_SIGNATURE(blank_signature, "ptr, i32");
KERNEL void blank_signature(const hal_cpu_block_context_t* ctx, void* p, int32_t n) {
  (void)ctx;
  (void)p;
  (void)n;
}
HAL_CPU_KERNEL_SIGNATURE(trailing_comma_signature, "ptr,");
KERNEL void trailing_comma_signature(const hal_cpu_block_context_t* ctx, void* p) {
  (void)ctx;
  (void)p;
}
HAL_CPU_KERNEL_SIGNATURE(upper_case_signature, "PTR");
KERNEL void upper_case_signature(const hal_cpu_block_context_t* ctx, void* p) {
  (void)ctx;
  (void)p;
}
