// The cpu plugin's native operators ("cpu.native") through the public API:
// each op the training sample uses, on seeded random inputs at awkward
// sizes, against the loader's portable implementation of the same
// descriptor (HAL_OPS_IMPLEMENTATIONS=portable: an independent code path,
// the dialect kernels), within SPEC §17.6's conformance tolerances; the same
// bits run to run; and what cpu.native declines goes on with its reason.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "float16_bits.hpp"
#include "../ops/op_session.hpp"
#include "hal.h"

namespace {

// The op tests' session (tests/ops/op_session.hpp), with uninitialised f32 arrays (cpu device
// memory is host memory: the tests write and read them in place).
class NativeOpsSession : public op_test::Session {
 public:
  float* floats(size_t count) {
    return static_cast<float*>(alloc_bytes((count == 0 ? 1 : count) * sizeof(float)));
  }
};

hal_tensor_desc_t dense(std::vector<int64_t> shape, hal_dtype_t dtype = HAL_DTYPE_F32) {
  hal_tensor_desc_t tensor;
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return tensor;
}

std::string implementation_of(hal_op_plan_t plan, std::string* declines = nullptr) {
  hal_op_plan_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE(hal_op_plan_get_info(plan, &info) == HAL_SUCCESS);
  if (declines != nullptr) *declines = info.declines;
  return info.implementation;
}

// Plans |desc| with the default list (or only the portable implementation).
hal_op_plan_t plan_of(NativeOpsSession& session, const hal_op_header_t* desc, bool portable) {
  if (portable) setenv("HAL_OPS_IMPLEMENTATIONS", "portable", 1);
  hal_op_plan_t plan = nullptr;
  const hal_result_t result =
      hal_op_plan_create(session.device(), desc, HAL_OP_PLAN_DETERMINISTIC, &plan);
  if (portable) unsetenv("HAL_OPS_IMPLEMENTATIONS");
  INFO(hal_error_last_message());
  REQUIRE(result == HAL_SUCCESS);
  return plan;
}

// Runs |plan|; its workspace starts |workspace_shift| bytes into an
// allocation of its own (SPEC asks no alignment of it).
void execute(NativeOpsSession& session, hal_op_plan_t plan, std::vector<void*> operands,
             std::vector<hal_op_scalar_t> scalars = {}, size_t workspace_shift = 0) {
  hal_op_plan_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE(hal_op_plan_get_info(plan, &info) == HAL_SUCCESS);
  void* allocation = nullptr;
  void* workspace = nullptr;
  if (info.workspace_bytes > 0) {
    REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE,
                          info.workspace_bytes + workspace_shift, 0, &allocation) == HAL_SUCCESS);
    workspace = static_cast<char*>(allocation) + workspace_shift;
  }
  session.execute(plan, std::move(operands), std::move(scalars), workspace, info.workspace_bytes);
  hal_mem_free(allocation);
}

void fill(float* data, size_t count, uint32_t seed, float low = -3.0f, float high = 3.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  for (size_t i = 0; i < count; ++i) data[i] = uniform(rng);
}

// SPEC §17.6's tolerance_for(f32, terms): 1e-5 * sqrt(terms) + 1e-5 * |expected|.
void check_close(const float* actual, const float* expected, size_t count, double terms) {
  size_t bad = 0, first = count;
  for (size_t i = 0; i < count; ++i) {
    const double tolerance = 1e-5 * std::sqrt(terms) + 1e-5 * std::fabs(expected[i]);
    const bool both_nan = std::isnan(actual[i]) && std::isnan(expected[i]);
    const bool same = actual[i] == expected[i];  // equal infinities too
    if (!both_nan && !same && !(std::fabs(double{actual[i]} - expected[i]) <= tolerance)) {
      if (bad++ == 0) first = i;
    }
  }
  INFO("first mismatch at " << first << ": " << (first < count ? actual[first] : 0.0f) << " vs "
                            << (first < count ? expected[first] : 0.0f));
  CHECK(bad == 0);
}

// Runs |desc| natively and portably on copies of the inputs; compares the
// outputs named by |outputs| (operand index, element count, terms).
struct Output {
  size_t operand;
  size_t count;
  double terms;
};

void compare_with_portable(NativeOpsSession& session, const hal_op_header_t* desc,
                           const std::vector<size_t>& sizes, const std::vector<Output>& outputs,
                           uint32_t seed, std::vector<hal_op_scalar_t> scalars = {}) {
  hal_op_plan_t native = plan_of(session, desc, false);
  hal_op_plan_t portable = plan_of(session, desc, true);
  CHECK(implementation_of(native) == "cpu.native");
  std::vector<float*> a, b;
  for (size_t i = 0; i < sizes.size(); ++i) {
    a.push_back(sizes[i] ? session.floats(sizes[i]) : nullptr);
    b.push_back(sizes[i] ? session.floats(sizes[i]) : nullptr);
    if (sizes[i]) {
      fill(a.back(), sizes[i], seed + static_cast<uint32_t>(i));
      std::memcpy(b.back(), a.back(), sizes[i] * sizeof(float));
    }
  }
  execute(session, native, std::vector<void*>(a.begin(), a.end()), scalars);
  execute(session, portable, std::vector<void*>(b.begin(), b.end()), scalars);
  for (const Output& output : outputs) {
    INFO("operand " << output.operand);
    check_close(a[output.operand], b[output.operand], output.count, output.terms);
  }
  // Deterministic: a second execution on fresh copies of the inputs gives the same bits.
  std::vector<float*> c;
  for (size_t i = 0; i < sizes.size(); ++i) {
    c.push_back(sizes[i] ? session.floats(sizes[i]) : nullptr);
    if (sizes[i]) fill(c.back(), sizes[i], seed + static_cast<uint32_t>(i));
  }
  execute(session, native, std::vector<void*>(c.begin(), c.end()), scalars);
  for (const Output& output : outputs) {
    CHECK(std::memcmp(a[output.operand], c[output.operand], output.count * sizeof(float)) == 0);
  }
  hal_op_plan_destroy(native);
  hal_op_plan_destroy(portable);
}

}  // namespace

TEST_CASE("cpu.native unary and its backward match the portable implementation",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const hal_activation_t activation = GENERATE(HAL_ACTIVATION_NONE, HAL_ACTIVATION_RELU,
                                               HAL_ACTIVATION_GELU_TANH, HAL_ACTIVATION_SILU);
  const int64_t count = GENERATE(int64_t{1}, int64_t{37}, int64_t{100003});
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_UNARY;
  desc.activation = activation;
  desc.alpha = 1.5f;
  desc.x = desc.out = desc.grad_x = dense({count});
  const size_t n = static_cast<size_t>(count);
  INFO("activation " << activation << ", " << count << " elements");
  compare_with_portable(session, &desc.header, {n, n}, {{1, n, 1}}, 11);
  desc.header.kind = HAL_OP_UNARY_BACKWARD;
  compare_with_portable(session, &desc.header, {n, n, n}, {{2, n, 4}}, 12);
}

TEST_CASE(
    "cpu.native GELU and SiLU and their backward at the edges of the float range match the "
    "portable ones",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const hal_activation_t activation = GENERATE(HAL_ACTIVATION_GELU_TANH, HAL_ACTIVATION_SILU);
  const float alpha = GENERATE(1.0f, -2.5f);
  const float inf = std::numeric_limits<float>::infinity();
  // Around every branch of the vector code: e^-z underflowing or clamped,
  // 1 + e^-z crossing 2^64 (|v| near 6 for GELU, 44 for SiLU), subnormals,
  // overflow of v^3, infinities and NaN.
  const float magnitudes[] = {0.0f,   1e-40f, 1e-6f, 0.5f,  1.0f,
                              3.0f,   5.9f,   6.1f,  10.0f, 22.0f,
                              40.0f,  43.9f,  44.5f, 80.0f, 88.0f,
                              100.0f, 1e10f,  1e20f, 1e30f, std::numeric_limits<float>::max(),
                              inf};
  std::vector<float> values;
  for (const float m : magnitudes) {
    values.push_back(m);
    values.push_back(-m);
  }
  values.push_back(std::numeric_limits<float>::quiet_NaN());
  // Repeated at every offset against the 16-lane vectors, with a tail.
  const size_t count = values.size() * 17 + 5;
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_UNARY;
  desc.activation = activation;
  desc.alpha = alpha;
  desc.x = desc.out = dense({static_cast<int64_t>(count)});
  float* x = session.floats(count);
  float* native = session.floats(count);
  float* portable = session.floats(count);
  for (size_t i = 0; i < count; ++i) x[i] = values[i % values.size()];
  hal_op_plan_t native_plan = plan_of(session, &desc.header, false);
  hal_op_plan_t portable_plan = plan_of(session, &desc.header, true);
  CHECK(implementation_of(native_plan) == "cpu.native");
  execute(session, native_plan, {x, native});
  execute(session, portable_plan, {x, portable});
  INFO("activation " << activation << ", alpha " << alpha);
  check_close(native, portable, count, 1);
  // And against float64 where the formula is well conditioned (|v| <= 100).
  std::vector<float> expected(count), got(count);
  size_t checked = 0;
  for (size_t i = 0; i < count; ++i) {
    const double v = double{alpha} * x[i];
    if (!(std::fabs(v) <= 100.0)) continue;
    const double z = activation == HAL_ACTIVATION_SILU
                         ? v
                         : 2.0 * std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
    expected[checked] = static_cast<float>(v / (1.0 + std::exp(-z)));
    got[checked++] = native[i];
  }
  REQUIRE(checked > count / 2);
  check_close(got.data(), expected.data(), checked, 1);
  hal_op_plan_destroy(native_plan);
  hal_op_plan_destroy(portable_plan);

  // The backward at the same values, grad_out 1 and -0.75.
  desc.header.kind = HAL_OP_UNARY_BACKWARD;
  desc.grad_x = desc.x;
  float* grad_out = session.floats(count);
  for (size_t i = 0; i < count; ++i) grad_out[i] = i % 2 ? 1.0f : -0.75f;
  native_plan = plan_of(session, &desc.header, false);
  portable_plan = plan_of(session, &desc.header, true);
  CHECK(implementation_of(native_plan) == "cpu.native");
  execute(session, native_plan, {x, grad_out, native});
  execute(session, portable_plan, {x, grad_out, portable});
  check_close(native, portable, count, 4);
  // Against the float64 derivative at every finite value (float64 holds v^3
  // for every float), NaN at the infinities (SPEC §17.6's edges).
  checked = 0;
  for (size_t i = 0; i < count; ++i) {
    const double v = alpha * x[i];  // a float product, which overflows as the op's does
    if (std::isnan(v)) continue;
    double slope = std::numeric_limits<double>::quiet_NaN();
    if (std::isfinite(v)) {
      const bool silu = activation == HAL_ACTIVATION_SILU;
      const double z = silu ? v : 2.0 * std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
      const double dz = silu ? 1.0 : 2.0 * std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * v * v);
      const double s = 1.0 / (1.0 + std::exp(-z));
      slope = s + v * s * (1.0 - s) * dz;
    }
    expected[checked] = static_cast<float>(double{grad_out[i]} * alpha * slope);
    got[checked++] = native[i];
  }
  REQUIRE(checked > count / 2);
  check_close(got.data(), expected.data(), checked, 4);
  hal_op_plan_destroy(native_plan);
  hal_op_plan_destroy(portable_plan);
}

