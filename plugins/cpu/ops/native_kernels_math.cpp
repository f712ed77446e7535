// The loops of cpu.native's PyTorch-device ops (native_ops_math.cpp): unary
// math and clamp on f32 blocks in place, comparisons of a block with a
// scalar, and the byte-wise select of where. Written to vectorise; exp is the
// Cephes polynomial of native_math.hpp over float's whole range here
// (overflow to inf, gradual underflow), log and tanh are libm's.
#include <cmath>
#include <cstring>
#include <limits>

#include "native_kernels.hpp"
#include "native_kernels_shared.hpp"

namespace hal::cpu::ops::native {
namespace {

// e^x over float's whole range: exp(x > 88.72) is inf, and results below
// float's normal range are rounded once into the subnormals (2^n applied as
// two powers of two, each normal); NaN stays NaN.
inline float exp_full(float x) {
  x = x > 89.0f ? 89.0f : x;  // NaN compares false and stays
  x = x < -104.0f ? -104.0f : x;
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  n = n == n ? n : 0.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t k = static_cast<int32_t>(n);  // in [-150, 129]
  const int32_t k1 = k / 2;
  const int32_t k2 = k - k1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(k2 + 127) << 23);
  return p * s1 * s2;
}

template <typename F>
inline void apply(const float* in, float* out, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

}  // namespace

bool unary_math_native(hal_unary_math_t op) {
  switch (op) {
    case HAL_UNARY_MATH_EXP:
    case HAL_UNARY_MATH_LOG:
    case HAL_UNARY_MATH_SQRT:
    case HAL_UNARY_MATH_RSQRT:
    case HAL_UNARY_MATH_RECIPROCAL:
    case HAL_UNARY_MATH_TANH:
    case HAL_UNARY_MATH_SIGMOID:
    case HAL_UNARY_MATH_ABS:
    case HAL_UNARY_MATH_NEG:
    case HAL_UNARY_MATH_SIGN:
    case HAL_UNARY_MATH_FLOOR:
    case HAL_UNARY_MATH_CEIL:
    case HAL_UNARY_MATH_ROUND:
    case HAL_UNARY_MATH_TRUNC:
      return true;
    default:
      return false;
  }
}

HAL_ISA_CLONES void unary_math_block(hal_unary_math_t op, const float* in, float* out, size_t n) {
  switch (op) {
    case HAL_UNARY_MATH_EXP:
      apply(in, out, n, [](float x) { return exp_full(x); });
      break;
    case HAL_UNARY_MATH_LOG:
      apply(in, out, n, [](float x) { return std::log(x); });
      break;
    case HAL_UNARY_MATH_SQRT:
      apply(in, out, n, [](float x) { return std::sqrt(x); });
      break;
    case HAL_UNARY_MATH_RSQRT:
      apply(in, out, n, [](float x) { return 1.0f / std::sqrt(x); });
      break;
    case HAL_UNARY_MATH_RECIPROCAL:
      apply(in, out, n, [](float x) { return 1.0f / x; });
      break;
    case HAL_UNARY_MATH_TANH:
      apply(in, out, n, [](float x) { return std::tanh(x); });
      break;
    case HAL_UNARY_MATH_SIGMOID:
      apply(in, out, n, [](float x) { return 1.0f / (1.0f + exp_full(-x)); });
      break;
    case HAL_UNARY_MATH_ABS:
      apply(in, out, n, [](float x) { return std::fabs(x); });
      break;
    case HAL_UNARY_MATH_NEG:
      apply(in, out, n, [](float x) { return -x; });
      break;
    case HAL_UNARY_MATH_SIGN:  // torch.sign: +-0 and NaN give 0
      apply(in, out, n, [](float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); });
      break;
    case HAL_UNARY_MATH_FLOOR:
      apply(in, out, n, [](float x) { return std::floor(x); });
      break;
    case HAL_UNARY_MATH_CEIL:
      apply(in, out, n, [](float x) { return std::ceil(x); });
      break;
    case HAL_UNARY_MATH_ROUND:  // the default rounding mode: ties to even
      apply(in, out, n, [](float x) { return std::nearbyint(x); });
      break;
    case HAL_UNARY_MATH_TRUNC:
      apply(in, out, n, [](float x) { return std::trunc(x); });
      break;
    default:
      break;  // unary_math_native() said no: the planner never calls this
  }
}

