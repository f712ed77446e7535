// The low-precision ops (SPEC.md §17.7) and the 8-bit float storage types
// through the public API, on the first device of HAL_PLUGINS, against host
// references computed independently in float64: the OCP fp8 codecs by
// enumerating every code (nearest value, ties to the even code), quantize
// and dequantize per tensor, per row, per column and in DeepGEMM's 1x128 and
// 128x128 blocks, the scaled matmul (and its grouped MoE form) against
// dequantize-then-matmul, fake quantization with the straight-through and
// LSQ gradients; bad descriptors refused naming the operand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../cpu/float16_bits.hpp"
#include "fp8.hpp"
#include "hal.h"
#include "op_session.hpp"

namespace {

using op_test::Session;

hal_tensor_desc_t dense(hal_dtype_t dtype, std::vector<int64_t> shape) {
  hal_tensor_desc_t tensor{};
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return tensor;
}

template <typename Desc>
Desc header_of(hal_op_kind_t kind) {
  Desc desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = kind;
  return desc;
}

// ---- float64 references ------------------------------------------------------

// The fp8 codecs and quantize's grids are the operators profile's float64
// reference (conformance/operators/fp8.hpp), one for both suites; here under
// this file's names.
using hal::test::from_bf16;
using hal::test::to_bf16;
using halconform::ops::fp8_encode;
using halconform::ops::fp8_max;
using halconform::ops::grid_value;
using halconform::ops::quant_max;
using halconform::ops::quant_min;

double fp8_value(uint8_t code, hal_dtype_t dtype) {
  return halconform::ops::fp8_decode(code, dtype);
}
uint8_t encode(double v, hal_dtype_t q) {
  return halconform::ops::quant_code(v, q);
}
double decode(uint8_t code, hal_dtype_t q) {
  return halconform::ops::quant_decode(code, q);
}

std::vector<float> random_floats(size_t count, uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> out(count);
  for (float& v : out) v = normal(rng);
  return out;
}

const char* name_of(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_I8 ? "i8" : dtype == HAL_DTYPE_F8_E4M3 ? "e4m3" : "e5m2";
}

struct Blocks {
  uint32_t rows, cols;
};

// Host quantization of x [rows, cols] (f32 math where the op's is f32).
struct HostQuantized {
  std::vector<uint8_t> q;
  std::vector<float> scale;
  int64_t scale_rows, scale_cols;
};

HostQuantized host_quantize(const std::vector<float>& x, int64_t rows, int64_t cols, Blocks b,
                            hal_dtype_t qdtype) {
  const int64_t br = b.rows == 0 ? rows : b.rows, bc = b.cols == 0 ? cols : b.cols;
  HostQuantized out;
  out.scale_rows = rows / br;
  out.scale_cols = cols / bc;
  out.scale.assign(static_cast<size_t>(out.scale_rows * out.scale_cols), 0.0f);
  for (int64_t rb = 0; rb < out.scale_rows; ++rb) {
    for (int64_t cb = 0; cb < out.scale_cols; ++cb) {
      float amax = 0.0f;
      for (int64_t r = rb * br; r < (rb + 1) * br; ++r)
        for (int64_t c = cb * bc; c < (cb + 1) * bc; ++c)
          amax = std::max(amax, std::fabs(x[r * cols + c]));
      out.scale[rb * out.scale_cols + cb] =
          amax == 0.0f ? 1.0f : amax / static_cast<float>(quant_max(qdtype));
    }
  }
  out.q.resize(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float s = out.scale[(r / br) * out.scale_cols + c / bc];
      out.q[r * cols + c] = encode(static_cast<double>(x[r * cols + c] / s), qdtype);
    }
  return out;
}

// The f16 nearest |v| (ties to even; past 65520 an infinity), as a double.
double round_to_f16(double v) {
  if (std::isnan(v) || std::isinf(v) || v == 0.0) return v;
  int e = 0;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const double quantum = std::ldexp(1.0, std::max(e - 1, -14) - 10);
  const double r = std::nearbyint(v / quantum) * quantum;  // ties to even
  return std::fabs(r) >= 65520.0 ? std::copysign(HUGE_VAL, v) : r;
}

// An f16's value from its fields.
double f16_value(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 10) & 31, man = h & 1023;
  if (e == 31) return man == 0 ? sign * HUGE_VAL : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(man, -24);
  return sign * std::ldexp(1.0 + man / 1024.0, e - 15);
}

// The implementation the cpu plugin must pick for |desc| unless the run asks
// for the portable ones: so that a decline is a failure, not a silent pass
// of the portable kernels.
void check_served_natively(Session& session, const hal_op_header_t* desc) {
  hal_device_properties_t props{};
  props.struct_size = sizeof props;
  REQUIRE(hal_device_get_properties(session.device(), &props) == HAL_SUCCESS);
  const char* only = std::getenv("HAL_OPS_IMPLEMENTATIONS");
  if (std::string(props.plugin) != "cpu" || (only != nullptr && *only != 0)) return;
  hal_op_plan_t plan = session.plan(desc);
  hal_op_plan_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE(hal_op_plan_get_info(plan, &info) == HAL_SUCCESS);
  CHECK(std::string(info.implementation) == "cpu.native");
}

}  // namespace

