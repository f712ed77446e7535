#include "native_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "native_math.hpp"
#include "native_rows_avx512.hpp"

namespace hal::cpu::ops::native {
namespace {

// ---- element access -----------------------------------------------------------------

struct F32 {
  using Storage = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
struct Bf16 {
  using Storage = uint16_t;
  static float load(uint16_t v) { return from_bf16(v); }
  static uint16_t store(float v) { return to_bf16(v); }
};

template <typename E>
inline const typename E::Storage* in(ConstRef ref) {
  return static_cast<const typename E::Storage*>(ref.data);
}
template <typename E>
inline typename E::Storage* out(Ref ref) {
  return static_cast<typename E::Storage*>(ref.data);
}

// Calls body.template operator()<E>() with E the element type of |type|.
template <typename Body>
inline void with_type(Type type, Body&& body) {
  if (type == Type::kF32) {
    body.template operator()<F32>();
  } else {
    body.template operator()<Bf16>();
  }
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// v / (1 + e^-z) = v sigmoid(z). Past e^88 the exponential is taken as the
// +inf that expf gives, as the portable kernels and a float64 reference see
// it: v / inf is -0 or +0 for finite v (not v / e^88, which is -2 for v =
// -FLT_MAX) and NaN for infinite v.
inline float times_sigmoid(float v, float z) {
  const float d = 1.0f + exp_clamped(-z);
  return -z > 88.0f ? v * 0.0f : v / d;
}

// 0.5 x (1 + tanh(u)) = x sigmoid(2u): no cancellation for negative x.
inline float activate(hal_activation_t activation, float x) {
  switch (activation) {
    case HAL_ACTIVATION_RELU:
      return x < 0.0f ? 0.0f : x;  // NaN stays NaN
    case HAL_ACTIVATION_GELU_TANH: {
      const float u = kGeluScale * (x + kGeluCubic * x * x * x);
      return times_sigmoid(x, 2.0f * u);
    }
    case HAL_ACTIVATION_SILU:
      return times_sigmoid(x, x);
    default:
      return x;
  }
}

// sigmoid(z), 0 past e^88 as expf's +inf makes it: exp_clamped stops at e^88,
// where 1 / (1 + e^88) would be 6e-39, and x * 6e-39 is -2 for x = -FLT_MAX.
inline float sigmoid(float z) {
  return -z > 88.0f ? 0.0f : 1.0f / (1.0f + exp_clamped(-z));
}

// v * sigmoid'(z) * dz, the second term of d/dv v sigmoid(z(v)). Where
// sigmoid'(z) = s (1 - s) is 0 the term is v * 0: 0 for finite v even where dz
// overflows (GELU's v^2 past 1e19), NaN for infinite v, as SPEC §17.6 says.
inline float sigmoid_slope_term(float v, float s, float dz) {
  const float slope = s * (1.0f - s);
  return slope == 0.0f ? v * 0.0f : v * slope * dz;
}

inline float derivative(hal_activation_t activation, float x) {
  switch (activation) {
    case HAL_ACTIVATION_RELU:
      return x > 0.0f ? 1.0f : 0.0f;
    case HAL_ACTIVATION_GELU_TANH: {
      const float u = kGeluScale * (x + kGeluCubic * x * x * x);
      const float s = sigmoid(2.0f * u);
      const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
      return s + sigmoid_slope_term(x, s, 2.0f * du);
    }
    case HAL_ACTIVATION_SILU: {
      const float s = sigmoid(x);
      return s + sigmoid_slope_term(x, s, 1.0f);
    }
    default:
      return 1.0f;
  }
}

inline float nan_max(float a, float b) {
  if (a != a || b != b) return std::numeric_limits<float>::quiet_NaN();
  return a > b ? a : b;
}
inline float nan_min(float a, float b) {
  if (a != a || b != b) return std::numeric_limits<float>::quiet_NaN();
  return a < b ? a : b;
}

inline float apply(hal_binary_op_t op, float a, float b) {
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
      return nan_max(a, b);
    default:
      return nan_min(a, b);
  }
}

// Loops are instantiated per activation / op so the switch leaves the loop.
template <hal_activation_t Act, typename X, typename O>
inline void unary_forward_loop(float alpha, const typename X::Storage* x, typename O::Storage* y,
                               size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) y[i] = O::store(activate(Act, alpha * X::load(x[i])));
}

template <hal_activation_t Act, typename X, typename G, typename O>
inline void unary_backward_loop(float alpha, const typename X::Storage* x,
                                const typename G::Storage* grad_out, typename O::Storage* grad_x,
                                size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    grad_x[i] = O::store(G::load(grad_out[i]) * alpha * derivative(Act, alpha * X::load(x[i])));
  }
}

template <typename Body>
inline void with_activation(hal_activation_t activation, Body&& body) {
  switch (activation) {
    case HAL_ACTIVATION_RELU:
      body.template operator()<HAL_ACTIVATION_RELU>();
      break;
    case HAL_ACTIVATION_GELU_TANH:
      body.template operator()<HAL_ACTIVATION_GELU_TANH>();
      break;
    case HAL_ACTIVATION_SILU:
      body.template operator()<HAL_ACTIVATION_SILU>();
      break;
    default:
      body.template operator()<HAL_ACTIVATION_NONE>();
      break;
  }
}

constexpr size_t kLanes = 64;  // columns per block, and lanes of a one-value sum

}  // namespace

