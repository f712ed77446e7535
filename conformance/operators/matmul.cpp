// HAL_OP_MATMUL, HAL_OP_BIAS_ACTIVATION_BACKWARD and HAL_OP_GROUPED_MATMUL
// against float64 references written from the definitions (SPEC.md §17.6.1).
#include "op_harness.hpp"
#include "reference.hpp"

#include <cmath>
#include <functional>

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kMatmulDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_activation_t kEpilogues[] = {HAL_ACTIVATION_NONE, HAL_ACTIVATION_RELU,
                                           HAL_ACTIVATION_GELU_TANH, HAL_ACTIVATION_GELU_ERF};

// A row-major layout of |shape| whose rows (last dimension) are padded by
// |pad| elements, with stride 0 in dimension 0 when |broadcast_first|.
hal_tensor_desc_t layout(hal_dtype_t dtype, const std::vector<int64_t>& shape, int64_t pad,
                         bool broadcast_first = false) {
  hal_tensor_desc_t tensor = dense(dtype, shape);
  int64_t stride = 1;
  for (uint32_t d = tensor.rank; d-- > 0;) {
    tensor.strides[d] = stride;
    stride *= tensor.shape[d] + (d == tensor.rank - 1 ? pad : 0);
  }
  if (broadcast_first && tensor.rank > 2) tensor.strides[0] = 0;
  return tensor;
}

