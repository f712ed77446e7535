// Portable row-wise ops: kernels/normalization.hal. One work-item per row
// (per column for the parameter gradients), so any row length and any
// strides work without shared memory or barriers.
#include "launch.hpp"
#include "registry.hpp"

#include "hal_ops/tensor.hpp"

namespace hal::ops::portable {

namespace {

constexpr const char* kNormalizationSource = "normalization";
// Rows per block: small so that a few hundred rows still spread over the
// cpu plugin's threads (each work-item loops over a whole row).
constexpr uint32_t kRowsPerBlock = 16;

// The rows of [rows..., n] tensors of one shape: their leading dimensions
// merged into at most 4, and per tensor the last dimension's stride.
struct RowViews {
  MergedViews rows;
  std::vector<int64_t> last_strides;
  int64_t row_count = 1;
  int64_t n = 0;
};

// |tensors| all have |shape|'s shape (rank >= 1). False when the leading
// dimensions do not merge into 4.
bool row_views(const hal_tensor_desc_t& shape,
               std::initializer_list<const hal_tensor_desc_t*> tensors, RowViews* out) {
  // The leading dimensions alone, as tensors of rank - 1.
  std::vector<hal_tensor_desc_t> leading;
  leading.reserve(tensors.size());
  for (const hal_tensor_desc_t* tensor : tensors) {
    hal_tensor_desc_t rows = *tensor;
    rows.rank = tensor->rank - 1;
    rows.shape[rows.rank] = 0;
    rows.strides[rows.rank] = 0;
    leading.push_back(rows);
    out->last_strides.push_back(tensor->strides[tensor->rank - 1]);
  }
  hal_tensor_desc_t rows_shape = shape;
  rows_shape.rank = shape.rank - 1;
  out->n = shape.shape[shape.rank - 1];
  out->row_count = element_count(rows_shape);
  bool merged = false;
  switch (leading.size()) {
    case 2:
      merged = merge_views(rows_shape, {&leading[0], &leading[1]}, &out->rows);
      break;
    case 3:
      merged = merge_views(rows_shape, {&leading[0], &leading[1], &leading[2]}, &out->rows);
      break;
    default:
      break;
  }
  return merged;
}

// Pointer, dtype, the 4 row strides and the last stride of view |v|.
void push_view(KernelArgs& args, const void* pointer, hal_dtype_t dtype, const RowViews& views,
               size_t v) {
  args.pointer(pointer).i32(dtype);
  for (int64_t stride : views.rows.strides[v]) args.i64(stride);
  args.i64(views.last_strides[v]);
}

void push_shape(KernelArgs& args, const RowViews& views) {
  args.i64(views.rows.shape[1]).i64(views.rows.shape[2]).i64(views.rows.shape[3]);
  args.i64(views.row_count).i64(views.n);
}

constexpr const char* kLeadingMergeDecline =
    "the leading dimensions need more than 4 dimensions after merging";

// HAL_OP_SOFTMAX and HAL_OP_SOFTMAX_BACKWARD.
class SoftmaxPlan final : public PlannedOp {
 public:
  SoftmaxPlan(hal_kernel_t kernel, const hal_op_softmax_desc_t& desc, bool backward, RowViews views)
      : kernel_(kernel), desc_(desc), backward_(backward), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    if (views_.row_count == 0 || views_.n == 0) return HAL_SUCCESS;
    KernelArgs args;
    if (!backward_) {
      push_view(args, context.operands[0], desc_.x.dtype, views_, 0);
      push_view(args, context.operands[1], desc_.y.dtype, views_, 1);
    } else {
      push_view(args, context.operands[0], desc_.y.dtype, views_, 0);
      push_view(args, context.operands[1], desc_.x.dtype, views_, 1);
      push_view(args, context.operands[2], desc_.grad_x.dtype, views_, 2);
    }
    push_shape(args, views_);
    args.i32(desc_.log != 0 ? 1 : 0);
    return args.launch(kernel_, context.stream, linear_config(views_.row_count, kRowsPerBlock));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_softmax_desc_t desc_;
  bool backward_;
  RowViews views_;
};

class Softmax final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_softmax_desc_t*>(request.desc);
    const bool backward = desc.header.kind == HAL_OP_SOFTMAX_BACKWARD;
    RowViews views;
    const bool merged = backward ? row_views(desc.y, {&desc.y, &desc.x, &desc.grad_x}, &views)
                                 : row_views(desc.x, {&desc.x, &desc.y}, &views);
    if (!merged) {
      *decline = kLeadingMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(
        request, kNormalizationSource, backward ? "softmax_backward" : "softmax_forward", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<SoftmaxPlan>(kernel, desc, backward, std::move(views));
  }
};

// A 1-D operand's stride (0 when the operand is unused).
int64_t stride_of(const hal_tensor_desc_t& tensor, bool used) {
  return used ? tensor.strides[0] : 0;
}

class NormPlan final : public PlannedOp {
 public:
  NormPlan(hal_kernel_t rows_kernel, hal_kernel_t columns_kernel, const hal_op_norm_desc_t& desc,
           bool backward, RowViews views)
      : rows_kernel_(rows_kernel),
        columns_kernel_(columns_kernel),
        desc_(desc),
        backward_(backward),
        views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    return backward_ ? backward(context) : forward(context);
  }

 private:
  bool rms() const { return desc_.norm == HAL_NORM_RMSNORM; }

