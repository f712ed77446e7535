// BATCH_NORM(_BACKWARD) and GROUP_NORM(_BACKWARD): normalisation over the
// channels of a [N, C, spatial...] (or channels-last) tensor (hal/ops.h).
#include "definitions.hpp"
#include "scalars.hpp"
#include "hal_ops/spatial.hpp"

#include <cmath>
#include <cstdint>

namespace hal::ops::definitions {

namespace {

// A per-channel tensor: rank 1, [C], of |allowed| dtypes, any stride.
std::string check_channels(const char* name, const hal_tensor_desc_t& tensor, int64_t channels,
                           DtypeSet allowed, Role role) {
  std::string problem = role == Role::kInput ? check_tensor(name, tensor, allowed, 1, 1)
                                             : check_output(name, tensor, allowed, 1, 1);
  if (problem.empty()) problem = check_shape(name, tensor, {channels});
  if (!problem.empty()) problem += " (one value per channel)";
  return problem;
}

// The layout, and epsilon by the rule of §17.2 every norm shares: the
// forward divides by sqrt(var + epsilon) (var = 0 for a constant channel or
// group, and running_var may hold 0), so epsilon is a positive normal f32;
// a backward that reads the rstd the forward saved does not use it.
std::string check_layout_and_epsilon(hal_channel_layout_t layout, float epsilon,
                                     bool reads_saved_rstd) {
  if (static_cast<uint32_t>(layout) >= HAL_CHANNELS_COUNT) {
    return "desc->layout " + std::to_string(layout) + " is not a hal_channel_layout_t";
  }
  return reads_saved_rstd
             ? check_non_negative_scalar("desc->epsilon", epsilon)
             : check_positive_normal_scalar(
                   "desc->epsilon", epsilon,
                   "values are divided by sqrt(var + epsilon), and a constant channel has "
                   "var 0");
}

// The momentum scalar of a training forward that updates the running stats.
// Checked as the f32 the update computes with, then its range.
std::string check_momentum(const hal_op_scalar_t* scalars) {
  const double momentum = scalars[0].f64;
  std::string why =
      check_f32_run_time_scalar("scalar 0 (momentum)", momentum, Sign::kNonNegative, "batch norm");
  if (!why.empty()) return why;
  if (momentum <= 1.0) return {};
  return "scalar 0 (momentum) is " + std::to_string(momentum) + "; it must be in [0, 1]";
}

constexpr uint32_t kBatchNormForwardFlags = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SCALE |
                                            HAL_BATCH_NORM_SHIFT | HAL_BATCH_NORM_UPDATE_RUNNING |
                                            HAL_BATCH_NORM_SAVE_STATS | HAL_BATCH_NORM_RELU;
constexpr uint32_t kBatchNormBackwardFlags = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SCALE |
                                             HAL_BATCH_NORM_SHIFT | HAL_BATCH_NORM_RELU |
                                             HAL_BATCH_NORM_GRAD_SCALE | HAL_BATCH_NORM_GRAD_SHIFT;

hal_result_t describe_batch_norm(const hal_op_batch_norm_desc_t& desc, OpSignature* out,
                                 std::string* message) {
  const bool backward = desc.header.kind == HAL_OP_BATCH_NORM_BACKWARD;
  // A training backward reads the saved rstd; an inference one divides by
  // sqrt(running_var + epsilon) as the forward does.
  const bool reads_saved_rstd = backward && (desc.flags & HAL_BATCH_NORM_TRAINING) != 0;
  if (reject(check_layout_and_epsilon(desc.layout, desc.epsilon, reads_saved_rstd), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (desc.reserved != 0) return invalid(message, "desc->reserved must be 0");
  const uint32_t allowed = backward ? kBatchNormBackwardFlags : kBatchNormForwardFlags;
  if ((desc.flags & ~allowed) != 0) {
    return invalid(message, "desc->flags " + hex_text(desc.flags) + " has bits " +
                                hex_text(desc.flags & ~allowed) +
                                (backward ? " that batch_norm_backward does not take "
                                            "(UPDATE_RUNNING and SAVE_STATS are the forward's)"
                                          : " that batch_norm does not take (GRAD_SCALE and "
                                            "GRAD_SHIFT are the backward's, or unknown)"));
  }
  const uint32_t flags = desc.flags;
  const bool training = (flags & HAL_BATCH_NORM_TRAINING) != 0;
  const bool update = (flags & HAL_BATCH_NORM_UPDATE_RUNNING) != 0;
  const bool save = (flags & HAL_BATCH_NORM_SAVE_STATS) != 0;
  const bool relu = (flags & HAL_BATCH_NORM_RELU) != 0;
  if (!training && (update || save)) {
    return invalid(message,
                   "HAL_BATCH_NORM_UPDATE_RUNNING and HAL_BATCH_NORM_SAVE_STATS need "
                   "HAL_BATCH_NORM_TRAINING (inference reads the running statistics)");
  }
  if (reject(check_tensor("x", desc.x, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const uint32_t channel = channel_dim(desc.layout, desc.x.rank);
  const int64_t channels = desc.x.shape[channel];
  const int64_t per_channel = channels > 0 ? element_count(desc.x) / channels : 0;
  if (channels < 1) {
    return invalid(message, "x " + describe_tensor(desc.x) + " has no channels (C = 0)");
  }
  if (!backward && training && per_channel < 1) {
    return invalid(message, "x " + describe_tensor(desc.x) +
                                " has no values per channel: training takes the statistics "
                                "of at least one");
  }
  if (update && per_channel < 2) {
    return invalid(message, "x " + describe_tensor(desc.x) +
                                " has one value per channel: the running variance is the "
                                "unbiased one (m / (m - 1)), which needs at least two");
  }
  const bool has_scale = (flags & HAL_BATCH_NORM_SCALE) != 0;
  const bool has_shift = (flags & HAL_BATCH_NORM_SHIFT) != 0;
  if ((has_scale &&
       reject(check_channels("scale", desc.scale, channels, kFloatDtypes, Role::kInput),
              message)) ||
      (has_shift &&
       reject(check_channels("shift", desc.shift, channels, kFloatDtypes, Role::kInput), message)))
    return HAL_ERROR_INVALID_ARGUMENT;
  // Which statistics the op reads or writes.
  const bool running_read = !training;
  const bool running_written = training && update;
  const bool saved_written = !backward && training && save;
  const bool saved_read = backward && training;
  if ((running_read || running_written) &&
      (reject(check_channels("running_mean", desc.running_mean, channels, kFloatDtypes,
                             running_written ? Role::kInOut : Role::kInput),
              message) ||
       reject(check_channels("running_var", desc.running_var, channels, kFloatDtypes,
                             running_written ? Role::kInOut : Role::kInput),
              message)))
    return HAL_ERROR_INVALID_ARGUMENT;
  if ((saved_written || saved_read) &&
      (reject(check_channels("saved_mean", desc.saved_mean, channels, kF32Only,
                             saved_written ? Role::kOutput : Role::kInput),
              message) ||
       reject(check_channels("saved_rstd", desc.saved_rstd, channels, kF32Only,
                             saved_written ? Role::kOutput : Role::kInput),
              message)))
    return HAL_ERROR_INVALID_ARGUMENT;

  const auto statistic = [&](const char* name, const hal_tensor_desc_t& tensor, bool used,
                             Role role) {
    if (used) {
      add_operand(*out, name, role, tensor);
    } else {
      add_unused(*out, name);
    }
  };
  if (!backward) {
    if (reject(check_output("y", desc.y, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_same_shape("y", desc.y, "x", desc.x), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    const int x = add_operand(*out, "x", Role::kInput, desc.x);
    statistic("scale", desc.scale, has_scale, Role::kInput);
    statistic("shift", desc.shift, has_shift, Role::kInput);
    const Role running_role = running_written ? Role::kInOut : Role::kInput;
    statistic("running_mean", desc.running_mean, running_read || running_written, running_role);
    statistic("running_var", desc.running_var, running_read || running_written, running_role);
    add_operand(*out, "y", Role::kOutput, desc.y, x);
    statistic("saved_mean", desc.saved_mean, saved_written, Role::kOutput);
    statistic("saved_rstd", desc.saved_rstd, saved_written, Role::kOutput);
    if (update) {
      out->scalars.push_back({"momentum", ScalarType::kF64});
      set_scalar_check(*out, check_momentum);
    }
  } else {
    const bool grad_scale = (flags & HAL_BATCH_NORM_GRAD_SCALE) != 0;
    const bool grad_shift = (flags & HAL_BATCH_NORM_GRAD_SHIFT) != 0;
    if (reject(check_tensor("grad_y", desc.grad_y, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_y", desc.grad_y, "x", desc.x), message) ||
        reject(check_output("grad_x", desc.grad_x, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_x", desc.grad_x, "x", desc.x), message) ||
        (relu &&
         (reject(check_tensor("y", desc.y, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message) ||
          reject(check_same_shape("y", desc.y, "x", desc.x), message))) ||
        (grad_scale && reject(check_channels("grad_scale", desc.grad_scale, channels, kFloatDtypes,
                                             Role::kOutput),
                              message)) ||
        (grad_shift && reject(check_channels("grad_shift", desc.grad_shift, channels, kFloatDtypes,
                                             Role::kOutput),
                              message)))
      return HAL_ERROR_INVALID_ARGUMENT;
    add_operand(*out, "x", Role::kInput, desc.x);
    const int grad_y = add_operand(*out, "grad_y", Role::kInput, desc.grad_y);
    statistic("scale", desc.scale, has_scale, Role::kInput);
    statistic("saved_mean", desc.saved_mean, saved_read, Role::kInput);
    statistic("saved_rstd", desc.saved_rstd, saved_read, Role::kInput);
    statistic("running_mean", desc.running_mean, running_read, Role::kInput);
    statistic("running_var", desc.running_var, running_read, Role::kInput);
    statistic("y", desc.y, relu, Role::kInput);
    add_operand(*out, "grad_x", Role::kOutput, desc.grad_x, grad_y);
    statistic("grad_scale", desc.grad_scale, grad_scale, Role::kOutput);
    statistic("grad_shift", desc.grad_shift, grad_shift, Role::kOutput);
  }
  out->summary = std::string(training ? "training" : "inference") + " " +
                 (desc.layout == HAL_CHANNELS_LAST ? "channels_last" : "channels_first") +
                 " C=" + std::to_string(channels) + " m=" + std::to_string(per_channel) +
                 (relu ? " relu" : "");
  return HAL_SUCCESS;
}

constexpr uint32_t kGroupNormForwardFlags =
    HAL_GROUP_NORM_SCALE | HAL_GROUP_NORM_SHIFT | HAL_GROUP_NORM_SAVE_STATS;
constexpr uint32_t kGroupNormBackwardFlags = HAL_GROUP_NORM_SCALE | HAL_GROUP_NORM_SHIFT |
                                             HAL_GROUP_NORM_GRAD_SCALE | HAL_GROUP_NORM_GRAD_SHIFT;

hal_result_t describe_group_norm(const hal_op_group_norm_desc_t& desc, OpSignature* out,
                                 std::string* message) {
  const bool backward = desc.header.kind == HAL_OP_GROUP_NORM_BACKWARD;
  if (reject(check_layout_and_epsilon(desc.layout, desc.epsilon, backward), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const uint32_t allowed = backward ? kGroupNormBackwardFlags : kGroupNormForwardFlags;
  if ((desc.flags & ~allowed) != 0) {
    return invalid(message, "desc->flags " + hex_text(desc.flags) + " has bits " +
                                hex_text(desc.flags & ~allowed) +
                                (backward ? " that group_norm_backward does not take "
                                            "(SAVE_STATS is the forward's)"
                                          : " that group_norm does not take (GRAD_SCALE and "
                                            "GRAD_SHIFT are the backward's, or unknown)"));
  }
  if (reject(check_tensor("x", desc.x, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int64_t batch = desc.x.shape[0];
  const int64_t channels = desc.x.shape[channel_dim(desc.layout, desc.x.rank)];
  const int64_t groups = desc.groups;
  if (groups < 1 || channels % groups != 0 || channels < 1) {
    return invalid(message, "desc->groups " + std::to_string(groups) +
                                " must be at least 1 and divide x's channels (" +
                                std::to_string(channels) + ", x " + describe_tensor(desc.x) + ")");
  }
  const uint32_t flags = desc.flags;
  const bool has_scale = (flags & HAL_GROUP_NORM_SCALE) != 0;
  const bool has_shift = (flags & HAL_GROUP_NORM_SHIFT) != 0;
  if ((has_scale &&
       reject(check_channels("scale", desc.scale, channels, kFloatDtypes, Role::kInput),
              message)) ||
      (has_shift &&
       reject(check_channels("shift", desc.shift, channels, kFloatDtypes, Role::kInput), message)))
    return HAL_ERROR_INVALID_ARGUMENT;
  const auto check_statistic = [&](const char* name, const hal_tensor_desc_t& tensor, bool output) {
    std::string problem = output ? check_output(name, tensor, kF32Only, 2, 2)
                                 : check_tensor(name, tensor, kF32Only, 2, 2);
    if (problem.empty()) problem = check_shape(name, tensor, {batch, groups});
    if (!problem.empty()) problem += " (one value per sample and group)";
    return problem;
  };
  const auto optional = [&](const char* name, const hal_tensor_desc_t& tensor, bool used,
                            Role role) {
    if (used) {
      add_operand(*out, name, role, tensor);
    } else {
      add_unused(*out, name);
    }
  };
  if (!backward) {
    const bool save = (flags & HAL_GROUP_NORM_SAVE_STATS) != 0;
    if (reject(check_output("y", desc.y, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_same_shape("y", desc.y, "x", desc.x), message) ||
        (save && (reject(check_statistic("mean", desc.mean, true), message) ||
                  reject(check_statistic("rstd", desc.rstd, true), message))))
      return HAL_ERROR_INVALID_ARGUMENT;
    const int x = add_operand(*out, "x", Role::kInput, desc.x);
    optional("scale", desc.scale, has_scale, Role::kInput);
    optional("shift", desc.shift, has_shift, Role::kInput);
    add_operand(*out, "y", Role::kOutput, desc.y, x);
    optional("mean", desc.mean, save, Role::kOutput);
    optional("rstd", desc.rstd, save, Role::kOutput);
  } else {
    const bool grad_scale = (flags & HAL_GROUP_NORM_GRAD_SCALE) != 0;
    const bool grad_shift = (flags & HAL_GROUP_NORM_GRAD_SHIFT) != 0;
    if (reject(check_statistic("mean", desc.mean, false), message) ||
        reject(check_statistic("rstd", desc.rstd, false), message) ||
        reject(check_tensor("grad_y", desc.grad_y, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_y", desc.grad_y, "x", desc.x), message) ||
        reject(check_output("grad_x", desc.grad_x, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_x", desc.grad_x, "x", desc.x), message) ||
        (grad_scale && reject(check_channels("grad_scale", desc.grad_scale, channels, kFloatDtypes,
                                             Role::kOutput),
                              message)) ||
        (grad_shift && reject(check_channels("grad_shift", desc.grad_shift, channels, kFloatDtypes,
                                             Role::kOutput),
                              message)))
      return HAL_ERROR_INVALID_ARGUMENT;
    add_operand(*out, "x", Role::kInput, desc.x);
    const int grad_y = add_operand(*out, "grad_y", Role::kInput, desc.grad_y);
    optional("scale", desc.scale, has_scale, Role::kInput);
    add_operand(*out, "mean", Role::kInput, desc.mean);
    add_operand(*out, "rstd", Role::kInput, desc.rstd);
    add_operand(*out, "grad_x", Role::kOutput, desc.grad_x, grad_y);
    optional("grad_scale", desc.grad_scale, grad_scale, Role::kOutput);
    optional("grad_shift", desc.grad_shift, grad_shift, Role::kOutput);
  }
  out->summary =
      std::string(desc.layout == HAL_CHANNELS_LAST ? "channels_last" : "channels_first") +
      " N=" + std::to_string(batch) + " C=" + std::to_string(channels) +
      " groups=" + std::to_string(groups);
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_channel_norm_family(const hal_op_header_t* desc, OpSignature* out,
                                          std::string* message) {
  switch (desc->kind) {
    case HAL_OP_BATCH_NORM:
    case HAL_OP_BATCH_NORM_BACKWARD:
      return describe_batch_norm(*reinterpret_cast<const hal_op_batch_norm_desc_t*>(desc), out,
                                 message);
    case HAL_OP_GROUP_NORM:
    case HAL_OP_GROUP_NORM_BACKWARD:
      return describe_group_norm(*reinterpret_cast<const hal_op_group_norm_desc_t*>(desc), out,
                                 message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
