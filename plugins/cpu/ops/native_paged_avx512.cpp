#include "native_paged_avx512.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hal_util/x86_intrinsics.hpp"
#include "native_exp_avx512.hpp"
#include "native_rows_avx512.hpp"

namespace hal::cpu::ops::native {

#if defined(__x86_64__)

#define HAL_AVX512BW __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace {

enum class Cache { kF32, kBF16, kF16 };

// Lanes [0, n) of a vector (n <= 16).
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// Elements [at, at + 16) of a cache row widened to f32, lanes outside |lanes| 0.
template <Cache kCache>
HAL_AVX512BW inline __m512 widen(const void* row, int64_t at, __mmask16 lanes) {
  if constexpr (kCache == Cache::kF32) {
    return _mm512_maskz_loadu_ps(lanes, static_cast<const float*>(row) + at);
  } else {
    const __m256i half = _mm256_maskz_loadu_epi16(lanes, static_cast<const uint16_t*>(row) + at);
    if constexpr (kCache == Cache::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    } else {
      return _mm512_cvtph_ps(half);
    }
  }
}

// The lane sums of four vectors, in lanes 0-3 (each sum over its two 256-bit
// halves, then its 128-bit quarters, then pairs): a quarter of the
// shuffles four separate reductions take.
HAL_AVX512BW inline __m128 sum_lanes4(__m512 s0, __m512 s1, __m512 s2, __m512 s3) {
  const __m512 a = _mm512_add_ps(_mm512_shuffle_f32x4(s0, s1, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(s0, s1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 b = _mm512_add_ps(_mm512_shuffle_f32x4(s2, s3, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(s2, s3, _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarter i: the four partial sums of s_i.
  const __m512 c = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 d = _mm512_add_ps(c, _mm512_permute_ps(c, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512 e = _mm512_add_ps(d, _mm512_permute_ps(d, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), e));
}

// weights[r * 16 + k] = q row r . key k for kRows query rows and the tile's
// keys, four keys at a time: each key row is widened once for the kRows dot
// products and each query vector loaded once for four keys. Past |count|
// (up to the next multiple of 4) the weights are the last key's, unused.
template <Cache kCache, int kRows>
HAL_AVX512BW void tile_scores(const float* q, int64_t dim, const void* const* keys, int64_t count,
                              float* weights) {
  const int64_t whole = dim / 16 * 16;
  const __mmask16 tail = first_lanes(dim - whole);
  for (int64_t k = 0; k < count; k += 4) {
    const void* key[4];
    for (int64_t j = 0; j < 4; ++j) key[j] = keys[std::min(k + j, count - 1)];
    __m512 sums[kRows][4];
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < 4; ++j) sums[r][j] = _mm512_setzero_ps();
    }
    const auto step = [&](int64_t d, __mmask16 lanes) HAL_AVX512BW {
      __m512 x[4];
      for (int j = 0; j < 4; ++j) x[j] = widen<kCache>(key[j], d, lanes);
      for (int r = 0; r < kRows; ++r) {
        const __m512 qv = _mm512_maskz_loadu_ps(lanes, q + r * dim + d);
        for (int j = 0; j < 4; ++j) sums[r][j] = _mm512_fmadd_ps(qv, x[j], sums[r][j]);
      }
    };
    for (int64_t d = 0; d < whole; d += 16) step(d, 0xffff);
    if (tail != 0) step(whole, tail);
    for (int r = 0; r < kRows; ++r) {
      _mm_storeu_ps(weights + r * kDecodeTileKeys + k,
                    sum_lanes4(sums[r][0], sums[r][1], sums[r][2], sums[r][3]));
    }
  }
}

// acc row r = acc row r * correction[r] + sum over the first |count| keys of
// weights[r * 16 + k] * value k, for kRows rows, 32 columns at a time held
// in registers across the keys (each value row widened once per kRows rows).
template <Cache kCache, int kRows>
HAL_AVX512BW void tile_values(float* acc, int64_t dim_v, const float* correction,
                              const float* weights, const void* const* values, int64_t count) {
  for (int64_t c = 0; c < dim_v; c += 32) {
    const __mmask16 low = first_lanes(dim_v - c);
    const __mmask16 high = first_lanes(std::max<int64_t>(0, dim_v - c - 16));
    __m512 a0[kRows], a1[kRows];
    for (int r = 0; r < kRows; ++r) {
      const __m512 factor = _mm512_set1_ps(correction[r]);
      a0[r] = _mm512_mul_ps(_mm512_maskz_loadu_ps(low, acc + r * dim_v + c), factor);
      a1[r] = _mm512_mul_ps(_mm512_maskz_loadu_ps(high, acc + r * dim_v + c + 16), factor);
    }
    for (int64_t k = 0; k < count; ++k) {
      const __m512 v0 = widen<kCache>(values[k], c, low);
      const __m512 v1 = widen<kCache>(values[k], c + 16, high);
      for (int r = 0; r < kRows; ++r) {
        const __m512 w = _mm512_set1_ps(weights[r * kDecodeTileKeys + k]);
        a0[r] = _mm512_fmadd_ps(w, v0, a0[r]);
        a1[r] = _mm512_fmadd_ps(w, v1, a1[r]);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      _mm512_mask_storeu_ps(acc + r * dim_v + c, low, a0[r]);
      _mm512_mask_storeu_ps(acc + r * dim_v + c + 16, high, a1[r]);
    }
  }
}

// Row r's scores to weights e^(score - new max) (0 for keys it does not
// see), its running max and sum updated, and the factor its accumulator
// takes (e^(old max - new max); 1 when it sees none of the tile).
HAL_AVX512BW void online_softmax(const DecodeRows& rows, int64_t r, int64_t visible) {
  float* w = rows.weights + r * kDecodeTileKeys;
  if (visible == 0) {
    _mm512_storeu_ps(w, _mm512_setzero_ps());
    rows.correction[r] = 1.0f;
    return;
  }
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 scores = _mm512_mask_loadu_ps(lowest, first_lanes(visible), w);
  const float old_max = rows.max[r];
  const float new_max = std::max(old_max, _mm512_reduce_max_ps(scores));
  const __m512 e = exp_or_zero(_mm512_sub_ps(scores, _mm512_set1_ps(new_max)));
  _mm512_storeu_ps(w, e);
  const float correction = std::exp(old_max - new_max);  // exp(-inf) = 0 at first
  rows.correction[r] = correction;
  rows.sum[r] = rows.sum[r] * correction + _mm512_reduce_add_ps(e);
  rows.max[r] = new_max;
}

// Calls body.template operator()<R>(first row) over the rows in blocks of
// kLargest (8 or 4), then one block of 4, 2 and 1 for the rest.
template <int kLargest, typename Body>
void row_blocks(int64_t rows, const Body& body) {
  int64_t r = 0;
  for (; r + kLargest <= rows; r += kLargest) body.template operator()<kLargest>(r);
  if (kLargest > 4 && r + 4 <= rows) body.template operator()<4>(r), r += 4;
  if (r + 2 <= rows) body.template operator()<2>(r), r += 2;
  if (r < rows) body.template operator()<1>(r);
}

template <Cache kCache>
HAL_AVX512BW void fold_tile(const DecodeRows& rows, const DecodeTile& tile) {
  // Scores: 4 rows x 4 keys of accumulators; values: 8 rows x 32 columns.
  row_blocks<4>(rows.rows, [&]<int kRows>(int64_t r0) {
    tile_scores<kCache, kRows>(rows.q + r0 * rows.dim, rows.dim, tile.keys, tile.count,
                               rows.weights + r0 * kDecodeTileKeys);
  });
  for (int64_t r = 0; r < rows.rows; ++r) online_softmax(rows, r, tile.visible[r]);
  row_blocks<8>(rows.rows, [&]<int kRows>(int64_t r0) {
    // Each row folds exactly the values it sees: where the block's rows see
    // different counts (causal tokens at the tile holding the sequence's
    // end), row by row, so a value a row does not see never meets its 0
    // weight (an infinite one would make NaN).
    const int64_t count = tile.visible[r0];
    bool same = true;
    for (int r = 1; r < kRows; ++r) same = same && tile.visible[r0 + r] == count;
    if (same) {
      if (count == 0) return;
      tile_values<kCache, kRows>(rows.acc + r0 * rows.dim_v, rows.dim_v, rows.correction + r0,
                                 rows.weights + r0 * kDecodeTileKeys, tile.values, count);
      return;
    }
    for (int64_t r = r0; r < r0 + kRows; ++r) {
      if (tile.visible[r] == 0) continue;
      tile_values<kCache, 1>(rows.acc + r * rows.dim_v, rows.dim_v, rows.correction + r,
                             rows.weights + r * kDecodeTileKeys, tile.values, tile.visible[r]);
    }
  });
}

}  // namespace

bool paged_decode_avx512_available() {
  static const bool available =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return available && avx512_allowed();
}

void paged_decode_prefetch(const void* const* rows, int64_t count, int64_t bytes) {
  for (int64_t k = 0; k < count; ++k) {
    const char* row = static_cast<const char*>(rows[k]);
    // Every line the row touches, once: from the first line to the last.
    const auto first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63};
    const uintptr_t last = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(bytes) - 1;
    for (uintptr_t line = first; line <= last; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
  }
}

void paged_decode_tile_avx512(const DecodeRows& rows, const DecodeTile& tile) {
  switch (rows.dtype) {
    case HAL_DTYPE_F32:
      fold_tile<Cache::kF32>(rows, tile);
      break;
    case HAL_DTYPE_BF16:
      fold_tile<Cache::kBF16>(rows, tile);
      break;
    default:
      fold_tile<Cache::kF16>(rows, tile);
      break;
  }
}

#else  // not x86-64

bool paged_decode_avx512_available() {
  return false;
}
void paged_decode_prefetch(const void* const*, int64_t, int64_t) {}
void paged_decode_tile_avx512(const DecodeRows&, const DecodeTile&) {}

#endif

}  // namespace hal::cpu::ops::native
