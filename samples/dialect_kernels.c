/* Write once, run on every device: four kernels in the HAL kernel dialect
 * (vector add, a shared-memory reduction, a tiled matmul, a row softmax),
 * compiled at run time by each device's plugin, with the results compared
 * across devices and with the host.
 *
 *   dialect_kernels            (every device that lists HAL_MODULE_FORMAT_HAL_DIALECT)
 *
 * Uses only hal.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal.h"

static const char kSource[] =
    "#define TILE 16\n"
    "kernel void vadd(global const float* a, global const float* b, global float* c, int n) {\n"
    "  int i = global_id(0);\n"
    "  if (i < n) c[i] = a[i] + b[i];\n"
    "}\n"
    "kernel max_block(256) void block_sum(global const float* x, global float* sums, int n) {\n"
    "  shared float partial[256];\n"
    "  int t = local_id(0), i = global_id(0);\n"
    "  partial[t] = i < n ? x[i] : 0.0f;\n"
    "  barrier();\n"
    "  for (int s = local_size(0) / 2; s > 0; s /= 2) {\n"
    "    if (t < s) partial[t] += partial[t + s];\n"
    "    barrier();\n"
    "  }\n"
    "  if (t == 0) sums[group_id(0)] = partial[0];\n"
    "}\n"
    "kernel max_block(256) void matmul(global const float* a, global const float* b,\n"
    "                                  global float* c, int m, int n, int k) {\n"
    "  shared float as[TILE][TILE];\n"
    "  shared float bs[TILE][TILE];\n"
    "  int tx = local_id(0), ty = local_id(1);\n"
    "  int col = group_id(0) * TILE + tx, row = group_id(1) * TILE + ty;\n"
    "  float acc = 0.0f;\n"
    "  for (int k0 = 0; k0 < k; k0 += TILE) {\n"
    "    as[ty][tx] = row < m && k0 + tx < k ? a[row * k + k0 + tx] : 0.0f;\n"
    "    bs[ty][tx] = col < n && k0 + ty < k ? b[(k0 + ty) * n + col] : 0.0f;\n"
    "    barrier();\n"
    "    for (int kk = 0; kk < TILE; ++kk) acc += as[ty][kk] * bs[kk][tx];\n"
    "    barrier();\n"
    "  }\n"
    "  if (row < m && col < n) c[row * n + col] = acc;\n"
    "}\n"
    "kernel max_block(128) void softmax(global const float* x, global float* y, int cols) {\n"
    "  shared float scratch[128];\n"
    "  int row = group_id(0), t = local_id(0);\n"
    "  float m = -INFINITY, sum = 0.0f;\n"
    "  for (int c = t; c < cols; c += local_size(0)) m = fmax(m, x[row * cols + c]);\n"
    "  scratch[t] = m;\n"
    "  barrier();\n"
    "  for (int s = local_size(0) / 2; s > 0; s /= 2) {\n"
    "    if (t < s) scratch[t] = fmax(scratch[t], scratch[t + s]);\n"
    "    barrier();\n"
    "  }\n"
    "  m = scratch[0];\n"
    "  barrier();\n"
    "  for (int c = t; c < cols; c += local_size(0)) sum += exp(x[row * cols + c] - m);\n"
    "  scratch[t] = sum;\n"
    "  barrier();\n"
    "  for (int s = local_size(0) / 2; s > 0; s /= 2) {\n"
    "    if (t < s) scratch[t] += scratch[t + s];\n"
    "    barrier();\n"
    "  }\n"
    "  for (int c = t; c < cols; c += local_size(0))\n"
    "    y[row * cols + c] = exp(x[row * cols + c] - m) / scratch[0];\n"
    "}\n";

enum { N = 10007, M = 45, K = 37, COLS = 61, ROWS = 9, BLOCK = 256 };
#define BLOCKS ((N + BLOCK - 1) / BLOCK)
#define OUTPUTS (N + BLOCKS + M * COLS + ROWS * COLS)

#define CHECK(call)                                                               \
  do {                                                                            \
    hal_result_t result_ = (call);                                                \
    if (result_ != HAL_SUCCESS) {                                                 \
      fprintf(stderr, "  %s failed: %s: %s\n", #call, hal_result_string(result_), \
              hal_error_last_message());                                          \
      goto done;                                                                  \
    }                                                                             \
  } while (0)

static hal_launch_config_t shape(uint32_t gx, uint32_t gy, uint32_t bx, uint32_t by) {
  hal_launch_config_t config;
  memset(&config, 0, sizeof(config));
  config.struct_size = sizeof(config);
  config.grid[0] = gx, config.grid[1] = gy, config.grid[2] = 1;
  config.block[0] = bx, config.block[1] = by, config.block[2] = 1;
  return config;
}

static hal_kernel_t kernel(hal_module_t module, const char* name) {
  hal_kernel_desc_t desc;
  hal_kernel_t out = NULL;
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = sizeof(desc);
  desc.name = name; /* arg_types NULL: the signature comes from the source */
  return hal_kernel_get(module, &desc, &out) == HAL_SUCCESS ? out : NULL;
}

