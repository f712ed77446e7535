// One Level Zero GPU: its driver's context, its properties read from
// zeDeviceGetProperties / ComputeProperties / MemoryProperties, its USM
// allocations, and the registries of the streams, events and modules created
// on it, so device_close can finish and free whatever the application left.
#ifndef HAL_PLUGINS_LEVEL_ZERO_DEVICE_HPP_
#define HAL_PLUGINS_LEVEL_ZERO_DEVICE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "hal_plugin_sdk/owned_set.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "loader.hpp"

namespace hal::level_zero {

struct DriverContext;
class Event;
class Module;
class Stream;

// USM allocations are at least this aligned: the plugin asks for it (Level
// Zero has no documented default alignment).
inline constexpr size_t kMinAlignment = 64;

class Device {
 public:
  // Reads the properties and finds a compute queue group; null with |why|
  // when the device has none.
  static std::unique_ptr<Device> create(const plugin::ErrorReporter& report, const Loader& loader,
                                        const DriverContext& driver, ze_device_handle_t handle,
                                        uint32_t index, std::string& why);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const plugin::ErrorReporter& report() const { return report_; }
  const LoaderApi& api() const { return loader_.api(); }
  ze_context_handle_t context() const;
  ze_device_handle_t handle() const { return handle_; }
  uint32_t compute_ordinal() const { return compute_ordinal_; }
  const hal_device_properties_t& properties() const { return properties_; }
  // Nanoseconds per timestamp tick, and the mask of a kernel timestamp's
  // valid bits (timestamps wrap there).
  double timestamp_ns_per_tick() const { return ns_per_tick_; }
  uint64_t timestamp_mask() const { return timestamp_mask_; }

  // report().fail() with |result|'s mapping, its code and its name.
  hal_result_t fail(ze_result_t result, const char* what) const;
  hal_result_t fail(hal_result_t mapped, ze_result_t result, const char* what) const;

  Stream* add_stream(std::unique_ptr<Stream> stream);
  void remove_stream(Stream* stream);
  Event* add_event(std::unique_ptr<Event> event);
  void remove_event(Event* event);
  Module* add_module(std::unique_ptr<Module> module);
  void remove_module(Module* module);

  hal_result_t allocate(hal_memory_kind_t kind, size_t size, size_t alignment, void** out_ptr);
  hal_result_t free(void* ptr);

  void release_all();

 private:
  Device(const plugin::ErrorReporter& report, const Loader& loader, const DriverContext& driver,
         ze_device_handle_t handle, uint32_t index);
  bool read_properties(std::string& why);

  plugin::ErrorReporter report_;
  const Loader& loader_;
  const DriverContext& driver_;
  ze_device_handle_t handle_;
  uint32_t index_;
  uint32_t compute_ordinal_ = 0;
  double ns_per_tick_ = 1.0;
  uint64_t timestamp_mask_ = ~uint64_t{0};
  hal_device_properties_t properties_{};
  plugin::OwnedSet<Stream, std::unique_ptr<Stream>> streams_;
  plugin::OwnedSet<Event, std::unique_ptr<Event>> events_;
  plugin::OwnedSet<Module, std::unique_ptr<Module>> modules_;
  std::mutex mutex_;                                          // guards allocations_
  std::unordered_map<void*, hal_memory_kind_t> allocations_;  // guarded by mutex_
};

inline Device* to_device(hal_impl_device_t* device) {
  return reinterpret_cast<Device*>(device);
}

void device_close(hal_impl_device_t* device);
hal_result_t device_get_properties(hal_impl_device_t* device,
                                   hal_device_properties_t* out_properties);
hal_result_t mem_alloc(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                       size_t alignment, void** out_ptr);
hal_result_t mem_free(hal_impl_device_t* device, void* ptr);

}  // namespace hal::level_zero

#endif  // HAL_PLUGINS_LEVEL_ZERO_DEVICE_HPP_
