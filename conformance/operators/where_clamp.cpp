// HAL_OP_WHERE and HAL_OP_CLAMP against host references: where with tensor
// and scalar branches of any dtype (converted as HAL_OP_CAST), a u8 or bool
// condition with stray nonzero bytes, broadcasting and in place; clamp with
// each bound absent, a tensor or a scalar, lo > hi, NaN, integer dtypes;
// each descriptor rule.
#include <cmath>
#include <cstdint>
#include <limits>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

hal_op_where_desc_t where_desc(const hal_tensor_desc_t& cond, const hal_tensor_desc_t& a,
                               const hal_tensor_desc_t& b, const hal_tensor_desc_t& out,
                               bool a_scalar = false, bool b_scalar = false) {
  hal_op_where_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_WHERE;
  desc.a_is_scalar = a_scalar ? 1 : 0;
  desc.b_is_scalar = b_scalar ? 1 : 0;
  desc.cond = cond;
  desc.a = a;
  desc.b = b;
  desc.out = out;
  return desc;
}

hal_op_clamp_desc_t clamp_desc(const hal_tensor_desc_t& x, hal_clamp_bound_t min_kind,
                               const hal_tensor_desc_t& min, hal_clamp_bound_t max_kind,
                               const hal_tensor_desc_t& max, const hal_tensor_desc_t& out) {
  hal_op_clamp_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_CLAMP;
  desc.min_kind = min_kind;
  desc.max_kind = max_kind;
  desc.x = x;
  desc.min = min;
  desc.max = max;
  desc.out = out;
  return desc;
}

// HAL_OP_CAST's conversion of a float64 value to |dtype| (SPEC.md §17.6.3):
// rounded for floats, truncated and saturated for integers, != 0 for bool.
double converted(hal_dtype_t dtype, double v) {
  const auto saturate = [&](double low, double high) {
    if (std::isnan(v)) return 0.0;
    const double t = std::trunc(v);
    return t < low ? low : (t > high ? high : t);
  };
  switch (dtype) {
    case HAL_DTYPE_I32:
      return saturate(-2147483648.0, 2147483647.0);
    case HAL_DTYPE_I8:
      return saturate(-128, 127);
    case HAL_DTYPE_U8:
      return saturate(0, 255);
    case HAL_DTYPE_BOOL:
      return v != 0 ? 1 : 0;
    default:
      return round_to(dtype, v);
  }
}

}  // namespace

HALCONFORM_TEST("operators.where.tensors",
                "cond ? a : b with broadcasting, mixed dtypes converted to out's, strided out, "
                "stray nonzero cond bytes",
                {}) {
  const hal_tensor_desc_t out = padded(HAL_DTYPE_F32, {5, 7, 9}, 3);
  const hal_tensor_desc_t cond_layout = dense(HAL_DTYPE_BOOL, {5, 1, 9});
  const hal_tensor_desc_t a_layout = dense(HAL_DTYPE_F16, {1, 7, 9});
  const hal_tensor_desc_t b_layout = dense(HAL_DTYPE_I32, {5, 7, 1});
  std::vector<int64_t> cond;
  for (int64_t i = 0; i < numel(cond_layout); ++i) cond.push_back(i % 3 == 0 ? 0 : (i % 3) * 100);
  const auto a = random_values(ctx.random(), numel(a_layout), HAL_DTYPE_F16, -3, 3);
  const auto b = random_ints(ctx.random(), numel(b_layout), -1000, 1000);
  hal_op_where_desc_t desc = where_desc(cond_layout, a_layout, b_layout, out);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dc(ctx.device(), cond_layout), da(ctx.device(), a_layout, a),
      db(ctx.device(), b_layout, b), dout(ctx.device(), out);
  dc.upload_integers(cond);
  execute(ctx, plan, {dc.data(), da.data(), db.data(), dout.data()});
  std::vector<double> expected(static_cast<size_t>(numel(out)));
  for (size_t i = 0; i < expected.size(); ++i) {
    const bool take = cond[static_cast<size_t>(broadcast_index(cond_layout, out, i))] != 0;
    expected[i] = take ? a[static_cast<size_t>(broadcast_index(a_layout, out, i))]
                       : b[static_cast<size_t>(broadcast_index(b_layout, out, i))];
  }
  expect_close(dout.download(), expected, {0, 0}, "where f16/i32 -> f32");
  dout.check_untouched("where f16/i32 -> f32");
}

