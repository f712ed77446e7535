#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "corpus.hpp"

namespace train {

namespace {

constexpr size_t kAlignFloats = 16;  // 64 bytes: every entry starts on a cache line
constexpr float kNormEpsilon = 1e-5f;
constexpr float kInitStd = 0.02f;

size_t align_up(size_t value) {
  return (value + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

hal_tensor_desc_t dense(std::initializer_list<int64_t> shape, hal_dtype_t dtype = HAL_DTYPE_F32) {
  hal_tensor_desc_t tensor;
  std::vector<int64_t> extents(shape);
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(extents.size()), extents.data());
  return tensor;
}

hal_tensor_desc_t view(std::initializer_list<int64_t> shape,
                       std::initializer_list<int64_t> strides) {
  hal_tensor_desc_t tensor = dense(shape);
  std::copy(strides.begin(), strides.end(), tensor.strides);
  return tensor;
}

template <typename Desc>
Desc zeroed() {
  // Descriptors are compared as bytes to share plans, so padding must be 0.
  Desc desc;
  std::memset(&desc, 0, sizeof desc);
  return desc;
}

}  // namespace

ParamLayout make_layout(const ModelConfig& model) {
  ParamLayout layout;
  layout.model = model;
  const int64_t C = model.width, V = model.vocab, T = model.context;
  const float residual_std = kInitStd / std::sqrt(2.0f * static_cast<float>(model.layers));
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, bool decay, float std,
                 float value) {
    ParamEntry entry{name, layout.total, rows, cols, decay, std, value};
    layout.total = align_up(layout.total + entry.numel());
    layout.count += entry.numel();
    layout.entries.push_back(entry);
    return entry.offset;
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float std) {
    return add(name, rows, cols, true, std, 0.0f);
  };
  auto vector = [&](const std::string& name, int64_t n, float value) {
    return add(name, 1, n, false, 0.0f, value);
  };
  layout.wte = matrix("wte", V, C, kInitStd);
  layout.wpe = matrix("wpe", T, C, kInitStd);
  for (uint32_t l = 0; l < model.layers; ++l) {
    std::string p = "h";  // built by appending: GCC 12 -O3 misreads "h" + string (-Wrestrict)
    p += std::to_string(l);
    p += '.';
    LayerParams layer{};
    layer.ln1_g = vector(p + "ln1_g", C, 1.0f);
    layer.ln1_b = vector(p + "ln1_b", C, 0.0f);
    layer.qkv_w = matrix(p + "qkv_w", C, 3 * C, kInitStd);
    layer.qkv_b = vector(p + "qkv_b", 3 * C, 0.0f);
    layer.proj_w = matrix(p + "proj_w", C, C, residual_std);
    layer.proj_b = vector(p + "proj_b", C, 0.0f);
    layer.ln2_g = vector(p + "ln2_g", C, 1.0f);
    layer.ln2_b = vector(p + "ln2_b", C, 0.0f);
    layer.fc_w = matrix(p + "fc_w", C, 4 * C, kInitStd);
    layer.fc_b = vector(p + "fc_b", 4 * C, 0.0f);
    layer.out_w = matrix(p + "out_w", 4 * C, C, residual_std);
    layer.out_b = vector(p + "out_b", C, 0.0f);
    layout.layers.push_back(layer);
  }
  layout.lnf_g = vector("lnf_g", C, 1.0f);
  layout.lnf_b = vector("lnf_b", C, 0.0f);
  layout.head_w = matrix("head_w", C, V, kInitStd);
  return layout;
}

std::vector<float> initial_parameters(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> values(layout.total, 0.0f);
  Rng rng(seed + 0x1000);
  for (const ParamEntry& entry : layout.entries) {
    float* out = values.data() + entry.offset;
    for (size_t i = 0; i < entry.numel(); ++i) {
      out[i] =
          entry.init_std > 0 ? static_cast<float>(rng.normal() * entry.init_std) : entry.init_value;
    }
  }
  return values;
}

double forward_flops_per_token(const ModelConfig& model) {
  const double C = model.width, L = model.layers, T = model.context, V = model.vocab;
  const double matmul_params = L * 12.0 * C * C + C * V;
  // Causal attention: a query sees (T + 1) / 2 keys on average, for QK^T and PV.
  const double attention = L * 2.0 * 2.0 * C * (T + 1) / 2.0;
  return 2.0 * matmul_params + attention;
}

// --- Replica -----------------------------------------------------------------

Replica::Replica(hal_device_t device, const ParamLayout& layout, uint32_t local_batch,
                 Precision precision)
    : device_(device),
      layout_(layout),
      batch_(local_batch),
      rows_(size_t{local_batch} * layout.model.context),
      precision_(precision),
      compute_dtype_(precision == Precision::kBf16 ? HAL_DTYPE_BF16 : HAL_DTYPE_F32) {
  hal_stream_t stream = nullptr;
  check(hal_stream_create(device, 0, &stream), "hal_stream_create");
  stream_ = Stream(stream);

  const ModelConfig& m = layout.model;
  const size_t N = rows_, C = m.width, L = m.layers, V = m.vocab, H = m.heads;
  const size_t f = sizeof(float);
  params_ = DeviceBuffer(device, layout.total * f);
  gradients_ = DeviceBuffer(device, (layout.total + kAlignFloats) * f);
  adam_m_ = DeviceBuffer(device, layout.total * f);
  adam_v_ = DeviceBuffer(device, layout.total * f);
  squares_ = DeviceBuffer(device, layout.total * f);
  scalars_ = DeviceBuffer(device, 48 * f);
  tokens_ = DeviceBuffer(device, N * sizeof(int32_t));
  targets_ = DeviceBuffer(device, N * sizeof(int32_t));
  residual_ = DeviceBuffer(device, (L + 1) * N * C * f);
  middle_ = DeviceBuffer(device, L * N * C * f);
  ln1_ = DeviceBuffer(device, L * N * C * f);
  ln2_ = DeviceBuffer(device, L * N * C * f);
  ln_stats_ = DeviceBuffer(device, L * 4 * N * f);
  qkv_ = DeviceBuffer(device, L * N * 3 * C * f);
  attention_ = DeviceBuffer(device, L * N * C * f);
  lse_ = DeviceBuffer(device, L * N * H * f);
  fc_pre_ = DeviceBuffer(device, L * N * 4 * C * f);
  fc_act_ = DeviceBuffer(device, L * N * 4 * C * f);
  final_ln_ = DeviceBuffer(device, N * C * f);
  final_stats_ = DeviceBuffer(device, 2 * N * f);
  logits_ = DeviceBuffer(device, N * V * f);
  dlogits_ = DeviceBuffer(device, N * V * f);
  d_residual_ = DeviceBuffer(device, N * C * f);
  d_norm_out_ = DeviceBuffer(device, N * C * f);
  d_fc_ = DeviceBuffer(device, N * 4 * C * f);
  d_attention_ = DeviceBuffer(device, N * C * f);
  d_q_ = DeviceBuffer(device, N * C * f);
  d_k_ = DeviceBuffer(device, N * C * f);
  d_v_ = DeviceBuffer(device, N * C * f);
  d_qkv_ = DeviceBuffer(device, N * 3 * C * f);
  if (precision_ == Precision::kBf16) {
    params_low_ = DeviceBuffer(device, layout.total * sizeof(uint16_t));
    d_residual_low_ = DeviceBuffer(device, N * C * sizeof(uint16_t));
    d_fc_low_ = DeviceBuffer(device, N * 4 * C * sizeof(uint16_t));
  }

  // Gradients are overwritten every step, but the padding between entries
  // never is: zero it once so the norm and the all-reduce see zeros there.
  check(hal_memset_async(gradients_.get(), 0, gradients_.bytes(), stream), "hal_memset_async");
  check(hal_memset_async(scalars_.get(), 0, scalars_.bytes(), stream), "hal_memset_async");
  build_plans(layout);
  if (workspace_bytes_ > 0) workspace_ = DeviceBuffer(device, workspace_bytes_);
  check(hal_stream_synchronize(stream), "hal_stream_synchronize");
}

template <typename Desc>
hal_op_plan_t Replica::plan(Desc& desc, hal_op_kind_t kind, const char* label) {
  desc.header.struct_size = sizeof(Desc);
  desc.header.next = nullptr;
  desc.header.kind = kind;
  desc.header.reserved = 0;
  std::string key(reinterpret_cast<const char*>(&desc), sizeof(Desc));
  if (auto found = plan_cache_.find(key); found != plan_cache_.end()) return found->second;
  hal_op_plan_t handle = nullptr;
  const std::string what = "hal_op_plan_create (op kind " + std::to_string(kind) + ")";
  check(hal_op_plan_create(device_, &desc.header, HAL_OP_PLAN_DETERMINISTIC, &handle),
        what.c_str());
  plans_.emplace_back(handle);
  plan_labels_.emplace_back(label);
  hal_op_plan_info_t info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  check(hal_op_plan_get_info(handle, &info), "hal_op_plan_get_info");
  workspace_bytes_ = std::max(workspace_bytes_, info.workspace_bytes);
  plan_cache_.emplace(std::move(key), handle);
  return handle;
}

void Replica::build_plans(const ParamLayout& layout) {
  const ModelConfig& m = layout.model;
  const int64_t B = batch_, T = m.context, C = m.width, H = m.heads, D = C / H, V = m.vocab;
  const int64_t N = static_cast<int64_t>(rows_);
  const size_t n = rows_, c = m.width;
  auto P = [&](size_t offset) -> void* { return params_.f32(offset); };
  auto G = [&](size_t offset) -> void* { return gradients_.f32(offset); };

  // --- Plans, shared by every layer (same shapes, same descriptor bytes).
  auto matmul = [&](hal_tensor_desc_t a, hal_tensor_desc_t b, hal_tensor_desc_t d, uint32_t flags,
                    float beta, bool bias) {
    auto desc = zeroed<hal_op_matmul_desc_t>();
    desc.flags = flags | (bias ? static_cast<uint32_t>(HAL_MATMUL_BIAS) : 0u);
    desc.activation = HAL_ACTIVATION_NONE;
    desc.alpha = 1.0f;
    desc.beta = beta;
    desc.a = a;
    desc.b = b;
    desc.d = d;
    if (beta != 0.0f) desc.c = d;
    if (bias) desc.bias = dense({d.shape[d.rank - 1]});
    return plan(desc, HAL_OP_MATMUL, "matmul");
  };
  auto layernorm = [&](bool backward) {
    auto desc = zeroed<hal_op_norm_desc_t>();
    desc.norm = HAL_NORM_LAYERNORM;
    desc.epsilon = kNormEpsilon;
    desc.has_gamma = desc.has_beta = 1;
    desc.x = dense({N, C});
    desc.gamma = desc.beta = dense({C});
    desc.mean = desc.rstd = dense({N});
    if (!backward) {
      desc.has_mean = desc.has_rstd = 1;
      desc.y = dense({N, C}, compute_dtype_);  // feeds a matmul
      return plan(desc, HAL_OP_NORM, "layernorm");
    }
    desc.has_grad_gamma = desc.has_grad_beta = 1;
    desc.grad_y = desc.grad_x = dense({N, C});
    desc.grad_gamma = desc.grad_beta = dense({C});
    return plan(desc, HAL_OP_NORM_BACKWARD, "layernorm backward");
  };
  auto column_sum = [&](int64_t rows, int64_t cols) {  // [rows, cols] -> [1, cols]
    auto desc = zeroed<hal_op_reduce_desc_t>();
    desc.reduce = HAL_REDUCE_KIND_SUM;
    desc.axes_mask = 1u;
    desc.x = dense({rows, cols});
    desc.out = dense({1, cols});
    return plan(desc, HAL_OP_REDUCE, "reduce");
  };
  auto binary = [&](hal_binary_op_t op, hal_tensor_desc_t a, hal_tensor_desc_t b,
                    hal_tensor_desc_t out) {
    auto desc = zeroed<hal_op_binary_desc_t>();
    desc.op = op;
    desc.alpha = 1.0f;
    desc.a = a;
    desc.b = b;
    desc.out = out;
    return plan(desc, HAL_OP_BINARY, "binary");
  };

  const hal_tensor_desc_t rows_c = dense({N, C}), rows_3c = dense({N, 3 * C}),
                          rows_4c = dense({N, 4 * C}), rows_v = dense({N, V});
  const hal_tensor_desc_t heads = dense({B, T, H, D});
  // q, k and v are column blocks of qkv: [B, T, H, D] views with qkv's row stride.
  const hal_tensor_desc_t qkv_part = view({B, T, H, D}, {T * 3 * C, 3 * C, D, 1});
  // Matmul operands (weights, the activations and gradients they multiply)
  // are in the compute dtype; results, biases and accumulations in f32.
  const hal_dtype_t lp = compute_dtype_;
  const bool mixed = precision_ == Precision::kBf16;
  const hal_tensor_desc_t lp_c = dense({N, C}, lp), lp_3c = dense({N, 3 * C}, lp),
                          lp_4c = dense({N, 4 * C}, lp), lp_v = dense({N, V}, lp);
  auto weight = [&](int64_t rows, int64_t cols) { return dense({rows, cols}, lp); };

  const hal_op_plan_t qkv_mm = matmul(lp_c, weight(C, 3 * C), rows_3c, 0, 0.0f, true);
  const hal_op_plan_t proj_mm = matmul(lp_c, weight(C, C), rows_c, 0, 1.0f, true);
  const hal_op_plan_t fc_mm = matmul(lp_c, weight(C, 4 * C), rows_4c, 0, 0.0f, true);
  const hal_op_plan_t out_mm = matmul(lp_4c, weight(4 * C, C), rows_c, 0, 1.0f, true);
  const hal_op_plan_t head_mm = matmul(lp_c, weight(C, V), rows_v, 0, 0.0f, false);
  // Weight gradients: dW = x^T @ dy (TRANSPOSE_A); input gradients dx = dy @ W^T.
  const uint32_t tA = HAL_MATMUL_TRANSPOSE_A, tB = HAL_MATMUL_TRANSPOSE_B;
  const hal_op_plan_t d_qkv_w = matmul(lp_c, lp_3c, dense({C, 3 * C}), tA, 0.0f, false);
  const hal_op_plan_t d_qkv_x = matmul(lp_3c, weight(C, 3 * C), rows_c, tB, 0.0f, false);
  const hal_op_plan_t d_proj_w = matmul(lp_c, lp_c, dense({C, C}), tA, 0.0f, false);
  const hal_op_plan_t d_proj_x = matmul(lp_c, weight(C, C), rows_c, tB, 0.0f, false);
  const hal_op_plan_t d_fc_w = matmul(lp_c, lp_4c, dense({C, 4 * C}), tA, 0.0f, false);
  const hal_op_plan_t d_fc_x = matmul(lp_4c, weight(C, 4 * C), rows_c, tB, 0.0f, false);
  const hal_op_plan_t d_out_w = matmul(lp_4c, lp_c, dense({4 * C, C}), tA, 0.0f, false);
  const hal_op_plan_t d_out_x = matmul(lp_c, weight(4 * C, C), rows_4c, tB, 0.0f, false);
  const hal_op_plan_t d_head_w = matmul(lp_c, lp_v, dense({C, V}), tA, 0.0f, false);
  const hal_op_plan_t d_head_x = matmul(lp_v, weight(C, V), rows_c, tB, 0.0f, false);
  // bf16 copies: of every weight after each optimizer step, of the residual
  // gradient before it enters matmuls.
  if (mixed) {
    auto cast = zeroed<hal_op_cast_desc_t>();
    cast.in = dense({static_cast<int64_t>(layout.total)});
    cast.out = dense({static_cast<int64_t>(layout.total)}, lp);
    cast_weights_ = plan(cast, HAL_OP_CAST, "cast");
    cast.in = rows_c;
    cast.out = lp_c;
    cast_rows_ = plan(cast, HAL_OP_CAST, "cast");
  }
  void* dres_low = mixed ? d_residual_low_.get() : d_residual_.get();
  void* dfc_low = mixed ? d_fc_low_.get() : d_fc_.get();
  auto W = [&](size_t offset) { return matmul_weight(offset); };

  const hal_op_plan_t norm_fwd = layernorm(false);
  const hal_op_plan_t norm_bwd = layernorm(true);
  const hal_op_plan_t sum_c = column_sum(N, C);
  auto sum_dqkv = zeroed<hal_op_reduce_desc_t>();
  sum_dqkv.reduce = HAL_REDUCE_KIND_SUM;
  sum_dqkv.axes_mask = 1u;
  sum_dqkv.x = lp_3c;
  sum_dqkv.out = dense({1, 3 * C});
  const hal_op_plan_t sum_3c = plan(sum_dqkv, HAL_OP_REDUCE, "reduce");
  const hal_op_plan_t add_rows = binary(HAL_BINARY_ADD, rows_c, rows_c, rows_c);
  // The position table broadcast over the batch: [1, T, C] onto [B, T, C].
  const hal_op_plan_t add_positions =
      binary(HAL_BINARY_ADD, dense({B, T, C}), dense({1, T, C}), dense({B, T, C}));

  auto embedding = [&](bool backward) {
    auto desc = zeroed<hal_op_embedding_desc_t>();
    desc.ids = dense({N}, HAL_DTYPE_I32);
    desc.table = dense({V, C});
    desc.out = rows_c;
    return backward ? plan(desc, HAL_OP_EMBEDDING_BACKWARD, "embedding backward")
                    : plan(desc, HAL_OP_EMBEDDING, "embedding");
  };
  const hal_op_plan_t embed_fwd = embedding(false), embed_bwd = embedding(true);

  auto gelu = zeroed<hal_op_unary_desc_t>();
  gelu.activation = HAL_ACTIVATION_GELU_TANH;
  gelu.alpha = 1.0f;
  gelu.x = rows_4c;
  gelu.out = lp_4c;
  const hal_op_plan_t gelu_fwd = plan(gelu, HAL_OP_UNARY, "gelu");
  auto gelu_back = zeroed<hal_op_bias_activation_backward_desc_t>();
  gelu_back.activation = HAL_ACTIVATION_GELU_TANH;
  gelu_back.compute_bias_grad = 1;
  gelu_back.grad_out = gelu_back.aux = rows_4c;
  gelu_back.grad_pre = lp_4c;
  gelu_back.grad_bias = dense({4 * C});
  const hal_op_plan_t gelu_bwd = plan(gelu_back, HAL_OP_BIAS_ACTIVATION_BACKWARD, "gelu backward");

  auto attention = zeroed<hal_op_attention_desc_t>();
  attention.causal = HAL_CAUSAL_TOP_LEFT;
  attention.sparsity = HAL_ATTENTION_DENSE;
  attention.batch = static_cast<uint32_t>(B);
  attention.q = attention.k = attention.v = qkv_part;
  attention.out = dense({B, T, H, D}, lp);  // feeds the projection matmul
  attention.lse = dense({B, H, T});
  const hal_op_plan_t attention_fwd = plan(attention, HAL_OP_ATTENTION, "attention");
  attention.grad_out = attention.grad_q = attention.grad_k = attention.grad_v = heads;
  const hal_op_plan_t attention_bwd =
      plan(attention, HAL_OP_ATTENTION_BACKWARD, "attention backward");
  // Dense dq, dk, dv copied into qkv's interleaved layout.
  auto scatter = zeroed<hal_op_cast_desc_t>();
  scatter.in = heads;
  scatter.out = view({B, T, H, D}, {T * 3 * C, 3 * C, D, 1});
  scatter.out.dtype = lp;
  const hal_op_plan_t scatter_heads = plan(scatter, HAL_OP_CAST, "copy");

  auto cross_entropy = [&](bool with_grad) {
    auto desc = zeroed<hal_op_cross_entropy_desc_t>();
    desc.ignore_index = -100;
    desc.has_grad = with_grad ? 1 : 0;
    desc.logits = rows_v;
    desc.labels = dense({N}, HAL_DTYPE_I32);
    desc.loss = dense({1});
    if (with_grad) desc.grad_logits = lp_v;
    return plan(desc, HAL_OP_CROSS_ENTROPY, "cross-entropy");
  };
  const hal_op_plan_t loss_train = cross_entropy(true), loss_eval = cross_entropy(false);

  // --- Forward: residual[0] = wte[tokens] + wpe; per layer
  //   middle = residual + attention(ln1(residual)) @ proj
  //   residual' = middle + gelu(ln2(middle) @ fc) @ out
  // then logits = lnf(residual[L]) @ head.
  auto residual = [&](size_t l) -> void* { return residual_.f32(l * n * c); };
  auto slice = [&](const DeviceBuffer& buffer, size_t l, size_t width) -> float* {
    return buffer.f32(l * n * width);
  };
  auto stats = [&](size_t l, size_t which) -> void* { return ln_stats_.f32((l * 4 + which) * n); };
  const size_t h = m.heads;

  forward_.push_back({embed_fwd, {tokens_.get(), P(layout.wte), residual(0)}, {}});
  forward_.push_back({add_positions, {residual(0), P(layout.wpe), residual(0)}, {}});
  for (size_t l = 0; l < m.layers; ++l) {
    const LayerParams& w = layout.layers[l];
    float* qkv = slice(qkv_, l, 3 * c);
    forward_.push_back(
        {norm_fwd,
         {residual(l), P(w.ln1_g), P(w.ln1_b), slice(ln1_, l, c), stats(l, 0), stats(l, 1)},
         {}});
    forward_.push_back(
        {qkv_mm, {slice(ln1_, l, c), W(w.qkv_w), nullptr, qkv, P(w.qkv_b), nullptr}, {}});
    forward_.push_back({attention_fwd,
                        {qkv, qkv + c, qkv + 2 * c, slice(attention_, l, c), lse_.f32(l * n * h),
                         nullptr, nullptr, nullptr},
                        {}});
    forward_.push_back({proj_mm,
                        {slice(attention_, l, c), W(w.proj_w), residual(l), slice(middle_, l, c),
                         P(w.proj_b), nullptr},
                        {}});
    forward_.push_back({norm_fwd,
                        {slice(middle_, l, c), P(w.ln2_g), P(w.ln2_b), slice(ln2_, l, c),
                         stats(l, 2), stats(l, 3)},
                        {}});
    forward_.push_back(
        {fc_mm,
         {slice(ln2_, l, c), W(w.fc_w), nullptr, slice(fc_pre_, l, 4 * c), P(w.fc_b), nullptr},
         {}});
    forward_.push_back({gelu_fwd, {slice(fc_pre_, l, 4 * c), slice(fc_act_, l, 4 * c)}, {}});
    forward_.push_back({out_mm,
                        {slice(fc_act_, l, 4 * c), W(w.out_w), slice(middle_, l, c),
                         residual(l + 1), P(w.out_b), nullptr},
                        {}});
  }
  const size_t L = m.layers;
  forward_.push_back({norm_fwd,
                      {residual(L), P(layout.lnf_g), P(layout.lnf_b), final_ln_.get(),
                       final_stats_.f32(0), final_stats_.f32(n)},
                      {}});
  forward_.push_back(
      {head_mm, {final_ln_.get(), W(layout.head_w), nullptr, logits_.get(), nullptr, nullptr}, {}});

  hal_op_scalar_t unit_scale{};
  unit_scale.f64 = 1.0;
  train_loss_.push_back(
      {loss_train,
       {logits_.get(), targets_.get(), gradients_.f32(layout.total), nullptr, dlogits_.get()},
       {unit_scale}});
  eval_loss_.push_back(
      {loss_eval,
       {logits_.get(), targets_.get(), scalars_.f32(kEvalLossSlot), nullptr, nullptr},
       {unit_scale}});

  // --- Backward, in reverse; d_residual_ carries d(loss)/d(residual).
  void* dres = d_residual_.get();
  void* dnorm = d_norm_out_.get();
  backward_.push_back(
      {d_head_w,
       {final_ln_.get(), dlogits_.get(), nullptr, G(layout.head_w), nullptr, nullptr},
       {}});
  backward_.push_back(
      {d_head_x, {dlogits_.get(), W(layout.head_w), nullptr, dnorm, nullptr, nullptr}, {}});
  backward_.push_back({norm_bwd,
                       {residual(L), P(layout.lnf_g), final_stats_.f32(0), final_stats_.f32(n),
                        dnorm, dres, G(layout.lnf_g), G(layout.lnf_b)},
                       {}});
  for (size_t l = L; l-- > 0;) {
    const LayerParams& w = layout.layers[l];
    float* qkv = slice(qkv_, l, 3 * c);
    void* dqkv = d_qkv_.get();
    // In bf16, dqkv holds 2-byte elements: the k and v blocks start c elements apart.
    const size_t lp_bytes = mixed ? sizeof(uint16_t) : sizeof(float);
    auto dqkv_block = [&](size_t block) -> void* {
      return static_cast<char*>(dqkv) + block * c * lp_bytes;
    };
    if (mixed) backward_.push_back({cast_rows_, {dres, dres_low}, {}});
    // residual' = middle + fc_act @ out_w + out_b
    backward_.push_back(
        {d_out_w, {slice(fc_act_, l, 4 * c), dres_low, nullptr, G(w.out_w), nullptr, nullptr}, {}});
    backward_.push_back({sum_c, {dres, G(w.out_b)}, {}});
    backward_.push_back(
        {d_out_x, {dres_low, W(w.out_w), nullptr, d_fc_.get(), nullptr, nullptr}, {}});
    // fc_act = gelu(fc_pre); fc_pre = ln2 @ fc_w + fc_b
    backward_.push_back(
        {gelu_bwd, {d_fc_.get(), slice(fc_pre_, l, 4 * c), dfc_low, G(w.fc_b)}, {}});
    backward_.push_back(
        {d_fc_w, {slice(ln2_, l, c), dfc_low, nullptr, G(w.fc_w), nullptr, nullptr}, {}});
    backward_.push_back({d_fc_x, {dfc_low, W(w.fc_w), nullptr, dnorm, nullptr, nullptr}, {}});
    backward_.push_back({norm_bwd,
                         {slice(middle_, l, c), P(w.ln2_g), stats(l, 2), stats(l, 3), dnorm, dnorm,
                          G(w.ln2_g), G(w.ln2_b)},
                         {}});
    backward_.push_back({add_rows, {dres, dnorm, dres}, {}});  // d(middle)
    if (mixed) backward_.push_back({cast_rows_, {dres, dres_low}, {}});
    // middle = residual + attention @ proj_w + proj_b
    backward_.push_back(
        {d_proj_w,
         {slice(attention_, l, c), dres_low, nullptr, G(w.proj_w), nullptr, nullptr},
         {}});
    backward_.push_back({sum_c, {dres, G(w.proj_b)}, {}});
    backward_.push_back(
        {d_proj_x, {dres_low, W(w.proj_w), nullptr, d_attention_.get(), nullptr, nullptr}, {}});
    backward_.push_back(
        {attention_bwd,
         {qkv, qkv + c, qkv + 2 * c, slice(attention_, l, c), lse_.f32(l * n * h), nullptr, nullptr,
          nullptr, d_attention_.get(), d_q_.get(), d_k_.get(), d_v_.get()},
         {}});
    backward_.push_back({scatter_heads, {d_q_.get(), dqkv_block(0)}, {}});
    backward_.push_back({scatter_heads, {d_k_.get(), dqkv_block(1)}, {}});
    backward_.push_back({scatter_heads, {d_v_.get(), dqkv_block(2)}, {}});
    // qkv = ln1 @ qkv_w + qkv_b
    backward_.push_back(
        {d_qkv_w, {slice(ln1_, l, c), dqkv, nullptr, G(w.qkv_w), nullptr, nullptr}, {}});
    backward_.push_back({sum_3c, {dqkv, G(w.qkv_b)}, {}});
    backward_.push_back({d_qkv_x, {dqkv, W(w.qkv_w), nullptr, dnorm, nullptr, nullptr}, {}});
    backward_.push_back(
        {norm_bwd,
         {residual(l), P(w.ln1_g), stats(l, 0), stats(l, 1), dnorm, dnorm, G(w.ln1_g), G(w.ln1_b)},
         {}});
    backward_.push_back({add_rows, {dres, dnorm, dres}, {}});  // d(residual[l])
  }
  // residual[0] = wte[tokens] + wpe (broadcast over the batch)
  backward_.push_back({embed_bwd, {tokens_.get(), dres, G(layout.wte)}, {}});
  auto position_grad = zeroed<hal_op_reduce_desc_t>();
  position_grad.reduce = HAL_REDUCE_KIND_SUM;
  position_grad.axes_mask = 1u;
  position_grad.x = dense({B, T, C});
  position_grad.out = dense({1, T, C});
  backward_.push_back({plan(position_grad, HAL_OP_REDUCE, "reduce"), {dres, G(layout.wpe)}, {}});

  // --- Optimizer: the gradient norm, clipping and two AdamW groups.
  const int64_t total = static_cast<int64_t>(layout.total);
  sum_squares_.push_back({binary(HAL_BINARY_MUL, dense({total}), dense({total}), dense({total})),
                          {gradients_.get(), gradients_.get(), squares_.get()},
                          {}});
  auto sum_all = zeroed<hal_op_reduce_desc_t>();
  sum_all.reduce = HAL_REDUCE_KIND_SUM;
  sum_all.axes_mask = 1u;
  sum_all.x = dense({total});
  sum_all.out = dense({1});
  sum_squares_.push_back({plan(sum_all, HAL_OP_REDUCE, "reduce"),
                          {squares_.get(), scalars_.f32(kSumSquaresSlot)},
                          {}});
  scale_plan_ = binary(HAL_BINARY_MUL, dense({total}), dense({1}), dense({total}));

  for (const ParamEntry& entry : layout.entries) {
    (entry.decay ? decay_numels_ : no_decay_numels_).push_back(static_cast<int64_t>(entry.numel()));
  }
}

void* Replica::matmul_weight(size_t offset) const {
  if (precision_ != Precision::kBf16) return params_.f32(offset);
  return static_cast<uint16_t*>(params_low_.get()) + offset;
}

void Replica::enqueue_low_precision_weights() {
  if (cast_weights_ != nullptr) run(cast_weights_, {params_.get(), params_low_.get()});
}

void Replica::run(const OpCall& call) {
  hal_op_exec_args_t args;
  std::memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.operand_count = static_cast<uint32_t>(call.operands.size());
  args.scalar_count = static_cast<uint32_t>(call.scalars.size());
  args.operands = call.operands.data();
  args.scalars = call.scalars.data();
  args.workspace = workspace_.get();
  args.workspace_bytes = workspace_.bytes();
  check(hal_op_execute(call.plan, &args, stream_.get()), "hal_op_execute");
}

void Replica::run(hal_op_plan_t plan, std::vector<void*> operands,
                  std::vector<hal_op_scalar_t> scalars) {
  run(OpCall{plan, std::move(operands), std::move(scalars)});
}

void Replica::enqueue_batch(const int32_t* tokens, const int32_t* targets) {
  check(hal_memcpy_async(tokens_.get(), tokens, tokens_.bytes(), stream_.get()),
        "hal_memcpy_async");
  check(hal_memcpy_async(targets_.get(), targets, targets_.bytes(), stream_.get()),
        "hal_memcpy_async");
}

void Replica::enqueue_forward() {
  for (const OpCall& call : forward_) run(call);
}
void Replica::enqueue_train_loss() {
  for (const OpCall& call : train_loss_) run(call);
}
void Replica::enqueue_eval_loss() {
  for (const OpCall& call : eval_loss_) run(call);
}
void Replica::enqueue_backward() {
  for (const OpCall& call : backward_) run(call);
}
void Replica::enqueue_gradient_sum_of_squares() {
  for (const OpCall& call : sum_squares_) run(call);
}

void Replica::enqueue_scale_gradients(float factor) {
  // The factor goes through device memory: BINARY's alpha is fixed at planning.
  clip_factor_ = factor;
  check(hal_memcpy_async(scalars_.f32(kClipSlot), &clip_factor_, sizeof(float), stream_.get()),
        "hal_memcpy_async");
  run(scale_plan_, {gradients_.get(), scalars_.f32(kClipSlot), gradients_.get()});
}

void Replica::enqueue_adamw(const TrainConfig& config, double learning_rate, int64_t step) {
  auto make_plan = [&](const std::vector<int64_t>& numels, float weight_decay) {
    auto desc = zeroed<hal_op_adamw_desc_t>();
    desc.tensor_count = static_cast<uint32_t>(numels.size());
    desc.param_dtype = desc.grad_dtype = HAL_DTYPE_F32;
    desc.numels = numels.data();
    desc.beta1 = config.beta1;
    desc.beta2 = config.beta2;
    desc.epsilon = config.epsilon;
    desc.weight_decay = weight_decay;
    desc.max_grad_norm = 0.0f;  // clipped beforehand over both groups
    return plan(desc, HAL_OP_ADAMW, "adamw");
  };
  if (adamw_decay_ == nullptr) {
    adamw_decay_ = make_plan(decay_numels_, config.weight_decay);
    adamw_no_decay_ = make_plan(no_decay_numels_, 0.0f);
    if (workspace_bytes_ > workspace_.bytes()) workspace_ = DeviceBuffer(device_, workspace_bytes_);
  }
  hal_op_scalar_t lr{}, t{};
  lr.f64 = learning_rate;
  t.i64 = step;
  for (const bool decay : {true, false}) {
    std::vector<void*> operands{nullptr};
    for (const ParamEntry& entry : layout_.entries) {
      if (entry.decay != decay) continue;
      operands.insert(operands.end(),
                      {params_.f32(entry.offset), gradients_.f32(entry.offset),
                       adam_m_.f32(entry.offset), adam_v_.f32(entry.offset), nullptr});
    }
    run(decay ? adamw_decay_ : adamw_no_decay_, std::move(operands), {lr, t});
  }
  enqueue_low_precision_weights();
}

Replica::Scalars Replica::read_scalars() {
  Scalars out;
  hal_stream_t s = stream_.get();
  check(hal_memcpy_async(&out.loss, gradients_.f32(layout_.total), sizeof(float), s),
        "hal_memcpy_async");
  check(hal_memcpy_async(&out.gradient_sum_of_squares, scalars_.f32(kSumSquaresSlot), sizeof(float),
                         s),
        "hal_memcpy_async");
  check(hal_memcpy_async(&out.eval_loss, scalars_.f32(kEvalLossSlot), sizeof(float), s),
        "hal_memcpy_async");
  check(hal_stream_synchronize(s), "hal_stream_synchronize");
  return out;
}

void Replica::upload_state(const float* params, const float* m, const float* v) {
  const size_t bytes = layout_.total * sizeof(float);
  hal_stream_t s = stream_.get();
  check(hal_memcpy_async(params_.get(), params, bytes, s), "hal_memcpy_async");
  check(hal_memcpy_async(adam_m_.get(), m, bytes, s), "hal_memcpy_async");
  check(hal_memcpy_async(adam_v_.get(), v, bytes, s), "hal_memcpy_async");
  enqueue_low_precision_weights();
  check(hal_stream_synchronize(s), "hal_stream_synchronize");
}

void Replica::download_state(float* params, float* m, float* v) {
  const size_t bytes = layout_.total * sizeof(float);
  hal_stream_t s = stream_.get();
  check(hal_memcpy_async(params, params_.get(), bytes, s), "hal_memcpy_async");
  check(hal_memcpy_async(m, adam_m_.get(), bytes, s), "hal_memcpy_async");
  check(hal_memcpy_async(v, adam_v_.get(), bytes, s), "hal_memcpy_async");
  check(hal_stream_synchronize(s), "hal_stream_synchronize");
}

void Replica::download_gradients(float* out) {
  check(hal_memcpy_async(out, gradients_.get(), layout_.total * sizeof(float), stream_.get()),
        "hal_memcpy_async");
  check(hal_stream_synchronize(stream_.get()), "hal_stream_synchronize");
}

void Replica::download_logits_row(size_t row, float* out) {
  const size_t vocab = layout_.model.vocab;
  check(hal_memcpy_async(out, logits_.f32(row * vocab), vocab * sizeof(float), stream_.get()),
        "hal_memcpy_async");
  check(hal_stream_synchronize(stream_.get()), "hal_stream_synchronize");
}

std::vector<std::string> Replica::implementations() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < plans_.size(); ++i) {
    hal_op_plan_info_t info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (hal_op_plan_get_info(plans_[i].get(), &info) != HAL_SUCCESS) continue;
    out.push_back(plan_labels_[i] + ": " + info.implementation);
  }
  return out;
}

}  // namespace train
