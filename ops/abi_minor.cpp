#include "hal_ops/abi_minor.hpp"

#include <hal_util/names.hpp>

namespace hal::ops {
namespace {

// ABI 1.0 (tests/abi/old_api) had no operators and no dtypes: hal/ops.h and
// hal/dtype.h, every op kind and every dtype came in 1.1. A value added in a
// later minor gets an entry here, appended: {its value, its minor}.
constexpr MinorFrom kOpKindMinors[] = {{0, 1}};
constexpr MinorFrom kDtypeMinors[] = {{0, 1}};
// One past the last value each table covers: adding a value to the headers
// fails to compile until its minor is written above (and these moved).
constexpr uint32_t kOpKindsCovered = 55;
constexpr uint32_t kDtypesCovered = 11;
static_assert(HAL_OP_KIND_COUNT == kOpKindsCovered,
              "a new hal_op_kind_t value needs its minor in kOpKindMinors (SPEC §2)");
static_assert(HAL_DTYPE_COUNT == kDtypesCovered,
              "a new hal_dtype_t value needs its minor in kDtypeMinors (SPEC §2)");

std::string version_text(uint32_t minor) {
  return std::to_string(HAL_ABI_VERSION_MAJOR) + "." + std::to_string(minor);
}

}  // namespace

uint32_t introduced_minor(uint32_t value, std::span<const MinorFrom> table) {
  uint32_t minor = 0;
  for (const MinorFrom& entry : table) {
    if (value < entry.first) break;
    minor = entry.minor;
  }
  return minor;
}

std::span<const MinorFrom> op_kind_minors() {
  return kOpKindMinors;
}

std::span<const MinorFrom> dtype_minors() {
  return kDtypeMinors;
}

std::string newer_than_plugin(uint32_t plugin_abi, hal_op_kind_t kind, const OpSignature& signature,
                              std::span<const MinorFrom> kind_table,
                              std::span<const MinorFrom> dtype_table) {
  const uint32_t plugin_minor = HAL_VERSION_MINOR(plugin_abi);
  const std::string declared = "the plugin declares ABI " +
                               std::to_string(HAL_VERSION_MAJOR(plugin_abi)) + "." +
                               std::to_string(plugin_minor);
  if (const uint32_t minor = introduced_minor(static_cast<uint32_t>(kind), kind_table);
      minor > plugin_minor) {
    return declared + ", older than " + version_text(minor) + ", which added " +
           hal::util::op_kind_name(kind);
  }
  for (const OperandSpec& operand : signature.operands) {
    if (!operand.used) continue;
    const hal_dtype_t dtype = operand.tensor.dtype;
    if (const uint32_t minor = introduced_minor(static_cast<uint32_t>(dtype), dtype_table);
        minor > plugin_minor) {
      return declared + ", older than " + version_text(minor) + ", which added the dtype " +
             hal::util::dtype_name(dtype) + " (operand " + operand.name + ")";
    }
  }
  return {};
}

}  // namespace hal::ops