HAL_ISA_CLONES void unary_forward(hal_activation_t activation, float alpha, ConstRef x, Ref y,
                                  size_t begin, size_t end) {
  // f32 GELU and SiLU: the clones keep the division, which bounds them below
  // memory bandwidth; the AVX-512 rows replace it.
  if (x.type == Type::kF32 && y.type == Type::kF32 && avx512_rows_available()) {
    if (activation == HAL_ACTIVATION_GELU_TANH) {
      row_gelu_tanh_f32_avx512(in<F32>(x) + begin, alpha, out<F32>(y) + begin, end - begin);
      return;
    }
    if (activation == HAL_ACTIVATION_SILU) {
      row_silu_f32_avx512(in<F32>(x) + begin, alpha, out<F32>(y) + begin, end - begin);
      return;
    }
  }
  with_activation(activation, [&]<hal_activation_t Act>() {
    with_type(x.type, [&]<typename X>() {
      with_type(y.type, [&]<typename O>() {
        unary_forward_loop<Act, X, O>(alpha, in<X>(x), out<O>(y), begin, end);
      });
    });
  });
}

HAL_ISA_CLONES void unary_backward(hal_activation_t activation, float alpha, ConstRef x,
                                   ConstRef grad_out, Ref grad_x, size_t begin, size_t end) {
  with_activation(activation, [&]<hal_activation_t Act>() {
    with_type(x.type, [&]<typename X>() {
      with_type(grad_out.type, [&]<typename G>() {
        with_type(grad_x.type, [&]<typename O>() {
          unary_backward_loop<Act, X, G, O>(alpha, in<X>(x), in<G>(grad_out), out<O>(grad_x), begin,
                                            end);
        });
      });
    });
  });
}

HAL_ISA_CLONES void bias_activation_backward(hal_activation_t activation, ConstRef grad_out,
                                             ConstRef aux, Ref grad_pre, float* grad_bias,
                                             size_t rows, size_t cols, size_t col_begin,
                                             size_t col_end) {
  with_activation(activation, [&]<hal_activation_t Act>() {
    with_type(grad_out.type, [&]<typename G>() {
      with_type(aux.type, [&]<typename A>() {
        with_type(grad_pre.type, [&]<typename O>() {
          const auto* g = in<G>(grad_out);
          const auto* a = in<A>(aux);
          auto* o = out<O>(grad_pre);
          for (size_t j0 = col_begin; j0 < col_end; j0 += kLanes) {
            const size_t width = col_end - j0 < kLanes ? col_end - j0 : kLanes;
            float sums[kLanes] = {};
            for (size_t r = 0; r < rows; ++r) {
              const size_t base = r * cols + j0;
              for (size_t j = 0; j < width; ++j) {
                float value = G::load(g[base + j]);
                if constexpr (Act != HAL_ACTIVATION_NONE) {
                  value *= derivative(Act, A::load(a[base + j]));
                }
                o[base + j] = O::store(value);
                sums[j] += value;
              }
            }
            if (grad_bias != nullptr) {
              for (size_t j = 0; j < width; ++j) grad_bias[j0 + j] = sums[j];
            }
          }
        });
      });
    });
  });
}

