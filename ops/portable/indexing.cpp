// Portable indexing ops: kernels/indexing.hal (SCAN, GATHER, SCATTER, FILL),
// and CAT as one cast_forward launch (kernels/elementwise.hal) per input into
// out's slice. Deterministic always.
#include "launch.hpp"
#include "registry.hpp"

#include "hal_ops/tensor.hpp"

#include <vector>

namespace hal::ops::portable {

namespace {

constexpr const char* kIndexingSource = "indexing";
// |tensor| without dimension |axis| (the line shape of a scan or scatter).
hal_tensor_desc_t without_axis(const hal_tensor_desc_t& tensor, uint32_t axis) {
  hal_tensor_desc_t line{};
  line.dtype = tensor.dtype;
  for (uint32_t d = 0; d < tensor.rank; ++d) {
    if (d == axis) continue;
    line.shape[line.rank] = tensor.shape[d];
    line.strides[line.rank++] = tensor.strides[d];
  }
  return line;
}

// |tensor|'s strides over |shape|'s extents (a view of another tensor's
// shape inside this one).
hal_tensor_desc_t with_shape_of(const hal_tensor_desc_t& tensor, const hal_tensor_desc_t& shape) {
  hal_tensor_desc_t view = tensor;
  for (uint32_t d = 0; d < shape.rank; ++d) view.shape[d] = shape.shape[d];
  return view;
}

hal_launch_config_t lines_config(int64_t lines) {
  // Few lines each long: small blocks spread them over the device's cores.
  return linear_config(lines, lines < 4096 ? 16 : 256);
}

// ---- SCAN ----------------------------------------------------------------

class ScanPlan final : public PlannedOp {
 public:
  ScanPlan(hal_kernel_t kernel, const hal_op_scan_desc_t& desc, MergedViews lines)
      : kernel_(kernel), desc_(desc), lines_(std::move(lines)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t length = desc_.x.shape[desc_.axis];
    const int64_t lines = length == 0 ? 0 : element_count(desc_.x) / length;
    if (lines == 0) return HAL_SUCCESS;
    KernelArgs args;
    view_args(args, context.operands[0], desc_.x.dtype, lines_.strides[0]);
    view_args(args, context.operands[1], desc_.out.dtype, lines_.strides[1]);
    shape_args(args, lines_).i64(lines);
    args.i64(desc_.x.strides[desc_.axis]).i64(desc_.out.strides[desc_.axis]).i64(length);
    args.i32(desc_.scan);
    return args.launch(kernel_, context.stream, lines_config(lines));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_scan_desc_t desc_;
  MergedViews lines_;
};

class Scan final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_scan_desc_t*>(request.desc);
    const hal_tensor_desc_t x = without_axis(desc.x, desc.axis);
    const hal_tensor_desc_t out = without_axis(desc.out, desc.axis);
    MergedViews lines;
    if (!merge_views(x, {&x, &out}, &lines)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kIndexingSource, "scan_lines", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<ScanPlan>(kernel, desc, std::move(lines));
  }
};

// ---- GATHER ----------------------------------------------------------------

class GatherPlan final : public PlannedOp {
 public:
  GatherPlan(hal_kernel_t kernel, const hal_op_gather_desc_t& desc, MergedViews views)
      : kernel_(kernel), desc_(desc), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.out);
    if (count == 0) return HAL_SUCCESS;
    KernelArgs args;
    args.pointer(context.operands[0]);
    for (int64_t stride : views_.strides[0]) args.i64(stride);
    args.i64(desc_.x.strides[desc_.axis]).i64(desc_.x.shape[desc_.axis]);
    view_args(args, context.operands[1], desc_.index.dtype, views_.strides[1]);
    args.pointer(context.operands[2]);
    for (int64_t stride : views_.strides[2]) args.i64(stride);
    args.pointer(context.operands[3]);
    shape_args(args, views_).i64(count).i32(static_cast<int32_t>(HAL_DTYPE_SIZE(desc_.out.dtype)));
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_gather_desc_t desc_;
  MergedViews views_;
};

class Gather final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_gather_desc_t*>(request.desc);
    // x over out's shape, its axis position added by the kernel from the index.
    hal_tensor_desc_t x = with_shape_of(desc.x, desc.out);
    x.strides[desc.axis] = 0;
    MergedViews views;
    if (!merge_views(desc.out, {&x, &desc.index, &desc.out}, &views)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kIndexingSource, "gather_elements", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<GatherPlan>(kernel, desc, std::move(views));
  }
};

// ---- SCATTER ---------------------------------------------------------------

