/* An out-of-tree application: initialises HAL from an installed prefix with no
 * environment help, checks that the installed cpu plugin was found under that
 * prefix, and does one round trip of memory through a device.
 *
 *   consumer PREFIX        exit 0 on success */
#include <hal.h>

#include <stdio.h>
#include <string.h>

static int fail(const char* what, hal_result_t result) {
  fprintf(stderr, "consumer: %s: %s: %s\n", what, hal_result_string(result),
          hal_error_last_message());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* prefix = argv[1];
  if (HAL_VERSION_MAJOR(hal_get_version()) != HAL_ABI_VERSION_MAJOR) {
    fprintf(stderr, "consumer: built for ABI %d, library is %u\n", HAL_ABI_VERSION_MAJOR,
            HAL_VERSION_MAJOR(hal_get_version()));
    return 1;
  }
  hal_result_t r = hal_init(NULL);
  if (r != HAL_SUCCESS) return fail("hal_init", r);

  uint32_t reports = 0;
  if ((r = hal_plugin_report_count(&reports)) != HAL_SUCCESS) return fail("report_count", r);
  int cpu_from_prefix = 0;
  for (uint32_t i = 0; i < reports; ++i) {
    hal_plugin_report_t report;
    memset(&report, 0, sizeof report);
    report.struct_size = sizeof report;
    if ((r = hal_plugin_report_get(i, &report)) != HAL_SUCCESS) return fail("report_get", r);
    printf("plugin %s: %s (found by %s)\n", report.name, report.path, report.found_by);
    if (strcmp(report.name, "cpu") == 0 && report.outcome == HAL_PLUGIN_LOADED &&
        strncmp(report.path, prefix, strlen(prefix)) == 0)
      cpu_from_prefix = 1;
  }
  if (!cpu_from_prefix) {
    fprintf(stderr, "consumer: the cpu plugin was not loaded from %s\n", prefix);
    return 1;
  }

  uint32_t count = 0;
  if ((r = hal_device_count(&count)) != HAL_SUCCESS) return fail("device_count", r);
  if (count == 0) {
    fprintf(stderr, "consumer: no device\n");
    return 1;
  }
  hal_device_t device;
  hal_stream_t stream;
  void* buffer;
  if ((r = hal_device_get(0, &device)) != HAL_SUCCESS) return fail("device_get", r);
  if ((r = hal_stream_create(device, 0, &stream)) != HAL_SUCCESS) return fail("stream", r);
  if ((r = hal_mem_alloc(device, HAL_MEMORY_DEVICE, 4096, 0, &buffer)) != HAL_SUCCESS)
    return fail("alloc", r);
  char in[4096], out[4096];
  for (int i = 0; i < 4096; ++i) in[i] = (char)(i * 7);
  if ((r = hal_memcpy_async(buffer, in, sizeof in, stream)) != HAL_SUCCESS) return fail("h2d", r);
  if ((r = hal_memcpy_async(out, buffer, sizeof out, stream)) != HAL_SUCCESS) return fail("d2h", r);
  if ((r = hal_stream_synchronize(stream)) != HAL_SUCCESS) return fail("sync", r);
  if (memcmp(in, out, sizeof in) != 0) {
    fprintf(stderr, "consumer: round trip corrupted the data\n");
    return 1;
  }
  hal_mem_free(buffer);
  hal_stream_destroy(stream);
  hal_shutdown();
  printf("consumer: ok, %u device(s)\n", count);
  return 0;
}
