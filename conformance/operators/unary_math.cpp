// HAL_OP_UNARY_MATH against float64 references: every op on f32/f16/bf16 in
// the op's natural range, the edge values (NaN, +-inf, +-0, denormals, the
// largest floats, ties of round), the integer ops with wrap-around at each
// width, bool, strided and broadcast views, in place, determinism and each
// descriptor rule.
#include <cmath>
#include <cstdint>
#include <limits>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kFloats[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_dtype_t kIntegers[] = {HAL_DTYPE_I32, HAL_DTYPE_I64, HAL_DTYPE_I8, HAL_DTYPE_U8};

hal_op_unary_math_desc_t math_desc(hal_unary_math_t op, const hal_tensor_desc_t& x,
                                   const hal_tensor_desc_t& out) {
  hal_op_unary_math_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_UNARY_MATH;
  desc.op = op;
  desc.x = x;
  desc.out = out;
  return desc;
}

// erf^-1 by Newton's method on std::erf from a rough start: an independent
// route to the value (the kernels use a polynomial).
double erfinv_reference(double y) {
  if (std::isnan(y) || std::fabs(y) > 1) return kNan;
  if (std::fabs(y) == 1) return y * kInf;
  const double a = 0.147;
  const double l = std::log(1 - y * y);
  const double t = 2 / (3.14159265358979323846 * a) + l / 2;
  double x = std::copysign(std::sqrt(std::sqrt(t * t - l / a) - t), y);
  for (int i = 0; i < 60; ++i) {
    const double slope = 2 / std::sqrt(3.14159265358979323846) * std::exp(-x * x);
    if (slope == 0) break;
    x -= (std::erf(x) - y) / slope;
  }
  return x;
}

double float_reference(hal_unary_math_t op, double x) {
  switch (op) {
    case HAL_UNARY_MATH_EXP:
      return std::exp(x);
    case HAL_UNARY_MATH_EXP2:
      return std::exp2(x);
    case HAL_UNARY_MATH_EXPM1:
      return std::expm1(x);
    case HAL_UNARY_MATH_LOG:
      return std::log(x);
    case HAL_UNARY_MATH_LOG2:
      return std::log2(x);
    case HAL_UNARY_MATH_LOG10:
      return std::log10(x);
    case HAL_UNARY_MATH_LOG1P:
      return std::log1p(x);
    case HAL_UNARY_MATH_SQRT:
      return std::sqrt(x);
    case HAL_UNARY_MATH_RSQRT:
      return 1 / std::sqrt(x);
    case HAL_UNARY_MATH_RECIPROCAL:
      return 1 / x;
    case HAL_UNARY_MATH_SIN:
      return std::sin(x);
    case HAL_UNARY_MATH_COS:
      return std::cos(x);
    case HAL_UNARY_MATH_TAN:
      return std::tan(x);
    case HAL_UNARY_MATH_TANH:
      return std::tanh(x);
    case HAL_UNARY_MATH_ATAN:
      return std::atan(x);
    case HAL_UNARY_MATH_SIGMOID:
      return 1 / (1 + std::exp(-x));
    case HAL_UNARY_MATH_ERF:
      return std::erf(x);
    case HAL_UNARY_MATH_ERFINV:
      return erfinv_reference(x);
    case HAL_UNARY_MATH_ABS:
      return std::fabs(x);
    case HAL_UNARY_MATH_NEG:
      return -x;
    case HAL_UNARY_MATH_SIGN:
      return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);  // NaN gives 0, as torch.sign
    case HAL_UNARY_MATH_FLOOR:
      return std::floor(x);
    case HAL_UNARY_MATH_CEIL:
      return std::ceil(x);
    case HAL_UNARY_MATH_ROUND:
      return std::nearbyint(x);  // the default mode: ties to even
    case HAL_UNARY_MATH_TRUNC:
      return std::trunc(x);
    case HAL_UNARY_MATH_LOGICAL_NOT:
      return x == 0 ? 1 : 0;
    case HAL_UNARY_MATH_ISNAN:
      return std::isnan(x) ? 1 : 0;
    case HAL_UNARY_MATH_ISINF:
      return std::isinf(x) ? 1 : 0;
    case HAL_UNARY_MATH_ISFINITE:
      return std::isfinite(x) ? 1 : 0;
    default:
      return kNan;
  }
}

