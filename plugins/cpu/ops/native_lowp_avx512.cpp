// See native_lowp_avx512.hpp.
#include "native_lowp_avx512.hpp"

// GCC 12 reports the "undefined" source vector inside its own unmasked
// intrinsics (_mm512_cvtepi32_ps, _mm512_unpacklo_epi32) as (maybe) used
// uninitialized.
// (GCC only: clang has no -Wmaybe-uninitialized and -Werror refuses the pragma.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#define HAL_LOWP_I8 __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define HAL_LOWP_BF16 __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16")))

namespace hal::cpu::ops::native {
namespace {

int64_t round_up4(int64_t x) {
  return (x + 3) / 4 * 4;
}

// The lanes of a 16-column vector that hold columns below |cols|.
__mmask16 column_mask(int64_t first, int64_t cols) {
  const int64_t valid = std::clamp<int64_t>(cols - first, 0, 16);
  return static_cast<__mmask16>(valid == 16 ? 0xffffu : (1u << valid) - 1u);
}

// Codes step_k .. step_k + 3 of 16 columns (column j at b + j * k), 4 bytes
// a column, zero past |valid_k| codes and in masked-off columns: the odd
// steps, where a gather of whole dwords would read past the chunk.
void codes_of_step(const uint8_t* b, int64_t k, __mmask16 mask, int64_t step_k, int64_t valid_k,
                   uint8_t* out64) {
  std::memset(out64, 0, 64);
  for (int lane = 0; lane < 16; ++lane) {
    if ((mask >> lane & 1u) == 0) continue;
    for (int64_t q = 0; q < std::min<int64_t>(4, valid_k); ++q)
      out64[lane * 4 + q] = b[lane * k + step_k + q];
  }
}

#define HAL_LOWP_F __attribute__((target("avx512f")))

// Sixteen steps at once: 64 codes (16 dwords) of each of 16 columns (column j
// at from + j * k), transposed so that to + d * to_stride gets dword d of every
// column (step d: 16 columns x 4 codes). Loads and shuffles in registers; a
// gather per step costs several times more, as much as the product at m = 16.
HAL_LOWP_F inline void transpose_16_steps(const uint8_t* from, int64_t k, uint8_t* to,
                                          int64_t to_stride) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    const __m512i r0 = _mm512_loadu_si512(from + (2 * i) * k);
    const __m512i r1 = _mm512_loadu_si512(from + (2 * i + 1) * k);
    t[2 * i] = _mm512_unpacklo_epi32(r0, r1);      // per 128-bit lane: dwords 0, 1
    t[2 * i + 1] = _mm512_unpackhi_epi32(r0, r1);  // dwords 2, 3
  }
  // u[4q + e]: in 128-bit lane L, dword 4L + e of columns 4q .. 4q + 3.
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  // Step 4L + e: lane q of it is lane L of u[4q + e].
  for (int e = 0; e < 4; ++e) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44);
    const __m512i x1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xee);
    _mm512_storeu_si512(to + (0 + e) * to_stride, _mm512_shuffle_i32x4(x0, y0, 0x88));
    _mm512_storeu_si512(to + (4 + e) * to_stride, _mm512_shuffle_i32x4(x0, y0, 0xdd));
    _mm512_storeu_si512(to + (8 + e) * to_stride, _mm512_shuffle_i32x4(x1, y1, 0x88));
    _mm512_storeu_si512(to + (12 + e) * to_stride, _mm512_shuffle_i32x4(x1, y1, 0xdd));
  }
}

// What an int8 chunk that ends adds to its rows' totals: out[r][j] +=
// (sum[r][j] - comp[j]) * sa[r * sa_stride] * sb[j].
struct Epilogue {
  const int32_t* comp;
  const float* sb;
  const float* sa;
  int64_t sa_stride;
  float* out;
};

// ---- int8 ----------------------------------------------------------------------

// |steps| k steps of Rows rows against the 4 vectors of a packed tile, on
// top of |sums| [Rows][64] when |resume| (else from 0); the sums go back to
// |sums|. The accumulators are named variables: GCC keeps an array of 24
// vectors on the stack and stores every one each step.
// A running sum to resume (rows past Rows: never used).
template <int Rows>
HAL_LOWP_I8 inline __m512i start(const int32_t* sums, int r, int v, bool resume) {
  return resume && r < Rows ? _mm512_loadu_si512(sums + r * 64 + v * 16) : _mm512_setzero_si512();
}

