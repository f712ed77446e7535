// The portable HAL_OP_MATMUL's two kernels (ops/portable/kernels/matmul.hal)
// through the public API on whatever device the environment selects (the
// cpu plugin with HAL_OPS_IMPLEMENTATIONS=portable, or PoCL): matmul_tiled
// (group-shared memory, the GPUs' kernel) and the register-blocked
// matmul_<dtype> (the CPUs'), chosen with HAL_OPS_PORTABLE_MATMUL. Both
// against a float64 reference, and against each other bit for bit (SPEC.md
// §17.6.1: one fma chain per element, k ascending, in both), on shapes that
// cross the tiles' edges: odd sizes, more than one 64-wide tile and 16-wide
// k step, batches with a broadcast operand, transposes, every epilogue.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "op_session.hpp"

namespace {

struct Shape {
  int64_t batch, m, n, k;
  uint32_t flags;    // TRANSPOSE_A/B, BIAS, SAVE_AUX
  float beta;        // != 0: c is read
  bool broadcast_b;  // b's batch stride 0
};

float round_to(hal_dtype_t dtype, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, 4);
  if (dtype == HAL_DTYPE_BF16) {
    bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
    std::memcpy(&v, &bits, 4);
  }
  return v;
}

// bf16 storage of f32 values already rounded to bf16.
std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &values[i], 4);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
  return out;
}

double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// d, then aux when SAVE_AUX, as f32 words from the device.
struct Result {
  std::vector<float> d, aux;
};

