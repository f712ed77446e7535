// hal/memory.h: allocations, their table, and bounds-checked copies and fills.
#include "api_common.hpp"
#include "buffers.hpp"
#include "layers/intercept.hpp"
#include "fallbacks.hpp"
#include "host_functions.hpp"
#include "hal_util/names.hpp"

using namespace hal::loader;

namespace {

// Gives freed allocations back to their plugins (SPEC.md §6, "Freed
// memory"). Their devices were drained when they were freed. A plugin that
// fails to free one has broken its contract; nothing can be done for the
// caller, whose hal_mem_free succeeded long ago.
void give_back(const std::vector<Allocation>& released) noexcept {
  for (const Allocation& allocation : released) {
    table_of(allocation.device)
        .mem_free(allocation.device->impl, reinterpret_cast<void*>(allocation.base));
  }
}

// The copies' and fills' rules for where their ranges may lie (§6).
BufferRules copy_rules(const hal_stream_s* stream) {
  return BufferRules{stream->device, "the stream", true, true};
}

}  // namespace

static hal_result_t mem_alloc_body(hal_device_t device, hal_memory_kind_t kind, size_t size,
                                   size_t alignment, void** out_ptr) {
  constexpr const char* kFunction = "hal_mem_alloc";
  return guarded(kFunction, [&]() -> hal_result_t {
    Registry* registry = nullptr;
    if (hal_result_t result = check_preconditions_in(registry, kFunction, Live{device, "device"},
                                                     Required{out_ptr, "out_ptr"});
        result != HAL_SUCCESS) {
      return result;
    }
    const hal_device_properties_t& properties = device->properties;
    if (size == 0) return fail(HAL_ERROR_INVALID_SIZE, kFunction, "size is 0");
    if (kind != HAL_MEMORY_DEVICE && kind != HAL_MEMORY_HOST && kind != HAL_MEMORY_SHARED) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "kind %d is not a hal_memory_kind_t",
                  static_cast<int>(kind));
    }
    if ((alignment & (alignment - 1)) != 0) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "alignment %zu is not a power of two",
                  alignment);
    }
    // The plugin always gets at least min_alignment_bytes (SPEC.md §10.3), 0 included.
    if (alignment < properties.min_alignment_bytes) {
      alignment = static_cast<size_t>(properties.min_alignment_bytes);
    }
    if (size > properties.max_allocation_bytes) {
      return fail(HAL_ERROR_OUT_OF_MEMORY, kFunction,
                  "size %zu exceeds the device's max_allocation_bytes %llu", size,
                  static_cast<unsigned long long>(properties.max_allocation_bytes));
    }
    const hal_device_caps_t needed = kind == HAL_MEMORY_HOST     ? HAL_DEVICE_CAP_HOST_MEMORY
                                     : kind == HAL_MEMORY_SHARED ? HAL_DEVICE_CAP_SHARED_MEMORY
                                                                 : 0;
    if ((properties.capabilities & needed) != needed) {
      return fail(HAL_ERROR_UNSUPPORTED, kFunction, "device %u (plugin '%s') does not support %s",
                  properties.index, device->plugin->name.c_str(),
                  hal::util::memory_kind_name(kind));
    }
    const PluginRecord& plugin = *device->plugin;
    void* pointer = nullptr;
    hal_result_t allocated = plugin.table.mem_alloc(device->impl, kind, size, alignment, &pointer);
    if (allocated == HAL_ERROR_OUT_OF_MEMORY) {
      // The freed allocations held back (§6, "Freed memory") go back to
      // their plugins first, every device's (a plugin may pool its devices'
      // memory); only then is the device full.
      if (std::vector<Allocation> held = registry->allocations.take_freed(nullptr); !held.empty()) {
        give_back(held);
        take_plugin_message();  // the first answer's detail is not this call's
        pointer = nullptr;
        allocated = plugin.table.mem_alloc(device->impl, kind, size, alignment, &pointer);
      }
    }
    if (allocated != HAL_SUCCESS) return fail_from_plugin(allocated, kFunction, plugin.name);
    const Allocation allocation{reinterpret_cast<uintptr_t>(pointer), size, device, kind};
    bool inserted = false;
    try {
      inserted = pointer != nullptr && registry->allocations.insert(allocation);
    } catch (...) {
      plugin.table.mem_free(device->impl, pointer);
      throw;
    }
    if (!inserted) {
      if (pointer != nullptr) plugin.table.mem_free(device->impl, pointer);
      return fail(HAL_ERROR_INTERNAL, kFunction,
                  "plugin '%s' returned %p for %zu bytes, which is NULL or overlaps a live "
                  "allocation",
                  plugin.name.c_str(), pointer, size);
    }
    *out_ptr = pointer;
    return HAL_SUCCESS;
  });
}

