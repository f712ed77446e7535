/* A plugin built against the v1.0 headers (tests/abi/old_api: a shorter
 * table, smaller structs) loads in the current loader and works; the loader
 * treats the table entries it lacks as absent and supplies fallbacks. Run
 * with the plugin's path as argv[1]. */
#include <hal.h>

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                       \
  do {                                                                    \
    hal_result_t check_result = (call);                                   \
    if (check_result != HAL_SUCCESS) {                                    \
      fprintf(stderr, "old_plugin_test: %s failed: %s: %s\n", #call,      \
              hal_result_string(check_result), hal_error_last_message()); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

int main(int argc, char** argv) {
  unsigned char host[100];
  unsigned char back[100];
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  hal_plugin_report_t report;
  hal_device_t device = NULL;
  hal_stream_t stream = NULL;
  hal_event_t event = NULL;
  void* memory = NULL;
  uint32_t count = 0;
  if (argc != 2) return 2;
  options.plugins = argv[1];
  options.skip_default_search = 1;
  CHECK(hal_init(&options));
  memset(&report, 0, sizeof report);
  report.struct_size = sizeof report;
  CHECK(hal_plugin_report_get(0, &report));
  if (report.outcome != HAL_PLUGIN_LOADED || report.abi_version != HAL_MAKE_VERSION(1, 0, 0)) {
    fprintf(stderr, "old_plugin_test: outcome %d, abi 0x%x: %s\n", (int)report.outcome,
            report.abi_version, report.reason);
    return 1;
  }
  CHECK(hal_device_count(&count));
  if (count != 1) return 1;
  CHECK(hal_device_get(0, &device));
  CHECK(hal_stream_create(device, 0, &stream));
  CHECK(hal_event_create(device, 0, &event)); /* a loader event: the plugin has none */
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, sizeof host, 0, &memory));
  memset(host, 3, sizeof host);
  CHECK(hal_memcpy_async(memory, host, sizeof host, stream));
  CHECK(hal_memset_async(memory, 8, 10, stream)); /* the loader's fill fallback */
  CHECK(hal_memcpy_async(back, memory, sizeof back, stream));
  CHECK(hal_event_record(event, stream));
  CHECK(hal_event_synchronize(event));
  if (back[0] != 8 || back[9] != 8 || back[10] != 3 || back[99] != 3) return 1;
  CHECK(hal_mem_free(memory));
  CHECK(hal_event_destroy(event));
  CHECK(hal_stream_destroy(stream));
  CHECK(hal_shutdown());
  printf("old_plugin_test: the v1.0 plugin works in the current loader\n");
  return 0;
}