HAL_ISA_CLONES void binary(hal_binary_op_t op, float alpha, ConstRef a, ConstRef b,
                           const BinaryLayout& layout, Ref result, size_t begin, size_t end) {
  with_type(a.type, [&]<typename TA>() {
    with_type(b.type, [&]<typename TB>() {
      with_type(result.type, [&]<typename O>() {
        const auto* pa = in<TA>(a);
        const auto* pb = in<TB>(b);
        auto* po = out<O>(result);
        const uint32_t inner = layout.rank - 1;
        const bool a_runs = layout.stride_a[inner] != 0, b_runs = layout.stride_b[inner] != 0;
        auto run = [&](auto op_constant) {
          constexpr hal_binary_op_t kOp = decltype(op_constant)::value;
          for_each_binary_run(
              layout, begin, end, [&](size_t at_a, size_t at_b, size_t i, size_t n) {
                const auto* ra = pa + at_a;
                const auto* rb = pb + at_b;
                auto* ro = po + i;
                if (a_runs && b_runs) {
                  for (size_t k = 0; k < n; ++k)
                    ro[k] = O::store(alpha * apply(kOp, TA::load(ra[k]), TB::load(rb[k])));
                } else if (a_runs) {  // b one value along the run: a row scale, say
                  const float vb = TB::load(rb[0]);
                  for (size_t k = 0; k < n; ++k)
                    ro[k] = O::store(alpha * apply(kOp, TA::load(ra[k]), vb));
                } else if (b_runs) {
                  const float va = TA::load(ra[0]);
                  for (size_t k = 0; k < n; ++k)
                    ro[k] = O::store(alpha * apply(kOp, va, TB::load(rb[k])));
                } else {
                  const auto value = O::store(alpha * apply(kOp, TA::load(ra[0]), TB::load(rb[0])));
                  for (size_t k = 0; k < n; ++k) ro[k] = value;
                }
              });
        };
        switch (op) {
          case HAL_BINARY_ADD:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_ADD>{});
            break;
          case HAL_BINARY_SUB:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_SUB>{});
            break;
          case HAL_BINARY_MUL:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_MUL>{});
            break;
          case HAL_BINARY_DIV:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_DIV>{});
            break;
          case HAL_BINARY_MAX:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_MAX>{});
            break;
          default:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_MIN>{});
            break;
        }
      });
    });
  });
}

HAL_ISA_CLONES void reduce_columns(hal_reduce_kind_t reduce, ConstRef x, Ref result, size_t rows,
                                   size_t cols, size_t col_begin, size_t col_end) {
  with_type(x.type, [&]<typename X>() {
    with_type(result.type, [&]<typename O>() {
      const auto* px = in<X>(x);
      auto* po = out<O>(result);
      for (size_t j0 = col_begin; j0 < col_end; j0 += kLanes) {
        const size_t width = col_end - j0 < kLanes ? col_end - j0 : kLanes;
        if (reduce == HAL_REDUCE_KIND_MAX) {
          float best[kLanes];
          for (size_t j = 0; j < width; ++j) best[j] = -std::numeric_limits<float>::infinity();
          for (size_t r = 0; r < rows; ++r) {
            const auto* row = px + r * cols + j0;
            for (size_t j = 0; j < width; ++j) best[j] = nan_max(best[j], X::load(row[j]));
          }
          for (size_t j = 0; j < width; ++j) po[j0 + j] = O::store(best[j]);
          continue;
        }
        float sum[kLanes] = {}, compensation[kLanes] = {};
        for (size_t r = 0; r < rows; ++r) {
          const auto* row = px + r * cols + j0;
          for (size_t j = 0; j < width; ++j) {
            const float y = X::load(row[j]) - compensation[j];
            const float t = sum[j] + y;
            compensation[j] = (t - sum[j]) - y;
            sum[j] = t;
          }
        }
        const float divisor = reduce == HAL_REDUCE_KIND_MEAN ? static_cast<float>(rows) : 1.0f;
        for (size_t j = 0; j < width; ++j) po[j0 + j] = O::store(sum[j] / divisor);
      }
    });
  });
}

