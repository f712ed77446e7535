// Helpers shared by the api_*.cpp files, which define the public functions.
#pragma once

#include "error.hpp"
#include "handle.hpp"
#include "objects.hpp"
#include "preconditions.hpp"
#include "registry.hpp"

#include <cstring>

namespace hal::loader {

using preconditions::Held;
using preconditions::Live;
using preconditions::Nullable;
using preconditions::Required;

// Copies |value| into a caller's size-prefixed struct, keeping the caller's
// struct_size and next. Callers have checked struct_size against the struct's
// v1.0 size (sizeof(T), or less for a struct that grew since:
// hal_device_properties_t), so a newer, larger caller struct keeps its extra
// bytes and an older, smaller one gets the prefix it has room for.
template <class T>
void write_sized(const T& value, T* out) noexcept {
  const size_t caller_size = out->struct_size;
  const void* caller_next = out->next;
  // At most the caller's struct_size: a caller built against an older,
  // smaller struct (accepted by struct_too_small's minimum) gets its prefix.
  std::memcpy(static_cast<void*>(out), &value, caller_size < sizeof(T) ? caller_size : sizeof(T));
  out->struct_size = caller_size;
  out->next = caller_next;
}

// The "struct_size too small" failure of every out-struct and descriptor.
template <class T>
bool struct_too_small(const T* in, const char* function, const char* argument,
                      const char* type_name, hal_result_t& out_result,
                      size_t minimum = sizeof(T)) noexcept {
  if (in->struct_size >= minimum) return false;
  out_result = fail(HAL_ERROR_INVALID_ARGUMENT, function,
                    "%s->struct_size is %zu, smaller than the %zu bytes of %s", argument,
                    in->struct_size, minimum, type_name);
  return true;
}

inline hal_result_t null_argument(const char* function, const char* argument) noexcept {
  return fail(HAL_ERROR_NULL_POINTER, function, "%s is NULL", argument);
}

inline hal_result_t unsupported_entry(const char* function, const PluginRecord& plugin,
                                      const char* entry) noexcept {
  return fail(HAL_ERROR_UNSUPPORTED, function,
              "plugin '%s' does not implement %s and the loader has no fallback for it",
              plugin.name.c_str(), entry);
}

}  // namespace hal::loader