std::vector<int64_t> with_matrix(std::vector<int64_t> batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

struct MatmulCase {
  hal_dtype_t ab = HAL_DTYPE_F32;
  hal_dtype_t d = HAL_DTYPE_F32;
  hal_dtype_t c = HAL_DTYPE_F32;
  hal_dtype_t bias = HAL_DTYPE_F32;
  hal_dtype_t aux = HAL_DTYPE_F32;
  std::vector<int64_t> batch;
  int64_t m = 1, n = 1, k = 1;
  uint32_t flags = 0;
  hal_activation_t activation = HAL_ACTIVATION_NONE;
  float alpha = 1.0f, beta = 0.0f;
  int64_t pad = 0;
  bool broadcast_a = false, broadcast_b = false, broadcast_c = false;
  bool in_place = false;  // c is d
  hal_op_plan_flags_t plan_flags = 0;
};

hal_op_matmul_desc_t matmul_desc(const MatmulCase& t) {
  const bool ta = (t.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
  const bool tb = (t.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
  hal_op_matmul_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_MATMUL;
  desc.flags = t.flags;
  desc.activation = t.activation;
  desc.alpha = t.alpha;
  desc.beta = t.beta;
  desc.a = layout(t.ab, with_matrix(t.batch, ta ? t.k : t.m, ta ? t.m : t.k), t.pad, t.broadcast_a);
  desc.b = layout(t.ab, with_matrix(t.batch, tb ? t.n : t.k, tb ? t.k : t.n), t.pad, t.broadcast_b);
  desc.d = layout(t.d, with_matrix(t.batch, t.m, t.n), t.pad);
  desc.c = t.in_place ? desc.d : layout(t.c, with_matrix(t.batch, t.m, t.n), t.pad, t.broadcast_c);
  desc.bias = dense(t.bias, {t.n});
  desc.aux = layout(t.aux, with_matrix(t.batch, t.m, t.n), t.pad + 1);
  return desc;
}

std::string describe(const MatmulCase& t) {
  std::string text = std::string("matmul ") + dtype_label(t.ab) + "->" + dtype_label(t.d) + " m" +
                     std::to_string(t.m) + " n" + std::to_string(t.n) + " k" + std::to_string(t.k) +
                     " batch" + std::to_string(t.batch.size()) + " flags" +
                     std::to_string(t.flags) + " act" + std::to_string(t.activation) + " pad" +
                     std::to_string(t.pad);
  if (t.beta != 0) text += " beta";
  if (t.in_place) text += " in-place";
  return text;
}

struct MatmulResult {
  std::vector<double> d, aux, expected_d, expected_aux;
};

// Runs one case on the device and computes the float64 reference from the
// values the device tensors really hold (broadcast views repeat one element).
MatmulResult run_matmul(TestContext& ctx, const MatmulCase& t) {
  const hal_op_matmul_desc_t desc = matmul_desc(t);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, t.plan_flags);
  std::mt19937_64 random(ctx.random()());
  DeviceTensor a(ctx.device(), desc.a, random_values(random, numel(desc.a), t.ab));
  DeviceTensor b(ctx.device(), desc.b, random_values(random, numel(desc.b), t.ab));
  const bool uses_c = t.beta != 0.0f;
  const bool has_bias = (t.flags & HAL_MATMUL_BIAS) != 0;
  const bool has_aux = (t.flags & HAL_MATMUL_SAVE_AUX) != 0;
  const auto c_values = random_values(random, numel(desc.c), t.in_place ? t.d : t.c);
  DeviceTensor d(ctx.device(), desc.d,
                 t.in_place ? c_values : std::vector<double>(numel(desc.d), 9.0));
  DeviceTensor c(ctx.device(), t.in_place ? dense(HAL_DTYPE_F32, {1}) : desc.c,
                 t.in_place ? std::vector<double>{0.0} : c_values);
  DeviceTensor bias(ctx.device(), desc.bias, random_values(random, t.n, t.bias));
  DeviceTensor aux(ctx.device(), desc.aux, std::vector<double>(numel(desc.aux), 9.0));
  const auto av = a.download(), bv = b.download(), biasv = bias.download();
  const auto cv = t.in_place ? d.download() : c.download();
  execute(ctx, plan,
          {a.data(), b.data(), uses_c ? (t.in_place ? d.data() : c.data()) : nullptr, d.data(),
           has_bias ? bias.data() : nullptr, has_aux ? aux.data() : nullptr});
  const bool ta = (t.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
  const bool tb = (t.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
  int64_t batch = 1;
  for (int64_t extent : t.batch) batch *= extent;
  MatmulResult result;
  result.expected_d.resize(batch * t.m * t.n);
  result.expected_aux.resize(batch * t.m * t.n);
  for (int64_t z = 0; z < batch; ++z) {
    for (int64_t i = 0; i < t.m; ++i) {
      for (int64_t j = 0; j < t.n; ++j) {
        double sum = 0;
        for (int64_t kk = 0; kk < t.k; ++kk) {
          const double x = av[z * t.m * t.k + (ta ? kk * t.m + i : i * t.k + kk)];
          const double y = bv[z * t.k * t.n + (tb ? j * t.k + kk : kk * t.n + j)];
          sum += x * y;
        }
        const int64_t o = (z * t.m + i) * t.n + j;
        double pre = static_cast<double>(t.alpha) * sum;
        if (uses_c) pre += static_cast<double>(t.beta) * cv[o];
        if (has_bias) pre += biasv[j];
        result.expected_aux[o] = pre;
        result.expected_d[o] = reference::activation(t.activation, pre);
      }
    }
  }
  result.d = d.download();
  d.check_untouched(describe(t) + " d");
  if (has_aux) {
    result.aux = aux.download();
    aux.check_untouched(describe(t) + " aux");
  } else {
    for (double value : aux.download()) HC_REQUIRE(value == 9.0, describe(t) + ": aux written");
  }
  return result;
}

// d's error: f32 accumulation of k products (tolerance_for's sqrt(k)
// growth) plus the rounding of the output to its dtype (rtol), see
// SPEC.md §17.6.1.
void check_matmul(TestContext& ctx, const MatmulCase& t) {
  const MatmulResult result = run_matmul(ctx, t);
  const double terms = static_cast<double>(t.k) + 2;
  expect_close(result.d, result.expected_d, tolerance_for(t.d, terms), describe(t) + " d");
  if ((t.flags & HAL_MATMUL_SAVE_AUX) != 0) {
    expect_close(result.aux, result.expected_aux, tolerance_for(t.aux, terms),
                 describe(t) + " aux");
  }
}

}  // namespace

HALCONFORM_TEST("operators.matmul.dtypes_and_sizes", "f32/f16/bf16, odd and larger m, n, k", {}) {
  for (hal_dtype_t dtype : kMatmulDtypes) {
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 29, 41},
                           {128, 96, 200},
                           {1, 1, 1},
                           {5, 17, 3}}) {
      MatmulCase t;
      t.ab = t.d = dtype;
      t.m = m;
      t.n = n;
      t.k = k;
      check_matmul(ctx, t);
    }
    MatmulCase mixed;  // f16/bf16 inputs with an f32 output
    mixed.ab = dtype;
    mixed.d = HAL_DTYPE_F32;
    mixed.m = 19;
    mixed.n = 33;
    mixed.k = 64;
    check_matmul(ctx, mixed);
  }
}

