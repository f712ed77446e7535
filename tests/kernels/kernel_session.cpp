// The Catch2 backend of the dialect kernel checks: one session per process
// with every dialect device of the cpu and opencl plugins.
#include <cstdlib>

#include "kernel_harness.hpp"

namespace hal_test {
namespace {

class Session {
 public:
  Session() {
    // Hermetic caches in the build tree unless the caller chose others.
    setenv("HAL_CPU_DEVICES", "1", 0);
    setenv("HAL_CACHE_DIR", HAL_TEST_CACHE_DIR, 0);
    setenv("POCL_CACHE_DIR", HAL_TEST_POCL_CACHE_DIR, 0);
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    uint32_t count = 0;
    REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
    for (uint32_t i = 0; i < count; ++i) {
      TestDevice device;
      REQUIRE(hal_device_get(i, &device.device) == HAL_SUCCESS);
      hal_device_properties_t properties{};
      properties.struct_size = sizeof(properties);
      REQUIRE(hal_device_get_properties(device.device, &properties) == HAL_SUCCESS);
      if ((properties.module_formats & (1u << HAL_MODULE_FORMAT_HAL_DIALECT)) == 0) continue;
      device.label =
          std::string(properties.plugin) + " #" + std::to_string(i) + ": " + properties.name;
      hal_module_desc_t desc{};
      desc.struct_size = sizeof(desc);
      desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
      desc.path = HAL_TEST_KERNELS_SOURCE;
      INFO(device.label << ": " << hal_error_last_message());
      REQUIRE(hal_module_load(device.device, &desc, &device.module) == HAL_SUCCESS);
      REQUIRE(hal_stream_create(device.device, 0, &device.stream) == HAL_SUCCESS);
      devices_.push_back(std::move(device));
    }
    // Both plugins must be here: a silently missing one would pass vacuously.
    REQUIRE(devices_.size() >= 2);
  }
  ~Session() {
    for (TestDevice& device : devices_) {
      hal_stream_destroy(device.stream);
      hal_module_unload(device.module);
    }
    hal_shutdown();
  }
  std::vector<TestDevice> devices_;
};

}  // namespace

std::vector<TestDevice>& devices() {
  static Session session;
  return session.devices_;
}

}  // namespace hal_test
