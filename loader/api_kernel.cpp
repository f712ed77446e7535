// hal/kernel.h: modules, kernels and launches, checked before the plugin sees them.
#include "api_common.hpp"
#include "buffers.hpp"
#include "layers/intercept.hpp"
#include "fallbacks.hpp"
#include "host_functions.hpp"
#include "hal_util/arg_types.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

using namespace hal::loader;

namespace {

constexpr uint32_t kLastModuleFormat = HAL_MODULE_FORMAT_HAL_DIALECT;
constexpr uint32_t kLastArgType = HAL_ARG_F64;

bool kernels_supported(const hal_device_s* device) {
  return (device->properties.capabilities & HAL_DEVICE_CAP_KERNELS) != 0 && device->plugin->kernels;
}

hal_result_t check_module_desc(const hal_device_s* device, const hal_module_desc_t* desc,
                               const char* function) {
  // desc is not NULL: hal_module_load's preconditions.
  hal_result_t result = HAL_SUCCESS;
  if (struct_too_small(desc, function, "desc", "hal_module_desc_t", result)) return result;
  if (static_cast<uint32_t>(desc->format) > kLastModuleFormat) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "desc->format %u is not a hal_module_format_t",
                static_cast<uint32_t>(desc->format));
  }
  const bool has_data = desc->data != nullptr;
  const bool has_path = desc->path != nullptr;
  if (has_data == has_path) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "desc must give exactly one of data and path, it gives %s",
                has_data ? "both" : "neither");
  }
  if (has_data && desc->size == 0) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function, "desc->size is 0 with desc->data set");
  }
  if (!kernels_supported(device)) {
    return fail(HAL_ERROR_UNSUPPORTED, function,
                "device %u (plugin '%s') does not support kernels (no HAL_DEVICE_CAP_KERNELS)",
                device->properties.index, device->plugin->name.c_str());
  }
  if ((device->properties.module_formats & (1u << desc->format)) == 0) {
    return fail(HAL_ERROR_UNSUPPORTED, function,
                "device %u (plugin '%s') cannot load module format %u (its formats mask is 0x%x)",
                device->properties.index, device->plugin->name.c_str(),
                static_cast<uint32_t>(desc->format), device->properties.module_formats);
  }
  if (has_path) {
    std::error_code error;
    if (!std::filesystem::exists(desc->path, error)) {
      return fail(HAL_ERROR_NOT_FOUND, function, "desc->path '%s' does not exist", desc->path);
    }
  }
  return HAL_SUCCESS;
}

hal_result_t check_launch_shape(const hal_kernel_s* kernel, const hal_launch_config_t* config,
                                const char* function) {
  const hal_device_properties_t& limits = kernel->device->properties;
  static constexpr const char* kAxis[3] = {"x", "y", "z"};
  uint64_t threads = 1;
  for (int axis = 0; axis < 3; ++axis) {
    if (config->grid[axis] == 0 || config->block[axis] == 0) {
      return fail(HAL_ERROR_INVALID_LAUNCH, function, "config->%s[%d] (%s) is 0",
                  config->grid[axis] == 0 ? "grid" : "block", axis, kAxis[axis]);
    }
    if (config->grid[axis] > limits.max_grid_dims[axis]) {
      return fail(HAL_ERROR_INVALID_LAUNCH, function,
                  "config->grid[%d] is %u, above the device's max_grid_dims[%d] %u", axis,
                  config->grid[axis], axis, limits.max_grid_dims[axis]);
    }
    if (config->block[axis] > limits.max_block_dims[axis]) {
      return fail(HAL_ERROR_INVALID_LAUNCH, function,
                  "config->block[%d] is %u, above the device's max_block_dims[%d] %u", axis,
                  config->block[axis], axis, limits.max_block_dims[axis]);
    }
    threads *= config->block[axis];
  }
  uint32_t max_threads = limits.max_threads_per_block;
  if (kernel->info.max_threads_per_block != 0 && kernel->info.max_threads_per_block < max_threads)
    max_threads = kernel->info.max_threads_per_block;
  if (threads > max_threads) {
    return fail(HAL_ERROR_INVALID_LAUNCH, function,
                "the block has %llu threads, above the %u allowed per block",
                static_cast<unsigned long long>(threads), max_threads);
  }
  // The kernel's own (static) shared memory and the launch's dynamic share
  // one per-block budget.
  const uint32_t static_shared = kernel->info.static_shared_memory_bytes;
  if (uint64_t{config->shared_memory_bytes} + static_shared > limits.max_shared_memory_bytes) {
    return fail(HAL_ERROR_INVALID_LAUNCH, function,
                "config->shared_memory_bytes is %u; with the %u bytes of static shared memory "
                "of kernel '%s' that is above the device's max_shared_memory_bytes %u",
                config->shared_memory_bytes, static_shared, kernel->name.c_str(),
                limits.max_shared_memory_bytes);
  }
  return HAL_SUCCESS;
}