HALCONFORM_TEST("operators.matmul.transposes", "all four TRANSPOSE_A/B combinations", {}) {
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16}) {
    for (uint32_t flags = 0; flags < 4; ++flags) {
      MatmulCase t;
      t.ab = t.d = dtype;
      t.m = 37;
      t.n = 29;
      t.k = 41;
      t.flags = flags;
      check_matmul(ctx, t);
    }
  }
}

HALCONFORM_TEST("operators.matmul.batched", "batch dimensions, broadcast with stride 0", {}) {
  for (uint32_t flags : {0u, 3u}) {
    MatmulCase t;
    t.batch = {3, 2};
    t.m = 13;
    t.n = 18;
    t.k = 11;
    t.flags = flags;
    check_matmul(ctx, t);
    t.broadcast_a = true;
    check_matmul(ctx, t);
    t.broadcast_a = false;
    t.broadcast_b = true;
    t.beta = 0.5f;
    t.broadcast_c = true;
    check_matmul(ctx, t);
  }
  MatmulCase deep;  // 4 batch dimensions, f16
  deep.ab = deep.d = HAL_DTYPE_F16;
  deep.batch = {2, 1, 3, 2};
  deep.m = 5;
  deep.n = 7;
  deep.k = 9;
  deep.broadcast_b = true;
  check_matmul(ctx, deep);
}

HALCONFORM_TEST("operators.matmul.strided", "padded rows for every operand", {}) {
  for (hal_dtype_t dtype : kMatmulDtypes) {
    for (uint32_t flags : {0u, 1u, 2u, 3u}) {
      MatmulCase t;
      t.ab = t.d = t.c = dtype;
      t.batch = {2};
      t.m = 21;
      t.n = 35;
      t.k = 17;
      t.pad = 3;
      t.flags = flags | HAL_MATMUL_BIAS | HAL_MATMUL_SAVE_AUX;
      t.beta = -0.75f;
      t.activation = HAL_ACTIVATION_GELU_TANH;
      check_matmul(ctx, t);
    }
  }
}

HALCONFORM_TEST("operators.matmul.alpha_beta_in_place", "alpha, beta with c being d exactly", {}) {
  for (hal_dtype_t dtype : kMatmulDtypes) {
    MatmulCase t;
    t.ab = t.d = dtype;
    t.m = 23;
    t.n = 40;
    t.k = 31;
    t.alpha = 0.5f;
    t.beta = 1.5f;
    t.in_place = true;
    check_matmul(ctx, t);
    t.in_place = false;
    t.c = HAL_DTYPE_F32;
    t.alpha = -2.0f;
    t.beta = 1.0f;
    check_matmul(ctx, t);
  }
}

HALCONFORM_TEST("operators.matmul.epilogues", "bias, every activation, aux in each dtype", {}) {
  for (hal_activation_t act : kEpilogues) {
    for (hal_dtype_t dtype : kMatmulDtypes) {
      MatmulCase t;
      t.ab = HAL_DTYPE_F32;
      t.d = t.aux = t.bias = dtype;
      t.m = 17;
      t.n = 45;
      t.k = 24;
      t.flags = HAL_MATMUL_BIAS | HAL_MATMUL_SAVE_AUX;
      t.activation = act;
      check_matmul(ctx, t);
      t.flags = HAL_MATMUL_SAVE_AUX;  // aux without bias
      t.ab = dtype;
      check_matmul(ctx, t);
    }
  }
}

