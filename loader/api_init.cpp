// hal/init.h: library lifetime, versions and plugin load reports.
#include "api_common.hpp"
#include "layers/intercept.hpp"
#include "layers/layers.hpp"

using namespace hal::loader;

uint32_t hal_get_version(void) {
  return HAL_MAKE_VERSION(HAL_LIBRARY_VERSION_MAJOR, HAL_LIBRARY_VERSION_MINOR,
                          HAL_LIBRARY_VERSION_PATCH);
}

namespace {

// The layers start on a built registry and stop around its teardown.
constexpr LifecycleHooks kLayerHooks = {
    layers::start,
    layers::stop_before_teardown,
    layers::stop_after_teardown,
};

}  // namespace

hal_result_t hal_init(const hal_init_options_t* options) {
  return guarded("hal_init", [&] { return initialize(options, kLayerHooks); });
}

hal_result_t hal_shutdown(void) {
  return guarded("hal_shutdown", [&] { return shut_down(kLayerHooks); });
}

static hal_result_t plugin_report_count_body(uint32_t* out_count) {
  constexpr const char* kFunction = "hal_plugin_report_count";
  Registry* registry = nullptr;
  if (hal_result_t result =
          check_preconditions_in(registry, kFunction, Required{out_count, "out_count"});
      result != HAL_SUCCESS) {
    return result;
  }
  *out_count = static_cast<uint32_t>(registry->reports.size());
  return HAL_SUCCESS;
}

static hal_result_t plugin_report_get_body(uint32_t index, hal_plugin_report_t* out_report) {
  constexpr const char* kFunction = "hal_plugin_report_get";
  Registry* registry = nullptr;
  hal_result_t result =
      check_preconditions_in(registry, kFunction, Required{out_report, "out_report"});
  if (result != HAL_SUCCESS) return result;
  if (struct_too_small(out_report, kFunction, "out_report", "hal_plugin_report_t", result)) {
    return result;
  }
  if (index >= registry->reports.size()) {
    return fail(HAL_ERROR_NOT_FOUND, kFunction, "index %u is out of range: there are %zu reports",
                index, registry->reports.size());
  }
  const PluginReport& stored = registry->reports[index];
  hal_plugin_report_t report{};
  report.path = stored.path.c_str();
  report.name = stored.name.c_str();
  report.version = stored.version.c_str();
  report.vendor = stored.vendor.c_str();
  report.build_id = stored.build_id.c_str();
  report.reason = stored.reason.c_str();
  report.found_by = stored.found_by.c_str();
  report.outcome = stored.outcome;
  report.result = stored.result;
  report.abi_version = stored.abi_version;
  report.device_count = stored.device_count;
  report.requested = stored.requested ? 1 : 0;
  write_sized(report, out_report);
  return HAL_SUCCESS;
}

// ---- the public entries: the layers' hook around each body above ----

hal_result_t hal_plugin_report_count(uint32_t* out_count) {
  return layers::call<layers::PluginReportCount, plugin_report_count_body>(HAL_CALLER, out_count);
}

hal_result_t hal_plugin_report_get(uint32_t index, hal_plugin_report_t* out_report) {
  return layers::call<layers::PluginReportGet, plugin_report_get_body>(HAL_CALLER, index,
                                                                       out_report);
}
