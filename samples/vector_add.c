/* vector_add: c = a + b on every device that runs CPU shared-object kernels,
 * using only the public C API (hal.h).
 *
 *   vector_add [KERNEL_MODULE.so] [N]
 *
 * Exit status 0 when every device computed the right answer (or there is
 * none able to run it), 1 otherwise. */
#include <hal.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef HAL_SAMPLE_VECTOR_ADD_MODULE
#define HAL_SAMPLE_VECTOR_ADD_MODULE "vector_add_cpu.so"
#endif

/* Prints the failing call with HAL's detail and jumps to the cleanup label. */
#define CHECK(call)                                                                   \
  do {                                                                                \
    hal_result_t check_result_ = (call);                                              \
    if (check_result_ != HAL_SUCCESS) {                                               \
      fprintf(stderr, "%s failed: %s: %s\n", #call, hal_result_string(check_result_), \
              hal_error_last_message());                                              \
      goto done;                                                                      \
    }                                                                                 \
  } while (0)

static int run_on_device(hal_device_t device, const char* module_path, uint32_t n) {
  int ok = 0;
  const size_t bytes = (size_t)n * sizeof(float);
  float* host_a = malloc(bytes);
  float* host_b = malloc(bytes);
  float* host_c = malloc(bytes);
  void *a = NULL, *b = NULL, *c = NULL;
  hal_stream_t stream = NULL;
  hal_module_t module = NULL;
  hal_kernel_t kernel = NULL;
  if (!host_a || !host_b || !host_c) goto done;
  for (uint32_t i = 0; i < n; ++i) {
    host_a[i] = (float)i;
    host_b[i] = 0.5f * (float)(n - i);
  }

  CHECK(hal_stream_create(device, 0, &stream));
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &a));
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &b));
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &c));

  hal_module_desc_t module_desc = {sizeof(hal_module_desc_t),
                                   NULL,
                                   HAL_MODULE_FORMAT_CPU_SHARED_OBJECT,
                                   0,
                                   NULL,
                                   0,
                                   module_path};
  CHECK(hal_module_load(device, &module_desc, &module));
  /* No arg_types: the signature comes from the module (HAL_CPU_KERNEL_SIGNATURE). */
  hal_kernel_desc_t kernel_desc = {sizeof(hal_kernel_desc_t), NULL, "vector_add", NULL, 0, 0};
  CHECK(hal_kernel_get(module, &kernel_desc, &kernel));

  CHECK(hal_memcpy_async(a, host_a, bytes, stream));
  CHECK(hal_memcpy_async(b, host_b, bytes, stream));
  const uint32_t block = 256;
  hal_launch_config_t config = {
      sizeof(hal_launch_config_t), NULL, {(n + block - 1) / block, 1, 1}, {block, 1, 1}, 0, 0};
  hal_kernel_arg_t args[4] = {{&a, sizeof a}, {&b, sizeof b}, {&c, sizeof c}, {&n, sizeof n}};
  CHECK(hal_launch_kernel(kernel, &config, 4, args, stream));
  CHECK(hal_memcpy_async(host_c, c, bytes, stream));
  CHECK(hal_stream_synchronize(stream));

  ok = 1;
  for (uint32_t i = 0; i < n; ++i) {
    if (host_c[i] != host_a[i] + host_b[i]) {
      fprintf(stderr, "mismatch at %u: %g != %g\n", i, host_c[i], host_a[i] + host_b[i]);
      ok = 0;
      break;
    }
  }

done:
  hal_module_unload(module);
  hal_mem_free(a);
  hal_mem_free(b);
  hal_mem_free(c);
  hal_stream_destroy(stream);
  free(host_a);
  free(host_b);
  free(host_c);
  return ok;
}

/* The kernel module when none is named: the one of the build tree, else the
 * installed one, found relative to this program (<prefix>/bin/../<libdir>/hal/samples). */
static const char* default_module(char* path, size_t size) {
  if (access(HAL_SAMPLE_VECTOR_ADD_MODULE, R_OK) == 0) return HAL_SAMPLE_VECTOR_ADD_MODULE;
#ifdef HAL_SAMPLE_VECTOR_ADD_INSTALLED
  char self[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  if (length > 0) {
    self[length] = '\0';
    char* slash = strrchr(self, '/');
    if (slash != NULL) {
      *slash = '\0';
      if (snprintf(path, size, "%s/%s", self, HAL_SAMPLE_VECTOR_ADD_INSTALLED) < (int)size &&
          access(path, R_OK) == 0) {
        return path;
      }
    }
  }
#endif
  (void)path;
  (void)size;
  return HAL_SAMPLE_VECTOR_ADD_MODULE; /* the load then reports what is missing */
}

int main(int argc, char** argv) {
  char installed[PATH_MAX + 64];
  const char* module_path = argc > 1 ? argv[1] : default_module(installed, sizeof installed);
  const uint32_t n = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 1000003u;

  hal_result_t result = hal_init(NULL);
  if (result != HAL_SUCCESS) {
    fprintf(stderr, "hal_init: %s: %s\n", hal_result_string(result), hal_error_last_message());
    return 1;
  }
  uint32_t count = 0;
  hal_device_count(&count);
  int failures = 0, ran = 0;
  for (uint32_t i = 0; i < count; ++i) {
    hal_device_t device;
    hal_device_properties_t props = {0};
    props.struct_size = sizeof props;
    if (hal_device_get(i, &device) != HAL_SUCCESS ||
        hal_device_get_properties(device, &props) != HAL_SUCCESS) {
      ++failures;
      continue;
    }
    if (!(props.module_formats & (1u << HAL_MODULE_FORMAT_CPU_SHARED_OBJECT))) {
      printf("device %u (%s): skipped, it does not load CPU shared objects\n", i, props.name);
      continue;
    }
    int ok = run_on_device(device, module_path, n);
    printf("device %u (%s, plugin %s): vector_add of %u floats %s\n", i, props.name, props.plugin,
           n, ok ? "correct" : "FAILED");
    failures += !ok;
    ++ran;
  }
  printf("vector_add: %d device(s) ran, %d failed, %u device(s) found\n", ran, failures, count);
  hal_shutdown();
  return failures ? 1 : 0;
}
