// Kernel argument signatures as text ("ptr,u32,f32", SPEC.md §8): parsing,
// printing and the byte size of each type, for every plugin that reads a
// signature from a module. The table and the grammar are hal_util's
// (<hal_util/arg_types.hpp>, installed with this SDK): one table, shared by
// the loader's launch checks and every plugin.
#ifndef HAL_PLUGIN_SDK_SIGNATURE_HPP_
#define HAL_PLUGIN_SDK_SIGNATURE_HPP_

#include <cstddef>
#include <string_view>

#include "hal.h"
#include "hal_util/arg_types.hpp"

namespace hal::plugin {

using hal::util::arg_type_size;
using hal::util::ArgTypeInfo;
using hal::util::find_arg_type;
using hal::util::format_signature;
using hal::util::kArgTypes;
// Strict (SPEC.md §8): a string off the grammar, blanks included, is no
// signature; kernel_get then fails with HAL_ERROR_ARGUMENT_MISMATCH naming it.
using hal::util::parse_signature;

// The signature token of |type|: "ptr", "i32", ...; "?" for an unknown type.
inline std::string_view arg_type_name(hal_arg_type_t type) {
  return hal::util::arg_type_token(type);
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_SIGNATURE_HPP_