template <int Rows>
HAL_LOWP_I8 inline void chunk_i8(const uint8_t* ap, int64_t lda, const uint8_t* bp, int64_t steps,
                                 int32_t* sums, bool resume, const Epilogue* finish) {
  __m512i c00 = start<Rows>(sums, 0, 0, resume), c01 = start<Rows>(sums, 0, 1, resume),
          c02 = start<Rows>(sums, 0, 2, resume), c03 = start<Rows>(sums, 0, 3, resume);
  __m512i c10 = start<Rows>(sums, 1, 0, resume), c11 = start<Rows>(sums, 1, 1, resume),
          c12 = start<Rows>(sums, 1, 2, resume), c13 = start<Rows>(sums, 1, 3, resume);
  __m512i c20 = start<Rows>(sums, 2, 0, resume), c21 = start<Rows>(sums, 2, 1, resume),
          c22 = start<Rows>(sums, 2, 2, resume), c23 = start<Rows>(sums, 2, 3, resume);
  __m512i c30 = start<Rows>(sums, 3, 0, resume), c31 = start<Rows>(sums, 3, 1, resume),
          c32 = start<Rows>(sums, 3, 2, resume), c33 = start<Rows>(sums, 3, 3, resume);
  __m512i c40 = start<Rows>(sums, 4, 0, resume), c41 = start<Rows>(sums, 4, 1, resume),
          c42 = start<Rows>(sums, 4, 2, resume), c43 = start<Rows>(sums, 4, 3, resume);
  __m512i c50 = start<Rows>(sums, 5, 0, resume), c51 = start<Rows>(sums, 5, 1, resume),
          c52 = start<Rows>(sums, 5, 2, resume), c53 = start<Rows>(sums, 5, 3, resume);
  for (int64_t s = 0; s < steps; ++s) {
    const __m512i b0 = _mm512_loadu_si512(bp + s * 256);
    const __m512i b1 = _mm512_loadu_si512(bp + s * 256 + 64);
    const __m512i b2 = _mm512_loadu_si512(bp + s * 256 + 128);
    const __m512i b3 = _mm512_loadu_si512(bp + s * 256 + 192);
#define HAL_LOWP_ROW(r)                             \
  if constexpr (Rows > r) {                         \
    int32_t four;                                   \
    std::memcpy(&four, ap + r * lda + s * 4, 4);    \
    const __m512i av = _mm512_set1_epi32(four);     \
    c##r##0 = _mm512_dpbusd_epi32(c##r##0, av, b0); \
    c##r##1 = _mm512_dpbusd_epi32(c##r##1, av, b1); \
    c##r##2 = _mm512_dpbusd_epi32(c##r##2, av, b2); \
    c##r##3 = _mm512_dpbusd_epi32(c##r##3, av, b3); \
  }
    HAL_LOWP_ROW(0)
    HAL_LOWP_ROW(1)
    HAL_LOWP_ROW(2)
    HAL_LOWP_ROW(3)
    HAL_LOWP_ROW(4)
    HAL_LOWP_ROW(5)
#undef HAL_LOWP_ROW
  }
  const __m512i all[24] = {c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23,
                           c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53};
  if (finish == nullptr) {
    for (int i = 0; i < Rows * 4; ++i) _mm512_storeu_si512(sums + i * 16, all[i]);
    return;
  }
  // The chunk ends here: its sums, corrected, scaled into the totals
  // straight from the registers.
  for (int v = 0; v < 4; ++v) {
    const __m512i correction = _mm512_loadu_si512(finish->comp + v * 16);
    const __m512 column_scale = _mm512_loadu_ps(finish->sb + v * 16);
    for (int r = 0; r < Rows; ++r) {
      const __m512 part = _mm512_cvtepi32_ps(_mm512_sub_epi32(all[r * 4 + v], correction));
      const __m512 scaled = _mm512_mul_ps(part, _mm512_set1_ps(finish->sa[r * finish->sa_stride]));
      float* total = finish->out + r * 64 + v * 16;
      _mm512_storeu_ps(total, _mm512_fmadd_ps(scaled, column_scale, _mm512_loadu_ps(total)));
    }
  }
}