HAL_ISA_CLONES float sum_range(ConstRef x, size_t begin, size_t end) {
  float total = 0.0f;
  with_type(x.type, [&]<typename X>() {
    const auto* px = in<X>(x);
    float sum[kLanes] = {}, compensation[kLanes] = {};
    size_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) {
        const float y = X::load(px[i + j]) - compensation[j];
        const float t = sum[j] + y;
        compensation[j] = (t - sum[j]) - y;
        sum[j] = t;
      }
    }
    // The lanes, then the tail, in order.
    float s = 0.0f, c = 0.0f;
    auto add = [&](float value) {
      const float y = value - c;
      const float t = s + y;
      c = (t - s) - y;
      s = t;
    };
    for (size_t j = 0; j < kLanes; ++j) add(sum[j] - compensation[j]);
    for (; i < end; ++i) add(X::load(px[i]));
    total = s - c;
  });
  return total;
}

HAL_ISA_CLONES float max_range(ConstRef x, size_t begin, size_t end) {
  float best = -std::numeric_limits<float>::infinity();
  with_type(x.type, [&]<typename X>() {
    const auto* px = in<X>(x);
    for (size_t i = begin; i < end; ++i) best = nan_max(best, X::load(px[i]));
  });
  return best;
}

HAL_ISA_CLONES void norm_backward_columns(bool with_mean, const float* x, const float* mean,
                                          const float* rstd, const float* grad_y, float* grad_gamma,
                                          float* grad_beta, size_t rows, size_t cols,
                                          size_t col_begin, size_t col_end) {
  for (size_t j0 = col_begin; j0 < col_end; j0 += kLanes) {
    const size_t width = col_end - j0 < kLanes ? col_end - j0 : kLanes;
    float gamma_sum[kLanes] = {}, beta_sum[kLanes] = {};
    for (size_t r = 0; r < rows; ++r) {
      const float centre = with_mean ? mean[r] : 0.0f;
      const float scale = rstd[r];
      const float* xr = x + r * cols + j0;
      const float* dy = grad_y + r * cols + j0;
      for (size_t j = 0; j < width; ++j) {
        gamma_sum[j] += dy[j] * ((xr[j] - centre) * scale);
        beta_sum[j] += dy[j];
      }
    }
    for (size_t j = 0; j < width; ++j) {
      if (grad_gamma != nullptr) grad_gamma[j0 + j] = gamma_sum[j];
      if (grad_beta != nullptr) grad_beta[j0 + j] = beta_sum[j];
    }
  }
}

HAL_ISA_CLONES void norm_backward_rows(bool with_mean, const float* x, const float* gamma,
                                       const float* mean, const float* rstd, const float* grad_y,
                                       float* grad_x, size_t cols, size_t row_begin,
                                       size_t row_end) {
  constexpr size_t kSumLanes = 16;
  const float inverse_cols = cols > 0 ? 1.0f / static_cast<float>(cols) : 0.0f;
  for (size_t r = row_begin; r < row_end; ++r) {
    const float centre = with_mean ? mean[r] : 0.0f;
    const float scale = rstd[r];
    const float* xr = x + r * cols;
    const float* dy = grad_y + r * cols;
    // Row sums of g and g * xhat in 16 lanes, then the lanes in order.
    float g_lanes[kSumLanes] = {}, gx_lanes[kSumLanes] = {};
    size_t j = 0;
    for (; j + kSumLanes <= cols; j += kSumLanes) {
      for (size_t k = 0; k < kSumLanes; ++k) {
        const float g = dy[j + k] * (gamma ? gamma[j + k] : 1.0f);
        g_lanes[k] += g;
        gx_lanes[k] += g * ((xr[j + k] - centre) * scale);
      }
    }
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (size_t k = 0; k < kSumLanes; ++k) {
      g_sum += g_lanes[k];
      gx_sum += gx_lanes[k];
    }
    for (; j < cols; ++j) {
      const float g = dy[j] * (gamma ? gamma[j] : 1.0f);
      g_sum += g;
      gx_sum += g * ((xr[j] - centre) * scale);
    }
    const float g_mean = with_mean ? g_sum * inverse_cols : 0.0f;
    const float gx_mean = gx_sum * inverse_cols;
    float* dx = grad_x + r * cols;
    for (size_t k = 0; k < cols; ++k) {
      const float g = dy[k] * (gamma ? gamma[k] : 1.0f);
      const float xhat = (xr[k] - centre) * scale;
      dx[k] = scale * (g - g_mean - xhat * gx_mean);
    }
  }
}