bool is_predicate(hal_unary_math_t op) {
  return op >= HAL_UNARY_MATH_LOGICAL_NOT && op <= HAL_UNARY_MATH_ISFINITE;
}

bool is_exact(hal_unary_math_t op) {
  return op >= HAL_UNARY_MATH_ABS;
}

// The range each float op is exercised on (inputs drawn uniformly, rounded
// to the dtype): where the function is well conditioned and its f16 result
// does not overflow.
struct Range {
  double low, high;
};
Range range_of(hal_unary_math_t op) {
  switch (op) {
    case HAL_UNARY_MATH_EXP:
    case HAL_UNARY_MATH_EXPM1:
      return {-8, 8};
    case HAL_UNARY_MATH_EXP2:
      return {-12, 12};
    case HAL_UNARY_MATH_LOG:
    case HAL_UNARY_MATH_LOG2:
    case HAL_UNARY_MATH_LOG10:
    case HAL_UNARY_MATH_SQRT:
    case HAL_UNARY_MATH_RSQRT:
      return {1e-3, 100};
    case HAL_UNARY_MATH_LOG1P:
      return {-0.9, 10};
    case HAL_UNARY_MATH_RECIPROCAL:
      return {0.1, 10};
    case HAL_UNARY_MATH_TAN:
      return {-1.4, 1.4};
    case HAL_UNARY_MATH_TANH:
    case HAL_UNARY_MATH_ERF:
      return {-4, 4};
    case HAL_UNARY_MATH_ERFINV:
      return {-0.999, 0.999};
    case HAL_UNARY_MATH_SIGMOID:
      return {-20, 20};
    default:
      return {-10, 10};
  }
}

std::vector<double> float_expected(hal_unary_math_t op, const std::vector<double>& x,
                                   hal_dtype_t out_dtype) {
  std::vector<double> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    expected[i] = round_to(out_dtype, float_reference(op, x[i]));
  return expected;
}

// Runs |op| on |x| (values in row-major order of x's layout) and returns out.
std::vector<double> run(TestContext& ctx, hal_unary_math_t op, const hal_tensor_desc_t& x_layout,
                        const hal_tensor_desc_t& out_layout, const std::vector<double>& x) {
  hal_op_unary_math_desc_t desc = math_desc(op, x_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), x_layout, x), dout(ctx.device(), out_layout);
  execute(ctx, plan, {dx.data(), dout.data()});
  dout.check_untouched("unary_math " + std::to_string(op) + " " + label(out_layout));
  return dout.download();
}

Tolerance tolerance_of(hal_unary_math_t op, hal_dtype_t out_dtype) {
  if (is_exact(op)) return {0, 0};
  return tolerance_for(out_dtype);
}

void check_float_op(TestContext& ctx, hal_unary_math_t op, const hal_tensor_desc_t& x_layout,
                    const hal_tensor_desc_t& out_layout) {
  const Range range = range_of(op);
  std::vector<double> x =
      random_values(ctx.random(), numel(x_layout), x_layout.dtype, range.low, range.high);
  if (op == HAL_UNARY_MATH_RECIPROCAL) {
    for (size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];
  }
  if (op == HAL_UNARY_MATH_ROUND) {  // ties: k + 0.5, both parities and signs
    for (size_t i = 0; i < x.size(); i += 3) x[i] = std::floor(x[i]) + 0.5;
  }
  const auto got = run(ctx, op, x_layout, out_layout, x);
  expect_close(
      got, float_expected(op, x, out_layout.dtype), tolerance_of(op, out_layout.dtype),
      "unary_math " + std::to_string(op) + " " + label(x_layout) + " -> " + label(out_layout));
}

