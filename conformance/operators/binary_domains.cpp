// HAL_OP_BINARY's appended ops and domains, and HAL_OP_BINARY_SCALAR, against
// float64 and exact integer references: pow, fmod, remainder, floor and trunc
// division and atan2 in f32/f16/bf16 (PyTorch's sign rules); integer
// arithmetic with wrap-around, division by 0 and the most negative value
// over -1 at every width; comparisons in the float and the i64 domain (NaN,
// +-0, values f32 cannot tell apart); logical and bitwise ops on integers and
// bool (any nonzero byte true); broadcasting and strided views; a scalar on
// either side; each descriptor rule.
#include <cmath>
#include <cstdint>
#include <limits>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kFloats[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_dtype_t kIntegers[] = {HAL_DTYPE_I32, HAL_DTYPE_I64, HAL_DTYPE_I8, HAL_DTYPE_U8};

hal_op_binary_desc_t binary_desc(hal_binary_op_t op, const hal_tensor_desc_t& a,
                                 const hal_tensor_desc_t& b, const hal_tensor_desc_t& out,
                                 float alpha = 1.0f) {
  hal_op_binary_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_BINARY;
  desc.op = op;
  desc.alpha = alpha;
  desc.a = a;
  desc.b = b;
  desc.out = out;
  return desc;
}

hal_op_binary_scalar_desc_t scalar_desc(hal_binary_op_t op, const hal_tensor_desc_t& x,
                                        const hal_tensor_desc_t& out, bool scalar_first,
                                        bool scalar_is_float, float alpha = 1.0f) {
  hal_op_binary_scalar_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_BINARY_SCALAR;
  desc.op = op;
  desc.alpha = alpha;
  desc.scalar_first = scalar_first ? 1 : 0;
  desc.scalar_is_float = scalar_is_float ? 1 : 0;
  desc.x = x;
  desc.out = out;
  return desc;
}

// Python's a // b computed in float64 (PyTorch's algorithm: the floor of the
// exact quotient, not of the rounded one).
double floor_divide(double a, double b) {
  if (b == 0) return a / b;
  const double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(0.0, a / b);
  double floored = std::floor(div);
  if (div - floored > 0.5) floored += 1;
  return floored;
}

double float_reference(hal_binary_op_t op, double a, double b) {
  switch (op) {
    case HAL_BINARY_ADD:
      return a + b;
    case HAL_BINARY_SUB:
      return a - b;
    case HAL_BINARY_MUL:
      return a * b;
    case HAL_BINARY_DIV:
      return a / b;
    case HAL_BINARY_MAX:
      return std::isnan(a) || std::isnan(b) ? kNan : std::fmax(a, b);
    case HAL_BINARY_MIN:
      return std::isnan(a) || std::isnan(b) ? kNan : std::fmin(a, b);
    case HAL_BINARY_POW:
      return std::pow(a, b);
    case HAL_BINARY_FMOD:
      return std::fmod(a, b);
    case HAL_BINARY_REMAINDER: {
      const double mod = std::fmod(a, b);
      return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;
    }
    case HAL_BINARY_FLOOR_DIVIDE:
      return floor_divide(a, b);
    case HAL_BINARY_TRUNC_DIVIDE:
      // The truncation of the quotient rounded to f32 (the op divides in f32).
      return std::trunc(static_cast<double>(static_cast<float>(a / b)));
    case HAL_BINARY_ATAN2:
      return std::atan2(a, b);
    case HAL_BINARY_EQ:
      return a == b;
    case HAL_BINARY_NE:
      return a != b;
    case HAL_BINARY_LT:
      return a < b;
    case HAL_BINARY_LE:
      return a <= b;
    case HAL_BINARY_GT:
      return a > b;
    case HAL_BINARY_GE:
      return a >= b;
    case HAL_BINARY_LOGICAL_AND:
      return (a != 0) && (b != 0);
    case HAL_BINARY_LOGICAL_OR:
      return (a != 0) || (b != 0);
    case HAL_BINARY_LOGICAL_XOR:
      return (a != 0) != (b != 0);
    default:
      return kNan;
  }
}

