// Portable elementwise ops: kernels/elementwise.hal.
#include "launch.hpp"
#include "registry.hpp"

#include "hal_ops/tensor.hpp"

namespace hal::ops::portable {

namespace {

constexpr const char* kSource = "elementwise";

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
      args.pointer(context.operands[v]).i32(tensors[v]->dtype);
      for (int64_t stride : views_.strides[v]) args.i64(stride);
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
      *decline = "the views need more than 4 dimensions after merging";
      return nullptr;
    }
    hal_kernel_t kernel =
        portable_kernel(request, kSource, backward ? "unary_backward" : "unary_forward", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<UnaryPlan>(kernel, desc, backward, std::move(views));
  }
};

}  // namespace

void add_elementwise(ImplementationTable& table) {
  static const Unary unary;
  table[HAL_OP_UNARY].push_back(&unary);
  table[HAL_OP_UNARY_BACKWARD].push_back(&unary);
}

}  // namespace hal::ops::portable
