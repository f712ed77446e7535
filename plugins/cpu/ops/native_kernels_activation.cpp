// The activation family of the native loops: UNARY forward and backward, and
// BIAS_ACTIVATION's backward (gradient and bias sums).
#include "native_kernels.hpp"

#include <cstddef>

#include "native_kernels_shared.hpp"
#include "native_rows_avx512.hpp"

namespace hal::cpu::ops::native {
namespace {

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

}  // namespace hal::cpu::ops::native
