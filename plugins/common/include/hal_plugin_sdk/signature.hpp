// Kernel argument signatures as text ("ptr,u32,f32", see hal/cpu_kernel.h):
// parsing, printing and the byte size of each type, shared by every plugin
// that reads a signature from a module.
#ifndef HAL_PLUGIN_SDK_SIGNATURE_HPP_
#define HAL_PLUGIN_SDK_SIGNATURE_HPP_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "hal.h"

namespace hal::plugin {

struct ArgTypeName {
  hal_arg_type_t type;
  std::string_view name;
  size_t size;  // bytes of the C type the kernel receives
};

// One table, so a name and its size can never drift apart.
inline constexpr ArgTypeName kArgTypeNames[] = {
    {HAL_ARG_POINTER, "ptr", sizeof(void*)},
    {HAL_ARG_I32, "i32", 4},
    {HAL_ARG_U32, "u32", 4},
    {HAL_ARG_I64, "i64", 8},
    {HAL_ARG_U64, "u64", 8},
    {HAL_ARG_F32, "f32", 4},
    {HAL_ARG_F64, "f64", 8},
};

inline const ArgTypeName* find_arg_type(hal_arg_type_t type) {
  for (const ArgTypeName& entry : kArgTypeNames) {
    if (entry.type == type) return &entry;
  }
  return nullptr;
}

inline std::string_view arg_type_name(hal_arg_type_t type) {
  const ArgTypeName* entry = find_arg_type(type);
  return entry != nullptr ? entry->name : std::string_view("?");
}

// 0 for an unknown type.
inline size_t arg_type_size(hal_arg_type_t type) {
  const ArgTypeName* entry = find_arg_type(type);
  return entry != nullptr ? entry->size : 0;
}

inline std::string format_signature(const hal_arg_type_t* types, size_t count) {
  std::string text;
  for (size_t i = 0; i < count; ++i) {
    if (i != 0) text += ',';
    text += arg_type_name(types[i]);
  }
  return text;
}

// Parses |text| into |out_types|. Blanks around names are allowed; an empty
// (or all-blank) string is a kernel without arguments. On failure returns
// false and says why in |out_error|.
inline bool parse_signature(std::string_view text, std::vector<hal_arg_type_t>& out_types,
                            std::string& out_error) {
  out_types.clear();
  auto trim = [](std::string_view piece) {
    while (!piece.empty() && (piece.front() == ' ' || piece.front() == '\t'))
      piece.remove_prefix(1);
    while (!piece.empty() && (piece.back() == ' ' || piece.back() == '\t')) piece.remove_suffix(1);
    return piece;
  };
  if (trim(text).empty()) return true;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view piece =
        trim(text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    const ArgTypeName* match = nullptr;
    for (const ArgTypeName& entry : kArgTypeNames) {
      if (entry.name == piece) match = &entry;
    }
    if (match == nullptr) {
      out_error = "unknown argument type '" + std::string(piece) + "' at position " +
                  std::to_string(out_types.size()) +
                  " (expected ptr, i32, u32, i64, u64, f32, f64)";
      return false;
    }
    if (out_types.size() == HAL_MAX_KERNEL_ARGS) {
      out_error = "more than " + std::to_string(HAL_MAX_KERNEL_ARGS) + " arguments";
      return false;
    }
    out_types.push_back(match->type);
    if (comma == std::string_view::npos) return true;
    start = comma + 1;
  }
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_SIGNATURE_HPP_