/* Runs the four kernels on |device|; |out| gets every output, concatenated. */
static int run_device(hal_device_t device, const float* a, const float* b, float* out) {
  int ok = 0;
  hal_stream_t stream = NULL;
  hal_module_t module = NULL;
  void *da = NULL, *db = NULL, *dout = NULL;
  hal_module_desc_t desc;
  memset(&desc, 0, sizeof(desc));
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
  desc.data = kSource;
  desc.size = sizeof(kSource);
  CHECK(hal_module_load(device, &desc, &module));
  CHECK(hal_stream_create(device, 0, &stream));
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, N * sizeof(float), 0, &da));
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, N * sizeof(float), 0, &db));
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, OUTPUTS * sizeof(float), 0, &dout));
  CHECK(hal_memcpy_async(da, a, N * sizeof(float), stream));
  CHECK(hal_memcpy_async(db, b, N * sizeof(float), stream));
  {
    float* c = (float*)dout;
    float* sums = c + N;
    float* product = sums + BLOCKS;
    float* soft = product + M * COLS;
    int n = N, m = M, cols = COLS, k = K;
    hal_kernel_arg_t vadd_args[4] = {
        {&da, sizeof(void*)}, {&db, sizeof(void*)}, {&c, sizeof(void*)}, {&n, 4}};
    hal_kernel_arg_t sum_args[3] = {{&da, sizeof(void*)}, {&sums, sizeof(void*)}, {&n, 4}};
    /* A is M x K from a, B is K x COLS from b. */
    hal_kernel_arg_t mm_args[6] = {{&da, sizeof(void*)},
                                   {&db, sizeof(void*)},
                                   {&product, sizeof(void*)},
                                   {&m, 4},
                                   {&cols, 4},
                                   {&k, 4}};
    hal_kernel_arg_t soft_args[3] = {{&db, sizeof(void*)}, {&soft, sizeof(void*)}, {&cols, 4}};
    hal_kernel_t kernels[4];
    hal_launch_config_t configs[4];
    const hal_kernel_arg_t* args[4] = {vadd_args, sum_args, mm_args, soft_args};
    const uint32_t counts[4] = {4, 3, 6, 3};
    int i;
    kernels[0] = kernel(module, "vadd");
    kernels[1] = kernel(module, "block_sum");
    kernels[2] = kernel(module, "matmul");
    kernels[3] = kernel(module, "softmax");
    configs[0] = shape(BLOCKS, 1, BLOCK, 1);
    configs[1] = shape(BLOCKS, 1, BLOCK, 1);
    configs[2] = shape((COLS + 15) / 16, (M + 15) / 16, 16, 16);
    configs[3] = shape(ROWS, 1, 128, 1);
    for (i = 0; i < 4; ++i) {
      if (kernels[i] == NULL) {
        fprintf(stderr, "  hal_kernel_get: %s\n", hal_error_last_message());
        goto done;
      }
      CHECK(hal_launch_kernel(kernels[i], &configs[i], counts[i], args[i], stream));
    }
  }
  CHECK(hal_memcpy_async(out, dout, OUTPUTS * sizeof(float), stream));
  CHECK(hal_stream_synchronize(stream));
  ok = 1;
done:
  hal_mem_free(da);
  hal_mem_free(db);
  hal_mem_free(dout);
  hal_stream_destroy(stream);
  hal_module_unload(module);
  return ok;
}

/* Spot checks of each kernel against the host. */
static int matches_host(const float* a, const float* b, const float* out) {
  double sum0 = 0, dot = 0, soft_sum = 0;
  int i;
  for (i = 0; i < N; ++i) {
    if (out[i] != a[i] + b[i]) return 0;
  }
  for (i = 0; i < BLOCK; ++i) sum0 += a[i];
  if (fabs(out[N] - sum0) > 1e-3) return 0;
  for (i = 0; i < K; ++i) dot += (double)a[i] * b[i * COLS];
  if (fabs(out[N + BLOCKS] - dot) > 1e-3) return 0;
  for (i = 0; i < COLS; ++i) soft_sum += out[N + BLOCKS + M * COLS + i];
  return fabs(soft_sum - 1.0) < 1e-4;
}

int main(void) {
  uint32_t count = 0, index;
  int ran = 0, failed = 0, i;
  float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
  float *first = malloc(OUTPUTS * sizeof(float)), *out = malloc(OUTPUTS * sizeof(float));
  unsigned seed = 12345;
  for (i = 0; i < N; ++i) {
    seed = seed * 1103515245u + 12345u;
    a[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
    seed = seed * 1103515245u + 12345u;
    b[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
  }
  if (hal_init(NULL) != HAL_SUCCESS || hal_device_count(&count) != HAL_SUCCESS) {
    fprintf(stderr, "hal_init: %s\n", hal_error_last_message());
    return 1;
  }
  for (index = 0; index < count; ++index) {
    hal_device_t device;
    hal_device_properties_t properties;
    memset(&properties, 0, sizeof(properties));
    properties.struct_size = sizeof(properties);
    if (hal_device_get(index, &device) != HAL_SUCCESS ||
        hal_device_get_properties(device, &properties) != HAL_SUCCESS)
      continue;
    if ((properties.module_formats & (1u << HAL_MODULE_FORMAT_HAL_DIALECT)) == 0) {
      printf("device %u (%s): %s: skipped, it does not compile the kernel dialect\n", index,
             properties.plugin, properties.name);
      continue;
    }
    printf("device %u (%s): %s\n", index, properties.plugin, properties.name);
    if (!run_device(device, a, b, ran == 0 ? first : out) ||
        !matches_host(a, b, ran == 0 ? first : out)) {
      printf("  FAILED\n");
      ++failed;
    } else if (ran > 0) {
      /* Across devices: same kernels, same answers (to rounding). */
      double worst = 0;
      for (i = 0; i < OUTPUTS; ++i) {
        double d = fabs((double)out[i] - first[i]) / (1.0 + fabs(first[i]));
        if (d > worst) worst = d;
      }
      printf("  largest difference from the first device: %.3g\n", worst);
      if (worst > 1e-4) ++failed;
    }
    ++ran;
  }
  printf("%d device(s) ran, %d failed\n", ran, failed);
  hal_shutdown();
  free(a), free(b), free(first), free(out);
  return failed == 0 && ran > 0 ? 0 : 1;
}
