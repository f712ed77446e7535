// HAL_OP_CONVOLUTION, _BACKWARD_DATA and _BACKWARD_WEIGHTS on oneDNN's
// convolution and deconvolution primitives:
//   - convolution: convolution_forward (bias argument, a sum post-op for the
//     residual, an eltwise post-op for the activation);
//   - backward data: convolution_backward_data;
//   - backward weights (and grad_bias): convolution_backward_weights;
//   - transposed: deconvolution_forward (its forward, with bias and the
//     post-ops), convolution_forward of grad_y (its backward data: the
//     adjoint of the adjoint), deconvolution_backward_weights (its weight and
//     bias gradients). Deconvolution's weights are [C_out, C_in] of the
//     transposed op, which is HAL's (PyTorch's) [C_in, C_out/groups] filter
//     with two strides exchanged: no copy.
// Output padding below the stride (a transposed output larger than the
// smallest) is a smaller right padding of the deconvolution.
//
// Layouts: each primitive is first built on the caller's tensors as they lie
// (strided memory descriptors); when oneDNN offers only its reference
// implementation for them, the weights and then the activations are left
// to oneDNN's choice and staged through the workspace with reorders, and
// when a dtype has no kernel (f16: oneDNN 2.6's need AVX512-FP16) every
// tensor is taken as f32, widened and narrowed by the same reorders
// (onednn_primitive.hpp). Channels-last (NHWC) f32 and bf16 tensors run on
// the brgemm and direct kernels with only the weights reordered (backward
// data into fewer than 16 channels: gemm on channels-first copies,
// narrow_input_backward_data); channels-first (NCHW) ones on the direct
// kernels over blocked copies, or the gemm convolution in place where that
// is faster (im2col_bound).
#include <dnnl.hpp>

#include <array>
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

// An activation [N, C, spatial...] or filter [O, I, k...] as oneDNN dims.
struct Dims {
  memory::dims dims, strides;
  hal_dtype_t dtype = HAL_DTYPE_F32;
};

// The descriptor dimension holding canonical dimension |c| (0: N or O, 1: C
// or I, 2 + s: spatial s).
uint32_t layout_dim(hal_channel_layout_t layout, uint32_t spatial_dims, uint32_t c) {
  if (c == 0) return 0;
  if (layout == HAL_CHANNELS_LAST) return c == 1 ? spatial_dims + 1 : c - 1;
  return c;
}

Dims canonical(const hal_tensor_desc_t& tensor, hal_channel_layout_t layout,
               uint32_t spatial_dims) {
  Dims out;
  out.dtype = tensor.dtype;
  for (uint32_t c = 0; c < spatial_dims + 2; ++c) {
    const uint32_t d = layout_dim(layout, spatial_dims, c);
    out.dims.push_back(tensor.shape[d]);
    out.strides.push_back(tensor.strides[d]);
  }
  return out;
}

// The convolution's filter [O, I/groups, k...] as oneDNN's weights: grouped
// [G, O/G, I/G, k...] when groups > 1. |deconvolution|: the same filter as a
// deconvolution's [G, I/G, O/G, k...] (its output channels are the
// convolution's input channels).
Dims weights_dims(const Dims& filter, int64_t groups, bool deconvolution) {
  Dims out;
  out.dtype = filter.dtype;
  const int64_t o = filter.dims[0], i = filter.dims[1];
  const int64_t so = filter.strides[0], si = filter.strides[1];
  if (groups > 1) {
    out.dims.push_back(groups);
    out.strides.push_back((o / groups) * so);
  }
  if (!deconvolution) {
    out.dims.push_back(o / groups);
    out.strides.push_back(so);
    out.dims.push_back(i);
    out.strides.push_back(si);
  } else {
    out.dims.push_back(i);
    out.strides.push_back(si);
    out.dims.push_back(o / groups);
    out.strides.push_back(so);
  }
  for (size_t d = 2; d < filter.dims.size(); ++d) {
    out.dims.push_back(filter.dims[d]);
    out.strides.push_back(filter.strides[d]);
  }
  return out;
}