TEST_CASE("cpu.native bias-activation backward: grad_pre and the bias gradient",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const hal_activation_t activation =
      GENERATE(HAL_ACTIVATION_NONE, HAL_ACTIVATION_RELU, HAL_ACTIVATION_GELU_TANH);
  const int64_t rows = GENERATE(int64_t{1}, int64_t{300}),
                cols = GENERATE(int64_t{3}, int64_t{130});
  hal_op_bias_activation_backward_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_BIAS_ACTIVATION_BACKWARD;
  desc.activation = activation;
  desc.compute_bias_grad = 1;
  desc.grad_out = desc.aux = desc.grad_pre = dense({rows, cols});
  desc.grad_bias = dense({cols});
  const size_t n = static_cast<size_t>(rows * cols), c = static_cast<size_t>(cols);
  INFO("activation " << activation << ", " << rows << " x " << cols);
  const size_t aux = activation == HAL_ACTIVATION_NONE ? 0 : n;  // NONE reads no aux
  compare_with_portable(session, &desc.header, {n, aux, n, c},
                        {{2, n, 4}, {3, c, static_cast<double>(rows) * 4}}, 21);
}

TEST_CASE("cpu.native binary: same shapes, a scalar, and leading broadcast dimensions",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const hal_binary_op_t op =
      GENERATE(HAL_BINARY_ADD, HAL_BINARY_SUB, HAL_BINARY_MUL, HAL_BINARY_MAX, HAL_BINARY_MIN);
  hal_op_binary_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_BINARY;
  desc.op = op;
  desc.alpha = 0.5f;
  desc.out = dense({5, 7, 33});
  const size_t n = 5 * 7 * 33;
  SECTION("same shapes") {
    desc.a = desc.b = desc.out;
    compare_with_portable(session, &desc.header, {n, n, n}, {{2, n, 2}}, 31);
  }
  SECTION("b a scalar") {
    desc.a = desc.out;
    desc.b = dense({1, 1, 1});
    compare_with_portable(session, &desc.header, {n, 1, n}, {{2, n, 2}}, 32);
  }
  SECTION("a broadcast over the leading dimension") {
    desc.a = dense({1, 7, 33});
    desc.b = desc.out;
    compare_with_portable(session, &desc.header, {7 * 33, n, n}, {{2, n, 2}}, 33);
  }
}

TEST_CASE("cpu.native reduce over leading axes and over everything", "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const hal_reduce_kind_t kind =
      GENERATE(HAL_REDUCE_KIND_SUM, HAL_REDUCE_KIND_MEAN, HAL_REDUCE_KIND_MAX);
  hal_op_reduce_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_REDUCE;
  desc.reduce = kind;
  SECTION("columns of [513, 200]") {
    desc.axes_mask = 1;
    desc.x = dense({513, 200});
    desc.out = dense({1, 200});
    compare_with_portable(session, &desc.header, {513 * 200, 200}, {{1, 200, 513}}, 41);
  }
  SECTION("the batch of [4, 9, 70]") {
    desc.axes_mask = 1;
    desc.x = dense({4, 9, 70});
    desc.out = dense({1, 9, 70});
    compare_with_portable(session, &desc.header, {4 * 9 * 70, 9 * 70}, {{1, 9 * 70, 4}}, 42);
  }
  SECTION("all of [300007]") {
    desc.axes_mask = 1;
    desc.x = dense({300007});
    desc.out = dense({1});
    compare_with_portable(session, &desc.header, {300007, 1}, {{1, 1, 300007}}, 43);
  }
}

TEST_CASE("cpu.native layernorm and rmsnorm backward", "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const hal_norm_kind_t norm = GENERATE(HAL_NORM_LAYERNORM, HAL_NORM_RMSNORM);
  const int64_t rows = 77, cols = GENERATE(int64_t{5}, int64_t{128});
  // The forward pass saves mean and rstd; the backward reads them.
  hal_op_norm_desc_t forward{};
  forward.header.struct_size = sizeof forward;
  forward.header.kind = HAL_OP_NORM;
  forward.norm = norm;
  forward.epsilon = 1e-5f;
  forward.has_gamma = 1;
  forward.has_beta = norm == HAL_NORM_LAYERNORM;
  forward.has_mean = norm == HAL_NORM_LAYERNORM;
  forward.has_rstd = 1;
  forward.x = forward.y = dense({rows, cols});
  forward.gamma = forward.beta = dense({cols});
  forward.mean = forward.rstd = dense({rows});
  const size_t n = static_cast<size_t>(rows * cols), c = static_cast<size_t>(cols),
               r = static_cast<size_t>(rows);
  float* x = session.floats(n);
  float* gamma = session.floats(c);
  float* beta = session.floats(c);
  float* y = session.floats(n);
  float* mean = session.floats(r);
  float* rstd = session.floats(r);
  fill(x, n, 51);
  fill(gamma, c, 52, 0.5f, 1.5f);
  fill(beta, c, 53);
  hal_op_plan_t plan = plan_of(session, &forward.header, false);
  execute(
      session, plan,
      {x, gamma, forward.has_beta ? beta : nullptr, y, forward.has_mean ? mean : nullptr, rstd});
  hal_op_plan_destroy(plan);

  hal_op_norm_desc_t backward = forward;
  backward.header.kind = HAL_OP_NORM_BACKWARD;
  backward.has_mean = backward.has_rstd = 0;
  backward.has_grad_gamma = 1;
  backward.has_grad_beta = norm == HAL_NORM_LAYERNORM;
  backward.grad_y = backward.grad_x = dense({rows, cols});
  backward.grad_gamma = backward.grad_beta = dense({cols});
  hal_op_plan_t native = plan_of(session, &backward.header, false);
  hal_op_plan_t portable = plan_of(session, &backward.header, true);
  CHECK(implementation_of(native) == "cpu.native");
  std::vector<float> results[2][3];
  for (int which = 0; which < 2; ++which) {
    float* dy = session.floats(n);
    float* dx = session.floats(n);
    float* dgamma = session.floats(c);
    float* dbeta = session.floats(c);
    fill(dy, n, 54);
    execute(session, which == 0 ? native : portable,
            {x, gamma, backward.has_grad_beta ? mean : nullptr, rstd, dy, dx, dgamma,
             backward.has_grad_beta ? dbeta : nullptr});
    results[which][0].assign(dx, dx + n);
    results[which][1].assign(dgamma, dgamma + c);
    results[which][2].assign(dbeta, dbeta + c);
  }
  check_close(results[0][0].data(), results[1][0].data(), n, 16);
  check_close(results[0][1].data(), results[1][1].data(), c, static_cast<double>(rows));
  if (backward.has_grad_beta) {
    check_close(results[0][2].data(), results[1][2].data(), c, static_cast<double>(rows));
  }
  hal_op_plan_destroy(native);
  hal_op_plan_destroy(portable);
}

TEST_CASE("cpu.native cast into a strided view is exact", "[cpu][api][ops][native]") {
  NativeOpsSession session;
  // Dense [2, 5, 3, 4] into the middle block of [2, 5, 3 * 12] rows (q/k/v in one buffer).
  hal_op_cast_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_CAST;
  desc.in = dense({2, 5, 3, 4});
  desc.out = desc.in;
  const int64_t strides[4] = {5 * 36, 36, 4, 1};
  std::memcpy(desc.out.strides, strides, sizeof strides);
  hal_op_plan_t native = plan_of(session, &desc.header, false);
  CHECK(implementation_of(native) == "cpu.native");
  float* in = session.floats(120);
  float* out = session.floats(2 * 5 * 36 + 12);
  fill(in, 120, 61);
  for (int i = 0; i < 2 * 5 * 36 + 12; ++i) out[i] = -7.0f;
  execute(session, native, {in, out + 12});
  size_t copied = 0;
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 5; ++t) {
      for (int k = 0; k < 36; ++k) {
        const float value = out[12 + b * 180 + t * 36 + k];
        if (k < 12) {
          CHECK(value == in[b * 60 + t * 12 + k]);
          ++copied;
        } else {
          CHECK(value == -7.0f);  // the gaps are left alone
        }
      }
    }
  }
  CHECK(copied == 120);
  CHECK(out[0] == -7.0f);
  hal_op_plan_destroy(native);
}

