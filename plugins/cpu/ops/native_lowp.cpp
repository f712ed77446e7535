// cpu.native's low-precision ops (SPEC.md §17.6.12) on dense tensors:
// HAL_OP_SCALED_MATMUL (int8 rows dotted in i32 per k chunk; 8-bit floats
// widened once per execution to f32, then dotted in f32), HAL_OP_QUANTIZE
// (f32 x; block amax, then round to nearest even, saturating) and
// HAL_OP_DEQUANTIZE (q * scale in f32, rounded once to x's dtype; AVX-512
// runs of one scale where the CPU has it). The dot loops are cloned per ISA.
// Work is split by the shape alone, so every plan is deterministic. Other
// layouts and dtypes decline to the portable kernels.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "hal_util/isa_clones.hpp"
#include "native_dequantize_avx512.hpp"
#include "native_half.hpp"
#include "native_lowp_avx512.hpp"
#include "native_rows_avx512.hpp"
#include "native_plan.hpp"

namespace hal::cpu::ops {
namespace {

// ---- the 8-bit floats ----------------------------------------------------------

float fp8_decode(uint8_t code, hal_dtype_t dtype) {
  const bool e4m3 = dtype == HAL_DTYPE_F8_E4M3;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int e = (code & 0x7f) >> mbits, man = code & ((1 << mbits) - 1);
  if (e4m3 && e == 15 && man == 7) return std::numeric_limits<float>::quiet_NaN();
  if (!e4m3 && e == 31)
    return man == 0 ? sign * std::numeric_limits<float>::infinity()
                    : std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(man), 1 - bias - mbits);
  return sign *
         std::ldexp(1.0f + static_cast<float>(man) / static_cast<float>(1 << mbits), e - bias);
}

// Every code's value, per format.
struct Fp8Table {
  std::array<float, 256> e4m3, e5m2;
  Fp8Table() {
    for (int c = 0; c < 256; ++c) {
      e4m3[c] = fp8_decode(static_cast<uint8_t>(c), HAL_DTYPE_F8_E4M3);
      e5m2[c] = fp8_decode(static_cast<uint8_t>(c), HAL_DTYPE_F8_E5M2);
    }
  }
  const float* of(hal_dtype_t dtype) const {
    return dtype == HAL_DTYPE_F8_E4M3 ? e4m3.data() : e5m2.data();
  }
};

const Fp8Table& fp8_table() {
  static const Fp8Table table;
  return table;
}

// |f| rounded to nearest even onto |dtype|'s grid, saturating to +-max
// (infinities included); NaN to the NaN code S.1111.111.
uint8_t fp8_encode_saturating(float f, hal_dtype_t dtype) {
  const bool e4m3 = dtype == HAL_DTYPE_F8_E4M3;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const float max_finite = e4m3 ? 448.0f : 57344.0f;
  const uint8_t max_code = e4m3 ? 0x7e : 0x7b;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  if (std::isnan(f)) return sign | 0x7f;
  const float a = std::fabs(f);
  if (a > max_finite) return sign | max_code;  // may still round down to max: checked below
  const int emin = 1 - bias;
  const int e = std::max(static_cast<int>((bits >> 23) & 255) - 127, emin);
  const float quantum = std::ldexp(1.0f, e - mbits);
  const float r = std::nearbyint(a / quantum) * quantum;  // ties to even (default mode)
  if (r > max_finite) return sign | max_code;
  if (r < std::ldexp(1.0f, emin))
    return sign | static_cast<uint8_t>(r / std::ldexp(1.0f, emin - mbits));
  int re = 0;
  std::frexp(r, &re);
  re -= 1;  // r = 1.m * 2^re
  const auto man = static_cast<uint32_t>(r / std::ldexp(1.0f, re - mbits)) - (1u << mbits);
  return sign | static_cast<uint8_t>(((re + bias) << mbits) | man);
}

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// ---- dot products, cloned per ISA ----------------------------------------------

HAL_ISA_CLONES int32_t dot_i8(const int8_t* a, const int8_t* b, int64_t n) {
  int32_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<int32_t>(a[i]) * static_cast<int32_t>(b[i]);
  return sum;
}

// Eight running sums (lane i takes elements i, i + 8, ...), added in a fixed
// order at the end: a vectorisable loop whose result depends on n alone.
HAL_ISA_CLONES float dot_f32(const float* a, const float* b, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) lanes[0] += a[i] * b[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// ---- HAL_OP_SCALED_MATMUL ---------------------------------------------------------

struct Grid {
  int64_t br, bc, cols;  // block extents and the scale's column count
};

Grid grid_of(const hal_quant_blocks_t& blocks, int64_t rows, int64_t cols) {
  const int64_t br = blocks.rows == 0 ? std::max<int64_t>(rows, 1) : blocks.rows;
  const int64_t bc = blocks.cols == 0 ? std::max<int64_t>(cols, 1) : blocks.cols;
  return {br, bc, blocks.cols == 0 ? 1 : cols / bc};
}

// A buffer of the calling thread that only grows: an execution's scratch
// without an allocation (and fresh pages) per call. Each thread (stream
// executors, pool workers) keeps its own, so concurrent executions of one
// plan never share one.
template <typename T>
T* thread_scratch(std::vector<T>& buffer, size_t count) {
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

struct TiledScratch {  // per thread
  std::vector<uint8_t> packed;
  std::vector<int32_t> comp;
  std::vector<float> sb;
  std::vector<float> out;
  std::vector<float> totals;  // an item's rows, k blocked
  std::vector<int32_t> sums_i32;
  std::vector<float> sums_f32;
  // The submitting thread's, shared with the workers during one execution.
  std::vector<uint8_t> a;
  std::vector<float> sa;
  std::vector<int64_t> expert;
  std::vector<int64_t> run_bounds;  // the row runs, expert by expert
  std::vector<int64_t> found_runs;
  std::vector<int64_t> next_run;
  std::vector<int64_t> first_run;  // per expert, its first run; groups + 1 entries
  std::vector<int64_t> active;     // experts with rows
};

TiledScratch& tiled_scratch() {
  static thread_local TiledScratch scratch;
  return scratch;
}

// The bf16 bits of codes 0..127 of |dtype| (exact: bf16 has e5m2's and
// e4m3's range and more mantissa), split into hi and lo bytes for the
// packing's byte permutes. The sign is the code's bit 7, as bf16's bit 15.
struct Bf16Bytes {
  std::array<uint8_t, 128> hi, lo;
};

const Bf16Bytes& bf16_bytes(hal_dtype_t dtype) {
  static const auto make = [](hal_dtype_t d) {
    Bf16Bytes bytes{};
    for (int c = 0; c < 128; ++c) {
      const uint16_t bits = to_bf16(fp8_table().of(d)[c]);
      bytes.hi[c] = static_cast<uint8_t>(bits >> 8);
      bytes.lo[c] = static_cast<uint8_t>(bits & 0xff);
    }
    return bytes;
  };
  static const Bf16Bytes e4m3 = make(HAL_DTYPE_F8_E4M3), e5m2 = make(HAL_DTYPE_F8_E5M2);
  return dtype == HAL_DTYPE_F8_E4M3 ? e4m3 : e5m2;
}

// The bf16 bits of every code of |dtype| (exact).
const uint16_t* bf16_codes(hal_dtype_t dtype) {
  static const auto make = [](hal_dtype_t d) {
    std::array<uint16_t, 256> bits{};
    for (int c = 0; c < 256; ++c) bits[c] = to_bf16(fp8_table().of(d)[c]);
    return bits;
  };
  static const std::array<uint16_t, 256> e4m3 = make(HAL_DTYPE_F8_E4M3),
                                         e5m2 = make(HAL_DTYPE_F8_E5M2);
  return dtype == HAL_DTYPE_F8_E4M3 ? e4m3.data() : e5m2.data();
}

// HAL_CPU_AVX512=0 (the plugin's one switch for its AVX-512 loops): the plain
// loops below even where the CPU runs the AVX-512 tiles (the tests run both
// on one machine).
bool tiles_wanted() {
  return native::avx512_allowed();
}

// The scaled matmul on AVX-512 tiles (native_lowp_avx512.hpp): a's rows
// copied once, padded per k chunk (int8 shifted by 128, 8-bit floats as
// bf16), with each row's a scale per chunk; then one pool item per (expert
// with rows, 64-column tile): the tile of b packed into the worker's own
// buffer (it stays in L2), run against every row of the expert, kTileRows
// rows at a time.
std::unique_ptr<OpPlan> plan_scaled_matmul_tiled(const hal_op_scaled_matmul_desc_t& desc) {
  const bool grouped = desc.groups > 0;
  const int64_t m = desc.a.shape[0], k = desc.a.shape[1];
  const int64_t n = desc.b.shape[grouped ? 1 : 0];
  const int64_t groups = grouped ? desc.groups : 1;
  const Grid ga = grid_of(desc.a_blocks, m, k), gb = grid_of(desc.b_blocks, n, k);
  const int64_t chunk = std::max<int64_t>(1, std::min(ga.bc, gb.bc));
  const int64_t chunks = k / chunk, cp = (chunk + 3) / 4 * 4, kp = chunks * cp;
  const bool int8 = desc.a.dtype == HAL_DTYPE_I8;
  const hal_dtype_t a_dtype = desc.a.dtype, b_dtype = desc.b.dtype, d_dtype = desc.d.dtype;
  const int64_t b_scale_rows = n / gb.br;
  const int64_t tiles = (n + native::kTileColumns - 1) / native::kTileColumns;
  const int tile_rows = int8 ? native::kTileRowsI8 : native::kTileRowsBf16;
  const size_t element = int8 ? 1 : 2;  // bytes of a packed element
  return std::make_unique<NativePlan>(6, [=](ThreadPool& pool, void* const* operand,
                                             const hal_op_scalar_t*) {
    if (m == 0 || n == 0) return;
    const auto* as = static_cast<const float*>(operand[1]);
    const auto* bs = static_cast<const float*>(operand[3]);
    TiledScratch& shared = tiled_scratch();
    // Each row's expert (-1: in no segment, left as it is): the last segment
    // that holds it.
    int64_t* expert = thread_scratch(shared.expert, static_cast<size_t>(m));
    std::fill(expert, expert + m, grouped ? -1 : 0);
    if (grouped) {
      const auto* offsets = static_cast<const int32_t*>(operand[4]);
      for (int64_t e = 0; e < groups; ++e) {
        const int64_t lo = std::clamp<int64_t>(offsets[e], 0, m);
        const int64_t hi = std::clamp<int64_t>(offsets[e + 1], 0, m);
        for (int64_t r = lo; r < hi; ++r) expert[r] = e;
      }
    }
    // The runs of consecutive rows with one expert, expert by expert: found
    // in row order, then placed by a counting sort on the expert (one pass
    // over the rows, whatever the number of experts).
    std::vector<int64_t>& bounds = shared.run_bounds;
    std::vector<int64_t>& found = shared.found_runs;  // expert, lo, hi in row order
    found.clear();
    for (int64_t r = 0; r < m;) {
      int64_t end = r + 1;
      while (end < m && expert[end] == expert[r]) ++end;
      if (expert[r] >= 0) found.insert(found.end(), {expert[r], r, end});
      r = end;
    }
    int64_t* first_run = thread_scratch(shared.first_run, static_cast<size_t>(groups + 1));
    std::fill(first_run, first_run + groups + 1, int64_t{0});
    for (size_t i = 0; i < found.size(); i += 3) ++first_run[found[i] + 1];
    for (int64_t e = 0; e < groups; ++e) first_run[e + 1] += first_run[e];
    bounds.resize(found.size() / 3 * 2);
    std::vector<int64_t>& active = shared.active;
    active.clear();
    for (int64_t e = 0; e < groups; ++e)
      if (first_run[e + 1] > first_run[e]) active.push_back(e);
    {
      std::vector<int64_t>& next = shared.next_run;
      next.assign(first_run, first_run + groups);
      for (size_t i = 0; i < found.size(); i += 3) {
        const int64_t at = next[static_cast<size_t>(found[i])]++;
        bounds[static_cast<size_t>(2 * at)] = found[i + 1];
        bounds[static_cast<size_t>(2 * at + 1)] = found[i + 2];
      }
    }
    if (active.empty()) return;
    // a's rows, padded per chunk, and their scales per chunk.
    uint8_t* a_rows = thread_scratch(shared.a, static_cast<size_t>(m * kp) * element);
    float* sa = thread_scratch(shared.sa, static_cast<size_t>(m * chunks));
    const auto* a8 = static_cast<const uint8_t*>(operand[0]);
    const uint16_t* a_bits = bf16_codes(int8 ? HAL_DTYPE_F8_E4M3 : a_dtype);
    parallel_ranges(pool, static_cast<uint64_t>(m), 16, [&](uint64_t begin, uint64_t end) {
      for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
        if (expert[r] < 0) continue;
        for (int64_t c = 0; c < chunks; ++c) {
          sa[r * chunks + c] = as[(r / ga.br) * ga.cols + (c * chunk) / ga.bc];
          const uint8_t* from = a8 + r * k + c * chunk;
          if (int8) {
            uint8_t* to = a_rows + r * kp + c * cp;
            for (int64_t i = 0; i < chunk; ++i) to[i] = from[i] ^ 0x80u;
            std::fill(to + chunk, to + cp, uint8_t{0});
          } else {
            uint16_t* to = reinterpret_cast<uint16_t*>(a_rows) + r * kp + c * cp;
            for (int64_t i = 0; i < chunk; ++i) to[i] = a_bits[from[i]];
            std::fill(to + chunk, to + cp, uint16_t{0});
          }
        }
      }
    });
    const Bf16Bytes& b_bytes = bf16_bytes(int8 ? HAL_DTYPE_F8_E4M3 : b_dtype);
    const auto* b8 = static_cast<const uint8_t*>(operand[2]);
    void* d = operand[5];
    parallel_items(
        pool, static_cast<uint64_t>(active.size()) * static_cast<uint64_t>(tiles),
        [&](uint64_t item, uint32_t) {
          const int64_t g = active[static_cast<size_t>(item / static_cast<uint64_t>(tiles))];
          const int64_t j0 =
              static_cast<int64_t>(item % static_cast<uint64_t>(tiles)) * native::kTileColumns;
          const int64_t cols = std::min(native::kTileColumns, n - j0);
          TiledScratch& own = tiled_scratch();
          uint8_t* packed = thread_scratch(own.packed, static_cast<size_t>(kp * 64) * element);
          int32_t* comp = thread_scratch(own.comp, static_cast<size_t>(chunks * 64));
          float* sb = thread_scratch(own.sb, static_cast<size_t>(chunks * 64));
          float* out = thread_scratch(own.out, static_cast<size_t>(tile_rows * 64));
          // Row r of d, columns j0 .. j0 + cols, from a tile's totals.
          const auto write_row = [&](int64_t r, const float* total) {
            const int64_t at = r * n + j0;
            if (d_dtype == HAL_DTYPE_F32) {
              std::memcpy(static_cast<float*>(d) + at, total, static_cast<size_t>(cols) * 4);
            } else {
              for (int64_t j = 0; j < cols; ++j)
                static_cast<uint16_t*>(d)[at + j] = to_bf16(total[j]);
            }
          };
          const uint8_t* b_tile = b8 + (g * n + j0) * k;
          int64_t expert_rows = 0;
          for (int64_t run = first_run[g]; run < first_run[g + 1]; ++run)
            expert_rows +=
                bounds[static_cast<size_t>(2 * run + 1)] - bounds[static_cast<size_t>(2 * run)];
          // A few rows (decode): b's rows read as they lie, no packing.
          const bool few = int8 && expert_rows <= native::kDotRowsI8;
          if (int8 && !few) {
            native::pack_b_tile_i8(reinterpret_cast<const int8_t*>(b_tile), k, cols, chunk, chunks,
                                   packed, comp);
          } else if (!int8) {
            native::pack_b_tile_bf16(b_tile, k, cols, chunk, chunks, b_bytes.hi.data(),
                                     b_bytes.lo.data(), reinterpret_cast<uint16_t*>(packed));
          }
          for (int64_t c = 0; c < chunks; ++c)
            for (int64_t j = 0; j < 64; ++j)
              sb[c * 64 + j] =
                  j < cols
                      ? bs[(g * b_scale_rows + (j0 + j) / gb.br) * gb.cols + (c * chunk) / gb.bc]
                      : 0.0f;
          if (few) {
            for (int64_t run = first_run[g]; run < first_run[g + 1]; ++run) {
              const int64_t lo = bounds[static_cast<size_t>(2 * run)];
              const int64_t hi = bounds[static_cast<size_t>(2 * run + 1)];
              const int rows = static_cast<int>(hi - lo);  // at most kDotRowsI8
              native::dot_i8(rows, a_rows + lo * kp, kp, reinterpret_cast<const int8_t*>(b_tile), k,
                             cols, chunk, chunks, cp, sb, sa + lo * chunks, comp, out);
              for (int r = 0; r < rows; ++r) write_row(lo + r, out + r * 64);
            }
            return;
          }
          // k in blocks of kStepsPerBlock steps, each block against all the
          // expert's rows (their totals and running sums side by side, in
          // run order).
          float* totals = thread_scratch(own.totals, static_cast<size_t>(expert_rows * 64));
          int32_t* sums_i32 = thread_scratch(own.sums_i32, static_cast<size_t>(expert_rows * 64));
          float* sums_f32 = thread_scratch(own.sums_f32, static_cast<size_t>(expert_rows * 64));
          std::fill(totals, totals + expert_rows * 64, 0.0f);
          const int64_t steps = kp / 4;
          for (int64_t s0 = 0; s0 < steps; s0 += native::kStepsPerBlock) {
            const int64_t s1 = std::min(steps, s0 + native::kStepsPerBlock);
            int64_t row = 0;
            for (int64_t run = first_run[g]; run < first_run[g + 1]; ++run) {
              const int64_t lo = bounds[static_cast<size_t>(2 * run)];
              const int64_t hi = bounds[static_cast<size_t>(2 * run + 1)];
              for (int64_t r0 = lo; r0 < hi; r0 += tile_rows) {
                const int rows = static_cast<int>(std::min<int64_t>(tile_rows, hi - r0));
                if (int8) {
                  native::tile_i8(rows, a_rows + r0 * kp, kp, packed, comp, sb, sa + r0 * chunks,
                                  chunks, cp, s0, s1, sums_i32 + row * 64, totals + row * 64);
                } else {
                  native::tile_bf16(rows, reinterpret_cast<const uint16_t*>(a_rows) + r0 * kp, kp,
                                    reinterpret_cast<const uint16_t*>(packed), sb, sa + r0 * chunks,
                                    chunks, cp, s0, s1, sums_f32 + row * 64, totals + row * 64);
                }
                row += rows;
              }
            }
          }
          int64_t row = 0;
          for (int64_t run = first_run[g]; run < first_run[g + 1]; ++run) {
            const int64_t lo = bounds[static_cast<size_t>(2 * run)];
            const int64_t hi = bounds[static_cast<size_t>(2 * run + 1)];
            for (int64_t r = lo; r < hi; ++r, ++row) write_row(r, totals + row * 64);
          }
        });
  });
}

std::unique_ptr<OpPlan> plan_scaled_matmul(const hal_op_scaled_matmul_desc_t& desc,
                                           Decline& decline) {
  const bool grouped = desc.groups > 0;
  if (!dense(desc.a) || !dense(desc.b) || !dense(desc.a_scale) || !dense(desc.b_scale) ||
      !dense(desc.d) || (grouped && !dense(desc.offsets))) {
    decline.reason = "a strided operand (cpu.native takes dense tensors)";
    return nullptr;
  }
  if (desc.d.dtype == HAL_DTYPE_F16) {
    decline.reason = "an f16 d (cpu.native writes f32 and bf16)";
    return nullptr;
  }
  const bool tiles = desc.a.dtype == HAL_DTYPE_I8 ? native::lowp_i8_tiles_available()
                                                  : native::lowp_bf16_tiles_available();
  if (tiles && tiles_wanted()) return plan_scaled_matmul_tiled(desc);
  const int64_t m = desc.a.shape[0], k = desc.a.shape[1];
  const int64_t n = desc.b.shape[grouped ? 1 : 0];
  const int64_t groups = grouped ? desc.groups : 1;
  const Grid ga = grid_of(desc.a_blocks, m, k), gb = grid_of(desc.b_blocks, n, k);
  const int64_t chunk = std::max<int64_t>(1, std::min(ga.bc, gb.bc));
  const bool int8 = desc.a.dtype == HAL_DTYPE_I8;
  const hal_dtype_t a_dtype = desc.a.dtype, b_dtype = desc.b.dtype, d_dtype = desc.d.dtype;
  const int64_t b_scale_rows = n / gb.br;
  const int64_t groups_count = desc.groups;
  return std::make_unique<NativePlan>(
      6, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
        if (m == 0 || n == 0) return;
        const auto* as = static_cast<const float*>(operand[1]);
        const auto* bs = static_cast<const float*>(operand[3]);
        // Each row's expert (-1: in no segment, left as it is).
        std::vector<int64_t> expert(static_cast<size_t>(m), grouped ? -1 : 0);
        if (grouped) {
          const auto* offsets = static_cast<const int32_t*>(operand[4]);
          for (int64_t e = 0; e < groups_count; ++e) {
            const int64_t lo = std::clamp<int64_t>(offsets[e], 0, m);
            const int64_t hi = std::clamp<int64_t>(offsets[e + 1], 0, m);
            for (int64_t r = lo; r < hi; ++r) expert[r] = e;
          }
        }
        const float* af = nullptr;
        const float* bf = nullptr;
        // The 8-bit floats are widened to f32 once per execution, a then b
        // (host memory of the task: no workspace for the caller to size).
        std::vector<float> widened;
        if (!int8) {
          widened.resize(static_cast<size_t>(m * k + groups * n * k));
          float* wide = widened.data();
          const float* ta = fp8_table().of(a_dtype);
          const float* tb = fp8_table().of(b_dtype);
          const auto* a8 = static_cast<const uint8_t*>(operand[0]);
          const auto* b8 = static_cast<const uint8_t*>(operand[2]);
          const int64_t a_count = m * k, total = m * k + groups * n * k;
          parallel_ranges(pool, static_cast<uint64_t>(total), 1u << 16,
                          [&](uint64_t begin, uint64_t end) {
                            for (uint64_t i = begin; i < end; ++i) {
                              const auto at = static_cast<int64_t>(i);
                              wide[i] = at < a_count ? ta[a8[at]] : tb[b8[at - a_count]];
                            }
                          });
          af = wide;
          bf = wide + a_count;
        }
        const auto* a8 = static_cast<const int8_t*>(operand[0]);
        const auto* b8 = static_cast<const int8_t*>(operand[2]);
        constexpr int64_t kColumns = 32;
        const int64_t column_tiles = (n + kColumns - 1) / kColumns;
        parallel_items(pool, static_cast<uint64_t>(m * column_tiles), [&](uint64_t item, uint32_t) {
          const int64_t r = static_cast<int64_t>(item) / column_tiles;
          const int64_t g = expert[r];
          if (g < 0) return;
          const int64_t j0 = (static_cast<int64_t>(item) % column_tiles) * kColumns;
          const int64_t j1 = std::min(n, j0 + kColumns);
          for (int64_t j = j0; j < j1; ++j) {
            const int64_t brow = g * n + j;
            float acc = 0.0f;
            for (int64_t k0 = 0; k0 < k; k0 += chunk) {
              const float part =
                  int8 ? static_cast<float>(dot_i8(a8 + r * k + k0, b8 + brow * k + k0, chunk))
                       : dot_f32(af + r * k + k0, bf + brow * k + k0, chunk);
              const float sa = as[(r / ga.br) * ga.cols + k0 / ga.bc];
              const float sb = bs[(g * b_scale_rows + j / gb.br) * gb.cols + k0 / gb.bc];
              acc += part * sa * sb;
            }
            if (d_dtype == HAL_DTYPE_F32) {
              static_cast<float*>(operand[5])[r * n + j] = acc;
            } else {
              static_cast<uint16_t*>(operand[5])[r * n + j] = to_bf16(acc);
            }
          }
        });
      });
}

// ---- HAL_OP_QUANTIZE -------------------------------------------------------------------

std::unique_ptr<OpPlan> plan_quantize(const hal_op_quantize_desc_t& desc, Decline& decline) {
  if (desc.x.dtype != HAL_DTYPE_F32 || !dense(desc.x) || !dense(desc.q) || !dense(desc.scale)) {
    decline.reason = "x not f32, or a strided operand (cpu.native takes dense f32 x)";
    return nullptr;
  }
  const int64_t cols = desc.x.shape[desc.x.rank - 1];
  const int64_t rows = cols == 0 ? 0 : static_cast<int64_t>(element_count(desc.x)) / cols;
  const Grid grid = grid_of(desc.blocks, rows, cols);
  const int64_t scale_rows = desc.scale.shape[0], scale_cols = desc.scale.shape[1];
  const bool given = (desc.flags & HAL_QUANTIZE_GIVEN_SCALE) != 0;
  const hal_dtype_t q_dtype = desc.q.dtype;
  const float qmax = q_dtype == HAL_DTYPE_I8        ? 127.0f
                     : q_dtype == HAL_DTYPE_F8_E4M3 ? 448.0f
                                                    : 57344.0f;
  return std::make_unique<NativePlan>(3, [=](ThreadPool& pool, void* const* operand,
                                             const hal_op_scalar_t*) {
    const auto* x = static_cast<const float*>(operand[0]);
    auto* q = static_cast<uint8_t*>(operand[1]);
    auto* scale = static_cast<float*>(operand[2]);
    // One block per item: its scale (unless given), then its codes.
    parallel_items(
        pool, static_cast<uint64_t>(scale_rows * scale_cols), [&](uint64_t item, uint32_t) {
          const int64_t rb = static_cast<int64_t>(item) / scale_cols;
          const int64_t cb = static_cast<int64_t>(item) % scale_cols;
          const int64_t r0 = rb * grid.br, r1 = std::min(rows, r0 + grid.br);
          const int64_t c0 = cb * grid.bc, c1 = std::min(cols, c0 + grid.bc);
          float s = scale[item];
          if (!given) {
            float amax = 0.0f;
            bool nan = false;
            for (int64_t r = r0; r < r1; ++r)
              for (int64_t c = c0; c < c1; ++c) {
                const float a = std::fabs(x[r * cols + c]);
                nan = nan || std::isnan(a);
                amax = std::max(amax, a);
              }
            s = nan ? std::numeric_limits<float>::quiet_NaN() : amax == 0.0f ? 1.0f : amax / qmax;
            scale[item] = s;
          }
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) {
              const float v = x[r * cols + c] / s;
              uint8_t code;
              if (q_dtype == HAL_DTYPE_I8) {
                const float clamped = std::isnan(v) ? 0.0f : std::min(127.0f, std::max(-128.0f, v));
                code = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(clamped)));
              } else {
                code = fp8_encode_saturating(v, q_dtype);
              }
              q[r * cols + c] = code;
            }
        });
  });
}

