// HAL_OP_REDUCE's appended kinds against host references: min, prod and
// norm2 of floats over every axes mask (long ones in two passes), argmax and
// argmin (first occurrence, NaN first, ties), integer and bool reductions
// (sum, prod with wrap-around, max/min, any/all), empty reductions, and the
// new rules.
#include <cmath>
#include <cstdint>
#include <limits>

#include "op_harness.hpp"
#include "reduce_cases.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

// For each output element, its reduced elements in row-major order of the
// reduced axes (the order ARGMAX/ARGMIN count in).
std::vector<std::vector<double>> groups(uint32_t axes, const std::vector<double>& x,
                                        const hal_tensor_desc_t& x_layout) {
  const std::vector<int64_t> shape = shape_of(x_layout);
  const std::vector<int64_t> out_shape = reduced_shape(x_layout, axes);
  int64_t out_count = 1;
  for (int64_t s : out_shape) out_count *= s;
  std::vector<std::vector<double>> result(static_cast<size_t>(out_count));
  for (size_t i = 0; i < x.size(); ++i) {  // row-major over x: reduced order within a group
    int64_t rest = static_cast<int64_t>(i);
    int64_t out_index = 0;
    int64_t scale = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      const int64_t coordinate = rest % shape[d];
      rest /= shape[d];
      if (((axes >> d) & 1u) == 0) out_index += coordinate * scale;
      scale *= out_shape[d];
    }
    result[static_cast<size_t>(out_index)].push_back(x[i]);
  }
  return result;
}

double fold(hal_reduce_kind_t kind, const std::vector<double>& values) {
  switch (kind) {
    case HAL_REDUCE_KIND_MIN: {
      double m = kInf;
      for (double v : values) m = std::isnan(v) || std::isnan(m) ? kNan : std::fmin(m, v);
      return m;
    }
    case HAL_REDUCE_KIND_MAX: {
      double m = -kInf;
      for (double v : values) m = std::isnan(v) || std::isnan(m) ? kNan : std::fmax(m, v);
      return m;
    }
    case HAL_REDUCE_KIND_PROD: {
      double p = 1;
      for (double v : values) p *= v;
      return p;
    }
    case HAL_REDUCE_KIND_NORM2: {
      double s = 0;
      for (double v : values) s += v * v;
      return std::sqrt(s);
    }
    case HAL_REDUCE_KIND_ARGMAX:
    case HAL_REDUCE_KIND_ARGMIN: {
      size_t best = 0;
      for (size_t j = 0; j < values.size(); ++j) {
        if (std::isnan(values[j])) return static_cast<double>(j);
        const bool better =
            kind == HAL_REDUCE_KIND_ARGMAX ? values[j] > values[best] : values[j] < values[best];
        if (better) best = j;
      }
      return static_cast<double>(best);
    }
    default: {
      double s = 0;
      for (double v : values) s += v;
      return s;
    }
  }
}

void run(TestContext& ctx, hal_reduce_kind_t kind, uint32_t axes, const hal_tensor_desc_t& x_layout,
         hal_dtype_t out_dtype, const std::vector<double>& x, Tolerance tolerance) {
  const hal_tensor_desc_t out_layout = dense(out_dtype, reduced_shape(x_layout, axes));
  hal_op_reduce_desc_t desc = reduce_desc(kind, axes, x_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), x_layout, x), dout(ctx.device(), out_layout);
  execute(ctx, plan, {dx.data(), dout.data()});
  const auto by_output = groups(axes, x, x_layout);
  std::vector<double> expected;
  for (const auto& values : by_output) expected.push_back(round_to(out_dtype, fold(kind, values)));
  const std::string what = "reduce " + std::to_string(kind) + " axes " + std::to_string(axes) +
                           " " + label(x_layout) + " -> " + label(out_layout);
  expect_close(dout.download(), expected, tolerance, what);
  dout.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.reduce.min_prod_norm2",
                "min, prod and norm2 over every axes mask x f32/f16/bf16, strided x", {}) {
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    for (uint32_t axes = 0; axes < 8; ++axes) {
      const hal_tensor_desc_t layout = dense(dtype, {3, 5, 7});
      const auto x = random_values(ctx.random(), numel(layout), dtype, -2, 2);
      const double terms = static_cast<double>(reduced_count(layout, axes));
      run(ctx, HAL_REDUCE_KIND_MIN, axes, layout, dtype, x, {0, 0});
      run(ctx, HAL_REDUCE_KIND_NORM2, axes, layout, dtype, x, tolerance_for(dtype, terms));
      // Products of factors near 1 keep their magnitude (and f32's relative error).
      const auto factors = random_values(ctx.random(), numel(layout), dtype, 0.7, 1.4);
      run(ctx, HAL_REDUCE_KIND_PROD, axes, layout, dtype, factors, tolerance_for(dtype, terms));
    }
  }
  const hal_tensor_desc_t view = transposed(padded(HAL_DTYPE_F16, {6, 4, 9}, 2), 0, 2);
  const auto x = random_values(ctx.random(), numel(view), HAL_DTYPE_F16, -2, 2);
  run(ctx, HAL_REDUCE_KIND_MIN, 0x5, view, HAL_DTYPE_F32, x, {0, 0});
  run(ctx, HAL_REDUCE_KIND_NORM2, 0x2, view, HAL_DTYPE_F32, x, tolerance_for(HAL_DTYPE_F32, 6));
}

