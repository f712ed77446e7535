// The loader-owned objects behind the public handles. Each starts with the
// DispatchHeader, followed by the plugin's object and the owning device.
#pragma once

#include "handle.hpp"
#include "plugin_library.hpp"
#include "hal_ops/device_state.hpp"
#include "hal_ops/implementation.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hal::loader {

// An event's state, shared by its handle and by waits already enqueued, so
// that destroying the event never pulls the state from under a pending wait.
struct EventState {
  EventState(const PluginRecord* owner, hal_impl_event_t* plugin_event, bool timing)
      : plugin(owner), impl(plugin_event), timing_enabled(timing) {}
  EventState(const EventState&) = delete;
  EventState& operator=(const EventState&) = delete;
  ~EventState() {
    if (impl != nullptr && plugin->table.event_destroy != nullptr)
      plugin->table.event_destroy(impl);
  }

  const PluginRecord* plugin;
  hal_impl_event_t* impl;  // the plugin's event, or NULL for a loader event
  const bool timing_enabled;

  // Loader events: each record is a generation; a host function enqueued
  // behind the recorded work marks it complete.
  std::mutex mutex;
  std::condition_variable completed_cv;
  uint64_t recorded_generation = 0;
  uint64_t completed_generation = 0;
};

}  // namespace hal::loader

struct hal_stream_s {
  static constexpr hal::loader::HandleKind kKind = hal::loader::HandleKind::kStream;
  hal_stream_s(const hal::loader::PluginRecord* plugin, hal_impl_stream_t* plugin_stream,
               hal_device_s* owner)
      : header(hal::loader::HandleKind::kStream, plugin), impl(plugin_stream), device(owner) {}
  hal::loader::DispatchHeader header;
  hal_impl_stream_t* impl;
  hal_device_s* device;
  // Serialises the enqueue entries of this stream (memcpy, memset, waits,
  // host functions, records, launches), so plugins need no lock of their own.
  // Never held around stream_synchronize or stream_query.
  std::mutex enqueue_mutex;
  // The code the stream was lost with (HAL_SUCCESS while it is not), set once
  // a plugin entry reported the loss (plugin_reported_loss, SPEC 4.4): later
  // enqueues are refused by the loader with that code, for every plugin alike.
  std::atomic<hal_result_t> loss{HAL_SUCCESS};
};

struct hal_event_s {
  static constexpr hal::loader::HandleKind kKind = hal::loader::HandleKind::kEvent;
  hal_event_s(const hal::loader::PluginRecord* plugin, hal_device_s* owner,
              std::shared_ptr<hal::loader::EventState> event_state, hal_event_flags_t event_flags)
      : header(hal::loader::HandleKind::kEvent, plugin),
        device(owner),
        state(std::move(event_state)),
        flags(event_flags) {}
  hal::loader::DispatchHeader header;
  hal_device_s* device;
  std::shared_ptr<hal::loader::EventState> state;
  hal_event_flags_t flags;
};

struct hal_kernel_s {
  static constexpr hal::loader::HandleKind kKind = hal::loader::HandleKind::kKernel;
  hal_kernel_s(const hal::loader::PluginRecord* plugin, hal_impl_kernel_t* plugin_kernel,
               hal_device_s* owner, hal_module_s* owning_module)
      : header(hal::loader::HandleKind::kKernel, plugin),
        impl(plugin_kernel),
        device(owner),
        module(owning_module) {}
  hal::loader::DispatchHeader header;
  hal_impl_kernel_t* impl;
  hal_device_s* device;
  hal_module_s* module;
  hal_kernel_info_t info{};  // as kernel_get resolved it; info.name points at |name|
  std::string name;
};

struct hal_module_s {
  static constexpr hal::loader::HandleKind kKind = hal::loader::HandleKind::kModule;
  hal_module_s(const hal::loader::PluginRecord* plugin, hal_impl_module_t* plugin_module,
               hal_device_s* owner)
      : header(hal::loader::HandleKind::kModule, plugin), impl(plugin_module), device(owner) {}
  hal::loader::DispatchHeader header;
  hal_impl_module_t* impl;
  hal_device_s* device;
  std::mutex kernels_mutex;
  std::vector<hal::loader::HandleOwner<hal_kernel_s>> kernels;
};

// An operator plan (api_ops.cpp): the checked descriptor, its signature, and
// the implementation that accepted it: the plugin's plan or the loader's.
struct hal_op_plan_s {
  static constexpr hal::loader::HandleKind kKind = hal::loader::HandleKind::kOpPlan;
  hal_op_plan_s(const hal::loader::PluginRecord* plugin, hal_device_s* owner)
      : header(hal::loader::HandleKind::kOpPlan, plugin), device(owner) {}
  hal_op_plan_s(const hal_op_plan_s&) = delete;
  hal_op_plan_s& operator=(const hal_op_plan_s&) = delete;
  ~hal_op_plan_s() {
    if (plugin_plan != nullptr) header.plugin->table.op_plan_destroy(plugin_plan);
  }
  hal::loader::DispatchHeader header;
  hal_device_s* device;
  hal_op_plan_flags_t flags = 0;
  std::vector<unsigned char> desc;        // the caller's descriptor, copied
  std::vector<int64_t> numels;            // AdamW's sizes, copied (desc points here)
  std::vector<hal_tensor_desc_t> inputs;  // CAT's inputs, copied (desc points here)
  hal::ops::OpSignature signature;
  hal_impl_op_plan_t* plugin_plan = nullptr;               // the plugin's, or
  std::shared_ptr<const hal::ops::PlannedOp> loader_plan;  // the loader's
  size_t workspace_bytes = 0;
  std::string implementation;
  std::string declines;  // "name: reason\n" per implementation that declined

  const hal_op_header_t* header_of_desc() const {
    return reinterpret_cast<const hal_op_header_t*>(desc.data());
  }
};

struct hal_device_s {
  static constexpr hal::loader::HandleKind kKind = hal::loader::HandleKind::kDevice;
  hal_device_s(hal::loader::PluginRecord* owner, hal_impl_device_t* plugin_device)
      : header(hal::loader::HandleKind::kDevice, owner), impl(plugin_device), plugin(owner) {}
  hal::loader::DispatchHeader header;
  hal_impl_device_t* impl;
  hal::loader::PluginRecord* plugin;
  hal_device_properties_t properties{};  // cached at init; immutable afterwards
  hal::loader::LiveSet<hal_stream_s> streams;
  hal::loader::LiveSet<hal_event_s> events;
  hal::loader::LiveSet<hal_module_s> modules;
  hal::loader::LiveSet<hal_op_plan_s> op_plans;
  // The loader's operator implementations' per-device caches (api_ops.cpp),
  // made at the first plan.
  std::mutex ops_mutex;
  std::unique_ptr<hal::ops::DeviceState> ops_state;
};

namespace hal::loader {

// The table of the plugin behind a live handle.
template <class Handle>
inline const hal_plugin_table_v1_t& table_of(const Handle* handle) noexcept {
  return handle->header.plugin->table;
}

}  // namespace hal::loader