HAL_ISA_CLONES void clamp_block(const float* in, float* out, size_t n, bool has_lo, float lo,
                                bool has_hi, float hi) {
  // NaN in x or in a bound gives NaN; the lower bound first, so lo > hi gives
  // hi. A NaN bound makes everything NaN (decided once); a NaN x fails both
  // comparisons below and stays, so the loop is two selects (it vectorises).
  if ((has_lo && lo != lo) || (has_hi && hi != hi)) {
    apply(in, out, n, [](float) { return std::numeric_limits<float>::quiet_NaN(); });
    return;
  }
  lo = has_lo ? lo : -std::numeric_limits<float>::infinity();
  hi = has_hi ? hi : std::numeric_limits<float>::infinity();
  apply(in, out, n, [lo, hi](float x) {
    const float low = x < lo ? lo : x;
    return low > hi ? hi : low;
  });
}

HAL_ISA_CLONES void compare_block(hal_binary_op_t op, const float* v, size_t n, float s,
                                  bool scalar_first, uint8_t* out) {
  // s OP v is v (the mirrored OP) s.
  if (scalar_first) {
    if (op == HAL_BINARY_LT) {
      op = HAL_BINARY_GT;
    } else if (op == HAL_BINARY_GT) {
      op = HAL_BINARY_LT;
    } else if (op == HAL_BINARY_LE) {
      op = HAL_BINARY_GE;
    } else if (op == HAL_BINARY_GE) {
      op = HAL_BINARY_LE;
    }
  }
  switch (op) {
    case HAL_BINARY_EQ:
      for (size_t i = 0; i < n; ++i) out[i] = v[i] == s;
      break;
    case HAL_BINARY_NE:
      for (size_t i = 0; i < n; ++i) out[i] = v[i] != s;
      break;
    case HAL_BINARY_LT:
      for (size_t i = 0; i < n; ++i) out[i] = v[i] < s;
      break;
    case HAL_BINARY_LE:
      for (size_t i = 0; i < n; ++i) out[i] = v[i] <= s;
      break;
    case HAL_BINARY_GT:
      for (size_t i = 0; i < n; ++i) out[i] = v[i] > s;
      break;
    default:
      for (size_t i = 0; i < n; ++i) out[i] = v[i] >= s;
      break;
  }
}

namespace {

template <typename T>
void select_typed(const uint8_t* cond, const void* a, bool a_scalar, const void* b, bool b_scalar,
                  void* out, size_t begin, size_t end) {
  const auto* pa = static_cast<const T*>(a);
  const auto* pb = static_cast<const T*>(b);
  auto* po = static_cast<T*>(out);
  const T sa = a_scalar ? pa[0] : T{};
  const T sb = b_scalar ? pb[0] : T{};
  if (a_scalar && !b_scalar) {
    for (size_t i = begin; i < end; ++i) po[i] = cond[i] != 0 ? sa : pb[i];
  } else if (!a_scalar && b_scalar) {
    for (size_t i = begin; i < end; ++i) po[i] = cond[i] != 0 ? pa[i] : sb;
  } else if (a_scalar && b_scalar) {
    for (size_t i = begin; i < end; ++i) po[i] = cond[i] != 0 ? sa : sb;
  } else {
    for (size_t i = begin; i < end; ++i) po[i] = cond[i] != 0 ? pa[i] : pb[i];
  }
}

}  // namespace

HAL_ISA_CLONES void select_elements(const uint8_t* cond, const void* a, bool a_scalar,
                                    const void* b, bool b_scalar, void* out, size_t element_size,
                                    size_t begin, size_t end) {
  switch (element_size) {
    case 8:
      select_typed<uint64_t>(cond, a, a_scalar, b, b_scalar, out, begin, end);
      break;
    case 4:
      select_typed<uint32_t>(cond, a, a_scalar, b, b_scalar, out, begin, end);
      break;
    case 2:
      select_typed<uint16_t>(cond, a, a_scalar, b, b_scalar, out, begin, end);
      break;
    default:
      select_typed<uint8_t>(cond, a, a_scalar, b, b_scalar, out, begin, end);
      break;
  }
}

}  // namespace hal::cpu::ops::native