HALCONFORM_TEST("operators.reduce.long_two_pass",
                "min, prod, norm2 over 9001 elements (the chunked path) and NaN", {}) {
  auto x = random_values(ctx.random(), 9001, HAL_DTYPE_F32, -1, 1);
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {9001});
  run(ctx, HAL_REDUCE_KIND_MIN, 0x1, layout, HAL_DTYPE_F32, x, {0, 0});
  run(ctx, HAL_REDUCE_KIND_NORM2, 0x1, layout, HAL_DTYPE_F32, x,
      tolerance_for(HAL_DTYPE_F32, 9001));
  auto factors = random_values(ctx.random(), 9001, HAL_DTYPE_F32, 0.999, 1.001);
  run(ctx, HAL_REDUCE_KIND_PROD, 0x1, layout, HAL_DTYPE_F32, factors,
      tolerance_for(HAL_DTYPE_F32, 9001));
  x[4444] = kNan;
  run(ctx, HAL_REDUCE_KIND_MIN, 0x1, layout, HAL_DTYPE_F32, x, {0, 0});
  run(ctx, HAL_REDUCE_KIND_PROD, 0x1, layout, HAL_DTYPE_F32, x, {0, 0});
  // A sum meeting inf is inf (not the NaN of a compensation computing inf - inf).
  x[4444] = kInf;
  run(ctx, HAL_REDUCE_KIND_SUM, 0x1, layout, HAL_DTYPE_F32, x, {0, 0});
  run(ctx, HAL_REDUCE_KIND_NORM2, 0x1, layout, HAL_DTYPE_F32, x, {0, 0});
  run(ctx, HAL_REDUCE_KIND_SUM, 0x1, dense(HAL_DTYPE_F32, {3}), HAL_DTYPE_F32, {kInf, 1.0, 2.0},
      {0, 0});
}

HALCONFORM_TEST("operators.reduce.argmax_argmin",
                "first occurrence of ties, NaN first, every axes mask, i64 out, any x dtype", {}) {
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16, HAL_DTYPE_I32, HAL_DTYPE_U8}) {
    const hal_tensor_desc_t layout = dense(dtype, {4, 6, 5});
    auto x = random_ints(ctx.random(), numel(layout), 0, 4);  // many ties
    if (dtype == HAL_DTYPE_F32) {
      x[7] = kNan;
      x[50] = kNan;
      x[51] = -kInf;
    }
    for (uint32_t axes = 0; axes < 8; ++axes) {
      for (hal_reduce_kind_t kind : {HAL_REDUCE_KIND_ARGMAX, HAL_REDUCE_KIND_ARGMIN}) {
        run(ctx, kind, axes, layout, HAL_DTYPE_I64, x, {0, 0});
      }
    }
  }
  // A strided x; an argmax over a long row.
  const hal_tensor_desc_t view = transposed(dense(HAL_DTYPE_F16, {7, 300}), 0, 1);
  const auto x = random_values(ctx.random(), numel(view), HAL_DTYPE_F16, -4, 4);
  run(ctx, HAL_REDUCE_KIND_ARGMAX, 0x1, view, HAL_DTYPE_I64, x, {0, 0});
  run(ctx, HAL_REDUCE_KIND_ARGMIN, 0x3, view, HAL_DTYPE_I64, x, {0, 0});
}

