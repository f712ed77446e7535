// HAL_OP_BINARY against the float64 reference: every op, mixed dtypes,
// broadcasting both ways, strided views, rank 0, empty, in place, NaN,
// determinism and each descriptor rule.
#include <cmath>
#include <limits>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kBinaryDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_binary_op_t kOps[] = {HAL_BINARY_ADD, HAL_BINARY_SUB, HAL_BINARY_MUL,
                                    HAL_BINARY_DIV, HAL_BINARY_MAX, HAL_BINARY_MIN};

hal_op_binary_desc_t binary_desc(hal_binary_op_t op, float alpha, const hal_tensor_desc_t& a,
                                 const hal_tensor_desc_t& b, const hal_tensor_desc_t& out) {
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

double apply(hal_binary_op_t op, double a, double b) {
  if (op == HAL_BINARY_MAX || op == HAL_BINARY_MIN) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  }
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
      return a > b ? a : b;
    default:
      return a < b ? a : b;
  }
}

std::vector<double> reference(hal_binary_op_t op, double alpha, const std::vector<double>& a,
                              const hal_tensor_desc_t& a_layout, const std::vector<double>& b,
                              const hal_tensor_desc_t& b_layout,
                              const hal_tensor_desc_t& out_layout) {
  std::vector<double> expected(static_cast<size_t>(numel(out_layout)));
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto ia = static_cast<size_t>(broadcast_index(a_layout, out_layout, i));
    const auto ib = static_cast<size_t>(broadcast_index(b_layout, out_layout, i));
    expected[i] = alpha * apply(op, a[ia], b[ib]);
  }
  return expected;
}

// Divisors stay away from 0 so the quotient's rounding error stays relative.
std::vector<double> operand_values(TestContext& ctx, hal_binary_op_t op, bool divisor,
                                   const hal_tensor_desc_t& layout) {
  if (divisor && op == HAL_BINARY_DIV) {
    auto values = random_values(ctx.random(), numel(layout), layout.dtype, 0.5, 2.0);
    for (size_t i = 0; i < values.size(); i += 2) values[i] = -values[i];
    return values;
  }
  return random_values(ctx.random(), numel(layout), layout.dtype, -2, 2);
}

