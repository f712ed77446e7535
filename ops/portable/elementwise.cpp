// Portable elementwise ops: kernels/elementwise.hal.
#include "launch.hpp"
#include "registry.hpp"

#include "hal_ops/tensor.hpp"

#include <cmath>
#include <limits>

namespace hal::ops::portable {

namespace {

constexpr const char* kElementwiseSource = "elementwise";

// HAL_OP_UNARY and HAL_OP_UNARY_BACKWARD: one work-item per element.
class UnaryPlan final : public PlannedOp {
 public:
  UnaryPlan(hal_kernel_t kernel, const hal_op_unary_desc_t& desc, bool backward, MergedViews views)
      : kernel_(kernel), desc_(desc), backward_(backward), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.x);
    if (count == 0) return HAL_SUCCESS;
    KernelArgs args;
    const hal_tensor_desc_t* tensors[3] = {&desc_.x, &desc_.out, &desc_.grad_x};
    const int views = backward_ ? 3 : 2;
    for (int v = 0; v < views; ++v) {
      view_args(args, context.operands[v], tensors[v]->dtype, views_.strides[v]);
    }
    args.i64(views_.shape[1]).i64(views_.shape[2]).i64(views_.shape[3]).i64(count);
    args.f32(desc_.alpha).i32(desc_.activation);
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_unary_desc_t desc_;
  bool backward_;
  MergedViews views_;
};

class Unary final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_unary_desc_t*>(request.desc);
    const bool backward = desc.header.kind == HAL_OP_UNARY_BACKWARD;
    MergedViews views;
    const bool merged = backward ? merge_views(desc.x, {&desc.x, &desc.out, &desc.grad_x}, &views)
                                 : merge_views(desc.x, {&desc.x, &desc.out}, &views);
    if (!merged) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kElementwiseSource,
                                          backward ? "unary_backward" : "unary_forward", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<UnaryPlan>(kernel, desc, backward, std::move(views));
  }
};

// HAL_OP_SWIGLU(_BACKWARD): one work-item per element of out (grad_out); the
// x views index the gate half, the up half lies n * last stride further.
class SwigluPlan final : public PlannedOp {
 public:
  SwigluPlan(hal_kernel_t kernel, const hal_op_swiglu_desc_t& desc, bool backward,
             MergedViews views)
      : kernel_(kernel), desc_(desc), backward_(backward), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.out);
    if (count == 0) return HAL_SUCCESS;
    const uint32_t last = desc_.x.rank - 1;
    const int64_t half = desc_.out.shape[last];
    KernelArgs args;
    view_args(args, context.operands[0], desc_.x.dtype, views_.strides[0]);
    view_args(args, context.operands[1], desc_.out.dtype, views_.strides[1]);
    if (backward_) view_args(args, context.operands[2], desc_.grad_x.dtype, views_.strides[2]);
    args.i64(views_.shape[1]).i64(views_.shape[2]).i64(views_.shape[3]).i64(count);
    args.i64(half * desc_.x.strides[last]);
    if (backward_) args.i64(half * desc_.grad_x.strides[last]);
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_swiglu_desc_t desc_;
  bool backward_;
  MergedViews views_;
};

class Swiglu final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_swiglu_desc_t*>(request.desc);
    const bool backward = desc.header.kind == HAL_OP_SWIGLU_BACKWARD;
    hal_tensor_desc_t x_gate = desc.x;
    hal_tensor_desc_t gx_gate = desc.grad_x;
    x_gate.shape[desc.x.rank - 1] /= 2;
    gx_gate.shape[desc.x.rank - 1] /= 2;
    MergedViews views;
    const bool merged = backward ? merge_views(desc.out, {&x_gate, &desc.out, &gx_gate}, &views)
                                 : merge_views(desc.out, {&x_gate, &desc.out}, &views);
    if (!merged) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kElementwiseSource,
                                          backward ? "swiglu_backward" : "swiglu_forward", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<SwigluPlan>(kernel, desc, backward, std::move(views));
  }
};