// The same size and bytes (memcmp on an empty vector's data() would pass it a null pointer).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class MatmulCase {
 public:
  MatmulCase(op_test::Session& session, const Shape& shape, hal_dtype_t dtype, uint32_t seed)
      : session_(session), shape_(shape), dtype_(dtype) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const auto fill = [&](size_t count, hal_dtype_t type) {
      std::vector<float> v(count);
      for (float& x : v) x = round_to(type, uniform(rng));
      return v;
    };
    const int64_t b_batches = shape.broadcast_b ? 1 : shape.batch;
    a_ = fill(static_cast<size_t>(shape.batch * shape.m * shape.k), dtype);
    b_ = fill(static_cast<size_t>(b_batches * shape.k * shape.n), dtype);
    c_ = fill(static_cast<size_t>(shape.batch * shape.m * shape.n), HAL_DTYPE_F32);
    bias_ = fill(static_cast<size_t>(shape.n), HAL_DTYPE_F32);
  }

  const Shape& shape() const { return shape_; }

  hal_op_matmul_desc_t desc() const {
    hal_op_matmul_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_MATMUL;
    desc.flags = shape_.flags;
    desc.activation = HAL_ACTIVATION_GELU_TANH;
    desc.alpha = 0.75f;
    desc.beta = shape_.beta;
    const bool ta = (shape_.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
    const bool tb = (shape_.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
    const int64_t a_shape[3] = {shape_.batch, ta ? shape_.k : shape_.m, ta ? shape_.m : shape_.k};
    const int64_t b_shape[3] = {shape_.batch, tb ? shape_.n : shape_.k, tb ? shape_.k : shape_.n};
    const int64_t d_shape[3] = {shape_.batch, shape_.m, shape_.n};
    hal_tensor_desc_contiguous(&desc.a, dtype_, 3, a_shape);
    hal_tensor_desc_contiguous(&desc.b, dtype_, 3, b_shape);
    if (shape_.broadcast_b) desc.b.strides[0] = 0;
    hal_tensor_desc_contiguous(&desc.c, HAL_DTYPE_F32, 3, d_shape);
    hal_tensor_desc_contiguous(&desc.d, HAL_DTYPE_F32, 3, d_shape);
    hal_tensor_desc_contiguous(&desc.aux, HAL_DTYPE_F32, 3, d_shape);
    const int64_t bias_shape[1] = {shape_.n};
    hal_tensor_desc_contiguous(&desc.bias, HAL_DTYPE_F32, 1, bias_shape);
    return desc;
  }

  // Runs the plan the portable implementation makes with |kernel| as
  // HAL_OPS_PORTABLE_MATMUL.
  Result run(const char* kernel) {
    REQUIRE(setenv("HAL_OPS_PORTABLE_MATMUL", kernel, 1) == 0);
    const hal_op_matmul_desc_t d = desc();
    void* a = dtype_ == HAL_DTYPE_BF16 ? static_cast<void*>(session_.upload(to_bf16(a_)))
                                       : static_cast<void*>(session_.upload(a_));
    void* b = dtype_ == HAL_DTYPE_BF16 ? static_cast<void*>(session_.upload(to_bf16(b_)))
                                       : static_cast<void*>(session_.upload(b_));
    const bool uses_c = shape_.beta != 0.0f;
    const bool has_bias = (shape_.flags & HAL_MATMUL_BIAS) != 0;
    const bool has_aux = (shape_.flags & HAL_MATMUL_SAVE_AUX) != 0;
    const size_t count = c_.size();
    float* out = session_.alloc<float>(count, -7.0f);
    float* aux = has_aux ? session_.alloc<float>(count, -7.0f) : nullptr;
    session_.run(&d.header, {a, b, uses_c ? session_.upload(c_) : nullptr, out,
                             has_bias ? session_.upload(bias_) : nullptr, aux});
    unsetenv("HAL_OPS_PORTABLE_MATMUL");
    Result result;
    bool intact = false;
    result.d = session_.download(out, count, &intact);
    CHECK(intact);  // nothing written past d
    if (has_aux) result.aux = session_.download(aux, count);
    return result;
  }

  // float64 pre-activation value of element (z, i, j).
  double reference(int64_t z, int64_t i, int64_t j) const {
    const bool ta = (shape_.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
    const bool tb = (shape_.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
    const int64_t m = shape_.m, n = shape_.n, k = shape_.k;
    const int64_t zb = shape_.broadcast_b ? 0 : z;
    double sum = 0.0;
    for (int64_t q = 0; q < k; ++q) {
      const double av = a_[static_cast<size_t>(z * m * k + (ta ? q * m + i : i * k + q))];
      const double bv = b_[static_cast<size_t>(zb * k * n + (tb ? j * k + q : q * n + j))];
      sum += av * bv;
    }
    double v = 0.75 * sum;
    if (shape_.beta != 0.0f) v += shape_.beta * c_[static_cast<size_t>((z * m + i) * n + j)];
    if ((shape_.flags & HAL_MATMUL_BIAS) != 0) v += bias_[static_cast<size_t>(j)];
    return v;
  }

 private:
  op_test::Session& session_;
  Shape shape_;
  hal_dtype_t dtype_;
  std::vector<float> a_, b_, c_, bias_;
};

const Shape kShapes[] = {
    {1, 1, 1, 1, 0, 0.0f, false},
    {1, 70, 130, 37, HAL_MATMUL_BIAS | HAL_MATMUL_SAVE_AUX, 0.5f, false},
    {2, 65, 17, 100, HAL_MATMUL_TRANSPOSE_A, 0.0f, true},
    {3, 33, 64, 16, HAL_MATMUL_TRANSPOSE_B | HAL_MATMUL_BIAS, 1.0f, false},
    {1, 128, 129, 0, HAL_MATMUL_BIAS, 0.25f, false},  // k = 0: the epilogue alone
};

}  // namespace

TEST_CASE(
    "the tiled and register-blocked portable matmuls give the float64 result, bit for bit "
    "alike") {
  op_test::Session session;
  const hal_dtype_t dtype = GENERATE(HAL_DTYPE_F32, HAL_DTYPE_BF16);
  uint32_t seed = 1;
  for (const Shape& shape : kShapes) {
    INFO("batch " << shape.batch << " m " << shape.m << " n " << shape.n << " k " << shape.k
                  << " flags " << shape.flags << " beta " << shape.beta << " dtype " << dtype);
    MatmulCase matmul(session, shape, dtype, seed++);
    const Result tiled = matmul.run("tiled");
    const Result blocked = matmul.run("blocked");
    // Bit for bit (as bytes: -0 and NaN compare as bits; a case without aux has none).
    CHECK(same_bits(tiled.d, blocked.d));
    CHECK(same_bits(tiled.aux, blocked.aux));
    // f32 accumulation of k products of magnitude <= 1 (SPEC §17.6.1's
    // tolerance_for(f32, k + 2)), then GELU.
    const double tolerance = 1e-5 * std::sqrt(static_cast<double>(shape.k + 2));
    size_t bad = 0;
    for (int64_t z = 0; z < shape.batch; ++z) {
      for (int64_t i = 0; i < shape.m; ++i) {
        for (int64_t j = 0; j < shape.n; ++j) {
          const size_t at = static_cast<size_t>((z * shape.m + i) * shape.n + j);
          const double pre = matmul.reference(z, i, j);
          const double want = gelu_tanh(pre);
          if (std::fabs(tiled.d[at] - want) > tolerance + 1e-5 * std::fabs(want)) ++bad;
          if (!tiled.aux.empty() &&
              std::fabs(tiled.aux[at] - pre) > tolerance + 1e-5 * std::fabs(pre)) {
            ++bad;
          }
        }
      }
    }
    CHECK(bad == 0);
  }
}

// HAL_OP_GROUPED_MATMUL's two kernels (grouped_matmul_tiled and
// grouped_matmul): 150 rows over more than two 64-row tiles, with an empty
// group, a decreasing pair, offsets past both ends (clamped), rows two
// groups cover (the last one's product) and rows none covers (left as they
// are), b transposed or not.
TEST_CASE(
    "the tiled and register-blocked portable grouped matmuls give the float64 result, "
    "bit for bit alike") {
  op_test::Session session;
  const bool transpose_b = GENERATE(false, true);
  const hal_dtype_t dtype = GENERATE(HAL_DTYPE_F32, HAL_DTYPE_BF16);
  INFO("transpose_b " << transpose_b << " dtype " << dtype);
  const int64_t rows = 150, n = 70, k = 37;
  // Groups [0, 40), [40, 40), [30, 100) (overlapping the first), then a
  // decreasing pair, then [90, 140) and [120, past rows): rows 140..149 are
  // in the last, none is uncovered by construction except through the
  // decreasing pair; a second case leaves rows 100.. uncovered.
  const std::vector<std::vector<int32_t>> offset_sets = {{-5, 40, 40, 30, 100, 90, 140, 120, 999},
                                                         {0, 64, 64, 100}};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const auto& offsets : offset_sets) {
    const int64_t groups = static_cast<int64_t>(offsets.size()) - 1;
    INFO("groups " << groups);
    std::vector<float> a(static_cast<size_t>(rows * k)), b(static_cast<size_t>(groups * k * n));
    for (float& x : a) x = round_to(dtype, uniform(rng));
    for (float& x : b) x = round_to(dtype, uniform(rng));
    hal_op_grouped_matmul_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_GROUPED_MATMUL;
    desc.flags = transpose_b ? HAL_MATMUL_TRANSPOSE_B : 0;
    desc.groups = static_cast<uint32_t>(groups);
    const int64_t a_shape[2] = {rows, k}, d_shape[2] = {rows, n};
    const int64_t b_shape[3] = {groups, transpose_b ? n : k, transpose_b ? k : n};
    hal_tensor_desc_contiguous(&desc.a, dtype, 2, a_shape);
    hal_tensor_desc_contiguous(&desc.b, dtype, 3, b_shape);
    hal_tensor_desc_contiguous(&desc.d, HAL_DTYPE_F32, 2, d_shape);
    const auto run = [&](const char* kernel) {
      REQUIRE(setenv("HAL_OPS_PORTABLE_MATMUL", kernel, 1) == 0);
      void* da = dtype == HAL_DTYPE_BF16 ? static_cast<void*>(session.upload(to_bf16(a)))
                                         : static_cast<void*>(session.upload(a));
      void* db = dtype == HAL_DTYPE_BF16 ? static_cast<void*>(session.upload(to_bf16(b)))
                                         : static_cast<void*>(session.upload(b));
      float* dd = session.alloc<float>(static_cast<size_t>(rows * n), -7.0f);
      session.run(&desc.header, {da, db, session.upload(offsets), dd});
      unsetenv("HAL_OPS_PORTABLE_MATMUL");
      bool intact = false;
      std::vector<float> out = session.download(dd, static_cast<size_t>(rows * n), &intact);
      CHECK(intact);
      return out;
    };
    const std::vector<float> tiled = run("tiled");
    const std::vector<float> blocked = run("blocked");
    CHECK(same_bits(tiled, blocked));
    const double tolerance = 1e-5 * std::sqrt(static_cast<double>(k + 2));
    size_t bad = 0;
    for (int64_t i = 0; i < rows; ++i) {
      int64_t group = -1;  // the last group whose clamped range holds row i
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t lo = std::min<int64_t>(std::max<int64_t>(offsets[g], 0), rows);
        const int64_t hi = std::min<int64_t>(std::max<int64_t>(offsets[g + 1], 0), rows);
        if (lo <= i && i < hi) group = g;
      }
      for (int64_t j = 0; j < n; ++j) {
        const float got = tiled[static_cast<size_t>(i * n + j)];
        if (group < 0) {
          if (got != -7.0f) ++bad;  // uncovered: left as it was
          continue;
        }
        double want = 0.0;
        for (int64_t q = 0; q < k; ++q) {
          const size_t b_at =
              static_cast<size_t>(group * k * n + (transpose_b ? j * k + q : q * n + j));
          want += static_cast<double>(a[static_cast<size_t>(i * k + q)]) * b[b_at];
        }
        if (std::fabs(got - want) > tolerance) ++bad;
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("HAL_OPS_PORTABLE_MATMUL with another value declines the plan, naming the variable") {
  op_test::Session session;
  MatmulCase matmul(session, kShapes[1], HAL_DTYPE_F32, 7);
  REQUIRE(setenv("HAL_OPS_PORTABLE_MATMUL", "shared", 1) == 0);
  const hal_op_matmul_desc_t desc = matmul.desc();
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = session.try_plan(&desc.header, &plan);
  const std::string message = hal_error_last_message();
  unsetenv("HAL_OPS_PORTABLE_MATMUL");
  CHECK(result == HAL_ERROR_UNSUPPORTED);
  CHECK(plan == nullptr);
  INFO(message);
  CHECK(message.find("HAL_OPS_PORTABLE_MATMUL is 'shared'") != std::string::npos);
}