// ---- HAL_OP_DEQUANTIZE -----------------------------------------------------------------

// Every code's value in |dtype| (i8, or an 8-bit float: NaN codes NaN).
const float* code_values(hal_dtype_t dtype) {
  if (dtype != HAL_DTYPE_I8) return fp8_table().of(dtype);
  static const std::array<float, 256> i8 = [] {
    std::array<float, 256> values{};
    for (int c = 0; c < 256; ++c) values[c] = static_cast<float>(static_cast<int8_t>(c));
    return values;
  }();
  return i8.data();
}

// The plain loop of a run (see dequantize_run_avx512): codes looked up, f32
// products, narrowed in blocks by native_half's from_f32 (the portable
// kernels' bits).
HAL_ISA_CLONES void dequantize_to_f32(const uint8_t* q, const float* values, float scale,
                                      const float* scales, int64_t n, float* x) {
  if (scales == nullptr) {
    for (int64_t i = 0; i < n; ++i) x[i] = values[q[i]] * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = values[q[i]] * scales[i];
  }
}

void dequantize_run_plain(const uint8_t* q, const float* values, float scale, const float* scales,
                          int64_t n, void* x, hal_dtype_t x_dtype) {
  if (x_dtype == HAL_DTYPE_F32)
    return dequantize_to_f32(q, values, scale, scales, n, static_cast<float*>(x));
  constexpr int64_t kBlock = 512;
  float block[kBlock];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t count = std::min(kBlock, n - at);
    dequantize_to_f32(q + at, values, scale, scales == nullptr ? nullptr : scales + at, count,
                      block);
    native::from_f32(block, native::HalfRef{x, x_dtype}, static_cast<size_t>(at),
                     static_cast<size_t>(count));
  }
}