HALCONFORM_TEST("operators.matmul.empty", "m, n, batch or k of 0", {}) {
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{0, 5, 3}, {4, 0, 3}, {4, 5, 0}}) {
    MatmulCase t;
    t.m = m;
    t.n = n;
    t.k = k;
    t.beta = 1.0f;
    t.flags = HAL_MATMUL_BIAS;
    t.activation = HAL_ACTIVATION_RELU;
    check_matmul(ctx, t);  // k = 0: d = relu(beta c + bias)
  }
  MatmulCase t;
  t.batch = {0};
  t.m = t.n = t.k = 3;
  check_matmul(ctx, t);
}

HALCONFORM_TEST("operators.matmul.deterministic", "the same result bit for bit", {}) {
  MatmulCase t;
  t.ab = HAL_DTYPE_BF16;
  t.d = HAL_DTYPE_F32;
  t.m = 45;
  t.n = 67;
  t.k = 129;
  t.flags = HAL_MATMUL_BIAS | HAL_MATMUL_SAVE_AUX;
  t.activation = HAL_ACTIVATION_GELU_ERF;
  t.plan_flags = HAL_OP_PLAN_DETERMINISTIC;
  const uint64_t seed = ctx.random()();
  ctx.random().seed(seed);
  const MatmulResult first = run_matmul(ctx, t);
  ctx.random().seed(seed);
  const MatmulResult second = run_matmul(ctx, t);
  expect_identical(first.d, second.d, "matmul d run twice");
  expect_identical(first.aux, second.aux, "matmul aux run twice");
}

HALCONFORM_TEST("operators.matmul.errors", "descriptor rules", {}) {
  MatmulCase t;
  t.m = 4;
  t.n = 5;
  t.k = 6;
  const hal_op_matmul_desc_t good = matmul_desc(t);
  hal_op_plan_t plan = nullptr;
  const auto refused = [&](hal_op_matmul_desc_t desc, const char* what) {
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
    HC_REQUIRE(
        result == HAL_ERROR_INVALID_ARGUMENT,
        std::string(what) + ": expected HAL_ERROR_INVALID_ARGUMENT, got " + std::to_string(result));
  };
  hal_op_matmul_desc_t desc = good;
  desc.b = dense(HAL_DTYPE_F32, {7, 5});
  refused(desc, "k of b differs");
  desc = good;
  desc.flags = HAL_MATMUL_TRANSPOSE_B;  // b [k, n] read as [n, k]
  refused(desc, "b not transposed");
  desc = good;
  desc.d = dense(HAL_DTYPE_F32, {4, 6});
  refused(desc, "d's n");
  desc = good;
  desc.flags = HAL_MATMUL_BIAS;
  desc.bias = dense(HAL_DTYPE_F32, {4});
  refused(desc, "bias of m elements");
  desc.bias = dense(HAL_DTYPE_F32, {1, 5});
  refused(desc, "bias of rank 2");
  desc.bias = dense(HAL_DTYPE_F32, {5});
  desc.bias.strides[0] = 0;
  refused(desc, "bias broadcast");
  desc = good;
  desc.flags = 1u << 4;
  refused(desc, "unknown flag");
  desc = good;
  desc.activation = HAL_ACTIVATION_SILU;
  refused(desc, "SiLU is no epilogue");
  desc.activation = static_cast<hal_activation_t>(77);
  refused(desc, "activation out of range");
  desc = good;
  desc.a = dense(HAL_DTYPE_F32, {2, 4, 6});
  refused(desc, "rank of a differs");
  desc = good;
  desc.b = dense(HAL_DTYPE_F16, {6, 5});
  refused(desc, "a and b dtypes differ");
  desc = good;
  desc.a = dense(HAL_DTYPE_I32, {4, 6});
  desc.b = dense(HAL_DTYPE_I32, {6, 5});
  refused(desc, "integer inputs");
  desc = good;
  desc.a = dense(HAL_DTYPE_F32, {6});
  desc.b = dense(HAL_DTYPE_F32, {6});
  desc.d = dense(HAL_DTYPE_F32, {1});
  refused(desc, "rank 1");
  desc = good;
  desc.beta = 1.0f;
  desc.c = dense(HAL_DTYPE_F32, {4, 4});
  refused(desc, "c's shape");
  desc = good;
  desc.flags = HAL_MATMUL_SAVE_AUX;
  desc.aux = dense(HAL_DTYPE_F32, {5, 4});
  refused(desc, "aux's shape");
  desc = good;
  desc.a.strides[1] = 0;
  refused(desc, "stride 0 in a matrix dimension");
  t.batch = {3};
  desc = matmul_desc(t);
  desc.a.shape[0] = 1;  // broadcast is stride 0, not size 1
  refused(desc, "batch of 1 against 3");
  desc = matmul_desc(t);
  desc.d.strides[0] = 0;
  refused(desc, "d broadcast");
  HC_REQUIRE(plan == nullptr, std::string("a refused plan was written"));
}

