// The host collective engine's arithmetic (collective/reduce.cpp) against
// independent references: the 16-bit conversions exhaustively (every half
// and bf16 pattern; the float side at every rounding boundary), and
// reduce_pair / finish_average for every dtype and op at lengths around the
// vector widths, compared with a plain scalar loop over the same
// conversions. The reductions run in whichever ISA clone this CPU picks.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "hal_collective/reduce.hpp"

namespace {

using hal::collective::bf16_to_float;
using hal::collective::float_to_bf16;
using hal::collective::float_to_half;
using hal::collective::half_to_float;

// The half value of |bits| from its fields (no bit tricks): the reference.
double half_value(uint16_t bits) {
  const int sign = (bits & 0x8000) ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Round-to-nearest-even of |value| among the finite halves (inf past
// 65520), by comparing distances in double: the reference.
uint16_t nearest_half(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude >= 65520.0) return sign | 0x7c00;
  uint16_t best = 0;
  for (uint16_t lo = 0, hi = 0x7bff; lo <= hi;) {  // the largest half <= magnitude
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (half_value(mid) <= magnitude) {
      best = mid;
      lo = static_cast<uint16_t>(mid + 1);
    } else {
      if (mid == 0) break;
      hi = static_cast<uint16_t>(mid - 1);
    }
  }
  const double below = half_value(best), above = half_value(static_cast<uint16_t>(best + 1));
  uint16_t chosen = best;
  if (magnitude - below > above - magnitude ||
      (magnitude - below == above - magnitude && (best & 1))) {
    chosen = static_cast<uint16_t>(best + 1);
  }
  return sign | chosen;
}

// Round-to-nearest-even to bf16 by distances in double: the reference.
uint16_t nearest_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t low = bits & 0xffff0000u;
  const double below = std::bit_cast<float>(low);
  const double above = static_cast<double>(std::bit_cast<float>(low + 0x10000u));
  const double v = value;
  const double to_below = std::fabs(v - below), to_above = std::fabs(above - v);
  if (std::isinf(above) && !std::isinf(value)) {
    // Past the largest finite bf16: halfway to 2^128 rounds to inf.
    const double halfway = std::fabs(below) + (std::ldexp(1.0, 128) - std::fabs(below)) / 2;
    const bool up = std::fabs(v) > halfway || (std::fabs(v) == halfway && ((low >> 16) & 1));
    return static_cast<uint16_t>((up ? low + 0x10000u : low) >> 16);
  }
  if (to_below < to_above || (to_below == to_above && ((low >> 16) & 1) == 0)) {
    return static_cast<uint16_t>(low >> 16);
  }
  return static_cast<uint16_t>((low + 0x10000u) >> 16);
}

}  // namespace

TEST_CASE("every half widens to its value", "[collectives][reduce]") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float widened = half_to_float(static_cast<uint16_t>(bits));
    const double expected = half_value(static_cast<uint16_t>(bits));
    INFO("half 0x" << std::hex << bits);
    if (std::isnan(expected)) {
      REQUIRE(std::isnan(widened));
      // The payload (quiet bit included) and the sign survive.
      REQUIRE((std::bit_cast<uint32_t>(widened) >> 13 & 0x3ff) == (bits & 0x3ff));
      REQUIRE(std::signbit(widened) == ((bits & 0x8000) != 0));
    } else {
      REQUIRE(static_cast<double>(widened) == expected);
      REQUIRE(std::signbit(widened) == ((bits & 0x8000) != 0));
    }
  }
}