template <int Rows>
HAL_LOWP_I8 void tile_i8_rows(const uint8_t* a, int64_t lda, const uint8_t* packed,
                              const int32_t* comp, const float* sb, const float* sa, int64_t chunks,
                              int64_t cp, int64_t s0, int64_t s1, int32_t* sums, float* out) {
  const int64_t steps = cp / 4;
  for (int64_t s = s0; s < s1;) {
    const int64_t c = s / steps, chunk_end = (c + 1) * steps, e = std::min(s1, chunk_end);
    // Step s of the padded k is at 4 s in a's rows and 256 s in the tile.
    const Epilogue finish{comp + c * 64, sb + c * 64, sa + c, chunks, out};
    chunk_i8<Rows>(a + s * 4, lda, packed + s * 256, e - s, sums, s != c * steps,
                   e == chunk_end ? &finish : nullptr);
    s = e;
  }
}

// ---- 8-bit floats in bf16 ----------------------------------------------------------

template <int Rows>
HAL_LOWP_BF16 inline __m512 start_f32(const float* sums, int r, int v, bool resume) {
  return resume && r < Rows ? _mm512_loadu_ps(sums + r * 64 + v * 16) : _mm512_setzero_ps();
}

HAL_LOWP_BF16 inline __m512bh as_bf16(__m512i bits) {
  return reinterpret_cast<__m512bh>(bits);
}

// As chunk_i8: |steps| k steps (two pairs each) of Rows rows in f32.
template <int Rows>
HAL_LOWP_BF16 inline void chunk_bf16(const uint16_t* ap, int64_t lda, const uint16_t* bp,
                                     int64_t steps, float* sums, bool resume) {
  __m512 c00 = start_f32<Rows>(sums, 0, 0, resume), c01 = start_f32<Rows>(sums, 0, 1, resume);
  __m512 c02 = start_f32<Rows>(sums, 0, 2, resume), c03 = start_f32<Rows>(sums, 0, 3, resume);
  __m512 c10 = start_f32<Rows>(sums, 1, 0, resume), c11 = start_f32<Rows>(sums, 1, 1, resume);
  __m512 c12 = start_f32<Rows>(sums, 1, 2, resume), c13 = start_f32<Rows>(sums, 1, 3, resume);
  __m512 c20 = start_f32<Rows>(sums, 2, 0, resume), c21 = start_f32<Rows>(sums, 2, 1, resume);
  __m512 c22 = start_f32<Rows>(sums, 2, 2, resume), c23 = start_f32<Rows>(sums, 2, 3, resume);
  __m512 c30 = start_f32<Rows>(sums, 3, 0, resume), c31 = start_f32<Rows>(sums, 3, 1, resume);
  __m512 c32 = start_f32<Rows>(sums, 3, 2, resume), c33 = start_f32<Rows>(sums, 3, 3, resume);
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* step = bp + s * 256;
#define HAL_LOWP_PAIRS(r)                           \
  __m512bh a##r##01 {}, a##r##23 {};                \
  if constexpr (Rows > r) {                         \
    int32_t pair[2];                                \
    std::memcpy(pair, ap + r * lda + s * 4, 8);     \
    a##r##01 = as_bf16(_mm512_set1_epi32(pair[0])); \
    a##r##23 = as_bf16(_mm512_set1_epi32(pair[1])); \
  }
    HAL_LOWP_PAIRS(0)
    HAL_LOWP_PAIRS(1)
    HAL_LOWP_PAIRS(2)
    HAL_LOWP_PAIRS(3)
#undef HAL_LOWP_PAIRS
#define HAL_LOWP_COLUMNS(v)                                                    \
  {                                                                            \
    const __m512bh b01 = as_bf16(_mm512_loadu_si512(step + v * 64));           \
    const __m512bh b23 = as_bf16(_mm512_loadu_si512(step + v * 64 + 32));      \
    c0##v = _mm512_dpbf16_ps(_mm512_dpbf16_ps(c0##v, a001, b01), a023, b23);   \
    if constexpr (Rows > 1)                                                    \
      c1##v = _mm512_dpbf16_ps(_mm512_dpbf16_ps(c1##v, a101, b01), a123, b23); \
    if constexpr (Rows > 2)                                                    \
      c2##v = _mm512_dpbf16_ps(_mm512_dpbf16_ps(c2##v, a201, b01), a223, b23); \
    if constexpr (Rows > 3)                                                    \
      c3##v = _mm512_dpbf16_ps(_mm512_dpbf16_ps(c3##v, a301, b01), a323, b23); \
  }
    HAL_LOWP_COLUMNS(0)
    HAL_LOWP_COLUMNS(1)
    HAL_LOWP_COLUMNS(2)
    HAL_LOWP_COLUMNS(3)
#undef HAL_LOWP_COLUMNS
  }
  const __m512 all[16] = {c00, c01, c02, c03, c10, c11, c12, c13,
                          c20, c21, c22, c23, c30, c31, c32, c33};
  for (int i = 0; i < Rows * 4; ++i) _mm512_storeu_ps(sums + i * 16, all[i]);
}

