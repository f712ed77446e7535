// HAL_OP_UNARY and HAL_OP_UNARY_BACKWARD against the float64 reference.
#include "op_harness.hpp"
#include "reference.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kUnaryDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_activation_t kActivations[] = {HAL_ACTIVATION_NONE, HAL_ACTIVATION_RELU,
                                             HAL_ACTIVATION_GELU_TANH, HAL_ACTIVATION_GELU_ERF,
                                             HAL_ACTIVATION_SILU};

hal_op_unary_desc_t unary_desc(hal_op_kind_t kind, hal_activation_t act, float alpha,
                               const hal_tensor_desc_t& x, const hal_tensor_desc_t& out) {
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.activation = act;
  desc.alpha = alpha;
  desc.x = x;
  desc.out = out;
  desc.grad_x = out;
  return desc;
}

void run_forward(TestContext& ctx, hal_activation_t act, const hal_tensor_desc_t& x_layout,
                 const hal_tensor_desc_t& out_layout) {
  const float alpha = 1.25f;
  hal_op_unary_desc_t desc = unary_desc(HAL_OP_UNARY, act, alpha, x_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto x = random_values(ctx.random(), numel(x_layout), x_layout.dtype, -3, 3);
  DeviceTensor dx(ctx.device(), x_layout, x);
  DeviceTensor dout(ctx.device(), out_layout);
  execute(ctx, plan, {dx.data(), dout.data()});
  std::vector<double> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    expected[i] = reference::activation(act, static_cast<double>(alpha) * x[i]);
  }
  const std::string what =
      "unary " + std::to_string(act) + " " + label(x_layout) + " -> " + label(out_layout);
  expect_close(dout.download(), expected, tolerance_for(out_layout.dtype), what);
  dout.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.unary.forward", "every activation x dtype, odd sizes, strided views",
                {}) {
  for (hal_dtype_t dtype : kUnaryDtypes) {
    for (hal_activation_t act : kActivations) {
      run_forward(ctx, act, dense(dtype, {3, 333}), dense(dtype, {3, 333}));
      run_forward(ctx, act, padded(dtype, {5, 7, 9}, 3), dense(HAL_DTYPE_F32, {5, 7, 9}));
      run_forward(ctx, act, transposed(dense(dtype, {17, 6}), 0, 1), dense(dtype, {6, 17}));
    }
  }
}

HALCONFORM_TEST("operators.unary.empty_and_scalar", "an empty tensor and a rank-0 tensor", {}) {
  run_forward(ctx, HAL_ACTIVATION_GELU_TANH, dense(HAL_DTYPE_F32, {0, 5}),
              dense(HAL_DTYPE_F32, {0, 5}));
  run_forward(ctx, HAL_ACTIVATION_SILU, dense(HAL_DTYPE_F32, {}), dense(HAL_DTYPE_F32, {}));
}

HALCONFORM_TEST("operators.unary.in_place", "out may be x exactly", {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {1000});
  hal_op_unary_desc_t desc = unary_desc(HAL_OP_UNARY, HAL_ACTIVATION_RELU, 1.0f, layout, layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto x = random_values(ctx.random(), 1000, HAL_DTYPE_F32);
  DeviceTensor dx(ctx.device(), layout, x);
  execute(ctx, plan, {dx.data(), dx.data()});
  std::vector<double> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) expected[i] = x[i] > 0 ? x[i] : 0;
  expect_close(dx.download(), expected, tolerance_for(HAL_DTYPE_F32), "relu in place");
}

HALCONFORM_TEST("operators.unary.backward", "grad_x = grad_out * alpha * act'(alpha x)", {}) {
  for (hal_dtype_t dtype : kUnaryDtypes) {
    for (hal_activation_t act : kActivations) {
      const hal_tensor_desc_t layout = dense(dtype, {4, 129});
      const float alpha = 0.75f;
      hal_op_unary_desc_t desc = unary_desc(HAL_OP_UNARY_BACKWARD, act, alpha, layout, layout);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      const auto x = random_values(ctx.random(), numel(layout), dtype, -3, 3);
      const auto gy = random_values(ctx.random(), numel(layout), dtype);
      DeviceTensor dx(ctx.device(), layout, x), dgy(ctx.device(), layout, gy),
          dgx(ctx.device(), layout);
      execute(ctx, plan, {dx.data(), dgy.data(), dgx.data()});
      std::vector<double> expected(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        expected[i] = gy[i] * alpha * reference::activation_derivative(act, alpha * x[i]);
      }
      // The derivative of GELU/SiLU in f32 differs from central differences
      // by ~1e-7; relu's kink at exactly 0 is not sampled (continuous data).
      expect_close(dgx.download(), expected, tolerance_for(dtype, 4),
                   "unary backward " + std::to_string(act) + " " + label(layout));
    }
  }
}