void run_binary(TestContext& ctx, hal_binary_op_t op, const hal_tensor_desc_t& a_layout,
                const hal_tensor_desc_t& b_layout, const hal_tensor_desc_t& out_layout,
                float alpha = 1.5f) {
  hal_op_binary_desc_t desc = binary_desc(op, alpha, a_layout, b_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto a = operand_values(ctx, op, false, a_layout);
  const auto b = operand_values(ctx, op, true, b_layout);
  DeviceTensor da(ctx.device(), a_layout, a), db(ctx.device(), b_layout, b),
      dout(ctx.device(), out_layout);
  execute(ctx, plan, {da.data(), db.data(), dout.data()});
  const std::string what = "binary " + std::to_string(op) + " " + label(a_layout) + " " +
                           label(b_layout) + " -> " + label(out_layout);
  // f32 arithmetic then one rounding to out's dtype; f16/bf16 inputs are exact in f32.
  expect_close(dout.download(), reference(op, alpha, a, a_layout, b, b_layout, out_layout),
               tolerance_for(out_layout.dtype, 2), what);
  dout.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.binary.forward", "every op x dtype, odd sizes, strided views", {}) {
  for (hal_dtype_t dtype : kBinaryDtypes) {
    for (hal_binary_op_t op : kOps) {
      run_binary(ctx, op, dense(dtype, {3, 333}), dense(dtype, {3, 333}), dense(dtype, {3, 333}));
      run_binary(ctx, op, padded(dtype, {5, 7, 9}, 3), transposed(dense(dtype, {5, 9, 7}), 1, 2),
                 padded(dtype, {5, 7, 9}, 1));
    }
  }
}

HALCONFORM_TEST("operators.binary.mixed_dtypes", "a, b and out of different float dtypes", {}) {
  for (hal_binary_op_t op : kOps) {
    run_binary(ctx, op, dense(HAL_DTYPE_F16, {7, 31}), dense(HAL_DTYPE_BF16, {7, 31}),
               dense(HAL_DTYPE_F32, {7, 31}));
    run_binary(ctx, op, dense(HAL_DTYPE_F32, {7, 31}), dense(HAL_DTYPE_F16, {7, 31}),
               dense(HAL_DTYPE_BF16, {7, 31}));
  }
}

HALCONFORM_TEST("operators.binary.broadcast", "size-1 dimensions of a and b, both ways", {}) {
  for (hal_dtype_t dtype : kBinaryDtypes) {
    const hal_tensor_desc_t out = dense(dtype, {5, 7, 9});
    // a broadcasts rows, b broadcasts columns; then the other way round.
    run_binary(ctx, HAL_BINARY_ADD, dense(dtype, {5, 1, 9}), dense(dtype, {1, 7, 1}), out);
    run_binary(ctx, HAL_BINARY_SUB, dense(dtype, {1, 7, 1}), dense(dtype, {5, 1, 9}), out);
    run_binary(ctx, HAL_BINARY_DIV, dense(dtype, {5, 7, 9}), dense(dtype, {1, 1, 1}), out);
    run_binary(ctx, HAL_BINARY_MAX, dense(dtype, {1, 1, 9}), dense(dtype, {5, 7, 9}), out);
  }
  // A stride-0 view of out's shape broadcasts too (a row repeated).
  hal_tensor_desc_t repeated = dense(HAL_DTYPE_F32, {6, 11});
  repeated.strides[0] = 0;
  hal_op_binary_desc_t desc = binary_desc(
      HAL_BINARY_MUL, 1.0f, repeated, dense(HAL_DTYPE_F32, {6, 11}), dense(HAL_DTYPE_F32, {6, 11}));
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto row = random_values(ctx.random(), 11, HAL_DTYPE_F32);
  std::vector<double> a(66);
  for (size_t i = 0; i < a.size(); ++i) a[i] = row[i % 11];
  const auto b = random_values(ctx.random(), 66, HAL_DTYPE_F32);
  DeviceTensor da(ctx.device(), repeated, a), db(ctx.device(), desc.b, b),
      dout(ctx.device(), desc.out);
  execute(ctx, plan, {da.data(), db.data(), dout.data()});
  std::vector<double> expected(66);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = a[i] * b[i];
  expect_close(dout.download(), expected, tolerance_for(HAL_DTYPE_F32), "stride-0 a");
}

HALCONFORM_TEST("operators.binary.rank8", "rank-8 views that merge to 4 dimensions", {}) {
  const hal_tensor_desc_t out = dense(HAL_DTYPE_F32, {2, 2, 2, 2, 2, 2, 3, 5});
  run_binary(ctx, HAL_BINARY_MUL, dense(HAL_DTYPE_F32, {1, 1, 1, 1, 2, 2, 3, 5}), out, out);
  run_binary(ctx, HAL_BINARY_ADD, out, dense(HAL_DTYPE_F16, {2, 2, 2, 2, 2, 2, 1, 5}), out);
}

HALCONFORM_TEST("operators.binary.unmergeable",
                "views that stay above 4 dimensions: served correctly or declined with a reason",
                {}) {
  // out reversed in every dimension of a rank-6 tensor: no two dimensions merge.
  hal_tensor_desc_t out = dense(HAL_DTYPE_F32, {2, 3, 2, 3, 2, 3});
  for (uint32_t d = 0; d < 3; ++d) out = transposed(out, d, 5 - d);
  const hal_tensor_desc_t a = dense(HAL_DTYPE_F32, shape_of(out));
  hal_op_binary_desc_t desc = binary_desc(HAL_BINARY_ADD, 1.0f, a, a, out);
  Plan plan;
  const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, plan.out());
  HC_REQUIRE(result == HAL_SUCCESS || result == HAL_ERROR_UNSUPPORTED,
             "unmergeable binary: result " + std::to_string(result));
  if (result == HAL_ERROR_UNSUPPORTED) {
    ctx.note("declined: more than 4 dimensions after merging");
    return;
  }
  run_binary(ctx, HAL_BINARY_ADD, a, a, out);
}

HALCONFORM_TEST("operators.binary.empty_and_scalar", "rank 0 and empty tensors", {}) {
  run_binary(ctx, HAL_BINARY_MUL, dense(HAL_DTYPE_F32, {}), dense(HAL_DTYPE_F32, {}),
             dense(HAL_DTYPE_F32, {}));
  run_binary(ctx, HAL_BINARY_ADD, dense(HAL_DTYPE_F32, {0, 5}), dense(HAL_DTYPE_F32, {1, 5}),
             dense(HAL_DTYPE_F32, {0, 5}));
  run_binary(ctx, HAL_BINARY_ADD, dense(HAL_DTYPE_F16, {1, 0}), dense(HAL_DTYPE_F16, {3, 1}),
             dense(HAL_DTYPE_F16, {3, 0}));
}

HALCONFORM_TEST("operators.binary.in_place", "out may be a exactly, or b when a broadcasts", {}) {
  const hal_tensor_desc_t full = dense(HAL_DTYPE_F32, {4, 250});
  const hal_tensor_desc_t row = dense(HAL_DTYPE_F32, {1, 250});
  const auto a = random_values(ctx.random(), 1000, HAL_DTYPE_F32);
  const auto r = random_values(ctx.random(), 250, HAL_DTYPE_F32);
  {
    hal_op_binary_desc_t desc = binary_desc(HAL_BINARY_SUB, 2.0f, full, row, full);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    DeviceTensor da(ctx.device(), full, a), db(ctx.device(), row, r);
    execute(ctx, plan, {da.data(), db.data(), da.data()});
    expect_close(da.download(), reference(HAL_BINARY_SUB, 2.0, a, full, r, row, full),
                 tolerance_for(HAL_DTYPE_F32, 2), "out = a");
  }
  {
    hal_op_binary_desc_t desc = binary_desc(HAL_BINARY_DIV, 1.0f, row, full, full);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    auto divisor = random_values(ctx.random(), 1000, HAL_DTYPE_F32, 0.5, 2.0);
    DeviceTensor da(ctx.device(), row, r), db(ctx.device(), full, divisor);
    execute(ctx, plan, {da.data(), db.data(), db.data()});
    expect_close(db.download(), reference(HAL_BINARY_DIV, 1.0, r, row, divisor, full, full),
                 tolerance_for(HAL_DTYPE_F32, 2), "out = b");
  }
}