int64_t wrap(hal_dtype_t dtype, int64_t v) {
  switch (dtype) {
    case HAL_DTYPE_I32:
      return static_cast<int32_t>(static_cast<uint32_t>(v));
    case HAL_DTYPE_I8:
      return static_cast<int8_t>(static_cast<uint8_t>(v));
    case HAL_DTYPE_U8:
      return static_cast<uint8_t>(v);
    case HAL_DTYPE_BOOL:
      return v != 0 ? 1 : 0;
    default:
      return v;
  }
}

// The integer reference in i64 modulo 2^64 (uint64 arithmetic), written from
// SPEC.md §17.6.6: division and remainder by 0 give 0; PyTorch's signs.
int64_t integer_reference(hal_binary_op_t op, int64_t a, int64_t b) {
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case HAL_BINARY_ADD:
      return static_cast<int64_t>(ua + ub);
    case HAL_BINARY_SUB:
      return static_cast<int64_t>(ua - ub);
    case HAL_BINARY_MUL:
      return static_cast<int64_t>(ua * ub);
    case HAL_BINARY_MAX:
      return a > b ? a : b;
    case HAL_BINARY_MIN:
      return a < b ? a : b;
    case HAL_BINARY_POW: {
      if (b < 0) return a == 1 ? 1 : (a == -1 ? (b % 2 != 0 ? -1 : 1) : 0);
      uint64_t result = 1;
      for (int64_t e = 0; e < b && e < 200; ++e) result *= ua;  // b is small in the tests
      return static_cast<int64_t>(result);
    }
    case HAL_BINARY_BITWISE_AND:
      return a & b;
    case HAL_BINARY_BITWISE_OR:
      return a | b;
    case HAL_BINARY_BITWISE_XOR:
      return a ^ b;
    default:
      break;
  }
  if (b == 0) return 0;
  // The one quotient i64 cannot hold: the most negative value over -1 (2^63
  // wraps to itself, remainder 0).
  const bool wraps = a == std::numeric_limits<int64_t>::min() && b == -1;
  const int64_t q = wraps ? a : a / b;  // truncated
  const int64_t r = wraps ? 0 : a % b;  // a's sign
  const bool adjust = r != 0 && ((r < 0) != (b < 0));
  switch (op) {
    case HAL_BINARY_TRUNC_DIVIDE:
      return q;
    case HAL_BINARY_FMOD:
      return r;
    case HAL_BINARY_REMAINDER:
      return adjust ? r + b : r;
    default:  // floor divide (q - 1 cannot overflow: adjust needs a nonzero remainder)
      return adjust ? q - 1 : q;
  }
}

bool is_comparison(hal_binary_op_t op) {
  return op >= HAL_BINARY_EQ && op <= HAL_BINARY_GE;
}

// A float-domain run: a and b float (or integer) values; out compared to the
// float64 reference rounded to out's dtype.
void run_float(TestContext& ctx, hal_binary_op_t op, const hal_tensor_desc_t& a_layout,
               const std::vector<double>& a, const hal_tensor_desc_t& b_layout,
               const std::vector<double>& b, const hal_tensor_desc_t& out_layout,
               Tolerance tolerance, float alpha = 1.0f) {
  hal_op_binary_desc_t desc = binary_desc(op, a_layout, b_layout, out_layout, alpha);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor da(ctx.device(), a_layout, a), db(ctx.device(), b_layout, b),
      dout(ctx.device(), out_layout);
  execute(ctx, plan, {da.data(), db.data(), dout.data()});
  std::vector<double> expected(static_cast<size_t>(numel(out_layout)));
  for (size_t i = 0; i < expected.size(); ++i) {
    const double va = a[static_cast<size_t>(broadcast_index(a_layout, out_layout, i))];
    const double vb = b[static_cast<size_t>(broadcast_index(b_layout, out_layout, i))];
    expected[i] = round_to(out_layout.dtype, alpha * float_reference(op, va, vb));
  }
  const std::string what = "binary " + std::to_string(op) + " " + label(a_layout) + " " +
                           label(b_layout) + " -> " + label(out_layout);
  expect_close(dout.download(), expected, tolerance, what);
  dout.check_untouched(what);
}

