// The table entries of a plugin written once, over the plugin's own classes:
// each entry casts its opaque handles to the plugin's objects, runs the
// object's method under guarded() (report.hpp: no exception crosses the C
// table) and hands back what the method made. A plugin keeps only its
// objects' methods, one file per object (plugins/null/README.md, "Where
// things go"), and names the entries it implements (table.hpp):
//
//   using Entries = plugin::ObjectEntries<Plugin, Device, Stream, Event, Module, Kernel>;
//   constexpr hal_plugin_table_v1_t kTable = plugin::make_table<Entries, plugin::kCoreEntries>();
//
// Only the entries a table takes are compiled, so a class defines only the
// methods of the entries its plugin implements. The methods are declared
// once, below (HAL_PLUGIN_*_METHODS): a class expands its macro in a public
// section, and the names Device, Stream, Event, Module and Kernel there are
// its plugin's classes. Besides them:
// - Plugin (the context): devices(), the std::vector<std::unique_ptr<Device>>
//   found at load (objects.hpp's PluginBase has the rest of a context).
//   plugin_shutdown calls release_all() on each device, then deletes the
//   Plugin.
// - Device: report(), properties() (a hal_device_properties_t), release_all()
//   and remove_stream/remove_event/remove_module (objects.hpp's DeviceBase
//   has all but properties()).
// - Stream, Event, Module: device() (objects.hpp's DeviceResource).
// - Kernel: write_info(hal_kernel_info_t*) (kernel_signature.hpp's KernelInfo).
// - Comm: device(), the makers of HAL_PLUGIN_COMM_METHODS, destroy() (then it
//   is deleted), abort(), error() and enqueue(Stream&,
//   std::span<const hal_collective_call_t>).
// - OpPlan: static create(Device&, const hal_op_header_t&, hal_op_plan_flags_t,
//   std::unique_ptr<OpPlan>&, size_t& workspace_bytes, const char*& implementation);
//   static implementation(hal_op_kind_t): the name create uses for that kind
//   (static storage), or nullptr when the plugin has none of its own for it
//   and enqueue(Stream&, const hal_op_exec_args_t&) const; op_plan_destroy
//   deletes it.
// A method answers hal_result_t, or void for "cannot fail". The loader has
// checked every argument (SPEC.md §10.2): the methods trust them.
#ifndef HAL_PLUGIN_SDK_ENTRIES_HPP_
#define HAL_PLUGIN_SDK_ENTRIES_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "hal_plugin.h"
#include "hal_plugin_sdk/report.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"

// device_synchronize, mem_alloc, mem_free.
#define HAL_PLUGIN_DEVICE_METHODS                                                               \
  hal_result_t synchronize();                                                                   \
  hal_result_t allocate(hal_memory_kind_t kind, size_t size, size_t alignment, void** out_ptr); \
  hal_result_t free(void* ptr)

// stream_create, memcpy_async, memset_async, stream_synchronize,
// stream_query, stream_wait_event, stream_enqueue_host_fn.
#define HAL_PLUGIN_STREAM_METHODS                                                            \
  static hal_result_t create(Device& device, hal_stream_flags_t flags, Stream*& out_stream); \
  hal_result_t copy(void* dst, const void* src, size_t size);                                \
  hal_result_t fill(void* dst, uint8_t value, size_t size);                                  \
  hal_result_t synchronize();                                                                \
  hal_result_t query();                                                                      \
  hal_result_t wait(Event& event);                                                           \
  hal_result_t enqueue_host_fn(hal_host_fn_t fn, void* user_data)

// event_create, event_record, event_query, event_synchronize,
// event_elapsed_ms (both of one device).
#define HAL_PLUGIN_EVENT_METHODS                                                          \
  static hal_result_t create(Device& device, hal_event_flags_t flags, Event*& out_event); \
  hal_result_t record(Stream& stream);                                                    \
  hal_result_t query();                                                                   \
  hal_result_t synchronize();                                                             \
  static hal_result_t elapsed_ms(Event& start, Event& end, float& out_ms)

