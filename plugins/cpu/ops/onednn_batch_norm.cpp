// HAL_OP_BATCH_NORM and HAL_OP_BATCH_NORM_BACKWARD on oneDNN's
// batch_normalization primitives, with what oneDNN does not do as host steps
// around them:
//  - training forward: oneDNN writes the batch mean and (biased) variance
//    into the workspace; a host step then writes saved_mean, saved_rstd =
//    1/sqrt(var + epsilon) and, with UPDATE_RUNNING, the running statistics
//    (momentum from the execution's scalar, the unbiased variance m/(m-1));
//  - inference forward: use_global_stats on running_mean and running_var
//    (f32 copies in the workspace when they are another dtype or strided);
//  - backward: oneDNN takes the variance, HAL saves rstd: a host step
//    writes var = 1/rstd^2 - epsilon into the workspace first (oneDNN then
//    computes 1/sqrt(var + epsilon), rstd again to a few ulp). Without
//    scale oneDNN reads ones from the workspace; a gradient the caller does
//    not ask for goes to the workspace.
// The fused relu runs as oneDNN's fuse_norm_relu in the forward (its
// training mask in the workspace); the backward with RELU is declined (the
// mask is not an operand: the portable implementation serves it from y).
#include <dnnl.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "native_half.hpp"
#include "onednn_common.hpp"
#include "onednn_primitive.hpp"
#include "ops.hpp"

namespace hal::cpu::ops {
namespace {

using dnnl::memory;
using dnnl::normalization_flags;
using dnnl::prop_kind;
using tag = memory::format_tag;

struct NormTensor {
  memory::dims dims, strides;
  hal_dtype_t dtype = HAL_DTYPE_F32;
};

// [N, C, rest...] of a rank >= 2 tensor whose channel is dimension 1 or the last.
NormTensor norm_canonical(const hal_tensor_desc_t& tensor, hal_channel_layout_t layout) {
  NormTensor out;
  out.dtype = tensor.dtype;
  const uint32_t channel = layout == HAL_CHANNELS_LAST ? tensor.rank - 1 : 1;
  out.dims = {tensor.shape[0], tensor.shape[channel]};
  out.strides = {tensor.strides[0], tensor.strides[channel]};
  for (uint32_t d = 1; d < tensor.rank; ++d) {
    if (d == channel) continue;
    out.dims.push_back(tensor.shape[d]);
    out.strides.push_back(tensor.strides[d]);
  }
  return out;
}

memory::desc norm_attempt_of(const NormTensor& t, const Attempt& a) {
  const memory::data_type type = a.f32 ? memory::data_type::f32 : *onednn_dtype(t.dtype);
  if (a.activations_any) return memory::desc(t.dims, type, tag::any);
  return strided_desc(t.dims, t.strides, type);
}

memory::desc user_vector(const hal_tensor_desc_t& tensor) {
  return user_desc({tensor.shape[0]}, {tensor.strides[0]}, tensor.dtype);
}

float load(const void* base, hal_dtype_t dtype, int64_t index) {
  float value = 0;
  native::to_f32({base, dtype}, static_cast<size_t>(index), 1, &value);
  return value;
}

void store(void* base, hal_dtype_t dtype, int64_t index, float value) {
  native::from_f32(&value, {base, dtype}, static_cast<size_t>(index), 1);
}

// Operands (api/hal/ops.h).
enum Forward {
  kX = 0,
  kScale = 1,
  kShift = 2,
  kRunMean = 3,
  kRunVar = 4,
  kY = 5,
  kSavedMean = 6,
  kSavedRstd = 7
};
enum Backward {
  kBx = 0,
  kBgy = 1,
  kBscale = 2,
  kBsavedMean = 3,
  kBsavedRstd = 4,
  kBrunMean = 5,
  kBrunVar = 6,
  kBy = 7,
  kBgx = 8,
  kBgscale = 9,
  kBgshift = 10
};

bool is_reference(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).find("ref") != std::string::npos;
}

}  // namespace

