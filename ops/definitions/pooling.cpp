// POOLING and POOLING_BACKWARD: max (with indices) and average windows, and
// their adaptive forms (hal/ops.h).
#include "definitions.hpp"
#include "hal_ops/spatial.hpp"

#include <cstdint>

namespace hal::ops::definitions {

namespace {

constexpr uint32_t kKnownPoolingFlags = HAL_POOLING_INDICES | HAL_POOLING_COUNT_INCLUDE_PAD |
                                        HAL_POOLING_CEIL_MODE | HAL_POOLING_ADAPTIVE;

std::string check_range(const char* field, const int64_t* values, uint32_t count, int64_t minimum) {
  for (uint32_t s = 0; s < count; ++s) {
    if (values[s] < minimum || values[s] > kMaxParameter) {
      return std::string("desc->") + field + "[" + std::to_string(s) + "] is " +
             std::to_string(values[s]) + "; it must be in [" + std::to_string(minimum) +
             ", 2^31 - 1]";
    }
  }
  return {};
}

hal_result_t describe_pooling(const hal_op_pooling_desc_t& desc, OpSignature* out,
                              std::string* message) {
  const bool backward = desc.header.kind == HAL_OP_POOLING_BACKWARD;
  if (static_cast<uint32_t>(desc.pooling) >= HAL_POOLING_KIND_COUNT) {
    return invalid(message, "desc->pooling " + std::to_string(desc.pooling) +
                                " is not a hal_pooling_kind_t (HAL_POOLING_MAX or "
                                "HAL_POOLING_AVERAGE)");
  }
  const bool max = desc.pooling == HAL_POOLING_MAX;
  if (static_cast<uint32_t>(desc.layout) >= HAL_CHANNELS_COUNT) {
    return invalid(
        message, "desc->layout " + std::to_string(desc.layout) + " is not a hal_channel_layout_t");
  }
  if (desc.spatial_dims < 1 || desc.spatial_dims > kSpatial) {
    return invalid(message, "desc->spatial_dims is " + std::to_string(desc.spatial_dims) +
                                "; pooling has 1, 2 or 3");
  }
  if ((desc.flags & ~kKnownPoolingFlags) != 0) {
    return invalid(message, "desc->flags " + hex_text(desc.flags) +
                                " has bits no hal_pooling_flag_bits_t defines");
  }
  const bool indices = (desc.flags & HAL_POOLING_INDICES) != 0;
  const bool include_pad = (desc.flags & HAL_POOLING_COUNT_INCLUDE_PAD) != 0;
  const bool ceil_mode = (desc.flags & HAL_POOLING_CEIL_MODE) != 0;
  const bool adaptive = (desc.flags & HAL_POOLING_ADAPTIVE) != 0;
  if (indices && !max) {
    return invalid(message, "HAL_POOLING_INDICES is for HAL_POOLING_MAX only");
  }
  if (max && backward && !indices) {
    return invalid(message,
                   "the max-pooling backward reads the forward's indices: set "
                   "HAL_POOLING_INDICES and give them");
  }
  if (include_pad && max) {
    return invalid(message, "HAL_POOLING_COUNT_INCLUDE_PAD is for HAL_POOLING_AVERAGE only");
  }
  if (desc.divisor_override != 0 && (max || adaptive)) {
    return invalid(message,
                   "desc->divisor_override is for non-adaptive HAL_POOLING_AVERAGE only; it "
                   "must be 0 here");
  }
  if (desc.divisor_override < 0 || desc.divisor_override > kMaxParameter) {
    return invalid(message, "desc->divisor_override is " + std::to_string(desc.divisor_override) +
                                "; it must be in [0, 2^31 - 1] (0: none)");
  }
  if (adaptive && (ceil_mode || include_pad)) {
    return invalid(message,
                   "HAL_POOLING_ADAPTIVE takes its windows from the sizes: CEIL_MODE and "
                   "COUNT_INCLUDE_PAD do not apply");
  }
  const uint32_t dims = desc.spatial_dims;
  if (!adaptive) {
    if (reject(check_range("kernel", desc.kernel, dims, 1), message) ||
        reject(check_range("stride", desc.stride, dims, 1), message) ||
        reject(check_range("dilation", desc.dilation, dims, 1), message) ||
        reject(check_range("pad_begin", desc.pad_begin, dims, 0), message) ||
        reject(check_range("pad_end", desc.pad_end, dims, 0), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    for (uint32_t s = 0; s < dims; ++s) {
      if (!max && desc.dilation[s] != 1) {
        return invalid(message, "desc->dilation[" + std::to_string(s) + "] is " +
                                    std::to_string(desc.dilation[s]) +
                                    "; average pooling takes dilation 1");
      }
      const int64_t effective = desc.dilation[s] * (desc.kernel[s] - 1) + 1;
      if (desc.pad_begin[s] > effective / 2 || desc.pad_end[s] > effective / 2) {
        return invalid(message, "desc->pad_begin[" + std::to_string(s) + "] " +
                                    std::to_string(desc.pad_begin[s]) + " or pad_end[" +
                                    std::to_string(s) + "] " + std::to_string(desc.pad_end[s]) +
                                    " is past half the window (" + std::to_string(effective) +
                                    " / 2 = " + std::to_string(effective / 2) +
                                    "): a window would lie in the padding");
      }
    }
  }

  const uint32_t rank = dims + 2;
  const char* x_name = backward ? "grad_x (desc->x)" : "x";
  const char* y_name = backward ? "grad_y (desc->y)" : "y";
  if (reject(backward ? check_output(x_name, desc.x, kFloatDtypes, rank, rank)
                      : check_tensor(x_name, desc.x, kFloatDtypes, rank, rank),
             message) ||
      reject(backward ? check_tensor(y_name, desc.y, kFloatDtypes, rank, rank)
                      : check_output(y_name, desc.y, kFloatDtypes, rank, rank),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const Canonical5 x = canonical(desc.x, desc.layout, dims);
  const Canonical5 y = canonical(desc.y, desc.layout, dims);
  if (x.shape[0] != y.shape[0] || x.shape[1] != y.shape[1]) {
    return invalid(message, std::string(x_name) + " " + describe_tensor(desc.x) + " and " + y_name +
                                " " + describe_tensor(desc.y) + " (" +
                                layout_name(desc.layout, dims, false) +
                                ") must have the same N and C");
  }
  for (uint32_t s = 0; s < dims; ++s) {
    const uint32_t c = 2 + kSpatial - dims + s;
    const int64_t in = x.shape[c];
    const int64_t o = y.shape[c];
    const std::string where = "spatial dimension " + std::to_string(s);
    if (in < 1 || o < 1) {
      return invalid(message, where + ": " + x_name + " " + describe_tensor(desc.x) + " and " +
                                  y_name + " " + describe_tensor(desc.y) +
                                  " must each have an extent of at least 1 there");
    }
    if (adaptive) continue;
    const int64_t expected =
        pool_output_extent(in, desc.kernel[s], desc.stride[s], desc.dilation[s], desc.pad_begin[s],
                           desc.pad_end[s], ceil_mode);
    if (expected < 1) {
      return invalid(message, where + ": the window (kernel " + std::to_string(desc.kernel[s]) +
                                  ", dilation " + std::to_string(desc.dilation[s]) +
                                  ") is larger than " + x_name + "'s " + std::to_string(in) +
                                  " padded by " + std::to_string(desc.pad_begin[s]) + "+" +
                                  std::to_string(desc.pad_end[s]) + ": the output size is <= 0");
    }
    if (expected != o) {
      return invalid(message,
                     where + ": " + y_name + " has extent " + std::to_string(o) + "; pooling " +
                         x_name + "'s " + std::to_string(in) + " with kernel " +
                         std::to_string(desc.kernel[s]) + ", stride " +
                         std::to_string(desc.stride[s]) + ", dilation " +
                         std::to_string(desc.dilation[s]) + ", padding " +
                         std::to_string(desc.pad_begin[s]) + "+" + std::to_string(desc.pad_end[s]) +
                         (ceil_mode ? " (ceil mode)" : "") + " gives " + std::to_string(expected));
    }
  }
  constexpr DtypeSet kIndexTypes = dtype_bit(HAL_DTYPE_I32) | dtype_bit(HAL_DTYPE_I64);
  if (indices) {
    std::string problem = backward ? check_tensor("indices", desc.indices, kIndexTypes, rank, rank)
                                   : check_output("indices", desc.indices, kIndexTypes, rank, rank);
    if (problem.empty()) problem = check_same_shape("indices", desc.indices, y_name, desc.y);
    if (reject(std::move(problem), message)) return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (!backward) {
    add_operand(*out, "x", Role::kInput, desc.x);
    add_operand(*out, "y", Role::kOutput, desc.y);
    if (indices) {
      add_operand(*out, "indices", Role::kOutput, desc.indices);
    } else {
      add_unused(*out, "indices");
    }
  } else {
    add_operand(*out, "grad_y", Role::kInput, desc.y);
    if (indices) {
      add_operand(*out, "indices", Role::kInput, desc.indices);
    } else {
      add_unused(*out, "indices");
    }
    add_operand(*out, "grad_x", Role::kOutput, desc.x);
  }
  std::string summary = max ? "max " : "average ";
  summary += std::to_string(dims);
  summary += "-D ";
  summary += layout_name(desc.layout, dims, false);
  if (adaptive) {
    summary += " adaptive";
  } else {
    const auto list = [&](const char* label, const int64_t* values, const int64_t* second) {
      summary += label;
      for (uint32_t s = 0; s < dims; ++s) {
        summary += s == 0 ? ' ' : 'x';
        summary += std::to_string(values[s]);
        if (second != nullptr) {
          summary += '+';
          summary += std::to_string(second[s]);
        }
      }
    };
    list(" kernel", desc.kernel, nullptr);
    list(" stride", desc.stride, nullptr);
    list(" dilation", desc.dilation, nullptr);
    list(" pad", desc.pad_begin, desc.pad_end);
  }
  if (ceil_mode) summary += " ceil";
  if (include_pad) summary += " include_pad";
  if (indices) summary += " indices";
  out->summary = std::move(summary);
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_pooling_family(const hal_op_header_t* desc, OpSignature* out,
                                     std::string* message) {
  switch (desc->kind) {
    case HAL_OP_POOLING:
    case HAL_OP_POOLING_BACKWARD:
      return describe_pooling(*reinterpret_cast<const hal_op_pooling_desc_t*>(desc), out, message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
