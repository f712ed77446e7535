// The softmax family of the native loops: softmax and log-softmax rows and
// their backward, and cross-entropy (log-sum-exp rows, gradient rows).
#include "native_kernels.hpp"

#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "native_kernels_shared.hpp"
#include "native_rows_avx512.hpp"

namespace hal::cpu::ops::native {
namespace {

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

}  // namespace

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
            if (r + 1 < row_end) prefetch_bytes(xr + n, n * sizeof(float));
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
