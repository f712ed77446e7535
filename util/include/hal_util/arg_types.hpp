#pragma once
// Kernel argument types (SPEC.md §8, "Signatures" and "Signature string
// grammar"): the one table of each hal_arg_type_t's enumerator, short name,
// signature token ("ptr,u32,f32") and byte size, and the one parser and
// printer of signature text. The loader's launch checks, util/names.cpp's
// enum table, halinfo, the bindings and every plugin (through
// <hal_plugin_sdk/signature.hpp>) read this table, so a name and its size
// cannot drift apart.
//
// Header-only and free of hal_util's compiled parts: the installed plugin
// SDK includes it (it is installed beside <hal_plugin_sdk/*.hpp>).

#include <hal.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hal::util {

struct ArgTypeInfo {
  hal_arg_type_t type;
  const char* enumerator;  // "HAL_ARG_POINTER"
  const char* short_name;  // "pointer": the enumerator without its prefix (util/names.hpp)
  const char* token;       // "ptr": its spelling in signature text
  size_t size;             // bytes of the C type the kernel receives
};

inline constexpr ArgTypeInfo kArgTypes[] = {
    {HAL_ARG_POINTER, "HAL_ARG_POINTER", "pointer", "ptr", 8},
    {HAL_ARG_I32, "HAL_ARG_I32", "i32", "i32", 4},
    {HAL_ARG_U32, "HAL_ARG_U32", "u32", "u32", 4},
    {HAL_ARG_I64, "HAL_ARG_I64", "i64", "i64", 8},
    {HAL_ARG_U64, "HAL_ARG_U64", "u64", "u64", 8},
    {HAL_ARG_F32, "HAL_ARG_F32", "f32", "f32", 4},
    {HAL_ARG_F64, "HAL_ARG_F64", "f64", "f64", 8},
};
static_assert(sizeof(void*) == 8, "HAL_ARG_POINTER is 8 bytes (SPEC.md §8)");

// The entry of |type|, or nullptr for a value that is not a hal_arg_type_t.
inline const ArgTypeInfo* find_arg_type(hal_arg_type_t type) noexcept {
  for (const ArgTypeInfo& entry : kArgTypes) {
    if (entry.type == type) return &entry;
  }
  return nullptr;
}

// "ptr", "i32", ...; "?" for a value that is not a hal_arg_type_t.
inline const char* arg_type_token(hal_arg_type_t type) noexcept {
  const ArgTypeInfo* entry = find_arg_type(type);
  return entry != nullptr ? entry->token : "?";
}

// 0 for a value that is not a hal_arg_type_t.
inline size_t arg_type_size(hal_arg_type_t type) noexcept {
  const ArgTypeInfo* entry = find_arg_type(type);
  return entry != nullptr ? entry->size : 0;
}

// "ptr,u32,f32".
inline std::string format_signature(const hal_arg_type_t* types, size_t count) {
  std::string text;
  for (size_t i = 0; i < count; ++i) {
    if (i != 0) text += ',';
    text += arg_type_token(types[i]);
  }
  return text;
}

// The longest text the grammar admits: 64 three-letter tokens and 63 commas.
inline constexpr size_t kMaxSignatureChars = 4 * HAL_MAX_KERNEL_ARGS - 1;

// Parses |text| by SPEC.md §8's grammar, exactly: ASCII tokens separated by
// single commas, no white space, at most HAL_MAX_KERNEL_ARGS of them; ""
// is a kernel without arguments. On failure returns false with |out_error|
// (a phrase naming the first offending position; |out_types| is cleared).
inline bool parse_signature(std::string_view text, std::vector<hal_arg_type_t>& out_types,
                            std::string& out_error) {
  out_types.clear();
  if (text.empty()) return true;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view piece =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    const ArgTypeInfo* match = nullptr;
    for (const ArgTypeInfo& entry : kArgTypes) {
      if (piece == entry.token) match = &entry;
    }
    if (match == nullptr) {
      std::string shown;
      for (const char c : piece) {
        if (c >= 0x20 && c < 0x7f) {
          shown += c;
        } else {
          static constexpr char kHex[] = "0123456789abcdef";
          const auto byte = static_cast<unsigned char>(c);
          shown += "\\x";
          shown += kHex[byte >> 4];
          shown += kHex[byte & 15];
        }
      }
      out_error = "'" + shown + "' at position " + std::to_string(out_types.size()) +
                  " is not an argument type (the grammar: ptr, i32, u32, i64, u64, f32 or f64, "
                  "separated by single commas, no blanks)";
      out_types.clear();
      return false;
    }
    if (out_types.size() == HAL_MAX_KERNEL_ARGS) {
      out_error = "it has more than " + std::to_string(HAL_MAX_KERNEL_ARGS) + " arguments";
      out_types.clear();
      return false;
    }
    out_types.push_back(match->type);
    if (comma == std::string_view::npos) return true;
    start = comma + 1;
  }
}

}  // namespace hal::util