HAL_ISA_CLONES void convert(ConstRef source, Ref target, size_t count) {
  if (source.type == target.type) {
    std::memcpy(target.data, source.data, count * (source.type == Type::kF32 ? 4 : 2));
    return;
  }
  with_type(source.type, [&]<typename I>() {
    with_type(target.type, [&]<typename O>() {
      const auto* pi = in<I>(source);
      auto* po = out<O>(target);
      for (size_t i = 0; i < count; ++i) po[i] = O::store(I::load(pi[i]));
    });
  });
}

// The sum of f(j) over j in [0, n) in 16 lanes, then the lanes and the tail in order.
template <typename F>
inline float lane_sum(size_t n, F f) {
  constexpr size_t kSumLanes = 16;
  float lanes[kSumLanes] = {};
  size_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes) {
    for (size_t k = 0; k < kSumLanes; ++k) lanes[k] += f(j + k);
  }
  float sum = 0.0f;
  for (size_t k = 0; k < kSumLanes; ++k) sum += lanes[k];
  for (; j < n; ++j) sum += f(j);
  return sum;
}

HAL_ISA_CLONES void norm_rows(bool layernorm, float epsilon, ConstRef x, const float* gamma,
                              const float* beta, Ref y, float* mean, float* rstd, size_t n,
                              size_t row_begin, size_t row_end) {
  with_type(x.type, [&]<typename X>() {
    with_type(y.type, [&]<typename Y>() {
      const float inverse_n = 1.0f / static_cast<float>(n);  // n = 0: NaN statistics
      for (size_t r = row_begin; r < row_end; ++r) {
        const auto* xr = in<X>(x) + r * n;
        auto* yr = out<Y>(y) + r * n;
        float centre = 0.0f, scale;
        if (layernorm) {
          // Two passes: the mean, then the biased variance around it.
          centre = lane_sum(n, [&](size_t j) { return X::load(xr[j]); }) * inverse_n;
          const float variance = lane_sum(n,
                                          [&](size_t j) {
                                            const float d = X::load(xr[j]) - centre;
                                            return d * d;
                                          }) *
                                 inverse_n;
          scale = 1.0f / std::sqrt(variance + epsilon);
        } else {
          const float square_mean = lane_sum(n,
                                             [&](size_t j) {
                                               const float v = X::load(xr[j]);
                                               return v * v;
                                             }) *
                                    inverse_n;
          scale = 1.0f / std::sqrt(square_mean + epsilon);
        }
        if (n == 0) centre = scale = std::numeric_limits<float>::quiet_NaN();
        if (mean != nullptr) mean[r] = centre;
        if (rstd != nullptr) rstd[r] = scale;
        for (size_t j = 0; j < n; ++j) {
          float v = (X::load(xr[j]) - centre) * scale;
          if (gamma != nullptr) v *= gamma[j];
          if (beta != nullptr) v += beta[j];
          yr[j] = Y::store(v);
        }
      }
    });
  });
}

// e^x that is exactly 0 below float's range (exp(-inf) = 0), NaN for NaN.
inline float exp_or_zero(float x) {
  return x < -87.5f ? 0.0f : exp_clamped(x);
}

// The maximum of a row, NaN if any element is NaN (-inf when empty), in 16
// lanes so the loop vectorises.
template <typename X>
inline float row_max(const typename X::Storage* xr, size_t n) {
  float lanes[16];
  for (float& lane : lanes) lane = -std::numeric_limits<float>::infinity();
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    for (size_t k = 0; k < 16; ++k) {
      const float v = X::load(xr[j + k]);
      lanes[k] = (v > lanes[k] || v != v) ? v : lanes[k];  // NaN sticks
    }
  }
  float maximum = -std::numeric_limits<float>::infinity();
  for (float lane : lanes) maximum = nan_max(maximum, lane);
  for (; j < n; ++j) maximum = nan_max(maximum, X::load(xr[j]));
  return maximum;
}

// The logarithm of the sum of e^(x - maximum) over a row, plus maximum.
template <typename X>
inline float row_log_sum_exp(const typename X::Storage* xr, size_t n) {
  if constexpr (std::is_same_v<X, F32>) {
    if (avx512_rows_available()) {
      const float maximum = row_max_f32_avx512(xr, n);
      return maximum + std::log(row_sum_exp_f32_avx512(xr, maximum, nullptr, n));
    }
  }
  const float maximum = row_max<X>(xr, n);
  return maximum +
         std::log(lane_sum(n, [&](size_t k) { return exp_or_zero(X::load(xr[k]) - maximum); }));
}