template <int Rows>
HAL_LOWP_BF16 void tile_bf16_rows(const uint16_t* a, int64_t lda, const uint16_t* packed,
                                  const float* sb, const float* sa, int64_t chunks, int64_t cp,
                                  int64_t s0, int64_t s1, float* sums, float* out) {
  const int64_t steps = cp / 4;
  for (int64_t s = s0; s < s1;) {
    const int64_t c = s / steps, chunk_end = (c + 1) * steps, e = std::min(s1, chunk_end);
    // The epilogue from memory (fused into the chunk as int8's, it measured
    // the same).
    chunk_bf16<Rows>(a + s * 4, lda, packed + s * 256, e - s, sums, s != c * steps);
    if (e == chunk_end) {
      for (int v = 0; v < 4; ++v) {
        const __m512 column_scale = _mm512_loadu_ps(sb + c * 64 + v * 16);
        for (int r = 0; r < Rows; ++r) {
          const __m512 sum = _mm512_loadu_ps(sums + r * 64 + v * 16);
          const __m512 scaled = _mm512_mul_ps(sum, _mm512_set1_ps(sa[r * chunks + c]));
          float* total = out + r * 64 + v * 16;
          _mm512_storeu_ps(total, _mm512_fmadd_ps(scaled, column_scale, _mm512_loadu_ps(total)));
        }
      }
    }
    s = e;
  }
}

}  // namespace

bool lowp_i8_tiles_available() {
  static const bool available = __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vnni");
  return available;
}

bool lowp_bf16_tiles_available() {
  static const bool available =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bf16");
  return available;
}

HAL_LOWP_I8 void pack_b_tile_i8(const int8_t* b, int64_t k, int64_t cols, int64_t chunk,
                                int64_t chunks, uint8_t* packed, int32_t* comp) {
  const int64_t cp = round_up4(chunk), steps = cp / 4;
  // Lane offsets of one column apart are k bytes: i32 for 16 lanes.
  const bool gather = k <= INT_MAX / 16;
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int>(gather ? k : 0)));
  const __m512i shift = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t v = 0; v < 4; ++v) {
    const __mmask16 mask = column_mask(v * 16, cols);
    const int8_t* column = b + v * 16 * k;
    for (int64_t c = 0; c < chunks; ++c) {
      __m512i sum = _mm512_setzero_si512();
      int64_t s = 0;
      if (mask == 0xffff) {
        for (; (s + 16) * 4 <= chunk; s += 16) {
          uint8_t* to = packed + (c * steps + s) * 256 + v * 64;
          transpose_16_steps(reinterpret_cast<const uint8_t*>(column) + c * chunk + s * 4, k, to,
                             256);
          for (int d = 0; d < 16; ++d)
            sum = _mm512_dpbusd_epi32(sum, shift, _mm512_loadu_si512(to + d * 256));
        }
      }
      for (; s < steps; ++s) {
        uint8_t* to = packed + (c * steps + s) * 256 + v * 64;
        const int64_t step_k = c * chunk + s * 4;
        if (mask != 0 && gather && chunk - s * 4 >= 4) {
          _mm512_storeu_si512(to, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets,
                                                              column + step_k, 1));
        } else {
          codes_of_step(reinterpret_cast<const uint8_t*>(column), k, mask, step_k, chunk - s * 4,
                        to);
        }
        sum = _mm512_dpbusd_epi32(sum, shift, _mm512_loadu_si512(to));
      }
      _mm512_storeu_si512(comp + c * 64 + v * 16, sum);
    }
  }
}