std::unique_ptr<OpPlan> plan_batch_norm(const hal_op_batch_norm_desc_t& desc, hal_op_plan_flags_t,
                                        Decline& decline) {
  // The native loops first (native_batch_norm.cpp: oneDNN 2.6's ncsp kernel
  // costs ~0.2 ms a call and is slower than PyTorch's); its decline says why
  // when oneDNN then declines too.
  Decline native_decline;
  if (auto native = plan_native_batch_norm(desc, native_decline)) return native;
  const bool backward = desc.header.kind == HAL_OP_BATCH_NORM_BACKWARD;
  const uint32_t flags = desc.flags;
  const bool training = (flags & HAL_BATCH_NORM_TRAINING) != 0;
  const bool has_scale = (flags & HAL_BATCH_NORM_SCALE) != 0;
  const bool has_shift = (flags & HAL_BATCH_NORM_SHIFT) != 0;
  const bool relu = (flags & HAL_BATCH_NORM_RELU) != 0;
  const bool update = (flags & HAL_BATCH_NORM_UPDATE_RUNNING) != 0;
  const bool save = (flags & HAL_BATCH_NORM_SAVE_STATS) != 0;
  if (backward && relu) {
    decline.reason =
        "the fused relu's backward: oneDNN's needs its forward mask, which is not an "
        "operand";
    return nullptr;
  }
  if (tensor_elements(desc.x) == 0) {
    decline.reason = "an empty tensor is left to the portable implementation";
    return nullptr;
  }
  const NormTensor x = norm_canonical(desc.x, desc.layout);
  const int64_t channels = x.dims[1];
  const int64_t per_channel = tensor_elements(desc.x) / channels;
  const float epsilon = desc.epsilon;
  const memory::desc vector_f32({channels}, memory::data_type::f32, tag::a);

  std::unique_ptr<OpPlan> plan;
  run_onednn_call(OnednnPlacement::kOnednnThread, [&] {
    for (const Attempt& attempt : attempts()) {
      if (attempt.weights_any && !attempt.activations_any) continue;  // no weights here
      const bool last = &attempt == &attempts().back();
      try {
        const memory::desc data = norm_attempt_of(x, attempt);
        std::vector<PrimitiveStep> steps;
        std::vector<std::shared_ptr<Scratch>> scratch;
        normalization_flags nflags = normalization_flags::none;
        if (!backward) {
          if (has_scale) nflags |= normalization_flags::use_scale;
          if (has_shift) nflags |= normalization_flags::use_shift;
          if (!training) nflags |= normalization_flags::use_global_stats;
          if (relu) nflags |= normalization_flags::fuse_norm_relu;
          dnnl::batch_normalization_forward::primitive_desc pd(
              dnnl::batch_normalization_forward::desc(
                  training ? prop_kind::forward_training : prop_kind::forward_inference, data,
                  epsilon, nflags),
              user_scratchpad(), onednn_engine());
          if (is_reference(pd) && !last) continue;
          PrimitiveStep step;
          step.primitive = dnnl::batch_normalization_forward(pd);
          step.tensors.push_back(bind(DNNL_ARG_SRC, kX, TensorRole::kInput,
                                      user_desc(x.dims, x.strides, x.dtype), pd.src_desc()));
          const NormTensor y = norm_canonical(desc.y, desc.layout);
          step.tensors.push_back(bind(DNNL_ARG_DST, kY, TensorRole::kOutput,
                                      user_desc(y.dims, y.strides, y.dtype), pd.dst_desc()));
          if (has_scale) {
            step.tensors.push_back(bind(DNNL_ARG_SCALE, kScale, TensorRole::kInput,
                                        user_vector(desc.scale), vector_f32));
          }
          if (has_shift) {
            step.tensors.push_back(bind(DNNL_ARG_SHIFT, kShift, TensorRole::kInput,
                                        user_vector(desc.shift), vector_f32));
          }
          std::shared_ptr<Scratch> mean, variance;
          if (training) {
            mean = std::make_shared<Scratch>();
            variance = std::make_shared<Scratch>();
            step.tensors.push_back(
                bind_scratch(DNNL_ARG_MEAN, TensorRole::kOutput, vector_f32, mean));
            step.tensors.push_back(
                bind_scratch(DNNL_ARG_VARIANCE, TensorRole::kOutput, vector_f32, variance));
            if (relu) {
              step.tensors.push_back(bind_scratch(DNNL_ARG_WORKSPACE, TensorRole::kOutput,
                                                  pd.workspace_desc(),
                                                  std::make_shared<Scratch>()));
            }
          } else {
            step.tensors.push_back(bind(DNNL_ARG_MEAN, kRunMean, TensorRole::kInput,
                                        user_vector(desc.running_mean), vector_f32));
            step.tensors.push_back(bind(DNNL_ARG_VARIANCE, kRunVar, TensorRole::kInput,
                                        user_vector(desc.running_var), vector_f32));
          }
          steps.push_back(std::move(step));
          if (training && (save || update)) {
            // saved_rstd and the running update from oneDNN's statistics.
            PrimitiveStep host;
            const hal_tensor_desc_t saved_mean = desc.saved_mean, saved_rstd = desc.saved_rstd;
            const hal_tensor_desc_t run_mean = desc.running_mean, run_var = desc.running_var;
            const double m = static_cast<double>(per_channel);
            host.host = [=](void* const* operands, unsigned char* base,
                            const hal_op_scalar_t* scalars) {
              const auto* means = reinterpret_cast<const float*>(base + mean->offset);
              const auto* vars = reinterpret_cast<const float*>(base + variance->offset);
              for (int64_t c = 0; c < channels; ++c) {
                if (save) {
                  static_cast<float*>(operands[kSavedMean])[c * saved_mean.strides[0]] = means[c];
                  static_cast<float*>(operands[kSavedRstd])[c * saved_rstd.strides[0]] =
                      1.0f / std::sqrt(vars[c] + epsilon);
                }
                if (update) {
                  const auto momentum = static_cast<float>(scalars[0].f64);
                  const float unbiased = static_cast<float>(vars[c] * (m / (m - 1)));
                  const int64_t im = c * run_mean.strides[0], iv = c * run_var.strides[0];
                  const float rm = load(operands[kRunMean], run_mean.dtype, im);
                  const float rv = load(operands[kRunVar], run_var.dtype, iv);
                  store(operands[kRunMean], run_mean.dtype, im,
                        (1.0f - momentum) * rm + momentum * means[c]);
                  store(operands[kRunVar], run_var.dtype, iv,
                        (1.0f - momentum) * rv + momentum * unbiased);
                }
              }
            };
            steps.push_back(std::move(host));
          }
        } else {
          nflags |= normalization_flags::use_scale | normalization_flags::use_shift;
          if (!training) nflags |= normalization_flags::use_global_stats;
          dnnl::batch_normalization_forward::primitive_desc hint(
              dnnl::batch_normalization_forward::desc(prop_kind::forward_training, data, epsilon,
                                                      nflags),
              onednn_engine());
          dnnl::batch_normalization_backward::primitive_desc pd(
              dnnl::batch_normalization_backward::desc(prop_kind::backward, data, data, epsilon,
                                                       nflags),
              user_scratchpad(), onednn_engine(), hint);
          if (is_reference(pd) && !last) continue;
          PrimitiveStep step;
          step.primitive = dnnl::batch_normalization_backward(pd);
          const NormTensor gy = norm_canonical(desc.grad_y, desc.layout);
          const NormTensor gx = norm_canonical(desc.grad_x, desc.layout);
          step.tensors.push_back(bind(DNNL_ARG_SRC, kBx, TensorRole::kInput,
                                      user_desc(x.dims, x.strides, x.dtype), pd.src_desc()));
          step.tensors.push_back(bind(DNNL_ARG_DIFF_DST, kBgy, TensorRole::kInput,
                                      user_desc(gy.dims, gy.strides, gy.dtype),
                                      pd.diff_dst_desc()));
          step.tensors.push_back(bind(DNNL_ARG_DIFF_SRC, kBgx, TensorRole::kOutput,
                                      user_desc(gx.dims, gx.strides, gx.dtype),
                                      pd.diff_src_desc()));
          // oneDNN takes a shift in the backward too (use_shift gives
          // diff_shift); it does not change any gradient: zeros.
          std::shared_ptr<Scratch> ones, variance, zeros = std::make_shared<Scratch>();
          step.tensors.push_back(
              bind_scratch(DNNL_ARG_SHIFT, TensorRole::kInput, vector_f32, zeros));
          if (has_scale) {
            step.tensors.push_back(bind(DNNL_ARG_SCALE, kBscale, TensorRole::kInput,
                                        user_vector(desc.scale), vector_f32));
          } else {
            ones = std::make_shared<Scratch>();
            step.tensors.push_back(
                bind_scratch(DNNL_ARG_SCALE, TensorRole::kInput, vector_f32, ones));
          }
          if (training) {
            variance = std::make_shared<Scratch>();
            step.tensors.push_back(bind(DNNL_ARG_MEAN, kBsavedMean, TensorRole::kInput,
                                        user_vector(desc.saved_mean), vector_f32));
            step.tensors.push_back(
                bind_scratch(DNNL_ARG_VARIANCE, TensorRole::kInput, vector_f32, variance));
          } else {
            step.tensors.push_back(bind(DNNL_ARG_MEAN, kBrunMean, TensorRole::kInput,
                                        user_vector(desc.running_mean), vector_f32));
            step.tensors.push_back(bind(DNNL_ARG_VARIANCE, kBrunVar, TensorRole::kInput,
                                        user_vector(desc.running_var), vector_f32));
          }
          if ((flags & HAL_BATCH_NORM_GRAD_SCALE) != 0) {
            step.tensors.push_back(bind(DNNL_ARG_DIFF_SCALE, kBgscale, TensorRole::kOutput,
                                        user_vector(desc.grad_scale), vector_f32));
          } else {
            step.tensors.push_back(bind_scratch(DNNL_ARG_DIFF_SCALE, TensorRole::kOutput,
                                                vector_f32, std::make_shared<Scratch>()));
          }
          if ((flags & HAL_BATCH_NORM_GRAD_SHIFT) != 0) {
            step.tensors.push_back(bind(DNNL_ARG_DIFF_SHIFT, kBgshift, TensorRole::kOutput,
                                        user_vector(desc.grad_shift), vector_f32));
          } else {
            step.tensors.push_back(bind_scratch(DNNL_ARG_DIFF_SHIFT, TensorRole::kOutput,
                                                vector_f32, std::make_shared<Scratch>()));
          }
          {
            PrimitiveStep host;
            const hal_tensor_desc_t saved_rstd = desc.saved_rstd;
            host.host = [=](void* const* operands, unsigned char* base, const hal_op_scalar_t*) {
              for (int64_t c = 0; c < channels; ++c) {
                reinterpret_cast<float*>(base + zeros->offset)[c] = 0.0f;
                if (ones) reinterpret_cast<float*>(base + ones->offset)[c] = 1.0f;
                if (variance) {
                  const float r =
                      static_cast<const float*>(operands[kBsavedRstd])[c * saved_rstd.strides[0]];
                  reinterpret_cast<float*>(base + variance->offset)[c] = 1.0f / (r * r) - epsilon;
                }
              }
            };
            steps.push_back(std::move(host));
          }
          steps.push_back(std::move(step));  // after the host step that prepares its inputs
        }
        const size_t workspace = lay_out_workspace(steps, scratch);
        const uint32_t operands = backward ? 11 : 8;
        const uint32_t scalars = !backward && training && update ? 1 : 0;
        plan = std::make_unique<PrimitivePlan>(std::move(steps), workspace, operands, scalars,
                                               static_cast<double>(tensor_elements(desc.x)));
        return;
      } catch (const dnnl::error& error) {
        if (error.status == dnnl_unimplemented || error.status == dnnl_invalid_arguments) continue;
        throw;
      }
    }
  });
  if (!plan) {
    decline.reason = onednn_version_text() +
                     " builds no batch normalization for x=" + dtype_text(desc.x.dtype) +
                     " (also tried as f32); " + native_decline.reason;
  }
  return plan;
}

}  // namespace hal::cpu::ops