TEST_CASE("what cpu.native declines goes on with its reason", "[cpu][api][ops][native]") {
  NativeOpsSession session;
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_UNARY;
  desc.activation = HAL_ACTIVATION_GELU_ERF;
  desc.alpha = 1.0f;
  desc.x = desc.out = dense({64});
  hal_op_plan_t plan = plan_of(session, &desc.header, false);
  std::string declines;
  CHECK(implementation_of(plan, &declines) == "portable");
  CHECK_THAT(declines, Catch::Contains("cpu.native: GELU_ERF"));
  hal_op_plan_destroy(plan);

  hal_op_reduce_desc_t reduce{};
  reduce.header.struct_size = sizeof reduce;
  reduce.header.kind = HAL_OP_REDUCE;
  reduce.reduce = HAL_REDUCE_KIND_SUM;
  reduce.axes_mask = 2;  // the trailing axis
  reduce.x = dense({8, 8});
  reduce.out = dense({8, 1});
  plan = plan_of(session, &reduce.header, false);
  CHECK(implementation_of(plan, &declines) == "portable");
  CHECK_THAT(declines, Catch::Contains("not the leading ones"));
  hal_op_plan_destroy(plan);
}

namespace {

// One attention shape; q, k and v are views into one packed [b, s, 3, h, d]
// buffer when |packed| (the training sample's layout), dense otherwise.
struct AttentionCase {
  int64_t batch, s_q, s_k, heads, kv_heads, dim;
  hal_causal_alignment_t causal;
  bool packed;
  float scale;
  hal_attention_sparsity_t sparsity = HAL_ATTENTION_DENSE;
  uint32_t block_q = 0, block_k = 0, topk = 0;
  // Varlen when not empty: batch is then 1 and s_q, s_k the packed rows.
  std::vector<int32_t> cu_q = {}, cu_k = {};
  uint32_t max_q = 0, max_k = 0;
  size_t workspace_shift = 0;  // bytes past an allocation's start the workspace begins
};

// A seeded block mask (about half the blocks) or top-k block indices with
// -1, repeats and out-of-range entries, in the session's memory.
void* sparsity_tensor(NativeOpsSession& session, const AttentionCase& c) {
  const bool varlen = !c.cu_q.empty();
  const int64_t s_q = varlen ? c.max_q : c.s_q, s_k = varlen ? c.max_k : c.s_k;
  const int64_t batch = varlen ? static_cast<int64_t>(c.cu_q.size()) - 1 : c.batch;
  const int64_t q_blocks = (s_q + c.block_q - 1) / c.block_q;
  const int64_t k_blocks = (s_k + c.block_k - 1) / c.block_k;
  const int64_t rows = batch * c.heads * q_blocks;
  std::mt19937 rng(21);
  if (c.sparsity == HAL_ATTENTION_BLOCK_MASK) {
    auto* mask = reinterpret_cast<uint8_t*>(session.floats(static_cast<size_t>(rows * k_blocks)));
    for (int64_t i = 0; i < rows * k_blocks; ++i) mask[i] = static_cast<uint8_t>(rng() % 2 * 3);
    return mask;
  }
  auto* indices = reinterpret_cast<int32_t*>(session.floats(static_cast<size_t>(rows * c.topk)));
  std::uniform_int_distribution<int32_t> pick(-1, static_cast<int32_t>(k_blocks));  // k_blocks: out
  for (int64_t i = 0; i < rows * c.topk; ++i) indices[i] = pick(rng);
  if (rows * c.topk >= 2) indices[0] = indices[1] = 0;  // a repeat
  return indices;
}

struct AttentionRun {
  std::vector<float> out, lse, grad_q, grad_k, grad_v;
};

hal_tensor_desc_t heads_view(int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                             int64_t row_stride) {
  hal_tensor_desc_t tensor = dense({batch, seq, heads, dim});
  tensor.strides[1] = row_stride;
  tensor.strides[0] = row_stride * seq;
  return tensor;
}

// Runs forward then backward with the default list (cpu.native) or the
// portable implementation alone, on the same seeded inputs. The backward of
// both takes the native forward's out and lse, so that it compares the
// gradients alone.
AttentionRun run_attention(NativeOpsSession& session, const AttentionCase& c, bool portable,
                           const AttentionRun* forward_of = nullptr) {
  const bool packed = c.packed && c.s_q == c.s_k && c.heads == c.kv_heads;
  const int64_t q_row = packed ? 3 * c.heads * c.dim : c.heads * c.dim;
  const int64_t kv_row = packed ? q_row : c.kv_heads * c.dim;
  hal_op_attention_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_ATTENTION;
  desc.causal = c.causal;
  desc.sparsity = c.sparsity;
  desc.block_q = c.block_q;
  desc.block_k = c.block_k;
  desc.topk = c.topk;
  desc.scale = c.scale;
  desc.batch = static_cast<uint32_t>(c.batch);
  void* cu_q = nullptr;
  void* cu_k = nullptr;
  if (!c.cu_q.empty()) {
    desc.has_cu_seqlens = 1;
    desc.batch = static_cast<uint32_t>(c.cu_q.size() - 1);
    desc.max_seqlen_q = c.max_q;
    desc.max_seqlen_k = c.max_k;
    cu_q = session.floats(c.cu_q.size());
    cu_k = session.floats(c.cu_k.size());
    std::memcpy(cu_q, c.cu_q.data(), c.cu_q.size() * sizeof(int32_t));
    std::memcpy(cu_k, c.cu_k.data(), c.cu_k.size() * sizeof(int32_t));
  }
  desc.q = heads_view(c.batch, c.s_q, c.heads, c.dim, q_row);
  desc.k = desc.v = heads_view(c.batch, c.s_k, c.kv_heads, c.dim, kv_row);
  desc.out = dense({c.batch, c.s_q, c.heads, c.dim});
  desc.lse = dense({c.batch, c.heads, c.s_q});
  const size_t q_count = static_cast<size_t>(c.batch * c.s_q * c.heads * c.dim);
  const size_t kv_count = static_cast<size_t>(c.batch * c.s_k * c.kv_heads * c.dim);
  const size_t lse_count = static_cast<size_t>(c.batch * c.heads * c.s_q);
  float *q, *k, *v;
  if (packed) {
    float* qkv = session.floats(3 * q_count);
    fill(qkv, 3 * q_count, 11, -2.0f, 2.0f);
    q = qkv;
    k = qkv + c.heads * c.dim;
    v = qkv + 2 * c.heads * c.dim;
  } else {
    q = session.floats(q_count);
    k = session.floats(kv_count);
    v = session.floats(kv_count);
    fill(q, q_count, 11, -2.0f, 2.0f);
    fill(k, kv_count, 12, -2.0f, 2.0f);
    fill(v, kv_count, 13, -1.0f, 1.0f);
  }
  float* out = session.floats(q_count);
  float* lse = session.floats(lse_count);
  void* sparse = c.sparsity == HAL_ATTENTION_DENSE ? nullptr : sparsity_tensor(session, c);
  hal_op_plan_t forward = plan_of(session, &desc.header, portable);
  if (!portable) CHECK(implementation_of(forward) == "cpu.native");
  execute(session, forward, {q, k, v, out, lse, cu_q, cu_k, sparse});
  hal_op_plan_destroy(forward);
  AttentionRun run;
  run.out.assign(out, out + q_count);
  run.lse.assign(lse, lse + lse_count);
  if (forward_of != nullptr) {
    std::memcpy(out, forward_of->out.data(), q_count * sizeof(float));
    std::memcpy(lse, forward_of->lse.data(), lse_count * sizeof(float));
  }
  desc.header.kind = HAL_OP_ATTENTION_BACKWARD;
  desc.grad_out = desc.grad_q = desc.out;
  desc.grad_k = desc.grad_v = dense({c.batch, c.s_k, c.kv_heads, c.dim});
  float* grad_out = session.floats(q_count);
  fill(grad_out, q_count, 14, -1.0f, 1.0f);
  float* grad_q = session.floats(q_count);
  float* grad_k = session.floats(kv_count);
  float* grad_v = session.floats(kv_count);
  hal_op_plan_t backward = plan_of(session, &desc.header, portable);
  if (!portable) CHECK(implementation_of(backward) == "cpu.native");
  execute(session, backward,
          {q, k, v, out, lse, cu_q, cu_k, sparse, grad_out, grad_q, grad_k, grad_v}, {},
          c.workspace_shift);
  hal_op_plan_destroy(backward);
  run.grad_q.assign(grad_q, grad_q + q_count);
  run.grad_k.assign(grad_k, grad_k + kv_count);
  run.grad_v.assign(grad_v, grad_v + kv_count);
  return run;
}

// Native against portable on |c|, within tolerance; the same bits twice.
void compare_attention(NativeOpsSession& session, const AttentionCase& c) {
  INFO("b=" << c.batch << " s_q=" << c.s_q << " s_k=" << c.s_k << " h=" << c.heads << "/"
            << c.kv_heads << " d=" << c.dim << " causal=" << c.causal << " sparsity=" << c.sparsity
            << " blocks=" << c.block_q << "x" << c.block_k << " topk=" << c.topk);
  AttentionRun native = run_attention(session, c, false);
  AttentionRun portable = run_attention(session, c, true, &native);
  const double terms = static_cast<double>(c.s_k * c.dim);
  check_close(native.out.data(), portable.out.data(), native.out.size(), terms);
  for (size_t i = 0; i < native.lse.size(); ++i) {
    if (std::isinf(portable.lse[i])) {
      CHECK(native.lse[i] == portable.lse[i]);  // a row that sees no key: -inf
      native.lse[i] = portable.lse[i] = 0.0f;
    }
  }
  check_close(native.lse.data(), portable.lse.data(), native.lse.size(), terms);
  check_close(native.grad_q.data(), portable.grad_q.data(), native.grad_q.size(), terms);
  check_close(native.grad_k.data(), portable.grad_k.data(), native.grad_k.size(), terms);
  check_close(native.grad_v.data(), portable.grad_v.data(), native.grad_v.size(), terms);
  // The same bits on a second run.
  const AttentionRun again = run_attention(session, c, false);
  CHECK(again.out == native.out);
  CHECK(again.grad_q == native.grad_q);
  CHECK(again.grad_k == native.grad_k);
  CHECK(again.grad_v == native.grad_v);
}

}  // namespace

