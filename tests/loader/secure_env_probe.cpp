// Run by secure_env_test.cpp, once plainly and once setgid (AT_SECURE): says
// whether the process runs in secure-execution mode and what hal_init made of
// the HAL_* variables it was given. Output: one line
// "at_secure=<0|1> init=<result> reports=<n>".
#include <hal.h>

#include <sys/auxv.h>

#include <cstdio>

int main() {
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  options.skip_default_search = 1;  // only HAL_PLUGIN_PATH / HAL_PLUGINS can add plugins
  const hal_result_t result = hal_init(&options);
  uint32_t reports = 0;
  if (result == HAL_SUCCESS) hal_plugin_report_count(&reports);
  std::printf("at_secure=%lu init=%s reports=%u\n", getauxval(AT_SECURE), hal_result_string(result),
              reports);
  if (result == HAL_SUCCESS) hal_shutdown();
  return 0;
}
