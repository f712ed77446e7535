// HAL_OP_POOLING and HAL_OP_POOLING_BACKWARD on oneDNN's pooling_v2
// primitives: average pooling, with or without padding in the divisor,
// fixed windows (ceil mode as a larger right padding) and adaptive ones
// whose windows are fixed (an input extent a multiple of the output's).
//
// Max pooling is the plugin's own host loops (max_pooling.cpp): oneDNN keeps
// its argmax in a workspace of its own format (not PyTorch's flat indices,
// which HAL's backward reads) and its comparisons skip a NaN, where SPEC
// §17.6.9 propagates it.
//
// Declined, with the reason, for the portable implementation:
//  - divisor_override, and adaptive windows of uneven sizes (no oneDNN
//    algorithm has them);
//  - ceil mode with COUNT_INCLUDE_PAD: oneDNN would count the overhang
//    past pad_end in the divisor, HAL (and PyTorch) do not.
#include <dnnl.hpp>

#include <memory>
#include <string>
#include <vector>

#include "onednn_common.hpp"
#include "onednn_primitive.hpp"
#include "ops.hpp"

namespace hal::cpu::ops {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;

struct PoolingTensor {
  memory::dims dims, strides;
  hal_dtype_t dtype = HAL_DTYPE_F32;
};

// [N, C, spatial...] of a tensor in |layout|'s order.
PoolingTensor pooling_canonical(const hal_tensor_desc_t& tensor, hal_channel_layout_t layout,
                                uint32_t spatial_dims) {
  PoolingTensor out;
  out.dtype = tensor.dtype;
  const auto take = [&](uint32_t d) {
    out.dims.push_back(tensor.shape[d]);
    out.strides.push_back(tensor.strides[d]);
  };
  take(0);
  take(layout == HAL_CHANNELS_LAST ? spatial_dims + 1 : 1);
  for (uint32_t s = 0; s < spatial_dims; ++s) take(layout == HAL_CHANNELS_LAST ? 1 + s : 2 + s);
  return out;
}

memory::desc pooling_attempt_of(const PoolingTensor& t, const Attempt& a) {
  const memory::data_type type = a.f32 ? memory::data_type::f32 : *onednn_dtype(t.dtype);
  if (a.activations_any) return memory::desc(t.dims, type, tag::any);
  return strided_desc(t.dims, t.strides, type);
}

}  // namespace