// Dense q and x seen as [rows, cols]; scale any strides. Elements are split
// over the pool in ranges of kDequantizeGrain; a range walks its rows in runs
// of one scale (blocks of at least 16 columns: a vector's worth), or, for
// narrower blocks, in pieces whose scales are first spread per element.
constexpr uint64_t kDequantizeGrain = 1u << 16;
constexpr int64_t kSpread = 1024;  // elements per piece of spread scales

std::unique_ptr<OpPlan> plan_dequantize(const hal_op_quantize_desc_t& desc, Decline& decline) {
  if (!dense(desc.x) || !dense(desc.q)) {
    decline.reason = "a strided q or x (cpu.native takes dense ones; scale may have any strides)";
    return nullptr;
  }
  const int64_t cols = desc.q.shape[desc.q.rank - 1];
  const auto count = static_cast<int64_t>(element_count(desc.q));
  const int64_t rows = cols == 0 ? 0 : count / cols;
  const Grid grid = grid_of(desc.blocks, rows, cols);
  const int64_t ss0 = desc.scale.strides[0], ss1 = desc.scale.strides[1];
  const hal_dtype_t q_dtype = desc.q.dtype, x_dtype = desc.x.dtype;
  const int64_t x_bytes = x_dtype == HAL_DTYPE_F32 ? 4 : 2;
  const bool runs = grid.bc >= 16 || grid.bc >= cols;
  return std::make_unique<NativePlan>(3, [=](ThreadPool& pool, void* const* operand,
                                             const hal_op_scalar_t*) {
    const auto* q = static_cast<const uint8_t*>(operand[0]);
    const auto* scale = static_cast<const float*>(operand[1]);
    auto* x = static_cast<unsigned char*>(operand[2]);
    const bool avx512 = native::dequantize_avx512_available();
    const float* values = code_values(q_dtype);
    const auto run = [&](int64_t at, float s, const float* scales, int64_t n) {
      if (avx512) {
        native::dequantize_run_avx512(q + at, q_dtype, s, scales, n, x + at * x_bytes, x_dtype);
      } else {
        dequantize_run_plain(q + at, values, s, scales, n, x + at * x_bytes, x_dtype);
      }
    };
    parallel_ranges(pool, static_cast<uint64_t>(count), kDequantizeGrain,
                    [&](uint64_t begin, uint64_t end) {
                      for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end);) {
                        const int64_t r = i / cols, c0 = i % cols;
                        const int64_t c1 = std::min(cols, c0 + static_cast<int64_t>(end) - i);
                        const float* scale_row = scale + (r / grid.br) * ss0;
                        if (runs) {
                          for (int64_t c = c0; c < c1;) {
                            const int64_t block = c / grid.bc;
                            const int64_t stop = std::min(c1, (block + 1) * grid.bc);
                            run(r * cols + c, scale_row[block * ss1], nullptr, stop - c);
                            c = stop;
                          }
                        } else {
                          float spread[kSpread];
                          for (int64_t c = c0; c < c1; c += kSpread) {
                            const int64_t stop = std::min(c1, c + kSpread);
                            for (int64_t e = c; e < stop; ++e)
                              spread[e - c] = scale_row[(e / grid.bc) * ss1];
                            run(r * cols + c, 0.0f, spread, stop - c);
                          }
                        }
                        i += c1 - c0;
                      }
                    });
  });
}

}  // namespace

std::unique_ptr<OpPlan> plan_native_lowp(const hal_op_header_t& header, Decline& decline) {
  switch (header.kind) {
    case HAL_OP_SCALED_MATMUL:
      return plan_scaled_matmul(reinterpret_cast<const hal_op_scaled_matmul_desc_t&>(header),
                                decline);
    case HAL_OP_QUANTIZE:
      return plan_quantize(reinterpret_cast<const hal_op_quantize_desc_t&>(header), decline);
    case HAL_OP_DEQUANTIZE:
      return plan_dequantize(reinterpret_cast<const hal_op_quantize_desc_t&>(header), decline);
    default:
      decline.reason =
          "cpu.native serves the scaled matmul, quantize and dequantize of the low-precision ops";
      return nullptr;
  }
}

}  // namespace hal::cpu::ops
