// Portable low-precision family (SPEC.md §17.7): kernels/lowp.hal.
#include "launch.hpp"
#include "registry.hpp"

#include "hal_ops/lowp.hpp"
#include "hal_ops/tensor.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace hal::ops::portable {

namespace {

constexpr const char* kLowpSource = "lowp";

// Tensors of one shape (rank >= 1) as matrices [rows, cols]: the leading
// dimensions merged into at most 4 (one stride set per tensor), the last
// dimension's stride per tensor.
struct MatrixViews {
  MergedViews rows;
  std::vector<int64_t> col_strides;
  int64_t row_count = 1;
  int64_t cols = 1;
};

bool matrix_views(std::initializer_list<const hal_tensor_desc_t*> tensors, MatrixViews* out,
                  std::string* decline) {
  const hal_tensor_desc_t& first = **tensors.begin();
  std::vector<hal_tensor_desc_t> leading;
  for (const hal_tensor_desc_t* tensor : tensors) {
    hal_tensor_desc_t view = *tensor;
    view.rank = tensor->rank - 1;
    leading.push_back(view);
    out->col_strides.push_back(tensor->strides[tensor->rank - 1]);
  }
  // merge_views takes a fixed list; up to 3 tensors share a view here.
  bool merged = false;
  if (leading.size() == 2) {
    merged = merge_views(leading[0], {&leading[0], &leading[1]}, &out->rows);
  } else {
    merged = merge_views(leading[0], {&leading[0], &leading[1], &leading[2]}, &out->rows);
  }
  if (!merged) {
    *decline = "the leading dimensions need more than 4 dimensions after merging";
    return false;
  }
  out->cols = first.shape[first.rank - 1];
  out->row_count = 1;
  for (uint32_t d = 0; d + 1 < first.rank; ++d) out->row_count *= first.shape[d];
  return true;
}

// A tensor of the matrix views: pointer, dtype, 4 row strides, column stride.
void matrix_args(KernelArgs& args, const void* pointer, hal_dtype_t dtype, const MatrixViews& views,
                 size_t index) {
  args.pointer(pointer).i32(dtype);
  for (int64_t stride : views.rows.strides[index]) args.i64(stride);
  args.i64(views.col_strides[index]);
}

void scale_args(KernelArgs& args, const void* scale, const hal_tensor_desc_t& tensor,
                const QuantGrid& grid) {
  args.pointer(scale).i64(tensor.strides[0]).i64(tensor.strides[1]);
  args.i64(grid.block_rows).i64(grid.block_cols);
}

// ---- QUANTIZE and DEQUANTIZE ---------------------------------------------

class QuantizePlan final : public PlannedOp {
 public:
  QuantizePlan(hal_kernel_t scales, hal_kernel_t apply, const hal_op_quantize_desc_t& desc,
               MatrixViews views, bool dequantize)
      : scales_(scales),
        apply_(apply),
        desc_(desc),
        views_(std::move(views)),
        dequantize_(dequantize) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = views_.row_count * views_.cols;
    const QuantGrid grid = quant_grid(views_.row_count, views_.cols, desc_.blocks);
    // Operands: QUANTIZE 0 x, 1 q, 2 scale; DEQUANTIZE 0 q, 1 scale, 2 x.
    void* const x = context.operands[dequantize_ ? 2 : 0];
    void* const q = context.operands[dequantize_ ? 0 : 1];
    void* const scale = context.operands[dequantize_ ? 1 : 2];
    const auto& s = views_.rows.shape;
    if (scales_ != nullptr && grid.block_rows_count * grid.block_cols_count > 0) {
      const int64_t blocks = grid.block_rows_count * grid.block_cols_count;
      // An empty x (with a whole-dimension block) has blocks of no
      // elements: their scales are 1.
      QuantGrid extents = grid;
      if (count == 0) extents.block_rows = extents.block_cols = 0;
      KernelArgs args;
      matrix_args(args, x, desc_.x.dtype, views_, 0);
      scale_args(args, scale, desc_.scale, extents);
      args.i64(grid.block_cols_count).i32(desc_.q.dtype);
      args.i64(s[1]).i64(s[2]).i64(s[3]).i64(blocks);
      if (hal_result_t r = args.launch(scales_, context.stream, linear_config(blocks, 64));
          r != HAL_SUCCESS)
        return r;
    }
    if (count == 0) return HAL_SUCCESS;
    KernelArgs args;
    if (dequantize_) {
      matrix_args(args, q, desc_.q.dtype, views_, 1);
      matrix_args(args, x, desc_.x.dtype, views_, 0);
    } else {
      matrix_args(args, x, desc_.x.dtype, views_, 0);
      matrix_args(args, q, desc_.q.dtype, views_, 1);
    }
    scale_args(args, scale, desc_.scale, grid);
    args.i64(s[1]).i64(s[2]).i64(s[3]).i64(views_.cols).i64(count);
    return args.launch(apply_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t scales_;  // nullptr: the scales are given (or DEQUANTIZE)
  hal_kernel_t apply_;
  hal_op_quantize_desc_t desc_;
  MatrixViews views_;  // views: x, q
  bool dequantize_;
};

class Quantize final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_quantize_desc_t*>(request.desc);
    const bool dequantize = desc.header.kind == HAL_OP_DEQUANTIZE;
    MatrixViews views;
    if (!matrix_views({&desc.x, &desc.q}, &views, decline)) return nullptr;
    hal_kernel_t scales = nullptr;
    if (!dequantize && (desc.flags & HAL_QUANTIZE_GIVEN_SCALE) == 0) {
      scales = portable_kernel(request, kLowpSource, "quantize_scales", decline);
      if (scales == nullptr) return nullptr;
    }
    hal_kernel_t apply = portable_kernel(
        request, kLowpSource, dequantize ? "dequantize_apply" : "quantize_apply", decline);
    if (apply == nullptr) return nullptr;
    return std::make_unique<QuantizePlan>(scales, apply, desc, std::move(views), dequantize);
  }
};