constexpr hal_unary_math_t kFloatOps[] = {
    HAL_UNARY_MATH_EXP,   HAL_UNARY_MATH_EXP2,       HAL_UNARY_MATH_EXPM1, HAL_UNARY_MATH_LOG,
    HAL_UNARY_MATH_LOG2,  HAL_UNARY_MATH_LOG10,      HAL_UNARY_MATH_LOG1P, HAL_UNARY_MATH_SQRT,
    HAL_UNARY_MATH_RSQRT, HAL_UNARY_MATH_RECIPROCAL, HAL_UNARY_MATH_SIN,   HAL_UNARY_MATH_COS,
    HAL_UNARY_MATH_TAN,   HAL_UNARY_MATH_TANH,       HAL_UNARY_MATH_ATAN,  HAL_UNARY_MATH_SIGMOID,
    HAL_UNARY_MATH_ERF,   HAL_UNARY_MATH_ERFINV,     HAL_UNARY_MATH_ABS,   HAL_UNARY_MATH_NEG,
    HAL_UNARY_MATH_SIGN,  HAL_UNARY_MATH_FLOOR,      HAL_UNARY_MATH_CEIL,  HAL_UNARY_MATH_ROUND,
    HAL_UNARY_MATH_TRUNC};

// The integer reference: two's complement at |dtype|'s width.
int64_t wrap(hal_dtype_t dtype, int64_t v) {
  switch (dtype) {
    case HAL_DTYPE_I32:
      return static_cast<int32_t>(static_cast<uint32_t>(v));
    case HAL_DTYPE_I8:
      return static_cast<int8_t>(static_cast<uint8_t>(v));
    case HAL_DTYPE_U8:
      return static_cast<uint8_t>(v);
    default:
      return v;
  }
}

int64_t integer_reference(hal_unary_math_t op, hal_dtype_t dtype, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  switch (op) {
    case HAL_UNARY_MATH_ABS:
      return wrap(dtype, static_cast<int64_t>(v < 0 ? 0 - u : u));
    case HAL_UNARY_MATH_NEG:
      return wrap(dtype, static_cast<int64_t>(0 - u));
    case HAL_UNARY_MATH_SIGN:
      return v > 0 ? 1 : (v < 0 ? -1 : 0);
    case HAL_UNARY_MATH_BITWISE_NOT:
      return wrap(dtype, static_cast<int64_t>(~u));
    case HAL_UNARY_MATH_LOGICAL_NOT:
      return v == 0 ? 1 : 0;
    case HAL_UNARY_MATH_ISFINITE:
      return 1;
    case HAL_UNARY_MATH_ISNAN:
    case HAL_UNARY_MATH_ISINF:
      return 0;
    default:  // floor, ceil, round, trunc of an integer
      return v;
  }
}

std::vector<int64_t> integer_edges(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_I64:
      return {0,
              1,
              -1,
              7,
              -7,
              std::numeric_limits<int64_t>::max(),
              std::numeric_limits<int64_t>::min(),
              std::numeric_limits<int64_t>::min() + 1};
    case HAL_DTYPE_I32:
      return {0,
              1,
              -1,
              7,
              -7,
              std::numeric_limits<int32_t>::max(),
              std::numeric_limits<int32_t>::min(),
              std::numeric_limits<int32_t>::min() + 1};
    case HAL_DTYPE_I8:
      return {0, 1, -1, 7, -7, 127, -128, -127};
    default:
      return {0, 1, 2, 7, 100, 127, 128, 255};
  }
}

}  // namespace

HALCONFORM_TEST("operators.unary_math.float_ops", "every float op x f32/f16/bf16 in its range",
                {}) {
  for (hal_dtype_t dtype : kFloats) {
    for (hal_unary_math_t op : kFloatOps) {
      check_float_op(ctx, op, dense(dtype, {3, 97}), dense(dtype, {3, 97}));
    }
  }
}

