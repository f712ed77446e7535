// hal/memory.h: allocations, their table, and bounds-checked copies and fills.
#include "api_common.hpp"
#include "layers/intercept.hpp"
#include "fallbacks.hpp"
#include "host_functions.hpp"
#include "hal_util/names.hpp"

using namespace hal::loader;

namespace {

struct Range {
  const char* name;  // "dst" or "src"
  uintptr_t begin;
};

// A range that starts in no allocation is host memory, unless it runs into an
// allocation (SPEC.md section 6, bounds rule 3). A range starting exactly at an
// allocation's end is NOT rejected: host memory from the same heap can begin
// there (ThreadSanitizer's allocator packs blocks back to back, and PoCL's SVM
// comes from that heap), so such a rule refuses legal copies.
hal_result_t check_host_range(const Registry& registry, const Range& range, size_t size,
                              const char* function) {
  if (const std::optional<Allocation> next = registry.allocations.find_next(range.begin);
      next && next->base - range.begin < size) {
    return fail(HAL_ERROR_OUT_OF_BOUNDS, function,
                "%s: the host range of %zu bytes at %p runs into a %zu-byte allocation at %p",
                range.name, size, reinterpret_cast<void*>(range.begin), next->size,
                reinterpret_cast<void*>(next->base));
  }
  return HAL_SUCCESS;
}

// The checks copies and fills share: the stream, NULL, overflow and, for each
// range that starts in a HAL allocation, that it ends there too and belongs
// to the stream's device or a peer of it. Host ranges go to check_host_range.
hal_result_t check_range(const Registry& registry, const Range& range, size_t size,
                         const hal_stream_s* stream, const char* function) {
  if (range.begin == 0) {
    return fail(HAL_ERROR_NULL_POINTER, function, "%s is NULL with size %zu", range.name, size);
  }
  if (size > UINTPTR_MAX - range.begin) {
    return fail(HAL_ERROR_INVALID_SIZE, function, "%s %p + size %zu overflows the address space",
                range.name, reinterpret_cast<void*>(range.begin), size);
  }
  const std::optional<Allocation> allocation = registry.allocations.find_containing(range.begin);
  if (!allocation) return check_host_range(registry, range, size, function);
  const size_t offset = range.begin - allocation->base;
  if (size > allocation->size - offset) {
    return fail(HAL_ERROR_OUT_OF_BOUNDS, function,
                "%s: %zu bytes at offset %zu overrun a %zu-byte allocation", range.name, size,
                offset, allocation->size);
  }
  if (allocation->device->plugin != stream->device->plugin) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, function,
                "%s is an allocation of device %u (plugin '%s'), but the stream is on device %u "
                "(plugin '%s')",
                range.name, allocation->device->properties.index,
                allocation->device->plugin->name.c_str(), stream->device->properties.index,
                stream->device->plugin->name.c_str());
  }
  constexpr hal_device_caps_t kPeer = HAL_DEVICE_CAP_PEER_ACCESS;
  if (allocation->device != stream->device && !(allocation->device->properties.capabilities &
                                                stream->device->properties.capabilities & kPeer)) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, function,
                "%s is an allocation of device %u, the stream is on device %u, and the two do not "
                "both declare HAL_DEVICE_CAP_PEER_ACCESS",
                range.name, allocation->device->properties.index, stream->device->properties.index);
  }
  return HAL_SUCCESS;
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
    if (hal_result_t result = plugin.table.mem_alloc(device->impl, kind, size, alignment, &pointer);
        result != HAL_SUCCESS) {
      return fail_from_plugin(result, kFunction, plugin.name);
    }
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
      return fail(HAL_ERROR_NOT_FOUND, kFunction,
                  "ptr %p is not a live HAL allocation (never allocated, or freed already)", ptr);
    }
    hal_device_s* device = allocation->device;
    // Work still using the memory finishes first; a lost stream does not stop
    // the free (SPEC 4.4): its work has ended too.
    hal_result_t drained = refuse_wait_in_host_fn(nullptr, device, kFunction);
    if (drained == HAL_SUCCESS) drained = drain_device(device, kFunction);
    if (hal_result_t result = drained; result != HAL_SUCCESS) {
      registry->allocations.insert(*allocation);
      return result;
    }
    const PluginRecord& plugin = *device->plugin;
    if (hal_result_t result = plugin.table.mem_free(device->impl, ptr); result != HAL_SUCCESS) {
      registry->allocations.insert(*allocation);
      return fail_from_plugin(result, kFunction, plugin.name);
    }
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
    const auto allocation = registry->allocations.find_containing(reinterpret_cast<uintptr_t>(ptr));
    if (!allocation) {
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
    const Range destination{"dst", reinterpret_cast<uintptr_t>(dst)};
    const Range source{"src", reinterpret_cast<uintptr_t>(src)};
    for (const Range& range : {destination, source}) {
      if (hal_result_t result = check_range(*registry, range, size, stream, kFunction);
          result != HAL_SUCCESS) {
        return result;
      }
    }
    if (destination.begin < source.begin + size && source.begin < destination.begin + size) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "dst %p and src %p overlap: their %zu-byte ranges must be disjoint", dst, src,
                  size);
    }
    const PluginRecord& plugin = *stream->header.plugin;
    std::lock_guard lock(stream->enqueue_mutex);
    if (hal_result_t result = refuse_lost_stream(stream, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    const layers::tracing::StreamOpSpan span(stream, kFunction, size);
    const hal_result_t result = plugin.table.memcpy_async(stream->impl, dst, src, size);
    if (result != HAL_SUCCESS) return stream_entry_failed(stream, result, kFunction, plugin);
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
    const Range destination{"dst", reinterpret_cast<uintptr_t>(dst)};
    if (hal_result_t result = check_range(*registry, destination, size, stream, kFunction);
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