// An integer-domain (or bool-out) run with exact checking.
void run_integer(TestContext& ctx, hal_binary_op_t op, const hal_tensor_desc_t& a_layout,
                 const std::vector<int64_t>& a, const hal_tensor_desc_t& b_layout,
                 const std::vector<int64_t>& b, const hal_tensor_desc_t& out_layout) {
  hal_op_binary_desc_t desc = binary_desc(op, a_layout, b_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor da(ctx.device(), a_layout), db(ctx.device(), b_layout),
      dout(ctx.device(), out_layout);
  da.upload_integers(a);
  db.upload_integers(b);
  execute(ctx, plan, {da.data(), db.data(), dout.data()});
  std::vector<int64_t> expected(static_cast<size_t>(numel(out_layout)));
  for (size_t i = 0; i < expected.size(); ++i) {
    // A bool reads as 0/1 whatever its byte.
    int64_t va = a[static_cast<size_t>(broadcast_index(a_layout, out_layout, i))];
    int64_t vb = b[static_cast<size_t>(broadcast_index(b_layout, out_layout, i))];
    if (a_layout.dtype == HAL_DTYPE_BOOL) va = va != 0;
    if (b_layout.dtype == HAL_DTYPE_BOOL) vb = vb != 0;
    if (is_comparison(op)) {
      switch (op) {
        case HAL_BINARY_EQ:
          expected[i] = va == vb;
          break;
        case HAL_BINARY_NE:
          expected[i] = va != vb;
          break;
        case HAL_BINARY_LT:
          expected[i] = va < vb;
          break;
        case HAL_BINARY_LE:
          expected[i] = va <= vb;
          break;
        case HAL_BINARY_GT:
          expected[i] = va > vb;
          break;
        default:
          expected[i] = va >= vb;
          break;
      }
    } else if (op >= HAL_BINARY_LOGICAL_AND && op <= HAL_BINARY_LOGICAL_XOR) {
      expected[i] = static_cast<int64_t>(float_reference(op, va != 0, vb != 0));
    } else {
      expected[i] = wrap(out_layout.dtype, integer_reference(op, va, vb));
    }
  }
  const std::string what = "binary " + std::to_string(op) + " " + label(a_layout) + " " +
                           label(b_layout) + " -> " + label(out_layout);
  expect_equal_integers(dout.download_integers(), expected, what);
  dout.check_untouched(what);
}

std::vector<int64_t> edges(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_I64:
      return {0,
              1,
              -1,
              2,
              -7,
              13,
              std::numeric_limits<int64_t>::max(),
              std::numeric_limits<int64_t>::min()};
    case HAL_DTYPE_I32:
      return {0,
              1,
              -1,
              2,
              -7,
              13,
              std::numeric_limits<int32_t>::max(),
              std::numeric_limits<int32_t>::min()};
    case HAL_DTYPE_I8:
      return {0, 1, -1, 2, -7, 13, 127, -128};
    default:
      return {0, 1, 2, 3, 7, 13, 128, 255};
  }
}

// Every pair of the edges (a row-major [n, n] grid: a varies along rows).
void pairs(const std::vector<int64_t>& values, std::vector<int64_t>* a, std::vector<int64_t>* b) {
  for (int64_t x : values) {
    for (int64_t y : values) {
      a->push_back(x);
      b->push_back(y);
    }
  }
}

}  // namespace