HALCONFORM_TEST("operators.unary_math.mixed_and_views",
                "x and out of different float dtypes; strided, transposed and broadcast views",
                {}) {
  for (hal_unary_math_t op : {HAL_UNARY_MATH_EXP, HAL_UNARY_MATH_LOG1P, HAL_UNARY_MATH_ROUND,
                              HAL_UNARY_MATH_ERFINV, HAL_UNARY_MATH_SIGMOID}) {
    check_float_op(ctx, op, dense(HAL_DTYPE_F16, {7, 31}), dense(HAL_DTYPE_F32, {7, 31}));
    check_float_op(ctx, op, dense(HAL_DTYPE_F32, {7, 31}), dense(HAL_DTYPE_BF16, {7, 31}));
    check_float_op(ctx, op, transposed(dense(HAL_DTYPE_F32, {9, 5, 7}), 0, 2),
                   padded(HAL_DTYPE_F32, {7, 5, 9}, 3));
  }
  // x broadcast (stride 0) over out's rows.
  hal_tensor_desc_t row = dense(HAL_DTYPE_F32, {4, 33});
  row.strides[0] = 0;
  const auto values = random_values(ctx.random(), 33, HAL_DTYPE_F32, -3, 3);
  std::vector<double> x(132);
  for (size_t i = 0; i < x.size(); ++i) x[i] = values[i % 33];
  const auto got = run(ctx, HAL_UNARY_MATH_TANH, row, dense(HAL_DTYPE_F32, {4, 33}), x);
  expect_close(got, float_expected(HAL_UNARY_MATH_TANH, x, HAL_DTYPE_F32),
               tolerance_for(HAL_DTYPE_F32), "tanh of a stride-0 x");
}

HALCONFORM_TEST("operators.unary_math.edge_values",
                "NaN, +-inf, +-0, denormals, the largest floats, round's ties", {}) {
  const std::vector<double> edges = {kNan,   kInf,  -kInf, 0.0,       -0.0,  1e-40,  -1e-40,
                                     3e38,   -3e38, 1.0,   -1.0,      0.5,   -0.5,   2.5,
                                     -2.5,   1.5,   -1.5,  0.4999,    1e-6,  -1e-6,  88.0,
                                     -104.0, 1e10,  -1e10, 8388609.0, 0.999, -0.999, 2.0};
  std::vector<double> x;
  for (double e : edges) x.push_back(round_to(HAL_DTYPE_F32, e));
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {static_cast<int64_t>(x.size())});
  const hal_tensor_desc_t bools = dense(HAL_DTYPE_BOOL, {static_cast<int64_t>(x.size())});
  for (hal_unary_math_t op : kFloatOps) {
    const auto got = run(ctx, op, layout, layout, x);
    expect_close(got, float_expected(op, x, HAL_DTYPE_F32), tolerance_of(op, HAL_DTYPE_F32),
                 "unary_math " + std::to_string(op) + " on the edge values");
  }
  for (hal_unary_math_t op : {HAL_UNARY_MATH_LOGICAL_NOT, HAL_UNARY_MATH_ISNAN,
                              HAL_UNARY_MATH_ISINF, HAL_UNARY_MATH_ISFINITE}) {
    const auto got = run(ctx, op, layout, bools, x);
    expect_close(got, float_expected(op, x, HAL_DTYPE_BOOL), {0, 0},
                 "unary_math " + std::to_string(op) + " on the edge values");
  }
  // The sign of zero where PyTorch keeps it: -x, round and trunc of small negatives.
  const std::vector<double> zeros = {0.0, -0.0};
  const std::vector<double> small = {-0.4, 0.3, -0.0};
  for (hal_unary_math_t op : {HAL_UNARY_MATH_NEG, HAL_UNARY_MATH_ROUND, HAL_UNARY_MATH_TRUNC}) {
    const std::vector<double>& inputs = op == HAL_UNARY_MATH_NEG ? zeros : small;
    const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {static_cast<int64_t>(inputs.size())});
    const auto got = run(ctx, op, layout, layout, inputs);
    for (size_t i = 0; i < got.size(); ++i) {
      const double expected = float_reference(op, round_to(HAL_DTYPE_F32, inputs[i]));
      HC_REQUIRE(got[i] == 0 && std::signbit(got[i]) == std::signbit(expected),
                 "unary_math " + std::to_string(op) + " of " + std::to_string(inputs[i]) +
                     ": the zero's sign");
    }
  }
}