HALCONFORM_TEST("operators.binary.special_values", "NaN propagates through max/min; x/0", {}) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> a = {nan, 1.0, -2.0, nan, 3.0, -1.0, 0.0, inf};
  const std::vector<double> b = {1.0, nan, -3.0, nan, 0.0, 0.0, 0.0, 1.0};
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {8});
  for (hal_binary_op_t op : kOps) {
    hal_op_binary_desc_t desc = binary_desc(op, 1.0f, layout, layout, layout);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    DeviceTensor da(ctx.device(), layout, a), db(ctx.device(), layout, b),
        dout(ctx.device(), layout);
    execute(ctx, plan, {da.data(), db.data(), dout.data()});
    expect_close(dout.download(), reference(op, 1.0, a, layout, b, layout, layout),
                 tolerance_for(HAL_DTYPE_F32),
                 "binary " + std::to_string(op) + " on NaN, inf and 0");
  }
}

HALCONFORM_TEST("operators.binary.deterministic", "two runs give identical bits", {}) {
  const hal_tensor_desc_t out = dense(HAL_DTYPE_BF16, {9, 65});
  const hal_tensor_desc_t b_layout = dense(HAL_DTYPE_F32, {9, 1});
  hal_op_binary_desc_t desc = binary_desc(HAL_BINARY_MUL, 0.5f, out, b_layout, out);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
  const auto a = random_values(ctx.random(), numel(out), HAL_DTYPE_BF16);
  const auto b = random_values(ctx.random(), 9, HAL_DTYPE_F32);
  DeviceTensor da(ctx.device(), out, a), db(ctx.device(), b_layout, b), d1(ctx.device(), out),
      d2(ctx.device(), out);
  execute(ctx, plan, {da.data(), db.data(), d1.data()});
  execute(ctx, plan, {da.data(), db.data(), d2.data()});
  expect_identical(d1.download(), d2.download(), "binary deterministic");
}

HALCONFORM_TEST("operators.binary.errors", "each descriptor rule is refused", {}) {
  const hal_tensor_desc_t good = dense(HAL_DTYPE_F32, {4, 5});
  const auto refused = [&](hal_op_binary_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  hal_op_binary_desc_t desc = binary_desc(HAL_BINARY_ADD, 1.0f, good, good, good);
  desc.op = HAL_BINARY_OP_COUNT;
  refused(desc, "unknown op");
  refused(binary_desc(HAL_BINARY_ADD, 1.0f, dense(HAL_DTYPE_F64, {4, 5}), good, good), "a dtype");
  refused(binary_desc(HAL_BINARY_ADD, 1.0f, good, dense(HAL_DTYPE_F64, {4, 5}), good), "b dtype");
  refused(binary_desc(HAL_BINARY_ADD, 1.0f, good, good, dense(HAL_DTYPE_U8, {4, 5})), "out dtype");
  refused(binary_desc(HAL_BINARY_ADD, 1.0f, dense(HAL_DTYPE_F32, {5}), good, good), "a rank");
  refused(binary_desc(HAL_BINARY_ADD, 1.0f, good, dense(HAL_DTYPE_F32, {4, 5, 1}), good), "b rank");
  refused(binary_desc(HAL_BINARY_ADD, 1.0f, dense(HAL_DTYPE_F32, {2, 5}), good, good),
          "a shape neither out's nor 1");
  refused(binary_desc(HAL_BINARY_ADD, 1.0f, good, dense(HAL_DTYPE_F32, {4, 3}), good),
          "b shape neither out's nor 1");
  refused(binary_desc(HAL_BINARY_ADD, 1.0f, dense(HAL_DTYPE_F32, {4, 1}), good,
                      dense(HAL_DTYPE_F32, {4, 1})),
          "out smaller than b (out never broadcasts)");
  hal_tensor_desc_t overlapping = good;
  overlapping.strides[0] = 0;
  refused(binary_desc(HAL_BINARY_ADD, 1.0f, good, good, overlapping), "out with stride 0");

  // At execution: out may be a exactly, but not b when a already has its layout.
  hal_op_binary_desc_t same = binary_desc(HAL_BINARY_ADD, 1.0f, good, good, good);
  Plan plan;
  plan_or_skip(ctx, &same.header, plan);
  DeviceTensor da(ctx.device(), good, random_values(ctx.random(), 20, HAL_DTYPE_F32)),
      db(ctx.device(), good, random_values(ctx.random(), 20, HAL_DTYPE_F32));
  HC_EXPECT_RESULT(try_execute(ctx, plan, {da.data(), db.data(), db.data()}),
                   HAL_ERROR_INVALID_ARGUMENT);
}