  hal_result_t forward(const ExecContext& context) const {
    // n = 0 still writes each row's mean and rstd (NaN).
    if (views_.row_count == 0) return HAL_SUCCESS;
    void* const* operands = context.operands;
    KernelArgs args;
    push_view(args, operands[0], desc_.x.dtype, views_, 0);
    args.pointer(operands[1]).i32(desc_.gamma.dtype).i64(stride_of(desc_.gamma, desc_.has_gamma));
    args.pointer(operands[2]).i32(desc_.beta.dtype).i64(stride_of(desc_.beta, desc_.has_beta));
    push_view(args, operands[3], desc_.y.dtype, views_, 1);
    args.pointer(operands[4]).i64(stride_of(desc_.mean, desc_.has_mean));
    args.pointer(operands[5]).i64(stride_of(desc_.rstd, desc_.has_rstd));
    push_shape(args, views_);
    args.i32(rms() ? 1 : 0).f32(desc_.epsilon);
    args.i32(static_cast<int32_t>(desc_.has_gamma)).i32(static_cast<int32_t>(desc_.has_beta));
    args.i32(static_cast<int32_t>(desc_.has_mean)).i32(static_cast<int32_t>(desc_.has_rstd));
    return args.launch(rows_kernel_, context.stream,
                       linear_config(views_.row_count, kRowsPerBlock));
  }

  hal_result_t backward(const ExecContext& context) const {
    void* const* operands = context.operands;
    const int64_t mean_stride = rms() ? 0 : desc_.mean.strides[0];
    const int64_t rstd_stride = desc_.rstd.strides[0];
    // Columns first: grad_x may be grad_y, which the columns read.
    if ((desc_.has_grad_gamma != 0 || desc_.has_grad_beta != 0) && views_.n > 0) {
      KernelArgs args;
      push_view(args, operands[0], desc_.x.dtype, views_, 0);
      args.pointer(operands[2]).i64(mean_stride);
      args.pointer(operands[3]).i64(rstd_stride);
      push_view(args, operands[4], desc_.grad_y.dtype, views_, 1);
      args.pointer(operands[6])
          .i32(desc_.grad_gamma.dtype)
          .i64(stride_of(desc_.grad_gamma, desc_.has_grad_gamma));
      args.pointer(operands[7])
          .i32(desc_.grad_beta.dtype)
          .i64(stride_of(desc_.grad_beta, desc_.has_grad_beta));
      push_shape(args, views_);
      args.i32(rms() ? 1 : 0);
      args.i32(static_cast<int32_t>(desc_.has_grad_gamma))
          .i32(static_cast<int32_t>(desc_.has_grad_beta));
      const hal_result_t result =
          args.launch(columns_kernel_, context.stream, linear_config(views_.n));
      if (result != HAL_SUCCESS) return result;
    }
    if (views_.row_count == 0 || views_.n == 0) return HAL_SUCCESS;
    KernelArgs args;
    push_view(args, operands[0], desc_.x.dtype, views_, 0);
    args.pointer(operands[1]).i32(desc_.gamma.dtype).i64(stride_of(desc_.gamma, desc_.has_gamma));
    args.pointer(operands[2]).i64(mean_stride);
    args.pointer(operands[3]).i64(rstd_stride);
    push_view(args, operands[4], desc_.grad_y.dtype, views_, 1);
    push_view(args, operands[5], desc_.grad_x.dtype, views_, 2);
    push_shape(args, views_);
    args.i32(rms() ? 1 : 0).i32(static_cast<int32_t>(desc_.has_gamma));
    return args.launch(rows_kernel_, context.stream,
                       linear_config(views_.row_count, kRowsPerBlock));
  }

  hal_kernel_t rows_kernel_;
  hal_kernel_t columns_kernel_;
  hal_op_norm_desc_t desc_;
  bool backward_;
  RowViews views_;
};

class Norm final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_norm_desc_t*>(request.desc);
    const bool backward = desc.header.kind == HAL_OP_NORM_BACKWARD;
    RowViews views;
    const bool merged = backward ? row_views(desc.x, {&desc.x, &desc.grad_y, &desc.grad_x}, &views)
                                 : row_views(desc.x, {&desc.x, &desc.y}, &views);
    if (!merged) {
      *decline = kLeadingMergeDecline;
      return nullptr;
    }
    hal_kernel_t rows_kernel = portable_kernel(
        request, kNormalizationSource, backward ? "norm_backward_rows" : "norm_forward", decline);
    if (rows_kernel == nullptr) return nullptr;
    hal_kernel_t columns_kernel = nullptr;
    if (backward) {
      columns_kernel =
          portable_kernel(request, kNormalizationSource, "norm_backward_columns", decline);
      if (columns_kernel == nullptr) return nullptr;
    }
    return std::make_unique<NormPlan>(rows_kernel, columns_kernel, desc, backward,
                                      std::move(views));
  }
};

}  // namespace

void add_normalization(ImplementationTable& table) {
  static const Softmax softmax;
  static const Norm norm;
  table[HAL_OP_SOFTMAX].push_back(&softmax);
  table[HAL_OP_SOFTMAX_BACKWARD].push_back(&softmax);
  table[HAL_OP_NORM].push_back(&norm);
  table[HAL_OP_NORM_BACKWARD].push_back(&norm);
}

}  // namespace hal::ops::portable
