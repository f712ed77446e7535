// The normalisation family of the native loops: layernorm and RMSNorm rows,
// and their backward (gamma and beta column sums, grad_x rows).
#include "native_kernels.hpp"

#include <cmath>
#include <cstddef>
#include <limits>

#include "native_kernels_shared.hpp"

namespace hal::cpu::ops::native {

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
          if (r + 1 < row_end) prefetch_bytes(xr + n, n * sizeof(*xr));
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

}  // namespace hal::cpu::ops::native