// ---- HAL_OP_BIAS_ACTIVATION_BACKWARD --------------------------------------

namespace {

hal_op_bias_activation_backward_desc_t backward_desc(hal_activation_t act, bool bias_grad,
                                                     const hal_tensor_desc_t& grad_out,
                                                     const hal_tensor_desc_t& aux,
                                                     const hal_tensor_desc_t& grad_pre,
                                                     const hal_tensor_desc_t& grad_bias) {
  hal_op_bias_activation_backward_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_BIAS_ACTIVATION_BACKWARD;
  desc.activation = act;
  desc.compute_bias_grad = bias_grad ? 1 : 0;
  desc.grad_out = grad_out;
  desc.aux = aux;
  desc.grad_pre = grad_pre;
  desc.grad_bias = grad_bias;
  return desc;
}

struct MatmulBackwardResult {
  std::vector<double> grad_pre, grad_bias;
};

MatmulBackwardResult run_backward(TestContext& ctx, hal_activation_t act, bool bias_grad,
                                  hal_dtype_t dtype, int64_t rows, int64_t n, int64_t pad,
                                  hal_op_plan_flags_t flags = 0, bool check = true) {
  const auto desc = backward_desc(act, bias_grad, layout(dtype, {rows, n}, pad),
                                  layout(dtype, {rows, n}, pad + 1), layout(dtype, {rows, n}, 0),
                                  dense(HAL_DTYPE_F32, {n}));
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, flags);
  const auto go = random_values(ctx.random(), rows * n, dtype);
  const auto aux = random_values(ctx.random(), rows * n, dtype, -3, 3);
  DeviceTensor dgo(ctx.device(), desc.grad_out, go), daux(ctx.device(), desc.aux, aux),
      dpre(ctx.device(), desc.grad_pre), dbias(ctx.device(), desc.grad_bias);
  execute(ctx, plan,
          {dgo.data(), act != HAL_ACTIVATION_NONE ? daux.data() : nullptr, dpre.data(),
           bias_grad ? dbias.data() : nullptr});
  MatmulBackwardResult result{dpre.download(),
                              bias_grad ? dbias.download() : std::vector<double>{}};
  if (!check) return result;
  std::vector<double> pre(rows * n), sums(n, 0.0);
  for (int64_t i = 0; i < rows * n; ++i) {
    pre[i] = go[i] * reference::activation_derivative(act, aux[i]);
    sums[i % n] += pre[i];
  }
  const std::string what = "bias_activation_backward act" + std::to_string(act) + " " +
                           dtype_label(dtype) + " " + std::to_string(rows) + "x" +
                           std::to_string(n);
  expect_close(result.grad_pre, pre, tolerance_for(dtype, 4), what + " grad_pre");
  dpre.check_untouched(what);
  if (bias_grad) {
    // The sum is of f32 values (not rounded to grad_pre's dtype): f32
    // accumulation of rows terms, each within the elementwise error.
    const Tolerance one = tolerance_for(HAL_DTYPE_F32, static_cast<double>(rows));
    expect_close(result.grad_bias, sums, {one.atol + 1e-6 * rows, one.rtol}, what + " grad_bias");
    dbias.check_untouched(what);
  }
  return result;
}

}  // namespace