HALCONFORM_TEST("operators.unary_math.integers",
                "abs, neg, sign, rounding, bitwise_not and the predicates on i32/i64/i8/u8 with "
                "wrap-around at each width; exact",
                {}) {
  for (hal_dtype_t dtype : kIntegers) {
    std::vector<int64_t> x = integer_edges(dtype);
    const auto random = random_ints(ctx.random(), 24, dtype == HAL_DTYPE_U8 ? 0 : -100, 100);
    for (double r : random) x.push_back(static_cast<int64_t>(r));
    const hal_tensor_desc_t layout = dense(dtype, {static_cast<int64_t>(x.size())});
    const hal_tensor_desc_t bools = dense(HAL_DTYPE_BOOL, {static_cast<int64_t>(x.size())});
    for (hal_unary_math_t op :
         {HAL_UNARY_MATH_ABS, HAL_UNARY_MATH_NEG, HAL_UNARY_MATH_SIGN, HAL_UNARY_MATH_FLOOR,
          HAL_UNARY_MATH_CEIL, HAL_UNARY_MATH_ROUND, HAL_UNARY_MATH_TRUNC,
          HAL_UNARY_MATH_BITWISE_NOT, HAL_UNARY_MATH_LOGICAL_NOT, HAL_UNARY_MATH_ISNAN,
          HAL_UNARY_MATH_ISINF, HAL_UNARY_MATH_ISFINITE}) {
      const hal_tensor_desc_t out_layout = is_predicate(op) ? bools : layout;
      hal_op_unary_math_desc_t desc = math_desc(op, layout, out_layout);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      DeviceTensor dx(ctx.device(), layout), dout(ctx.device(), out_layout);
      dx.upload_integers(x);
      execute(ctx, plan, {dx.data(), dout.data()});
      std::vector<int64_t> expected(x.size());
      for (size_t i = 0; i < x.size(); ++i) expected[i] = integer_reference(op, dtype, x[i]);
      expect_equal_integers(dout.download_integers(), expected,
                            "unary_math " + std::to_string(op) + " on " + label(layout));
    }
  }
}

HALCONFORM_TEST("operators.unary_math.bool",
                "logical_not and bitwise_not of bool (any nonzero byte is true), the predicates",
                {}) {
  const std::vector<int64_t> bytes = {0, 1, 2, 255, 0, 1};
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_BOOL, {6});
  for (hal_unary_math_t op : {HAL_UNARY_MATH_LOGICAL_NOT, HAL_UNARY_MATH_BITWISE_NOT,
                              HAL_UNARY_MATH_ISNAN, HAL_UNARY_MATH_ISFINITE}) {
    hal_op_unary_math_desc_t desc = math_desc(op, layout, layout);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    DeviceTensor dx(ctx.device(), layout), dout(ctx.device(), layout);
    dx.upload_integers(bytes);
    execute(ctx, plan, {dx.data(), dout.data()});
    std::vector<int64_t> expected(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) {
      const bool truth = bytes[i] != 0;
      expected[i] = op == HAL_UNARY_MATH_ISNAN ? 0 : (op == HAL_UNARY_MATH_ISFINITE ? 1 : !truth);
    }
    expect_equal_integers(dout.download_integers(), expected,
                          "unary_math " + std::to_string(op) + " on bool");
  }
}

