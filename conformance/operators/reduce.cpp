// HAL_OP_REDUCE against the float64 reference: sum, mean and max over every
// axes combination of a rank-3 tensor, strided views, empty reductions, rank
// 0, a long reduction, determinism and each descriptor rule.
#include <cmath>
#include <limits>

#include "op_harness.hpp"
#include "reduce_cases.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kReduceDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_reduce_kind_t kKinds[] = {HAL_REDUCE_KIND_SUM, HAL_REDUCE_KIND_MEAN,
                                        HAL_REDUCE_KIND_MAX};

// Each output element folds every x element whose kept coordinates match it.
std::vector<double> reference(hal_reduce_kind_t kind, uint32_t axes, const std::vector<double>& x,
                              const hal_tensor_desc_t& x_layout) {
  const std::vector<int64_t> shape = shape_of(x_layout);
  const std::vector<int64_t> out_shape = reduced_shape(x_layout, axes);
  int64_t out_count = 1;
  for (int64_t s : out_shape) out_count *= s;
  std::vector<double> sums(static_cast<size_t>(out_count), 0.0);
  std::vector<double> maxima(sums.size(), -std::numeric_limits<double>::infinity());
  std::vector<int64_t> counts(sums.size(), 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t rest = static_cast<int64_t>(i);
    int64_t out_index = 0;
    int64_t scale = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      const int64_t coordinate = rest % shape[d];
      rest /= shape[d];
      if (((axes >> d) & 1u) == 0) out_index += coordinate * scale;
      scale *= out_shape[d];
    }
    const auto o = static_cast<size_t>(out_index);
    sums[o] += x[i];
    if (std::isnan(x[i]) || std::isnan(maxima[o])) {
      maxima[o] = std::numeric_limits<double>::quiet_NaN();
    } else {
      maxima[o] = std::fmax(maxima[o], x[i]);
    }
    ++counts[o];
  }
  std::vector<double> out(sums.size());
  for (size_t o = 0; o < out.size(); ++o) {
    if (kind == HAL_REDUCE_KIND_SUM) out[o] = sums[o];
    if (kind == HAL_REDUCE_KIND_MAX) out[o] = maxima[o];
    if (kind == HAL_REDUCE_KIND_MEAN) {
      out[o] = counts[o] > 0 ? sums[o] / static_cast<double>(counts[o])
                             : std::numeric_limits<double>::quiet_NaN();
    }
  }
  return out;
}

