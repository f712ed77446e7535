#include "buffers.hpp"

namespace hal::loader {

namespace {

hal_result_t check_device(const Allocation& allocation, const Buffer& buffer,
                          const BufferRules& rules, const char* function) {
  const hal_device_s* device = rules.device;
  if (allocation.device == device) return HAL_SUCCESS;
  if (allocation.device->plugin != device->plugin || !rules.peers) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, function,
                "%s is an allocation of device %u (plugin '%s'), but %s is on device %u "
                "(plugin '%s')",
                buffer.name, allocation.device->properties.index,
                allocation.device->plugin->name.c_str(), rules.device_owner,
                device->properties.index, device->plugin->name.c_str());
  }
  constexpr hal_device_caps_t kPeer = HAL_DEVICE_CAP_PEER_ACCESS;
  if ((allocation.device->properties.capabilities & device->properties.capabilities & kPeer) == 0) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, function,
                "%s is an allocation of device %u, %s is on device %u, and the two do not both "
                "declare HAL_DEVICE_CAP_PEER_ACCESS",
                buffer.name, allocation.device->properties.index, rules.device_owner,
                device->properties.index);
  }
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t check_buffer_values(std::span<const Buffer> buffers, const char* function) noexcept {
  for (const Buffer& buffer : buffers) {
    if (buffer.bytes == 0) continue;
    const auto begin = reinterpret_cast<uintptr_t>(buffer.pointer);
    if (begin == 0) {
      return fail(HAL_ERROR_NULL_POINTER, function, "%s is NULL with size %zu", buffer.name,
                  buffer.bytes);
    }
    if (buffer.bytes > UINTPTR_MAX - begin) {
      return fail(HAL_ERROR_INVALID_SIZE, function, "%s %p + size %zu overflows the address space",
                  buffer.name, buffer.pointer, buffer.bytes);
    }
  }
  return HAL_SUCCESS;
}

hal_result_t refuse_freed(const Registry& registry, uintptr_t address, const char* what,
                          const char* function) {
  const std::optional<Allocation> freed = registry.allocations.find_freed_containing(address);
  if (!freed) return HAL_SUCCESS;
  return fail(HAL_ERROR_INVALID_ARGUMENT, function,
              "%s %p lies in the %zu-byte allocation at %p, which hal_mem_free released: freed "
              "memory is neither device nor host memory",
              what, reinterpret_cast<void*>(address), freed->size,
              reinterpret_cast<void*>(freed->base));
}

hal_result_t check_buffer_ranges(const Registry& registry, std::span<const Buffer> buffers,
                                 const BufferRules& rules, const char* function,
                                 BufferPlaces& out_places) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& buffer = buffers[i];
    if (buffer.bytes == 0) continue;
    const auto begin = reinterpret_cast<uintptr_t>(buffer.pointer);
    const std::optional<Allocation> allocation = registry.allocations.find_containing(begin);
    if (i < BufferPlaces::kKept) out_places.allocations[i] = allocation;
    if (allocation) {
      const size_t offset = begin - allocation->base;
      if (buffer.bytes > allocation->size - offset) {
        return fail(HAL_ERROR_OUT_OF_BOUNDS, function,
                    "%s: %zu bytes at offset %zu overrun a %zu-byte allocation", buffer.name,
                    buffer.bytes, offset, allocation->size);
      }
      continue;
    }
    if (hal_result_t freed = refuse_freed(registry, begin, buffer.name, function);
        freed != HAL_SUCCESS) {
      return freed;
    }
    // Host memory, unless it runs into an allocation (§6 rule 3). A range
    // starting exactly at an allocation's end is not refused: host memory
    // from the same heap can begin there (ThreadSanitizer's allocator packs
    // blocks back to back, and PoCL's SVM comes from that heap).
    if (!rules.host_ranges_checked) continue;
    if (const std::optional<Allocation> next = registry.allocations.find_next(begin);
        next && next->base - begin < buffer.bytes) {
      return fail(HAL_ERROR_OUT_OF_BOUNDS, function,
                  "%s: the host range of %zu bytes at %p runs into a %zu-byte allocation at %p",
                  buffer.name, buffer.bytes, buffer.pointer, next->size,
                  reinterpret_cast<void*>(next->base));
    }
  }
  return HAL_SUCCESS;
}

hal_result_t check_buffer_devices(const Registry& registry, std::span<const Buffer> buffers,
                                  const BufferRules& rules, const BufferPlaces& places,
                                  const char* function) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& buffer = buffers[i];
    if (buffer.bytes == 0) continue;
    const std::optional<Allocation> allocation =
        i < BufferPlaces::kKept
            ? places.allocations[i]
            : registry.allocations.find_containing(reinterpret_cast<uintptr_t>(buffer.pointer));
    if (!allocation) continue;
    if (hal_result_t result = check_device(*allocation, buffer, rules, function);
        result != HAL_SUCCESS) {
      return result;
    }
  }
  return HAL_SUCCESS;
}

}  // namespace hal::loader