HALCONFORM_TEST("operators.bias_activation_backward.reference",
                "grad_pre = grad_out * act'(aux), column sums, each dtype", {}) {
  for (hal_dtype_t dtype : kMatmulDtypes) {
    for (hal_activation_t act : kEpilogues) {
      run_backward(ctx, act, true, dtype, 37, 29, 2);
      run_backward(ctx, act, false, dtype, 5, 130, 0);
    }
  }
  run_backward(ctx, HAL_ACTIVATION_RELU, true, HAL_DTYPE_F32, 0, 7, 0);  // grad_bias = 0
}

HALCONFORM_TEST("operators.bias_activation_backward.deterministic", "bit for bit", {}) {
  const uint64_t seed = ctx.random()();
  ctx.random().seed(seed);
  const auto first = run_backward(ctx, HAL_ACTIVATION_GELU_TANH, true, HAL_DTYPE_F32, 300, 33, 0,
                                  HAL_OP_PLAN_DETERMINISTIC, false);
  ctx.random().seed(seed);
  const auto second = run_backward(ctx, HAL_ACTIVATION_GELU_TANH, true, HAL_DTYPE_F32, 300, 33, 0,
                                   HAL_OP_PLAN_DETERMINISTIC, false);
  expect_identical(first.grad_pre, second.grad_pre, "grad_pre");
  expect_identical(first.grad_bias, second.grad_bias, "grad_bias");
}

HALCONFORM_TEST("operators.bias_activation_backward.in_place", "grad_pre may be grad_out", {}) {
  const hal_tensor_desc_t t = dense(HAL_DTYPE_F32, {6, 10});
  const auto desc = backward_desc(HAL_ACTIVATION_RELU, true, t, t, t, dense(HAL_DTYPE_F32, {10}));
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto go = random_values(ctx.random(), 60, HAL_DTYPE_F32);
  const auto aux = random_values(ctx.random(), 60, HAL_DTYPE_F32);
  DeviceTensor dgo(ctx.device(), t, go), daux(ctx.device(), t, aux),
      dbias(ctx.device(), desc.grad_bias);
  execute(ctx, plan, {dgo.data(), daux.data(), dgo.data(), dbias.data()});
  std::vector<double> expected(60);
  for (int i = 0; i < 60; ++i) expected[i] = aux[i] > 0 ? go[i] : 0;
  expect_close(dgo.download(), expected, tolerance_for(HAL_DTYPE_F32), "relu backward in place");
}

HALCONFORM_TEST("operators.bias_activation_backward.errors", "descriptor rules", {}) {
  const hal_tensor_desc_t t = dense(HAL_DTYPE_F32, {4, 5});
  const auto good =
      backward_desc(HAL_ACTIVATION_GELU_ERF, true, t, t, t, dense(HAL_DTYPE_F32, {5}));
  hal_op_plan_t plan = nullptr;
  auto desc = good;
  desc.grad_bias = dense(HAL_DTYPE_F32, {4});
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // grad_bias [rows]
  desc = good;
  desc.compute_bias_grad = 2;
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);
  desc = good;
  desc.activation = static_cast<hal_activation_t>(5);
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);
  desc = good;
  desc.aux = dense(HAL_DTYPE_F32, {5, 4});
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // aux's shape
  desc = good;
  desc.grad_out = dense(HAL_DTYPE_F32, {2, 2, 5});
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // rank 3
  HC_REQUIRE(plan == nullptr, std::string("a refused plan was written"));
}

