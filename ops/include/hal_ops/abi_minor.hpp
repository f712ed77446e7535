// Which minor of ABI 1 introduced each hal_op_kind_t and hal_dtype_t value
// (SPEC §2, "Plugins of an older minor"). A plugin declares the ABI it was
// built against; the loader never hands it an op kind or a dtype of a later
// minor, which it cannot know: the plugin is declined for that plan, with
// the reason, and the next implementation is asked.
#pragma once

#include <hal/ops.h>

#include <cstdint>
#include <span>
#include <string>

#include "hal_ops/signature.hpp"

namespace hal::ops {

// From |first| on (up to the next entry), values were introduced in |minor|.
struct MinorFrom {
  uint32_t first;
  uint32_t minor;
};

// The minor that introduced |value| under |table| (ascending by first).
uint32_t introduced_minor(uint32_t value, std::span<const MinorFrom> table);

// The tables of this ABI: every op kind and dtype, each with its minor.
std::span<const MinorFrom> op_kind_minors();
std::span<const MinorFrom> dtype_minors();

// Why a plugin declaring |plugin_abi| (its HAL_ABI_VERSION) may not be asked
// to plan |kind| with the operands of |signature|: an empty string when it
// may, else the sentence naming the first value newer than the plugin.
std::string newer_than_plugin(uint32_t plugin_abi, hal_op_kind_t kind, const OpSignature& signature,
                              std::span<const MinorFrom> kind_table = op_kind_minors(),
                              std::span<const MinorFrom> dtype_table = dtype_minors());

}  // namespace hal::ops
