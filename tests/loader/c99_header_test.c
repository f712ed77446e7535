/* hal.h and hal_plugin.h compile as strict C99 and link against libhal. */
#include <hal.h>
#include <hal_plugin.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  hal_error_detail_t detail;
  uint32_t count = 0;
  if (HAL_VERSION_MAJOR(hal_get_version()) != HAL_ABI_VERSION_MAJOR) return 1;
  if (strcmp(hal_result_string(HAL_ERROR_OUT_OF_BOUNDS), "HAL_ERROR_OUT_OF_BOUNDS") != 0) return 2;
  if (hal_device_count(&count) != HAL_ERROR_NOT_INITIALIZED) return 3;
  memset(&detail, 0, sizeof(detail));
  detail.struct_size = sizeof(detail);
  if (hal_error_get_detail(&detail) != HAL_SUCCESS || detail.result != HAL_ERROR_NOT_INITIALIZED)
    return 4;
  options.skip_default_search = 1;
  if (hal_init(&options) != HAL_SUCCESS) return 5;
  if (hal_device_count(&count) != HAL_SUCCESS || count != 0) return 6;
  if (hal_shutdown() != HAL_SUCCESS) return 7;
  puts("hal.h is C99");
  return 0;
}
