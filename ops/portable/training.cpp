// Portable training ops: kernels/training.hal. Every one is deterministic
// (fixed reduction orders, no float atomics), so HAL_OP_PLAN_DETERMINISTIC
// needs nothing extra.
#include "launch.hpp"
#include "registry.hpp"

#include "hal_ops/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace hal::ops::portable {

namespace {

constexpr const char* kTrainingSource = "training";
constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

hal_launch_config_t single_item_config() {
  return linear_config(1, 1);
}

// A tensor's leading dimensions (all but the last) as a tensor of their own.
hal_tensor_desc_t leading(const hal_tensor_desc_t& tensor) {
  hal_tensor_desc_t rows = tensor;
  rows.rank = tensor.rank - 1;
  rows.shape[rows.rank] = 0;
  rows.strides[rows.rank] = 0;
  return rows;
}

KernelArgs& push_view(KernelArgs& args, const std::array<int64_t, 4>& strides) {
  for (int64_t stride : strides) args.i64(stride);
  return args;
}

KernelArgs& push_shape(KernelArgs& args, const MergedViews& views) {
  return args.i64(views.shape[1]).i64(views.shape[2]).i64(views.shape[3]);
}

// ---- RoPE ----------------------------------------------------------------

class RopePlan final : public PlannedOp {
 public:
  RopePlan(hal_kernel_t kernel, const hal_op_rope_desc_t& desc) : kernel_(kernel), desc_(desc) {}

  hal_result_t execute(const ExecContext& context) const override {
    const hal_tensor_desc_t& x = desc_.x;
    const int64_t rows = x.shape[0] * x.shape[1] * x.shape[2];
    const int64_t per_row = x.shape[3] - desc_.rotary_dim / 2;
    const int64_t count = rows * per_row;
    if (count == 0) return HAL_SUCCESS;
    void* positions = desc_.has_positions ? context.operands[1] : context.operands[0];
    KernelArgs args;
    args.pointer(context.operands[0]).i32(x.dtype);
    for (int d = 0; d < 4; ++d) args.i64(x.strides[d]);
    args.pointer(context.operands[2]).i32(desc_.out.dtype);
    for (int d = 0; d < 4; ++d) args.i64(desc_.out.strides[d]);
    args.pointer(positions)
        .i64(desc_.has_positions ? desc_.positions.strides[0] : 0)
        .i64(desc_.has_positions ? desc_.positions.strides[1] : 0)
        .i32(static_cast<int32_t>(desc_.has_positions))
        .i32(desc_.position_offset)
        .i64(x.shape[1])
        .i64(x.shape[2])
        .i64(x.shape[3])
        .i32(static_cast<int32_t>(desc_.rotary_dim))
        .i32(static_cast<int32_t>(desc_.interleaved));
    args.i32(desc_.inverse ? -1 : 1).f32(desc_.base).i64(count);
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_rope_desc_t desc_;
};

class Rope final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_rope_desc_t*>(request.desc);
    hal_kernel_t kernel = portable_kernel(request, kTrainingSource, "rope", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<RopePlan>(kernel, desc);
  }
};

// ---- Embedding -----------------------------------------------------------

// The ids and the rows of out (grad_out) merged into at most 4 dimensions.
bool merge_id_views(const hal_op_embedding_desc_t& desc, MergedViews* views, std::string* decline) {
  const hal_tensor_desc_t rows = leading(desc.out);
  if (!merge_views(desc.ids, {&desc.ids, &rows}, views)) {
    *decline = "ids and the rows of out need more than 4 dimensions after merging";
    return false;
  }
  return true;
}

class EmbeddingForwardPlan final : public PlannedOp {
 public:
  EmbeddingForwardPlan(hal_kernel_t kernel, const hal_op_embedding_desc_t& desc, MergedViews views)
      : kernel_(kernel), desc_(desc), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.out);
    if (count == 0) return HAL_SUCCESS;
    const hal_tensor_desc_t& table = desc_.table;
    KernelArgs args;
    args.pointer(context.operands[0]).i32(desc_.ids.dtype == HAL_DTYPE_I64 ? 1 : 0);
    push_view(args, views_.strides[0]);
    args.pointer(context.operands[1]).i32(table.dtype).i64(table.strides[0]).i64(table.strides[1]);
    args.i64(table.shape[0]);
    args.pointer(context.operands[2]).i32(desc_.out.dtype);
    push_view(args, views_.strides[1]);
    args.i64(desc_.out.strides[desc_.out.rank - 1]);
    push_shape(args, views_);
    args.i64(table.shape[1]).i64(count);
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_embedding_desc_t desc_;
  MergedViews views_;
};

class EmbeddingBackwardPlan final : public PlannedOp {
 public:
  EmbeddingBackwardPlan(hal_kernel_t sort, hal_kernel_t sum, const hal_op_embedding_desc_t& desc,
                        MergedViews views)
      : sort_(sort), sum_(sum), desc_(desc), views_(std::move(views)) {}

