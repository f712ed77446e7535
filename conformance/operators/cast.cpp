// HAL_OP_CAST and HAL_OP_PERMUTE against a float64 host reference written
// from the rules (round to nearest even onto each float format's grid;
// float to integer truncates toward zero, saturating, NaN to 0; integer to
// integer saturates): every dtype pair, special values, broadcast and
// strided views, permutations of ranks 1..8, rank 0, empty, errors.
#include <cmath>
#include <iterator>
#include <limits>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kAll[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16,
                                HAL_DTYPE_F64, HAL_DTYPE_I32, HAL_DTYPE_I64,
                                HAL_DTYPE_I8,  HAL_DTYPE_U8,  HAL_DTYPE_BOOL};

// |v| rounded to nearest even onto a binary format of |precision| significand
// bits, smallest normal exponent |emin| and largest finite |max_finite|.
double round_binary(double v, int precision, int emin, double max_finite) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  int exponent = 0;
  std::frexp(v, &exponent);  // |v| = m * 2^exponent, m in [0.5, 1)
  const int e = std::max(exponent - 1, emin);
  const double quantum = std::ldexp(1.0, e - (precision - 1));
  const double rounded = std::nearbyint(v / quantum) * quantum;  // exact scaling
  if (std::fabs(rounded) > max_finite) return std::copysign(HUGE_VAL, v);
  return rounded;
}

void integer_range(hal_dtype_t dtype, double* low, double* high) {
  switch (dtype) {
    case HAL_DTYPE_I32:
      *low = -2147483648.0;
      *high = 2147483647.0;
      break;
    case HAL_DTYPE_I64:
      *low = -9223372036854775808.0;
      *high = 9223372036854775807.0;  // rounds to 2^63 as a double
      break;
    case HAL_DTYPE_I8:
      *low = -128;
      *high = 127;
      break;
    default:
      *low = 0;
      *high = 255;
      break;
  }
}

// The value |v| (exact in float64: every test value is) becomes in |to|.
// A bool is true for any value but 0 (NaN included), as PyTorch's bool().
double convert(double v, hal_dtype_t to) {
  switch (to) {
    case HAL_DTYPE_BOOL:
      return v != 0 ? 1 : 0;
    case HAL_DTYPE_F64:
      return v;
    case HAL_DTYPE_F32:
      return round_binary(v, 24, -126, 3.4028234663852886e38);
    case HAL_DTYPE_F16:
      return round_binary(v, 11, -14, 65504.0);
    case HAL_DTYPE_BF16:
      return round_binary(v, 8, -126, 3.3895313892515355e38);
    default: {
      if (std::isnan(v)) return 0;
      double low, high;
      integer_range(to, &low, &high);
      const double truncated = std::trunc(v);
      return truncated < low ? low : (truncated > high ? high : truncated);
    }
  }
}

// Values of |dtype| covering its edge cases and random ones.
std::vector<double> values_of(TestContext& ctx, hal_dtype_t dtype, int64_t count) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> special;
  std::vector<double> random;
  switch (dtype) {
    case HAL_DTYPE_I8:
      special = {-128, 127, 0, -1, 1};
      random = random_ints(ctx.random(), count, -128, 127);
      break;
    case HAL_DTYPE_U8:
      special = {0, 255, 128, 1};
      random = random_ints(ctx.random(), count, 0, 255);
      break;
    case HAL_DTYPE_BOOL:
      // Stray nonzero bytes read as true.
      special = {0, 1, 2, 255};
      random = random_ints(ctx.random(), count, 0, 1);
      break;
    case HAL_DTYPE_I32:
      // 2^30 + 2^22 + 1 lies just above a bf16 tie (rounding through f32
      // would land on the tie); 2^24 + 1 is an f32 tie; 70000 overflows f16.
      special = {-2147483648.0,
                 2147483647.0,
                 1073741824.0 + 4194304.0 + 1.0,
                 16777217,
                 70000,
                 -300,
                 255,
                 256,
                 -129,
                 0};
      random = random_ints(ctx.random(), count, -100000, 100000);
      break;
    case HAL_DTYPE_I64:
      special = {-4503599627370497.0,
                 4503599627370497.0,
                 1099511627776.0 + 1.0,
                 3000000000.0,
                 -3000000000.0,
                 1073741824.0 + 4194304.0 + 1.0,
                 0};
      random = random_ints(ctx.random(), count, -(int64_t{1} << 40), int64_t{1} << 40);
      break;
    default:
      // Edge values; the random f64 ones are f32-exact (f64_rounding covers
      // full-precision doubles).
      special = {nan,  inf,   -inf,   0.0,   -0.0,   0.5,     -0.5,    1.999,
                 -2.7, 127.9, -128.9, 255.5, 300.75, -300.75, 65504.0, -65520.0,
                 1e10, -1e10, 3e9,    1e30,  -1e30,  2.5e-8};
      random = random_values(ctx.random(), count, dtype == HAL_DTYPE_F64 ? HAL_DTYPE_F32 : dtype,
                             -400, 400);
      break;
  }
  std::vector<double> values;
  for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
    values.push_back(i < special.size() ? round_to(dtype, special[i]) : random[i]);
  }
  return values;
}