HALCONFORM_TEST("operators.where.scalars_and_dtypes",
                "masked_fill (a scalar branch), two scalars, every out dtype, u8 cond, in place",
                {}) {
  const hal_tensor_desc_t cond_layout = dense(HAL_DTYPE_U8, {6, 10});
  std::vector<int64_t> cond;
  for (int i = 0; i < 60; ++i) cond.push_back((i * 7) % 5 == 0 ? 0 : 1 + i % 4);
  for (hal_dtype_t dtype :
       {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16, HAL_DTYPE_F64, HAL_DTYPE_I32, HAL_DTYPE_I64,
        HAL_DTYPE_I8, HAL_DTYPE_U8, HAL_DTYPE_BOOL}) {
    const bool floats = dtype == HAL_DTYPE_F32 || dtype == HAL_DTYPE_F16 ||
                        dtype == HAL_DTYPE_BF16 || dtype == HAL_DTYPE_F64;
    const hal_tensor_desc_t layout = dense(dtype, {6, 10});
    const auto b = dtype == HAL_DTYPE_BOOL ? random_ints(ctx.random(), 60, 0, 1)
                                           : random_ints(ctx.random(), 60, 0, 100);
    // a is a scalar: -inf for floats (masked_fill), 300 for integers (saturates in i8 and u8).
    hal_op_scalar_t s{};
    s.f64 = -kInf;
    s.i64 = 300;
    hal_op_where_desc_t desc = where_desc(cond_layout, layout, layout, layout, true, false);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    DeviceTensor dc(ctx.device(), cond_layout), db(ctx.device(), layout, b);
    dc.upload_integers(cond);
    execute(ctx, plan, {dc.data(), nullptr, db.data(), db.data()}, {s});  // in place: out = b
    std::vector<double> expected(60);
    for (size_t i = 0; i < 60; ++i) {
      expected[i] = cond[i] != 0 ? converted(dtype, floats ? -kInf : 300.0) : b[i];
    }
    expect_close(db.download(), expected, {0, 0}, std::string("masked fill of ") + label(layout));
  }
  // Both scalars: 2.5 / -1 into f16.
  const hal_tensor_desc_t f16 = dense(HAL_DTYPE_F16, {6, 10});
  hal_op_where_desc_t desc = where_desc(cond_layout, f16, f16, f16, true, true);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  hal_op_scalar_t a_s{}, b_s{};
  a_s.f64 = 2.5;
  b_s.f64 = -1.0;
  DeviceTensor dc(ctx.device(), cond_layout), dout(ctx.device(), f16);
  dc.upload_integers(cond);
  execute(ctx, plan, {dc.data(), nullptr, nullptr, dout.data()}, {a_s, b_s});
  std::vector<double> expected(60);
  for (size_t i = 0; i < 60; ++i) expected[i] = cond[i] != 0 ? 2.5 : -1.0;
  expect_close(dout.download(), expected, {0, 0}, "where of two scalars");
}