memory::desc user_of(const Dims& t) {
  return user_desc(t.dims, t.strides, t.dtype);
}

// The primitive's descriptor of |t| for |attempt|.
memory::desc attempt_of(const Dims& t, const Attempt& attempt, bool weights) {
  const memory::data_type type = attempt.f32 ? memory::data_type::f32 : *onednn_dtype(t.dtype);
  const bool any = weights ? attempt.weights_any : attempt.activations_any;
  if (any) return memory::desc(t.dims, type, tag::any);
  if (!weights && attempt.activations_channels_first) {
    memory::dims dense(t.dims.size());
    memory::dim span = 1;
    for (size_t d = t.dims.size(); d-- > 0;) {
      dense[d] = span;
      span *= t.dims[d];
    }
    return memory::desc(t.dims, type, dense);
  }
  return strided_desc(t.dims, t.strides, type);
}

Dims vector_dims(const hal_tensor_desc_t& tensor) {
  return {{tensor.shape[0]}, {tensor.strides[0]}, tensor.dtype};
}

memory::desc dense_vector(const Dims& t, const Attempt& attempt) {
  return memory::desc(t.dims, attempt.f32 ? memory::data_type::f32 : *onednn_dtype(t.dtype),
                      tag::a);
}

bool is_reference(const char* impl) {
  return std::string(impl).find("ref") != std::string::npos;
}

bool is_gemm(const std::string& impl) {
  return impl.find("gemm") != std::string::npos;
}

std::optional<algorithm> eltwise_of(hal_activation_t activation) {
  switch (activation) {
    case HAL_ACTIVATION_RELU:
      return algorithm::eltwise_relu;
    case HAL_ACTIVATION_GELU_TANH:
      return algorithm::eltwise_gelu_tanh;
    case HAL_ACTIVATION_GELU_ERF:
      return algorithm::eltwise_gelu_erf;
    case HAL_ACTIVATION_SILU:
      return algorithm::eltwise_swish;  // x * sigmoid(alpha x), alpha = 1
    default:
      return std::nullopt;
  }
}

// What a planned convolution is, whichever primitive serves it.
struct Problem {
  hal_op_kind_t kind;
  bool transposed = false, has_bias = false, has_residual = false;
  hal_activation_t activation = HAL_ACTIVATION_NONE;
  int64_t groups = 1;
  Dims x, y, w;  // canonical, as the descriptor has them
  Dims bias, residual;
  memory::dims strides, dilates, pad_l, pad_r;
  // The transposed op's deconvolution: the right padding less the output
  // padding (its output's extra extent).
  memory::dims deconv_pad_r;
  double work = 0;  // multiply-adds
};

// Whether |impl|, built on the caller's layouts, is oneDNN's gemm convolution
// where its direct kernels on blocked activations (reordered in and out
// through the workspace) are faster. On plain channels-first tensors oneDNN
// offers only the gemm one (im2col into its scratchpad, then a GEMM); at
// ResNet-50's 3x3 and 7x7 layers the blocked kernels ran 2-4x faster, the
// reorders included (bench/conv_peers.sh, NCHW f32 and bf16, batch 8 and 32),
// with two exceptions the measurements showed, kept on gemm:
//  - backward data into fewer than 16 input channels per group (the stem's
//    3): the blocked diff_src pads them to a block of 16, 2x slower;
//  - bf16 backward weights at fewer than 28x28 output positions: oneDNN
//    2.6's jit_bf16 kernel ran 256->256 3x3 at 14x14 30x slower than gemm.
// A 1x1 kernel's gemm needs no im2col and takes the caller's tensors as they
// lie: the reorders would only add.
bool im2col_bound(const Problem& p, const std::string& impl) {
  if (!is_gemm(impl)) return false;
  double taps = 1, positions = 1;
  const Dims& out = p.transposed ? p.x : p.y;
  for (size_t d = 2; d < p.w.dims.size(); ++d) {
    taps *= static_cast<double>(p.w.dims[d]);
    positions *= static_cast<double>(out.dims[d]);
  }
  if (taps == 1) return false;
  const Dims& in = p.transposed ? p.y : p.x;
  if (p.kind == HAL_OP_CONVOLUTION_BACKWARD_DATA && in.dims[1] / p.groups < 16) return false;
  if (p.kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS && p.x.dtype == HAL_DTYPE_BF16 &&
      positions < 28.0 * 28.0) {
    return false;
  }
  return true;
}

