// Portable elementwise math: kernels/math.hal. HAL_OP_BINARY (every op and
// domain), HAL_OP_BINARY_SCALAR, HAL_OP_UNARY_MATH, HAL_OP_WHERE, HAL_OP_CLAMP;
// one work-item per output element, deterministic always.
#include "definitions/definitions.hpp"
#include "launch.hpp"
#include "portable_constants.hpp"
#include "registry.hpp"

#include "hal_ops/tensor.hpp"

namespace hal::ops::portable {

namespace {

constexpr const char* kMathSource = "math";
// The kernels' compute modes and scalar slots (the shared MODE_* and SCALAR_*).
enum Mode : int32_t {
  kModeFloat = constants::MODE_FLOAT,
  kModeInteger = constants::MODE_INTEGER,
  kModeFloatCompare = constants::MODE_FLOAT_COMPARE,
  kModeIntegerCompare = constants::MODE_INTEGER_COMPARE,
  kModeLogical = constants::MODE_LOGICAL,
  kModeBitwise = constants::MODE_BITWISE,
};
enum ScalarSlot : int32_t {
  kNoScalar = constants::SCALAR_NONE,
  kScalarIsB = constants::SCALAR_IS_B,
  kScalarIsA = constants::SCALAR_IS_A,
};

Mode binary_mode(hal_binary_op_t op, hal_dtype_t a, hal_dtype_t b, hal_dtype_t out) {
  switch (definitions::binary_class(op)) {
    case definitions::BinaryClass::kArithmetic:
      return is_float_dtype(out) ? kModeFloat : kModeInteger;
    case definitions::BinaryClass::kComparison:
      return is_float_dtype(a) || is_float_dtype(b) ? kModeFloatCompare : kModeIntegerCompare;
    case definitions::BinaryClass::kLogical:
      return kModeLogical;
    case definitions::BinaryClass::kBitwise:
      break;
  }
  return kModeBitwise;
}

// HAL_OP_BINARY and HAL_OP_BINARY_SCALAR: one kernel, the scalar (when there
// is one) standing in for a or b.
class BinaryPlan final : public PlannedOp {
 public:
  struct Setup {
    hal_binary_op_t op = HAL_BINARY_ADD;
    float alpha = 1.0f;
    Mode mode = kModeFloat;
    ScalarSlot scalar = kNoScalar;
    bool scalar_is_float = false;
    hal_dtype_t a_dtype = HAL_DTYPE_F32, b_dtype = HAL_DTYPE_F32, out_dtype = HAL_DTYPE_F32;
    int64_t count = 0;
  };
  // |views| are (a, b, out) for BINARY, (x, out) for BINARY_SCALAR.
  BinaryPlan(hal_kernel_t kernel, const Setup& setup, MergedViews views)
      : kernel_(kernel), setup_(setup), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    if (setup_.count == 0) return HAL_SUCCESS;
    KernelArgs args;
    float scalar_f = 0.0f;
    int64_t scalar_i = 0;
    if (setup_.scalar == kNoScalar) {
      view_args(args, context.operands[0], setup_.a_dtype, views_.strides[0]);
      view_args(args, context.operands[1], setup_.b_dtype, views_.strides[1]);
      view_args(args, context.operands[2], setup_.out_dtype, views_.strides[2]);
    } else {
      // The tensor x stands in both input slots; the kernel reads the scalar for one.
      const hal_op_scalar_t& s = context.scalars[0];
      scalar_i = s.i64;
      scalar_f = setup_.scalar_is_float ? static_cast<float>(s.f64) : static_cast<float>(s.i64);
      const hal_dtype_t x_dtype = setup_.scalar == kScalarIsB ? setup_.a_dtype : setup_.b_dtype;
      view_args(args, context.operands[0], x_dtype, views_.strides[0]);
      view_args(args, context.operands[0], x_dtype, views_.strides[0]);
      view_args(args, context.operands[1], setup_.out_dtype, views_.strides[1]);
    }
    shape_args(args, views_).i64(setup_.count);
    args.f32(setup_.alpha).i32(setup_.op).i32(setup_.mode);
    args.i32(setup_.scalar).f32(scalar_f).i64(scalar_i);
    return args.launch(kernel_, context.stream, linear_config(setup_.count));
  }