// module_load, kernel_get (the entry writes out_info from the Kernel, a
// KernelInfo: kernel_signature.hpp).
#define HAL_PLUGIN_MODULE_METHODS                                                               \
  static hal_result_t load(Device& device, const hal_module_desc_t& desc, Module*& out_module); \
  hal_result_t get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel)

// launch_kernel.
#define HAL_PLUGIN_KERNEL_METHODS                                                            \
  hal_result_t launch(Stream& stream, const hal_launch_config_t& config, uint32_t arg_count, \
                      const hal_kernel_arg_t* args)

// comm_init_local (the made ranks in |out_comms|, in order), comm_init_rank,
// comm_init_rank_exchange.
#define HAL_PLUGIN_COMM_METHODS                                                          \
  static hal_result_t init_local(std::span<Device* const> devices,                       \
                                 const hal_comm_config_t& config,                        \
                                 std::vector<std::unique_ptr<Comm>>& out_comms);         \
  static hal_result_t init_rank(Device& device, uint32_t nranks, uint32_t rank,          \
                                const hal_comm_config_t& config, Comm*& out_comm);       \
  static hal_result_t init_rank_exchange(Device& device, uint32_t nranks, uint32_t rank, \
                                         const hal_comm_config_t& config,                \
                                         const hal_comm_exchange_t& exchange, Comm*& out_comm)

namespace hal::plugin {

// The plugin object behind an opaque handle, and the handle of an object:
// the one cast between the C table and a plugin's classes.
template <class Object, class Handle>
Object& object_of(Handle* handle) {
  return *reinterpret_cast<Object*>(handle);
}
template <class Handle, class Object>
Handle* handle_of(Object* object) {
  return reinterpret_cast<Handle*>(object);
}

// Whose ErrorReporter speaks for |object|: its own, else its device's.
template <class Object>
const ErrorReporter& reporter_of(const Object& object) {
  if constexpr (requires { object.report(); }) {
    return object.report();
  } else {
    return reporter_of(object.device());
  }
}

// Runs |method| under guarded(): a void method is HAL_SUCCESS.
template <class Method>
hal_result_t run_guarded(const ErrorReporter& report, const char* entry, Method&& method) noexcept {
  return guarded(report, entry, [&]() -> hal_result_t {
    if constexpr (std::is_void_v<std::invoke_result_t<Method&>>) {
      method();
      return HAL_SUCCESS;
    } else {
      return method();
    }
  });
}

template <class Plugin, class Device, class Stream = void, class Event = void, class Module = void,
          class Kernel = void, class Comm = void, class OpPlan = void>
struct ObjectEntries {
  // ---- plugin ---------------------------------------------------------------

  // Called once, after every other call returned. What the application left
  // on a device is finished and freed while a failure can still be dropped;
  // then the plugin is deleted.
  static void plugin_shutdown(hal_plugin_context_t* context) noexcept {
    std::unique_ptr<Plugin> plugin(&object_of<Plugin>(context));
    try {
      for (const auto& device : plugin->devices()) device->release_all();
    } catch (...) {
    }
  }

  static hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count) {
    *out_count = static_cast<uint32_t>(object_of<Plugin>(context).devices().size());
    return HAL_SUCCESS;
  }