HAL_ISA_CLONES void softmax_rows(bool log, ConstRef x, Ref y, size_t n, size_t row_begin,
                                 size_t row_end, bool around_caches) {
  with_type(x.type, [&]<typename X>() {
    with_type(y.type, [&]<typename Y>() {
      if constexpr (std::is_same_v<X, F32> && std::is_same_v<Y, F32>) {
        if (avx512_rows_available()) {
          // Softmax keeps a row's exponentials where the scaling pass reads
          // them back from L1: this stack block when the row fits, else y
          // itself (which makes y's lines travel from memory before the
          // scaling pass writes them).
          constexpr size_t kBlock = 4096;
          alignas(64) float block[kBlock];
          const bool streaming = around_caches && (log || n <= kBlock);
          for (size_t r = row_begin; r < row_end; ++r) {
            // F32 by name, not X and Y: Clang checks this branch's
            // non-dependent code in the inner lambda for every X.
            const float* xr = in<F32>(x) + r * n;
            float* yr = out<F32>(y) + r * n;
            const float maximum = row_max_f32_avx512(xr, n);
            if (log) {
              const float sum = row_sum_exp_f32_avx512(xr, maximum, nullptr, n);
              row_shift_f32_avx512(xr, maximum, std::log(sum), yr, n, streaming);
            } else {
              float* kept = n <= kBlock ? block : yr;
              const float sum = row_sum_exp_f32_avx512(xr, maximum, kept, n);
              row_scale_f32_avx512(kept, 1.0f / sum, yr, n, streaming);
            }
          }
          if (streaming) order_streaming_stores();
          return;
        }
      }
      for (size_t r = row_begin; r < row_end; ++r) {
        const auto* xr = in<X>(x) + r * n;
        auto* yr = out<Y>(y) + r * n;
        const float maximum = row_max<X>(xr, n);
        // A row of -inf: -inf - -inf is NaN, so the row is NaN (as frameworks give).
        // An f32 y keeps each exponential from the sum's pass (y may be x: the
        // element was read first), so each is computed once.
        constexpr bool kKeep = std::is_same_v<Y, F32>;
        const float sum = lane_sum(n, [&](size_t k) {
          const float e = exp_or_zero(X::load(xr[k]) - maximum);
          if constexpr (kKeep) {
            if (!log) yr[k] = e;
          }
          return e;
        });
        if (log) {
          const float log_sum = std::log(sum);
          for (size_t k = 0; k < n; ++k) yr[k] = Y::store((X::load(xr[k]) - maximum) - log_sum);
        } else if constexpr (kKeep) {
          const float inverse = 1.0f / sum;
          for (size_t k = 0; k < n; ++k) yr[k] = yr[k] * inverse;
        } else {
          const float inverse = 1.0f / sum;
          for (size_t k = 0; k < n; ++k) {
            yr[k] = Y::store(exp_or_zero(X::load(xr[k]) - maximum) * inverse);
          }
        }
      }
    });
  });
}

HAL_ISA_CLONES void softmax_backward_rows(bool log, ConstRef y, ConstRef grad_y, Ref grad_x,
                                          size_t n, size_t row_begin, size_t row_end) {
  with_type(y.type, [&]<typename Y>() {
    with_type(grad_y.type, [&]<typename G>() {
      with_type(grad_x.type, [&]<typename X>() {
        for (size_t r = row_begin; r < row_end; ++r) {
          const auto* yr = in<Y>(y) + r * n;
          const auto* gr = in<G>(grad_y) + r * n;
          auto* xr = out<X>(grad_x) + r * n;
          // Each grad_y element is read before grad_x's (grad_x may be grad_y).
          if (log) {
            const float sum = lane_sum(n, [&](size_t k) { return G::load(gr[k]); });
            for (size_t k = 0; k < n; ++k)
              xr[k] = X::store(G::load(gr[k]) - exp_or_zero(Y::load(yr[k])) * sum);
          } else {
            const float sum =
                lane_sum(n, [&](size_t k) { return G::load(gr[k]) * Y::load(yr[k]); });
            for (size_t k = 0; k < n; ++k)
              xr[k] = X::store(Y::load(yr[k]) * (G::load(gr[k]) - sum));
          }
        }
      });
    });
  });
}