HALCONFORM_TEST("operators.binary.float_math",
                "pow, fmod, remainder, floor/trunc divide, atan2 x f32/f16/bf16, mixed dtypes",
                {}) {
  for (hal_dtype_t dtype : kFloats) {
    const hal_tensor_desc_t layout = dense(dtype, {4, 75});
    const int64_t n = numel(layout);
    // pow: a positive base; the others: divisors away from 0, both signs.
    const auto base = random_values(ctx.random(), n, dtype, 0.1, 3);
    const auto exponent = random_values(ctx.random(), n, dtype, -3, 3);
    run_float(ctx, HAL_BINARY_POW, layout, base, layout, exponent, layout, tolerance_for(dtype, 4));
    const auto a = random_values(ctx.random(), n, dtype, -100, 100);
    auto b = random_values(ctx.random(), n, dtype, 0.5, 10);
    for (size_t i = 0; i < b.size(); i += 2) b[i] = -b[i];
    for (hal_binary_op_t op : {HAL_BINARY_FMOD, HAL_BINARY_REMAINDER, HAL_BINARY_FLOOR_DIVIDE,
                               HAL_BINARY_TRUNC_DIVIDE, HAL_BINARY_ATAN2}) {
      run_float(ctx, op, layout, a, layout, b, layout, tolerance_for(dtype, 2));
    }
  }
  // Mixed: f16 a, bf16 b, f32 out; and an integer operand in the float domain.
  const auto a = random_values(ctx.random(), 60, HAL_DTYPE_F16, -20, 20);
  auto b = random_values(ctx.random(), 60, HAL_DTYPE_BF16, 1, 4);
  run_float(ctx, HAL_BINARY_REMAINDER, dense(HAL_DTYPE_F16, {60}), a, dense(HAL_DTYPE_BF16, {60}),
            b, dense(HAL_DTYPE_F32, {60}), tolerance_for(HAL_DTYPE_F32, 2));
  const auto ints = random_ints(ctx.random(), 60, -50, 50);
  run_float(ctx, HAL_BINARY_DIV, dense(HAL_DTYPE_I32, {60}), ints, dense(HAL_DTYPE_BF16, {60}), b,
            dense(HAL_DTYPE_F32, {60}), tolerance_for(HAL_DTYPE_F32, 2), 0.5f);
  run_float(ctx, HAL_BINARY_MUL, dense(HAL_DTYPE_BOOL, {60}), random_ints(ctx.random(), 60, 0, 1),
            dense(HAL_DTYPE_F16, {60}), a, dense(HAL_DTYPE_F16, {60}),
            tolerance_for(HAL_DTYPE_F16, 2));
}

HALCONFORM_TEST("operators.binary.float_edges",
                "PyTorch's results on NaN, +-inf, +-0 and the signs of remainder and floor "
                "division",
                {}) {
  const std::vector<double> values = {kNan, kInf, -kInf, 0.0,  -0.0, 1.0,
                                      -1.0, 0.1,  2.5,   -3.0, 1e30};
  std::vector<double> a, b;
  for (double x : values) {
    for (double y : values) {
      a.push_back(round_to(HAL_DTYPE_F32, x));
      b.push_back(round_to(HAL_DTYPE_F32, y));
    }
  }
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {static_cast<int64_t>(a.size())});
  for (hal_binary_op_t op :
       {HAL_BINARY_POW, HAL_BINARY_FMOD, HAL_BINARY_REMAINDER, HAL_BINARY_FLOOR_DIVIDE,
        HAL_BINARY_TRUNC_DIVIDE, HAL_BINARY_ATAN2, HAL_BINARY_MAX, HAL_BINARY_MIN}) {
    run_float(ctx, op, layout, a, layout, b, layout, tolerance_for(HAL_DTYPE_F32, 2));
  }
  // 1 // 0.1 is 9 (the quotient 9.99999985 floors), trunc(1 / 0.1) is 10 (f32 rounds it up).
  run_float(ctx, HAL_BINARY_FLOOR_DIVIDE, dense(HAL_DTYPE_F32, {1}), {1.0},
            dense(HAL_DTYPE_F32, {1}), {round_to(HAL_DTYPE_F32, 0.1)}, dense(HAL_DTYPE_F32, {1}),
            {0, 0});
  // pow of a negative base with integral exponents.
  run_float(ctx, HAL_BINARY_POW, dense(HAL_DTYPE_F32, {4}), {-2.0, -2.0, -0.5, -3.0},
            dense(HAL_DTYPE_F32, {4}), {3.0, 2.0, -2.0, 0.5}, dense(HAL_DTYPE_F32, {4}),
            tolerance_for(HAL_DTYPE_F32));
}

