#pragma once
// The names of the public enums and bit sets (api/hal/*.h): one table per
// enum, used by the loader's messages and layers, halinfo and halconform, so
// a value added to a header is named everywhere once it is named here.
// tests/util/enum_names_test.py reads the headers and fails for an
// enumerator that a table here does not name.
//
// Each value has two spellings: its enumerator ("HAL_DEVICE_CAP_KERNELS")
// and a short name ("kernels", the enumerator without its prefix, lower
// case), for text where the enum is clear from the context.

#include <hal.h>
#include <hal/plugin_v1.h>  // hal_collective_kind_t

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace hal::util {

struct EnumName {
  uint32_t value;          // the enumerator's value (a bit for bit sets)
  const char* enumerator;  // "HAL_DEVICE_CAP_KERNELS" (a string literal)
  const char* short_name;  // "kernels"
};

// The tables, in header order. Bit sets (capabilities) hold the bit; module
// formats hold the enumerator (the mask bit of a format is 1u << value).
std::span<const EnumName> capability_table() noexcept;
std::span<const EnumName> module_format_table() noexcept;
std::span<const EnumName> memory_kind_table() noexcept;
std::span<const EnumName> dtype_table() noexcept;
std::span<const EnumName> arg_type_table() noexcept;
std::span<const EnumName> device_type_table() noexcept;
std::span<const EnumName> plugin_outcome_table() noexcept;
std::span<const EnumName> result_table() noexcept;
std::span<const EnumName> reduce_op_table() noexcept;
std::span<const EnumName> collective_kind_table() noexcept;
std::span<const EnumName> op_kind_table() noexcept;
std::span<const EnumName> activation_table() noexcept;
std::span<const EnumName> norm_kind_table() noexcept;
std::span<const EnumName> binary_op_table() noexcept;
std::span<const EnumName> reduce_kind_table() noexcept;
std::span<const EnumName> unary_math_table() noexcept;
std::span<const EnumName> clamp_bound_table() noexcept;
std::span<const EnumName> scan_kind_table() noexcept;
std::span<const EnumName> scatter_mode_table() noexcept;
std::span<const EnumName> causal_alignment_table() noexcept;
std::span<const EnumName> attention_sparsity_table() noexcept;
std::span<const EnumName> channel_layout_table() noexcept;
std::span<const EnumName> pooling_kind_table() noexcept;
std::span<const EnumName> op_status_table() noexcept;
std::span<const EnumName> op_verdict_table() noexcept;

// The entry of |value|, or nullptr for a value the table does not hold.
const EnumName* find_name(std::span<const EnumName> table, uint32_t value) noexcept;

// The enumerator of |value|; "unknown" for a value outside the table.
const char* enumerator_name(std::span<const EnumName> table, uint32_t value) noexcept;
// The short name of |value|; "unknown" for a value outside the table.
const char* short_name(std::span<const EnumName> table, uint32_t value) noexcept;

// Convenience spellings of the common ones.
inline const char* device_type_name(hal_device_type_t type) noexcept {
  return short_name(device_type_table(), static_cast<uint32_t>(type));
}
inline const char* memory_kind_name(hal_memory_kind_t kind) noexcept {
  return enumerator_name(memory_kind_table(), static_cast<uint32_t>(kind));
}
inline const char* arg_type_name(hal_arg_type_t type) noexcept {
  return short_name(arg_type_table(), static_cast<uint32_t>(type));
}
inline const char* plugin_outcome_name(hal_plugin_outcome_t outcome) noexcept {
  return short_name(plugin_outcome_table(), static_cast<uint32_t>(outcome));
}
inline const char* dtype_name(hal_dtype_t dtype) noexcept {
  return short_name(dtype_table(), static_cast<uint32_t>(dtype));
}
inline const char* op_kind_name(hal_op_kind_t kind) noexcept {
  return short_name(op_kind_table(), static_cast<uint32_t>(kind));
}
inline const char* result_name(hal_result_t result) noexcept {
  return enumerator_name(result_table(), static_cast<uint32_t>(result));
}

enum class Spelling { kEnumerator, kShort };

// The names of the bits set in |capabilities|, joined by |separator|; a bit
// no table entry names is written as its number (so it shows, and the
// coverage test catches the missing entry). "none" for 0.
std::string capability_names(hal_device_caps_t capabilities, Spelling spelling,
                             std::string_view separator = "|");
// The same for a mask of module formats (bit 1u << format).
std::string module_format_names(uint32_t formats, Spelling spelling,
                                std::string_view separator = "|");

}  // namespace hal::util