  // The loader asks for 0..device_count-1 only, once each (SPEC.md §10.3).
  static hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                                  hal_impl_device_t** out_device) {
    *out_device = handle_of<hal_impl_device_t>(object_of<Plugin>(context).devices()[index].get());
    return HAL_SUCCESS;
  }

  // device_close returns nothing: a failure while releasing is dropped, as
  // the loader could not act on it.
  static void device_close(hal_impl_device_t* device) noexcept {
    try {
      object_of<Device>(device).release_all();
    } catch (...) {
    }
  }

  // ---- device ---------------------------------------------------------------

  // Never past the loader's struct_size: it may be an older, smaller struct.
  static hal_result_t device_get_properties(hal_impl_device_t* device,
                                            hal_device_properties_t* out_properties) {
    const Device& self = object_of<Device>(device);
    return run_guarded(self.report(), "device_get_properties",
                       [&] { write_versioned_struct(self.properties(), out_properties); });
  }

  static hal_result_t device_synchronize(hal_impl_device_t* device) {
    Device& self = object_of<Device>(device);
    return run_guarded(self.report(), "device_synchronize", [&] { return self.synchronize(); });
  }

  // ---- memory ---------------------------------------------------------------

  static hal_result_t mem_alloc(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                                size_t alignment, void** out_ptr) {
    Device& self = object_of<Device>(device);
    return run_guarded(self.report(), "mem_alloc",
                       [&] { return self.allocate(kind, size, alignment, out_ptr); });
  }

  // The loader synchronised the device first: nothing enqueued uses |ptr|.
  static hal_result_t mem_free(hal_impl_device_t* device, void* ptr) {
    Device& self = object_of<Device>(device);
    return run_guarded(self.report(), "mem_free", [&] { return self.free(ptr); });
  }

  static hal_result_t memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src,
                                   size_t size) {
    Stream& self = object_of<Stream>(stream);
    return run_guarded(reporter_of(self), "memcpy_async",
                       [&] { return self.copy(dst, src, size); });
  }

  static hal_result_t memset_async(hal_impl_stream_t* stream, void* dst, uint8_t value,
                                   size_t size) {
    Stream& self = object_of<Stream>(stream);
    return run_guarded(reporter_of(self), "memset_async",
                       [&] { return self.fill(dst, value, size); });
  }

  // ---- stream ---------------------------------------------------------------

  static hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t flags,
                                    hal_impl_stream_t** out_stream) {
    return create<Stream>(device, "stream_create", out_stream, [&](Device& owner, Stream*& out) {
      return Stream::create(owner, flags, out);
    });
  }

  // The loader synchronised the stream first.
  static hal_result_t stream_destroy(hal_impl_stream_t* stream) {
    Stream& self = object_of<Stream>(stream);
    return run_guarded(reporter_of(self), "stream_destroy",
                       [&] { return self.device().remove_stream(&self); });
  }

  static hal_result_t stream_synchronize(hal_impl_stream_t* stream) {
    return on<Stream>(stream, "stream_synchronize",
                      [](Stream& self) { return self.synchronize(); });
  }

  static hal_result_t stream_query(hal_impl_stream_t* stream) {
    return on<Stream>(stream, "stream_query", [](Stream& self) { return self.query(); });
  }

  // |event| is this plugin's, maybe of another of its devices.
  static hal_result_t stream_wait_event(hal_impl_stream_t* stream, hal_impl_event_t* event) {
    return on<Stream>(stream, "stream_wait_event",
                      [&](Stream& self) { return self.wait(object_of<Event>(event)); });
  }

  static hal_result_t stream_enqueue_host_fn(hal_impl_stream_t* stream, hal_host_fn_t fn,
                                             void* user_data) {
    return on<Stream>(stream, "stream_enqueue_host_fn",
                      [&](Stream& self) { return self.enqueue_host_fn(fn, user_data); });
  }

  // ---- event ----------------------------------------------------------------

  static hal_result_t event_create(hal_impl_device_t* device, hal_event_flags_t flags,
                                   hal_impl_event_t** out_event) {
    return create<Event>(device, "event_create", out_event, [&](Device& owner, Event*& out) {
      return Event::create(owner, flags, out);
    });
  }

  // Waits already enqueued on the event still complete.
  static hal_result_t event_destroy(hal_impl_event_t* event) {
    Event& self = object_of<Event>(event);
    return run_guarded(reporter_of(self), "event_destroy",
                       [&] { return self.device().remove_event(&self); });
  }

  // The stream is on the event's device.
  static hal_result_t event_record(hal_impl_event_t* event, hal_impl_stream_t* stream) {
    return on<Event>(event, "event_record",
                     [&](Event& self) { return self.record(object_of<Stream>(stream)); });
  }

  static hal_result_t event_query(hal_impl_event_t* event) {
    return on<Event>(event, "event_query", [](Event& self) { return self.query(); });
  }

  static hal_result_t event_synchronize(hal_impl_event_t* event) {
    return on<Event>(event, "event_synchronize", [](Event& self) { return self.synchronize(); });
  }

  // Both timing events of one device (the loader checked).
  static hal_result_t event_elapsed_ms(hal_impl_event_t* start, hal_impl_event_t* end,
                                       float* out_ms) {
    return on<Event>(start, "event_elapsed_ms", [&](Event& first) {
      return Event::elapsed_ms(first, object_of<Event>(end), *out_ms);
    });
  }

  // ---- module and kernel ----------------------------------------------------

  static hal_result_t module_load(hal_impl_device_t* device, const hal_module_desc_t* desc,
                                  hal_impl_module_t** out_module) {
    return create<Module>(device, "module_load", out_module, [&](Device& owner, Module*& out) {
      return Module::load(owner, *desc, out);
    });
  }

  // The loader synchronised the device first; the module's kernels go with it.
  static hal_result_t module_unload(hal_impl_module_t* module) {
    Module& self = object_of<Module>(module);
    return run_guarded(reporter_of(self), "module_unload",
                       [&] { return self.device().remove_module(&self); });
  }

  static hal_result_t kernel_get(hal_impl_module_t* module, const hal_kernel_desc_t* desc,
                                 hal_impl_kernel_t** out_kernel, hal_kernel_info_t* out_info) {
    return on<Module>(module, "kernel_get", [&](Module& self) {
      Kernel* kernel = nullptr;
      const hal_result_t result = self.get_kernel(*desc, kernel);
      if (result != HAL_SUCCESS) return result;
      // What the kernel is bound to; the loader compares a declared
      // signature with it.
      kernel->write_info(out_info);
      *out_kernel = handle_of<hal_impl_kernel_t>(kernel);
      return HAL_SUCCESS;
    });
  }

  // The loader checked the shape, the shared memory and the arguments against
  // the kernel (SPEC.md §10.3).
  static hal_result_t launch_kernel(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                                    const hal_launch_config_t* config, uint32_t arg_count,
                                    const hal_kernel_arg_t* args) {
    return on<Stream>(stream, "launch_kernel", [&](Stream& target) {
      return object_of<Kernel>(kernel).launch(target, *config, arg_count, args);
    });
  }

  // ---- collectives ----------------------------------------------------------

  static hal_result_t comm_init_local(uint32_t count, hal_impl_device_t* const* devices,
                                      const hal_comm_config_t* config,
                                      hal_impl_comm_t** out_comms) {
    const Device& first = object_of<Device>(devices[0]);
    return run_guarded(first.report(), "comm_init_local", [&] {
      std::vector<Device*> members(count);
      for (uint32_t i = 0; i < count; ++i) members[i] = &object_of<Device>(devices[i]);
      std::vector<std::unique_ptr<Comm>> made;
      const hal_result_t result =
          Comm::init_local(std::span<Device* const>(members), *config, made);
      if (result != HAL_SUCCESS) return result;
      for (uint32_t i = 0; i < count; ++i)
        out_comms[i] = handle_of<hal_impl_comm_t>(made[i].release());
      return HAL_SUCCESS;
    });
  }

  static hal_result_t comm_init_rank(hal_impl_device_t* device, uint32_t nranks, uint32_t rank,
                                     const hal_comm_config_t* config, hal_impl_comm_t** out_comm) {
    return create<Comm>(device, "comm_init_rank", out_comm, [&](Device& owner, Comm*& out) {
      return Comm::init_rank(owner, nranks, rank, *config, out);
    });
  }

  static hal_result_t comm_init_rank_exchange(hal_impl_device_t* device, uint32_t nranks,
                                              uint32_t rank, const hal_comm_config_t* config,
                                              const hal_comm_exchange_t* exchange,
                                              hal_impl_comm_t** out_comm) {
    return create<Comm>(device, "comm_init_rank", out_comm, [&](Device& owner, Comm*& out) {
      return Comm::init_rank_exchange(owner, nranks, rank, *config, *exchange, out);
    });
  }

  // Calls already enqueued keep what they need.
  static hal_result_t comm_destroy(hal_impl_comm_t* comm) {
    std::unique_ptr<Comm> owned(&object_of<Comm>(comm));
    return run_guarded(reporter_of(*owned), "comm_destroy", [&] { return owned->destroy(); });
  }

  // Bounded; never waits for peers. Returns nothing: a failure is dropped.
  static void comm_abort(hal_impl_comm_t* comm) noexcept {
    try {
      object_of<Comm>(comm).abort();
    } catch (...) {
    }
  }

  static hal_result_t comm_get_async_error(hal_impl_comm_t* comm) {
    return on<Comm>(comm, "comm_get_async_error", [](Comm& self) { return self.error(); });
  }

  static hal_result_t comm_enqueue(hal_impl_comm_t* comm, hal_impl_stream_t* stream,
                                   uint32_t call_count, const hal_collective_call_t* calls) {
    return on<Comm>(comm, "comm_enqueue", [&](Comm& self) {
      return self.enqueue(object_of<Stream>(stream),
                          std::span<const hal_collective_call_t>(calls, call_count));
    });
  }

  // ---- operators ------------------------------------------------------------

  // A plan the plugin does not serve is declined: HAL_ERROR_UNSUPPORTED with
  // set_error saying why; the loader tries the next implementation.
  static hal_result_t op_plan_create(hal_impl_device_t* device, const hal_op_header_t* desc,
                                     hal_op_plan_flags_t flags, hal_impl_op_plan_t** out_plan,
                                     size_t* out_workspace_bytes, const char** out_implementation) {
    Device& owner = object_of<Device>(device);
    return run_guarded(owner.report(), "op_plan_create", [&] {
      std::unique_ptr<OpPlan> plan;
      const hal_result_t result =
          OpPlan::create(owner, *desc, flags, plan, *out_workspace_bytes, *out_implementation);
      if (result == HAL_SUCCESS) *out_plan = handle_of<hal_impl_op_plan_t>(plan.release());
      return result;
    });
  }

  // Names, before planning, the implementation op_plan_create would use for
  // |kind| (nullptr: none), so the loader filters it before any work.
  static const char* op_implementation(hal_impl_device_t*, hal_op_kind_t kind) {
    return OpPlan::implementation(kind);
  }

  // Executions already enqueued keep what they need.
  static hal_result_t op_plan_destroy(hal_impl_op_plan_t* plan) {
    std::unique_ptr<OpPlan> owned(&object_of<OpPlan>(plan));
    return HAL_SUCCESS;
  }

  static hal_result_t op_execute(hal_impl_op_plan_t* plan, hal_impl_stream_t* stream,
                                 const hal_op_exec_args_t* args) {
    return on<Stream>(stream, "op_execute", [&](Stream& target) {
      return object_of<OpPlan>(plan).enqueue(target, *args);
    });
  }

 private:
  // |method|(object) under its reporter's guard.
  template <class Object, class Handle, class Method>
  static hal_result_t on(Handle* handle, const char* entry, Method&& method) {
    Object& self = object_of<Object>(handle);
    return run_guarded(reporter_of(self), entry, [&] { return method(self); });
  }

  // |make|(device, out) under the device's guard; the handle of what it made.
  template <class Object, class Handle, class Make>
  static hal_result_t create(hal_impl_device_t* device, const char* entry, Handle** out_handle,
                             Make&& make) {
    Device& owner = object_of<Device>(device);
    return run_guarded(owner.report(), entry, [&] {
      Object* made = nullptr;
      const hal_result_t result = make(owner, made);
      if (result == HAL_SUCCESS) *out_handle = handle_of<Handle>(made);
      return result;
    });
  }
};

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_ENTRIES_HPP_