HAL_ISA_CLONES double sum_squares(ConstRef x, size_t begin, size_t end) {
  double total = 0.0;
  with_type(x.type, [&]<typename X>() {
    const auto* px = in<X>(x);
    float sum[kLanes] = {};
    size_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) {
        const float g = X::load(px[i + j]);
        sum[j] += g * g;
      }
    }
    for (size_t j = 0; j < kLanes; ++j) total += sum[j];
    for (; i < end; ++i) {
      const double g = X::load(px[i]);
      total += g * g;
    }
  });
  return total;
}

HAL_ISA_CLONES void adamw_update(const AdamwStep& step, ConstRef grad, float* m, float* v,
                                 float* master, Ref param, size_t begin, size_t end) {
  with_type(grad.type, [&]<typename G>() {
    with_type(param.type, [&]<typename P>() {
      const auto* pg = in<G>(grad);
      auto* pp = out<P>(param);
      for (size_t i = begin; i < end; ++i) {
        const float g = G::load(pg[i]) * step.clip;
        const float mi = step.beta1 * m[i] + (1.0f - step.beta1) * g;
        const float vi = step.beta2 * v[i] + (1.0f - step.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float w = master != nullptr ? master[i] : P::load(pp[i]);
        const float update =
            (mi / step.bias_correction1) / (std::sqrt(vi / step.bias_correction2) + step.epsilon);
        w = w - step.lr * (update + step.weight_decay * w);
        if (master != nullptr) master[i] = w;
        pp[i] = P::store(w);
      }
    });
  });
}

HAL_ISA_CLONES void cross_entropy_rows(ConstRef logits, const void* labels, bool labels_i64,
                                       int64_t ignore_index, float smoothing, size_t classes,
                                       float* row_loss, float* lse, LabelState* state,
                                       size_t row_begin, size_t row_end) {
  with_type(logits.type, [&]<typename X>() {
    for (size_t r = row_begin; r < row_end; ++r) {
      const auto* xr = in<X>(logits) + r * classes;
      const float row_lse = row_log_sum_exp<X>(xr, classes);
      lse[r] = row_lse;
      const int64_t label = index_at(labels, labels_i64, r);
      if (label == ignore_index) {
        state[r] = LabelState::kIgnored;
        row_loss[r] = 0.0f;
        continue;
      }
      if (label < 0 || static_cast<uint64_t>(label) >= classes) {
        state[r] = LabelState::kInvalid;
        row_loss[r] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      state[r] = LabelState::kValid;
      float loss = -(1.0f - smoothing) * (X::load(xr[label]) - row_lse);
      if (smoothing != 0.0f) {
        const float sum_x = lane_sum(classes, [&](size_t k) { return X::load(xr[k]); });
        loss -= smoothing / static_cast<float>(classes) *
                (sum_x - static_cast<float>(classes) * row_lse);
      }
      row_loss[r] = loss;
    }
  });
}

HAL_ISA_CLONES void cross_entropy_grad_rows(ConstRef logits, const void* labels, bool labels_i64,
                                            float smoothing, size_t classes, const float* lse,
                                            const LabelState* state, float scale, Ref grad,
                                            size_t row_begin, size_t row_end) {
  const float uniform = smoothing / static_cast<float>(classes);
  with_type(logits.type, [&]<typename X>() {
    with_type(grad.type, [&]<typename G>() {
      for (size_t r = row_begin; r < row_end; ++r) {
        const auto* xr = in<X>(logits) + r * classes;
        auto* gr = out<G>(grad) + r * classes;
        if (state[r] != LabelState::kValid) {
          for (size_t c = 0; c < classes; ++c) gr[c] = G::store(0.0f);
          continue;
        }
        const float row_lse = lse[r], hit = 1.0f - smoothing;
        const size_t label = static_cast<size_t>(index_at(labels, labels_i64, r));
        // Each element read before it is written: grad may be logits.
        for (size_t c = 0; c < classes; ++c) {
          const float target = uniform + (c == label ? hit : 0.0f);
          gr[c] = G::store(scale * (exp_or_zero(X::load(xr[c]) - row_lse) - target));
        }
      }
    });
  });
}

}  // namespace hal::cpu::ops::native