HALCONFORM_TEST("operators.reduce.integers",
                "sum and prod into integer outs (wrapping), max/min in x's dtype, any/all of bool, "
                "empty reductions; exact",
                {}) {
  struct Case {
    hal_reduce_kind_t kind;
    hal_dtype_t x, out;
  };
  for (const Case& c : {Case{HAL_REDUCE_KIND_SUM, HAL_DTYPE_I32, HAL_DTYPE_I64},
                        Case{HAL_REDUCE_KIND_SUM, HAL_DTYPE_BOOL, HAL_DTYPE_I64},
                        Case{HAL_REDUCE_KIND_SUM, HAL_DTYPE_I64, HAL_DTYPE_I8},
                        Case{HAL_REDUCE_KIND_PROD, HAL_DTYPE_I8, HAL_DTYPE_I64},
                        Case{HAL_REDUCE_KIND_PROD, HAL_DTYPE_I32, HAL_DTYPE_I32},
                        Case{HAL_REDUCE_KIND_MAX, HAL_DTYPE_I64, HAL_DTYPE_I64},
                        Case{HAL_REDUCE_KIND_MIN, HAL_DTYPE_U8, HAL_DTYPE_U8},
                        Case{HAL_REDUCE_KIND_MAX, HAL_DTYPE_BOOL, HAL_DTYPE_BOOL},
                        Case{HAL_REDUCE_KIND_MIN, HAL_DTYPE_BOOL, HAL_DTYPE_BOOL}}) {
    for (uint32_t axes : {0x1u, 0x2u, 0x3u}) {
      const hal_tensor_desc_t x_layout = dense(c.x, {5, 9});
      const hal_tensor_desc_t out_layout = dense(c.out, reduced_shape(x_layout, axes));
      std::vector<int64_t> x;
      for (int i = 0; i < 45; ++i) {
        switch (c.x) {
          case HAL_DTYPE_BOOL:
            x.push_back(i % 4 == 0 ? 0 : 1 + i % 3);  // stray nonzero bytes
            break;
          case HAL_DTYPE_I64:
            x.push_back((i % 5 == 0 ? std::numeric_limits<int64_t>::max() / 3 : 0) + i * 1000003);
            break;
          case HAL_DTYPE_U8:
            x.push_back((i * 73) % 256);
            break;
          default:
            x.push_back(i % 7 - 3 + (i % 11 == 0 ? 90 : 0));
            break;
        }
      }
      hal_op_reduce_desc_t desc = reduce_desc(c.kind, axes, x_layout, out_layout);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      DeviceTensor dx(ctx.device(), x_layout), dout(ctx.device(), out_layout);
      dx.upload_integers(x);
      execute(ctx, plan, {dx.data(), dout.data()});
      // Reference: each output's members as exact integers, wrapped to out's width.
      std::vector<int64_t> expected;
      for (int64_t row = 0; row < numel(out_layout); ++row) {
        std::vector<int64_t> members;
        for (int i = 0; i < 45; ++i) {
          const int r = i / 9, col = i % 9;
          const int64_t out_index = axes == 0x1 ? col : (axes == 0x2 ? r : 0);
          if (out_index == row) {
            int64_t v = x[static_cast<size_t>(i)];
            if (c.x == HAL_DTYPE_BOOL) v = v != 0;
            if (c.x == HAL_DTYPE_I8) v = static_cast<int8_t>(v);
            members.push_back(v);
          }
        }
        uint64_t acc = c.kind == HAL_REDUCE_KIND_PROD ? 1 : 0;
        int64_t extreme = members.empty() ? 0 : members[0];
        for (int64_t v : members) {
          acc = c.kind == HAL_REDUCE_KIND_PROD ? acc * static_cast<uint64_t>(v)
                                               : acc + static_cast<uint64_t>(v);
          extreme = c.kind == HAL_REDUCE_KIND_MAX ? std::max(extreme, v) : std::min(extreme, v);
        }
        int64_t value = c.kind == HAL_REDUCE_KIND_SUM || c.kind == HAL_REDUCE_KIND_PROD
                            ? static_cast<int64_t>(acc)
                            : extreme;
        if (c.out == HAL_DTYPE_I32) value = static_cast<int32_t>(static_cast<uint32_t>(value));
        if (c.out == HAL_DTYPE_I8) value = static_cast<int8_t>(static_cast<uint8_t>(value));
        expected.push_back(value);
      }
      expect_equal_integers(dout.download_integers(), expected,
                            "reduce " + std::to_string(c.kind) + " axes " + std::to_string(axes) +
                                " " + label(x_layout) + " -> " + label(out_layout));
    }
  }
  // Empty reductions: min +inf, prod 1, norm2 0; integer max/min the dtype's
  // extremes; any of nothing false, all of nothing true.
  run(ctx, HAL_REDUCE_KIND_MIN, 0x1, dense(HAL_DTYPE_F32, {0, 3}), HAL_DTYPE_F32, {}, {0, 0});
  run(ctx, HAL_REDUCE_KIND_PROD, 0x1, dense(HAL_DTYPE_F32, {0, 3}), HAL_DTYPE_F32, {}, {0, 0});
  run(ctx, HAL_REDUCE_KIND_NORM2, 0x1, dense(HAL_DTYPE_F32, {0, 3}), HAL_DTYPE_F32, {}, {0, 0});
  struct Empty {
    hal_reduce_kind_t kind;
    hal_dtype_t dtype;
    int64_t expected;
  };
  for (const Empty& e : {Empty{HAL_REDUCE_KIND_MAX, HAL_DTYPE_I32, -2147483648LL},
                         Empty{HAL_REDUCE_KIND_MIN, HAL_DTYPE_I8, 127},
                         Empty{HAL_REDUCE_KIND_MAX, HAL_DTYPE_BOOL, 0},
                         Empty{HAL_REDUCE_KIND_MIN, HAL_DTYPE_BOOL, 1},
                         Empty{HAL_REDUCE_KIND_PROD, HAL_DTYPE_I64, 1}}) {
    const hal_tensor_desc_t x_layout = dense(e.dtype, {0, 2});
    const hal_tensor_desc_t out_layout = dense(e.dtype, {1, 2});
    hal_op_reduce_desc_t desc = reduce_desc(e.kind, 0x1, x_layout, out_layout);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    DeviceTensor dx(ctx.device(), x_layout), dout(ctx.device(), out_layout);
    execute(ctx, plan, {dx.data(), dout.data()});
    expect_equal_integers(dout.download_integers(), {e.expected, e.expected},
                          "empty integer reduce " + std::to_string(e.kind));
  }
}