void run_reduce(TestContext& ctx, hal_reduce_kind_t kind, uint32_t axes,
                const hal_tensor_desc_t& x_layout, hal_dtype_t out_dtype,
                const std::vector<double>* given = nullptr) {
  const hal_tensor_desc_t out_layout = dense(out_dtype, reduced_shape(x_layout, axes));
  hal_op_reduce_desc_t desc = reduce_desc(kind, axes, x_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto x = given != nullptr
                     ? *given
                     : random_values(ctx.random(), numel(x_layout), x_layout.dtype, -2, 2);
  DeviceTensor dx(ctx.device(), x_layout, x), dout(ctx.device(), out_layout);
  execute(ctx, plan, {dx.data(), dout.data()});
  const std::string what = "reduce " + std::to_string(kind) + " axes " + std::to_string(axes) +
                           " " + label(x_layout) + " -> " + label(out_layout);
  // Sums accumulate in f32 (compensated); max only rounds to out's dtype.
  const Tolerance tolerance =
      kind == HAL_REDUCE_KIND_MAX
          ? tolerance_for(out_dtype)
          : tolerance_for(out_dtype, static_cast<double>(reduced_count(x_layout, axes)));
  expect_close(dout.download(), reference(kind, axes, x, x_layout), tolerance, what);
  dout.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.reduce.every_axes", "sum/mean/max over every axes mask of rank 3", {}) {
  for (hal_dtype_t dtype : kReduceDtypes) {
    for (hal_reduce_kind_t kind : kKinds) {
      for (uint32_t axes = 0; axes < 8; ++axes) {
        run_reduce(ctx, kind, axes, dense(dtype, {3, 5, 7}), dtype);
      }
    }
  }
}

HALCONFORM_TEST("operators.reduce.strided", "transposed and padded x, another out dtype", {}) {
  for (hal_reduce_kind_t kind : kKinds) {
    for (uint32_t axes = 0; axes < 8; ++axes) {
      run_reduce(ctx, kind, axes, transposed(dense(HAL_DTYPE_F16, {6, 4, 9}), 0, 2), HAL_DTYPE_F32);
      run_reduce(ctx, kind, axes, padded(HAL_DTYPE_F32, {3, 4, 5}, 3), HAL_DTYPE_BF16);
    }
  }
  // Rank 8, alternate axes reduced: 4 kept and 4 reduced dimensions.
  run_reduce(ctx, HAL_REDUCE_KIND_MEAN, 0x55, dense(HAL_DTYPE_F32, {2, 3, 2, 3, 2, 3, 2, 3}),
             HAL_DTYPE_F32);
  // Rank 5 with non-adjacent reduced axes.
  run_reduce(ctx, HAL_REDUCE_KIND_SUM, 0x15, dense(HAL_DTYPE_F32, {2, 3, 4, 3, 2}), HAL_DTYPE_F32);
}

HALCONFORM_TEST("operators.reduce.empty_and_scalar",
                "empty reductions give sum 0, mean NaN, max -inf; rank 0; empty out", {}) {
  for (hal_reduce_kind_t kind : kKinds) {
    run_reduce(ctx, kind, 0x1, dense(HAL_DTYPE_F32, {0, 3}), HAL_DTYPE_F32);
    run_reduce(ctx, kind, 0x3, dense(HAL_DTYPE_F16, {4, 0}), HAL_DTYPE_F16);
    run_reduce(ctx, kind, 0x1, dense(HAL_DTYPE_F32, {4, 0}), HAL_DTYPE_F32);  // out is empty
    run_reduce(ctx, kind, 0x0, dense(HAL_DTYPE_F32, {}), HAL_DTYPE_F32);
  }
}

HALCONFORM_TEST("operators.reduce.long", "long reductions stay accurate; NaN wins max", {}) {
  auto x = random_values(ctx.random(), 9001, HAL_DTYPE_F32, 0, 1);
  for (hal_reduce_kind_t kind : kKinds) {
    run_reduce(ctx, kind, 0x1, dense(HAL_DTYPE_F32, {9001}), HAL_DTYPE_F32, &x);
    run_reduce(ctx, kind, 0x2, transposed(dense(HAL_DTYPE_F16, {5003, 3}), 0, 1), HAL_DTYPE_F32);
    run_reduce(ctx, kind, 0x3, dense(HAL_DTYPE_BF16, {7, 1001}), HAL_DTYPE_BF16);
  }
  x[1234] = std::numeric_limits<double>::quiet_NaN();
  run_reduce(ctx, HAL_REDUCE_KIND_MAX, 0x1, dense(HAL_DTYPE_F32, {9001}), HAL_DTYPE_F32, &x);
  x[1234] = 0.5;
  x[8999] = std::numeric_limits<double>::quiet_NaN();
  run_reduce(ctx, HAL_REDUCE_KIND_MAX, 0x1, dense(HAL_DTYPE_F32, {9001}), HAL_DTYPE_F32, &x);
  run_reduce(ctx, HAL_REDUCE_KIND_SUM, 0x1, dense(HAL_DTYPE_F32, {9001}), HAL_DTYPE_F32, &x);
}

HALCONFORM_TEST("operators.reduce.deterministic", "two runs give identical bits", {}) {
  const hal_tensor_desc_t x = dense(HAL_DTYPE_F32, {3, 6000});
  const hal_tensor_desc_t out = dense(HAL_DTYPE_F32, {3, 1});
  hal_op_reduce_desc_t desc = reduce_desc(HAL_REDUCE_KIND_SUM, 0x2, x, out);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
  DeviceTensor dx(ctx.device(), x, random_values(ctx.random(), numel(x), HAL_DTYPE_F32)),
      d1(ctx.device(), out), d2(ctx.device(), out);
  execute(ctx, plan, {dx.data(), d1.data()});
  execute(ctx, plan, {dx.data(), d2.data()});
  expect_identical(d1.download(), d2.download(), "reduce deterministic");
}

HALCONFORM_TEST("operators.reduce.errors", "each descriptor rule is refused", {}) {
  const auto refused = [&](hal_op_reduce_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  const hal_tensor_desc_t x = dense(HAL_DTYPE_F32, {3, 4});
  const hal_tensor_desc_t out = dense(HAL_DTYPE_F32, {3, 1});
  refused(reduce_desc(HAL_REDUCE_KIND_COUNT, 0x2, x, out), "unknown kind");
  refused(reduce_desc(HAL_REDUCE_KIND_SUM, 0x4, x, dense(HAL_DTYPE_F32, {3, 4})),
          "axis past the rank");
  refused(reduce_desc(HAL_REDUCE_KIND_SUM, 0x2, x, dense(HAL_DTYPE_F32, {3})),
          "out dropping the reduced axis");
  refused(reduce_desc(HAL_REDUCE_KIND_SUM, 0x2, x, dense(HAL_DTYPE_F32, {1, 1})),
          "out reducing an axis not in the mask");
  refused(reduce_desc(HAL_REDUCE_KIND_SUM, 0x2, dense(HAL_DTYPE_I32, {3, 4}), out), "x dtype");
  refused(reduce_desc(HAL_REDUCE_KIND_SUM, 0x2, x, dense(HAL_DTYPE_I64, {3, 1})), "out dtype");
  hal_tensor_desc_t overlapping = out;
  overlapping.strides[0] = 0;
  refused(reduce_desc(HAL_REDUCE_KIND_MAX, 0x2, x, overlapping), "out reaching one element twice");
}
