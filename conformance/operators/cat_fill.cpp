// HAL_OP_CAT and HAL_OP_FILL against host references: cat along each axis of
// inputs of mixed dtypes and strides (empty ones included), many inputs, into
// a strided out; fill with a constant and arange (step) into every dtype,
// strided views, the rounding and saturation of HAL_OP_CAST; each
// descriptor rule, and CAT's input count and NULL inputs at planning.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

hal_op_cat_desc_t cat_desc(uint32_t axis, const std::vector<hal_tensor_desc_t>& inputs,
                           const hal_tensor_desc_t& out) {
  hal_op_cat_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_CAT;
  desc.axis = axis;
  desc.input_count = static_cast<uint32_t>(inputs.size());
  desc.inputs = inputs.data();
  desc.out = out;
  return desc;
}

hal_op_fill_desc_t fill_desc(const hal_tensor_desc_t& out) {
  hal_op_fill_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_FILL;
  desc.out = out;
  return desc;
}

void run_cat(TestContext& ctx, uint32_t axis, const std::vector<hal_tensor_desc_t>& inputs,
             const hal_tensor_desc_t& out_layout) {
  hal_op_cat_desc_t desc = cat_desc(axis, inputs, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  std::vector<std::vector<double>> values;
  std::vector<std::unique_ptr<DeviceTensor>> tensors;
  std::vector<void*> operands;
  for (const hal_tensor_desc_t& input : inputs) {
    values.push_back(random_values(ctx.random(), numel(input), input.dtype, -50, 50));
    tensors.push_back(std::make_unique<DeviceTensor>(ctx.device(), input, values.back()));
    operands.push_back(tensors.back()->data());
  }
  DeviceTensor dout(ctx.device(), out_layout);
  operands.push_back(dout.data());
  execute(ctx, plan, operands);
  std::vector<double> expected(static_cast<size_t>(numel(out_layout)));
  for (size_t i = 0; i < expected.size(); ++i) {
    std::vector<int64_t> c = coordinates(out_layout, static_cast<int64_t>(i));
    size_t t = 0;
    while (c[axis] >= inputs[t].shape[axis]) c[axis] -= inputs[t++].shape[axis];
    expected[i] =
        round_to(out_layout.dtype, values[t][static_cast<size_t>(row_major(inputs[t], c))]);
  }
  const std::string what = "cat of " + std::to_string(inputs.size()) + " along axis " +
                           std::to_string(axis) + " into " + label(out_layout);
  expect_close(dout.download(), expected, {0, 0}, what);
  dout.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.cat.axes", "cat along each axis, mixed dtypes and strides, empty inputs",
                {}) {
  for (uint32_t axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> a = {4, 5, 6}, b = a, c = a, out = a;
    a[axis] = 2;
    b[axis] = 0;
    c[axis] = 3;
    out[axis] = 5;
    hal_tensor_desc_t strided = dense(HAL_DTYPE_F16, {c[2], c[1], c[0]});
    strided = transposed(strided, 0, 2);  // c's shape, reversed strides
    run_cat(ctx, axis, {dense(HAL_DTYPE_F32, a), dense(HAL_DTYPE_BF16, b), strided},
            dense(HAL_DTYPE_F32, out));
  }
  // Into a padded out of another dtype; rank 1.
  run_cat(ctx, 1, {dense(HAL_DTYPE_F32, {3, 4}), padded(HAL_DTYPE_F32, {3, 6}, 2)},
          padded(HAL_DTYPE_BF16, {3, 10}, 5));
  run_cat(ctx, 0, {dense(HAL_DTYPE_I32, {7}), dense(HAL_DTYPE_F16, {1}), dense(HAL_DTYPE_I64, {3})},
          dense(HAL_DTYPE_F64, {11}));
  // Dense inputs of out's dtype (the layout a plain copy per block serves), an empty one among
  // them, along a middle and the last axis.
  run_cat(ctx, 1,
          {dense(HAL_DTYPE_BF16, {3, 2, 5}), dense(HAL_DTYPE_BF16, {3, 0, 5}),
           dense(HAL_DTYPE_BF16, {3, 4, 5})},
          dense(HAL_DTYPE_BF16, {3, 6, 5}));
  run_cat(ctx, 2, {dense(HAL_DTYPE_I64, {2, 3, 1}), dense(HAL_DTYPE_I64, {2, 3, 4})},
          dense(HAL_DTYPE_I64, {2, 3, 5}));
}

HALCONFORM_TEST("operators.cat.many", "300 inputs of one row each (torch.stack's shape)", {}) {
  std::vector<hal_tensor_desc_t> inputs(300, dense(HAL_DTYPE_F32, {1, 33}));
  run_cat(ctx, 0, inputs, dense(HAL_DTYPE_F32, {300, 33}));
}

HALCONFORM_TEST("operators.cat.errors", "each descriptor rule is refused", {}) {
  const hal_tensor_desc_t f32 = dense(HAL_DTYPE_F32, {4, 5});
  const auto refused = [&](hal_op_cat_desc_t desc, hal_result_t expected, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan), expected);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  const std::vector<hal_tensor_desc_t> two = {f32, f32};
  refused(cat_desc(0, two, dense(HAL_DTYPE_F32, {7, 5})), HAL_ERROR_INVALID_ARGUMENT,
          "extents along the axis not adding up");
  refused(cat_desc(2, two, dense(HAL_DTYPE_F32, {8, 5})), HAL_ERROR_INVALID_ARGUMENT,
          "axis past the rank");
  refused(cat_desc(0, {f32, dense(HAL_DTYPE_F32, {4, 6})}, dense(HAL_DTYPE_F32, {8, 5})),
          HAL_ERROR_INVALID_ARGUMENT, "another extent off the axis");
  refused(cat_desc(0, {f32, dense(HAL_DTYPE_F32, {4, 5, 1})}, dense(HAL_DTYPE_F32, {8, 5})),
          HAL_ERROR_INVALID_ARGUMENT, "another rank");
  refused(
      cat_desc(0, {dense(HAL_DTYPE_F32, {}), dense(HAL_DTYPE_F32, {})}, dense(HAL_DTYPE_F32, {})),
      HAL_ERROR_INVALID_ARGUMENT, "rank 0");
  hal_tensor_desc_t overlapping = dense(HAL_DTYPE_F32, {8, 5});
  overlapping.strides[1] = 0;
  refused(cat_desc(0, two, overlapping), HAL_ERROR_INVALID_ARGUMENT, "out with stride 0");
  hal_op_cat_desc_t none = cat_desc(0, two, dense(HAL_DTYPE_F32, {8, 5}));
  none.input_count = 0;
  refused(none, HAL_ERROR_INVALID_ARGUMENT, "no inputs");
  none.input_count = HAL_CAT_MAX_INPUTS + 1;
  refused(none, HAL_ERROR_INVALID_ARGUMENT, "too many inputs");
  none.input_count = 2;
  none.inputs = nullptr;
  refused(none, HAL_ERROR_NULL_POINTER, "NULL inputs");
}

