/* An application built against the v1.0 headers (tests/abi/old_api), run
 * against the current libhal and cpu plugin: its smaller structs and the
 * calls it knows keep working. */
#include <hal.h>

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                           \
  do {                                                                                        \
    hal_result_t check_result = (call);                                                       \
    if (check_result != HAL_SUCCESS) {                                                        \
      fprintf(stderr, "old_app: %s failed: %s: %s\n", #call, hal_result_string(check_result), \
              hal_error_last_message());                                                      \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

int main(void) {
  unsigned char host[256];
  unsigned char back[256];
  hal_device_t device = NULL;
  hal_device_properties_t properties;
  hal_error_detail_t detail;
  hal_stream_t stream = NULL;
  hal_event_t event = NULL;
  void* memory = NULL;
  uint32_t version = hal_get_version();
  if (HAL_VERSION_MAJOR(version) != HAL_ABI_VERSION_MAJOR || version < HAL_ABI_VERSION) {
    fprintf(stderr, "old_app: libhal %u.%u is older than the headers\n", HAL_VERSION_MAJOR(version),
            HAL_VERSION_MINOR(version));
    return 1;
  }
  CHECK(hal_init(NULL));
  CHECK(hal_device_get(0, &device));
  memset(&properties, 0xab, sizeof properties);
  properties.struct_size = sizeof properties; /* the v1.0 size */
  properties.next = NULL;
  CHECK(hal_device_get_properties(device, &properties));
  if (strcmp(properties.plugin, "cpu") != 0) return 1;
  CHECK(hal_stream_create(device, 0, &stream));
  CHECK(hal_event_create(device, 0, &event));
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, sizeof host, 0, &memory));
  memset(host, 5, sizeof host);
  CHECK(hal_memcpy_async(memory, host, sizeof host, stream));
  CHECK(hal_memset_async(memory, 9, 16, stream));
  CHECK(hal_memcpy_async(back, memory, sizeof back, stream));
  CHECK(hal_event_record(event, stream));
  CHECK(hal_event_synchronize(event));
  if (back[0] != 9 || back[15] != 9 || back[16] != 5 || back[255] != 5) return 1;
  /* The v1.0 error detail, filled only as far as it reaches. */
  if (hal_memcpy_async(memory, host, sizeof host + 1, stream) != HAL_ERROR_OUT_OF_BOUNDS) return 1;
  detail.struct_size = sizeof detail;
  detail.next = NULL;
  CHECK(hal_error_get_detail(&detail));
  if (detail.result != HAL_ERROR_OUT_OF_BOUNDS || strstr(detail.message, "overrun") == NULL)
    return 1;
  CHECK(hal_mem_free(memory));
  CHECK(hal_event_destroy(event));
  CHECK(hal_stream_destroy(stream));
  CHECK(hal_shutdown());
  printf("old_app: the v1.0 application works against libhal %u.%u.%u\n",
         HAL_VERSION_MAJOR(version), HAL_VERSION_MINOR(version), HAL_VERSION_PATCH(version));
  return 0;
}