// Whether backward data of |p| on channels-last activations (the caller's
// layout, oneDNN's direct kernels) is faster through its gemm convolution on
// channels-first copies (reordered in and out through the workspace): when
// the input has fewer than 16 channels per group (ResNet's stem, 3), the
// direct kernels' diff_src loop runs a vector of 16 channels mostly empty.
// Measured on the stem (7x7 s2, 3 -> 64, 224x224; bench/conv_peers.sh and
// the CPU time of each candidate with the reorders): f32 1.7-2.2x, bf16
// 1.2-1.6x faster at batch 8 and 32, on 1 and 2 threads.
bool narrow_input_backward_data(const Problem& p, const std::string& impl) {
  if (p.kind != HAL_OP_CONVOLUTION_BACKWARD_DATA || p.transposed || is_gemm(impl)) return false;
  double taps = 1;
  for (size_t d = 2; d < p.w.dims.size(); ++d) taps *= static_cast<double>(p.w.dims[d]);
  if (taps == 1 || p.x.dims[1] / p.groups >= 16) return false;
  // Channels-last: the channel stride is the smallest (1 when dense).
  for (size_t d = 2; d < p.x.dims.size(); ++d) {
    if (p.x.dims[d] > 1 && p.x.strides[d] < p.x.strides[1]) return false;
  }
  return p.x.dims[1] > 1;
}

// The primitive for |p| under |attempt|, with the tensors it binds; nullopt
// when oneDNN builds none (unimplemented for these descriptors).
struct Built {
  dnnl::primitive primitive;
  std::vector<PrimitiveTensor> tensors;
  std::string impl;
};