 private:
  hal_kernel_t kernel_;
  Setup setup_;
  MergedViews views_;
};

class Binary final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_binary_desc_t*>(request.desc);
    const hal_tensor_desc_t a = broadcast_to(desc.a, desc.out);
    const hal_tensor_desc_t b = broadcast_to(desc.b, desc.out);
    MergedViews views;
    if (!merge_views(desc.out, {&a, &b, &desc.out}, &views)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kMathSource, "binary_math", decline);
    if (kernel == nullptr) return nullptr;
    BinaryPlan::Setup setup;
    setup.op = desc.op;
    setup.alpha = desc.alpha;
    setup.mode = binary_mode(desc.op, desc.a.dtype, desc.b.dtype, desc.out.dtype);
    setup.a_dtype = desc.a.dtype;
    setup.b_dtype = desc.b.dtype;
    setup.out_dtype = desc.out.dtype;
    setup.count = element_count(desc.out);
    return std::make_unique<BinaryPlan>(kernel, setup, std::move(views));
  }
};

class BinaryScalar final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_binary_scalar_desc_t*>(request.desc);
    MergedViews views;
    if (!merge_views(desc.out, {&desc.x, &desc.out}, &views)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kMathSource, "binary_math", decline);
    if (kernel == nullptr) return nullptr;
    // The scalar takes part as an f32 or an i64 operand (definitions' rule).
    const hal_dtype_t scalar = desc.scalar_is_float ? HAL_DTYPE_F32 : HAL_DTYPE_I64;
    BinaryPlan::Setup setup;
    setup.op = desc.op;
    setup.alpha = desc.alpha;
    setup.scalar = desc.scalar_first ? kScalarIsA : kScalarIsB;
    setup.scalar_is_float = desc.scalar_is_float != 0;
    setup.a_dtype = desc.scalar_first ? scalar : desc.x.dtype;
    setup.b_dtype = desc.scalar_first ? desc.x.dtype : scalar;
    setup.out_dtype = desc.out.dtype;
    setup.mode = binary_mode(desc.op, setup.a_dtype, setup.b_dtype, desc.out.dtype);
    setup.count = element_count(desc.out);
    return std::make_unique<BinaryPlan>(kernel, setup, std::move(views));
  }
};

class UnaryMathPlan final : public PlannedOp {
 public:
  UnaryMathPlan(hal_kernel_t kernel, const hal_op_unary_math_desc_t& desc, MergedViews views)
      : kernel_(kernel), desc_(desc), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.out);
    if (count == 0) return HAL_SUCCESS;
    KernelArgs args;
    view_args(args, context.operands[0], desc_.x.dtype, views_.strides[0]);
    view_args(args, context.operands[1], desc_.out.dtype, views_.strides[1]);
    shape_args(args, views_).i64(count).i32(desc_.op);
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_unary_math_desc_t desc_;
  MergedViews views_;
};

class UnaryMath final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_unary_math_desc_t*>(request.desc);
    MergedViews views;
    if (!merge_views(desc.out, {&desc.x, &desc.out}, &views)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kMathSource, "unary_math", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<UnaryMathPlan>(kernel, desc, std::move(views));
  }
};

// HAL_OP_WHERE: views (cond, a, b, out); a scalar's view is out's (never read).
class WherePlan final : public PlannedOp {
 public:
  WherePlan(hal_kernel_t kernel, const hal_op_where_desc_t& desc, MergedViews views)
      : kernel_(kernel), desc_(desc), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.out);
    if (count == 0) return HAL_SUCCESS;
    // The scalars, in order: a's (with a_is_scalar), then b's.
    hal_op_scalar_t scalar_a{}, scalar_b{};
    uint32_t next = 0;
    if (desc_.a_is_scalar) scalar_a = context.scalars[next++];
    if (desc_.b_is_scalar) scalar_b = context.scalars[next++];
    void* out = context.operands[3];
    KernelArgs args;
    args.pointer(context.operands[0]);
    for (int64_t stride : views_.strides[0]) args.i64(stride);
    view_args(args, desc_.a_is_scalar ? out : context.operands[1], desc_.a.dtype,
              views_.strides[1]);
    view_args(args, desc_.b_is_scalar ? out : context.operands[2], desc_.b.dtype,
              views_.strides[2]);
    view_args(args, out, desc_.out.dtype, views_.strides[3]);
    shape_args(args, views_).i64(count);
    const bool float_scalars = is_float_dtype(desc_.out.dtype) || desc_.out.dtype == HAL_DTYPE_F64;
    args.i32(static_cast<int32_t>(desc_.a_is_scalar)).i32(static_cast<int32_t>(desc_.b_is_scalar));
    args.i32(float_scalars ? 1 : 0).f64(scalar_a.f64).f64(scalar_b.f64);
    args.i64(scalar_a.i64).i64(scalar_b.i64);
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_where_desc_t desc_;
  MergedViews views_;
};

