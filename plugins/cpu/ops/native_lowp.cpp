// cpu.native's low-precision ops (SPEC.md §17.6.12) on dense tensors:
// HAL_OP_SCALED_MATMUL (int8 rows dotted in i32 per k chunk; 8-bit floats
// widened once per execution to f32, then dotted in f32)
// and HAL_OP_QUANTIZE (f32 x; block amax, then round to nearest even,
// saturating). The dot loops are cloned per ISA. Work is split by the shape
// alone, so every plan is deterministic. Other layouts and dtypes decline to
// the portable kernels.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "hal_util/isa_clones.hpp"
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

}  // namespace

std::unique_ptr<OpPlan> plan_native_lowp(const hal_op_header_t& header, Decline& decline) {
  switch (header.kind) {
    case HAL_OP_SCALED_MATMUL:
      return plan_scaled_matmul(reinterpret_cast<const hal_op_scaled_matmul_desc_t&>(header),
                                decline);
    case HAL_OP_QUANTIZE:
      return plan_quantize(reinterpret_cast<const hal_op_quantize_desc_t&>(header), decline);
    default:
      decline.reason = "cpu.native serves the scaled matmul and quantize of the low-precision ops";
      return nullptr;
  }
}

}  // namespace hal::cpu::ops