HALCONFORM_TEST("operators.binary.integers",
                "integer arithmetic at every width: wrap-around, division by 0, MIN / -1, pow; "
                "mixed widths and bool operands; exact",
                {}) {
  for (hal_dtype_t dtype : kIntegers) {
    std::vector<int64_t> a, b;
    pairs(edges(dtype), &a, &b);
    const hal_tensor_desc_t layout = dense(dtype, {static_cast<int64_t>(a.size())});
    for (hal_binary_op_t op :
         {HAL_BINARY_ADD, HAL_BINARY_SUB, HAL_BINARY_MUL, HAL_BINARY_MAX, HAL_BINARY_MIN,
          HAL_BINARY_FMOD, HAL_BINARY_REMAINDER, HAL_BINARY_FLOOR_DIVIDE, HAL_BINARY_TRUNC_DIVIDE,
          HAL_BINARY_BITWISE_AND, HAL_BINARY_BITWISE_OR, HAL_BINARY_BITWISE_XOR}) {
      run_integer(ctx, op, layout, a, layout, b, layout);
    }
    // pow with small exponents (negative ones where the dtype has them).
    std::vector<int64_t> exponents;
    const int64_t lowest = dtype == HAL_DTYPE_U8 ? 0 : -2;
    for (size_t i = 0; i < b.size(); ++i) exponents.push_back(static_cast<int64_t>(i % 9) + lowest);
    run_integer(ctx, HAL_BINARY_POW, layout, a, layout, exponents, layout);
  }
  // Mixed widths into i32 (wrapping), bool operands.
  std::vector<int64_t> a8, b64;
  for (int i = 0; i < 40; ++i) {
    a8.push_back(static_cast<int8_t>(i * 37 - 100));
    b64.push_back(static_cast<int64_t>(i) * 123456789123LL - 999);
  }
  run_integer(ctx, HAL_BINARY_ADD, dense(HAL_DTYPE_I8, {40}), a8, dense(HAL_DTYPE_I64, {40}), b64,
              dense(HAL_DTYPE_I32, {40}));
  run_integer(ctx, HAL_BINARY_MUL, dense(HAL_DTYPE_BOOL, {40}), std::vector<int64_t>(40, 2),
              dense(HAL_DTYPE_I64, {40}), b64, dense(HAL_DTYPE_I64, {40}));
}

