// One CUDA GPU: its primary context, its properties read from the driver's
// attributes, its allocations (by kind, so mem_free calls the right free),
// and the registries of the streams, events and modules created on it, so
// device_close can finish and free whatever the application left behind.
#ifndef HAL_PLUGINS_CUDA_DEVICE_HPP_
#define HAL_PLUGINS_CUDA_DEVICE_HPP_

#include <memory>
#include <mutex>
#include <unordered_map>

#include "hal_plugin_sdk/device_entries.hpp"
#include "hal_plugin_sdk/owned_set.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "driver.hpp"
#include "nvrtc.hpp"

namespace hal::cuda {

class Event;
class Module;
class Stream;

namespace collective {
class Nccl;
}  // namespace collective

namespace ops {
class CublasLtLoader;
class DeviceBlas;
}  // namespace ops

// FP32 lanes per SM for a compute capability (NVIDIA's tables); 128 for
// architectures newer than the table.
uint32_t fp32_lanes_per_sm(int major, int minor);

class Device {
 public:
  Device(const plugin::ErrorReporter& report, const Driver& driver, const Nvrtc* nvrtc,
         ops::CublasLtLoader& blas_loader, const collective::Nccl* nccl, CUdevice handle,
         CUcontext context, uint32_t index);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const plugin::ErrorReporter& report() const { return report_; }
  const DriverApi& api() const { return driver_.api(); }
  const Nvrtc* nvrtc() const { return nvrtc_; }
  // NCCL, or null when the plugin found none (the loader's collectives serve).
  const collective::Nccl* nccl() const { return nccl_; }
  const hal_device_properties_t& properties() const { return properties_; }
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
  // cuBLASLt on this device, opened at its first matmul plan (ops/).
  ops::DeviceBlas& blas() const { return *blas_; }

  // Makes the device's context current on the calling thread (the table may
  // be called from any thread). Returns the driver's answer.
  CUresult bind() const { return api().cuCtxSetCurrent(context_); }
  // report().fail() with |result|'s mapping, its code and its name.
  hal_result_t fail(CUresult result, const char* what) const;
  hal_result_t fail(hal_result_t mapped, CUresult result, const char* what) const;

  Stream* add_stream(std::unique_ptr<Stream> stream);
  void remove_stream(Stream* stream);
  Event* add_event(std::unique_ptr<Event> event);
  void remove_event(Event* event);
  Module* add_module(std::unique_ptr<Module> module);
  void remove_module(Module* module);

  hal_result_t allocate(hal_memory_kind_t kind, size_t size, size_t alignment, void** out_ptr);
  hal_result_t free(void* ptr);

  hal_result_t synchronize();
  void release_all();

 private:
  void read_properties();

  struct Allocation {
    hal_memory_kind_t kind;
    void* base;  // what the driver returned (below the pointer when over-aligned)
  };

  plugin::ErrorReporter report_;
  const Driver& driver_;
  const Nvrtc* nvrtc_;
  const collective::Nccl* nccl_;
  CUdevice handle_;
  CUcontext context_;
  uint32_t index_;
  int cc_major_ = 0, cc_minor_ = 0;
  hal_device_properties_t properties_{};
  std::unique_ptr<ops::DeviceBlas> blas_;  // its handle is destroyed before the context
  plugin::OwnedSet<Stream, std::unique_ptr<Stream>> streams_;
  plugin::OwnedSet<Event, std::unique_ptr<Event>> events_;
  plugin::OwnedSet<Module, std::unique_ptr<Module>> modules_;
  std::mutex mutex_;                                   // guards allocations_
  std::unordered_map<void*, Allocation> allocations_;  // guarded by mutex_
};

inline Device* to_device(hal_impl_device_t* device) {
  return reinterpret_cast<Device*>(device);
}

// The table's device entries: hal_plugin_sdk/device_entries.hpp.
using DeviceEntries = plugin::DeviceEntries<Device>;

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_DEVICE_HPP_