HALCONFORM_TEST("operators.unary_math.in_place_and_empty", "out = x exactly; rank 0; empty", {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_BF16, {5, 40});
  hal_op_unary_math_desc_t desc = math_desc(HAL_UNARY_MATH_EXP, layout, layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto x = random_values(ctx.random(), 200, HAL_DTYPE_BF16, -3, 3);
  DeviceTensor dx(ctx.device(), layout, x);
  execute(ctx, plan, {dx.data(), dx.data()});
  expect_close(dx.download(), float_expected(HAL_UNARY_MATH_EXP, x, HAL_DTYPE_BF16),
               tolerance_for(HAL_DTYPE_BF16), "exp in place");
  const auto scalar =
      run(ctx, HAL_UNARY_MATH_SQRT, dense(HAL_DTYPE_F32, {}), dense(HAL_DTYPE_F16, {}), {2.0});
  expect_close(scalar, {round_to(HAL_DTYPE_F16, std::sqrt(2.0))}, tolerance_for(HAL_DTYPE_F16),
               "sqrt of a rank-0 tensor");
  run(ctx, HAL_UNARY_MATH_LOG, dense(HAL_DTYPE_F32, {0, 3}), dense(HAL_DTYPE_F32, {0, 3}), {});
}

HALCONFORM_TEST("operators.unary_math.deterministic", "two runs give identical bits", {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {3, 129});
  hal_op_unary_math_desc_t desc = math_desc(HAL_UNARY_MATH_ERFINV, layout, layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
  const auto x = random_values(ctx.random(), numel(layout), HAL_DTYPE_F32, -0.99, 0.99);
  DeviceTensor dx(ctx.device(), layout, x), d1(ctx.device(), layout), d2(ctx.device(), layout);
  execute(ctx, plan, {dx.data(), d1.data()});
  execute(ctx, plan, {dx.data(), d2.data()});
  expect_identical(d1.download(), d2.download(), "erfinv deterministic");
}

HALCONFORM_TEST("operators.unary_math.errors", "each descriptor rule is refused", {}) {
  const hal_tensor_desc_t f32 = dense(HAL_DTYPE_F32, {4, 5});
  const hal_tensor_desc_t i32 = dense(HAL_DTYPE_I32, {4, 5});
  const hal_tensor_desc_t boolean = dense(HAL_DTYPE_BOOL, {4, 5});
  const auto refused = [&](hal_op_unary_math_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  hal_op_unary_math_desc_t desc = math_desc(HAL_UNARY_MATH_EXP, f32, f32);
  desc.op = HAL_UNARY_MATH_COUNT;
  refused(desc, "unknown op");
  desc = math_desc(HAL_UNARY_MATH_EXP, f32, f32);
  desc.reserved = 1;
  refused(desc, "reserved");
  refused(math_desc(HAL_UNARY_MATH_EXP, i32, f32), "exp of an integer");
  refused(math_desc(HAL_UNARY_MATH_EXP, dense(HAL_DTYPE_F64, {4, 5}), f32), "f64 x");
  refused(math_desc(HAL_UNARY_MATH_ABS, i32, dense(HAL_DTYPE_I64, {4, 5})),
          "integer abs into another dtype");
  refused(math_desc(HAL_UNARY_MATH_ABS, boolean, boolean), "abs of bool");
  refused(math_desc(HAL_UNARY_MATH_ISNAN, f32, f32), "isnan into a float");
  refused(math_desc(HAL_UNARY_MATH_BITWISE_NOT, f32, f32), "bitwise_not of a float");
  refused(math_desc(HAL_UNARY_MATH_BITWISE_NOT, i32, boolean), "bitwise_not changing dtype");
  refused(math_desc(HAL_UNARY_MATH_EXP, f32, dense(HAL_DTYPE_F32, {5, 4})), "out shape");
  hal_tensor_desc_t overlapping = f32;
  overlapping.strides[0] = 0;
  refused(math_desc(HAL_UNARY_MATH_EXP, f32, overlapping), "out with stride 0");
}