hal_op_cast_desc_t cast_desc(hal_op_kind_t kind, const hal_tensor_desc_t& in,
                             const hal_tensor_desc_t& out) {
  hal_op_cast_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.in = in;
  desc.out = out;
  return desc;
}

void run_cast(TestContext& ctx, const hal_tensor_desc_t& in_layout,
              const hal_tensor_desc_t& out_layout, std::vector<double> in = {}) {
  hal_op_cast_desc_t desc = cast_desc(HAL_OP_CAST, in_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  if (in.empty()) in = values_of(ctx, in_layout.dtype, numel(in_layout));
  DeviceTensor din(ctx.device(), in_layout, in), dout(ctx.device(), out_layout);
  execute(ctx, plan, {din.data(), dout.data()});
  const auto stored = din.download();  // what the device holds (broadcast: one value)
  std::vector<double> expected(stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    const double value = in_layout.dtype == HAL_DTYPE_BOOL ? (stored[i] != 0) : stored[i];
    expected[i] = convert(value, out_layout.dtype);
  }
  const std::string what = "cast " + label(in_layout) + " -> " + label(out_layout);
  expect_close(dout.download(), expected, {0, 0}, what);
  dout.check_untouched(what);
}

hal_tensor_desc_t permuted_shape(const hal_tensor_desc_t& in, const std::vector<uint32_t>& perm,
                                 hal_dtype_t dtype) {
  std::vector<int64_t> shape;
  for (uint32_t p : perm) shape.push_back(in.shape[p]);
  return dense(dtype, shape);
}

// out[j0..] = in[i] with i_{perm[d]} = j_d.
std::vector<double> permute_reference(const std::vector<double>& in, const hal_tensor_desc_t& in_l,
                                      const std::vector<uint32_t>& perm, hal_dtype_t to) {
  const size_t rank = perm.size();
  std::vector<int64_t> out_shape(rank);
  for (size_t d = 0; d < rank; ++d) out_shape[d] = in_l.shape[perm[d]];
  std::vector<double> out(in.size());
  for (size_t j = 0; j < out.size(); ++j) {
    std::vector<int64_t> in_index(rank);
    int64_t rest = static_cast<int64_t>(j);
    for (size_t d = rank; d-- > 0;) {
      in_index[perm[d]] = rest % out_shape[d];
      rest /= out_shape[d];
    }
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d) flat = flat * in_l.shape[d] + in_index[d];
    out[j] = convert(in[static_cast<size_t>(flat)], to);
  }
  return out;
}