static hal_result_t mem_free_body(void* ptr) {
  constexpr const char* kFunction = "hal_mem_free";
  return guarded(kFunction, [&]() -> hal_result_t {
    Registry* registry = nullptr;
    if (hal_result_t result = check_preconditions_in(registry, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    if (ptr == nullptr) return HAL_SUCCESS;  // the documented no-op
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    // Extracting first means two racing frees of one pointer free it once.
    std::optional<Allocation> allocation = registry->allocations.extract(address);
    if (!allocation) {
      if (auto containing = registry->allocations.find_containing(address)) {
        return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                    "ptr %p is %zu bytes inside the allocation at %p, not its base", ptr,
                    static_cast<size_t>(address - containing->base),
                    reinterpret_cast<void*>(containing->base));
      }
      if (auto freed = registry->allocations.find_freed_containing(address)) {
        return fail(HAL_ERROR_NOT_FOUND, kFunction,
                    "ptr %p was freed already (the %zu-byte allocation at %p)", ptr, freed->size,
                    reinterpret_cast<void*>(freed->base));
      }
      return fail(HAL_ERROR_NOT_FOUND, kFunction,
                  "ptr %p is not a live HAL allocation (never allocated, or freed already)", ptr);
    }
    hal_device_s* device = allocation->device;
    // Work still using the memory finishes first; a lost stream, whatever
    // its loss code, does not stop the free (SPEC 4.4): its work has ended too.
    if (hal_result_t result = refuse_wait_in_host_fn(nullptr, device, kFunction);
        result != HAL_SUCCESS) {
      registry->allocations.insert(*allocation);
      return result;
    }
    drain_device(device, kFunction);
    // Held back from the plugin for a while, so a freed pointer that comes
    // back is refused for certain (§6, "Freed memory"); the oldest go back.
    give_back(registry->allocations.hold_freed(*allocation));
    return HAL_SUCCESS;
  });
}

static hal_result_t mem_get_info_body(const void* ptr, hal_memory_info_t* out_info) {
  constexpr const char* kFunction = "hal_mem_get_info";
  return guarded(kFunction, [&]() -> hal_result_t {
    Registry* registry = nullptr;
    if (hal_result_t result = check_preconditions_in(registry, kFunction, Required{ptr, "ptr"},
                                                     Required{out_info, "out_info"});
        result != HAL_SUCCESS) {
      return result;
    }
    hal_result_t result = HAL_SUCCESS;
    if (struct_too_small(out_info, kFunction, "out_info", "hal_memory_info_t", result)) {
      return result;
    }
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    const auto allocation = registry->allocations.find_containing(address);
    if (!allocation) {
      if (auto freed = registry->allocations.find_freed_containing(address)) {
        return fail(HAL_ERROR_NOT_FOUND, kFunction,
                    "ptr %p lies in the %zu-byte allocation at %p, which hal_mem_free released",
                    ptr, freed->size, reinterpret_cast<void*>(freed->base));
      }
      return fail(HAL_ERROR_NOT_FOUND, kFunction, "ptr %p is not inside a live HAL allocation",
                  ptr);
    }
    hal_memory_info_t info{};
    info.base = reinterpret_cast<void*>(allocation->base);
    info.size = allocation->size;
    info.device = allocation->device;
    info.kind = allocation->kind;
    write_sized(info, out_info);
    return HAL_SUCCESS;
  });
}

static hal_result_t memcpy_async_body(void* dst, const void* src, size_t size,
                                      hal_stream_t stream) {
  constexpr const char* kFunction = "hal_memcpy_async";
  return guarded(kFunction, [&]() -> hal_result_t {
    // dst and src are ranges, checked with their size (a 0-byte copy takes NULL).
    Registry* registry = nullptr;
    HandleUse<hal_stream_s> use;
    if (hal_result_t result =
            check_preconditions_in(registry, kFunction, Held{stream, "stream", use});
        result != HAL_SUCCESS) [[unlikely]] {
      return result;
    }
    if (size == 0) return HAL_SUCCESS;  // nothing to order: the stream's order is kept trivially
    // SPEC §4.1 from step 4 (loader/buffers.hpp): both ranges' values, where
    // each lies, then their overlap, then whose device each is.
    const Buffer buffers[] = {{"dst", dst, size}, {"src", src, size}};
    const BufferRules rules = copy_rules(stream);
    BufferPlaces places;
    if (hal_result_t result = check_buffer_values(buffers, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    if (hal_result_t result = check_buffer_ranges(*registry, buffers, rules, kFunction, places);
        result != HAL_SUCCESS) {
      return result;
    }
    const auto destination = reinterpret_cast<uintptr_t>(dst);
    const auto source = reinterpret_cast<uintptr_t>(src);
    if (destination < source + size && source < destination + size) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "dst %p and src %p overlap: their %zu-byte ranges must be disjoint", dst, src,
                  size);
    }
    if (hal_result_t result = check_buffer_devices(*registry, buffers, rules, places, kFunction);
        result != HAL_SUCCESS) {
      return result;
    }
    const PluginRecord& plugin = *stream->header.plugin;
    std::lock_guard lock(stream->enqueue_mutex);
    if (hal_result_t result = refuse_lost_stream(stream, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    const layers::tracing::StreamOpSpan span(stream, kFunction, size);
    const hal_result_t result = plugin.table.memcpy_async(stream->impl, dst, src, size);
    if (result != HAL_SUCCESS)
      return stream_entry_failed(stream, StreamEntry::kEnqueue, result, kFunction, plugin);
    return HAL_SUCCESS;
  });
}

static hal_result_t memset_async_body(void* dst, uint8_t value, size_t size, hal_stream_t stream) {
  constexpr const char* kFunction = "hal_memset_async";
  return guarded(kFunction, [&]() -> hal_result_t {
    Registry* registry = nullptr;
    HandleUse<hal_stream_s> use;
    if (hal_result_t result =
            check_preconditions_in(registry, kFunction, Held{stream, "stream", use});
        result != HAL_SUCCESS) {
      return result;
    }
    if (size == 0) return HAL_SUCCESS;
    const Buffer buffers[] = {{"dst", dst, size}};
    if (hal_result_t result = check_buffer_values(buffers, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    const BufferRules rules = copy_rules(stream);
    BufferPlaces places;
    if (hal_result_t result = check_buffer_ranges(*registry, buffers, rules, kFunction, places);
        result != HAL_SUCCESS) {
      return result;
    }
    if (hal_result_t result = check_buffer_devices(*registry, buffers, rules, places, kFunction);
        result != HAL_SUCCESS) {
      return result;
    }
    std::lock_guard lock(stream->enqueue_mutex);
    if (hal_result_t result = refuse_lost_stream(stream, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    const layers::tracing::StreamOpSpan span(stream, kFunction, size);
    return fill_memory(stream, dst, value, size, kFunction);
  });
}

// ---- the public entries: the layers' hook around each body above ----

hal_result_t hal_mem_alloc(hal_device_t device, hal_memory_kind_t kind, size_t size,
                           size_t alignment, void** out_ptr) {
  return layers::call<layers::MemAlloc, mem_alloc_body>(HAL_CALLER, device, kind, size, alignment,
                                                        out_ptr);
}

hal_result_t hal_mem_free(void* ptr) {
  return layers::call<layers::MemFree, mem_free_body>(HAL_CALLER, ptr);
}

hal_result_t hal_mem_get_info(const void* ptr, hal_memory_info_t* out_info) {
  return layers::call<layers::MemGetInfo, mem_get_info_body>(HAL_CALLER, ptr, out_info);
}

hal_result_t hal_memcpy_async(void* dst, const void* src, size_t size, hal_stream_t stream) {
  return layers::call<layers::MemcpyAsync, memcpy_async_body>(HAL_CALLER, dst, src, size, stream);
}

hal_result_t hal_memset_async(void* dst, uint8_t value, size_t size, hal_stream_t stream) {
  return layers::call<layers::MemsetAsync, memset_async_body>(HAL_CALLER, dst, value, size, stream);
}
