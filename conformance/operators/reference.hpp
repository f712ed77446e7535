// Float64 host references shared by several areas, written from SPEC.md §17
// and the textbook definitions, independently of the implementations.
#ifndef HAL_CONFORMANCE_OPERATORS_REFERENCE_HPP_
#define HAL_CONFORMANCE_OPERATORS_REFERENCE_HPP_

#include <hal.h>

#include <cmath>

namespace halconform::ops::reference {

inline double activation(hal_activation_t act, double x) {
  constexpr double kPi = 3.14159265358979323846;
  switch (act) {
    case HAL_ACTIVATION_RELU:
      return x < 0 ? 0 : x;  // NaN stays NaN, as in PyTorch
    case HAL_ACTIVATION_GELU_TANH:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x)));
    case HAL_ACTIVATION_GELU_ERF:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case HAL_ACTIVATION_SILU:
      return x / (1 + std::exp(-x));
    default:
      return x;
  }
}

// The derivative, by central differences of the float64 function at a step
// small enough for double (the reference does not hand-derive gradients, so
// it cannot share a derivation mistake with an implementation). ReLU's is
// exact (0 at 0, as frameworks use).
inline double activation_derivative(hal_activation_t act, double x) {
  if (act == HAL_ACTIVATION_NONE) return 1;
  if (act == HAL_ACTIVATION_RELU) return x > 0 ? 1 : 0;
  const double h = 1e-6 * std::fmax(1.0, std::fabs(x));
  return (activation(act, x + h) - activation(act, x - h)) / (2 * h);
}

}  // namespace halconform::ops::reference

#endif  // HAL_CONFORMANCE_OPERATORS_REFERENCE_HPP_