// SPEC §4.1 step 4 for a launch's arguments, left to right after config: the
// count's range, then the pointers it makes required (args, each value).
// Nothing here reads past the caller's arg_count entries, and arg_count is
// at most HAL_MAX_KERNEL_ARGS before any is read.
hal_result_t check_launch_values(uint32_t arg_count, const hal_kernel_arg_t* args,
                                 const char* function) {
  if (arg_count > HAL_MAX_KERNEL_ARGS) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "arg_count is %u, above HAL_MAX_KERNEL_ARGS (%d)", arg_count, HAL_MAX_KERNEL_ARGS);
  }
  if (arg_count > 0 && args == nullptr) {
    return fail(HAL_ERROR_NULL_POINTER, function, "args is NULL with arg_count %u", arg_count);
  }
  for (uint32_t i = 0; i < arg_count; ++i) {
    if (args[i].value == nullptr) {
      return fail(HAL_ERROR_NULL_POINTER, function, "args[%u].value is NULL", i);
    }
  }
  return HAL_SUCCESS;
}

// SPEC §4.1 step 8, after the launch shape: the arguments against the
// kernel's signature in count and size, then no pointer argument into memory
// hal_mem_free released (§6, "Freed memory").
hal_result_t check_launch_signature(const Registry& registry, const hal_kernel_s* kernel,
                                    uint32_t arg_count, const hal_kernel_arg_t* args,
                                    const char* function) {
  const hal_kernel_info_t& info = kernel->info;
  if (arg_count != info.arg_count) {
    return fail(HAL_ERROR_ARGUMENT_MISMATCH, function, "arg_count is %u but kernel '%s' takes %u",
                arg_count, kernel->name.c_str(), info.arg_count);
  }
  for (uint32_t i = 0; i < arg_count; ++i) {
    const size_t expected = hal::util::arg_type_size(info.arg_types[i]);
    if (args[i].size != expected) {
      return fail(HAL_ERROR_ARGUMENT_MISMATCH, function,
                  "args[%u].size is %zu but argument %u of kernel '%s' is %s (%zu bytes)", i,
                  args[i].size, i, kernel->name.c_str(),
                  hal::util::arg_type_token(info.arg_types[i]), expected);
    }
  }
  for (uint32_t i = 0; i < arg_count; ++i) {
    if (info.arg_types[i] != HAL_ARG_POINTER) continue;
    uintptr_t pointer = 0;
    std::memcpy(&pointer, args[i].value, sizeof(pointer));
    if (hal_result_t freed = refuse_freed(registry, pointer, "a pointer argument", function);
        freed != HAL_SUCCESS) {
      return freed;
    }
  }
  return HAL_SUCCESS;
}

// The one signature rule (SPEC 10.3): the plugin reports the signature it
// bound, the module's own when the module carries one; a declared signature
// must be exactly that.
hal_result_t check_declared_signature(const hal_kernel_desc_t* desc, const hal_kernel_info_t& info,
                                      const char* function) {
  if (desc->arg_types == nullptr) return HAL_SUCCESS;
  const bool same = desc->arg_count == info.arg_count &&
                    std::equal(desc->arg_types, desc->arg_types + desc->arg_count, info.arg_types);
  if (same) return HAL_SUCCESS;
  return fail(HAL_ERROR_ARGUMENT_MISMATCH, function,
              "the declared signature \"%s\" of kernel '%s' disagrees with the module's \"%s\"",
              hal::util::format_signature(desc->arg_types, desc->arg_count).c_str(), desc->name,
              hal::util::format_signature(info.arg_types, info.arg_count).c_str());
}

}  // namespace

static hal_result_t module_load_body(hal_device_t device, const hal_module_desc_t* desc,
                                     hal_module_t* out_module) {
  constexpr const char* kFunction = "hal_module_load";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t result =
            check_preconditions(kFunction, Live{device, "device"}, Required{desc, "desc"},
                                Required{out_module, "out_module"});
        result != HAL_SUCCESS) {
      return result;
    }
    if (hal_result_t result = check_module_desc(device, desc, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    const PluginRecord& plugin = *device->plugin;
    hal_impl_module_t* impl = nullptr;
    if (hal_result_t result = plugin.table.module_load(device->impl, desc, &impl);
        result != HAL_SUCCESS) {
      return fail_from_plugin(result, kFunction, plugin.name);
    }
    HandleOwner<hal_module_s> module;
    try {
      module = make_handle<hal_module_s>(&plugin, impl, device);
    } catch (...) {
      if (plugin.table.module_unload != nullptr) plugin.table.module_unload(impl);
      throw;
    }
    *out_module = device->modules.add(std::move(module));
    return HAL_SUCCESS;
  });
}