HALCONFORM_TEST("operators.binary.comparisons",
                "eq..ge in the float domain (NaN, +-0, mixed dtypes) and the i64 domain (values "
                "f32 rounds together); bool out",
                {}) {
  const std::vector<double> values = {kNan, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 0.5};
  std::vector<double> a, b;
  for (double x : values) {
    for (double y : values) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  const auto n = static_cast<int64_t>(a.size());
  for (hal_binary_op_t op :
       {HAL_BINARY_EQ, HAL_BINARY_NE, HAL_BINARY_LT, HAL_BINARY_LE, HAL_BINARY_GT, HAL_BINARY_GE}) {
    run_float(ctx, op, dense(HAL_DTYPE_F32, {n}), a, dense(HAL_DTYPE_BF16, {n}), b,
              dense(HAL_DTYPE_BOOL, {n}), {0, 0});
    // i64 values 2^53 apart by 1 (equal as floats) compare exactly.
    const int64_t big = (int64_t{1} << 53) + 1;
    std::vector<int64_t> ia = {big, big - 1, -big, 5, std::numeric_limits<int64_t>::max(), 0};
    std::vector<int64_t> ib = {big - 1, big, -big, 5, std::numeric_limits<int64_t>::min(), -0};
    run_integer(ctx, op, dense(HAL_DTYPE_I64, {6}), ia, dense(HAL_DTYPE_I64, {6}), ib,
                dense(HAL_DTYPE_BOOL, {6}));
    // u8 against i8: compared as integers (200 > -56).
    run_integer(ctx, op, dense(HAL_DTYPE_U8, {3}), {200, 0, 127}, dense(HAL_DTYPE_I8, {3}),
                {-56, 0, 127}, dense(HAL_DTYPE_BOOL, {3}));
  }
  // Broadcast: a column against a row, strided.
  const auto col = random_values(ctx.random(), 7, HAL_DTYPE_F16, -2, 2);
  const auto row = random_values(ctx.random(), 9, HAL_DTYPE_F32, -2, 2);
  run_float(ctx, HAL_BINARY_LT, dense(HAL_DTYPE_F16, {7, 1}), col, dense(HAL_DTYPE_F32, {1, 9}),
            row, padded(HAL_DTYPE_BOOL, {7, 9}, 5), {0, 0});
}

HALCONFORM_TEST("operators.binary.logical_bitwise",
                "logical and/or/xor (NaN and any nonzero byte are true), bitwise ops on bool", {}) {
  const std::vector<double> values = {kNan, 0.0, -0.0, 1.0, -2.5};
  std::vector<double> a, b;
  for (double x : values) {
    for (double y : values) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  const auto n = static_cast<int64_t>(a.size());
  for (hal_binary_op_t op :
       {HAL_BINARY_LOGICAL_AND, HAL_BINARY_LOGICAL_OR, HAL_BINARY_LOGICAL_XOR}) {
    run_float(ctx, op, dense(HAL_DTYPE_F32, {n}), a, dense(HAL_DTYPE_F16, {n}), b,
              dense(HAL_DTYPE_BOOL, {n}), {0, 0});
    run_integer(ctx, op, dense(HAL_DTYPE_BOOL, {4}), {0, 2, 255, 1}, dense(HAL_DTYPE_I32, {4}),
                {7, 0, -1, 0}, dense(HAL_DTYPE_BOOL, {4}));
  }
  for (hal_binary_op_t op :
       {HAL_BINARY_BITWISE_AND, HAL_BINARY_BITWISE_OR, HAL_BINARY_BITWISE_XOR}) {
    run_integer(ctx, op, dense(HAL_DTYPE_BOOL, {4}), {0, 1, 0, 1}, dense(HAL_DTYPE_BOOL, {4}),
                {0, 0, 1, 1}, dense(HAL_DTYPE_BOOL, {4}));
    run_integer(ctx, op, dense(HAL_DTYPE_U8, {3}), {0xf0, 0x0f, 0xff}, dense(HAL_DTYPE_BOOL, {3}),
                {1, 1, 0}, dense(HAL_DTYPE_U8, {3}));
  }
}

HALCONFORM_TEST("operators.binary_scalar.forward",
                "x OP s and s OP x, float and integer scalars, in place, strided", {}) {
  const auto run = [&](hal_binary_op_t op, const hal_tensor_desc_t& x_layout,
                       const std::vector<double>& x, const hal_tensor_desc_t& out_layout,
                       bool scalar_first, bool scalar_is_float, hal_op_scalar_t s, double sv,
                       float alpha, Tolerance tolerance, bool in_place = false) {
    hal_op_binary_scalar_desc_t desc =
        scalar_desc(op, x_layout, out_layout, scalar_first, scalar_is_float, alpha);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    DeviceTensor dx(ctx.device(), x_layout, x), dout(ctx.device(), out_layout);
    void* out = in_place ? dx.data() : dout.data();
    execute(ctx, plan, {dx.data(), out}, {s});
    const bool bool_out = out_layout.dtype == HAL_DTYPE_BOOL;
    const bool integer_out =
        !bool_out && (out_layout.dtype == HAL_DTYPE_I32 || out_layout.dtype == HAL_DTYPE_I64);
    std::vector<double> expected(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      if (integer_out) {  // the integer domain's own rules (x // 0 is 0)
        const auto xi = static_cast<int64_t>(x[i]), si = static_cast<int64_t>(sv);
        expected[i] = static_cast<double>(scalar_first ? integer_reference(op, si, xi)
                                                       : integer_reference(op, xi, si));
        continue;
      }
      const double v = scalar_first ? float_reference(op, sv, x[i]) : float_reference(op, x[i], sv);
      expected[i] = round_to(out_layout.dtype, bool_out ? v : alpha * v);
    }
    expect_close(in_place ? dx.download() : dout.download(), expected, tolerance,
                 "binary_scalar " + std::to_string(op) + " " + label(x_layout));
  };
  hal_op_scalar_t half{};
  half.f64 = 0.5;
  hal_op_scalar_t three{};
  three.i64 = 3;
  const hal_tensor_desc_t f16 = dense(HAL_DTYPE_F16, {5, 37});
  const auto x = random_values(ctx.random(), numel(f16), HAL_DTYPE_F16, -4, 4);
  run(HAL_BINARY_MUL, f16, x, f16, false, true, half, 0.5, 1.0f, tolerance_for(HAL_DTYPE_F16, 2));
  run(HAL_BINARY_SUB, f16, x, dense(HAL_DTYPE_F32, {5, 37}), true, true, half, 0.5, 2.0f,
      tolerance_for(HAL_DTYPE_F32, 2));
  run(HAL_BINARY_POW, f16, x, f16, false, false, three, 3, 1.0f, tolerance_for(HAL_DTYPE_F16, 2));
  run(HAL_BINARY_GT, f16, x, dense(HAL_DTYPE_BOOL, {5, 37}), false, true, half, 0.5, 1.0f, {0, 0});
  run(HAL_BINARY_DIV, f16, x, f16, false, true, half, 0.5, 1.0f, tolerance_for(HAL_DTYPE_F16, 2),
      true);
  // An integer tensor with a float scalar computes in floats (PyTorch: int * 0.5 is float).
  const hal_tensor_desc_t i32 = padded(HAL_DTYPE_I32, {3, 11}, 2);
  const auto ints = random_ints(ctx.random(), 33, -40, 40);
  run(HAL_BINARY_MUL, i32, ints, dense(HAL_DTYPE_F32, {3, 11}), false, true, half, 0.5, 1.0f,
      tolerance_for(HAL_DTYPE_F32, 2));
  run(HAL_BINARY_REMAINDER, i32, ints, dense(HAL_DTYPE_I32, {3, 11}), false, false, three, 3, 1.0f,
      {0, 0});
  run(HAL_BINARY_FLOOR_DIVIDE, i32, ints, dense(HAL_DTYPE_I64, {3, 11}), true, false, three, 3,
      1.0f, {0, 0});
  run(HAL_BINARY_EQ, i32, ints, dense(HAL_DTYPE_BOOL, {3, 11}), false, false, three, 3, 1.0f,
      {0, 0});
}

HALCONFORM_TEST("operators.binary.domain_errors", "each dtype rule of the appended ops", {}) {
  const hal_tensor_desc_t f32 = dense(HAL_DTYPE_F32, {4, 5});
  const hal_tensor_desc_t i32 = dense(HAL_DTYPE_I32, {4, 5});
  const hal_tensor_desc_t boolean = dense(HAL_DTYPE_BOOL, {4, 5});
  const auto refused = [&](const hal_op_header_t* header, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  const auto binary = [&](hal_binary_op_t op, const hal_tensor_desc_t& a,
                          const hal_tensor_desc_t& b, const hal_tensor_desc_t& out,
                          const char* rule, float alpha = 1.0f) {
    hal_op_binary_desc_t desc = binary_desc(op, a, b, out, alpha);
    refused(&desc.header, rule);
  };
  binary(HAL_BINARY_ADD, i32, i32, i32, "alpha on integers", 2.0f);
  binary(HAL_BINARY_DIV, i32, i32, i32, "integer DIV");
  binary(HAL_BINARY_ATAN2, i32, i32, i32, "integer ATAN2");
  binary(HAL_BINARY_ADD, f32, i32, i32, "a float into an integer out");
  binary(HAL_BINARY_ADD, f32, f32, boolean, "arithmetic into bool");
  binary(HAL_BINARY_LT, f32, f32, f32, "a comparison into a float");
  binary(HAL_BINARY_LT, f32, f32, boolean, "alpha on a comparison", 0.5f);
  binary(HAL_BINARY_LOGICAL_AND, i32, i32, i32, "logical into an integer");
  binary(HAL_BINARY_BITWISE_AND, f32, i32, i32, "bitwise on a float");
  binary(HAL_BINARY_BITWISE_OR, i32, i32, f32, "bitwise into a float");
  binary(HAL_BINARY_EQ, dense(HAL_DTYPE_F64, {4, 5}), f32, boolean, "f64 operand");
  hal_op_binary_desc_t unknown = binary_desc(HAL_BINARY_ADD, f32, f32, f32);
  unknown.op = HAL_BINARY_OP_COUNT;
  refused(&unknown.header, "unknown op");

  hal_op_binary_scalar_desc_t s = scalar_desc(HAL_BINARY_ADD, f32, f32, false, true);
  s.scalar_first = 2;
  refused(&s.header, "scalar_first not 0/1");
  s = scalar_desc(HAL_BINARY_ADD, f32, f32, false, true);
  s.scalar_is_float = 2;
  refused(&s.header, "scalar_is_float not 0/1");
  s = scalar_desc(HAL_BINARY_ADD, i32, i32, false, true);
  refused(&s.header, "a float scalar into an integer out");
  s = scalar_desc(HAL_BINARY_ADD, f32, dense(HAL_DTYPE_F32, {5, 4}), false, true);
  refused(&s.header, "out shape");
  s = scalar_desc(HAL_BINARY_BITWISE_AND, i32, i32, false, true);
  refused(&s.header, "bitwise with a float scalar");
}
