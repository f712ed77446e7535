// One OpenCL device with SVM. It owns the registries of the streams, events
// and modules created on it, so device_close can finish and free whatever
// the application left behind.
#ifndef HAL_PLUGINS_OPENCL_DEVICE_HPP_
#define HAL_PLUGINS_OPENCL_DEVICE_HPP_

#include <memory>
#include <mutex>
#include <unordered_map>

#include "hal_plugin_sdk/owned_set.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "opencl.hpp"

namespace hal::opencl {

class Event;
class Module;
class Stream;
struct Platform;

class Device {
 public:
  Device(const plugin::ErrorReporter& report, Platform& platform, cl_device_id id, uint32_t index,
         bool fine_grain);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const plugin::ErrorReporter& report() const { return report_; }
  cl_device_id id() const { return id_; }
  cl_context context() const;
  uint32_t index() const { return index_; }
  // Fine-grain buffer SVM: the host reads and writes allocations directly.
  bool fine_grain() const { return fine_grain_; }
  const hal_device_properties_t& properties() const { return properties_; }

  Stream* add_stream(std::unique_ptr<Stream> stream);
  void remove_stream(Stream* stream);
  Event* add_event(std::unique_ptr<Event> event);
  void remove_event(Event* event);
  Module* add_module(std::unique_ptr<Module> module);
  void remove_module(Module* module);

  hal_result_t synchronize();
  void release_all();

  // Allocations aligned beyond what clSVMAlloc grants are carved out of a
  // larger one: |aligned| -> the pointer clSVMFree needs.
  void remember_base(void* aligned, void* base);
  void* take_base(void* aligned);  // |aligned| itself when not remembered

 private:
  void read_properties();

  plugin::ErrorReporter report_;
  Platform& platform_;
  cl_device_id id_;
  uint32_t index_;
  bool fine_grain_;
  hal_device_properties_t properties_{};
  plugin::OwnedSet<Stream, std::unique_ptr<Stream>> streams_;
  plugin::OwnedSet<Event, std::unique_ptr<Event>> events_;
  plugin::OwnedSet<Module, std::unique_ptr<Module>> modules_;
  std::mutex mutex_;                               // guards over_aligned_
  std::unordered_map<void*, void*> over_aligned_;  // guarded by mutex_
};

inline Device* to_device(hal_impl_device_t* device) {
  return reinterpret_cast<Device*>(device);
}

void device_close(hal_impl_device_t* device);
hal_result_t device_get_properties(hal_impl_device_t* device,
                                   hal_device_properties_t* out_properties);
hal_result_t device_synchronize(hal_impl_device_t* device);

hal_result_t mem_alloc(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                       size_t alignment, void** out_ptr);
hal_result_t mem_free(hal_impl_device_t* device, void* ptr);

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_DEVICE_HPP_