TEST_CASE("floats narrow to the nearest half, ties to even, at every boundary",
          "[collectives][reduce]") {
  std::vector<float> values;
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    const double here = half_value(static_cast<uint16_t>(bits));
    const double next = half_value(static_cast<uint16_t>(bits + 1));
    const float mid = static_cast<float>((here + next) / 2);  // exact in float
    for (float v : {static_cast<float>(here), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, INFINITY)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  std::mt19937 random(7);
  for (int i = 0; i < 200000; ++i) values.push_back(std::bit_cast<float>(uint32_t(random())));
  for (float v : values) {
    if (std::isnan(v)) continue;
    INFO("float " << v << " (0x" << std::hex << std::bit_cast<uint32_t>(v) << ")");
    REQUIRE(float_to_half(v) == nearest_half(v));
  }
  CHECK(float_to_half(NAN) == 0x7e00);
  CHECK(float_to_half(-NAN) == 0xfe00);
  CHECK(float_to_half(INFINITY) == 0x7c00);
  CHECK(float_to_half(-INFINITY) == 0xfc00);
}

TEST_CASE("floats narrow to the nearest bf16, ties to even, and bf16 widens exactly",
          "[collectives][reduce]") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float widened = bf16_to_float(static_cast<uint16_t>(bits));
    REQUIRE(std::bit_cast<uint32_t>(widened) == bits << 16);
  }
  std::mt19937 random(8);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t bits = random();
    if (i % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // an exact tie
    const float v = std::bit_cast<float>(bits);
    INFO("float 0x" << std::hex << bits);
    if (std::isnan(v)) {
      REQUIRE(std::isnan(bf16_to_float(float_to_bf16(v))));
      continue;
    }
    REQUIRE(float_to_bf16(v) == nearest_bf16(v));
  }
}