// ---- SCALED_MATMUL --------------------------------------------------------

class ScaledMatmulPlan final : public PlannedOp {
 public:
  ScaledMatmulPlan(hal_kernel_t kernel, const hal_op_scaled_matmul_desc_t& desc)
      : kernel_(kernel), desc_(desc) {}

  hal_result_t execute(const ExecContext& context) const override {
    const bool grouped = desc_.groups > 0;
    const uint32_t br = grouped ? 1 : 0;  // b's [n, k] dimensions start here
    const int64_t m = desc_.a.shape[0];
    const int64_t k = desc_.a.shape[1];
    const int64_t n = desc_.b.shape[br];
    if (m == 0 || n == 0) return HAL_SUCCESS;
    const QuantGrid a_grid = quant_grid(m, k, desc_.a_blocks);
    const QuantGrid b_grid = quant_grid(n, k, desc_.b_blocks);
    const int64_t chunk = std::max<int64_t>(1, std::min(a_grid.block_cols, b_grid.block_cols));
    void* const d = context.operands[5];
    KernelArgs args;
    args.pointer(context.operands[0]).i32(desc_.a.dtype);
    args.i64(desc_.a.strides[0]).i64(desc_.a.strides[1]);
    args.pointer(context.operands[1]).i64(desc_.a_scale.strides[0]).i64(desc_.a_scale.strides[1]);
    args.i64(a_grid.block_rows).i64(a_grid.block_cols);
    args.pointer(context.operands[2]).i32(desc_.b.dtype);
    args.i64(grouped ? desc_.b.strides[0] : 0)
        .i64(desc_.b.strides[br])
        .i64(desc_.b.strides[br + 1]);
    args.pointer(context.operands[3]).i64(grouped ? desc_.b_scale.strides[0] : 0);
    args.i64(desc_.b_scale.strides[br]).i64(desc_.b_scale.strides[br + 1]);
    args.i64(b_grid.block_rows).i64(b_grid.block_cols);
    args.pointer(grouped ? context.operands[4] : d).i32(static_cast<int32_t>(desc_.groups));
    args.pointer(d).i32(desc_.d.dtype).i64(desc_.d.strides[0]).i64(desc_.d.strides[1]);
    args.i64(m).i64(n).i64(k).i64(chunk);
    return args.launch(kernel_, context.stream, linear_config(m * n, 64));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_scaled_matmul_desc_t desc_;
};

class ScaledMatmul final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_scaled_matmul_desc_t*>(request.desc);
    hal_kernel_t kernel = portable_kernel(request, kLowpSource, "scaled_matmul", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<ScaledMatmulPlan>(kernel, desc);
  }
};

// ---- FAKE_QUANTIZE(_BACKWARD) ---------------------------------------------

