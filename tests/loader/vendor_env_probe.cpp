// Run by process_security_test.cpp, plainly and setgid (AT_SECURE): calls
// hal_init with the default search (the build tree's plugins), then prints
// "at_secure=<0|1>", one line "plugin <name> <devices> <reason>" per loaded
// plugin, and "variable <name> unset" or "variable <name> = <value>" for
// each name given: which vendor variables the plugins removed (a library may
// set one again itself: PoCL sets HWLOC_PLUGINS_PATH=/dev/null), and whether
// their vendor libraries honoured them (the devices they found).
#include <hal.h>
#include <sys/auxv.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const hal_result_t result = hal_init(nullptr);
  std::printf("at_secure=%lu init=%s\n", getauxval(AT_SECURE), hal_result_string(result));
  if (result == HAL_SUCCESS) {
    uint32_t count = 0;
    hal_plugin_report_count(&count);
    for (uint32_t i = 0; i < count; ++i) {
      hal_plugin_report_t report{};
      report.struct_size = sizeof(report);
      if (hal_plugin_report_get(i, &report) != HAL_SUCCESS) continue;
      if (report.outcome != HAL_PLUGIN_LOADED) continue;
      std::printf("plugin %s %u %s\n", report.name, report.device_count, report.reason);
    }
  }
  for (int i = 1; i < argc; ++i) {
    const char* value = std::getenv(argv[i]);
    if (value == nullptr) {
      std::printf("variable %s unset\n", argv[i]);
    } else {
      std::printf("variable %s = %s\n", argv[i], value);
    }
  }
  if (result == HAL_SUCCESS) hal_shutdown();
  return 0;
}
