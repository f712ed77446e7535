// Run by process_security_test.cpp: opens libhal by a relative path (as a
// program that dlopens "./libhal.so.1" does), changes the working directory,
// then calls hal_init with the default search, and prints each plugin report
// as "report <found_by> <path>". Not linked with libhal: it must be the
// dlopen below that loads it.
// Usage: relative_load_probe LIBHAL_DIRECTORY DIRECTORY_TO_CHANGE_TO
#include <dlfcn.h>
#include <hal.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 3 || chdir(argv[1]) != 0) return 2;
  void* library = dlopen("./libhal.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::printf("dlopen failed: %s\n", dlerror());
    return 2;
  }
  if (chdir(argv[2]) != 0) return 2;
  auto init = reinterpret_cast<decltype(&hal_init)>(dlsym(library, "hal_init"));
  auto count = reinterpret_cast<decltype(&hal_plugin_report_count)>(
      dlsym(library, "hal_plugin_report_count"));
  auto get =
      reinterpret_cast<decltype(&hal_plugin_report_get)>(dlsym(library, "hal_plugin_report_get"));
  auto shutdown = reinterpret_cast<decltype(&hal_shutdown)>(dlsym(library, "hal_shutdown"));
  if (init == nullptr || count == nullptr || get == nullptr || shutdown == nullptr) return 2;
  const hal_result_t result = init(nullptr);
  std::printf("init %d\n", static_cast<int>(result));
  if (result != HAL_SUCCESS) return 1;
  uint32_t reports = 0;
  count(&reports);
  for (uint32_t i = 0; i < reports; ++i) {
    hal_plugin_report_t report{};
    report.struct_size = sizeof(report);
    if (get(i, &report) == HAL_SUCCESS) std::printf("report %s %s\n", report.found_by, report.path);
  }
  shutdown();
  return 0;
}
