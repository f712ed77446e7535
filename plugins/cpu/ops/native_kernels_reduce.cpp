// The reduction family of the native loops: column reductions, one-value sums
// and maxima in chunks, and the sum of squares (gradient-norm clipping).
#include "native_kernels.hpp"

#include <cstddef>
#include <limits>

#include "native_kernels_shared.hpp"

namespace hal::cpu::ops::native {
namespace {

// A Kahan compensation is NaN only where the running sum became +-inf (inf -
// inf); restarting it at 0 there keeps the sum inf, as plain addition gives,
// instead of turning it into NaN (SPEC §17.6.3). A select: it vectorises.
inline float finite_compensation(float c) {
  return c == c ? c : 0.0f;
}

}  // namespace

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
            compensation[j] = finite_compensation((t - sum[j]) - y);
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
        compensation[j] = finite_compensation((t - sum[j]) - y);
        sum[j] = t;
      }
    }
    // The lanes, then the tail, in order.
    float s = 0.0f, c = 0.0f;
    auto add = [&](float value) {
      const float y = value - c;
      const float t = s + y;
      c = finite_compensation((t - s) - y);
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

}  // namespace hal::cpu::ops::native