TEST_CASE("cpu.native attention forward and backward match the portable implementation",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const AttentionCase cases[] = {
      {2, 80, 80, 2, 2, 32, HAL_CAUSAL_TOP_LEFT, true, 0.0f},        // the sample's layout
      {1, 70, 130, 4, 2, 40, HAL_CAUSAL_BOTTOM_RIGHT, false, 0.0f},  // GQA, a dim tail
      {1, 130, 70, 2, 1, 16, HAL_CAUSAL_BOTTOM_RIGHT, false, 0.3f},  // rows that see no key
      {2, 33, 65, 3, 3, 64, HAL_CAUSAL_NONE, false, 0.0f},
      {1, 65, 65, 1, 1, 8, HAL_CAUSAL_TOP_LEFT, false, 0.0f},
      // Head dims past the kernels' 32-lane passes: one pass and a 16-lane
      // chunk (48), four passes (128, the benchmarks' dim).
      {1, 100, 100, 2, 1, 48, HAL_CAUSAL_TOP_LEFT, false, 0.0f},
      {1, 90, 90, 1, 1, 128, HAL_CAUSAL_NONE, false, 0.0f},
      // Grouped-query heads whose grad_k and grad_v are summed over 4 query
      // heads from the workspace, in two passes of key rows (256 + 44).
      {2, 120, 300, 8, 2, 24, HAL_CAUSAL_BOTTOM_RIGHT, false, 0.0f},
  };
  for (const AttentionCase& c : cases) compare_attention(session, c);
}

TEST_CASE("cpu.native attention backward asks for workspace with grouped-query heads only",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const auto backward_workspace = [&](int64_t heads, int64_t kv_heads) {
    hal_op_attention_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_ATTENTION_BACKWARD;
    desc.causal = HAL_CAUSAL_TOP_LEFT;
    desc.batch = 2;
    desc.q = desc.out = desc.grad_out = desc.grad_q = dense({2, 50, heads, 16});
    desc.k = desc.v = desc.grad_k = desc.grad_v = dense({2, 70, kv_heads, 16});
    desc.lse = dense({2, heads, 50});
    hal_op_plan_t plan = plan_of(session, &desc.header, false);
    CHECK(implementation_of(plan) == "cpu.native");
    hal_op_plan_info_t info{};
    info.struct_size = sizeof info;
    REQUIRE(hal_op_plan_get_info(plan, &info) == HAL_SUCCESS);
    hal_op_plan_destroy(plan);
    return info.workspace_bytes;
  };
  CHECK(backward_workspace(4, 4) == 0);
  // grad_k and grad_v partials, f32 [key rows][heads][dim] each, and room to
  // align them on 64 bytes.
  CHECK(backward_workspace(4, 2) == 2 * (2 * 70) * 4 * 16 * sizeof(float) + 63);
  CHECK(backward_workspace(6, 1) == 2 * (2 * 70) * 6 * 16 * sizeof(float) + 63);
  // A workspace at an odd address gives the same bits as an aligned one.
  AttentionCase gqa{2, 40, 90, 6, 2, 24, HAL_CAUSAL_BOTTOM_RIGHT, false, 0.0f};
  const AttentionRun aligned = run_attention(session, gqa, false);
  gqa.workspace_shift = 5;
  const AttentionRun shifted = run_attention(session, gqa, false);
  CHECK(shifted.grad_q == aligned.grad_q);
  CHECK(shifted.grad_k == aligned.grad_k);
  CHECK(shifted.grad_v == aligned.grad_v);
}

TEST_CASE("cpu.native block-sparse attention (mask and indices) matches the portable one",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const AttentionCase cases[] = {
      // mask, alone; query blocks smaller than a work item
      {1, 200, 200, 2, 1, 32, HAL_CAUSAL_NONE, false, 0.0f, HAL_ATTENTION_BLOCK_MASK, 32, 64, 0},
      // mask with causal, key blocks of two packed blocks, rows that see no key
      {2, 150, 300, 2, 2, 16, HAL_CAUSAL_BOTTOM_RIGHT, false, 0.0f, HAL_ATTENTION_BLOCK_MASK, 24,
       128, 0},
      // indices with -1, repeats and out-of-range entries, causal, odd block_q
      {1, 256, 256, 4, 2, 24, HAL_CAUSAL_TOP_LEFT, false, 0.0f, HAL_ATTENTION_BLOCK_INDICES, 37, 64,
       3},
  };
  for (const AttentionCase& c : cases) compare_attention(session, c);
}

TEST_CASE(
    "cpu.native varlen attention (clamped cu_seqlens, empty sequences, rows outside every "
    "sequence, with block sparsity) matches the portable one",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  AttentionCase dense{1, 150, 170, 4, 2, 32, HAL_CAUSAL_BOTTOM_RIGHT, false, 0.0f};
  dense.cu_q = {3, 40, 40, 140};  // rows 0-2 and 140-149 outside; an empty sequence
  dense.cu_k = {0, 70, 71, 160};
  AttentionCase clamped{1, 90, 90, 2, 2, 16, HAL_CAUSAL_TOP_LEFT, false, 0.0f};
  clamped.cu_q = {-5, 60, 30, 1000};  // read as 0, 60, 60, 90
  clamped.cu_k = {2, 1, 80, 2147483647};
  AttentionCase sparse{
      1, 200, 200, 2, 1, 16, HAL_CAUSAL_NONE, false, 0.0f, HAL_ATTENTION_BLOCK_MASK, 32, 64};
  sparse.cu_q = {0, 130, 200};  // the first sequence is longer than max_q: rows past it see none
  sparse.cu_k = {0, 100, 200};
  sparse.max_q = 96;
  sparse.max_k = 128;
  for (const AttentionCase& c : {dense, clamped, sparse}) compare_attention(session, c);
}

TEST_CASE("cpu.native attention with no keys gives out 0 and lse -inf", "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const AttentionRun run =
      run_attention(session, {1, 5, 0, 2, 2, 16, HAL_CAUSAL_NONE, false, 0}, false);
  for (float value : run.out) CHECK(value == 0.0f);
  for (float value : run.lse) CHECK((std::isinf(value) && value < 0));
  for (float value : run.grad_q) CHECK(value == 0.0f);
}

TEST_CASE("cpu.native leaves f16 and block-sparse attention with small key blocks to portable",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  hal_op_attention_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_ATTENTION;
  desc.sparsity = HAL_ATTENTION_BLOCK_MASK;
  desc.block_q = desc.block_k = 16;
  desc.batch = 1;
  desc.q = desc.k = desc.v = desc.out = dense({1, 32, 2, 16});
  desc.lse = dense({1, 2, 32});
  hal_op_plan_t plan = plan_of(session, &desc.header, false);
  std::string declines;
  CHECK(implementation_of(plan, &declines) == "portable");
  CHECK_THAT(declines, Catch::Contains("block_k not a multiple of 64"));
  hal_op_plan_destroy(plan);
  desc.sparsity = HAL_ATTENTION_DENSE;
  desc.q = desc.k = desc.v = desc.out = dense({1, 32, 2, 16}, HAL_DTYPE_F16);
  plan = plan_of(session, &desc.header, false);
  CHECK(implementation_of(plan, &declines) == "portable");
  CHECK_THAT(declines, Catch::Contains("neither f32 nor bf16"));
  hal_op_plan_destroy(plan);
}

TEST_CASE("cpu.native AdamW with the global norm and clipping matches the portable implementation",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const std::vector<int64_t> numels = {1000, 40000, 7};  // one tensor crosses a chunk
  for (const float max_grad_norm : {0.0f, 1.0f}) {
    hal_op_adamw_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_ADAMW;
    desc.tensor_count = static_cast<uint32_t>(numels.size());
    desc.param_dtype = desc.grad_dtype = HAL_DTYPE_F32;
    desc.numels = numels.data();
    desc.beta1 = 0.9f;
    desc.beta2 = 0.95f;
    desc.epsilon = 1e-8f;
    desc.weight_decay = 0.1f;
    desc.max_grad_norm = max_grad_norm;
    desc.has_grad_norm = 1;
    INFO("max_grad_norm " << max_grad_norm);
    hal_op_plan_t native = plan_of(session, &desc.header, false);
    hal_op_plan_t portable = plan_of(session, &desc.header, true);
    CHECK(implementation_of(native) == "cpu.native");
    // Both runs start from the same param, grad, m and v (v >= 0).
    std::vector<std::vector<float*>> state(2);
    std::vector<void*> operands[2];
    for (int run = 0; run < 2; ++run) {
      operands[run].push_back(session.floats(1));
      for (size_t t = 0; t < numels.size(); ++t) {
        const size_t n = static_cast<size_t>(numels[t]);
        const uint32_t seed = 100 + 10 * static_cast<uint32_t>(t);
        float* param = session.floats(n);
        float* grad = session.floats(n);
        float* m = session.floats(n);
        float* v = session.floats(n);
        fill(param, n, seed, -1.0f, 1.0f);
        fill(grad, n, seed + 1, -0.05f, 0.05f);
        fill(m, n, seed + 2, -0.01f, 0.01f);
        fill(v, n, seed + 3, 0.0f, 1e-3f);
        operands[run].insert(operands[run].end(), {param, grad, m, v, nullptr});
        state[run].insert(state[run].end(), {param, m, v});
      }
    }
    const std::vector<hal_op_scalar_t> scalars = {{1e-2, 0, 0}, {0.0, 3, 0}};
    execute(session, native, operands[0], scalars);
    execute(session, portable, operands[1], scalars);
    const auto* norm_native = static_cast<const float*>(operands[0][0]);
    const auto* norm_portable = static_cast<const float*>(operands[1][0]);
    CHECK(std::fabs(*norm_native - *norm_portable) <= 1e-5 * *norm_portable);
    for (size_t i = 0; i < state[0].size(); ++i) {
      const size_t n = static_cast<size_t>(numels[i / 3]);
      INFO("tensor " << i / 3 << " array " << i % 3);
      check_close(state[0][i], state[1][i], n, 16);
    }
    hal_op_plan_destroy(native);
    hal_op_plan_destroy(portable);
  }
}

