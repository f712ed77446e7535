// The tiles of cpu.native's scaled matmul (SPEC.md §17.6.12) on AVX-512:
// int8 on VNNI (vpdpbusd, u8 x s8 -> s32) and the 8-bit floats on AVX-512
// BF16 (vdpbf16ps, every e4m3 / e5m2 value is exact in bf16).
//
// A tile is 64 columns of the product (rows of b) over the whole k, packed
// once per execution and tile by pack_b_tile_*, then run against up to
// kTileRows rows of a at a time by tile_*. k runs in chunks of |chunk|
// elements (the scales' k block), each padded with zeros to a multiple of 4
// (cp = round_up(chunk, 4) elements; the padding adds nothing). Per chunk the
// tile sums exactly (i32; f32 products of 8-bit floats), then adds
// sum * sa[row] * sb[column] to its f32 accumulator: SPEC's order.
//
// vpdpbusd multiplies an unsigned byte by a signed one, so a is stored
// shifted, a + 128 (a ^ 0x80), and each column's chunk sum loses
// 128 * sum(b) again (comp, made by the packing). The i32 sums wrap, but the
// true chunk sum fits in i32 (SPEC bounds the chunk), so the difference of
// the wrapped sums is exact.
//
// Callers check the *_available() functions first; on other CPUs the plain
// loops in native_lowp.cpp serve.
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_LOWP_AVX512_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_LOWP_AVX512_HPP_

#include <cstdint>

namespace hal::cpu::ops::native {

inline constexpr int64_t kTileColumns = 64;
inline constexpr int kTileRowsI8 = 6;    // 24 i32 accumulators
inline constexpr int kTileRowsBf16 = 4;  // 16 f32 accumulators, 8 b vectors

// AVX-512F, BW and VNNI.
bool lowp_i8_tiles_available();
// AVX-512F, BW, VBMI and BF16.
bool lowp_bf16_tiles_available();

// Packs columns [0, cols) (cols <= 64; the rest zero) of b, whose column j
// is the row b + j * k, for |chunks| chunks of |chunk| codes each.
// |packed|: chunks * cp * 64 bytes, step s (4 k) of a chunk at 256 * s: four
// vectors of 16 columns x 4 codes. |comp|: chunks * 64 i32, 128 * the
// chunk's sum of each column's codes.
void pack_b_tile_i8(const int8_t* b, int64_t k, int64_t cols, int64_t chunk, int64_t chunks,
                    uint8_t* packed, int32_t* comp);

// As pack_b_tile_i8, for 8-bit floats converted to bf16 through the code's
// bf16 bits (hi and lo byte of codes 0..127; the sign is the code's bit 7).
// |packed|: chunks * cp * 64 bf16, step s of a chunk at 256 * s: per vector
// of 16 columns, the (k, k+1) pairs, then the (k+2, k+3) pairs.
void pack_b_tile_bf16(const uint8_t* b, int64_t k, int64_t cols, int64_t chunk, int64_t chunks,
                      const uint8_t* bf16_hi, const uint8_t* bf16_lo, uint16_t* packed);

// out[r * 64 + j] = sum over chunks c of
//   (float)(dot of a's row r chunk c with column j) * sa[r * chunks + c] * sb[c * 64 + j]
// for r < rows (<= kTileRowsI8 / kTileRowsBf16). |a|: rows of chunks * cp
// elements each (stride lda), padded like b; int8's shifted by 128.
//
// Both run the k steps [s0, s1) of that (step s: k 4s .. 4s + 3 of the
// padded k, in chunk s / (cp / 4)), so that a caller can cut k into blocks
// whose part of the packed tile stays in cache across all its rows: |sums|
// [rows][64] carries a chunk's i32 sums from one block to the next, and |out|
// (zeroed by the caller before the first block) gets each chunk's scaled sum
// when the chunk ends. tile_bf16 likewise, its sums f32.
// 512 steps: 2048 k, 128 KiB of the packed tile, which stays in L2 with the
// rows' sums when k is long (11008: 704 KiB of tile). Measured on one Zen
// core (bench/lowp_matmul --cpu-time): 64 to 512 steps and no blocks within
// a few % of each other on m 128..512, n 4096, k 4096 and 11008.
inline constexpr int64_t kStepsPerBlock = 512;
void tile_i8(int rows, const uint8_t* a, int64_t lda, const uint8_t* packed, const int32_t* comp,
             const float* sb, const float* sa, int64_t chunks, int64_t cp, int64_t s0, int64_t s1,
             int32_t* sums, float* out);
// The few-row form of tile_i8 (decode: m of 1 to kDotRowsI8 per expert):
// b read as it lies, column by column, 64 k a vector, no packing (which would
// cost as much as the product here); a's rows as for tile_i8. Each chunk's
// 16 lanes are summed exactly in i32 before the scales: the same result.
// |comp|: scratch of |chunks| i32.
inline constexpr int kDotRowsI8 = 4;
void dot_i8(int rows, const uint8_t* a, int64_t lda, const int8_t* b, int64_t k, int64_t cols,
            int64_t chunk, int64_t chunks, int64_t cp, const float* sb, const float* sa,
            int32_t* comp, float* out);
void tile_bf16(int rows, const uint16_t* a, int64_t lda, const uint16_t* packed, const float* sb,
               const float* sa, int64_t chunks, int64_t cp, int64_t s0, int64_t s1, float* sums,
               float* out);

}  // namespace hal::cpu::ops::native

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_LOWP_AVX512_HPP_