class Where final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    auto desc = *reinterpret_cast<const hal_op_where_desc_t*>(request.desc);
    // A scalar operand reads nothing: its view is out's, dtype and all.
    if (desc.a_is_scalar) desc.a = desc.out;
    if (desc.b_is_scalar) desc.b = desc.out;
    const hal_tensor_desc_t cond = broadcast_to(desc.cond, desc.out);
    const hal_tensor_desc_t a = broadcast_to(desc.a, desc.out);
    const hal_tensor_desc_t b = broadcast_to(desc.b, desc.out);
    MergedViews views;
    if (!merge_views(desc.out, {&cond, &a, &b, &desc.out}, &views)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kMathSource, "where_select", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<WherePlan>(kernel, desc, std::move(views));
  }
};

// HAL_OP_CLAMP: views (x, min, max, out); an absent or scalar bound's view is
// x's (never read).
class ClampPlan final : public PlannedOp {
 public:
  ClampPlan(hal_kernel_t kernel, const hal_op_clamp_desc_t& desc, MergedViews views)
      : kernel_(kernel), desc_(desc), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.out);
    if (count == 0) return HAL_SUCCESS;
    hal_op_scalar_t lo{}, hi{};
    uint32_t next = 0;
    if (desc_.min_kind == HAL_CLAMP_BOUND_SCALAR) lo = context.scalars[next++];
    if (desc_.max_kind == HAL_CLAMP_BOUND_SCALAR) hi = context.scalars[next++];
    void* x = context.operands[0];
    const bool lo_tensor = desc_.min_kind == HAL_CLAMP_BOUND_TENSOR;
    const bool hi_tensor = desc_.max_kind == HAL_CLAMP_BOUND_TENSOR;
    KernelArgs args;
    view_args(args, x, desc_.x.dtype, views_.strides[0]);
    view_args(args, lo_tensor ? context.operands[1] : x, desc_.min.dtype, views_.strides[1]);
    view_args(args, hi_tensor ? context.operands[2] : x, desc_.max.dtype, views_.strides[2]);
    view_args(args, context.operands[3], desc_.out.dtype, views_.strides[3]);
    shape_args(args, views_).i64(count);
    args.i32(desc_.min_kind).i32(desc_.max_kind);
    args.f32(static_cast<float>(lo.f64)).f32(static_cast<float>(hi.f64)).i64(lo.i64).i64(hi.i64);
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_clamp_desc_t desc_;
  MergedViews views_;
};

class Clamp final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    auto desc = *reinterpret_cast<const hal_op_clamp_desc_t*>(request.desc);
    if (desc.min_kind != HAL_CLAMP_BOUND_TENSOR) desc.min = desc.x;
    if (desc.max_kind != HAL_CLAMP_BOUND_TENSOR) desc.max = desc.x;
    const hal_tensor_desc_t lo = broadcast_to(desc.min, desc.x);
    const hal_tensor_desc_t hi = broadcast_to(desc.max, desc.x);
    MergedViews views;
    if (!merge_views(desc.out, {&desc.x, &lo, &hi, &desc.out}, &views)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kMathSource, "clamp_values", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<ClampPlan>(kernel, desc, std::move(views));
  }
};

}  // namespace

void add_math(ImplementationTable& table) {
  static const Binary binary;
  table[HAL_OP_BINARY].push_back(&binary);
  static const BinaryScalar binary_scalar;
  table[HAL_OP_BINARY_SCALAR].push_back(&binary_scalar);
  static const UnaryMath unary_math;
  table[HAL_OP_UNARY_MATH].push_back(&unary_math);
  static const Where where;
  table[HAL_OP_WHERE].push_back(&where);
  static const Clamp clamp;
  table[HAL_OP_CLAMP].push_back(&clamp);
}

}  // namespace hal::ops::portable