HALCONFORM_TEST("operators.reduce.new_rules", "the appended kinds' dtype and shape rules", {}) {
  const auto refused = [&](hal_op_reduce_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  const hal_tensor_desc_t f32 = dense(HAL_DTYPE_F32, {3, 4});
  const hal_tensor_desc_t i32 = dense(HAL_DTYPE_I32, {3, 4});
  refused(reduce_desc(HAL_REDUCE_KIND_ARGMAX, 0x2, f32, dense(HAL_DTYPE_F32, {3, 1})),
          "argmax into a float");
  refused(reduce_desc(HAL_REDUCE_KIND_ARGMIN, 0x2, f32, dense(HAL_DTYPE_I32, {3, 1})),
          "argmin into i32");
  refused(reduce_desc(HAL_REDUCE_KIND_ARGMAX, 0x1, dense(HAL_DTYPE_F32, {0, 4}),
                      dense(HAL_DTYPE_I64, {1, 4})),
          "argmax over an empty axis");
  refused(reduce_desc(HAL_REDUCE_KIND_MEAN, 0x2, i32, dense(HAL_DTYPE_I32, {3, 1})),
          "mean of integers");
  refused(reduce_desc(HAL_REDUCE_KIND_NORM2, 0x2, i32, dense(HAL_DTYPE_F32, {3, 1})),
          "norm2 of integers");
  refused(reduce_desc(HAL_REDUCE_KIND_MAX, 0x2, i32, dense(HAL_DTYPE_I64, {3, 1})),
          "integer max into another dtype");
  refused(reduce_desc(HAL_REDUCE_KIND_SUM, 0x2, dense(HAL_DTYPE_BOOL, {3, 4}),
                      dense(HAL_DTYPE_BOOL, {3, 1})),
          "sum of bool into bool");
  refused(reduce_desc(HAL_REDUCE_KIND_SUM, 0x2, dense(HAL_DTYPE_F64, {3, 4}),
                      dense(HAL_DTYPE_F64, {3, 1})),
          "f64");
}
