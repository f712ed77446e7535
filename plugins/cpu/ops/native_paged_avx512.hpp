// cpu.native's paged decode attention inner loop with AVX-512 intrinsics:
// one tile of at most kDecodeTileKeys keys through the online softmax of
// every query row of a kv head's group (native_paged.cpp holds the schedule:
// items, split-KV and the merge).
//
// Why intrinsics: decode reads each key and value once and does a few FMAs
// per element (group * 2 for GQA), so it is bound by reading the cache only
// if the widening of bf16/f16 rows, the dot products and the exponentials
// all run in vectors. The portable loops (GCC's clones) widened each row
// through a scalar conversion, transposed the keys element by element and
// took std::exp per score: 5-6 % of copy bandwidth. Here each key row is
// widened in registers (bf16: a shift; f16: vcvtph2ps) straight from the
// cache, once per block of up to 8 query rows, dotted with those rows, and
// each value row likewise folded into 8 rows' accumulators, 32 columns at a
// time held in registers across the tile's keys.
//
// Every sum runs over its terms in a fixed order (per 16-lane vector, then
// the lanes), so results are the same run to run for a given split count;
// they differ from the portable clones' within rounding.
//
// Callers check paged_decode_avx512_available() first (AVX-512F and BW, for
// the masked 16-bit loads, and HAL_CPU_AVX512 not 0); elsewhere the
// portable loops serve.
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_PAGED_AVX512_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_PAGED_AVX512_HPP_

#include <cstdint>

#include "hal/ops.h"

namespace hal::cpu::ops::native {

// Keys per tile: one 16-lane vector of scores per query row.
constexpr int64_t kDecodeTileKeys = 16;

// The query rows of one work item and their online-softmax state.
struct DecodeRows {
  const float* q;     // rows x dim, already multiplied by the softmax scale
  float* acc;         // rows x dim_v: the unnormalised output
  float* max;         // rows: the running maximum score (-inf at first)
  float* sum;         // rows: the running sum of e^(score - max)
  float* weights;     // rows x kDecodeTileKeys scratch
  float* correction;  // rows scratch
  int64_t rows, dim, dim_v;
  hal_dtype_t dtype;  // the cache's: f32, bf16 or f16
};

// One tile: |count| key rows (dim elements each) and value rows (dim_v
// elements; with MLA the key rows themselves), and per query row how many of
// the tile's first keys it sees (causal masking; 0 to |count|).
struct DecodeTile {
  const void* const* keys;
  const void* const* values;
  int64_t count;
  const int64_t* visible;
};

// True when the CPU runs AVX-512F and AVX-512BW and HAL_CPU_AVX512 allows it.
bool paged_decode_avx512_available();

// Asks for the cache lines of |count| rows of |bytes| bytes each (a hint:
// no effect on results).
void paged_decode_prefetch(const void* const* rows, int64_t count, int64_t bytes);

// Folds |tile| into |rows|' state.
void paged_decode_tile_avx512(const DecodeRows& rows, const DecodeTile& tile);

}  // namespace hal::cpu::ops::native

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_PAGED_AVX512_HPP_