HAL_LOWP_BF16 void pack_b_tile_bf16(const uint8_t* b, int64_t k, int64_t cols, int64_t chunk,
                                    int64_t chunks, const uint8_t* bf16_hi, const uint8_t* bf16_lo,
                                    uint16_t* packed) {
  const int64_t cp = round_up4(chunk), steps = cp / 4;
  const bool gather = k <= INT_MAX / 16;
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int>(gather ? k : 0)));
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i hi0 = _mm512_loadu_si512(bf16_hi), hi1 = _mm512_loadu_si512(bf16_hi + 64);
  const __m512i lo0 = _mm512_loadu_si512(bf16_lo), lo1 = _mm512_loadu_si512(bf16_lo + 64);
  // unpack{lo,hi}_epi8 leave, per 128-bit lane L (columns 4L .. 4L + 3), the
  // (k, k+1) and (k+2, k+3) words of columns 4L, 4L + 1 (lo) and 4L + 2,
  // 4L + 3 (hi); these pick the pairs back into column order.
  alignas(64) int32_t pick01[16], pick23[16];
  for (int i = 0; i < 16; ++i) {
    const int lane = i / 4, q = i % 4;
    pick01[i] = (q >= 2 ? 16 : 0) + 4 * lane + (q & 1) * 2;
    pick23[i] = pick01[i] + 1;
  }
  const __m512i p01 = _mm512_load_si512(pick01), p23 = _mm512_load_si512(pick23);
  for (int64_t v = 0; v < 4; ++v) {
    const __mmask16 mask = column_mask(v * 16, cols);
    const uint8_t* column = b + v * 16 * k;
    for (int64_t c = 0; c < chunks; ++c) {
      alignas(64) uint8_t block[16][64];  // sixteen steps' codes, transposed
      for (int64_t s = 0; s < steps; ++s) {
        alignas(64) uint8_t codes64[64];
        const int64_t step_k = c * chunk + s * 4;
        const int64_t in_block = s % 16;
        if (mask == 0xffff && (s - in_block + 16) * 4 <= chunk) {
          if (in_block == 0) transpose_16_steps(column + step_k, k, block[0], 64);
          std::memcpy(codes64, block[in_block], 64);
        } else if (mask != 0 && gather && chunk - s * 4 >= 4) {
          _mm512_store_si512(codes64, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask,
                                                                  offsets, column + step_k, 1));
        } else {
          codes_of_step(column, k, mask, step_k, chunk - s * 4, codes64);
        }
        const __m512i codes = _mm512_load_si512(codes64);
        const __m512i hi = _mm512_or_si512(_mm512_permutex2var_epi8(hi0, codes, hi1),
                                           _mm512_and_si512(codes, sign));
        const __m512i lo = _mm512_permutex2var_epi8(lo0, codes, lo1);
        const __m512i words_lo = _mm512_unpacklo_epi8(lo, hi);
        const __m512i words_hi = _mm512_unpackhi_epi8(lo, hi);
        uint16_t* to = packed + (c * steps + s) * 256 + v * 64;
        _mm512_storeu_si512(to, _mm512_permutex2var_epi32(words_lo, p01, words_hi));
        _mm512_storeu_si512(to + 32, _mm512_permutex2var_epi32(words_lo, p23, words_hi));
      }
    }
  }
}

void tile_i8(int rows, const uint8_t* a, int64_t lda, const uint8_t* packed, const int32_t* comp,
             const float* sb, const float* sa, int64_t chunks, int64_t cp, int64_t s0, int64_t s1,
             int32_t* sums, float* out) {
  switch (rows) {
    case 1:
      return tile_i8_rows<1>(a, lda, packed, comp, sb, sa, chunks, cp, s0, s1, sums, out);
    case 2:
      return tile_i8_rows<2>(a, lda, packed, comp, sb, sa, chunks, cp, s0, s1, sums, out);
    case 3:
      return tile_i8_rows<3>(a, lda, packed, comp, sb, sa, chunks, cp, s0, s1, sums, out);
    case 4:
      return tile_i8_rows<4>(a, lda, packed, comp, sb, sa, chunks, cp, s0, s1, sums, out);
    case 5:
      return tile_i8_rows<5>(a, lda, packed, comp, sb, sa, chunks, cp, s0, s1, sums, out);
    default:
      return tile_i8_rows<6>(a, lda, packed, comp, sb, sa, chunks, cp, s0, s1, sums, out);
  }
}

