// HAL_OP_SWIGLU and HAL_OP_SWIGLU_BACKWARD against the float64 reference;
// the backward pass against central differences of the float64 forward.
#include <cmath>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kSwigluDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};

hal_op_swiglu_desc_t swiglu_desc(hal_op_kind_t kind, const hal_tensor_desc_t& x,
                                 const hal_tensor_desc_t& out,
                                 const hal_tensor_desc_t& grad_x = {}) {
  hal_op_swiglu_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.x = x;
  desc.out = out;
  desc.grad_x = grad_x;
  return desc;
}

double silu_times(double gate, double up) {
  return gate / (1 + std::exp(-gate)) * up;
}

// out[r, j] = silu(x[r, j]) * x[r, n + j] over rows of the last dimension.
std::vector<double> forward(const std::vector<double>& x, int64_t n) {
  if (n == 0) return {};
  const size_t rows = x.size() / static_cast<size_t>(2 * n);
  std::vector<double> out(rows * static_cast<size_t>(n));
  for (size_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      out[r * n + j] = silu_times(x[r * 2 * n + j], x[r * 2 * n + n + j]);
    }
  }
  return out;
}

// d(sum grad_out * out)/dx by central differences of the float64 forward:
// each x element touches exactly one output.
std::vector<double> backward(const std::vector<double>& x, const std::vector<double>& grad_out,
                             int64_t n) {
  std::vector<double> grad(x.size());
  if (n == 0) return grad;
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t r = i / static_cast<size_t>(2 * n);
    const auto j = static_cast<int64_t>(i % static_cast<size_t>(2 * n));
    const int64_t k = j % n;
    double gate = x[r * 2 * n + k];
    double up = x[r * 2 * n + n + k];
    const double h = 1e-6 * std::fmax(1.0, std::fabs(x[i]));
    double plus, minus;
    if (j < n) {
      plus = silu_times(gate + h, up);
      minus = silu_times(gate - h, up);
    } else {
      plus = silu_times(gate, up + h);
      minus = silu_times(gate, up - h);
    }
    grad[i] = grad_out[r * n + k] * (plus - minus) / (2 * h);
  }
  return grad;
}