std::unique_ptr<OpPlan> plan_pooling(const hal_op_pooling_desc_t& desc, hal_op_plan_flags_t,
                                     Decline& decline) {
  if (desc.pooling == HAL_POOLING_MAX) return plan_max_pooling(desc, decline);
  if (desc.divisor_override != 0) {
    decline.reason = "divisor_override has no oneDNN pooling algorithm";
    return nullptr;
  }
  const bool backward = desc.header.kind == HAL_OP_POOLING_BACKWARD;
  const bool adaptive = (desc.flags & HAL_POOLING_ADAPTIVE) != 0;
  const bool include_pad = (desc.flags & HAL_POOLING_COUNT_INCLUDE_PAD) != 0;
  const uint32_t sd = desc.spatial_dims;
  const PoolingTensor x = pooling_canonical(desc.x, desc.layout, sd);
  const PoolingTensor y = pooling_canonical(desc.y, desc.layout, sd);
  if (tensor_elements(desc.x) == 0 || tensor_elements(desc.y) == 0) {
    decline.reason = "an empty batch (N = 0) is left to the portable implementation";
    return nullptr;
  }
  memory::dims strides, kernel, dilation, pad_l, pad_r;
  for (uint32_t s = 0; s < sd; ++s) {
    const int64_t in = x.dims[2 + s];
    const int64_t out = y.dims[2 + s];
    if (adaptive) {
      if (in % out != 0) {
        decline.reason =
            "adaptive windows of uneven sizes (an input extent that is not a "
            "multiple of the output's) have no oneDNN pooling";
        return nullptr;
      }
      strides.push_back(in / out);
      kernel.push_back(in / out);
      dilation.push_back(0);
      pad_l.push_back(0);
      pad_r.push_back(0);
      continue;
    }
    strides.push_back(desc.stride[s]);
    kernel.push_back(desc.kernel[s]);
    dilation.push_back(desc.dilation[s] - 1);
    pad_l.push_back(desc.pad_begin[s]);
    // The right padding that gives the output extent (ceil mode: more than
    // pad_end, the overhang of the last window).
    const int64_t effective = desc.dilation[s] * (desc.kernel[s] - 1) + 1;
    const int64_t right = (out - 1) * desc.stride[s] + effective - in - desc.pad_begin[s];
    const int64_t padding = std::max<int64_t>(right, desc.pad_end[s]);
    if (padding > desc.pad_end[s] && include_pad) {
      decline.reason =
          "ceil mode with COUNT_INCLUDE_PAD: oneDNN would count the last window's "
          "overhang past pad_end in its divisor";
      return nullptr;
    }
    pad_r.push_back(padding);
  }
  const algorithm kind =
      include_pad ? algorithm::pooling_avg_include_padding : algorithm::pooling_avg_exclude_padding;
  double work = static_cast<double>(tensor_elements(desc.y));
  for (int64_t k : kernel) work *= static_cast<double>(k);

  std::unique_ptr<OpPlan> plan;
  run_onednn_call(OnednnPlacement::kOnednnThread, [&] {
    for (const Attempt& attempt : attempts()) {
      if (attempt.weights_any && !attempt.activations_any) continue;  // no weights here
      std::vector<PrimitiveStep> steps(1);
      try {
        const memory::desc src = pooling_attempt_of(x, attempt);
        const memory::desc dst = pooling_attempt_of(y, attempt);
        if (!backward) {
          dnnl::pooling_v2_forward::primitive_desc pd(
              dnnl::pooling_v2_forward::desc(prop_kind::forward_inference, kind, src, dst, strides,
                                             kernel, dilation, pad_l, pad_r),
              user_scratchpad(), onednn_engine());
          if (std::string(pd.impl_info_str()).find("ref") != std::string::npos &&
              &attempt != &attempts().back()) {
            continue;
          }
          steps[0].primitive = dnnl::pooling_v2_forward(pd);
          steps[0].tensors.push_back(bind(DNNL_ARG_SRC, 0, TensorRole::kInput,
                                          user_desc(x.dims, x.strides, x.dtype), pd.src_desc()));
          steps[0].tensors.push_back(bind(DNNL_ARG_DST, 1, TensorRole::kOutput,
                                          user_desc(y.dims, y.strides, y.dtype), pd.dst_desc()));
        } else {
          dnnl::pooling_v2_forward::primitive_desc hint(
              dnnl::pooling_v2_forward::desc(prop_kind::forward_training, kind, src, dst, strides,
                                             kernel, dilation, pad_l, pad_r),
              onednn_engine());
          dnnl::pooling_v2_backward::primitive_desc pd(
              dnnl::pooling_v2_backward::desc(kind, src, dst, strides, kernel, dilation, pad_l,
                                              pad_r),
              user_scratchpad(), onednn_engine(), hint);
          if (std::string(pd.impl_info_str()).find("ref") != std::string::npos &&
              &attempt != &attempts().back()) {
            continue;
          }
          steps[0].primitive = dnnl::pooling_v2_backward(pd);
          steps[0].tensors.push_back(bind(DNNL_ARG_DIFF_DST, 0, TensorRole::kInput,
                                          user_desc(y.dims, y.strides, y.dtype),
                                          pd.diff_dst_desc()));
          steps[0].tensors.push_back(bind(DNNL_ARG_DIFF_SRC, 2, TensorRole::kOutput,
                                          user_desc(x.dims, x.strides, x.dtype),
                                          pd.diff_src_desc()));
        }
      } catch (const dnnl::error& error) {
        if (error.status == dnnl_unimplemented || error.status == dnnl_invalid_arguments) continue;
        throw;
      }
      const size_t workspace = lay_out_workspace(steps, {});
      plan = std::make_unique<PrimitivePlan>(std::move(steps), workspace, 3, 0, work);
      return;
    }
  });
  if (!plan) {
    decline.reason = onednn_version_text() +
                     " builds no average pooling for x=" + dtype_text(desc.x.dtype) +
                     " y=" + dtype_text(desc.y.dtype) + " (also tried as f32)";
  }
  return plan;
}

}  // namespace hal::cpu::ops