TEST_CASE("dequantize every code to f32, bf16 and f16 over every block layout",
          "[lowp][dequantize]") {
  Session session;
  struct Case {
    std::vector<int64_t> shape;
    Blocks blocks;
    bool transposed_scale;  // scale a column-major view
  };
  // Row lengths off the 16-lane grid (tails), blocks narrower than a vector
  // (scales spread per element), a rank-3 q, and one tensor past the 65536
  // elements of an execution's range (ranges that start mid-row).
  const Case cases[] = {{{7, 37}, {0, 0}, false},     {{7, 37}, {1, 0}, false},
                        {{7, 37}, {0, 1}, true},      {{3, 2, 40}, {2, 8}, false},
                        {{5, 256}, {1, 128}, false},  {{256, 256}, {128, 128}, true},
                        {{300, 261}, {3, 29}, false}, {{1, 1000}, {0, 0}, false}};
  std::mt19937 rng(38);
  for (hal_dtype_t qdtype : {HAL_DTYPE_I8, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    for (const Case& test : cases) {
      int64_t count = 1;
      for (int64_t extent : test.shape) count *= extent;
      const int64_t cols = test.shape.back(), rows = count / cols;
      const int64_t br = test.blocks.rows == 0 ? rows : test.blocks.rows;
      const int64_t bc = test.blocks.cols == 0 ? cols : test.blocks.cols;
      const int64_t sr = rows / br, sc = cols / bc;
      // Every code in turn from a random start (NaN, infinities, subnormals,
      // both zeros), then random codes.
      std::vector<uint8_t> q(static_cast<size_t>(count));
      const uint32_t first = rng() % 256;
      for (int64_t i = 0; i < count; ++i)
        q[i] = static_cast<uint8_t>(i < 256 ? (first + i) % 256 : rng() % 256);
      // Distinct scales per block, across many binades; one negative, one 0
      // (0 times an infinity is NaN) and one tiny (subnormal products).
      std::vector<float> scale(static_cast<size_t>(sr * sc));
      for (size_t b = 0; b < scale.size(); ++b)
        scale[b] = std::ldexp(0.5f + static_cast<float>(rng() % 1000) / 2000.0f,
                              static_cast<int>(rng() % 24) - 12);
      if (scale.size() > 3) {
        scale[1] = -scale[1];
        scale[2] = 0.0f;
        scale[3] = 1e-38f;
      }
      // The scale operand as [sr, sc], dense or a transposed view of [sc, sr].
      std::vector<float> stored = scale;
      hal_tensor_desc_t scale_desc = dense(HAL_DTYPE_F32, {sr, sc});
      if (test.transposed_scale) {
        for (int64_t rb = 0; rb < sr; ++rb)
          for (int64_t cb = 0; cb < sc; ++cb) stored[cb * sr + rb] = scale[rb * sc + cb];
        scale_desc.strides[0] = 1;
        scale_desc.strides[1] = sr;
      }
      auto desc = header_of<hal_op_quantize_desc_t>(HAL_OP_DEQUANTIZE);
      desc.blocks = {test.blocks.rows, test.blocks.cols};
      desc.q = dense(qdtype, test.shape);
      desc.scale = scale_desc;
      uint8_t* dq = session.upload(q);
      float* ds = session.upload(stored);
      for (hal_dtype_t xdtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16, HAL_DTYPE_F16}) {
        INFO(name_of(qdtype) << " -> "
                             << (xdtype == HAL_DTYPE_F32    ? "f32"
                                 : xdtype == HAL_DTYPE_BF16 ? "bf16"
                                                            : "f16")
                             << " " << rows << "x" << cols << " blocks " << test.blocks.rows << "x"
                             << test.blocks.cols);
        desc.x = dense(xdtype, test.shape);
        check_served_natively(session, &desc.header);
        const size_t bytes = xdtype == HAL_DTYPE_F32 ? 4 : 2;
        unsigned char* dx = session.alloc<unsigned char>(static_cast<size_t>(count) * bytes, 0x5a);
        session.run(&desc.header, {dq, ds, dx});
        bool guard = false;
        const auto got = session.download(dx, static_cast<size_t>(count) * bytes, &guard);
        CHECK(guard);
        size_t wrong = 0;
        int64_t first_wrong = -1;
        for (int64_t i = 0; i < count; ++i) {
          const int64_t r = i / cols, c = i % cols;
          // q · scale in float64 (exact), rounded once to f32, then to x's dtype.
          const double product = decode(q[i], qdtype) * scale[(r / br) * sc + c / bc];
          const double f32 = static_cast<float>(product);
          double want = f32, have = 0;
          if (xdtype == HAL_DTYPE_F32) {
            float v;
            std::memcpy(&v, got.data() + i * 4, 4);
            have = v;
          } else {
            uint16_t bits;
            std::memcpy(&bits, got.data() + i * 2, 2);
            if (xdtype == HAL_DTYPE_BF16) {
              have = from_bf16(bits);
              if (!std::isnan(f32)) want = from_bf16(to_bf16(static_cast<float>(f32)));
            } else {
              have = f16_value(bits);
              want = round_to_f16(f32);
            }
          }
          const bool same = std::isnan(want)
                                ? std::isnan(have)
                                : have == want && std::signbit(have) == std::signbit(want);
          if (!same && first_wrong < 0) first_wrong = i;
          wrong += !same;
        }
        INFO("first wrong element " << first_wrong);
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("cast: every fp8 code decodes exactly and f32 encodes to the nearest code",
          "[lowp][cast]") {
  Session session;
  for (hal_dtype_t fp8 : {HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    INFO(name_of(fp8));
    // Decode: all 256 codes to f32.
    std::vector<uint8_t> codes(256);
    for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
    auto cast = header_of<hal_op_cast_desc_t>(HAL_OP_CAST);
    cast.in = dense(fp8, {256});
    cast.out = dense(HAL_DTYPE_F32, {256});
    uint8_t* in = session.upload(codes);
    float* out = session.alloc<float>(256);
    session.run(&cast.header, {in, out});
    const auto decoded = session.download(out, 256);
    for (int c = 0; c < 256; ++c) {
      INFO("code " << c);
      const double want = fp8_value(static_cast<uint8_t>(c), fp8);
      if (std::isnan(want)) {
        CHECK(std::isnan(decoded[c]));
      } else {
        CHECK(decoded[c] == want);
      }
    }
    // Encode: random values over the whole range, the midpoints between
    // neighbouring codes (ties), and the overflow edges.
    std::vector<float> values = random_floats(2000, 7 + fp8, 1.0f);
    std::mt19937 rng(11);
    for (float& v : values) v = std::ldexp(v, static_cast<int>(rng() % 40) - 24);
    for (int c = 0; c + 1 < 0x7b; ++c) {
      const double lo = fp8_value(static_cast<uint8_t>(c), fp8);
      const double hi = fp8_value(static_cast<uint8_t>(c + 1), fp8);
      values.push_back(static_cast<float>((lo + hi) / 2));
      values.push_back(-static_cast<float>((lo + hi) / 2));
    }
    for (float v : {448.0f, 449.0f, 464.0f, 465.0f, 479.0f, 480.0f, 57344.0f, 61439.0f, 61440.0f,
                    1e6f, -1e6f, std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity(), 1e-30f, -0.0f})
      values.push_back(v);
    values.push_back(std::numeric_limits<float>::quiet_NaN());
    const auto n = static_cast<int64_t>(values.size());
    auto encode_cast = header_of<hal_op_cast_desc_t>(HAL_OP_CAST);
    encode_cast.in = dense(HAL_DTYPE_F32, {n});
    encode_cast.out = dense(fp8, {n});
    float* source = session.upload(values);
    uint8_t* target = session.alloc<uint8_t>(static_cast<size_t>(n));
    session.run(&encode_cast.header, {source, target});
    bool guard = false;
    const auto encoded = session.download(target, static_cast<size_t>(n), &guard);
    CHECK(guard);
    for (int64_t i = 0; i < n; ++i) {
      INFO("value " << values[i]);
      CHECK(int(encoded[i]) == int(fp8_encode(values[i], fp8, false)));
    }
  }
}

TEST_CASE("cast: fp8 to and from f64, i32 and bf16", "[lowp][cast]") {
  Session session;
  const std::vector<double> doubles = {1e300, -1e300, 3.0, -0.3, 1e-300, 240.0, 100000.0};
  const std::vector<int32_t> ints = {0, 1, -3, 17, 1000, -100000, 2147483647};
  for (hal_dtype_t fp8 : {HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    INFO(name_of(fp8));
    auto cast = header_of<hal_op_cast_desc_t>(HAL_OP_CAST);
    cast.in = dense(HAL_DTYPE_F64, {7});
    cast.out = dense(fp8, {7});
    uint8_t* q = session.alloc<uint8_t>(7);
    session.run(&cast.header, {session.upload(doubles), q});
    const auto from_double = session.download(q, 7);
    for (size_t i = 0; i < 7; ++i) {
      INFO("f64 " << doubles[i]);
      CHECK(int(from_double[i]) == int(fp8_encode(doubles[i], fp8, false)));
    }
    cast.in = dense(HAL_DTYPE_I32, {7});
    session.run(&cast.header, {session.upload(ints), q});
    const auto from_int = session.download(q, 7);
    for (size_t i = 0; i < 7; ++i) {
      INFO("i32 " << ints[i]);
      CHECK(int(from_int[i]) == int(fp8_encode(ints[i], fp8, false)));
    }
    // Back: to i32 (truncated, saturated; NaN 0) and bf16 (exact).
    std::vector<uint8_t> codes(256);
    for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
    cast.in = dense(fp8, {256});
    cast.out = dense(HAL_DTYPE_I32, {256});
    int32_t* as_int = session.alloc<int32_t>(256);
    uint8_t* all = session.upload(codes);
    session.run(&cast.header, {all, as_int});
    const auto ints_back = session.download(as_int, 256);
    cast.out = dense(HAL_DTYPE_BF16, {256});
    uint16_t* as_bf16 = session.alloc<uint16_t>(256);
    session.run(&cast.header, {all, as_bf16});
    const auto bf16_back = session.download(as_bf16, 256);
    for (int c = 0; c < 256; ++c) {
      INFO("code " << c);
      const double v = fp8_value(static_cast<uint8_t>(c), fp8);
      const double truncated = std::isnan(v)        ? 0.0
                               : v >= 2147483647.0  ? 2147483647.0
                               : v <= -2147483648.0 ? -2147483648.0
                                                    : std::trunc(v);
      CHECK(ints_back[c] == static_cast<int32_t>(truncated));
      if (std::isnan(v)) {
        CHECK(std::isnan(from_bf16(bf16_back[c])));
      } else {
        CHECK(from_bf16(bf16_back[c]) == v);
      }
    }
  }
}

TEST_CASE("quantize and dequantize per tensor, row, column and in DeepGEMM's blocks",
          "[lowp][quantize]") {
  Session session;
  struct Case {
    int64_t rows, cols;
    Blocks blocks;
  };
  const Case cases[] = {{6, 40, {0, 0}},
                        {6, 40, {1, 0}},
                        {6, 40, {0, 1}},
                        {4, 256, {1, 128}},
                        {256, 256, {128, 128}}};
  for (hal_dtype_t qdtype : {HAL_DTYPE_I8, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    for (const Case& test : cases) {
      INFO(name_of(qdtype) << " [" << test.rows << ", " << test.cols << "] blocks "
                           << test.blocks.rows << "x" << test.blocks.cols);
      const size_t count = static_cast<size_t>(test.rows * test.cols);
      std::vector<float> x = random_floats(count, 3 + static_cast<uint32_t>(count), 2.0f);
      x[count / 2] = 0.0f;
      // One row block holds only zeros (its scale is 1) where rows are blocks.
      if (test.blocks.rows == 1) std::fill(x.begin(), x.begin() + test.cols, 0.0f);
      const HostQuantized want = host_quantize(x, test.rows, test.cols, test.blocks, qdtype);
      auto desc = header_of<hal_op_quantize_desc_t>(HAL_OP_QUANTIZE);
      desc.blocks = {test.blocks.rows, test.blocks.cols};
      desc.x = dense(HAL_DTYPE_F32, {test.rows, test.cols});
      desc.q = dense(qdtype, {test.rows, test.cols});
      desc.scale = dense(HAL_DTYPE_F32, {want.scale_rows, want.scale_cols});
      float* dx = session.upload(x);
      uint8_t* dq = session.alloc<uint8_t>(count);
      float* ds = session.alloc<float>(want.scale.size());
      session.run(&desc.header, {dx, dq, ds});
      bool q_guard = false, s_guard = false;
      const auto q = session.download(dq, count, &q_guard);
      const auto scale = session.download(ds, want.scale.size(), &s_guard);
      CHECK(q_guard);
      CHECK(s_guard);
      CHECK(scale == want.scale);
      size_t mismatched = 0;
      for (size_t i = 0; i < count; ++i) mismatched += q[i] != want.q[i];
      CHECK(mismatched == 0);
      // Dequantize to f32 and bf16: q * scale rounded once.
      auto back = header_of<hal_op_quantize_desc_t>(HAL_OP_DEQUANTIZE);
      back.blocks = desc.blocks;
      back.q = desc.q;
      back.scale = desc.scale;
      back.x = dense(HAL_DTYPE_F32, {test.rows, test.cols});
      float* dy = session.alloc<float>(count);
      session.run(&back.header, {dq, ds, dy});
      const auto y = session.download(dy, count);
      back.x.dtype = HAL_DTYPE_BF16;
      uint16_t* dh = session.alloc<uint16_t>(count);
      session.run(&back.header, {dq, ds, dh});
      const auto h = session.download(dh, count);
      const int64_t br = test.blocks.rows == 0 ? test.rows : test.blocks.rows;
      const int64_t bc = test.blocks.cols == 0 ? test.cols : test.blocks.cols;
      size_t wrong = 0;
      for (int64_t r = 0; r < test.rows; ++r)
        for (int64_t c = 0; c < test.cols; ++c) {
          const size_t i = static_cast<size_t>(r * test.cols + c);
          const float s = want.scale[(r / br) * want.scale_cols + c / bc];
          const float expect = static_cast<float>(decode(want.q[i], qdtype)) * s;
          wrong += y[i] != expect;
          wrong += h[i] != to_bf16(expect);
          // The round trip lands within half a grid step of x (no saturation:
          // the scale comes from amax).
          // A grid step: s for i8; for fp8 2^-mbits of |x|'s binade, at least
          // the subnormal step (2^-9, 2^-16) times s.
          const bool e4m3 = qdtype == HAL_DTYPE_F8_E4M3;
          const double step = qdtype == HAL_DTYPE_I8
                                  ? s
                                  : std::max(std::fabs(x[i]) * (e4m3 ? 0.125 : 0.25),
                                             std::ldexp(static_cast<double>(s), e4m3 ? -9 : -16));
          wrong += std::fabs(static_cast<double>(y[i]) - x[i]) > step * 0.5 + 1e-6 * s;
        }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("quantize with a given scale saturates, rounds half to even and keeps NaN",
          "[lowp][quantize]") {
  Session session;
  const std::vector<float> x = {1000.0f,
                                -1e9f,
                                2.5f,
                                3.5f,
                                -2.5f,
                                0.5f,
                                std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN()};
  for (hal_dtype_t qdtype : {HAL_DTYPE_I8, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    INFO(name_of(qdtype));
    auto desc = header_of<hal_op_quantize_desc_t>(HAL_OP_QUANTIZE);
    desc.flags = HAL_QUANTIZE_GIVEN_SCALE;
    desc.x = dense(HAL_DTYPE_F32, {8});
    desc.q = dense(qdtype, {8});
    desc.scale = dense(HAL_DTYPE_F32, {1, 1});
    uint8_t* dq = session.alloc<uint8_t>(8);
    float* scale = session.upload(std::vector<float>{qdtype == HAL_DTYPE_F8_E5M2 ? 0.001f : 1.0f});
    session.run(&desc.header, {session.upload(x), dq, scale});
    const auto q = session.download(dq, 8);
    const float s = qdtype == HAL_DTYPE_F8_E5M2 ? 0.001f : 1.0f;
    for (size_t i = 0; i < 8; ++i) {
      INFO("x " << x[i]);
      CHECK(int(q[i]) == int(encode(static_cast<double>(x[i] / s), qdtype)));
    }
    if (qdtype == HAL_DTYPE_I8) {
      CHECK(static_cast<int8_t>(q[0]) == 127);
      CHECK(static_cast<int8_t>(q[1]) == -128);
      CHECK(static_cast<int8_t>(q[2]) == 2);  // half to even
      CHECK(static_cast<int8_t>(q[3]) == 4);
      CHECK(static_cast<int8_t>(q[7]) == 0);  // NaN
    } else {
      CHECK(int(q[0] & 0x7f) == (qdtype == HAL_DTYPE_F8_E4M3 ? 0x7e : 0x7b));  // saturated
      CHECK(int(q[6]) == (qdtype == HAL_DTYPE_F8_E4M3 ? 0x7e : 0x7b));         // +inf saturates too
      CHECK(int(q[7] & 0x7f) == 0x7f);                                         // NaN stays NaN
    }
  }
}

namespace {

struct MatmulCase {
  hal_dtype_t a_dtype, b_dtype, d_dtype;
  int64_t m, n, k;
  Blocks a_blocks, b_blocks;
  std::vector<int32_t> offsets;  // grouped when not empty
  // int8 only: the codes drawn from {-128, -127, 0, 127} instead of
  // quantized normals (the extremes of a u8-shifted dot product).
  bool extremes = false;
};

void check_scaled_matmul(Session& session, const MatmulCase& test) {
  const bool grouped = !test.offsets.empty();
  const int64_t groups = grouped ? static_cast<int64_t>(test.offsets.size()) - 1 : 1;
  const int64_t m = test.m, n = test.n, k = test.k;
  const auto x = random_floats(static_cast<size_t>(m * k), 21, 1.0f);
  const auto w = random_floats(static_cast<size_t>(groups * n * k), 22, 0.5f);
  HostQuantized a = host_quantize(x, m, k, test.a_blocks, test.a_dtype);
  HostQuantized b = host_quantize(w, groups * n, k, test.b_blocks, test.b_dtype);
  if (test.extremes) {
    REQUIRE(test.a_dtype == HAL_DTYPE_I8);
    std::mt19937 rng(23);
    const int8_t extreme[] = {-128, -128, -127, 0, 127};
    for (auto* q : {&a.q, &b.q})
      for (uint8_t& code : *q) code = static_cast<uint8_t>(extreme[rng() % 5]);
  }
  // Per expert scales: b_scale [groups, n / br, k / bc] is the same buffer.
  auto desc = header_of<hal_op_scaled_matmul_desc_t>(HAL_OP_SCALED_MATMUL);
  desc.groups = grouped ? static_cast<uint32_t>(groups) : 0;
  desc.a_blocks = {test.a_blocks.rows, test.a_blocks.cols};
  desc.b_blocks = {test.b_blocks.rows, test.b_blocks.cols};
  desc.a = dense(test.a_dtype, {m, k});
  desc.a_scale = dense(HAL_DTYPE_F32, {a.scale_rows, a.scale_cols});
  if (grouped) {
    REQUIRE(test.b_blocks.rows != 0);
    desc.b = dense(test.b_dtype, {groups, n, k});
    desc.b_scale = dense(HAL_DTYPE_F32, {groups, b.scale_rows / groups, b.scale_cols});
    desc.offsets = dense(HAL_DTYPE_I32, {groups + 1});
  } else {
    desc.b = dense(test.b_dtype, {n, k});
    desc.b_scale = dense(HAL_DTYPE_F32, {b.scale_rows, b.scale_cols});
  }
  desc.d = dense(test.d_dtype, {m, n});
  const size_t d_bytes = static_cast<size_t>(m * n) * (test.d_dtype == HAL_DTYPE_F32 ? 4 : 2);
  uint8_t* dd = session.alloc<uint8_t>(d_bytes, 0x5a);
  int32_t* offsets = grouped ? session.upload(test.offsets) : nullptr;
  session.run(&desc.header, {session.upload(a.q), session.upload(a.scale), session.upload(b.q),
                             session.upload(b.scale), offsets, dd});
  bool guard = false;
  const auto raw = session.download(dd, d_bytes, &guard);
  CHECK(guard);
  // Reference: dequantize in f64, then matmul in f64.
  const int64_t abr = test.a_blocks.rows == 0 ? m : test.a_blocks.rows;
  const int64_t abc = test.a_blocks.cols == 0 ? k : test.a_blocks.cols;
  const int64_t bbr = test.b_blocks.rows == 0 ? groups * n : test.b_blocks.rows;
  const int64_t bbc = test.b_blocks.cols == 0 ? k : test.b_blocks.cols;
  size_t wrong = 0, untouched_ok = 0, untouched = 0;
  for (int64_t r = 0; r < m; ++r) {
    int64_t g = grouped ? -1 : 0;
    for (int64_t e = 0; e < groups && grouped; ++e)
      if (r >= test.offsets[e] && r < test.offsets[e + 1]) g = e;
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = static_cast<size_t>(r * n + j);
      double got;
      if (test.d_dtype == HAL_DTYPE_F32) {
        float f;
        std::memcpy(&f, &raw[i * 4], 4);
        got = f;
      } else {
        uint16_t h;
        std::memcpy(&h, &raw[i * 2], 2);
        got = from_bf16(h);
      }
      if (g < 0) {
        ++untouched;
        untouched_ok += raw[i * (test.d_dtype == HAL_DTYPE_F32 ? 4 : 2)] == 0x5a;
        continue;
      }
      double sum = 0.0, magnitude = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double av =
            decode(a.q[r * k + kk], test.a_dtype) * a.scale[(r / abr) * a.scale_cols + kk / abc];
        const int64_t brow = g * n + j;
        const double bv = decode(b.q[brow * k + kk], test.b_dtype) *
                          b.scale[(brow / bbr) * b.scale_cols + kk / bbc];
        sum += av * bv;
        magnitude += std::fabs(av * bv);
      }
      const double tolerance = (test.d_dtype == HAL_DTYPE_F32 ? 1e-5 : 8e-3) * magnitude + 1e-30;
      if (std::fabs(got - sum) > tolerance) {
        if (wrong < 5) UNSCOPED_INFO("d[" << r << ", " << j << "] = " << got << ", want " << sum);
        ++wrong;
      }
    }
  }
  CHECK(wrong == 0);
  CHECK(untouched_ok == untouched);
}

}  // namespace

TEST_CASE("scaled matmul against dequantize-then-matmul in float64", "[lowp][matmul]") {
  Session session;
  const MatmulCase cases[] = {
      // int8: per-row activations, per-channel weights; and per tensor.
      {HAL_DTYPE_I8, HAL_DTYPE_I8, HAL_DTYPE_F32, 9, 7, 33, {1, 0}, {1, 0}, {}},
      {HAL_DTYPE_I8, HAL_DTYPE_I8, HAL_DTYPE_BF16, 5, 6, 20, {0, 0}, {0, 0}, {}},
      // DeepGEMM's fp8: 1x128 activations, 128x128 weights.
      {HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F32, 7, 128, 256, {1, 128}, {128, 128}, {}},
      {HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E4M3, HAL_DTYPE_BF16, 3, 128, 384, {1, 128}, {128, 128}, {}},
      // e5m2 (gradients) times e4m3, per-row against 1x64 blocks of b.
      {HAL_DTYPE_F8_E5M2, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F32, 4, 10, 128, {1, 0}, {1, 64}, {}},
      // int8 per-row a against 1x32 blocks of b: k summed in chunks of 32.
      {HAL_DTYPE_I8, HAL_DTYPE_I8, HAL_DTYPE_F32, 3, 5, 96, {1, 0}, {1, 32}, {}},
  };
  for (const MatmulCase& test : cases) {
    INFO(name_of(test.a_dtype) << " x " << name_of(test.b_dtype) << " m=" << test.m
                               << " n=" << test.n << " k=" << test.k);
    check_scaled_matmul(session, test);
  }
}

TEST_CASE("grouped scaled matmul over MoE expert segments", "[lowp][matmul]") {
  Session session;
  // Experts 0..3: rows 0..4, none, 5..11, 12..12; row 13 in no segment.
  const MatmulCase cases[] = {
      {HAL_DTYPE_F8_E4M3,
       HAL_DTYPE_F8_E4M3,
       HAL_DTYPE_F32,
       14,
       128,
       256,
       {1, 128},
       {128, 128},
       {0, 5, 5, 12, 13}},
      {HAL_DTYPE_I8, HAL_DTYPE_I8, HAL_DTYPE_BF16, 14, 6, 40, {1, 0}, {1, 0}, {0, 5, 5, 12, 13}},
  };
  for (const MatmulCase& test : cases) {
    INFO(name_of(test.a_dtype));
    check_scaled_matmul(session, test);
  }
}

// The shapes a tiled kernel gets wrong (cpu.native's AVX-512 tiles: 64
// columns, 6 or 4 rows, k in steps of 4 per chunk): odd m, n and k, n across
// tiles with a tail, k chunks that are not a multiple of the vector width
// (nor of 4), the int8 extremes, every scale layout, and segments with empty
// experts, overlapping ones and rows in none.
TEST_CASE("scaled matmul: odd shapes, int8 extremes, every scale layout", "[lowp][matmul][tiles]") {
  Session session;
  const hal_dtype_t i8 = HAL_DTYPE_I8, e4 = HAL_DTYPE_F8_E4M3, e5 = HAL_DTYPE_F8_E5M2;
  const hal_dtype_t f32 = HAL_DTYPE_F32, bf16 = HAL_DTYPE_BF16;
  const MatmulCase cases[] = {
      // per-row a, per-channel b; k = 37 pads its one chunk to 40.
      {i8, i8, f32, 13, 67, 37, {1, 0}, {1, 0}, {}},
      {i8, i8, f32, 13, 67, 37, {1, 0}, {1, 0}, {}, true},
      // per tensor; k = 1 and k = 130.
      {i8, i8, bf16, 7, 65, 1, {0, 0}, {0, 0}, {}},
      {i8, i8, f32, 1, 129, 130, {0, 0}, {0, 0}, {}, true},
      // chunks of 40 (a multiple of 4, not of 64) and of 6 (not of 4).
      {i8, i8, f32, 8, 80, 120, {1, 40}, {16, 40}, {}},
      {i8, i8, f32, 5, 64, 18, {1, 6}, {1, 0}, {}, true},
      // DeepGEMM's blocks, several 64-column tiles, rows past one 6-row tile.
      {i8, i8, f32, 19, 256, 384, {1, 128}, {128, 128}, {}},
      {i8, i8, bf16, 19, 256, 384, {1, 128}, {128, 128}, {}, true},
      // decode (m <= 4: b read unpacked), chunks of 6, of 40, and of 200 (a
      // 64-byte vector, 2 more and a tail).
      {i8, i8, f32, 3, 20, 18, {1, 6}, {1, 0}, {}, true},
      {i8, i8, f32, 4, 70, 200, {1, 40}, {2, 40}, {}},
      {i8, i8, bf16, 2, 9, 200, {1, 0}, {1, 0}, {}, true},
      // k past one block of the tiles' k loop (512 steps of 4): one chunk
      // over three blocks, and chunks of 40 with one across a block's end.
      {i8, i8, f32, 7, 70, 4400, {1, 0}, {1, 0}, {}, true},
      {i8, i8, f32, 9, 64, 2400, {1, 40}, {64, 40}, {}},
      {e4, e5, f32, 5, 64, 2400, {1, 40}, {64, 40}, {}},
      // per-column a scales (a's blocks {0, 1}: each k its own chunk).
      {i8, i8, f32, 6, 33, 12, {0, 1}, {1, 0}, {}},
      // the 8-bit floats: odd shapes, per row/channel, blocks, mixed formats.
      {e4, e4, f32, 5, 70, 36, {1, 0}, {1, 0}, {}},
      {e5, e4, bf16, 9, 67, 10, {0, 0}, {1, 0}, {}},
      {e4, e5, f32, 11, 128, 384, {1, 128}, {128, 128}, {}},
      {e5, e5, f32, 3, 40, 24, {1, 6}, {8, 12}, {}},
      // grouped: experts 0 and 2 empty, rows 23 and 24 in no segment.
      {i8, i8, f32, 25, 128, 256, {1, 128}, {128, 128}, {0, 0, 7, 7, 20, 23}},
      {i8, i8, bf16, 25, 70, 37, {1, 0}, {1, 0}, {0, 0, 7, 7, 20, 23}, true},
      {e4, e4, f32, 25, 128, 256, {1, 128}, {128, 128}, {0, 0, 7, 7, 20, 23}},
      // an expert in two runs of rows (rows 3..5 taken by expert 2), each
      // ending in a partial row tile.
      {i8, i8, f32, 12, 70, 40, {1, 0}, {1, 0}, {0, 12, 3, 6}},
      {e4, e4, bf16, 12, 70, 40, {1, 0}, {1, 0}, {0, 12, 3, 6}},
      // overlapping segments (rows 5..9 take the last one) and one past m.
      {i8, i8, f32, 12, 20, 8, {1, 0}, {1, 0}, {0, 10, 5, 30}},
  };
  for (const MatmulCase& test : cases) {
    INFO(name_of(test.a_dtype) << " x " << name_of(test.b_dtype) << " m=" << test.m
                               << " n=" << test.n << " k=" << test.k << " a_blocks "
                               << test.a_blocks.rows << "x" << test.a_blocks.cols << " b_blocks "
                               << test.b_blocks.rows << "x" << test.b_blocks.cols
                               << (test.offsets.empty() ? "" : " grouped")
                               << (test.extremes ? " extremes" : ""));
    check_scaled_matmul(session, test);
  }
}

TEST_CASE("fake quantize: forward on the grid, straight-through and LSQ gradients", "[lowp][qat]") {
  Session session;
  const int64_t rows = 4, cols = 33;
  const size_t count = static_cast<size_t>(rows * cols);
  for (hal_dtype_t qdtype : {HAL_DTYPE_I8, HAL_DTYPE_F8_E4M3}) {
    for (Blocks blocks : {Blocks{0, 0}, Blocks{1, 0}}) {
      INFO(name_of(qdtype) << (blocks.rows ? " per channel" : " per tensor"));
      auto x = random_floats(count, 5, 3.0f);
      x[3] = std::numeric_limits<float>::quiet_NaN();
      const auto grad_y = random_floats(count, 6, 1.0f);
      const int64_t scales = blocks.rows ? rows : 1;
      // Scales small enough that some of x falls outside the clipping range.
      std::vector<float> scale(static_cast<size_t>(scales));
      for (int64_t s = 0; s < scales; ++s)
        scale[s] = (qdtype == HAL_DTYPE_I8 ? 0.03f : 0.012f) * static_cast<float>(s + 1);
      auto desc = header_of<hal_op_fake_quantize_desc_t>(HAL_OP_FAKE_QUANTIZE);
      desc.qdtype = qdtype;
      desc.blocks = {blocks.rows, blocks.cols};
      desc.x = dense(HAL_DTYPE_F32, {rows, cols});
      desc.scale = dense(HAL_DTYPE_F32, {scales, 1});
      desc.y = desc.x;
      float* dx = session.upload(x);
      float* ds = session.upload(scale);
      float* dy = session.alloc<float>(count);
      session.run(&desc.header, {dx, ds, dy});
      const auto y = session.download(dy, count);
      auto back = desc;
      back.header.kind = HAL_OP_FAKE_QUANTIZE_BACKWARD;
      back.flags = HAL_FAKE_QUANTIZE_GRAD_SCALE;
      back.grad_scale_factor = 0.25f;
      back.grad_y = desc.x;
      back.grad_x = desc.x;
      back.grad_scale = desc.scale;
      float* dgx = session.alloc<float>(count);
      float* dgs = session.alloc<float>(static_cast<size_t>(scales));
      session.run(&back.header, {dx, ds, session.upload(grad_y), dgx, dgs});
      const auto gx = session.download(dgx, count);
      const auto gs = session.download(dgs, static_cast<size_t>(scales));
      std::vector<double> want_gs(static_cast<size_t>(scales), 0.0);
      std::vector<double> gs_magnitude(static_cast<size_t>(scales), 0.0);
      size_t wrong = 0, clipped = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          const size_t si = blocks.rows ? static_cast<size_t>(r) : 0;
          const float s = scale[si];
          const double v = static_cast<double>(x[i] / s);
          const double lo = quant_min(qdtype), hi = quant_max(qdtype);
          const double q = grid_value(v, qdtype);
          if (std::isnan(x[i])) {
            wrong += !std::isnan(y[i]) && qdtype != HAL_DTYPE_I8;
            wrong += qdtype == HAL_DTYPE_I8 && y[i] != 0.0f;
          } else {
            wrong += std::fabs(y[i] - q * s) > 1e-6 * std::fabs(q * s);
          }
          const bool inside = v >= lo && v <= hi;
          clipped += !inside && !std::isnan(v);
          wrong += gx[i] != (inside ? grad_y[i] : 0.0f);
          const double d = std::isnan(v) ? 0.0 : v < lo ? lo : v > hi ? hi : q - v;
          want_gs[si] += grad_y[i] * d;
          gs_magnitude[si] += std::fabs(grad_y[i] * d);
        }
      CHECK(wrong == 0);
      CHECK(clipped > 0);  // the clipping range is exercised
      for (int64_t s = 0; s < scales; ++s) {
        INFO("scale " << s);
        CHECK(std::fabs(gs[s] - 0.25 * want_gs[s]) <= 1e-5 * gs_magnitude[s] + 1e-6);
      }
    }
  }
}

TEST_CASE("fake quantize with PyTorch's conventions: reciprocal scale, mask on the rounded value",
          "[lowp][qat]") {
  Session session;
  const int64_t rows = 2, cols = 40;
  const size_t count = static_cast<size_t>(rows * cols);
  auto x = random_floats(count, 7, 6.0f);
  const std::vector<float> scale = {0.037f, 0.0231f};
  // The half-quantum bands beyond the range (inside for PyTorch's mask, outside
  // for LSQ's) and the ties at their edges, in both rows.
  const float bands[] = {127.3f, 127.5f, 127.49f, -128.5f, -128.7f, -128.2f, 127.0f, -128.0f};
  for (int64_t r = 0; r < rows; ++r)
    for (size_t b = 0; b < std::size(bands); ++b)
      x[static_cast<size_t>(r * cols) + b] = bands[b] * scale[static_cast<size_t>(r)];
  const auto grad_y = random_floats(count, 8, 1.0f);
  auto desc = header_of<hal_op_fake_quantize_desc_t>(HAL_OP_FAKE_QUANTIZE);
  desc.qdtype = HAL_DTYPE_I8;
  desc.flags = HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE;
  desc.blocks = {1, 0};
  desc.x = desc.y = dense(HAL_DTYPE_F32, {rows, cols});
  desc.scale = dense(HAL_DTYPE_F32, {rows, 1});
  float* dx = session.upload(x);
  float* ds = session.upload(scale);
  float* dy = session.alloc<float>(count);
  session.run(&desc.header, {dx, ds, dy});
  const auto y = session.download(dy, count);
  auto back = desc;
  back.header.kind = HAL_OP_FAKE_QUANTIZE_BACKWARD;
  back.flags = HAL_FAKE_QUANTIZE_GRAD_SCALE | HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE |
               HAL_FAKE_QUANTIZE_CLIP_ROUNDED;
  back.grad_scale_factor = 0.5f;
  back.grad_y = back.grad_x = desc.x;
  back.grad_scale = desc.scale;
  float* dgx = session.alloc<float>(count);
  float* dgs = session.alloc<float>(static_cast<size_t>(rows));
  session.run(&back.header, {dx, ds, session.upload(grad_y), dgx, dgs});
  const auto gx = session.download(dgx, count);
  const auto gs = session.download(dgs, static_cast<size_t>(rows));
  size_t wrong = 0, band = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float s = scale[static_cast<size_t>(r)];
    const float inverse = 1.0f / s;  // the convention: the f32 reciprocal, then a product
    double want_gs = 0.0, magnitude = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const double v = static_cast<double>(x[i] * inverse);
      const double rounded = std::nearbyint(v);  // ties to even, as PyTorch's nearbyint
      const bool inside = rounded >= -128.0 && rounded <= 127.0;
      band += inside && (v < -128.0 || v > 127.0);
      const double q = std::min(127.0, std::max(-128.0, rounded));
      wrong += static_cast<double>(y[i]) != static_cast<double>(static_cast<float>(q * s));
      wrong += gx[i] != (inside ? grad_y[i] : 0.0f);
      const double d = rounded < -128.0 ? -128.0 : rounded > 127.0 ? 127.0 : q - v;
      want_gs += grad_y[i] * d;
      magnitude += std::fabs(grad_y[i] * d);
    }
    INFO("row " << r);
    CHECK(std::fabs(gs[static_cast<size_t>(r)] - 0.5 * want_gs) <= 1e-5 * magnitude + 1e-6);
  }
  CHECK(wrong == 0);
  CHECK(band >= 4);  // the bands where the two masks differ are exercised

  // CLIP_ROUNDED is I8's; the forward takes RECIPROCAL_SCALE only.
  back.qdtype = HAL_DTYPE_F8_E4M3;
  CHECK(session.refused(&back.header).find("CLIP_ROUNDED") != std::string::npos);
  desc.flags = HAL_FAKE_QUANTIZE_CLIP_ROUNDED;
  CHECK(session.refused(&desc.header).find("desc->flags") != std::string::npos);
}

TEST_CASE("bad low-precision descriptors are refused naming the operand", "[lowp][errors]") {
  Session session;
  auto quantize = header_of<hal_op_quantize_desc_t>(HAL_OP_QUANTIZE);
  quantize.blocks = {1, 128};
  quantize.x = dense(HAL_DTYPE_F32, {4, 256});
  quantize.q = dense(HAL_DTYPE_F8_E4M3, {4, 256});
  quantize.scale = dense(HAL_DTYPE_F32, {4, 3});  // wants [4, 2]
  CHECK(session.refused(&quantize.header).find("scale") != std::string::npos);
  quantize.scale = dense(HAL_DTYPE_F32, {4, 2});
  quantize.blocks = {1, 100};  // does not divide 256
  CHECK(session.refused(&quantize.header).find("blocks.cols = 100 does not divide") !=
        std::string::npos);
  quantize.blocks = {1, 128};
  quantize.q.dtype = HAL_DTYPE_F16;
  CHECK(session.refused(&quantize.header).find("q ") != std::string::npos);

  // Dequantize: the same rules, the operands the other way round, no flags.
  auto dequantize = header_of<hal_op_quantize_desc_t>(HAL_OP_DEQUANTIZE);
  dequantize.blocks = {1, 128};
  dequantize.q = dense(HAL_DTYPE_F8_E5M2, {4, 256});
  dequantize.scale = dense(HAL_DTYPE_F32, {4, 2});
  dequantize.x = dense(HAL_DTYPE_BF16, {4, 256});
  session.plan(&dequantize.header);  // the valid descriptor the cases below break
  dequantize.flags = HAL_QUANTIZE_GIVEN_SCALE;
  CHECK(session.refused(&dequantize.header).find("HAL_OP_DEQUANTIZE does not take") !=
        std::string::npos);
  dequantize.flags = 0;
  dequantize.scale = dense(HAL_DTYPE_F32, {2, 4});  // per-column blocks' shape, transposed
  CHECK(session.refused(&dequantize.header).find("scale ") != std::string::npos);
  dequantize.scale = dense(HAL_DTYPE_F16, {4, 2});
  CHECK(session.refused(&dequantize.header).find("scale ") != std::string::npos);
  dequantize.scale = dense(HAL_DTYPE_F32, {4, 2});
  dequantize.blocks = {3, 128};  // does not divide the 4 rows
  CHECK(session.refused(&dequantize.header).find("blocks.rows = 3 does not divide") !=
        std::string::npos);
  dequantize.blocks = {1, 128};
  dequantize.x = dense(HAL_DTYPE_BF16, {4, 255});
  CHECK(session.refused(&dequantize.header).find("must have the shape") != std::string::npos);
  dequantize.x = dense(HAL_DTYPE_I32, {4, 256});
  CHECK(session.refused(&dequantize.header).find("x has dtype i32") != std::string::npos);
  dequantize.x = dense(HAL_DTYPE_F32, {4, 256});
  dequantize.q.dtype = HAL_DTYPE_BF16;
  CHECK(session.refused(&dequantize.header).find("q has dtype bf16") != std::string::npos);

  auto matmul = header_of<hal_op_scaled_matmul_desc_t>(HAL_OP_SCALED_MATMUL);
  matmul.a_blocks = {1, 128};
  matmul.b_blocks = {128, 128};
  matmul.a = dense(HAL_DTYPE_F8_E4M3, {8, 256});
  matmul.a_scale = dense(HAL_DTYPE_F32, {8, 2});
  matmul.b = dense(HAL_DTYPE_F8_E4M3, {128, 256});
  matmul.b_scale = dense(HAL_DTYPE_F32, {2, 1});  // transposed: wants [1, 2]
  matmul.d = dense(HAL_DTYPE_F32, {8, 128});
  CHECK(session.refused(&matmul.header).find("b_scale") != std::string::npos);
  matmul.b_scale = dense(HAL_DTYPE_F32, {1, 2});
  matmul.a_blocks = {1, 96};  // a group size that does not divide k
  CHECK(session.refused(&matmul.header).find("a_blocks.cols = 96 does not divide") !=
        std::string::npos);
  matmul.a_blocks = {1, 128};
  matmul.a.dtype = HAL_DTYPE_I8;  // int8 with fp8
  CHECK(session.refused(&matmul.header).find("both operands") != std::string::npos);
  matmul.a.dtype = HAL_DTYPE_F8_E4M3;
  matmul.groups = 2;  // b must then be [2, n, k]
  CHECK(session.refused(&matmul.header).find("b ") != std::string::npos);
  matmul.groups = 0;
  matmul.d.dtype = HAL_DTYPE_I32;
  CHECK(session.refused(&matmul.header).find("d ") != std::string::npos);

  auto fake = header_of<hal_op_fake_quantize_desc_t>(HAL_OP_FAKE_QUANTIZE_BACKWARD);
  fake.qdtype = HAL_DTYPE_F16;
  fake.x = fake.grad_y = fake.grad_x = dense(HAL_DTYPE_F32, {4, 8});
  fake.scale = fake.grad_scale = dense(HAL_DTYPE_F32, {1, 1});
  CHECK(session.refused(&fake.header).find("desc->qdtype") != std::string::npos);
  fake.qdtype = HAL_DTYPE_I8;
  fake.flags = HAL_FAKE_QUANTIZE_GRAD_SCALE;
  fake.grad_scale_factor = std::numeric_limits<float>::infinity();
  CHECK(session.refused(&fake.header).find("grad_scale_factor") != std::string::npos);
  fake.grad_scale_factor = 1.0f;
  fake.blocks = {1, 0};  // per channel: scale must be [4, 1]
  CHECK(session.refused(&fake.header).find("scale") != std::string::npos);
}