void run_forward(TestContext& ctx, const hal_tensor_desc_t& x_layout,
                 const hal_tensor_desc_t& out_layout) {
  hal_op_swiglu_desc_t desc = swiglu_desc(HAL_OP_SWIGLU, x_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto x = random_values(ctx.random(), numel(x_layout), x_layout.dtype, -4, 4);
  DeviceTensor dx(ctx.device(), x_layout, x), dout(ctx.device(), out_layout);
  execute(ctx, plan, {dx.data(), dout.data()});
  const std::string what = "swiglu " + label(x_layout) + " -> " + label(out_layout);
  expect_close(dout.download(), forward(x, out_layout.shape[out_layout.rank - 1]),
               tolerance_for(out_layout.dtype, 2), what);
  dout.check_untouched(what);
}

void run_backward(TestContext& ctx, const hal_tensor_desc_t& x_layout,
                  const hal_tensor_desc_t& gy_layout, const hal_tensor_desc_t& gx_layout) {
  hal_op_swiglu_desc_t desc = swiglu_desc(HAL_OP_SWIGLU_BACKWARD, x_layout, gy_layout, gx_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto x = random_values(ctx.random(), numel(x_layout), x_layout.dtype, -4, 4);
  const auto gy = random_values(ctx.random(), numel(gy_layout), gy_layout.dtype);
  DeviceTensor dx(ctx.device(), x_layout, x), dgy(ctx.device(), gy_layout, gy),
      dgx(ctx.device(), gx_layout);
  execute(ctx, plan, {dx.data(), dgy.data(), dgx.data()});
  const std::string what = "swiglu backward " + label(x_layout) + " -> " + label(gx_layout);
  // A few f32 operations per gradient, then one rounding to grad_x's dtype;
  // the central difference itself is good to ~1e-9.
  expect_close(dgx.download(), backward(x, gy, gy_layout.shape[gy_layout.rank - 1]),
               tolerance_for(gx_layout.dtype, 8), what);
  dgx.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.swiglu.forward", "every dtype, odd sizes, strided views, rank 1", {}) {
  for (hal_dtype_t dtype : kSwigluDtypes) {
    run_forward(ctx, dense(dtype, {5, 2 * 67}), dense(dtype, {5, 67}));
    run_forward(ctx, padded(dtype, {3, 4, 2 * 9}, 5), padded(HAL_DTYPE_F32, {3, 4, 9}, 2));
    run_forward(ctx, dense(dtype, {2 * 33}), dense(dtype, {33}));
  }
  // x's rows stepped through a transposed view.
  run_forward(ctx, transposed(dense(HAL_DTYPE_F32, {2 * 7, 6}), 0, 1),
              dense(HAL_DTYPE_F32, {6, 7}));
}

HALCONFORM_TEST("operators.swiglu.empty", "empty tensors", {}) {
  run_forward(ctx, dense(HAL_DTYPE_F32, {0, 8}), dense(HAL_DTYPE_F32, {0, 4}));
  run_forward(ctx, dense(HAL_DTYPE_F32, {3, 0}), dense(HAL_DTYPE_F32, {3, 0}));
  run_backward(ctx, dense(HAL_DTYPE_F32, {0, 8}), dense(HAL_DTYPE_F32, {0, 4}),
               dense(HAL_DTYPE_F32, {0, 8}));
}

HALCONFORM_TEST("operators.swiglu.backward", "grad_x vs central differences, every dtype", {}) {
  for (hal_dtype_t dtype : kSwigluDtypes) {
    run_backward(ctx, dense(dtype, {4, 2 * 45}), dense(dtype, {4, 45}), dense(dtype, {4, 2 * 45}));
    run_backward(ctx, padded(dtype, {3, 2 * 5}, 3), transposed(dense(dtype, {5, 3}), 0, 1),
                 padded(HAL_DTYPE_F32, {3, 2 * 5}, 1));
  }
}

HALCONFORM_TEST("operators.swiglu.deterministic", "two runs give identical bits", {}) {
  const hal_tensor_desc_t x = dense(HAL_DTYPE_F16, {7, 2 * 50});
  const hal_tensor_desc_t out = dense(HAL_DTYPE_F16, {7, 50});
  hal_op_swiglu_desc_t desc = swiglu_desc(HAL_OP_SWIGLU_BACKWARD, x, out, x);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
  DeviceTensor dx(ctx.device(), x, random_values(ctx.random(), numel(x), HAL_DTYPE_F16)),
      dgy(ctx.device(), out, random_values(ctx.random(), numel(out), HAL_DTYPE_F16)),
      d1(ctx.device(), x), d2(ctx.device(), x);
  execute(ctx, plan, {dx.data(), dgy.data(), d1.data()});
  execute(ctx, plan, {dx.data(), dgy.data(), d2.data()});
  expect_identical(d1.download(), d2.download(), "swiglu backward deterministic");
}

HALCONFORM_TEST("operators.swiglu.errors", "each descriptor rule is refused", {}) {
  const auto refused = [&](hal_op_swiglu_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  const hal_tensor_desc_t x = dense(HAL_DTYPE_F32, {3, 8});
  const hal_tensor_desc_t out = dense(HAL_DTYPE_F32, {3, 4});
  refused(swiglu_desc(HAL_OP_SWIGLU, dense(HAL_DTYPE_F32, {3, 7}), out), "odd last dimension");
  refused(swiglu_desc(HAL_OP_SWIGLU, dense(HAL_DTYPE_F32, {}), dense(HAL_DTYPE_F32, {})), "rank 0");
  refused(swiglu_desc(HAL_OP_SWIGLU, x, dense(HAL_DTYPE_F32, {3, 8})), "out not halved");
  refused(swiglu_desc(HAL_OP_SWIGLU, x, dense(HAL_DTYPE_F32, {4, 4})), "out rows differ");
  refused(swiglu_desc(HAL_OP_SWIGLU, dense(HAL_DTYPE_I32, {3, 8}), out), "x dtype");
  refused(swiglu_desc(HAL_OP_SWIGLU, x, dense(HAL_DTYPE_F64, {3, 4})), "out dtype");
  hal_tensor_desc_t overlapping = out;
  overlapping.strides[0] = 0;
  refused(swiglu_desc(HAL_OP_SWIGLU, x, overlapping), "out reaching an element twice");
  refused(swiglu_desc(HAL_OP_SWIGLU_BACKWARD, x, out, out), "grad_x not x's shape");
  refused(swiglu_desc(HAL_OP_SWIGLU_BACKWARD, x, out, dense(HAL_DTYPE_U8, {3, 8})), "grad_x dtype");
  refused(swiglu_desc(HAL_OP_SWIGLU_BACKWARD, x, dense(HAL_DTYPE_F32, {3, 5}), x),
          "grad_out shape");
}
