// Per-device state of the loader's implementations: the portable dialect
// modules, compiled once per device and source. Owned by the loader's device
// object and destroyed with it, after hal_shutdown has released the modules
// themselves (so it never unloads).
#pragma once

#include <hal.h>

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace hal::ops {

class DeviceState {
 public:
  explicit DeviceState(hal_device_t device) : device_(device) {}
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  // The kernel |name| of the dialect module |source| (|source_name| keys the
  // cache and names it in messages). HAL_SUCCESS, or the failing call's
  // result with |message| holding its error detail.
  hal_result_t kernel(std::string_view source_name, std::string_view source, const char* name,
                      hal_kernel_t* out_kernel, std::string* message);

 private:
  struct Module {
    hal_module_t module = nullptr;
    std::string failure;  // a compile that failed is not retried
    hal_result_t failure_result = HAL_SUCCESS;
    std::map<std::string, hal_kernel_t, std::less<>> kernels;
  };
  hal_device_t device_;
  std::mutex mutex_;
  std::map<std::string, Module, std::less<>> modules_;
};

}  // namespace hal::ops
