// core.plugin: the plugin's load report and the sanity of what its devices
// declare (every later test trusts these declarations).
#include <cstring>
#include <set>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {

HALCONFORM_TEST("core.plugin.load_report",
                "the plugin's report says loaded, names it, and counts its devices", {}) {
  uint32_t count = 0;
  HC_OK(hal_plugin_report_count(&count));
  HC_REQUIRE(count >= 1, "no plugin report");
  bool found = false;
  for (uint32_t i = 0; i < count; ++i) {
    hal_plugin_report_t report{};
    report.struct_size = sizeof(report);
    HC_OK(hal_plugin_report_get(i, &report));
    if (report.outcome != HAL_PLUGIN_LOADED ||
        std::strcmp(report.name, ctx.properties().plugin) != 0) {
      continue;
    }
    found = true;
    HC_REQUIRE(report.result == HAL_SUCCESS, "a loaded plugin's report carries an error");
    HC_REQUIRE(report.reason != nullptr && report.reason[0] == '\0',
               std::string("a loaded plugin's report gives a reason: ") + report.reason);
    HC_REQUIRE(report.version != nullptr && report.version[0] != '\0', "the plugin has no version");
    HC_REQUIRE(report.vendor != nullptr && report.vendor[0] != '\0', "the plugin has no vendor");
    HC_REQUIRE(report.build_id != nullptr && report.build_id[0] != '\0',
               "the plugin has no build id");
    HC_REQUIRE(HAL_VERSION_MAJOR(report.abi_version) == HAL_ABI_VERSION_MAJOR,
               strf("the plugin implements ABI major %u", HAL_VERSION_MAJOR(report.abi_version)));
    HC_REQUIRE(report.device_count == ctx.plugin_devices().size(),
               strf("the report counts %u devices, the loader lists %zu", report.device_count,
                    ctx.plugin_devices().size()));
  }
  HC_REQUIRE(found, std::string("no loaded report names plugin '") + ctx.properties().plugin + "'");
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  HC_EXPECT_RESULT(hal_plugin_report_get(count, &report), HAL_ERROR_NOT_FOUND);
}

HALCONFORM_TEST("core.plugin.properties",
                "declared properties are consistent, stable and unique per device", {}) {
  const hal_device_properties_t& p = ctx.properties();
  HC_REQUIRE(p.name[0] != '\0' && p.vendor[0] != '\0' && p.driver_version[0] != '\0',
             "name, vendor or driver_version is empty (SPEC.md §10.6)");
  HC_REQUIRE(p.max_threads_per_block >= 1 && p.compute_units >= 1 && p.subgroup_size >= 1,
             "a zero limit: max_threads_per_block, compute_units or subgroup_size (SPEC.md §10.6: "
             "at least 1, also on a device without kernels)");
  for (int d = 0; d < 3; ++d) {
    HC_REQUIRE(p.max_block_dims[d] >= 1 && p.max_grid_dims[d] >= 1,
               strf("dimension %d has a zero block or grid limit (SPEC.md §10.6)", d));
  }
  HC_REQUIRE(p.max_block_dims[0] <= p.max_threads_per_block || p.max_threads_per_block >= 1,
             "block limits are inconsistent");
  HC_REQUIRE(p.total_memory_bytes > 0 && p.max_allocation_bytes <= p.total_memory_bytes,
             "max_allocation_bytes exceeds total_memory_bytes (SPEC.md §10.6)");
  HC_REQUIRE(p.peak_fp32_flops >= 0 && p.peak_memory_bandwidth >= 0, "a negative declared peak");
  // Every bit up to the highest capability this suite knows.
  const hal_device_caps_t known = (HAL_DEVICE_CAP_ALLTOALLV << 1) - 1;
  HC_REQUIRE((p.capabilities & ~known) == 0, strf("unknown capability bits 0x%x", p.capabilities));
  if ((p.capabilities & HAL_DEVICE_CAP_KERNELS) != 0) {
    HC_REQUIRE(p.module_formats != 0, "declares HAL_DEVICE_CAP_KERNELS but loads no module format");
  }
  const hal_device_properties_t again = device_properties(ctx.device());
  HC_REQUIRE(std::memcmp(again.uuid, p.uuid, 16) == 0 && again.capabilities == p.capabilities &&
                 again.total_memory_bytes == p.total_memory_bytes,
             "properties change between two calls");
  std::set<std::string> uuids;
  for (hal_device_t device : ctx.plugin_devices()) {
    const hal_device_properties_t other = device_properties(device);
    HC_REQUIRE(uuids.insert(std::string(reinterpret_cast<const char*>(other.uuid), 16)).second,
               strf("two devices of the plugin share a uuid (device %u)", other.index));
  }
}

}  // namespace halconform
