// Drives the cpu plugin's table directly, without the loader: dlopens
// hal_plugin_cpu.so, calls hal_plugin_entry with a host defined here, and
// records what the plugin reports through set_error.
#ifndef HAL_TESTS_CPU_PLUGIN_HARNESS_HPP_
#define HAL_TESTS_CPU_PLUGIN_HARNESS_HPP_

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "hal_plugin.h"

namespace hal::test {

// The last error the plugin reported on this thread.
struct ReportedError {
  hal_result_t result = HAL_SUCCESS;
  int64_t native_code = 0;
  std::string message;
};

inline ReportedError& last_error() {
  thread_local ReportedError error;
  return error;
}

inline void record_error(void*, hal_result_t result, int64_t native_code, const char* message) {
  last_error() = ReportedError{result, native_code, message != nullptr ? message : ""};
}

inline void ignore_log(void*, hal_log_level_t, const char*) {}

inline hal_plugin_host_t make_host(uint32_t abi_version = HAL_ABI_VERSION) {
  return hal_plugin_host_t{
      sizeof(hal_plugin_host_t), abi_version, 0, nullptr, &record_error, &ignore_log};
}

// The plugin shared object, opened once per process and never closed, as a
// loader keeps it.
inline hal_plugin_entry_fn_t plugin_entry() {
  static void* library = dlopen(HAL_TEST_CPU_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) throw std::runtime_error(dlerror());
  return reinterpret_cast<hal_plugin_entry_fn_t>(dlsym(library, HAL_PLUGIN_ENTRY_NAME));
}

// One initialised plugin with its devices open; shuts it down on scope exit.
class PluginInstance {
 public:
  // |devices| and |memory| become HAL_CPU_DEVICES and HAL_CPU_DEVICE_MEMORY
  // (nullptr: unset) while the entry runs.
  explicit PluginInstance(const char* devices = "2", const char* memory = nullptr) {
    if (devices != nullptr)
      setenv("HAL_CPU_DEVICES", devices, 1);
    else
      unsetenv("HAL_CPU_DEVICES");
    if (memory != nullptr) setenv("HAL_CPU_DEVICE_MEMORY", memory, 1);
    info_.struct_size = sizeof(info_);
    const hal_result_t result = plugin_entry()(&host_, &info_);
    unsetenv("HAL_CPU_DEVICE_MEMORY");
    setenv("HAL_CPU_DEVICES", "2", 1);
    if (result != HAL_SUCCESS) throw std::runtime_error("entry failed: " + last_error().message);
    table_ = info_.table;
    uint32_t count = 0;
    table_->device_count(info_.context, &count);
    for (uint32_t i = 0; i < count; ++i) {
      hal_impl_device_t* device = nullptr;
      table_->device_open(info_.context, i, &device);
      devices_.push_back(device);
    }
  }
  ~PluginInstance() {
    for (hal_impl_device_t* device : devices_) table_->device_close(device);
    table_->plugin_shutdown(info_.context);
  }
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  const hal_plugin_table_v1_t& table() const { return *table_; }
  const hal_plugin_v1_t& info() const { return info_; }
  hal_impl_device_t* device(size_t index) const { return devices_.at(index); }
  size_t device_count() const { return devices_.size(); }

 private:
  hal_plugin_host_t host_ = make_host();
  hal_plugin_v1_t info_{};
  const hal_plugin_table_v1_t* table_ = nullptr;
  std::vector<hal_impl_device_t*> devices_;
};

}  // namespace hal::test

#endif  // HAL_TESTS_CPU_PLUGIN_HARNESS_HPP_