namespace {

void run_fill(TestContext& ctx, const hal_tensor_desc_t& layout, hal_op_scalar_t start,
              hal_op_scalar_t step, const std::vector<double>& expected, const std::string& what) {
  hal_op_fill_desc_t desc = fill_desc(layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dout(ctx.device(), layout);
  execute(ctx, plan, {dout.data()}, {start, step});
  expect_close(dout.download(), expected, {0, 0}, what);
  dout.check_untouched(what);
}

hal_op_scalar_t scalar_f(double v) {
  hal_op_scalar_t s{};
  s.f64 = v;
  return s;
}
hal_op_scalar_t scalar_i(int64_t v) {
  hal_op_scalar_t s{};
  s.i64 = v;
  return s;
}

}  // namespace

HALCONFORM_TEST("operators.fill.constant_and_arange",
                "a constant and start + i*step into every dtype, strided, rounding once and "
                "saturating",
                {}) {
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16, HAL_DTYPE_F64}) {
    const hal_tensor_desc_t layout = padded(dtype, {4, 9}, 3);
    // 0.1 is rounded once from f64 to the dtype (f64 to f16/bf16 not through f32's rounding).
    run_fill(ctx, layout, scalar_f(0.1), scalar_f(0), std::vector<double>(36, round_to(dtype, 0.1)),
             std::string("fill 0.1 into ") + label(layout));
    std::vector<double> arange(36);
    // start + i * step with one rounding in f64 (a fused multiply-add), then to the dtype.
    for (size_t i = 0; i < 36; ++i) {
      arange[i] = round_to(dtype, std::fma(static_cast<double>(i), 0.37, -3.0));
    }
    run_fill(ctx, layout, scalar_f(-3.0), scalar_f(0.37), arange,
             std::string("arange into ") + label(layout));
  }
  // f64 value whose f32 rounding is a tie for f16: rounded once, it goes up.
  const double tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  run_fill(ctx, dense(HAL_DTYPE_F16, {3}), scalar_f(tie), scalar_f(0),
           {1.0 + std::ldexp(1.0, -10), 1.0 + std::ldexp(1.0, -10), 1.0 + std::ldexp(1.0, -10)},
           "fill rounds once from f64 to f16");
  run_fill(ctx, dense(HAL_DTYPE_F32, {3}), scalar_f(std::numeric_limits<double>::infinity()),
           scalar_f(0), std::vector<double>(3, std::numeric_limits<double>::infinity()),
           "fill inf (step 0 multiplies nothing)");
  struct IntCase {
    hal_dtype_t dtype;
    int64_t start, step;
  };
  for (const IntCase& c : {IntCase{HAL_DTYPE_I32, -5, 3}, IntCase{HAL_DTYPE_I64, 1LL << 40, -7},
                           IntCase{HAL_DTYPE_I8, 100, 10}, IntCase{HAL_DTYPE_U8, 3, -1},
                           IntCase{HAL_DTYPE_BOOL, -1, 1}}) {
    const hal_tensor_desc_t layout = transposed(dense(c.dtype, {5, 4}), 0, 1);  // [4, 5] strided
    std::vector<double> expected(20);
    for (size_t i = 0; i < 20; ++i) {
      const double v = static_cast<double>(c.start + static_cast<int64_t>(i) * c.step);
      switch (c.dtype) {
        case HAL_DTYPE_I8:
          expected[i] = std::fmin(127, std::fmax(-128, v));
          break;
        case HAL_DTYPE_U8:
          expected[i] = std::fmin(255, std::fmax(0, v));
          break;
        case HAL_DTYPE_BOOL:
          expected[i] = v != 0;
          break;
        default:
          expected[i] = v;
      }
    }
    run_fill(ctx, layout, scalar_i(c.start), scalar_i(c.step), expected,
             std::string("arange into ") + label(layout));
  }
  // Rank 0 and empty.
  run_fill(ctx, dense(HAL_DTYPE_BF16, {}), scalar_f(2.5), scalar_f(1), {2.5}, "fill of rank 0");
  run_fill(ctx, dense(HAL_DTYPE_F32, {0, 4}), scalar_f(1), scalar_f(1), {}, "fill of nothing");
}

HALCONFORM_TEST("operators.fill.errors", "out that overlaps itself; scalar count at execution",
                {}) {
  hal_tensor_desc_t overlapping = dense(HAL_DTYPE_F32, {4, 5});
  overlapping.strides[0] = 0;
  hal_op_fill_desc_t desc = fill_desc(overlapping);
  hal_op_plan_t refused = nullptr;
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &refused),
                   HAL_ERROR_INVALID_ARGUMENT);
  desc = fill_desc(dense(HAL_DTYPE_F32, {4}));
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dout(ctx.device(), desc.out);
  HC_EXPECT_RESULT(try_execute(ctx, plan, {dout.data()}, {scalar_f(1)}),
                   HAL_ERROR_INVALID_ARGUMENT);
}