// HAL_OP_REDUCE: the kept dimensions (merged over x and out) give one
// work-item per output element; the reduced ones (merged over x) its loop.
// A long reduction over few outputs runs in two passes (chunks of
// kReduceChunk elements into an f32 workspace, then the chunks in order), so
// it spreads over the device; the order is fixed by the shape alone.
constexpr int64_t kReduceChunk = 2048;
constexpr int64_t kReduceSplitOutputs = 4096;  // more outputs are parallel enough

// Which kernels a reduction runs: float kinds (one pass, or two for a long
// reduction over few outputs), ARGMAX/ARGMIN (reduce_arg) and integer or
// BOOL x (reduce_integer), the last two in one pass always.
enum class ReduceVariant { kFloat, kArg, kInteger };

ReduceVariant reduce_variant(const hal_op_reduce_desc_t& desc) {
  if (desc.reduce == HAL_REDUCE_KIND_ARGMAX || desc.reduce == HAL_REDUCE_KIND_ARGMIN) {
    return ReduceVariant::kArg;
  }
  return is_float_dtype(desc.x.dtype) ? ReduceVariant::kFloat : ReduceVariant::kInteger;
}

// The value of an empty integer reduction: 0, 1, or the dtype's minimum
// (MAX) or maximum (MIN); BOOL's are false and true.
int64_t integer_reduce_identity(hal_reduce_kind_t kind, hal_dtype_t dtype) {
  if (kind == HAL_REDUCE_KIND_SUM) return 0;
  if (kind == HAL_REDUCE_KIND_PROD) return 1;
  const bool max = kind == HAL_REDUCE_KIND_MAX;
  switch (dtype) {
    case HAL_DTYPE_I64:
      return max ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
    case HAL_DTYPE_I32:
      return max ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max();
    case HAL_DTYPE_I8:
      return max ? -128 : 127;
    case HAL_DTYPE_U8:
      return max ? 0 : 255;
    default:  // BOOL
      return max ? 0 : 1;
  }
}

class ReducePlan final : public PlannedOp {
 public:
  ReducePlan(hal_kernel_t single, hal_kernel_t partial, hal_kernel_t finish,
             const hal_op_reduce_desc_t& desc, MergedViews kept, MergedViews reduced,
             int64_t reduced_count)
      : single_(single),
        partial_(partial),
        finish_(finish),
        desc_(desc),
        variant_(reduce_variant(desc)),
        kept_(std::move(kept)),
        reduced_(std::move(reduced)),
        reduced_count_(reduced_count),
        count_(element_count(desc.out)),
        chunks_(variant_ == ReduceVariant::kFloat ? chunks_for(count_, reduced_count) : 1) {}

  // 1: a single pass.
  static int64_t chunks_for(int64_t outputs, int64_t reduced) {
    if (outputs == 0 || outputs >= kReduceSplitOutputs || reduced <= 2 * kReduceChunk) return 1;
    return (reduced + kReduceChunk - 1) / kReduceChunk;
  }

  size_t workspace_bytes() const override {
    return chunks_ > 1 ? static_cast<size_t>(count_ * chunks_) * sizeof(float) : 0;
  }

  hal_result_t execute(const ExecContext& context) const override {
    if (count_ == 0) return HAL_SUCCESS;
    if (chunks_ == 1) {
      KernelArgs args;
      view_args(args, context.operands[0], desc_.x.dtype, kept_.strides[0]);
      if (variant_ == ReduceVariant::kArg) {  // out is i64: no dtype argument
        args.pointer(context.operands[1]);
        for (int64_t stride : kept_.strides[1]) args.i64(stride);
      } else {
        view_args(args, context.operands[1], desc_.out.dtype, kept_.strides[1]);
      }
      kept_shape(args).i64(count_);
      reduced_view(args).i64(reduced_count_).i32(desc_.reduce);
      if (variant_ == ReduceVariant::kInteger) {
        args.i64(integer_reduce_identity(desc_.reduce, desc_.x.dtype));
      }
      return args.launch(single_, context.stream, linear_config(count_));
    }
    KernelArgs first;
    view_args(first, context.operands[0], desc_.x.dtype, kept_.strides[0]);
    first.pointer(context.workspace);
    kept_shape(first).i64(count_);
    reduced_view(first).i64(reduced_count_).i64(kReduceChunk).i64(chunks_).i32(desc_.reduce);
    if (hal_result_t r = first.launch(partial_, context.stream, linear_config(count_ * chunks_));
        r != HAL_SUCCESS) {
      return r;
    }
    KernelArgs second;
    second.pointer(context.workspace);
    view_args(second, context.operands[1], desc_.out.dtype, kept_.strides[1]);
    kept_shape(second).i64(count_);
    second.i64(reduced_count_).i64(chunks_).i32(desc_.reduce);
    return second.launch(finish_, context.stream, linear_config(count_));
  }