namespace {
// HAL_OP_SOFTMAX (log-softmax when |log|) over dense [rows, cols] f32.
hal_op_softmax_desc_t softmax_desc(uint32_t log, int64_t rows, int64_t cols) {
  hal_op_softmax_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_SOFTMAX;
  desc.log = log;
  desc.x = desc.y = dense({rows, cols});
  return desc;
}
}  // namespace

TEST_CASE("cpu.native layernorm, rmsnorm and softmax forward match the portable implementation",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  // 4100 columns: softmax rows longer than the AVX-512 path's 4096-float block.
  const int64_t rows = 37, cols = GENERATE(int64_t{1}, int64_t{15}, int64_t{300}, int64_t{4100});
  const size_t n = static_cast<size_t>(rows * cols), c = static_cast<size_t>(cols),
               r = static_cast<size_t>(rows);
  for (const hal_norm_kind_t norm : {HAL_NORM_LAYERNORM, HAL_NORM_RMSNORM}) {
    INFO("norm " << norm << " cols " << cols);
    hal_op_norm_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_NORM;
    desc.norm = norm;
    desc.epsilon = 1e-5f;
    desc.has_gamma = 1;
    desc.has_beta = norm == HAL_NORM_LAYERNORM;
    desc.has_mean = norm == HAL_NORM_LAYERNORM;
    desc.has_rstd = 1;
    desc.x = desc.y = dense({rows, cols});
    desc.gamma = desc.beta = dense({cols});
    desc.mean = desc.rstd = dense({rows});
    const bool layernorm = norm == HAL_NORM_LAYERNORM;
    compare_with_portable(session, &desc.header, {n, c, layernorm ? c : 0, n, layernorm ? r : 0, r},
                          {{3, n, static_cast<double>(cols)}, {5, r, static_cast<double>(cols)}},
                          61);
  }
  for (const uint32_t log : {0u, 1u}) {
    INFO("log " << log << " cols " << cols);
    hal_op_softmax_desc_t desc = softmax_desc(log, rows, cols);
    compare_with_portable(session, &desc.header, {n, n}, {{1, n, static_cast<double>(cols)}}, 71);
  }
}

TEST_CASE(
    "cpu.native softmax: -inf entries give 0, a row of -inf or with a NaN gives NaN, in place",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  for (const uint32_t log : {0u, 1u}) {
    INFO("log " << log);
    hal_op_softmax_desc_t desc = softmax_desc(log, 3, 40);  // 40: two vectors of 16 and a tail
    float* x = session.floats(120);
    const float inf = INFINITY;
    for (int j = 0; j < 40; ++j) {
      x[j] = j % 3 == 0 ? -inf : static_cast<float>(j) * 0.1f;
      x[40 + j] = -inf;
      x[80 + j] = static_cast<float>(j);
    }
    x[80 + 37] = NAN;  // in the tail
    hal_op_plan_t plan = plan_of(session, &desc.header, false);
    CHECK(implementation_of(plan) == "cpu.native");
    execute(session, plan, {x, x});
    double sum = 0;
    for (int j = 0; j < 40; ++j) {
      if (j % 3 == 0) CHECK(x[j] == (log ? -inf : 0.0f));
      sum += log ? std::exp(static_cast<double>(x[j])) : x[j];
      CHECK(std::isnan(x[40 + j]));
      CHECK(std::isnan(x[80 + j]));
    }
    CHECK(std::fabs(sum - 1.0) < 1e-5);
    hal_op_plan_destroy(plan);
  }
}

TEST_CASE(
    "cpu.native softmax of 32 MiB and more (streaming stores, rows not 64-byte aligned) matches "
    "the portable implementation",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  // 2100 x 4093 f32 is 34.4 MB, past the streaming threshold; a 4093-float
  // row starts at every alignment, so the unaligned heads are written too.
  const int64_t rows = 2100, cols = 4093;
  const size_t n = static_cast<size_t>(rows * cols);
  for (const uint32_t log : {0u, 1u}) {
    INFO("log " << log);
    hal_op_softmax_desc_t desc = softmax_desc(log, rows, cols);
    compare_with_portable(session, &desc.header, {n, n}, {{1, n, static_cast<double>(cols)}}, 73);
  }
}

TEST_CASE("cpu.native softmax backward matches the portable implementation",
          "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const int64_t rows = 29, cols = GENERATE(int64_t{1}, int64_t{17}, int64_t{300});
  const size_t n = static_cast<size_t>(rows * cols);
  for (const uint32_t log : {0u, 1u}) {
    INFO("log " << log << " cols " << cols);
    hal_op_softmax_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_SOFTMAX_BACKWARD;
    desc.log = log;
    desc.x = desc.y = desc.grad_x = dense({rows, cols});
    compare_with_portable(session, &desc.header, {n, n, n}, {{2, n, static_cast<double>(cols)}},
                          81);
  }
}

namespace {

// Labels or ids (i32 or i64) in the session's memory.
void* integers(NativeOpsSession& session, const std::vector<int64_t>& values, bool i64) {
  void* p = session.floats(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    if (i64) {
      static_cast<int64_t*>(p)[i] = values[i];
    } else {
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(values[i]);
    }
  }
  return p;
}

struct CrossEntropyRun {
  std::vector<float> loss, rows, grad;
};

CrossEntropyRun run_cross_entropy(NativeOpsSession& session,
                                  const hal_op_cross_entropy_desc_t& desc,
                                  const std::vector<int64_t>& labels, bool in_place,
                                  bool portable) {
  const size_t rows = static_cast<size_t>(desc.logits.shape[0]);
  const size_t count = rows * static_cast<size_t>(desc.logits.shape[1]);
  float* logits = session.floats(count);
  fill(logits, count, 91, -4.0f, 4.0f);
  void* label_data = integers(session, labels, desc.labels.dtype == HAL_DTYPE_I64);
  float* loss = session.floats(1);
  float* row_losses = session.floats(rows);
  float* grad = in_place ? logits : session.floats(count);
  hal_op_plan_t plan = plan_of(session, &desc.header, portable);
  if (!portable) CHECK(implementation_of(plan) == "cpu.native");
  hal_op_scalar_t scale{};
  scale.f64 = 0.5;
  execute(session, plan, {logits, label_data, loss, row_losses, grad}, {scale});
  hal_op_plan_destroy(plan);
  return {{loss[0]}, {row_losses, row_losses + rows}, {grad, grad + count}};
}

}  // namespace