class FakeQuantizePlan final : public PlannedOp {
 public:
  FakeQuantizePlan(hal_kernel_t elements, hal_kernel_t grad_scale,
                   const hal_op_fake_quantize_desc_t& desc, MatrixViews views)
      : elements_(elements), grad_scale_(grad_scale), desc_(desc), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = views_.row_count * views_.cols;
    const QuantGrid grid = quant_grid(views_.row_count, views_.cols, desc_.blocks);
    const auto& s = views_.rows.shape;
    const bool backward = desc_.header.kind == HAL_OP_FAKE_QUANTIZE_BACKWARD;
    void* const x = context.operands[0];
    void* const scale = context.operands[1];
    if (count > 0) {
      KernelArgs args;
      matrix_args(args, x, desc_.x.dtype, views_, 0);
      if (backward) {
        matrix_args(args, context.operands[2], desc_.grad_y.dtype, views_, 1);
        matrix_args(args, context.operands[3], desc_.grad_x.dtype, views_, 2);
      } else {
        matrix_args(args, context.operands[2], desc_.y.dtype, views_, 1);
      }
      scale_args(args, scale, desc_.scale, grid);
      args.i32(desc_.qdtype).i32(static_cast<int32_t>(desc_.flags));
      args.i64(s[1]).i64(s[2]).i64(s[3]).i64(views_.cols).i64(count);
      if (hal_result_t r = args.launch(elements_, context.stream, linear_config(count));
          r != HAL_SUCCESS)
        return r;
    }
    if (grad_scale_ == nullptr) return HAL_SUCCESS;
    const int64_t blocks = desc_.grad_scale.shape[0] * desc_.grad_scale.shape[1];
    if (blocks == 0) return HAL_SUCCESS;
    KernelArgs args;
    matrix_args(args, x, desc_.x.dtype, views_, 0);
    matrix_args(args, context.operands[2], desc_.grad_y.dtype, views_, 1);
    args.pointer(scale).i64(desc_.scale.strides[0]).i64(desc_.scale.strides[1]);
    args.pointer(context.operands[4])
        .i64(desc_.grad_scale.strides[0])
        .i64(desc_.grad_scale.strides[1]);
    // An empty x has blocks of no elements: the extents below make the
    // kernel's loops empty and each gradient 0.
    args.i64(count == 0 ? 0 : grid.block_rows).i64(count == 0 ? 0 : grid.block_cols);
    args.i64(desc_.grad_scale.shape[1]).i32(desc_.qdtype).i32(static_cast<int32_t>(desc_.flags));
    args.f32(desc_.grad_scale_factor);
    args.i64(s[1]).i64(s[2]).i64(s[3]).i64(blocks);
    return args.launch(grad_scale_, context.stream, linear_config(blocks, 64));
  }

 private:
  hal_kernel_t elements_;
  hal_kernel_t grad_scale_;  // nullptr: no GRAD_SCALE
  hal_op_fake_quantize_desc_t desc_;
  MatrixViews views_;  // forward: x, y; backward: x, grad_y, grad_x
};

class FakeQuantize final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_fake_quantize_desc_t*>(request.desc);
    const bool backward = desc.header.kind == HAL_OP_FAKE_QUANTIZE_BACKWARD;
    MatrixViews views;
    const bool merged = backward
                            ? matrix_views({&desc.x, &desc.grad_y, &desc.grad_x}, &views, decline)
                            : matrix_views({&desc.x, &desc.y}, &views, decline);
    if (!merged) return nullptr;
    hal_kernel_t elements =
        portable_kernel(request, kLowpSource,
                        backward ? "fake_quantize_backward_x" : "fake_quantize_forward", decline);
    if (elements == nullptr) return nullptr;
    hal_kernel_t grad_scale = nullptr;
    if (backward && (desc.flags & HAL_FAKE_QUANTIZE_GRAD_SCALE) != 0) {
      grad_scale = portable_kernel(request, kLowpSource, "fake_quantize_grad_scale", decline);
      if (grad_scale == nullptr) return nullptr;
    }
    return std::make_unique<FakeQuantizePlan>(elements, grad_scale, desc, std::move(views));
  }
};

}  // namespace

void add_lowp(ImplementationTable& table) {
  static const Quantize quantize;
  table[HAL_OP_QUANTIZE].push_back(&quantize);
  table[HAL_OP_DEQUANTIZE].push_back(&quantize);
  static const ScaledMatmul scaled_matmul;
  table[HAL_OP_SCALED_MATMUL].push_back(&scaled_matmul);
  static const FakeQuantize fake_quantize;
  table[HAL_OP_FAKE_QUANTIZE].push_back(&fake_quantize);
  table[HAL_OP_FAKE_QUANTIZE_BACKWARD].push_back(&fake_quantize);
}

}  // namespace hal::ops::portable