// Plans and checks one permute; |may_decline|: more than 4 dimensions stay
// after merging, which the portable implementation declines (UNSUPPORTED).
void run_permute(TestContext& ctx, const hal_tensor_desc_t& in_layout,
                 const std::vector<uint32_t>& perm, hal_dtype_t out_dtype,
                 bool may_decline = false) {
  const hal_tensor_desc_t out_layout = permuted_shape(in_layout, perm, out_dtype);
  hal_op_cast_desc_t desc = cast_desc(HAL_OP_PERMUTE, in_layout, out_layout);
  for (size_t d = 0; d < perm.size(); ++d) desc.perm[d] = perm[d];
  Plan plan;
  if (may_decline) {
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, plan.out());
    HC_REQUIRE(result == HAL_SUCCESS || result == HAL_ERROR_UNSUPPORTED,
               "permute of " + label(in_layout) + ": " + std::to_string(result));
    if (result != HAL_SUCCESS) {
      ctx.note("permute " + label(in_layout) + " declined (more than 4 dimensions)");
      return;
    }
  } else {
    plan_or_skip(ctx, &desc.header, plan);
  }
  const auto in = random_values(ctx.random(), numel(in_layout), in_layout.dtype, -3, 3);
  DeviceTensor din(ctx.device(), in_layout, in), dout(ctx.device(), out_layout);
  execute(ctx, plan, {din.data(), dout.data()});
  const std::string what = "permute " + label(in_layout) + " -> " + label(out_layout);
  expect_close(dout.download(), permute_reference(in, in_layout, perm, out_dtype), {0, 0}, what);
  dout.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.cast.every_pair", "every dtype to every dtype, edge values, exact", {}) {
  for (hal_dtype_t from : kAll) {
    for (hal_dtype_t to : kAll) run_cast(ctx, dense(from, {61}), dense(to, {61}));
  }
}

HALCONFORM_TEST("operators.cast.f64_rounding", "full-precision f64 rounds once to f32/f16/bf16",
                {}) {
  auto values = random_values(ctx.random(), 257, HAL_DTYPE_F64, -1e3, 1e3);
  // Just past a half-way point of bf16 (resp. f16, f32): rounding through
  // f32 (resp. through nothing wider) would land on the tie and round to even.
  const double tiny = std::ldexp(1.0, -40);
  const double near_ties[] = {
      1 + std::ldexp(1.0, -8) + tiny,  -(1 + std::ldexp(1.0, -8) + tiny),
      1 + std::ldexp(1.0, -11) + tiny, 3 * (1 + std::ldexp(1.0, -11)) - tiny,
      1 + std::ldexp(1.0, -24) + tiny, 1 + 3 * std::ldexp(1.0, -8) - tiny};
  for (size_t i = 0; i < std::size(near_ties); ++i) values[i] = near_ties[i];
  for (hal_dtype_t to : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    run_cast(ctx, dense(HAL_DTYPE_F64, {257}), dense(to, {257}), values);
  }
}

HALCONFORM_TEST("operators.cast.views", "strided, transposed and broadcast (stride 0) in", {}) {
  run_cast(ctx, padded(HAL_DTYPE_F32, {5, 7, 9}, 3), dense(HAL_DTYPE_BF16, {5, 7, 9}));
  run_cast(ctx, transposed(dense(HAL_DTYPE_I32, {13, 6}), 0, 1), padded(HAL_DTYPE_F16, {6, 13}, 2));
  hal_tensor_desc_t repeated = dense(HAL_DTYPE_F16, {4, 33});
  repeated.strides[0] = 0;
  auto row = values_of(ctx, HAL_DTYPE_F16, 33);
  std::vector<double> in(4 * 33);
  for (size_t i = 0; i < in.size(); ++i) in[i] = row[i % 33];
  run_cast(ctx, repeated, dense(HAL_DTYPE_I8, {4, 33}), in);
}

HALCONFORM_TEST("operators.cast.empty_and_scalar", "rank 0 and empty tensors", {}) {
  run_cast(ctx, dense(HAL_DTYPE_F32, {}), dense(HAL_DTYPE_I64, {}), {-7.9});
  run_cast(ctx, dense(HAL_DTYPE_U8, {0, 4}), dense(HAL_DTYPE_F32, {0, 4}), {});
}