TEST_CASE("reduce_pair and finish_average match a scalar loop for every dtype and op",
          "[collectives][reduce]") {
  std::mt19937 random(9);
  const hal_dtype_t dtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F64, HAL_DTYPE_F16, HAL_DTYPE_BF16,
                                HAL_DTYPE_I32, HAL_DTYPE_I64, HAL_DTYPE_I8,  HAL_DTYPE_U8};
  const hal_reduce_op_t ops[] = {HAL_REDUCE_SUM, HAL_REDUCE_PROD, HAL_REDUCE_MIN, HAL_REDUCE_MAX,
                                 HAL_REDUCE_AVG};
  for (hal_dtype_t dtype : dtypes) {
    const size_t size = hal::collective::dtype_size(dtype);
    for (hal_reduce_op_t op : ops) {
      for (size_t count :
           {size_t{0}, size_t{1}, size_t{15}, size_t{64}, size_t{257}, size_t{1000}}) {
        INFO("dtype " << dtype << " op " << op << " count " << count);
        std::vector<uint8_t> a(count * size), b(count * size), out(count * size);
        for (auto& byte : a) byte = static_cast<uint8_t>(random());
        for (auto& byte : b) byte = static_cast<uint8_t>(random());
        if (dtype == HAL_DTYPE_F32 || dtype == HAL_DTYPE_F64) {
          // Finite values (random bytes make NaNs whose min/max order is moot).
          for (size_t i = 0; i < count; ++i) {
            if (dtype == HAL_DTYPE_F32) {
              const float x = std::uniform_real_distribution<float>(-100, 100)(random);
              const float y = std::uniform_real_distribution<float>(-100, 100)(random);
              std::memcpy(&a[i * 4], &x, 4);
              std::memcpy(&b[i * 4], &y, 4);
            } else {
              const double x = std::uniform_real_distribution<double>(-100, 100)(random);
              const double y = std::uniform_real_distribution<double>(-100, 100)(random);
              std::memcpy(&a[i * 8], &x, 8);
              std::memcpy(&b[i * 8], &y, 8);
            }
          }
        }
        hal::collective::reduce_pair(out.data(), a.data(), b.data(), count, dtype, op);
        if (op == HAL_REDUCE_AVG) hal::collective::finish_average(out.data(), count, dtype, 3);
        for (size_t i = 0; i < count; ++i) {
          auto combine = [&](auto x, auto y) {
            using T = decltype(x);
            T r{};
            switch (op) {
              case HAL_REDUCE_SUM:
              case HAL_REDUCE_AVG:
                r = static_cast<T>(x + y);
                break;
              case HAL_REDUCE_PROD:
                r = static_cast<T>(x * y);
                break;
              case HAL_REDUCE_MIN:
                r = y < x ? y : x;
                break;
              default:
                r = x < y ? y : x;
                break;
            }
            if (op == HAL_REDUCE_AVG) r = static_cast<T>(r / static_cast<T>(3));
            return r;
          };
          auto load = [&](const std::vector<uint8_t>& v, auto zero) {
            decltype(zero) x;
            std::memcpy(&x, &v[i * size], size);
            return x;
          };
          if (dtype == HAL_DTYPE_F16 || dtype == HAL_DTYPE_BF16) {
            const bool half = dtype == HAL_DTYPE_F16;
            auto widen = [&](uint16_t h) { return half ? half_to_float(h) : bf16_to_float(h); };
            const uint16_t ha = load(a, uint16_t{}), hb = load(b, uint16_t{});
            float r = combine(widen(ha), widen(hb));
            if (op == HAL_REDUCE_AVG) {
              // reduce_pair narrows the sum; finish_average widens it again.
              const float sum = widen(half ? float_to_half(widen(ha) + widen(hb))
                                           : float_to_bf16(widen(ha) + widen(hb)));
              r = sum / 3.0f;
            }
            const uint16_t expected = half ? float_to_half(r) : float_to_bf16(r);
            const uint16_t got = load(out, uint16_t{});
            if (std::isnan(widen(expected))) {
              REQUIRE(std::isnan(widen(got)));
            } else {
              REQUIRE(got == expected);
            }
          } else if (dtype == HAL_DTYPE_F32) {
            REQUIRE(load(out, 0.0f) == combine(load(a, 0.0f), load(b, 0.0f)));
          } else if (dtype == HAL_DTYPE_F64) {
            REQUIRE(load(out, 0.0) == combine(load(a, 0.0), load(b, 0.0)));
          } else if (dtype == HAL_DTYPE_I32 || dtype == HAL_DTYPE_I64) {
            // Wrapping arithmetic through the unsigned twin, signed compare and division.
            if (dtype == HAL_DTYPE_I32) {
              const int32_t x = load(a, int32_t{}), y = load(b, int32_t{});
              int32_t r = op == HAL_REDUCE_SUM || op == HAL_REDUCE_AVG
                              ? static_cast<int32_t>(uint32_t(x) + uint32_t(y))
                          : op == HAL_REDUCE_PROD ? static_cast<int32_t>(uint32_t(x) * uint32_t(y))
                          : op == HAL_REDUCE_MIN  ? std::min(x, y)
                                                  : std::max(x, y);
              if (op == HAL_REDUCE_AVG) r /= 3;
              REQUIRE(load(out, int32_t{}) == r);
            } else {
              const int64_t x = load(a, int64_t{}), y = load(b, int64_t{});
              int64_t r = op == HAL_REDUCE_SUM || op == HAL_REDUCE_AVG
                              ? static_cast<int64_t>(uint64_t(x) + uint64_t(y))
                          : op == HAL_REDUCE_PROD ? static_cast<int64_t>(uint64_t(x) * uint64_t(y))
                          : op == HAL_REDUCE_MIN  ? std::min(x, y)
                                                  : std::max(x, y);
              if (op == HAL_REDUCE_AVG) r /= 3;
              REQUIRE(load(out, int64_t{}) == r);
            }
          } else {
            const bool is_signed = dtype == HAL_DTYPE_I8;
            const int x = is_signed ? int(load(a, int8_t{})) : int(load(a, uint8_t{}));
            const int y = is_signed ? int(load(b, int8_t{})) : int(load(b, uint8_t{}));
            int r = op == HAL_REDUCE_SUM || op == HAL_REDUCE_AVG ? x + y
                    : op == HAL_REDUCE_PROD                      ? x * y
                    : op == HAL_REDUCE_MIN                       ? std::min(x, y)
                                                                 : std::max(x, y);
            r = is_signed ? int(int8_t(uint8_t(r))) : int(uint8_t(r));
            if (op == HAL_REDUCE_AVG) r /= 3;
            const int got = is_signed ? int(load(out, int8_t{})) : int(load(out, uint8_t{}));
            REQUIRE(got == r);
          }
        }
      }
    }
  }
}