TEST_CASE(
    "cpu.native cross-entropy matches the portable implementation (smoothing, ignored and "
    "invalid labels, i32 and i64, the gradient in place)",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const int64_t rows = 37, classes = GENERATE(int64_t{1}, int64_t{5}, int64_t{300});
  std::mt19937 rng(93);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t& label : labels) label = static_cast<int64_t>(rng() % classes);
  labels[3] = -100;  // ignored
  std::vector<int64_t> invalid = labels;
  invalid[5] = classes + 3;  // counted, loss NaN, zero gradient row
  for (const bool i64 : {false, true}) {
    for (const float smoothing : {0.0f, 0.1f}) {
      for (const bool in_place : {false, true}) {
        for (const auto* set : {&labels, &invalid}) {
          INFO("classes " << classes << " i64 " << i64 << " smoothing " << smoothing << " in place "
                          << in_place << " invalid " << (set == &invalid));
          hal_op_cross_entropy_desc_t desc{};
          desc.header.struct_size = sizeof desc;
          desc.header.kind = HAL_OP_CROSS_ENTROPY;
          desc.ignore_index = -100;
          desc.label_smoothing = smoothing;
          desc.has_row_losses = desc.has_grad = 1;
          desc.logits = desc.grad_logits = dense({rows, classes});
          desc.labels = dense({rows}, i64 ? HAL_DTYPE_I64 : HAL_DTYPE_I32);
          desc.loss = dense({1});
          desc.row_losses = dense({rows});
          const CrossEntropyRun native = run_cross_entropy(session, desc, *set, in_place, false);
          const CrossEntropyRun portable = run_cross_entropy(session, desc, *set, in_place, true);
          const double terms = 4.0 * static_cast<double>(classes);
          check_close(native.rows.data(), portable.rows.data(), native.rows.size(), terms);
          check_close(native.loss.data(), portable.loss.data(), 1, terms + rows);
          check_close(native.grad.data(), portable.grad.data(), native.grad.size(),
                      static_cast<double>(classes));
          CHECK(std::isnan(native.loss[0]) == (set == &invalid));
          const CrossEntropyRun again = run_cross_entropy(session, desc, *set, in_place, false);
          CHECK(std::memcmp(again.grad.data(), native.grad.data(),
                            native.grad.size() * sizeof(float)) == 0);
          CHECK(std::memcmp(again.rows.data(), native.rows.data(),
                            native.rows.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("cpu.native cross-entropy's mean over many rows is within an ulp of float64",
          "[cpu][api][ops][native]") {
  // The mean was once summed in f32 in row order: its error grew with the rows (7.6e-7
  // relative over 1024 rows of a GPT batch, 100x PyTorch's), enough to dominate the loss a
  // training run reports. Summed in f64 it is the rows' own rounding.
  NativeOpsSession session;
  const int64_t rows = 8192, classes = 16;
  std::mt19937 rng(94);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t& label : labels) label = static_cast<int64_t>(rng() % classes);
  hal_op_cross_entropy_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_CROSS_ENTROPY;
  desc.ignore_index = -100;
  desc.has_row_losses = desc.has_grad = 1;  // run_cross_entropy passes every operand
  desc.logits = desc.grad_logits = dense({rows, classes});
  desc.labels = dense({rows}, HAL_DTYPE_I64);
  desc.loss = dense({1});
  desc.row_losses = dense({rows});
  const CrossEntropyRun native = run_cross_entropy(session, desc, labels, false, false);
  std::vector<float> logits(static_cast<size_t>(rows * classes));
  fill(logits.data(), logits.size(), 91, -4.0f, 4.0f);  // run_cross_entropy's logits
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * classes;
    double max = row[0], sum = 0.0;
    for (int64_t k = 1; k < classes; ++k) max = std::max(max, static_cast<double>(row[k]));
    for (int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(row[k]) - max);
    total += max + std::log(sum) - static_cast<double>(row[labels[static_cast<size_t>(r)]]);
  }
  const double reference = total / static_cast<double>(rows);
  INFO("loss " << native.loss[0] << " float64 " << reference << ": "
               << std::abs(native.loss[0] - reference) / reference / FLT_EPSILON << " ulp");
  CHECK(std::abs(native.loss[0] - reference) <= FLT_EPSILON * reference);
}

TEST_CASE("portable cross-entropy over a large vocabulary is within a few ulp of float64",
          "[cpu][api][ops][portable]") {
  // The portable kernel summed a row's exponentials (and its logits, for smoothing) in f32 in
  // class order: over 2^20 classes the log-sum-exp drifted by ~1e-4, hundreds of ulp of the
  // loss. Compensated sums keep each row's loss within a few ulp.
  NativeOpsSession session;
  const int64_t rows = 3, classes = int64_t{1} << 20;
  const std::vector<int64_t> labels = {5, classes - 1, 123457};
  hal_op_cross_entropy_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_CROSS_ENTROPY;
  desc.ignore_index = -100;
  desc.label_smoothing = 0.1f;
  desc.has_row_losses = desc.has_grad = 1;
  desc.logits = desc.grad_logits = dense({rows, classes});
  desc.labels = dense({rows}, HAL_DTYPE_I64);
  desc.loss = dense({1});
  desc.row_losses = dense({rows});
  const CrossEntropyRun portable = run_cross_entropy(session, desc, labels, false, true);
  std::vector<float> logits(static_cast<size_t>(rows * classes));
  fill(logits.data(), logits.size(), 91, -4.0f, 4.0f);  // run_cross_entropy's logits
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * classes;
    double max = row[0], sum = 0.0, sum_x = 0.0;
    for (int64_t k = 1; k < classes; ++k) max = std::max(max, static_cast<double>(row[k]));
    for (int64_t k = 0; k < classes; ++k) {
      sum += std::exp(static_cast<double>(row[k]) - max);
      sum_x += row[k];
    }
    const double lse = max + std::log(sum);
    const double label = row[labels[static_cast<size_t>(r)]];
    const double loss = 0.9 * (lse - label) + 0.1 * (lse - sum_x / static_cast<double>(classes));
    const double error = std::abs(portable.rows[static_cast<size_t>(r)] - loss);
    INFO("row " << r << " loss " << portable.rows[static_cast<size_t>(r)] << " float64 " << loss
                << ": " << error / loss / FLT_EPSILON << " ulp");
    CHECK(error <= 4 * FLT_EPSILON * loss);
    total += loss;
  }
  CHECK(std::abs(portable.loss[0] - total / rows) <= 4 * FLT_EPSILON * total / rows);
}

TEST_CASE(
    "cpu.native embedding and its backward (repeats, ids out of range, accumulate) match "
    "the portable implementation",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const int64_t vocab = 11, width = GENERATE(int64_t{1}, int64_t{48});
  const std::vector<int64_t> ids = {3, 0, 10, 3, -1, 11, 3, 7, 0, 1000, 4, 4};  // [3, 4]
  const int64_t n = static_cast<int64_t>(ids.size());
  for (const bool i64 : {false, true}) {
    INFO("width " << width << " i64 " << i64);
    void* id_data = integers(session, ids, i64);
    hal_op_embedding_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_EMBEDDING;
    desc.ids = dense({3, 4}, i64 ? HAL_DTYPE_I64 : HAL_DTYPE_I32);
    desc.table = dense({vocab, width});
    desc.out = dense({3, 4, width});
    const size_t table_count = static_cast<size_t>(vocab * width);
    const size_t out_count = static_cast<size_t>(n * width);
    float* table = session.floats(table_count);
    fill(table, table_count, 95);
    std::vector<float> results[2];
    for (const bool portable : {false, true}) {
      float* out = session.floats(out_count);
      fill(out, out_count, 96);  // every element is written
      hal_op_plan_t plan = plan_of(session, &desc.header, portable);
      if (!portable) CHECK(implementation_of(plan) == "cpu.native");
      execute(session, plan, {id_data, table, out});
      hal_op_plan_destroy(plan);
      results[portable].assign(out, out + out_count);
    }
    CHECK(results[0] == results[1]);  // a copy: exact
    for (const uint32_t accumulate : {0u, 1u}) {
      INFO("accumulate " << accumulate);
      desc.header.kind = HAL_OP_EMBEDDING_BACKWARD;
      desc.accumulate = accumulate;
      float* grad_out = session.floats(out_count);
      fill(grad_out, out_count, 97);
      for (const bool portable : {false, true}) {
        float* grad_table = session.floats(table_count);
        fill(grad_table, table_count, 98);  // kept (accumulate) or overwritten
        hal_op_plan_t plan = plan_of(session, &desc.header, portable);
        if (!portable) CHECK(implementation_of(plan) == "cpu.native");
        execute(session, plan, {id_data, grad_out, grad_table});
        hal_op_plan_destroy(plan);
        results[portable].assign(grad_table, grad_table + table_count);
      }
      check_close(results[0].data(), results[1].data(), table_count, 4.0);
    }
  }
}

namespace {

// Forward and backward of one head, causal top-left, on the given q, k, v
// and grad_out; returns out, then grad_q, grad_k, grad_v.
AttentionRun attention_of(NativeOpsSession& session, int64_t s, int64_t dim,
                          const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, const std::vector<float>& grad_out) {
  hal_op_attention_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_ATTENTION;
  desc.causal = HAL_CAUSAL_TOP_LEFT;
  desc.batch = 1;
  desc.q = desc.k = desc.v = desc.out = dense({1, s, 1, dim});
  desc.lse = dense({1, 1, s});
  const size_t n = static_cast<size_t>(s * dim);
  float* buffers[8];
  for (float*& b : buffers) b = session.floats(n);
  std::memcpy(buffers[0], q.data(), n * 4);
  std::memcpy(buffers[1], k.data(), n * 4);
  std::memcpy(buffers[2], v.data(), n * 4);
  float* lse = session.floats(static_cast<size_t>(s));
  hal_op_plan_t forward = plan_of(session, &desc.header, false);
  execute(session, forward,
          {buffers[0], buffers[1], buffers[2], buffers[3], lse, nullptr, nullptr, nullptr});
  hal_op_plan_destroy(forward);
  desc.header.kind = HAL_OP_ATTENTION_BACKWARD;
  desc.grad_out = desc.grad_q = desc.grad_k = desc.grad_v = desc.q;
  std::memcpy(buffers[4], grad_out.data(), n * 4);
  hal_op_plan_t backward = plan_of(session, &desc.header, false);
  CHECK(implementation_of(backward) == "cpu.native");
  execute(session, backward,
          {buffers[0], buffers[1], buffers[2], buffers[3], lse, nullptr, nullptr, nullptr,
           buffers[4], buffers[5], buffers[6], buffers[7]});
  hal_op_plan_destroy(backward);
  return {{buffers[3], buffers[3] + n},
          {},
          {buffers[5], buffers[5] + n},
          {buffers[6], buffers[6] + n},
          {buffers[7], buffers[7] + n}};
}

}  // namespace

TEST_CASE(
    "cpu.native attention: a value no row sees never reaches that row (inf and NaN in "
    "masked keys, values and queries)",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const int64_t s = 70, dim = 16, poisoned = 37;  // key/query row 37: mid group, mid step
  const size_t n = static_cast<size_t>(s * dim);
  std::vector<float> q(n), k(n), v(n), grad_out(n);
  fill(q.data(), n, 101);
  fill(k.data(), n, 102);
  fill(v.data(), n, 103);
  fill(grad_out.data(), n, 104);
  const AttentionRun clean = attention_of(session, s, dim, q, k, v, grad_out);
  const size_t before = static_cast<size_t>(poisoned * dim);
  {
    // An inf value at key 37: rows before 37 do not see it (causal), though
    // rows 36 and 37 share a group of 4: their out and grad_q are the clean
    // run's, bit for bit.
    std::vector<float> dirty_v = v;
    for (int64_t d = 0; d < dim; ++d)
      dirty_v[before + static_cast<size_t>(d)] = std::numeric_limits<float>::infinity();
    const AttentionRun dirty = attention_of(session, s, dim, q, k, dirty_v, grad_out);
    CHECK(std::memcmp(dirty.out.data(), clean.out.data(), before * 4) == 0);
    CHECK(std::memcmp(dirty.grad_q.data(), clean.grad_q.data(), before * 4) == 0);
  }
  {
    // NaN in query row 37 and inf in its output gradient: keys after 37 are
    // not seen by row 37 (the rest of their step sees them): their grad_k
    // and grad_v are the clean run's, bit for bit.
    std::vector<float> dirty_q = q, dirty_grad = grad_out;
    for (int64_t d = 0; d < dim; ++d) {
      dirty_q[before + static_cast<size_t>(d)] = std::numeric_limits<float>::quiet_NaN();
      dirty_grad[before + static_cast<size_t>(d)] = std::numeric_limits<float>::infinity();
    }
    const AttentionRun dirty = attention_of(session, s, dim, dirty_q, k, v, dirty_grad);
    const size_t after = before + static_cast<size_t>(dim);
    CHECK(std::memcmp(dirty.grad_k.data() + after, clean.grad_k.data() + after, (n - after) * 4) ==
          0);
    CHECK(std::memcmp(dirty.grad_v.data() + after, clean.grad_v.data() + after, (n - after) * 4) ==
          0);
  }
}

namespace {

using hal::test::from_bf16;
using hal::test::from_f16;
using hal::test::to_bf16;
using hal::test::to_f16;

double load_element(const void* data, hal_dtype_t dtype, size_t i) {
  if (dtype == HAL_DTYPE_F32) return double{static_cast<const float*>(data)[i]};
  const uint16_t bits = static_cast<const uint16_t*>(data)[i];
  return dtype == HAL_DTYPE_F16 ? double{from_f16(bits)} : double{from_bf16(bits)};
}

void store_element(void* data, hal_dtype_t dtype, size_t i, float value) {
  if (dtype == HAL_DTYPE_F32) {
    static_cast<float*>(data)[i] = value;
  } else {
    static_cast<uint16_t*>(data)[i] = dtype == HAL_DTYPE_F16 ? to_f16(value) : to_bf16(value);
  }
}

// Relative tolerance of one rounding to |dtype| (with margin).
double rounding_tolerance(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F32 ? 2e-6 : dtype == HAL_DTYPE_F16 ? 1.0 / 1024 : 1.0 / 128;
}

double reference_binary(hal_binary_op_t op, double a, double b) {
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
      return std::max(a, b);
    default:
      return std::min(a, b);
  }
}

// out's flat index |i| as an element of |input|, which has out's rank and
// out's extent or 1 in each dimension (dense): by the multi-index.
size_t broadcast_index(const hal_tensor_desc_t& out, const hal_tensor_desc_t& input, size_t i) {
  size_t at = 0, stride = 1;
  for (uint32_t d = out.rank; d-- > 0;) {
    const auto extent = static_cast<size_t>(out.shape[d]);
    const size_t index = i % extent;
    i /= extent;
    if (input.shape[d] != 1) at += index * stride;
    stride *= static_cast<size_t>(input.shape[d]);
  }
  return at;
}

}  // namespace

TEST_CASE(
    "cpu.native binary serves every broadcast of dense inputs (leading, middle, trailing) in f32, "
    "bf16 and f16, against a float64 reference and the portable implementation",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  std::mt19937 rng(20261203);
  const hal_binary_op_t ops[] = {HAL_BINARY_ADD, HAL_BINARY_SUB, HAL_BINARY_MUL,
                                 HAL_BINARY_DIV, HAL_BINARY_MAX, HAL_BINARY_MIN};
  const hal_dtype_t dtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_BF16, HAL_DTYPE_F16};
  const float alphas[] = {1.0f, 0.5f, -2.0f};
  // The MoE combine's row scale first, then seeded shapes of rank 1..5.
  struct Shapes {
    std::vector<int64_t> out, a, b;
  };
  std::vector<Shapes> cases = {{{300, 129}, {300, 129}, {300, 1}},
                               {{300, 129}, {300, 1}, {300, 129}},
                               {{4, 5, 67}, {4, 1, 67}, {4, 5, 67}},
                               {{4, 5, 67}, {1, 5, 1}, {4, 1, 67}},
                               {{1, 3, 1, 40}, {1, 3, 1, 1}, {1, 1, 1, 40}}};
  for (int k = 0; k < 40; ++k) {
    Shapes s;
    const int rank = 1 + static_cast<int>(rng() % 5);
    bool long_one = false;  // at most one per shape: the sanitizer builds run this too
    for (int d = 0; d < rank; ++d) {
      // Mostly small extents, sometimes one long enough to span vectors and chunks.
      const bool long_extent = !long_one && rng() % 4 == 0;
      long_one |= long_extent;
      const int64_t extent = long_extent ? 1 + rng() % 300 : 1 + rng() % 7;
      s.out.push_back(extent);
      s.a.push_back(rng() % 3 == 0 ? 1 : extent);
      s.b.push_back(rng() % 3 == 0 ? 1 : extent);
    }
    cases.push_back(s);
  }
  for (size_t c = 0; c < cases.size(); ++c) {
    const Shapes& shapes = cases[c];
    hal_op_binary_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_BINARY;
    desc.op = ops[rng() % 6];
    desc.alpha = alphas[rng() % 3];
    desc.out = dense(shapes.out, dtypes[rng() % 3]);
    desc.a = dense(shapes.a, dtypes[rng() % 3]);
    desc.b = dense(shapes.b, dtypes[rng() % 3]);
    auto count = [](const std::vector<int64_t>& shape) {
      size_t n = 1;
      for (int64_t e : shape) n *= static_cast<size_t>(e);
      return n;
    };
    const size_t n_out = count(shapes.out), n_a = count(shapes.a), n_b = count(shapes.b);
    INFO("case " << c << ": out " << n_out << " elements, op " << desc.op << ", dtypes "
                 << desc.a.dtype << " " << desc.b.dtype << " -> " << desc.out.dtype);
    hal_op_plan_t native = plan_of(session, &desc.header, false);
    // The portable kernel takes at most 4 dimensions after merging; cpu.native any rank.
    setenv("HAL_OPS_IMPLEMENTATIONS", "portable", 1);
    hal_op_plan_t portable = nullptr;
    if (hal_op_plan_create(session.device(), &desc.header, HAL_OP_PLAN_DETERMINISTIC, &portable) !=
        HAL_SUCCESS) {
      CHECK_THAT(hal_error_last_message(), Catch::Contains("need more than 4 dimensions"));
      portable = nullptr;
    }
    unsetenv("HAL_OPS_IMPLEMENTATIONS");
    std::string declines;
    CHECK(implementation_of(native, &declines) == "cpu.native");
    INFO(declines);
    // Inputs stored in their dtypes; b away from 0 so that DIV stays tame.
    float* a = session.floats(n_a);
    float* b = session.floats(n_b);
    std::uniform_real_distribution<float> uniform(-3.0f, 3.0f), magnitude(0.5f, 3.0f);
    for (size_t i = 0; i < n_a; ++i) store_element(a, desc.a.dtype, i, uniform(rng));
    for (size_t i = 0; i < n_b; ++i) {
      store_element(b, desc.b.dtype, i, (rng() % 2 ? 1.0f : -1.0f) * magnitude(rng));
    }
    float* out_native = session.floats(n_out);
    float* out_portable = session.floats(n_out);
    execute(session, native, {a, b, out_native});
    if (portable != nullptr) execute(session, portable, {a, b, out_portable});
    const double tolerance = rounding_tolerance(desc.out.dtype);
    size_t bad_reference = 0, bad_portable = 0, first = n_out;
    // f16 out: the same f32 arithmetic as portable, then the same rounding,
    // so the same bits.
    if (portable != nullptr && desc.out.dtype == HAL_DTYPE_F16) {
      CHECK(std::memcmp(out_native, out_portable, n_out * sizeof(uint16_t)) == 0);
    }
    for (size_t i = 0; i < n_out; ++i) {
      const double want =
          desc.alpha *
          reference_binary(desc.op,
                           load_element(a, desc.a.dtype, broadcast_index(desc.out, desc.a, i)),
                           load_element(b, desc.b.dtype, broadcast_index(desc.out, desc.b, i)));
      const double got = load_element(out_native, desc.out.dtype, i);
      const double served = load_element(out_portable, desc.out.dtype, i);
      const double limit = tolerance * (1.0 + std::fabs(want));
      if (!(std::fabs(got - want) <= limit) && bad_reference++ == 0) first = i;
      if (portable != nullptr && !(std::fabs(got - served) <= limit)) ++bad_portable;
    }
    INFO("first difference from the reference at " << first);
    CHECK(bad_reference == 0);
    CHECK(bad_portable == 0);
    hal_op_plan_destroy(native);
    hal_op_plan_destroy(portable);
  }
}

namespace {

// The activations and their slopes in float64 (SPEC §17.6's formulas).
double reference_activation(hal_activation_t activation, double v) {
  const double z = activation == HAL_ACTIVATION_SILU
                       ? v
                       : 2.0 * std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
  switch (activation) {
    case HAL_ACTIVATION_RELU:
      return v < 0 ? 0.0 : v;
    case HAL_ACTIVATION_GELU_TANH:
    case HAL_ACTIVATION_SILU:
      return v / (1.0 + std::exp(-z));
    default:
      return v;
  }
}

double reference_slope(hal_activation_t activation, double v) {
  if (activation == HAL_ACTIVATION_NONE) return 1.0;
  if (activation == HAL_ACTIVATION_RELU) return v > 0 ? 1.0 : 0.0;
  const bool silu = activation == HAL_ACTIVATION_SILU;
  const double z = silu ? v : 2.0 * std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
  const double dz = silu ? 1.0 : 2.0 * std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * v * v);
  const double s = 1.0 / (1.0 + std::exp(-z));
  return s + v * s * (1.0 - s) * dz;
}

}  // namespace