 private:
  KernelArgs& kept_shape(KernelArgs& args) const {
    return args.i64(kept_.shape[1]).i64(kept_.shape[2]).i64(kept_.shape[3]);
  }
  KernelArgs& reduced_view(KernelArgs& args) const {
    for (int64_t stride : reduced_.strides[0]) args.i64(stride);
    return args.i64(reduced_.shape[1]).i64(reduced_.shape[2]).i64(reduced_.shape[3]);
  }

  hal_kernel_t single_, partial_, finish_;
  hal_op_reduce_desc_t desc_;
  ReduceVariant variant_;
  MergedViews kept_, reduced_;
  int64_t reduced_count_;
  int64_t count_;
  int64_t chunks_;
};

class Reduce final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_reduce_desc_t*>(request.desc);
    // Split x's dimensions (in order) into kept and reduced sub-views.
    hal_tensor_desc_t x_kept{}, out_kept{}, x_reduced{};
    x_kept.dtype = desc.x.dtype;
    out_kept.dtype = desc.out.dtype;
    x_reduced.dtype = desc.x.dtype;
    for (uint32_t d = 0; d < desc.x.rank; ++d) {
      if ((desc.axes_mask >> d) & 1u) {
        x_reduced.shape[x_reduced.rank] = desc.x.shape[d];
        x_reduced.strides[x_reduced.rank++] = desc.x.strides[d];
      } else {
        x_kept.shape[x_kept.rank] = desc.x.shape[d];
        x_kept.strides[x_kept.rank++] = desc.x.strides[d];
        out_kept.shape[out_kept.rank] = desc.out.shape[d];
        out_kept.strides[out_kept.rank++] = desc.out.strides[d];
      }
    }
    MergedViews kept, reduced;
    if (!merge_views(x_kept, {&x_kept, &out_kept}, &kept)) {
      *decline = "the kept axes need more than 4 dimensions after merging";
      return nullptr;
    }
    if (!merge_views(x_reduced, {&x_reduced}, &reduced)) {
      *decline = "the reduced axes need more than 4 dimensions after merging";
      return nullptr;
    }
    const int64_t reduced_count = element_count(x_reduced);
    const ReduceVariant variant = reduce_variant(desc);
    const char* single_name = variant == ReduceVariant::kArg       ? "reduce_arg"
                              : variant == ReduceVariant::kInteger ? "reduce_integer"
                                                                   : "reduce_forward";
    hal_kernel_t single = portable_kernel(request, kElementwiseSource, single_name, decline);
    if (single == nullptr) return nullptr;
    hal_kernel_t partial = nullptr;
    hal_kernel_t finish = nullptr;
    if (variant == ReduceVariant::kFloat &&
        ReducePlan::chunks_for(element_count(desc.out), reduced_count) > 1) {
      partial = portable_kernel(request, kElementwiseSource, "reduce_partial", decline);
      if (partial == nullptr) return nullptr;
      finish = portable_kernel(request, kElementwiseSource, "reduce_finish", decline);
      if (finish == nullptr) return nullptr;
    }
    return std::make_unique<ReducePlan>(single, partial, finish, desc, std::move(kept),
                                        std::move(reduced), reduced_count);
  }
};

