// The device entries of a plugin's table that only hand the call to the
// plugin's Device: written once, so each plugin keeps just the Device
// methods, and no exception leaves any of them (guarded, report.hpp).
//
// |Device| provides:
//   const ErrorReporter& report() const;
//   const hal_device_properties_t& properties() const;
//   hal_result_t synchronize();
//   hal_result_t allocate(hal_memory_kind_t, size_t size, size_t alignment, void** out);
//   hal_result_t free(void* ptr);
//   void release_all();  // device_close: everything the application left behind
#ifndef HAL_PLUGIN_SDK_DEVICE_ENTRIES_HPP_
#define HAL_PLUGIN_SDK_DEVICE_ENTRIES_HPP_

#include <cstddef>

#include "hal_plugin.h"
#include "hal_plugin_sdk/report.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"

namespace hal::plugin {

template <class Device>
struct DeviceEntries {
  static Device& of(hal_impl_device_t* device) { return *reinterpret_cast<Device*>(device); }

  // device_close returns nothing: a failure while releasing is dropped, as
  // the loader could not act on it.
  static void close(hal_impl_device_t* device) noexcept {
    try {
      of(device).release_all();
    } catch (...) {
    }
  }

  static hal_result_t get_properties(hal_impl_device_t* device,
                                     hal_device_properties_t* out_properties) {
    write_versioned_struct(of(device).properties(), out_properties);
    return HAL_SUCCESS;
  }

  static hal_result_t synchronize(hal_impl_device_t* device) {
    Device& self = of(device);
    return guarded(self.report(), "device_synchronize", [&] { return self.synchronize(); });
  }

  static hal_result_t mem_alloc(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                                size_t alignment, void** out_ptr) {
    Device& self = of(device);
    return guarded(self.report(), "mem_alloc",
                   [&] { return self.allocate(kind, size, alignment, out_ptr); });
  }

  // The loader synchronised the device first: nothing enqueued uses |ptr|.
  static hal_result_t mem_free(hal_impl_device_t* device, void* ptr) {
    Device& self = of(device);
    return guarded(self.report(), "mem_free", [&] { return self.free(ptr); });
  }

  // Sets the entries above in |table|.
  static void fill(hal_plugin_table_v1_t& table) {
    table.device_close = close;
    table.device_get_properties = get_properties;
    table.device_synchronize = synchronize;
    table.mem_alloc = mem_alloc;
    table.mem_free = mem_free;
  }
};

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_DEVICE_ENTRIES_HPP_
