// What every plugin object has, written once: the context and its devices
// have the loader's error reporter; a device owns the streams, events and
// modules made on it (so that device_close frees what the application left);
// a stream, an event or a module belongs to one device; a module keeps its
// kernels. The table's entries (entries.hpp) call the methods the plugin adds.
#ifndef HAL_PLUGIN_SDK_OBJECTS_HPP_
#define HAL_PLUGIN_SDK_OBJECTS_HPP_

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "hal_plugin.h"
#include "hal_plugin_sdk/owned_set.hpp"
#include "hal_plugin_sdk/report.hpp"

namespace hal::plugin {

// A plugin's context (hal_plugin_context_t) derives from PluginBase: the
// loader's services, valid until plugin_shutdown returns. It adds what it
// opened (a driver, compilers, thread pools) and its devices, declared last
// so that they go first, and devices() for the table's entries (entries.hpp).
class PluginBase {
 public:
  explicit PluginBase(const hal_plugin_host_t* host) : report_(host) {}
  PluginBase(const PluginBase&) = delete;
  PluginBase& operator=(const PluginBase&) = delete;

  const ErrorReporter& report() const { return report_; }

 protected:
  ~PluginBase() = default;

 private:
  ErrorReporter report_;
};

// A plugin's Device derives from DeviceBase<Stream, Event, Module>. Each
// object is owned by a std::unique_ptr whose destructor finishes it (a
// stream's waits for its work): the create methods hand theirs to add_*,
// the table's destroy entries call remove_*, device_close release_all().
// The derived destructor calls release_all() first, while the device's own
// members (its driver context) are still there.
template <class Stream, class Event, class Module>
class DeviceBase {
 public:
  explicit DeviceBase(const ErrorReporter& report) : report_(report) {}
  DeviceBase(const DeviceBase&) = delete;
  DeviceBase& operator=(const DeviceBase&) = delete;

  const ErrorReporter& report() const { return report_; }

  Stream* add_stream(std::unique_ptr<Stream> stream) { return streams_.add(std::move(stream)); }
  void remove_stream(Stream* stream) { streams_.take(stream); }
  Event* add_event(std::unique_ptr<Event> event) { return events_.add(std::move(event)); }
  void remove_event(Event* event) { events_.take(event); }
  Module* add_module(std::unique_ptr<Module> module) { return modules_.add(std::move(module)); }
  void remove_module(Module* module) { modules_.take(module); }

  // Finishes and frees every stream (first: their work may use the modules),
  // then the events and the modules.
  void release_all() {
    streams_.take_all();
    events_.take_all();
    modules_.take_all();
  }
  // Calls |visit(const std::unique_ptr<Stream>&)| on every stream, under the
  // set's lock (OwnedSet::for_each).
  template <class Visit>
  void for_each_stream(Visit&& visit) const {
    streams_.for_each(std::forward<Visit>(visit));
  }

 protected:
  ~DeviceBase() = default;

 private:
  ErrorReporter report_;
  OwnedSet<Stream, std::unique_ptr<Stream>> streams_;
  OwnedSet<Event, std::unique_ptr<Event>> events_;
  OwnedSet<Module, std::unique_ptr<Module>> modules_;
};

// A stream, an event or a module: made on one device, which outlives it.
template <class Device>
class DeviceResource {
 public:
  explicit DeviceResource(Device& device) : device_(device) {}
  DeviceResource(const DeviceResource&) = delete;
  DeviceResource& operator=(const DeviceResource&) = delete;

  Device& device() const { return device_; }

 protected:
  ~DeviceResource() = default;

 private:
  Device& device_;
};

// The kernels kernel_get took from a module: they live as long as it (the
// module's destructor clears them before it unloads the code). Thread-safe.
template <class Kernel>
class KernelList {
 public:
  Kernel& add(std::unique_ptr<Kernel> kernel) {
    std::lock_guard lock(mutex_);
    kernels_.push_back(std::move(kernel));
    return *kernels_.back();
  }
  void clear() {
    std::lock_guard lock(mutex_);
    kernels_.clear();
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Kernel>> kernels_;  // guarded by mutex_
};

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_OBJECTS_HPP_