static hal_result_t module_unload_body(hal_module_t module) {
  constexpr const char* kFunction = "hal_module_unload";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t result = check_preconditions(kFunction, Nullable{module, "module"});
        result != HAL_SUCCESS) {
      return result;
    }
    if (module == nullptr) return HAL_SUCCESS;
    if (hal_result_t result = refuse_wait_in_host_fn(nullptr, module->device, kFunction);
        result != HAL_SUCCESS) {
      return result;
    }
    // One unload wins, after the calls using the module (kernel_get) and its
    // kernels (launches, infos) have returned; none can start afterwards.
    if (!begin_destroy(module->header)) {
      return reject_destroying(module, HandleKind::kModule, kFunction, "module");
    }
    {
      std::lock_guard lock(module->kernels_mutex);
      for (auto& kernel : module->kernels) begin_destroy(kernel->header);
    }
    HandleOwner<hal_module_s> owned = module->device->modules.take(module);
    // Launches of its kernels may still be queued: they finish first. A lost
    // stream, whatever its loss code, does not stop the unload (SPEC 4.4).
    drain_device(module->device, kFunction);
    const PluginRecord& plugin = *module->header.plugin;
    hal_result_t result = HAL_SUCCESS;
    const hal_result_t unloaded = plugin.table.module_unload(module->impl);
    if (unloaded != HAL_SUCCESS) result = fail_from_plugin(unloaded, kFunction, plugin.name);
    {
      std::lock_guard lock(module->kernels_mutex);
      module->kernels.clear();
    }
    return result;
  });
}

static hal_result_t kernel_get_body(hal_module_t module, const hal_kernel_desc_t* desc,
                                    hal_kernel_t* out_kernel) {
  constexpr const char* kFunction = "hal_kernel_get";
  return guarded(kFunction, [&]() -> hal_result_t {
    HandleUse<hal_module_s> use;
    hal_result_t result =
        check_preconditions(kFunction, Held{module, "module", use}, Required{desc, "desc"},
                            Required{out_kernel, "out_kernel"});
    if (result != HAL_SUCCESS) return result;
    if (struct_too_small(desc, kFunction, "desc", "hal_kernel_desc_t", result)) return result;
    if (desc->name == nullptr) return null_argument(kFunction, "desc->name");
    if (desc->arg_count > HAL_MAX_KERNEL_ARGS) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "desc->arg_count is %u, above HAL_MAX_KERNEL_ARGS (%d)", desc->arg_count,
                  HAL_MAX_KERNEL_ARGS);
    }
    if (desc->arg_types == nullptr && desc->arg_count != 0) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "desc->arg_types is NULL but desc->arg_count is %u", desc->arg_count);
    }
    for (uint32_t i = 0; desc->arg_types != nullptr && i < desc->arg_count; ++i) {
      if (static_cast<uint32_t>(desc->arg_types[i]) > kLastArgType) {
        return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                    "desc->arg_types[%u] is %u, not a hal_arg_type_t", i,
                    static_cast<uint32_t>(desc->arg_types[i]));
      }
    }
    const PluginRecord& plugin = *module->header.plugin;
    if (!plugin.kernels) return unsupported_entry(kFunction, plugin, "the kernel entries");
    hal_kernel_info_t info{};
    info.struct_size = sizeof(info);
    hal_impl_kernel_t* impl = nullptr;
    if (hal_result_t failed = plugin.table.kernel_get(module->impl, desc, &impl, &info);
        failed != HAL_SUCCESS) {
      return fail_from_plugin(failed, kFunction, plugin.name);
    }
    if (info.arg_count > HAL_MAX_KERNEL_ARGS) {
      return fail(HAL_ERROR_INTERNAL, kFunction,
                  "plugin '%s' described kernel '%s' with %u arguments, above %d",
                  plugin.name.c_str(), desc->name, info.arg_count, HAL_MAX_KERNEL_ARGS);
    }
    if (hal_result_t mismatch = check_declared_signature(desc, info, kFunction);
        mismatch != HAL_SUCCESS) {
      // The plugin's kernel stays with its module until module_unload (the
      // table has no kernel release); a later kernel_get makes a new one.
      return mismatch;
    }
    HandleOwner<hal_kernel_s> kernel =
        make_handle<hal_kernel_s>(&plugin, impl, module->device, module);
    kernel->name = info.name != nullptr ? info.name : desc->name;
    kernel->info = info;
    kernel->info.struct_size = sizeof(hal_kernel_info_t);
    kernel->info.next = nullptr;
    kernel->info.name = kernel->name.c_str();
    hal_kernel_s* raw = kernel.get();
    {
      std::lock_guard lock(module->kernels_mutex);
      module->kernels.push_back(std::move(kernel));
    }
    *out_kernel = raw;
    return HAL_SUCCESS;
  });
}