std::optional<Built> build(const Problem& p, const Attempt& a) {
  const dnnl::engine& engine = onednn_engine();
  Built built;
  const Dims conv_w = weights_dims(p.w, p.groups, false);
  const Dims deconv_w = weights_dims(p.w, p.groups, true);
  const auto bias_prim = [&] { return dense_vector(p.bias, a); };
  const dnnl::primitive_attr scratch_attr = user_scratchpad();
  // The tensors of a forward pass and of a backward weights pass, the same
  // for the convolution and the deconvolution (|pd| of either, |weights| in
  // its layout of the weights).
  const auto bind_forward = [&](const auto& pd, const Dims& weights) {
    built.impl = pd.impl_info_str();
    built.tensors.push_back(bind(DNNL_ARG_SRC, 0, TensorRole::kInput, user_of(p.x), pd.src_desc()));
    built.tensors.push_back(
        bind(DNNL_ARG_WEIGHTS, 1, TensorRole::kInput, user_of(weights), pd.weights_desc()));
    if (p.has_bias) {
      built.tensors.push_back(
          bind(DNNL_ARG_BIAS, 2, TensorRole::kInput, user_of(p.bias), pd.bias_desc()));
    }
    PrimitiveTensor out = bind(DNNL_ARG_DST, 4, TensorRole::kOutput, user_of(p.y), pd.dst_desc());
    if (p.has_residual) {
      out.preload_operand = 3;
      out.preload = user_of(p.residual);
    }
    built.tensors.push_back(out);
  };
  const auto bind_backward_weights = [&](const auto& pd, const Dims& weights) {
    built.impl = pd.impl_info_str();
    built.tensors.push_back(bind(DNNL_ARG_SRC, 0, TensorRole::kInput, user_of(p.x), pd.src_desc()));
    built.tensors.push_back(
        bind(DNNL_ARG_DIFF_DST, 1, TensorRole::kInput, user_of(p.y), pd.diff_dst_desc()));
    built.tensors.push_back(bind(DNNL_ARG_DIFF_WEIGHTS, 2, TensorRole::kOutput, user_of(weights),
                                 pd.diff_weights_desc()));
    if (p.has_bias) {
      built.tensors.push_back(
          bind(DNNL_ARG_DIFF_BIAS, 3, TensorRole::kOutput, user_of(p.bias), pd.diff_bias_desc()));
    }
  };
  try {
    switch (p.kind) {
      case HAL_OP_CONVOLUTION: {
        dnnl::primitive_attr attr;
        dnnl::post_ops post_ops;
        if (p.has_residual) post_ops.append_sum(1.0f);
        if (const auto eltwise = eltwise_of(p.activation)) {
          post_ops.append_eltwise(1.0f, *eltwise, p.activation == HAL_ACTIVATION_SILU ? 1.0f : 0.0f,
                                  0.0f);
        }
        attr.set_post_ops(post_ops);
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        const memory::desc src = attempt_of(p.x, a, false);
        const memory::desc dst = attempt_of(p.y, a, false);
        const memory::desc bias = p.has_bias ? bias_prim() : memory::desc();
        if (!p.transposed) {
          const memory::desc weights = attempt_of(conv_w, a, true);
          dnnl::convolution_forward::primitive_desc pd(
              dnnl::convolution_forward::desc(prop_kind::forward_inference,
                                              algorithm::convolution_direct, src, weights, bias,
                                              dst, p.strides, p.dilates, p.pad_l, p.pad_r),
              attr, engine);
          built.primitive = dnnl::convolution_forward(pd);
          bind_forward(pd, conv_w);
        } else {
          const memory::desc weights = attempt_of(deconv_w, a, true);
          dnnl::deconvolution_forward::primitive_desc pd(
              dnnl::deconvolution_forward::desc(prop_kind::forward_inference,
                                                algorithm::deconvolution_direct, src, weights, bias,
                                                dst, p.strides, p.dilates, p.pad_l, p.deconv_pad_r),
              attr, engine);
          built.primitive = dnnl::deconvolution_forward(pd);
          bind_forward(pd, deconv_w);
        }
        return built;
      }
      case HAL_OP_CONVOLUTION_BACKWARD_DATA: {
        if (p.transposed) {
          // The adjoint of the transposed convolution is the convolution:
          // grad_y (its input side) to grad_x (its output side).
          const memory::desc src = attempt_of(p.y, a, false);
          const memory::desc dst = attempt_of(p.x, a, false);
          const memory::desc weights = attempt_of(conv_w, a, true);
          dnnl::convolution_forward::primitive_desc pd(
              dnnl::convolution_forward::desc(prop_kind::forward_inference,
                                              algorithm::convolution_direct, src, weights, dst,
                                              p.strides, p.dilates, p.pad_l, p.pad_r),
              scratch_attr, engine);
          built.impl = pd.impl_info_str();
          built.primitive = dnnl::convolution_forward(pd);
          built.tensors.push_back(
              bind(DNNL_ARG_SRC, 0, TensorRole::kInput, user_of(p.y), pd.src_desc()));
          built.tensors.push_back(
              bind(DNNL_ARG_WEIGHTS, 1, TensorRole::kInput, user_of(conv_w), pd.weights_desc()));
          built.tensors.push_back(
              bind(DNNL_ARG_DST, 2, TensorRole::kOutput, user_of(p.x), pd.dst_desc()));
          return built;
        }
        const memory::desc diff_src = attempt_of(p.x, a, false);
        const memory::desc diff_dst = attempt_of(p.y, a, false);
        const memory::desc weights = attempt_of(conv_w, a, true);
        dnnl::convolution_forward::primitive_desc hint(
            dnnl::convolution_forward::desc(prop_kind::forward_training,
                                            algorithm::convolution_direct, diff_src, weights,
                                            diff_dst, p.strides, p.dilates, p.pad_l, p.pad_r),
            engine);
        dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(algorithm::convolution_direct, diff_src, weights,
                                                  diff_dst, p.strides, p.dilates, p.pad_l, p.pad_r),
            scratch_attr, engine, hint);
        built.impl = pd.impl_info_str();
        built.primitive = dnnl::convolution_backward_data(pd);
        built.tensors.push_back(
            bind(DNNL_ARG_DIFF_DST, 0, TensorRole::kInput, user_of(p.y), pd.diff_dst_desc()));
        built.tensors.push_back(
            bind(DNNL_ARG_WEIGHTS, 1, TensorRole::kInput, user_of(conv_w), pd.weights_desc()));
        built.tensors.push_back(
            bind(DNNL_ARG_DIFF_SRC, 2, TensorRole::kOutput, user_of(p.x), pd.diff_src_desc()));
        return built;
      }
      case HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS: {
        const memory::desc src = attempt_of(p.x, a, false);
        const memory::desc diff_dst = attempt_of(p.y, a, false);
        const memory::desc diff_bias = p.has_bias ? bias_prim() : memory::desc();
        if (!p.transposed) {
          const memory::desc diff_weights = attempt_of(conv_w, a, true);
          dnnl::convolution_forward::primitive_desc hint(
              dnnl::convolution_forward::desc(
                  prop_kind::forward_training, algorithm::convolution_direct, src, diff_weights,
                  diff_bias, diff_dst, p.strides, p.dilates, p.pad_l, p.pad_r),
              engine);
          dnnl::convolution_backward_weights::primitive_desc pd(
              dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, src,
                                                       diff_weights, diff_bias, diff_dst, p.strides,
                                                       p.dilates, p.pad_l, p.pad_r),
              scratch_attr, engine, hint);
          built.primitive = dnnl::convolution_backward_weights(pd);
          bind_backward_weights(pd, conv_w);
          return built;
        }
        const memory::desc diff_weights = attempt_of(deconv_w, a, true);
        dnnl::deconvolution_forward::primitive_desc hint(
            dnnl::deconvolution_forward::desc(
                prop_kind::forward_training, algorithm::deconvolution_direct, src, diff_weights,
                diff_bias, diff_dst, p.strides, p.dilates, p.pad_l, p.deconv_pad_r),
            engine);
        dnnl::deconvolution_backward_weights::primitive_desc pd(
            dnnl::deconvolution_backward_weights::desc(algorithm::deconvolution_direct, src,
                                                       diff_weights, diff_bias, diff_dst, p.strides,
                                                       p.dilates, p.pad_l, p.deconv_pad_r),
            scratch_attr, engine, hint);
        built.primitive = dnnl::deconvolution_backward_weights(pd);
        bind_backward_weights(pd, deconv_w);
        return built;
      }
      default:
        return std::nullopt;
    }
  } catch (const dnnl::error& error) {
    if (error.status == dnnl_unimplemented || error.status == dnnl_invalid_arguments) {
      return std::nullopt;
    }
    throw;
  }
}

}  // namespace