// The backward of a linear layer with GELU, composed from the ops: forward
// pre = x W^T + b (MATMUL, TRANSPOSE_B, BIAS, SAVE_AUX), h = gelu(pre),
// loss = sum(h * r); backward grad_pre (BIAS_ACTIVATION_BACKWARD with the
// bias gradient), grad_W = grad_pre^T x (TRANSPOSE_A), grad_x = grad_pre W;
// each against float64 central differences of the loss.
HALCONFORM_TEST("operators.matmul.mlp_gradient",
                "matmul + bias_activation_backward give the float64 gradient of a layer", {}) {
  const int64_t rows = 3, in = 5, out = 4;
  const hal_activation_t act = HAL_ACTIVATION_GELU_TANH;
  auto x = random_values(ctx.random(), rows * in, HAL_DTYPE_F32);
  auto w = random_values(ctx.random(), out * in, HAL_DTYPE_F32);
  auto bias = random_values(ctx.random(), out, HAL_DTYPE_F32);
  const auto r = random_values(ctx.random(), rows * out, HAL_DTYPE_F32);
  const auto loss = [&]() {
    double total = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t o = 0; o < out; ++o) {
        double pre = bias[o];
        for (int64_t j = 0; j < in; ++j) pre += x[i * in + j] * w[o * in + j];
        total += reference::activation(act, pre) * r[i * out + o];
      }
    }
    return total;
  };
  const auto numeric = [&](std::vector<double>& values) {
    std::vector<double> grad(values.size());
    for (size_t p = 0; p < values.size(); ++p) {
      const double keep = values[p], h = 1e-6;
      values[p] = keep + h;
      const double up = loss();
      values[p] = keep - h;
      const double down = loss();
      values[p] = keep;
      grad[p] = (up - down) / (2 * h);
    }
    return grad;
  };
  const auto f32 = [](std::initializer_list<int64_t> shape) { return dense(HAL_DTYPE_F32, shape); };
  DeviceTensor dx(ctx.device(), f32({rows, in}), x), dw(ctx.device(), f32({out, in}), w),
      db(ctx.device(), f32({out}), bias), dr(ctx.device(), f32({rows, out}), r),
      dh(ctx.device(), f32({rows, out})), daux(ctx.device(), f32({rows, out})),
      dpre(ctx.device(), f32({rows, out})), dgb(ctx.device(), f32({out})),
      dgw(ctx.device(), f32({out, in})), dgx(ctx.device(), f32({rows, in}));
  const auto matmul = [&](const hal_tensor_desc_t& a, const hal_tensor_desc_t& b,
                          const hal_tensor_desc_t& d, uint32_t flags, hal_activation_t activation,
                          std::vector<void*> operands) {
    hal_op_matmul_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_MATMUL;
    desc.flags = flags;
    desc.activation = activation;
    desc.alpha = 1.0f;
    desc.a = a;
    desc.b = b;
    desc.d = d;
    desc.bias = f32({out});
    desc.aux = d;
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    execute(ctx, plan, operands);
  };
  matmul(dx.layout(), dw.layout(), dh.layout(),
         HAL_MATMUL_TRANSPOSE_B | HAL_MATMUL_BIAS | HAL_MATMUL_SAVE_AUX, act,
         {dx.data(), dw.data(), nullptr, dh.data(), db.data(), daux.data()});
  const auto bdesc =
      backward_desc(act, true, dr.layout(), daux.layout(), dpre.layout(), dgb.layout());
  Plan backward;
  plan_or_skip(ctx, &bdesc.header, backward);
  execute(ctx, backward, {dr.data(), daux.data(), dpre.data(), dgb.data()});
  matmul(dpre.layout(), dx.layout(), dgw.layout(), HAL_MATMUL_TRANSPOSE_A, HAL_ACTIVATION_NONE,
         {dpre.data(), dx.data(), nullptr, dgw.data(), nullptr, nullptr});
  matmul(dpre.layout(), dw.layout(), dgx.layout(), 0, HAL_ACTIVATION_NONE,
         {dpre.data(), dw.data(), nullptr, dgx.data(), nullptr, nullptr});
  // f32 device arithmetic against float64 differences (error ~1e-9 at h=1e-6).
  const Tolerance tolerance{1e-4, 1e-4};
  expect_close(dgw.download(), numeric(w), tolerance, "grad_W");
  expect_close(dgb.download(), numeric(bias), tolerance, "grad_bias");
  expect_close(dgx.download(), numeric(x), tolerance, "grad_x");
}

// ---- HAL_OP_GROUPED_MATMUL ------------------------------------------------