HALCONFORM_TEST("operators.where.errors", "each descriptor rule is refused", {}) {
  const hal_tensor_desc_t f32 = dense(HAL_DTYPE_F32, {4, 5});
  const hal_tensor_desc_t cond = dense(HAL_DTYPE_BOOL, {4, 5});
  const auto refused = [&](hal_op_where_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  refused(where_desc(dense(HAL_DTYPE_F32, {4, 5}), f32, f32, f32), "a float condition");
  refused(where_desc(dense(HAL_DTYPE_BOOL, {3, 5}), f32, f32, f32), "cond not broadcasting");
  refused(where_desc(cond, dense(HAL_DTYPE_F32, {4, 2}), f32, f32), "a not broadcasting");
  refused(where_desc(cond, f32, dense(HAL_DTYPE_F32, {5}), f32), "b of another rank");
  hal_op_where_desc_t flags = where_desc(cond, f32, f32, f32);
  flags.a_is_scalar = 2;
  refused(flags, "a_is_scalar not 0/1");
  hal_tensor_desc_t overlapping = f32;
  overlapping.strides[1] = 0;
  refused(where_desc(cond, f32, f32, overlapping), "out with stride 0");
  // At execution: a scalar's operand must be NULL.
  hal_op_where_desc_t scalar = where_desc(cond, f32, f32, f32, true, false);
  Plan plan;
  plan_or_skip(ctx, &scalar.header, plan);
  DeviceTensor dc(ctx.device(), cond), da(ctx.device(), f32), db(ctx.device(), f32),
      dout(ctx.device(), f32);
  hal_op_scalar_t s{};
  HC_EXPECT_RESULT(try_execute(ctx, plan, {dc.data(), da.data(), db.data(), dout.data()}, {s}),
                   HAL_ERROR_INVALID_ARGUMENT);
}

namespace {

double clamp_reference(double x, bool has_lo, double lo, bool has_hi, double hi) {
  if (has_lo) x = std::isnan(x) || std::isnan(lo) ? kNan : std::fmax(x, lo);
  if (has_hi) x = std::isnan(x) || std::isnan(hi) ? kNan : std::fmin(x, hi);
  return x;
}

}  // namespace

HALCONFORM_TEST("operators.clamp.float",
                "every bound kind pair, tensor bounds broadcasting, lo > hi gives hi, NaN in x "
                "and in bounds",
                {}) {
  const hal_tensor_desc_t x_layout = dense(HAL_DTYPE_BF16, {6, 13});
  auto x = random_values(ctx.random(), numel(x_layout), HAL_DTYPE_BF16, -3, 3);
  x[5] = kNan;
  x[17] = kInf;
  const hal_tensor_desc_t lo_layout = dense(HAL_DTYPE_F32, {1, 13});
  const hal_tensor_desc_t hi_layout = dense(HAL_DTYPE_F16, {6, 1});
  auto lo = random_values(ctx.random(), 13, HAL_DTYPE_F32, -2, 0);
  auto hi = random_values(ctx.random(), 6, HAL_DTYPE_F16, 0, 2);
  lo[3] = 2.5;  // lo > hi in a column: hi wins
  lo[7] = kNan;
  hi[4] = kNan;
  const hal_tensor_desc_t out_layout = dense(HAL_DTYPE_F32, {6, 13});
  const hal_clamp_bound_t kinds[] = {HAL_CLAMP_BOUND_NONE, HAL_CLAMP_BOUND_TENSOR,
                                     HAL_CLAMP_BOUND_SCALAR};
  for (hal_clamp_bound_t min_kind : kinds) {
    for (hal_clamp_bound_t max_kind : kinds) {
      hal_op_clamp_desc_t desc =
          clamp_desc(x_layout, min_kind, lo_layout, max_kind, hi_layout, out_layout);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      DeviceTensor dx(ctx.device(), x_layout, x), dlo(ctx.device(), lo_layout, lo),
          dhi(ctx.device(), hi_layout, hi), dout(ctx.device(), out_layout);
      std::vector<hal_op_scalar_t> scalars;
      hal_op_scalar_t s_lo{}, s_hi{};
      s_lo.f64 = -0.5;
      s_hi.f64 = 0.75;
      if (min_kind == HAL_CLAMP_BOUND_SCALAR) scalars.push_back(s_lo);
      if (max_kind == HAL_CLAMP_BOUND_SCALAR) scalars.push_back(s_hi);
      execute(ctx, plan,
              {dx.data(), min_kind == HAL_CLAMP_BOUND_TENSOR ? dlo.data() : nullptr,
               max_kind == HAL_CLAMP_BOUND_TENSOR ? dhi.data() : nullptr, dout.data()},
              scalars);
      std::vector<double> expected(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const double l = min_kind == HAL_CLAMP_BOUND_SCALAR ? -0.5 : lo[i % 13];
        const double h = max_kind == HAL_CLAMP_BOUND_SCALAR ? 0.75 : hi[i / 13];
        expected[i] = clamp_reference(x[i], min_kind != HAL_CLAMP_BOUND_NONE, l,
                                      max_kind != HAL_CLAMP_BOUND_NONE, h);
      }
      expect_close(
          dout.download(), expected, {0, 0},
          "clamp min kind " + std::to_string(min_kind) + ", max kind " + std::to_string(max_kind));
    }
  }
}

HALCONFORM_TEST("operators.clamp.integers_and_in_place",
                "i8/u8/i32/i64 with scalar and tensor bounds (bounds past the width saturate), "
                "in place on a strided f16 view",
                {}) {
  for (hal_dtype_t dtype : {HAL_DTYPE_I8, HAL_DTYPE_U8, HAL_DTYPE_I32, HAL_DTYPE_I64}) {
    const hal_tensor_desc_t layout = dense(dtype, {40});
    const auto x = random_ints(ctx.random(), 40, dtype == HAL_DTYPE_U8 ? 0 : -100, 100);
    const hal_tensor_desc_t bound_layout = dense(HAL_DTYPE_I64, {40});
    const auto hi = random_ints(ctx.random(), 40, 0, 300);
    hal_op_clamp_desc_t desc = clamp_desc(layout, HAL_CLAMP_BOUND_SCALAR, layout,
                                          HAL_CLAMP_BOUND_TENSOR, bound_layout, layout);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    DeviceTensor dx(ctx.device(), layout, x), dhi(ctx.device(), bound_layout, hi),
        dout(ctx.device(), layout);
    hal_op_scalar_t lo{};
    lo.i64 = -20;
    execute(ctx, plan, {dx.data(), nullptr, dhi.data(), dout.data()}, {lo});
    std::vector<double> expected(40);
    for (size_t i = 0; i < 40; ++i) {
      double v = std::fmin(std::fmax(x[i], -20.0), hi[i]);
      if (dtype == HAL_DTYPE_U8) v = std::fmax(v, 0);  // -20 saturates to u8's 0
      if (dtype == HAL_DTYPE_I8) v = std::fmin(v, 127);
      expected[i] = v;
    }
    expect_close(dout.download(), expected, {0, 0}, "clamp of " + label(layout));
  }
  const hal_tensor_desc_t view = transposed(padded(HAL_DTYPE_F16, {9, 11}, 4), 0, 1);
  const auto x = random_values(ctx.random(), 99, HAL_DTYPE_F16, -2, 2);
  hal_op_clamp_desc_t desc =
      clamp_desc(view, HAL_CLAMP_BOUND_SCALAR, view, HAL_CLAMP_BOUND_NONE, view, view);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), view, x);
  hal_op_scalar_t lo{};
  lo.f64 = 0.0;
  execute(ctx, plan, {dx.data(), nullptr, nullptr, dx.data()}, {lo});
  std::vector<double> expected(99);
  for (size_t i = 0; i < 99; ++i) expected[i] = std::fmax(x[i], 0.0);
  expect_close(dx.download(), expected, {0, 0}, "relu-like clamp in place");
  dx.check_untouched("clamp in place");
}