  // starts[vocab + 1], cursor[vocab], sorted[n], all i32.
  size_t workspace_bytes() const override {
    const int64_t vocab = desc_.table.shape[0];
    return static_cast<size_t>(2 * vocab + 1 + element_count(desc_.ids)) * sizeof(int32_t);
  }

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t vocab = desc_.table.shape[0];
    const int64_t dim = desc_.table.shape[1];
    const int64_t n = element_count(desc_.ids);
    const int64_t count = vocab * dim;
    if (count == 0) return HAL_SUCCESS;
    auto* starts = static_cast<int32_t*>(context.workspace);
    int32_t* cursor = starts + vocab + 1;
    // With no ids the sorted list is empty: a pointer past the workspace's
    // end is refused by the launch, so it is given the (unread) starts.
    int32_t* sorted = n > 0 ? cursor + vocab : starts;
    // With no ids the sort still runs: it writes the empty starts.
    const void* ids = n > 0 ? context.operands[0] : context.workspace;
    KernelArgs sort_args;
    sort_args.pointer(ids).i32(desc_.ids.dtype == HAL_DTYPE_I64 ? 1 : 0);
    push_view(sort_args, views_.strides[0]);
    push_shape(sort_args, views_);
    sort_args.i64(n).i64(vocab).pointer(starts).pointer(cursor).pointer(sorted);
    if (hal_result_t r = sort_args.launch(sort_, context.stream, single_item_config());
        r != HAL_SUCCESS) {
      return r;
    }
    const void* grad_out = n > 0 ? context.operands[1] : context.workspace;
    KernelArgs args;
    args.pointer(starts).pointer(sorted).pointer(grad_out).i32(desc_.out.dtype);
    push_view(args, views_.strides[1]);
    args.i64(desc_.out.strides[desc_.out.rank - 1]);
    push_shape(args, views_);
    args.pointer(context.operands[2])
        .i32(desc_.table.dtype)
        .i64(desc_.table.strides[0])
        .i64(desc_.table.strides[1])
        .i64(dim)
        .i32(static_cast<int32_t>(desc_.accumulate))
        .i64(count);
    return args.launch(sum_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t sort_;
  hal_kernel_t sum_;
  hal_op_embedding_desc_t desc_;
  MergedViews views_;
};

class Embedding final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_embedding_desc_t*>(request.desc);
    MergedViews views;
    if (!merge_id_views(desc, &views, decline)) return nullptr;
    if (desc.header.kind == HAL_OP_EMBEDDING) {
      hal_kernel_t kernel = portable_kernel(request, kTrainingSource, "embedding_forward", decline);
      if (kernel == nullptr) return nullptr;
      return std::make_unique<EmbeddingForwardPlan>(kernel, desc, std::move(views));
    }
    // The sort keeps row indices and offsets in i32.
    if (element_count(desc.ids) > kMaxInt32 || desc.table.shape[0] >= kMaxInt32) {
      *decline = "more than 2^31 - 1 ids or vocabulary rows";
      return nullptr;
    }
    hal_kernel_t sort = portable_kernel(request, kTrainingSource, "embedding_sort", decline);
    if (sort == nullptr) return nullptr;
    hal_kernel_t sum = portable_kernel(request, kTrainingSource, "embedding_backward", decline);
    if (sum == nullptr) return nullptr;
    return std::make_unique<EmbeddingBackwardPlan>(sort, sum, desc, std::move(views));
  }
};

// ---- Cross-entropy -------------------------------------------------------

class CrossEntropyPlan final : public PlannedOp {
 public:
  CrossEntropyPlan(hal_kernel_t rows, hal_kernel_t mean, hal_kernel_t grad,
                   const hal_op_cross_entropy_desc_t& desc)
      : rows_(rows), mean_(mean), grad_(grad), desc_(desc) {}

  // loss[rows], lse[rows], counted[rows] (f32), the counted total (i32).
  size_t workspace_bytes() const override {
    return static_cast<size_t>(3 * desc_.logits.shape[0] + 1) * sizeof(float);
  }