namespace {

void check_grouped(TestContext& ctx, hal_dtype_t dtype, bool transpose_b,
                   const std::vector<int32_t>& offsets, int64_t rows, int64_t n, int64_t k,
                   const std::string& what) {
  const uint32_t groups = static_cast<uint32_t>(offsets.size() - 1);
  hal_op_grouped_matmul_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_GROUPED_MATMUL;
  desc.flags = transpose_b ? HAL_MATMUL_TRANSPOSE_B : 0;
  desc.groups = groups;
  desc.a = layout(dtype, {rows, k}, 1);
  desc.b = transpose_b ? layout(dtype, {groups, n, k}, 2) : layout(dtype, {groups, k, n}, 2);
  desc.d = layout(dtype, {rows, n}, 3);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto av = random_values(ctx.random(), rows * k, dtype);
  const auto bv = random_values(ctx.random(), numel(desc.b), dtype);
  std::vector<double> offset_values(offsets.begin(), offsets.end());
  DeviceTensor da(ctx.device(), desc.a, av), db(ctx.device(), desc.b, bv),
      doff(ctx.device(), dense(HAL_DTYPE_I32, {static_cast<int64_t>(offsets.size())}),
           offset_values),
      dd(ctx.device(), desc.d, std::vector<double>(rows * n, 7.0));
  execute(ctx, plan, {da.data(), db.data(), doff.data(), dd.data()});
  // Each row takes the product of the last group whose clamped range holds it.
  std::vector<double> expected(rows * n, 7.0);
  for (uint32_t g = 0; g < groups; ++g) {
    const int64_t lo = std::clamp<int64_t>(offsets[g], 0, rows);
    const int64_t hi = std::clamp<int64_t>(offsets[g + 1], 0, rows);
    for (int64_t i = lo; i < hi; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          sum += av[i * k + kk] * bv[g * k * n + (transpose_b ? j * k + kk : kk * n + j)];
        }
        expected[i * n + j] = sum;
      }
    }
  }
  expect_close(dd.download(), expected, tolerance_for(dtype, k), what);
  dd.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.grouped_matmul.reference",
                "groups with an empty one, offsets short of rows, each dtype, b transposed", {}) {
  for (hal_dtype_t dtype : kMatmulDtypes) {
    for (bool transpose_b : {false, true}) {
      check_grouped(ctx, dtype, transpose_b, {0, 5, 5, 14, 20}, 23, 21, 19,
                    std::string("grouped ") + dtype_label(dtype));
    }
  }
  check_grouped(ctx, HAL_DTYPE_F32, false, {0, 40, 64}, 64, 48, 33, "grouped two big groups");
}

HALCONFORM_TEST("operators.grouped_matmul.untrusted_offsets",
                "offsets outside [0, rows] are clamped, decreasing pairs are empty", {}) {
  check_grouped(ctx, HAL_DTYPE_F32, false, {-5, 30, 3, 100, 2}, 23, 10, 7, "wild offsets");
  check_grouped(ctx, HAL_DTYPE_F32, true, {4, 2, 9, -1, 1000000}, 11, 17, 5, "wild offsets 2");
  check_grouped(ctx, HAL_DTYPE_F32, false, {INT32_MIN, INT32_MAX}, 9, 3, 4, "extreme offsets");
}

HALCONFORM_TEST("operators.grouped_matmul.errors", "descriptor rules", {}) {
  hal_op_grouped_matmul_desc_t good{};
  good.header.struct_size = sizeof(good);
  good.header.kind = HAL_OP_GROUPED_MATMUL;
  good.groups = 3;
  good.a = dense(HAL_DTYPE_F32, {10, 4});
  good.b = dense(HAL_DTYPE_F32, {3, 4, 6});
  good.d = dense(HAL_DTYPE_F32, {10, 6});
  hal_op_plan_t plan = nullptr;
  auto desc = good;
  desc.groups = 2;
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // b holds 3 matrices
  desc = good;
  desc.flags = HAL_MATMUL_TRANSPOSE_A;
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);
  desc = good;
  desc.b = dense(HAL_DTYPE_F32, {3, 5, 6});
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // k
  desc = good;
  desc.d = dense(HAL_DTYPE_F32, {9, 6});
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // rows
  desc = good;
  desc.b = dense(HAL_DTYPE_F32, {4, 6});
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // rank
  HC_REQUIRE(plan == nullptr, std::string("a refused plan was written"));
}