// HAL_OP_CAST and HAL_OP_PERMUTE (a cast from the permuted view of in).
class CastPlan final : public PlannedOp {
 public:
  CastPlan(hal_kernel_t kernel, const hal_op_cast_desc_t& desc, MergedViews views)
      : kernel_(kernel), desc_(desc), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.out);
    if (count == 0) return HAL_SUCCESS;
    KernelArgs args;
    view_args(args, context.operands[0], desc_.in.dtype, views_.strides[0]);
    view_args(args, context.operands[1], desc_.out.dtype, views_.strides[1]);
    args.i64(views_.shape[1]).i64(views_.shape[2]).i64(views_.shape[3]).i64(count);
    return args.launch(kernel_, context.stream, linear_config(count));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_cast_desc_t desc_;
  MergedViews views_;
};

class Cast final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_cast_desc_t*>(request.desc);
    hal_tensor_desc_t in = desc.in;
    if (desc.header.kind == HAL_OP_PERMUTE) {
      for (uint32_t d = 0; d < desc.in.rank; ++d) {
        in.shape[d] = desc.in.shape[desc.perm[d]];
        in.strides[d] = desc.in.strides[desc.perm[d]];
      }
    }
    MergedViews views;
    if (!merge_views(desc.out, {&in, &desc.out}, &views)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kElementwiseSource, "cast_forward", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<CastPlan>(kernel, desc, std::move(views));
  }
};

// HAL_OP_DROPOUT: one work-item per block of 4 consecutive elements (one
// Philox evaluation).
class DropoutPlan final : public PlannedOp {
 public:
  DropoutPlan(hal_kernel_t kernel, const hal_op_dropout_desc_t& desc, MergedViews views)
      : kernel_(kernel), desc_(desc), views_(std::move(views)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t count = element_count(desc_.x);
    if (count == 0) return HAL_SUCCESS;
    const double p = desc_.probability;
    // keep <=> word / 2^32 >= p <=> word >= ceil(p * 2^32) (exact in double).
    const auto threshold = static_cast<uint32_t>(std::ceil(p * 4294967296.0));
    const auto scale = static_cast<float>(1.0 / (1.0 - p));
    KernelArgs args;
    view_args(args, context.operands[0], desc_.x.dtype, views_.strides[0]);
    view_args(args, context.operands[1], desc_.out.dtype, views_.strides[1]);
    // Without a mask the kernel never writes it; out's pointer stands in.
    const void* mask = desc_.has_mask ? context.operands[2] : context.operands[1];
    args.pointer(mask).i32(static_cast<int32_t>(desc_.has_mask));
    for (int64_t stride : views_.strides[2]) args.i64(stride);
    args.i64(views_.shape[1]).i64(views_.shape[2]).i64(views_.shape[3]).i64(count);
    args.u64(context.scalars[0].u64).u64(context.scalars[1].u64).u32(threshold).f32(scale);
    return args.launch(kernel_, context.stream, linear_config((count + 3) / 4));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_dropout_desc_t desc_;
  MergedViews views_;
};

class Dropout final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_dropout_desc_t*>(request.desc);
    const hal_tensor_desc_t mask = desc.has_mask ? desc.mask : desc.x;
    MergedViews views;
    if (!merge_views(desc.x, {&desc.x, &desc.out, &mask}, &views)) {
      *decline = kMergeDecline;
      return nullptr;
    }
    hal_kernel_t kernel = portable_kernel(request, kElementwiseSource, "dropout_forward", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<DropoutPlan>(kernel, desc, std::move(views));
  }
};

}  // namespace

void add_elementwise(ImplementationTable& table) {
  static const Unary unary;
  table[HAL_OP_UNARY].push_back(&unary);
  table[HAL_OP_UNARY_BACKWARD].push_back(&unary);
  static const Swiglu swiglu;
  table[HAL_OP_SWIGLU].push_back(&swiglu);
  table[HAL_OP_SWIGLU_BACKWARD].push_back(&swiglu);
  static const Reduce reduce;
  table[HAL_OP_REDUCE].push_back(&reduce);
  static const Cast cast;
  table[HAL_OP_CAST].push_back(&cast);
  table[HAL_OP_PERMUTE].push_back(&cast);
  static const Dropout dropout;
  table[HAL_OP_DROPOUT].push_back(&dropout);
}

}  // namespace hal::ops::portable
