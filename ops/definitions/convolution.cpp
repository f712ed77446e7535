// CONVOLUTION, CONVOLUTION_BACKWARD_DATA, CONVOLUTION_BACKWARD_WEIGHTS: one
// geometry (hal/ops.h), three ops over it, and the transposed convolution
// as the same geometry with the roles of x and y exchanged.
#include "definitions.hpp"
#include "hal_ops/spatial.hpp"

#include <cstdint>

namespace hal::ops::definitions {

namespace {

constexpr uint32_t kKnownConvFlags = HAL_CONV_BIAS | HAL_CONV_RESIDUAL | HAL_CONV_TRANSPOSED;

std::string dims_text(const std::array<int64_t, kSpatial>& values, uint32_t spatial_dims) {
  std::string text;
  for (uint32_t s = kSpatial - spatial_dims; s < kSpatial; ++s) {
    if (!text.empty()) text += 'x';
    text += std::to_string(values[s]);
  }
  return text;
}

const char* kind_name(hal_op_kind_t kind) {
  switch (kind) {
    case HAL_OP_CONVOLUTION_BACKWARD_DATA:
      return "convolution_backward_data";
    case HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS:
      return "convolution_backward_weights";
    default:
      return "convolution";
  }
}

// The names the three tensors of the geometry have in |kind|.
struct TensorNames {
  const char* x;
  const char* w;
  const char* y;
};

TensorNames tensor_names(hal_op_kind_t kind) {
  switch (kind) {
    case HAL_OP_CONVOLUTION_BACKWARD_DATA:
      return {"grad_x (desc->x)", "w", "grad_y (desc->y)"};
    case HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS:
      return {"x", "grad_w (desc->w)", "grad_y (desc->y)"};
    default:
      return {"x", "w", "y"};
  }
}

// stride, dilation >= 1; padding >= 0; all bounded.
std::string check_parameters(const hal_op_convolution_desc_t& desc) {
  const auto check = [&](const char* field, const int64_t* values, int64_t minimum) -> std::string {
    for (uint32_t s = 0; s < desc.spatial_dims; ++s) {
      if (values[s] < minimum || values[s] > kMaxParameter) {
        return std::string("desc->") + field + "[" + std::to_string(s) + "] is " +
               std::to_string(values[s]) + "; it must be in [" + std::to_string(minimum) +
               ", 2^31 - 1]";
      }
    }
    return {};
  };
  std::string problem = check("stride", desc.stride, 1);
  if (problem.empty()) problem = check("dilation", desc.dilation, 1);
  if (problem.empty()) problem = check("pad_begin", desc.pad_begin, 0);
  if (problem.empty()) problem = check("pad_end", desc.pad_end, 0);
  return problem;
}

hal_result_t describe_convolution(const hal_op_convolution_desc_t& desc, OpSignature* out,
                                  std::string* message) {
  const hal_op_kind_t kind = desc.header.kind;
  const bool forward = kind == HAL_OP_CONVOLUTION;
  const bool backward_data = kind == HAL_OP_CONVOLUTION_BACKWARD_DATA;
  const bool backward_weights = kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS;
  const TensorNames names = tensor_names(kind);
  if (static_cast<uint32_t>(desc.layout) >= HAL_CHANNELS_COUNT) {
    return invalid(message, "desc->layout " + std::to_string(desc.layout) +
                                " is not a hal_channel_layout_t (HAL_CHANNELS_FIRST or "
                                "HAL_CHANNELS_LAST)");
  }
  if (desc.spatial_dims < 1 || desc.spatial_dims > kSpatial) {
    return invalid(message, "desc->spatial_dims is " + std::to_string(desc.spatial_dims) +
                                "; a convolution has 1, 2 or 3");
  }
  if ((desc.flags & ~kKnownConvFlags) != 0) {
    return invalid(message, "desc->flags " + hex_text(desc.flags) +
                                " has bits no hal_conv_flag_bits_t defines");
  }
  if (desc.reserved != 0) return invalid(message, "desc->reserved must be 0");
  const bool transposed = (desc.flags & HAL_CONV_TRANSPOSED) != 0;
  const bool has_bias = (desc.flags & HAL_CONV_BIAS) != 0;
  const bool has_residual = (desc.flags & HAL_CONV_RESIDUAL) != 0;
  if (has_residual && !forward) {
    return invalid(message, std::string("HAL_CONV_RESIDUAL is for the forward convolution only, "
                                        "not ") +
                                kind_name(kind));
  }
  if (has_bias && backward_data) {
    return invalid(message,
                   "HAL_CONV_BIAS has no meaning in convolution_backward_data (the bias "
                   "gradient is convolution_backward_weights' grad_bias)");
  }
  if (forward) {
    if (static_cast<uint32_t>(desc.activation) >= HAL_ACTIVATION_COUNT) {
      return invalid(message, "desc->activation " + std::to_string(desc.activation) +
                                  " is not a hal_activation_t");
    }
  } else if (desc.activation != HAL_ACTIVATION_NONE) {
    return invalid(message, std::string("desc->activation must be HAL_ACTIVATION_NONE in ") +
                                kind_name(kind) +
                                " (the activation's backward is HAL_OP_UNARY_BACKWARD)");
  }
  if (desc.groups < 1) return invalid(message, "desc->groups must be at least 1");
  if (reject(check_parameters(desc), message)) return HAL_ERROR_INVALID_ARGUMENT;

  const uint32_t rank = desc.spatial_dims + 2;
  // Inputs and outputs per kind; the pairs that share a dtype.
  if (reject(backward_data ? check_output(names.x, desc.x, kFloatDtypes, rank, rank)
                           : check_tensor(names.x, desc.x, kFloatDtypes, rank, rank),
             message) ||
      reject(backward_weights ? check_output(names.w, desc.w, kFloatDtypes, rank, rank)
                              : check_tensor(names.w, desc.w, kFloatDtypes, rank, rank),
             message) ||
      reject(forward ? check_output(names.y, desc.y, kFloatDtypes, rank, rank)
                     : check_tensor(names.y, desc.y, kFloatDtypes, rank, rank),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const auto same_dtype = [&](const char* a_name, const hal_tensor_desc_t& a, const char* b_name,
                              const hal_tensor_desc_t& b) -> std::string {
    if (a.dtype == b.dtype) return {};
    return std::string(a_name) + " " + describe_tensor(a) + " and " + b_name + " " +
           describe_tensor(b) + " must have one dtype (the product's inputs)";
  };
  if (reject(forward         ? same_dtype(names.x, desc.x, names.w, desc.w)
             : backward_data ? same_dtype(names.y, desc.y, names.w, desc.w)
                             : same_dtype(names.x, desc.x, names.y, desc.y),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;

  const Canonical5 x = canonical(desc.x, desc.layout, desc.spatial_dims);
  const Canonical5 w = canonical(desc.w, desc.layout, desc.spatial_dims);
  const Canonical5 y = canonical(desc.y, desc.layout, desc.spatial_dims);
  // The convolution's own input and output: x and y, exchanged when
  // transposed.
  const Canonical5& conv_in = transposed ? y : x;
  const Canonical5& conv_out = transposed ? x : y;
  const char* in_name = transposed ? names.y : names.x;
  const char* out_name = transposed ? names.x : names.y;
  const std::string layout = layout_name(desc.layout, desc.spatial_dims, false);
  const std::string filter_layout = layout_name(desc.layout, desc.spatial_dims, true);

  if (x.shape[0] != y.shape[0]) {
    return invalid(message, std::string(names.x) + " " + describe_tensor(desc.x) + " and " +
                                names.y + " " + describe_tensor(desc.y) +
                                " have different batch sizes (N)");
  }
  const int64_t groups = desc.groups;
  const int64_t c_in = conv_in.shape[1];
  const int64_t c_out = conv_out.shape[1];
  if (c_in < 1 || c_out < 1) {
    return invalid(message, std::string(names.x) + " " + describe_tensor(desc.x) + " and " +
                                names.y + " " + describe_tensor(desc.y) +
                                " must have at least one channel (C) each");
  }
  if (c_in % groups != 0 || c_out % groups != 0) {
    return invalid(message, std::string("desc->groups ") + std::to_string(groups) +
                                " must divide the channels of " + in_name + " (" +
                                std::to_string(c_in) + ") and " + out_name + " (" +
                                std::to_string(c_out) + ")");
  }
  if (w.shape[0] != c_out || w.shape[1] != c_in / groups) {
    return invalid(message, std::string(names.w) + " " + describe_tensor(desc.w) + " (" +
                                filter_layout + ") must have " + std::to_string(c_out) +
                                " filters of " + std::to_string(c_in / groups) + " channels: " +
                                (transposed ? "[C_in, C_out/groups, k...] of the transposed op"
                                            : "[C_out, C_in/groups, k...]") +
                                " with C_in " + std::to_string(transposed ? c_out : c_in) +
                                ", C_out " + std::to_string(transposed ? c_in : c_out) +
                                ", groups " + std::to_string(groups));
  }
  const auto stride = spatial_param(desc.stride, desc.spatial_dims, 1);
  const auto dilation = spatial_param(desc.dilation, desc.spatial_dims, 1);
  const auto pad_begin = spatial_param(desc.pad_begin, desc.spatial_dims, 0);
  const auto pad_end = spatial_param(desc.pad_end, desc.spatial_dims, 0);
  std::array<int64_t, kSpatial> kernel{};
  for (uint32_t s = kSpatial - desc.spatial_dims; s < kSpatial; ++s) {
    const int64_t k = w.shape[2 + s];
    const int64_t in = conv_in.shape[2 + s];
    const int64_t o = conv_out.shape[2 + s];
    const uint32_t dim = s - (kSpatial - desc.spatial_dims);
    const std::string where = "spatial dimension " + std::to_string(dim);
    kernel[s] = k;
    if (k < 1 || in < 1 || o < 1) {
      return invalid(message, where + ": " + names.x + " " + describe_tensor(desc.x) + ", " +
                                  names.w + " " + describe_tensor(desc.w) + ", " + names.y + " " +
                                  describe_tensor(desc.y) +
                                  " must each have an extent of at least 1 there");
    }
    if (k > kMaxParameter) {
      return invalid(message,
                     where + ": the kernel extent " + std::to_string(k) + " is past 2^31 - 1");
    }
    const int64_t effective = dilation[s] * (k - 1) + 1;
    const int64_t padded = in + pad_begin[s] + pad_end[s];
    if (!transposed && padded < effective) {
      return invalid(message, where + ": the dilated kernel spans " + std::to_string(effective) +
                                  " but " + in_name + " padded is " + std::to_string(padded) +
                                  " (" + std::to_string(in) + " + " + std::to_string(pad_begin[s]) +
                                  " + " + std::to_string(pad_end[s]) +
                                  "): the output size is <= 0");
    }
    const int64_t expected =
        conv_output_extent(in, k, stride[s], dilation[s], pad_begin[s], pad_end[s]);
    if (expected == o) continue;
    const std::string geometry = "kernel " + std::to_string(k) + ", stride " +
                                 std::to_string(stride[s]) + ", dilation " +
                                 std::to_string(dilation[s]) + ", padding " +
                                 std::to_string(pad_begin[s]) + "+" + std::to_string(pad_end[s]);
    if (!transposed) {
      return invalid(message, where + ": " + out_name + " has extent " + std::to_string(o) +
                                  "; the convolution of " + in_name + "'s " + std::to_string(in) +
                                  " with " + geometry + " gives " + std::to_string(expected));
    }
    // The transposed op's output (y) may be any size within the floor:
    // PyTorch's output_padding below the stride.
    const int64_t smallest = (o - 1) * stride[s] - pad_begin[s] - pad_end[s] + effective;
    if (smallest < 1) {
      return invalid(message, where + ": the transposed convolution of " + out_name + "'s extent " +
                                  std::to_string(o) + " with " + geometry +
                                  " has an output size <= 0 (the padding crops everything)");
    }
    return invalid(message, where + ": " + in_name + " has extent " + std::to_string(in) +
                                "; the transposed convolution of " + out_name + "'s " +
                                std::to_string(o) + " with " + geometry + " gives " +
                                std::to_string(smallest) + ".." +
                                std::to_string(smallest + stride[s] - 1) +
                                " (output_padding below the stride)");
  }

  const int64_t y_channels = y.shape[1];
  if (has_bias) {
    const char* bias_name = backward_weights ? "grad_bias (desc->bias)" : "bias";
    std::string problem = backward_weights ? check_output(bias_name, desc.bias, kFloatDtypes, 1, 1)
                                           : check_tensor(bias_name, desc.bias, kFloatDtypes, 1, 1);
    if (problem.empty()) problem = check_shape(bias_name, desc.bias, {y_channels});
    if (reject(std::move(problem), message)) return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (has_residual &&
      (reject(check_tensor("residual", desc.residual, kFloatDtypes, rank, rank), message) ||
       reject(check_same_shape("residual", desc.residual, "y", desc.y), message)))
    return HAL_ERROR_INVALID_ARGUMENT;

  if (forward) {
    add_operand(*out, "x", Role::kInput, desc.x);
    add_operand(*out, "w", Role::kInput, desc.w);
    if (has_bias) {
      add_operand(*out, "bias", Role::kInput, desc.bias);
    } else {
      add_unused(*out, "bias");
    }
    int residual = -1;
    if (has_residual) {
      residual = add_operand(*out, "residual", Role::kInput, desc.residual);
    } else {
      add_unused(*out, "residual");
    }
    add_operand(*out, "y", Role::kOutput, desc.y, residual);
  } else if (backward_data) {
    add_operand(*out, "grad_y", Role::kInput, desc.y);
    add_operand(*out, "w", Role::kInput, desc.w);
    add_operand(*out, "grad_x", Role::kOutput, desc.x);
  } else {
    add_operand(*out, "x", Role::kInput, desc.x);
    add_operand(*out, "grad_y", Role::kInput, desc.y);
    add_operand(*out, "grad_w", Role::kOutput, desc.w);
    if (has_bias) {
      add_operand(*out, "grad_bias", Role::kOutput, desc.bias);
    } else {
      add_unused(*out, "grad_bias");
    }
  }
  std::string summary = std::to_string(desc.spatial_dims) + "-D " + layout + " kernel " +
                        dims_text(kernel, desc.spatial_dims) + " stride " +
                        dims_text(stride, desc.spatial_dims) + " dilation " +
                        dims_text(dilation, desc.spatial_dims) + " pad " +
                        dims_text(pad_begin, desc.spatial_dims) + "+" +
                        dims_text(pad_end, desc.spatial_dims) + " groups " + std::to_string(groups);
  if (transposed) summary += " transposed";
  if (has_bias) summary += " bias";
  if (has_residual) summary += " residual";
  if (forward && desc.activation != HAL_ACTIVATION_NONE) {
    summary += " activation " + std::to_string(desc.activation);
  }
  out->summary = std::move(summary);
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_convolution_family(const hal_op_header_t* desc, OpSignature* out,
                                         std::string* message) {
  switch (desc->kind) {
    case HAL_OP_CONVOLUTION:
    case HAL_OP_CONVOLUTION_BACKWARD_DATA:
    case HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS:
      return describe_convolution(*reinterpret_cast<const hal_op_convolution_desc_t*>(desc), out,
                                  message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