HALCONFORM_TEST("operators.permute.ranks", "permutations of ranks 1..8, with and without a cast",
                {}) {
  run_permute(ctx, dense(HAL_DTYPE_F32, {37}), {0}, HAL_DTYPE_F32);
  run_permute(ctx, dense(HAL_DTYPE_F32, {17, 23}), {1, 0}, HAL_DTYPE_F32);
  run_permute(ctx, dense(HAL_DTYPE_BF16, {3, 5, 7}), {2, 0, 1}, HAL_DTYPE_BF16);
  run_permute(ctx, dense(HAL_DTYPE_F32, {3, 5, 7}), {1, 2, 0}, HAL_DTYPE_F16);
  run_permute(ctx, padded(HAL_DTYPE_F16, {4, 3, 5}, 2), {2, 1, 0}, HAL_DTYPE_F32);
  run_permute(ctx, dense(HAL_DTYPE_F32, {2, 3, 4, 5}), {0, 2, 1, 3}, HAL_DTYPE_F32);
  // Rank 8 that merges (only the two inner dimensions swap) ...
  run_permute(ctx, dense(HAL_DTYPE_F32, {2, 2, 2, 2, 2, 2, 3, 5}), {0, 1, 2, 3, 4, 5, 7, 6},
              HAL_DTYPE_F32);
  // ... and one that cannot (every dimension reversed): served or declined.
  run_permute(ctx, dense(HAL_DTYPE_F32, {2, 3, 2, 3, 2, 3, 2, 2}), {7, 6, 5, 4, 3, 2, 1, 0},
              HAL_DTYPE_F32, true);
  run_permute(ctx, dense(HAL_DTYPE_F32, {}), {}, HAL_DTYPE_F64);
  run_permute(ctx, dense(HAL_DTYPE_F32, {3, 0, 2}), {2, 0, 1}, HAL_DTYPE_F32);
}

HALCONFORM_TEST("operators.cast.deterministic", "two runs give identical bits", {}) {
  const hal_tensor_desc_t in = dense(HAL_DTYPE_F32, {6, 7, 8});
  hal_op_cast_desc_t desc = cast_desc(HAL_OP_PERMUTE, in, dense(HAL_DTYPE_BF16, {8, 6, 7}));
  desc.perm[0] = 2;
  desc.perm[1] = 0;
  desc.perm[2] = 1;
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
  DeviceTensor din(ctx.device(), in, random_values(ctx.random(), numel(in), HAL_DTYPE_F32)),
      d1(ctx.device(), desc.out), d2(ctx.device(), desc.out);
  execute(ctx, plan, {din.data(), d1.data()});
  execute(ctx, plan, {din.data(), d2.data()});
  expect_identical(d1.download(), d2.download(), "permute deterministic");
}

HALCONFORM_TEST("operators.cast.errors", "each descriptor rule is refused", {}) {
  const auto refused = [&](const hal_op_cast_desc_t& desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  const hal_tensor_desc_t in = dense(HAL_DTYPE_F32, {3, 4});
  refused(cast_desc(HAL_OP_CAST, in, dense(HAL_DTYPE_F32, {4, 3})), "cast shape");
  refused(cast_desc(HAL_OP_CAST, in, dense(HAL_DTYPE_F32, {3, 4, 1})), "cast rank");
  hal_tensor_desc_t bad_dtype = dense(HAL_DTYPE_F32, {3, 4});
  bad_dtype.dtype = HAL_DTYPE_COUNT;
  refused(cast_desc(HAL_OP_CAST, bad_dtype, dense(HAL_DTYPE_F32, {3, 4})), "unknown dtype");
  hal_tensor_desc_t overlapping = dense(HAL_DTYPE_F32, {3, 4});
  overlapping.strides[1] = 0;
  refused(cast_desc(HAL_OP_CAST, in, overlapping), "out reaching one element twice");
  hal_op_cast_desc_t permute = cast_desc(HAL_OP_PERMUTE, in, dense(HAL_DTYPE_F32, {4, 3}));
  permute.perm[0] = 1;
  permute.perm[1] = 1;
  refused(permute, "perm repeats an axis");
  permute.perm[1] = 2;
  refused(permute, "perm names an axis past the rank");
  permute.perm[1] = 0;
  permute.out = dense(HAL_DTYPE_F32, {3, 4});
  refused(permute, "out shape not the permuted in shape");
  permute.out = dense(HAL_DTYPE_F32, {4, 3, 1});
  refused(permute, "out rank");
}