TEST_CASE(
    "cpu.native unary and its backward in f16, alone and mixed with f32 and bf16, against a "
    "float64 reference and the portable implementation",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const hal_activation_t activation = GENERATE(HAL_ACTIVATION_NONE, HAL_ACTIVATION_RELU,
                                               HAL_ACTIVATION_GELU_TANH, HAL_ACTIVATION_SILU);
  // 1029 spans two 512-element blocks and a tail; 20000 two chunks of the pool.
  const int64_t count = GENERATE(int64_t{1}, int64_t{37}, int64_t{1029}, int64_t{20000});
  struct Dtypes {
    hal_dtype_t x, grad_out, out;
  };
  const Dtypes mixes[] = {{HAL_DTYPE_F16, HAL_DTYPE_F16, HAL_DTYPE_F16},
                          {HAL_DTYPE_F16, HAL_DTYPE_F32, HAL_DTYPE_F32},
                          {HAL_DTYPE_F32, HAL_DTYPE_BF16, HAL_DTYPE_F16},
                          {HAL_DTYPE_BF16, HAL_DTYPE_F16, HAL_DTYPE_BF16}};
  std::mt19937 rng(20261204 + static_cast<uint32_t>(activation));
  std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
  const size_t n = static_cast<size_t>(count);
  for (const Dtypes& mix : mixes) {
    for (const bool backward : {false, true}) {
      INFO("activation " << activation << ", " << n << " elements, dtypes x " << mix.x
                         << " grad_out " << mix.grad_out << " out " << mix.out
                         << (backward ? ", backward" : ""));
      hal_op_unary_desc_t desc{};
      desc.header.struct_size = sizeof desc;
      desc.header.kind = backward ? HAL_OP_UNARY_BACKWARD : HAL_OP_UNARY;
      desc.activation = activation;
      desc.alpha = 1.5f;
      desc.x = dense({count}, mix.x);
      desc.out = dense({count}, backward ? mix.grad_out : mix.out);
      desc.grad_x = dense({count}, mix.out);
      float* x = session.floats(n);
      float* grad_out = session.floats(n);
      for (size_t i = 0; i < n; ++i) store_element(x, mix.x, i, uniform(rng));
      for (size_t i = 0; i < n; ++i) store_element(grad_out, mix.grad_out, i, uniform(rng));
      float* native = session.floats(n);
      float* portable = session.floats(n);
      hal_op_plan_t native_plan = plan_of(session, &desc.header, false);
      hal_op_plan_t portable_plan = plan_of(session, &desc.header, true);
      std::string declines;
      CHECK(implementation_of(native_plan, &declines) == "cpu.native");
      INFO(declines);
      if (backward) {
        execute(session, native_plan, {x, grad_out, native});
        execute(session, portable_plan, {x, grad_out, portable});
      } else {
        execute(session, native_plan, {x, native});
        execute(session, portable_plan, {x, portable});
      }
      // The f32 results may differ by an ulp (the exp polynomials), which one
      // rounding to f16 may turn into an f16 ulp: two roundings' worth.
      const double tolerance = 2 * rounding_tolerance(mix.out);
      size_t bad_reference = 0, bad_portable = 0, first = n;
      for (size_t i = 0; i < n; ++i) {
        const double v = desc.alpha * load_element(x, mix.x, i);
        const double want = backward ? load_element(grad_out, mix.grad_out, i) * desc.alpha *
                                           reference_slope(activation, v)
                                     : reference_activation(activation, v);
        const double got = load_element(native, mix.out, i);
        const double served = load_element(portable, mix.out, i);
        if (!(std::fabs(got - want) <= tolerance * std::fabs(want) + 2e-5) && bad_reference++ == 0)
          first = i;
        if (!(std::fabs(got - served) <= tolerance * std::fabs(served) + 2e-5)) ++bad_portable;
      }
      INFO("first difference from the reference at " << first);
      CHECK(bad_reference == 0);
      CHECK(bad_portable == 0);
      hal_op_plan_destroy(native_plan);
      hal_op_plan_destroy(portable_plan);
    }
  }
}