static hal_result_t kernel_get_info_body(hal_kernel_t kernel, hal_kernel_info_t* out_info) {
  constexpr const char* kFunction = "hal_kernel_get_info";
  HandleUse<hal_kernel_s> use;
  hal_result_t result =
      check_preconditions(kFunction, Held{kernel, "kernel", use}, Required{out_info, "out_info"});
  if (result != HAL_SUCCESS) return result;
  if (struct_too_small(out_info, kFunction, "out_info", "hal_kernel_info_t", result)) {
    return result;
  }
  write_sized(kernel->info, out_info);
  return HAL_SUCCESS;
}

static hal_result_t launch_kernel_body(hal_kernel_t kernel, const hal_launch_config_t* config,
                                       uint32_t arg_count, const hal_kernel_arg_t* args,
                                       hal_stream_t stream) {
  constexpr const char* kFunction = "hal_launch_kernel";
  HandleUse<hal_kernel_s> kernel_use;
  HandleUse<hal_stream_s> stream_use;
  Registry* registry = nullptr;
  hal_result_t result =
      check_preconditions_in(registry, kFunction, Held{kernel, "kernel", kernel_use},
                             Required{config, "config"}, Held{stream, "stream", stream_use});
  if (result != HAL_SUCCESS) [[unlikely]]
    return result;
  // SPEC §4.1 from step 4 on: values (config, then the arguments), the
  // device relation, then the launch shape and the signature.
  if (struct_too_small(config, kFunction, "config", "hal_launch_config_t", result)) return result;
  if (result = check_launch_values(arg_count, args, kFunction); result != HAL_SUCCESS)
    return result;
  if (kernel->device != stream->device) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, kFunction,
                "kernel '%s' is on device %u but stream is on device %u", kernel->name.c_str(),
                kernel->device->properties.index, stream->device->properties.index);
  }
  if (result = check_launch_shape(kernel, config, kFunction); result != HAL_SUCCESS) return result;
  if (result = check_launch_signature(*registry, kernel, arg_count, args, kFunction);
      result != HAL_SUCCESS) {
    return result;
  }
  const PluginRecord& plugin = *kernel->header.plugin;
  return guarded(kFunction, [&]() -> hal_result_t {
    std::lock_guard lock(stream->enqueue_mutex);
    if (hal_result_t lost = refuse_lost_stream(stream, kFunction); lost != HAL_SUCCESS) {
      return lost;
    }
    const layers::tracing::StreamOpSpan span(stream, kFunction, 0);
    const hal_result_t launched =
        plugin.table.launch_kernel(stream->impl, kernel->impl, config, arg_count, args);
    if (launched != HAL_SUCCESS)
      return stream_entry_failed(stream, StreamEntry::kEnqueue, launched, kFunction, plugin);
    return HAL_SUCCESS;
  });
}

// ---- the public entries: the layers' hook around each body above ----

hal_result_t hal_module_load(hal_device_t device, const hal_module_desc_t* desc,
                             hal_module_t* out_module) {
  return layers::call<layers::ModuleLoad, module_load_body>(HAL_CALLER, device, desc, out_module);
}

hal_result_t hal_module_unload(hal_module_t module) {
  return layers::call<layers::ModuleUnload, module_unload_body>(HAL_CALLER, module);
}

hal_result_t hal_kernel_get(hal_module_t module, const hal_kernel_desc_t* desc,
                            hal_kernel_t* out_kernel) {
  return layers::call<layers::KernelGet, kernel_get_body>(HAL_CALLER, module, desc, out_kernel);
}

hal_result_t hal_kernel_get_info(hal_kernel_t kernel, hal_kernel_info_t* out_info) {
  return layers::call<layers::KernelGetInfo, kernel_get_info_body>(HAL_CALLER, kernel, out_info);
}

hal_result_t hal_launch_kernel(hal_kernel_t kernel, const hal_launch_config_t* config,
                               uint32_t arg_count, const hal_kernel_arg_t* args,
                               hal_stream_t stream) {
  return layers::call<layers::LaunchKernel, launch_kernel_body>(HAL_CALLER, kernel, config,
                                                                arg_count, args, stream);
}