class ScatterPlan final : public PlannedOp {
 public:
  ScatterPlan(hal_kernel_t kernel, const hal_op_scatter_desc_t& desc, MergedViews lines)
      : kernel_(kernel), desc_(desc), lines_(std::move(lines)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const uint32_t axis = desc_.axis;
    const int64_t length = desc_.index.shape[axis];
    const int64_t lines = length == 0 ? 0 : element_count(desc_.index) / length;
    if (lines == 0) return HAL_SUCCESS;
    KernelArgs args;
    view_args(args, context.operands[0], desc_.index.dtype, lines_.strides[0]);
    args.i64(desc_.index.strides[axis]);
    view_args(args, context.operands[1], desc_.src.dtype, lines_.strides[1]);
    args.i64(desc_.src.strides[axis]);
    args.pointer(context.operands[2]);
    for (int64_t stride : lines_.strides[2]) args.i64(stride);
    args.i64(desc_.out.strides[axis]).i64(desc_.out.shape[axis]);
    args.pointer(context.operands[3]);
    shape_args(args, lines_).i64(lines).i64(length);
    args.i32(desc_.mode == HAL_SCATTER_ADD ? 1 : 0);
    args.i32(static_cast<int32_t>(HAL_DTYPE_SIZE(desc_.out.dtype)));
    return args.launch(kernel_, context.stream, lines_config(lines));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_scatter_desc_t desc_;
  MergedViews lines_;
};

class Scatter final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_scatter_desc_t*>(request.desc);
    // Lines over index's shape less the axis; src and out stepped over it.
    const hal_tensor_desc_t index = without_axis(desc.index, desc.axis);
    const hal_tensor_desc_t src = without_axis(with_shape_of(desc.src, desc.index), desc.axis);
    const hal_tensor_desc_t out = without_axis(with_shape_of(desc.out, desc.index), desc.axis);
    MergedViews lines;
    if (!merge_views(index, {&index, &src, &out}, &lines)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kIndexingSource, "scatter_lines", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<ScatterPlan>(kernel, desc, std::move(lines));
  }
};

// ---- CAT: a cast_forward launch per non-empty input into its slice of out.

class CatPlan final : public PlannedOp {
 public:
  struct Piece {
    uint32_t input;      // its operand index
    int64_t out_offset;  // elements from out's pointer to the slice
    hal_dtype_t in_dtype;
    MergedViews views;  // (input, slice)
    int64_t count;
  };
  CatPlan(hal_kernel_t kernel, hal_dtype_t out_dtype, uint32_t out_operand,
          std::vector<Piece> pieces)
      : kernel_(kernel),
        out_dtype_(out_dtype),
        out_operand_(out_operand),
        pieces_(std::move(pieces)) {}

  hal_result_t execute(const ExecContext& context) const override {
    auto* out = static_cast<unsigned char*>(context.operands[out_operand_]);
    for (const Piece& piece : pieces_) {
      KernelArgs args;
      view_args(args, context.operands[piece.input], piece.in_dtype, piece.views.strides[0]);
      view_args(args, out + piece.out_offset * HAL_DTYPE_SIZE(out_dtype_), out_dtype_,
                piece.views.strides[1]);
      shape_args(args, piece.views).i64(piece.count);
      if (hal_result_t r = args.launch(kernel_, context.stream, linear_config(piece.count));
          r != HAL_SUCCESS) {
        return r;
      }
    }
    return HAL_SUCCESS;
  }

 private:
  hal_kernel_t kernel_;
  hal_dtype_t out_dtype_;
  uint32_t out_operand_;
  std::vector<Piece> pieces_;
};

class Cat final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_cat_desc_t*>(request.desc);
    std::vector<CatPlan::Piece> pieces;
    int64_t along = 0;
    for (uint32_t t = 0; t < desc.input_count; ++t) {
      const hal_tensor_desc_t& input = desc.inputs[t];
      const int64_t extent = input.shape[desc.axis];
      hal_tensor_desc_t slice = desc.out;
      slice.shape[desc.axis] = extent;
      const int64_t offset = along * desc.out.strides[desc.axis];
      along += extent;
      const int64_t count = element_count(input);
      if (count == 0) continue;
      CatPlan::Piece piece{t, offset, input.dtype, {}, count};
      if (!merge_views(input, {&input, &slice}, &piece.views)) {
        *decline = "input " + std::to_string(t) + ": " + kMergeDecline;
        return nullptr;
      }
      pieces.push_back(std::move(piece));
    }
    hal_kernel_t kernel = portable_kernel(request, "elementwise", "cast_forward", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<CatPlan>(kernel, desc.out.dtype, desc.input_count, std::move(pieces));
  }
};

// ---- FILL ------------------------------------------------------------------

class FillPlan final : public PlannedOp {
 public:
  FillPlan(hal_kernel_t kernel, const hal_op_fill_desc_t& desc, MergedViews views)
      : kernel_(kernel), desc_(desc), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.out);
    if (count == 0) return HAL_SUCCESS;
    const hal_op_scalar_t& start = context.scalars[0];
    const hal_op_scalar_t& step = context.scalars[1];
    const bool float_mode = is_float_dtype(desc_.out.dtype) || desc_.out.dtype == HAL_DTYPE_F64;
    KernelArgs args;
    view_args(args, context.operands[0], desc_.out.dtype, views_.strides[0]);
    shape_args(args, views_).i64(count).i32(float_mode ? 1 : 0);
    args.f64(start.f64).f64(step.f64).i64(start.i64).i64(step.i64);
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_fill_desc_t desc_;
  MergedViews views_;
};

class Fill final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_fill_desc_t*>(request.desc);
    MergedViews views;
    if (!merge_views(desc.out, {&desc.out}, &views)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kIndexingSource, "fill_values", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<FillPlan>(kernel, desc, std::move(views));
  }
};

}  // namespace

void add_indexing(ImplementationTable& table) {
  static const Scan scan;
  table[HAL_OP_SCAN].push_back(&scan);
  static const Gather gather;
  table[HAL_OP_GATHER].push_back(&gather);
  static const Scatter scatter;
  table[HAL_OP_SCATTER].push_back(&scatter);
  static const Cat cat;
  table[HAL_OP_CAT].push_back(&cat);
  static const Fill fill;
  table[HAL_OP_FILL].push_back(&fill);
}

}  // namespace hal::ops::portable