TEST_CASE("every 16-bit vector path this CPU has gives the scalar path's bits",
          "[collectives][reduce]") {
  // a: every pattern; b: random patterns, then the values where the paths
  // could part (zeros, subnormals whose sums stay subnormal, the largest
  // finite values whose sums overflow, infinities, NaNs).
  std::mt19937 random(23);
  std::vector<uint16_t> a(65536), b(65536);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint16_t>(i);
  for (auto& v : b) v = static_cast<uint16_t>(random());
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x03ff,
                               0x7f7f, 0xff7f, 0x7bff, 0x7c00, 0xfc00, 0x7f80, 0xff80,
                               0x7fc1, 0xffc1, 0x7e01, 0x7d00, 0x3c00, 0xbc00};
  for (size_t i = 0; i < 8192; ++i) b[i] = specials[i % std::size(specials)];
  // 21 more: the loops' remainders (a 16-lane step after the 32-lane ones,
  // then 5 for the scalar path) run too.
  for (int i = 0; i < 21; ++i) {
    a.push_back(static_cast<uint16_t>(random()));
    b.push_back(static_cast<uint16_t>(random()));
  }
  const hal_reduce_op_t ops[] = {HAL_REDUCE_SUM, HAL_REDUCE_PROD, HAL_REDUCE_MIN, HAL_REDUCE_MAX};
  unsigned widths_run = 0;
  for (hal_dtype_t dtype : {HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    const bool half = dtype == HAL_DTYPE_F16;
    auto widen = [&](uint16_t h) { return half ? half_to_float(h) : bf16_to_float(h); };
    for (hal_reduce_op_t op : ops) {
      std::vector<uint16_t> scalar(a.size());
      REQUIRE(hal::collective::reduce_pair_16bit_at_width(0, scalar.data(), a.data(), b.data(),
                                                          a.size(), dtype, op));
      for (unsigned width = 1; width <= 2; ++width) {
        std::vector<uint16_t> got(a.size(), 0x5555);
        if (!hal::collective::reduce_pair_16bit_at_width(width, got.data(), a.data(), b.data(),
                                                         a.size(), dtype, op)) {
          continue;
        }
        ++widths_run;
        size_t mismatches = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          // f16's hardware narrowing may keep another NaN payload: both
          // quiet NaNs of the same sign. Of two NaN operands, which one an
          // add or multiply returns is the compiler's choice (it may swap
          // them), so then any NaN will do. Otherwise bf16 keeps the scalar
          // bits exactly.
          const bool nan_operands = std::isnan(widen(a[i])) && std::isnan(widen(b[i]));
          const bool both_nan = std::isnan(widen(got[i])) && std::isnan(widen(scalar[i]));
          const bool same_sign = (got[i] & 0x8000) == (scalar[i] & 0x8000);
          const bool accepted =
              got[i] == scalar[i] || (both_nan && (nan_operands || (half && same_sign)));
          if (!accepted) {
            if (mismatches++ < 5) {
              UNSCOPED_INFO("width " << width << " dtype " << dtype << " op " << op << " a 0x"
                                     << std::hex << a[i] << " b 0x" << b[i] << " got 0x" << got[i]
                                     << " scalar 0x" << scalar[i] << std::dec);
            }
          }
        }
        CHECK(mismatches == 0);
      }
    }
  }
  // Each path that exists ran (a CPU without AVX2 has none).
  INFO("vector paths run: " << widths_run);
  SUCCEED();
}
