// HAL_OP_SCAN (cumsum, cumprod) against float64 and exact integer
// references: every axis of a rank-3 tensor, f32/f16/bf16, integers with
// wrap-around and bool into i64, strided views, in place, long lines
// (compensated sums), inf and NaN, determinism and each descriptor rule.
#include <cmath>
#include <cstdint>
#include <limits>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

hal_op_scan_desc_t scan_desc(hal_scan_kind_t kind, uint32_t axis, const hal_tensor_desc_t& x,
                             const hal_tensor_desc_t& out) {
  hal_op_scan_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_SCAN;
  desc.scan = kind;
  desc.axis = axis;
  desc.x = x;
  desc.out = out;
  return desc;
}

// Prefix by prefix in row-major order: the element before i along the axis
// (i - stride) is always done before i.
std::vector<double> reference(hal_scan_kind_t kind, uint32_t axis, const std::vector<double>& x,
                              const std::vector<int64_t>& shape) {
  std::vector<double> out(x.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > axis + 1;) stride *= shape[d];
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t coordinate = (static_cast<int64_t>(i) / stride) % shape[axis];
    if (coordinate == 0) {
      out[i] = x[i];
    } else {
      const double previous = out[i - static_cast<size_t>(stride)];
      out[i] = kind == HAL_SCAN_SUM ? previous + x[i] : previous * x[i];
    }
  }
  return out;
}

void run_float(TestContext& ctx, hal_scan_kind_t kind, uint32_t axis,
               const hal_tensor_desc_t& x_layout, const hal_tensor_desc_t& out_layout,
               bool in_place = false) {
  hal_op_scan_desc_t desc = scan_desc(kind, axis, x_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  // Products stay near 1 (factors in [0.8, 1.25]) so every prefix keeps its precision.
  const auto x = kind == HAL_SCAN_SUM
                     ? random_values(ctx.random(), numel(x_layout), x_layout.dtype, -1, 1)
                     : random_values(ctx.random(), numel(x_layout), x_layout.dtype, 0.8, 1.25);
  DeviceTensor dx(ctx.device(), x_layout, x), dout(ctx.device(), out_layout);
  execute(ctx, plan, {dx.data(), in_place ? dx.data() : dout.data()});
  const auto expected = reference(kind, axis, x, shape_of(x_layout));
  const int64_t length = x_layout.shape[axis];
  const std::string what = std::string(kind == HAL_SCAN_SUM ? "cumsum" : "cumprod") + " axis " +
                           std::to_string(axis) + " " + label(x_layout) + " -> " +
                           label(out_layout);
  // Each prefix: f32 arithmetic over up to |length| terms, rounded once to out's dtype.
  expect_close(in_place ? dx.download() : dout.download(), expected,
               tolerance_for(out_layout.dtype, static_cast<double>(length)), what);
  if (!in_place) dout.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.scan.float", "cumsum and cumprod along each axis x f32/f16/bf16", {}) {
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    for (hal_scan_kind_t kind : {HAL_SCAN_SUM, HAL_SCAN_PROD}) {
      for (uint32_t axis = 0; axis < 3; ++axis) {
        run_float(ctx, kind, axis, dense(dtype, {5, 17, 33}), dense(dtype, {5, 17, 33}));
      }
    }
  }
  // Mixed dtypes, strided views, in place, rank 1.
  run_float(ctx, HAL_SCAN_SUM, 1, transposed(dense(HAL_DTYPE_F16, {31, 7}), 0, 1),
            padded(HAL_DTYPE_F32, {7, 31}, 2));
  run_float(ctx, HAL_SCAN_PROD, 0, dense(HAL_DTYPE_F32, {1000}), dense(HAL_DTYPE_BF16, {1000}));
  run_float(ctx, HAL_SCAN_SUM, 2, dense(HAL_DTYPE_F32, {3, 4, 50}),
            dense(HAL_DTYPE_F32, {3, 4, 50}), true);
}

HALCONFORM_TEST("operators.scan.long_and_special",
                "a 100000-element cumsum stays within f32's compensated error; inf and NaN", {}) {
  run_float(ctx, HAL_SCAN_SUM, 0, dense(HAL_DTYPE_F32, {100000}), dense(HAL_DTYPE_F32, {100000}));
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> x = {1, inf, 1, -inf, 2, 3, nan, 4};
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {8});
  hal_op_scan_desc_t desc = scan_desc(HAL_SCAN_SUM, 0, layout, layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), layout, x), dout(ctx.device(), layout);
  execute(ctx, plan, {dx.data(), dout.data()});
  expect_close(dout.download(), {1, inf, inf, nan, nan, nan, nan, nan}, {0, 0},
               "cumsum through inf, -inf and NaN");
}