  hal_result_t execute(const ExecContext& context) const override {
    const hal_tensor_desc_t& logits = desc_.logits;
    const int64_t rows = logits.shape[0];
    const int64_t classes = logits.shape[1];
    auto* ws = static_cast<float*>(context.workspace);
    const int32_t labels_i64 = desc_.labels.dtype == HAL_DTYPE_I64 ? 1 : 0;
    if (rows > 0) {
      void* row_losses = desc_.has_row_losses ? context.operands[3] : context.workspace;
      KernelArgs args;
      args.pointer(context.operands[0]).i32(logits.dtype).i64(logits.strides[0]);
      args.i64(logits.strides[1]).pointer(context.operands[1]).i32(labels_i64);
      args.i64(desc_.labels.strides[0]).i64(rows).i64(classes).i64(desc_.ignore_index);
      args.f32(desc_.label_smoothing).f32(std::numeric_limits<float>::quiet_NaN());
      args.pointer(ws).pointer(row_losses).i32(static_cast<int32_t>(desc_.has_row_losses));
      args.i64(desc_.has_row_losses ? desc_.row_losses.strides[0] : 0);
      if (hal_result_t r = args.launch(rows_, context.stream, linear_config(rows));
          r != HAL_SUCCESS) {
        return r;
      }
    }
    KernelArgs mean_args;
    mean_args.pointer(ws).i64(rows).pointer(context.operands[2]);
    if (hal_result_t r = mean_args.launch(mean_, context.stream, single_item_config());
        r != HAL_SUCCESS) {
      return r;
    }
    const int64_t count = rows * classes;
    if (!desc_.has_grad || count == 0) return HAL_SUCCESS;
    KernelArgs args;
    args.pointer(context.operands[0]).i32(logits.dtype).i64(logits.strides[0]);
    args.i64(logits.strides[1]).pointer(context.operands[1]).i32(labels_i64);
    args.i64(desc_.labels.strides[0]).i64(rows).i64(classes).f32(desc_.label_smoothing);
    args.f32(static_cast<float>(context.scalars[0].f64)).pointer(ws);
    args.pointer(context.operands[4]).i32(desc_.grad_logits.dtype);
    args.i64(desc_.grad_logits.strides[0]).i64(desc_.grad_logits.strides[1]).i64(count);
    return args.launch(grad_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t rows_;
  hal_kernel_t mean_;
  hal_kernel_t grad_;
  hal_op_cross_entropy_desc_t desc_;
};

class CrossEntropy final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_cross_entropy_desc_t*>(request.desc);
    if (desc.logits.shape[0] >= kMaxInt32) {
      *decline = "2^31 - 1 rows or more (the counted-row total is an i32)";
      return nullptr;
    }
    hal_kernel_t rows = portable_kernel(request, kTrainingSource, "cross_entropy_rows", decline);
    if (rows == nullptr) return nullptr;
    hal_kernel_t mean = portable_kernel(request, kTrainingSource, "cross_entropy_mean", decline);
    if (mean == nullptr) return nullptr;
    hal_kernel_t grad = portable_kernel(request, kTrainingSource, "cross_entropy_grad", decline);
    if (grad == nullptr) return nullptr;
    return std::make_unique<CrossEntropyPlan>(rows, mean, grad, desc);
  }
};

// ---- AdamW ---------------------------------------------------------------

// Elements per partial sum of squares: fixed, so the norm's summation order
// depends only on the tensor sizes.
constexpr int64_t kNormChunk = 2048;

class AdamwPlan final : public PlannedOp {
 public:
  AdamwPlan(hal_kernel_t squares, hal_kernel_t norm, hal_kernel_t update,
            const hal_op_adamw_desc_t& desc)
      : squares_(squares),
        norm_(norm),
        update_(update),
        desc_(desc),
        numels_(desc.numels, desc.numels + desc.tensor_count) {
    desc_.numels = nullptr;  // the plan's own copy is numels_
    for (int64_t n : numels_) {
      first_chunk_.push_back(chunks_);
      chunks_ += (n + kNormChunk - 1) / kNormChunk;
    }
  }

  bool needs_norm() const { return desc_.has_grad_norm || desc_.max_grad_norm > 0.0f; }

  // The partial sums, then the clip factor.
  size_t workspace_bytes() const override {
    return needs_norm() ? static_cast<size_t>(chunks_ + 1) * sizeof(float) : 0;
  }