TEST_CASE(
    "cpu.native binary leaves stride-0 broadcasts (f16 ones too) and strided outputs to portable",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  hal_op_binary_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_BINARY;
  desc.op = HAL_BINARY_MUL;
  desc.alpha = 1.0f;
  desc.out = desc.a = dense({6, 8});
  desc.b = dense({6, 1});
  struct Decline {
    const char* what;
    hal_op_binary_desc_t desc;
    const char* reason;
  };
  std::vector<Decline> declines;
  Decline f16_stride0{"an f16 b broadcast by a stride of 0", desc, "b is not dense row-major"};
  f16_stride0.desc.b = dense({6, 8}, HAL_DTYPE_F16);
  f16_stride0.desc.b.strides[1] = 0;
  declines.push_back(f16_stride0);
  Decline stride0{"b broadcast by a stride of 0", desc, "b is not dense row-major"};
  stride0.desc.b = dense({6, 8});
  stride0.desc.b.strides[1] = 0;
  declines.push_back(stride0);
  Decline strided{"out with a gap between rows", desc, "out is not dense row-major"};
  strided.desc.out.strides[0] = 16;
  declines.push_back(strided);
  for (const Decline& decline : declines) {
    INFO(decline.what);
    hal_op_plan_t plan = plan_of(session, &decline.desc.header, false);
    std::string reasons;
    CHECK(implementation_of(plan, &reasons) == "portable");
    CHECK_THAT(reasons, Catch::Contains(decline.reason));
    hal_op_plan_destroy(plan);
  }
}

namespace {

// Every output of one attention run, as doubles.
struct TypedAttentionRun {
  std::vector<double> out, lse, grad_q, grad_k, grad_v;
};

std::vector<double> elements_of(const void* data, hal_dtype_t dtype, size_t count) {
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = load_element(data, dtype, i);
  return values;
}

// Forward then backward on dense tensors: q, k, v and grad_out of |in|, out
// and the gradients of |out_type|, lse f32; seeded inputs, rounded to |in|,
// so that both implementations see the same values. Each implementation's
// backward takes its own forward's out and lse.
TypedAttentionRun run_typed_attention(NativeOpsSession& session, const AttentionCase& c,
                                      hal_dtype_t in, hal_dtype_t out_type, bool portable) {
  hal_op_attention_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_ATTENTION;
  desc.causal = c.causal;
  desc.scale = c.scale;
  desc.batch = static_cast<uint32_t>(c.batch);
  desc.q = dense({c.batch, c.s_q, c.heads, c.dim}, in);
  desc.k = desc.v = dense({c.batch, c.s_k, c.kv_heads, c.dim}, in);
  desc.out = dense({c.batch, c.s_q, c.heads, c.dim}, out_type);
  desc.lse = dense({c.batch, c.heads, c.s_q});
  const size_t q_count = static_cast<size_t>(c.batch * c.s_q * c.heads * c.dim);
  const size_t kv_count = static_cast<size_t>(c.batch * c.s_k * c.kv_heads * c.dim);
  const size_t lse_count = static_cast<size_t>(c.batch * c.heads * c.s_q);
  // session.floats(n) holds n f32, so n elements of any float dtype.
  const auto filled = [&](size_t count, uint32_t seed, float low, float high) {
    void* data = session.floats(count);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(low, high);
    for (size_t i = 0; i < count; ++i) store_element(data, in, i, value(rng));
    return data;
  };
  void* q = filled(q_count, 31, -2.0f, 2.0f);
  void* k = filled(kv_count, 32, -2.0f, 2.0f);
  void* v = filled(kv_count, 33, -1.0f, 1.0f);
  void* grad_out = filled(q_count, 34, -1.0f, 1.0f);
  void* out = session.floats(q_count);
  float* lse = session.floats(lse_count);
  hal_op_plan_t forward = plan_of(session, &desc.header, portable);
  CHECK(implementation_of(forward) == (portable ? "portable" : "cpu.native"));
  execute(session, forward, {q, k, v, out, lse, nullptr, nullptr, nullptr});
  hal_op_plan_destroy(forward);
  desc.header.kind = HAL_OP_ATTENTION_BACKWARD;
  desc.grad_out = dense({c.batch, c.s_q, c.heads, c.dim}, in);
  desc.grad_q = desc.out;
  desc.grad_k = desc.grad_v = dense({c.batch, c.s_k, c.kv_heads, c.dim}, out_type);
  void* grad_q = session.floats(q_count);
  void* grad_k = session.floats(kv_count);
  void* grad_v = session.floats(kv_count);
  hal_op_plan_t backward = plan_of(session, &desc.header, portable);
  CHECK(implementation_of(backward) == (portable ? "portable" : "cpu.native"));
  execute(session, backward,
          {q, k, v, out, lse, nullptr, nullptr, nullptr, grad_out, grad_q, grad_k, grad_v});
  hal_op_plan_destroy(backward);
  TypedAttentionRun run;
  run.out = elements_of(out, out_type, q_count);
  run.lse = elements_of(lse, HAL_DTYPE_F32, lse_count);
  run.grad_q = elements_of(grad_q, out_type, q_count);
  run.grad_k = elements_of(grad_k, out_type, kv_count);
  run.grad_v = elements_of(grad_v, out_type, kv_count);
  return run;
}

// |actual| within SPEC §17.6's f32 tolerance for |terms| of |expected|, plus
// one rounding to |dtype| on either side (each implementation rounds its own
// f32 result).
void check_typed_close(const std::vector<double>& actual, const std::vector<double>& expected,
                       hal_dtype_t dtype, double terms) {
  REQUIRE(actual.size() == expected.size());
  size_t bad = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double tolerance =
        1e-5 * std::sqrt(terms) + (1e-5 + 2 * rounding_tolerance(dtype)) * std::fabs(expected[i]);
    if (!(std::fabs(actual[i] - expected[i]) <= tolerance) && ++bad <= 5) {
      INFO("element " << i << ": " << actual[i] << " against " << expected[i]);
      CHECK(false);
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE(
    "cpu.native attention with bf16 tensors (bf16 outputs, and f32 outputs of bf16 inputs) "
    "matches the portable implementation",
    "[cpu][api][ops][native]") {
  NativeOpsSession session;
  const AttentionCase cases[] = {
      {1, 70, 90, 4, 2, 32, HAL_CAUSAL_BOTTOM_RIGHT, false, 0.0f},  // GQA: the workspace sums
      {2, 64, 64, 2, 2, 48, HAL_CAUSAL_TOP_LEFT, false, 0.0f},
  };
  const hal_dtype_t pairs[][2] = {{HAL_DTYPE_BF16, HAL_DTYPE_BF16},
                                  {HAL_DTYPE_BF16, HAL_DTYPE_F32}};
  for (const AttentionCase& c : cases) {
    for (const auto& pair : pairs) {
      INFO("b=" << c.batch << " s_q=" << c.s_q << " s_k=" << c.s_k << " h=" << c.heads << "/"
                << c.kv_heads << " d=" << c.dim << " out dtype " << pair[1]);
      const TypedAttentionRun native = run_typed_attention(session, c, pair[0], pair[1], false);
      const TypedAttentionRun portable = run_typed_attention(session, c, pair[0], pair[1], true);
      const double terms = static_cast<double>(c.s_k * c.dim);
      check_typed_close(native.out, portable.out, pair[1], terms);
      check_typed_close(native.lse, portable.lse, HAL_DTYPE_F32, terms);
      check_typed_close(native.grad_q, portable.grad_q, pair[1], terms);
      check_typed_close(native.grad_k, portable.grad_k, pair[1], terms);
      check_typed_close(native.grad_v, portable.grad_v, pair[1], terms);
      const TypedAttentionRun again = run_typed_attention(session, c, pair[0], pair[1], false);
      CHECK(again.out == native.out);
      CHECK(again.grad_q == native.grad_q);
      CHECK(again.grad_k == native.grad_k);
      CHECK(again.grad_v == native.grad_v);
    }
  }
}