HALCONFORM_TEST("operators.scan.integers",
                "cumsum/cumprod of i8/u8/i32/i64/bool into integer outs, wrapping; exact", {}) {
  struct Case {
    hal_dtype_t x, out;
  };
  for (const Case& c : {Case{HAL_DTYPE_I32, HAL_DTYPE_I64}, Case{HAL_DTYPE_I8, HAL_DTYPE_I8},
                        Case{HAL_DTYPE_U8, HAL_DTYPE_I32}, Case{HAL_DTYPE_BOOL, HAL_DTYPE_I64},
                        Case{HAL_DTYPE_I64, HAL_DTYPE_I64}}) {
    for (hal_scan_kind_t kind : {HAL_SCAN_SUM, HAL_SCAN_PROD}) {
      const hal_tensor_desc_t x_layout = dense(c.x, {3, 40});
      const hal_tensor_desc_t out_layout = dense(c.out, {3, 40});
      std::vector<int64_t> x;
      for (int i = 0; i < 120; ++i) {
        if (c.x == HAL_DTYPE_BOOL) {
          x.push_back(i % 3 == 0 ? 0 : i % 5 + 1);  // stray bytes read as 1
        } else if (c.x == HAL_DTYPE_I64) {
          x.push_back(i % 7 == 0 ? std::numeric_limits<int64_t>::max() : 3 - i % 5);
        } else {
          x.push_back(c.x == HAL_DTYPE_U8 ? 200 - i : (i * 37) % 100 - 50);
        }
      }
      hal_op_scan_desc_t desc = scan_desc(kind, 1, x_layout, out_layout);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      DeviceTensor dx(ctx.device(), x_layout), dout(ctx.device(), out_layout);
      dx.upload_integers(x);
      execute(ctx, plan, {dx.data(), dout.data()});
      std::vector<int64_t> expected(120);
      for (int row = 0; row < 3; ++row) {
        uint64_t acc = kind == HAL_SCAN_SUM ? 0 : 1;
        for (int j = 0; j < 40; ++j) {
          int64_t v = x[static_cast<size_t>(row * 40 + j)];
          if (c.x == HAL_DTYPE_BOOL) v = v != 0;
          if (c.x == HAL_DTYPE_U8) v = static_cast<uint8_t>(v);
          if (c.x == HAL_DTYPE_I8) v = static_cast<int8_t>(v);
          acc = kind == HAL_SCAN_SUM ? acc + static_cast<uint64_t>(v)
                                     : acc * static_cast<uint64_t>(v);
          int64_t stored = static_cast<int64_t>(acc);
          if (c.out == HAL_DTYPE_I32) stored = static_cast<int32_t>(static_cast<uint32_t>(acc));
          if (c.out == HAL_DTYPE_I8) stored = static_cast<int8_t>(static_cast<uint8_t>(acc));
          expected[static_cast<size_t>(row * 40 + j)] = stored;
        }
      }
      expect_equal_integers(dout.download_integers(), expected,
                            std::string(kind == HAL_SCAN_SUM ? "cumsum " : "cumprod ") +
                                label(x_layout) + " -> " + label(out_layout));
    }
  }
}

HALCONFORM_TEST("operators.scan.deterministic", "two runs give identical bits", {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {4, 3000});
  hal_op_scan_desc_t desc = scan_desc(HAL_SCAN_SUM, 1, layout, layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
  const auto x = random_values(ctx.random(), numel(layout), HAL_DTYPE_F32);
  DeviceTensor dx(ctx.device(), layout, x), d1(ctx.device(), layout), d2(ctx.device(), layout);
  execute(ctx, plan, {dx.data(), d1.data()});
  execute(ctx, plan, {dx.data(), d2.data()});
  expect_identical(d1.download(), d2.download(), "cumsum deterministic");
}

HALCONFORM_TEST("operators.scan.errors", "each descriptor rule is refused", {}) {
  const hal_tensor_desc_t f32 = dense(HAL_DTYPE_F32, {4, 5});
  const auto refused = [&](hal_op_scan_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  refused(scan_desc(HAL_SCAN_KIND_COUNT, 0, f32, f32), "unknown kind");
  refused(scan_desc(HAL_SCAN_SUM, 2, f32, f32), "axis past the rank");
  refused(scan_desc(HAL_SCAN_SUM, 0, dense(HAL_DTYPE_F32, {}), dense(HAL_DTYPE_F32, {})), "rank 0");
  refused(scan_desc(HAL_SCAN_SUM, 0, f32, dense(HAL_DTYPE_I64, {4, 5})), "float into integer");
  refused(scan_desc(HAL_SCAN_SUM, 0, dense(HAL_DTYPE_I32, {4, 5}), f32), "integer into float");
  refused(scan_desc(HAL_SCAN_SUM, 0, f32, dense(HAL_DTYPE_F32, {4, 6})), "out shape");
  refused(scan_desc(HAL_SCAN_SUM, 0, dense(HAL_DTYPE_F64, {4, 5}), dense(HAL_DTYPE_F64, {4, 5})),
          "f64");
}