  hal_result_t execute(const ExecContext& context) const override {
    void* const* operands = context.operands;
    auto* partial = static_cast<float*>(context.workspace);
    const bool norm = needs_norm();
    if (norm) {
      for (size_t t = 0; t < numels_.size(); ++t) {
        const int64_t chunks = (numels_[t] + kNormChunk - 1) / kNormChunk;
        if (chunks == 0) continue;
        KernelArgs args;
        args.pointer(operands[1 + 5 * t + 1]).i32(desc_.grad_dtype).i64(numels_[t]);
        args.i64(kNormChunk).pointer(partial).i64(first_chunk_[t]).i64(chunks);
        if (hal_result_t r = args.launch(squares_, context.stream, linear_config(chunks, 64));
            r != HAL_SUCCESS) {
          return r;
        }
      }
      KernelArgs args;
      args.pointer(partial).i64(chunks_);
      args.pointer(desc_.has_grad_norm ? operands[0] : context.workspace);
      args.i32(static_cast<int32_t>(desc_.has_grad_norm)).f32(desc_.max_grad_norm);
      if (hal_result_t r = args.launch(norm_, context.stream, single_item_config());
          r != HAL_SUCCESS) {
        return r;
      }
    }
    const double lr = context.scalars[0].f64;
    const double step = static_cast<double>(context.scalars[1].i64);
    const double bias_correction1 = 1.0 - std::pow(static_cast<double>(desc_.beta1), step);
    const double bias_correction2 = 1.0 - std::pow(static_cast<double>(desc_.beta2), step);
    const bool clip = desc_.max_grad_norm > 0.0f;
    for (size_t t = 0; t < numels_.size(); ++t) {
      const int64_t n = numels_[t];
      if (n == 0) continue;
      void* const* tensor = operands + 1 + 5 * t;
      KernelArgs args;
      args.pointer(tensor[0]).i32(desc_.param_dtype).pointer(tensor[1]).i32(desc_.grad_dtype);
      args.pointer(tensor[2]).pointer(tensor[3]);
      args.pointer(desc_.has_master ? tensor[4] : tensor[2]);
      args.i32(static_cast<int32_t>(desc_.has_master));
      args.pointer(clip ? partial + chunks_ : tensor[2]).i32(clip ? 1 : 0).i64(n);
      args.f32(desc_.beta1).f32(desc_.beta2).f32(desc_.epsilon).f32(desc_.weight_decay);
      args.f32(static_cast<float>(lr)).f32(static_cast<float>(bias_correction1));
      args.f32(static_cast<float>(bias_correction2));
      if (hal_result_t r = args.launch(update_, context.stream, linear_config(n));
          r != HAL_SUCCESS) {
        return r;
      }
    }
    return HAL_SUCCESS;
  }

 private:
  hal_kernel_t squares_;
  hal_kernel_t norm_;
  hal_kernel_t update_;
  hal_op_adamw_desc_t desc_;
  std::vector<int64_t> numels_;
  std::vector<int64_t> first_chunk_;
  int64_t chunks_ = 0;
};

class Adamw final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_adamw_desc_t*>(request.desc);
    hal_kernel_t squares = portable_kernel(request, kTrainingSource, "adamw_sum_squares", decline);
    if (squares == nullptr) return nullptr;
    hal_kernel_t norm = portable_kernel(request, kTrainingSource, "adamw_norm", decline);
    if (norm == nullptr) return nullptr;
    hal_kernel_t update = portable_kernel(request, kTrainingSource, "adamw_update", decline);
    if (update == nullptr) return nullptr;
    return std::make_unique<AdamwPlan>(squares, norm, update, desc);
  }
};

// ---- Top-k gating --------------------------------------------------------

class TopkGatingPlan final : public PlannedOp {
 public:
  TopkGatingPlan(hal_kernel_t kernel, const hal_op_topk_gating_desc_t& desc)
      : kernel_(kernel), desc_(desc) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t tokens = desc_.logits.shape[0];
    if (tokens == 0) return HAL_SUCCESS;
    KernelArgs args;
    args.pointer(context.operands[0]).i32(desc_.logits.dtype);
    args.i64(desc_.logits.strides[0]).i64(desc_.logits.strides[1]);
    args.i64(tokens).i64(desc_.logits.shape[1]).i32(static_cast<int32_t>(desc_.k));
    args.i32(static_cast<int32_t>(desc_.renormalize));
    args.f32(-std::numeric_limits<float>::infinity());
    args.pointer(context.operands[1]).i64(desc_.weights.strides[0]).i64(desc_.weights.strides[1]);
    args.pointer(context.operands[2]).i64(desc_.indices.strides[0]).i64(desc_.indices.strides[1]);
    return args.launch(kernel_, context.stream, linear_config(tokens, 64));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_topk_gating_desc_t desc_;
};

class TopkGating final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_topk_gating_desc_t*>(request.desc);
    if (desc.logits.shape[1] > kMaxInt32) {
      *decline = "more than 2^31 - 1 experts (indices are i32)";
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kTrainingSource, "topk_gating", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<TopkGatingPlan>(kernel, desc);
  }
};

}  // namespace

void add_training(ImplementationTable& table) {
  static const Rope rope;
  static const Embedding embedding;
  static const CrossEntropy cross_entropy;
  static const Adamw adamw;
  static const TopkGating topk_gating;
  table[HAL_OP_ROPE].push_back(&rope);
  table[HAL_OP_EMBEDDING].push_back(&embedding);
  table[HAL_OP_EMBEDDING_BACKWARD].push_back(&embedding);
  table[HAL_OP_CROSS_ENTROPY].push_back(&cross_entropy);
  table[HAL_OP_ADAMW].push_back(&adamw);
  table[HAL_OP_TOPK_GATING].push_back(&topk_gating);
}

}  // namespace hal::ops::portable