std::unique_ptr<OpPlan> plan_convolution(const hal_op_convolution_desc_t& desc, hal_op_plan_flags_t,
                                         Decline& decline) {
  const uint32_t sd = desc.spatial_dims;
  Problem p;
  p.kind = desc.header.kind;
  p.transposed = (desc.flags & HAL_CONV_TRANSPOSED) != 0;
  p.has_bias = (desc.flags & HAL_CONV_BIAS) != 0;
  p.has_residual = (desc.flags & HAL_CONV_RESIDUAL) != 0;
  p.activation = desc.activation;
  p.groups = desc.groups;
  p.x = canonical(desc.x, desc.layout, sd);
  p.y = canonical(desc.y, desc.layout, sd);
  p.w = canonical(desc.w, desc.layout, sd);
  if (tensor_elements(desc.x) == 0 || tensor_elements(desc.y) == 0) {
    decline.reason = "an empty batch (N = 0) is left to the portable implementation";
    return nullptr;
  }
  if (p.has_bias) p.bias = vector_dims(desc.bias);
  if (p.has_residual) p.residual = canonical(desc.residual, desc.layout, sd);
  // The convolution's input and output sides (exchanged when transposed).
  const Dims& in = p.transposed ? p.y : p.x;
  const Dims& out = p.transposed ? p.x : p.y;
  for (uint32_t s = 0; s < sd; ++s) {
    p.strides.push_back(desc.stride[s]);
    p.dilates.push_back(desc.dilation[s] - 1);  // oneDNN counts the gaps
    p.pad_l.push_back(desc.pad_begin[s]);
    p.pad_r.push_back(desc.pad_end[s]);
    const int64_t kernel = p.w.dims[2 + s];
    const int64_t effective = desc.dilation[s] * (kernel - 1) + 1;
    const int64_t smallest =
        (out.dims[2 + s] - 1) * desc.stride[s] - desc.pad_begin[s] - desc.pad_end[s] + effective;
    p.deconv_pad_r.push_back(desc.pad_end[s] - (in.dims[2 + s] - smallest));
  }
  double taps = 1;
  for (uint32_t s = 0; s < sd; ++s) taps *= static_cast<double>(p.w.dims[2 + s]);
  double positions = 1;
  for (size_t d = 2; d < out.dims.size(); ++d) positions *= static_cast<double>(out.dims[d]);
  p.work = static_cast<double>(out.dims[0]) * static_cast<double>(out.dims[1]) * positions *
           static_cast<double>(in.dims[1] / p.groups) * taps;

  std::unique_ptr<OpPlan> plan;
  run_onednn_call(OnednnPlacement::kOnednnThread, [&] {
    std::optional<Built> chosen, reference;
    Attempt chosen_attempt;
    for (const Attempt& attempt : attempts()) {
      std::optional<Built> built = build(p, attempt);
      if (!built) continue;
      if (!is_reference(built->impl.c_str())) {
        chosen = std::move(built);
        chosen_attempt = attempt;
        break;
      }
      if (!reference) reference = std::move(built);
    }
    if (!chosen) chosen = std::move(reference);
    if (!chosen) return;
    if (im2col_bound(p, chosen->impl)) {
      // The same dtypes, every tensor in oneDNN's choice: its direct kernels
      // on blocked activations, reordered in and out through the workspace.
      std::optional<Built> blocked = build(p, Attempt{chosen_attempt.f32, true, true});
      if (blocked && !is_reference(blocked->impl.c_str()) && !is_gemm(blocked->impl)) {
        chosen = std::move(blocked);
      }
    } else if (narrow_input_backward_data(p, chosen->impl)) {
      Attempt channels_first{chosen_attempt.f32, true, false, true};
      std::optional<Built> gemm = build(p, channels_first);
      if (gemm && is_gemm(gemm->impl)) chosen = std::move(gemm);
    }
    std::vector<PrimitiveStep> steps(1);
    steps[0].primitive = std::move(chosen->primitive);
    steps[0].tensors = std::move(chosen->tensors);
    const size_t workspace = lay_out_workspace(steps, {});
    const uint32_t operands = p.kind == HAL_OP_CONVOLUTION                 ? 5
                              : p.kind == HAL_OP_CONVOLUTION_BACKWARD_DATA ? 3
                                                                           : 4;
    plan = std::make_unique<PrimitivePlan>(std::move(steps), workspace, operands, 0, p.work);
  });
  if (!plan) {
    decline.reason = onednn_version_text() + " builds no " +
                     (p.transposed ? "deconvolution" : "convolution") +
                     " primitive for these tensors (dtypes x=" + dtype_text(desc.x.dtype) +
                     " w=" + dtype_text(desc.w.dtype) + " y=" + dtype_text(desc.y.dtype) +
                     ", also tried as f32)";
    for (int64_t pad : p.deconv_pad_r) {
      if (p.transposed && pad < 0) {
        decline.reason +=
            "; the output padding exceeds the padding at the end, which a "
            "deconvolution would need as a negative padding";
        break;
      }
    }
  }
  return plan;
}

}  // namespace hal::cpu::ops
