// Writing size-prefixed output structs (hal_device_properties_t,
// hal_kernel_info_t): the caller's struct_size says how much of the struct it
// knows, so a plugin never writes past it, and never touches the header
// (struct_size and the extension chain) that the caller owns.
#ifndef HAL_PLUGIN_SDK_VERSIONED_STRUCT_HPP_
#define HAL_PLUGIN_SDK_VERSIONED_STRUCT_HPP_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

namespace hal::plugin {

// Copies the fields of |full| that follow the header into |out|, but no more
// than out->struct_size bytes in total. T starts with `size_t struct_size;
// const void* next;` as every HAL output struct does.
template <class T>
void write_versioned_struct(const T& full, T* out) {
  static_assert(std::is_trivially_copyable_v<T>);
  static_assert(offsetof(T, struct_size) == 0);
  constexpr size_t header = offsetof(T, next) + sizeof(full.next);
  const size_t limit = std::min(out->struct_size, sizeof(T));
  if (limit <= header) return;
  std::memcpy(reinterpret_cast<char*>(out) + header, reinterpret_cast<const char*>(&full) + header,
              limit - header);
}

// Copies a NUL-terminated string into a fixed char array, truncating.
template <size_t N>
void copy_string(char (&destination)[N], const char* source) {
  std::strncpy(destination, source, N - 1);
  destination[N - 1] = '\0';
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_VERSIONED_STRUCT_HPP_