HALCONFORM_TEST("operators.clamp.errors", "each descriptor rule is refused", {}) {
  const hal_tensor_desc_t f32 = dense(HAL_DTYPE_F32, {4, 5});
  const hal_tensor_desc_t i32 = dense(HAL_DTYPE_I32, {4, 5});
  const auto refused = [&](hal_op_clamp_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  hal_op_clamp_desc_t desc =
      clamp_desc(f32, HAL_CLAMP_BOUND_COUNT, f32, HAL_CLAMP_BOUND_NONE, f32, f32);
  refused(desc, "unknown bound kind");
  refused(clamp_desc(dense(HAL_DTYPE_BOOL, {4, 5}), HAL_CLAMP_BOUND_SCALAR, f32,
                     HAL_CLAMP_BOUND_NONE, f32, dense(HAL_DTYPE_BOOL, {4, 5})),
          "bool x");
  refused(clamp_desc(i32, HAL_CLAMP_BOUND_SCALAR, f32, HAL_CLAMP_BOUND_NONE, f32, f32),
          "integer x into a float out");
  refused(clamp_desc(f32, HAL_CLAMP_BOUND_TENSOR, i32, HAL_CLAMP_BOUND_NONE, f32, f32),
          "an integer bound of a float x");
  refused(clamp_desc(f32, HAL_CLAMP_BOUND_TENSOR, dense(HAL_DTYPE_F32, {3, 5}),
                     HAL_CLAMP_BOUND_NONE, f32, f32),
          "a bound not broadcasting");
  refused(clamp_desc(f32, HAL_CLAMP_BOUND_NONE, f32, HAL_CLAMP_BOUND_NONE, f32,
                     dense(HAL_DTYPE_F32, {5, 4})),
          "out shape");
}