HAL_LOWP_I8 void dot_i8(int rows, const uint8_t* a, int64_t lda, const int8_t* b, int64_t k,
                        int64_t cols, int64_t chunk, int64_t chunks, int64_t cp, const float* sb,
                        const float* sa, int32_t* comp, float* out) {
  const __m512i shift = _mm512_set1_epi8(static_cast<char>(0x80));
  const int64_t full = chunk / 64;
  const auto tail =
      static_cast<__mmask64>(chunk % 64 == 0 ? 0 : (~uint64_t{0} >> (64 - chunk % 64)));
  for (int64_t j = 0; j < cols; ++j) {
    const int8_t* column = b + j * k;
    // 128 * the chunk's sum of b: the u8 shift's correction.
    for (int64_t c = 0; c < chunks; ++c) {
      const int8_t* from = column + c * chunk;
      __m512i sum = _mm512_setzero_si512();
      for (int64_t v = 0; v < full; ++v)
        sum = _mm512_dpbusd_epi32(sum, shift, _mm512_loadu_si512(from + v * 64));
      if (tail != 0)
        sum = _mm512_dpbusd_epi32(sum, shift, _mm512_maskz_loadu_epi8(tail, from + full * 64));
      comp[c] = _mm512_reduce_add_epi32(sum);
    }
    for (int r = 0; r < rows; ++r) {
      const uint8_t* row = a + r * lda;
      float total = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) {
        const int8_t* from = column + c * chunk;
        const uint8_t* ac = row + c * cp;
        __m512i sum0 = _mm512_setzero_si512(), sum1 = sum0;
        int64_t v = 0;
        for (; v + 2 <= full; v += 2) {
          sum0 = _mm512_dpbusd_epi32(sum0, _mm512_loadu_si512(ac + v * 64),
                                     _mm512_loadu_si512(from + v * 64));
          sum1 = _mm512_dpbusd_epi32(sum1, _mm512_loadu_si512(ac + v * 64 + 64),
                                     _mm512_loadu_si512(from + v * 64 + 64));
        }
        if (v < full)
          sum0 = _mm512_dpbusd_epi32(sum0, _mm512_loadu_si512(ac + v * 64),
                                     _mm512_loadu_si512(from + v * 64));
        if (tail != 0)
          sum1 = _mm512_dpbusd_epi32(sum1, _mm512_maskz_loadu_epi8(tail, ac + full * 64),
                                     _mm512_maskz_loadu_epi8(tail, from + full * 64));
        // The sums wrap (the shifted ones may pass 2^31); their difference
        // is the true chunk sum, which fits.
        const auto part = static_cast<int32_t>(
            static_cast<uint32_t>(_mm512_reduce_add_epi32(_mm512_add_epi32(sum0, sum1))) -
            static_cast<uint32_t>(comp[c]));
        // As the tiles' epilogue, so that both give the same bits.
        total = std::fma(static_cast<float>(part) * sa[r * chunks + c], sb[c * 64 + j], total);
      }
      out[r * 64 + j] = total;
    }
  }
}

void tile_bf16(int rows, const uint16_t* a, int64_t lda, const uint16_t* packed, const float* sb,
               const float* sa, int64_t chunks, int64_t cp, int64_t s0, int64_t s1, float* sums,
               float* out) {
  switch (rows) {
    case 1:
      return tile_bf16_rows<1>(a, lda, packed, sb, sa, chunks, cp, s0, s1, sums, out);
    case 2:
      return tile_bf16_rows<2>(a, lda, packed, sb, sa, chunks, cp, s0, s1, sums, out);
    case 3:
      return tile_bf16_rows<3>(a, lda, packed, sb, sa, chunks, cp, s0, s1, sums, out);
    default:
      return tile_bf16_rows<4>(a, lda, packed, sb, sa, chunks, cp, s0, s1, sums, out);
  }
}

}  // namespace hal::cpu::ops::native
