// The low-precision ops (SPEC.md §17.6.12) and the 8-bit float casts
// (§17.6.3) against float64 references written from the SPEC: every fp8 code
// decoded (E4M3's NaN codes must stay NaN), quantize's scales and codes bit
// for bit (ties to even), the scaled matmul against dequantize-then-matmul
// (distinct per-row scales, DeepGEMM's blocks, the grouped MoE form), fake
// quantization's forward, straight-through gradient (zero outside the
// clipping range) and LSQ scale gradient, and the descriptor rules.
#include <algorithm>
#include <cmath>
#include <optional>

#include "fp8.hpp"
#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

struct Blocks {
  uint32_t rows, cols;
};

int64_t extent(uint32_t block, int64_t whole) {
  return block == 0 ? whole : block;
}

int64_t code_of(double v, hal_dtype_t q) {
  if (q == HAL_DTYPE_I8) return static_cast<int64_t>(grid_value(v, q));
  return fp8_encode(v, q, true);
}

std::vector<int64_t> all_codes() {
  std::vector<int64_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = c;
  return codes;
}

template <class Desc>
Desc header_of(hal_op_kind_t kind) {
  Desc desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  return desc;
}

}  // namespace

HALCONFORM_TEST("operators.lowp.fp8_cast",
                "every fp8 code decodes to its value (NaN codes to NaN); f32 encodes to the "
                "nearest code with each format's overflow rule",
                {}) {
  for (hal_dtype_t fp8 : {HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    const std::string name = dtype_label(fp8);
    auto cast = header_of<hal_op_cast_desc_t>(HAL_OP_CAST);
    cast.in = dense(fp8, {256});
    cast.out = dense(HAL_DTYPE_F32, {256});
    Plan decode;
    plan_or_skip(ctx, &cast.header, decode);
    DeviceTensor codes(ctx.device(), cast.in), values(ctx.device(), cast.out);
    codes.upload_integers(all_codes());
    execute(ctx, decode, {codes.data(), values.data()});
    const auto got = values.download();
    for (int c = 0; c < 256; ++c) {
      const double want = fp8_decode(static_cast<uint8_t>(c), fp8);
      HC_REQUIRE(std::isnan(want) ? std::isnan(got[c]) : got[c] == want,
                 "cast " + name + " -> f32 of code " + std::to_string(c) + " gave " +
                     std::to_string(got[c]) + ", want " + std::to_string(want));
    }
    // Encode: random values across the range, every midpoint (a tie), the
    // overflow edges and the specials.
    std::vector<double> x = random_values(ctx.random(), 600, HAL_DTYPE_F32, -1, 1);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(x[i], static_cast<int>(i % 36) - 20);
    for (int c = 0; c + 1 < 0x7b; ++c) {
      x.push_back((fp8_decode(static_cast<uint8_t>(c), fp8) +
                   fp8_decode(static_cast<uint8_t>(c + 1), fp8)) /
                  2);
    }
    for (double v : {448.0, 464.0, 465.0, 57344.0, 61439.0, 61440.0, 1e6, -1e6, HUGE_VAL, -HUGE_VAL,
                     std::nan("")})
      x.push_back(v);
    const auto n = static_cast<int64_t>(x.size());
    cast.in = dense(HAL_DTYPE_F32, {n});
    cast.out = dense(fp8, {n});
    Plan encode;
    plan_or_skip(ctx, &cast.header, encode);
    DeviceTensor source(ctx.device(), cast.in, x), target(ctx.device(), cast.out);
    execute(ctx, encode, {source.data(), target.data()});
    const auto encoded = target.download_integers();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t want = fp8_encode(x[i], fp8, false);
      HC_REQUIRE(encoded[i] == want, "cast f32 -> " + name + " of " + std::to_string(x[i]) +
                                         " gave code " + std::to_string(encoded[i]) + ", want " +
                                         std::to_string(want));
    }
    target.check_untouched("cast f32 -> " + name);
  }
}

HALCONFORM_TEST("operators.lowp.quantize",
                "quantize's scales (amax / qmax) and codes bit for bit per tensor, row, column "
                "and block; dequantize's q * scale",
                {}) {
  struct Case {
    int64_t rows, cols;
    Blocks blocks;
  };
  const Case cases[] = {{5, 24, {0, 0}},
                        {5, 24, {1, 0}},
                        {5, 24, {0, 1}},
                        {3, 256, {1, 128}},
                        {256, 128, {128, 128}}};
  for (hal_dtype_t q : {HAL_DTYPE_I8, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    for (const Case& test : cases) {
      const int64_t br = extent(test.blocks.rows, test.rows);
      const int64_t bc = extent(test.blocks.cols, test.cols);
      const int64_t sr = test.rows / br, sc = test.cols / bc;
      auto desc = header_of<hal_op_quantize_desc_t>(HAL_OP_QUANTIZE);
      desc.blocks = {test.blocks.rows, test.blocks.cols};
      desc.x = dense(HAL_DTYPE_F32, {test.rows, test.cols});
      desc.q = dense(q, {test.rows, test.cols});
      desc.scale = dense(HAL_DTYPE_F32, {sr, sc});
      const std::string what = std::string("quantize ") + dtype_label(q) + " " + label(desc.x) +
                               " blocks " + std::to_string(test.blocks.rows) + "x" +
                               std::to_string(test.blocks.cols);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      auto x = random_values(ctx.random(), test.rows * test.cols, HAL_DTYPE_F32, -3, 3);
      DeviceTensor dx(ctx.device(), desc.x, x), dq(ctx.device(), desc.q),
          ds(ctx.device(), desc.scale);
      execute(ctx, plan, {dx.data(), dq.data(), ds.data()});
      // Reference scales in f32, as the op computes them.
      std::vector<double> scale(static_cast<size_t>(sr * sc));
      for (int64_t b = 0; b < sr * sc; ++b) {
        float amax = 0.0f;
        for (int64_t r = (b / sc) * br; r < (b / sc + 1) * br; ++r)
          for (int64_t c = (b % sc) * bc; c < (b % sc + 1) * bc; ++c)
            amax = std::max(amax, static_cast<float>(std::fabs(x[r * test.cols + c])));
        scale[b] = amax == 0.0f ? 1.0f : amax / static_cast<float>(quant_max(q));
      }
      expect_close(ds.download(), scale, {0, 0}, what + ": scale");
      std::vector<int64_t> codes(x.size());
      for (int64_t r = 0; r < test.rows; ++r)
        for (int64_t c = 0; c < test.cols; ++c) {
          const auto s = static_cast<float>(scale[(r / br) * sc + c / bc]);
          codes[r * test.cols + c] = code_of(static_cast<float>(x[r * test.cols + c]) / s, q);
        }
      expect_equal_integers(dq.download_integers(), codes, what + ": q");
      dq.check_untouched(what);
      // Dequantize back to f32.
      auto back = desc;
      back.header.kind = HAL_OP_DEQUANTIZE;
      Plan dequantize;
      plan_or_skip(ctx, &back.header, dequantize);
      DeviceTensor dy(ctx.device(), desc.x);
      execute(ctx, dequantize, {dq.data(), ds.data(), dy.data()});
      std::vector<double> y(x.size());
      for (int64_t r = 0; r < test.rows; ++r)
        for (int64_t c = 0; c < test.cols; ++c) {
          const size_t i = static_cast<size_t>(r * test.cols + c);
          const double value = q == HAL_DTYPE_I8 ? static_cast<double>(codes[i])
                                                 : fp8_decode(static_cast<uint8_t>(codes[i]), q);
          y[i] = static_cast<float>(static_cast<float>(value) *
                                    static_cast<float>(scale[(r / br) * sc + c / bc]));
        }
      expect_close(dy.download(), y, {0, 0}, "de" + what);
    }
  }
}

HALCONFORM_TEST("operators.lowp.dequantize",
                "dequantize of every code (e4m3's NaN code stays NaN, e5m2's infinities stay "
                "infinite) to f32, bf16 and f16: q * scale rounded once, each block's own scale",
                {}) {
  struct Case {
    std::vector<int64_t> shape;
    Blocks blocks;
    bool transposed_scale;  // scale a column-major view
  };
  // Blocks of rows and of columns with distinct scales (a scale taken from
  // the wrong row block or the wrong column block shows), rows off any
  // vector width, a rank-3 q, blocks narrower than a vector.
  const Case cases[] = {{{6, 37}, {0, 0}, false},    {{6, 37}, {1, 0}, false},
                        {{6, 37}, {0, 1}, true},     {{3, 2, 40}, {2, 8}, false},
                        {{4, 256}, {1, 128}, false}, {{256, 256}, {128, 128}, true}};
  for (hal_dtype_t q : {HAL_DTYPE_I8, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    for (const Case& test : cases) {
      auto desc = header_of<hal_op_quantize_desc_t>(HAL_OP_DEQUANTIZE);
      desc.blocks = {test.blocks.rows, test.blocks.cols};
      desc.q = dense(q, test.shape);
      const int64_t count = numel(desc.q), cols = test.shape.back(), rows = count / cols;
      const int64_t br = extent(test.blocks.rows, rows), bc = extent(test.blocks.cols, cols);
      const int64_t sr = rows / br, sc = cols / bc;
      desc.scale = test.transposed_scale ? transposed(dense(HAL_DTYPE_F32, {sc, sr}), 0, 1)
                                         : dense(HAL_DTYPE_F32, {sr, sc});
      // Every code from a random start, then random codes; scales distinct
      // per block over many binades, one of them negative.
      const auto start = random_ints(ctx.random(), 1, 0, 256)[0];
      const auto more = random_ints(ctx.random(), count, 0, 256);
      std::vector<int64_t> codes(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i)
        codes[i] =
            i < 256 ? (static_cast<int64_t>(start) + i) % 256 : static_cast<int64_t>(more[i]);
      if (q == HAL_DTYPE_I8)
        for (int64_t& c : codes) c = static_cast<int8_t>(static_cast<uint8_t>(c));
      auto scale = random_values(ctx.random(), sr * sc, HAL_DTYPE_F32, 0.5, 1);
      for (size_t b = 0; b < scale.size(); ++b)
        scale[b] = std::ldexp(scale[b], static_cast<int>(b % 17) - 8) * (b == 1 ? -1 : 1);
      DeviceTensor dq(ctx.device(), desc.q), ds(ctx.device(), desc.scale, scale);
      dq.upload_integers(codes);
      for (hal_dtype_t x : {HAL_DTYPE_F32, HAL_DTYPE_BF16, HAL_DTYPE_F16}) {
        desc.x = dense(x, test.shape);
        const std::string what = std::string("dequantize ") + label(desc.q) + " -> " +
                                 dtype_label(x) + " blocks " + std::to_string(test.blocks.rows) +
                                 "x" + std::to_string(test.blocks.cols);
        Plan plan;
        plan_or_skip(ctx, &desc.header, plan);
        DeviceTensor dx(ctx.device(), desc.x);
        execute(ctx, plan, {dq.data(), ds.data(), dx.data()});
        const auto got = dx.download();
        for (int64_t i = 0; i < count; ++i) {
          const int64_t r = i / cols, c = i % cols;
          const double value = q == HAL_DTYPE_I8 ? static_cast<double>(codes[i])
                                                 : fp8_decode(static_cast<uint8_t>(codes[i]), q);
          // The product is exact in float64, rounded once to f32, then to x.
          const double want = round_to(
              x, static_cast<float>(value * scale[static_cast<size_t>((r / br) * sc + c / bc)]));
          const bool same = std::isnan(want) ? std::isnan(got[i]) : got[i] == want;
          HC_REQUIRE(same, what + ": x[" + std::to_string(i) + "] of code " +
                               std::to_string(codes[i]) + " is " + std::to_string(got[i]) +
                               ", want " + std::to_string(want));
        }
        dx.check_untouched(what);
      }
    }
  }
}

HALCONFORM_TEST("operators.lowp.quantize_static",
                "quantize with a given scale: ties to even, saturation per format, NaN", {}) {
  const std::vector<double> x = {0.5,   1.5,  2.5,  -2.5,     3.5,
                                 126.5, 1000, -1e9, HUGE_VAL, std::nan("")};
  const auto n = static_cast<int64_t>(x.size());
  for (hal_dtype_t q : {HAL_DTYPE_I8, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    auto desc = header_of<hal_op_quantize_desc_t>(HAL_OP_QUANTIZE);
    desc.flags = HAL_QUANTIZE_GIVEN_SCALE;
    desc.x = dense(HAL_DTYPE_F32, {n});
    desc.q = dense(q, {n});
    desc.scale = dense(HAL_DTYPE_F32, {1, 1});
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    const double s = q == HAL_DTYPE_F8_E5M2 ? 1.0 / 64 : 1.0;
    DeviceTensor dx(ctx.device(), desc.x, x), dq(ctx.device(), desc.q),
        ds(ctx.device(), desc.scale, {s});
    execute(ctx, plan, {dx.data(), dq.data(), ds.data()});
    std::vector<int64_t> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = code_of(x[i] / s, q);
    expect_equal_integers(dq.download_integers(), want,
                          std::string("quantize (given scale) ") + dtype_label(q));
  }
}

namespace {

struct ScaledMatmulCase {
  hal_dtype_t a_dtype, b_dtype, d_dtype;
  int64_t m, n, k;
  Blocks a_blocks, b_blocks;
  std::vector<int64_t> offsets;  // the grouped form when not empty
};

void check_scaled_matmul(TestContext& ctx, const ScaledMatmulCase& test) {
  const bool grouped = !test.offsets.empty();
  const int64_t groups = grouped ? static_cast<int64_t>(test.offsets.size()) - 1 : 1;
  const int64_t m = test.m, n = test.n, k = test.k;
  const int64_t abr = extent(test.a_blocks.rows, m), abc = extent(test.a_blocks.cols, k);
  const int64_t bbr = extent(test.b_blocks.rows, n), bbc = extent(test.b_blocks.cols, k);
  auto desc = header_of<hal_op_scaled_matmul_desc_t>(HAL_OP_SCALED_MATMUL);
  desc.groups = grouped ? static_cast<uint32_t>(groups) : 0;
  desc.a_blocks = {test.a_blocks.rows, test.a_blocks.cols};
  desc.b_blocks = {test.b_blocks.rows, test.b_blocks.cols};
  desc.a = dense(test.a_dtype, {m, k});
  desc.a_scale = dense(HAL_DTYPE_F32, {m / abr, k / abc});
  desc.b = grouped ? dense(test.b_dtype, {groups, n, k}) : dense(test.b_dtype, {n, k});
  desc.b_scale = grouped ? dense(HAL_DTYPE_F32, {groups, n / bbr, k / bbc})
                         : dense(HAL_DTYPE_F32, {n / bbr, k / bbc});
  if (grouped) desc.offsets = dense(HAL_DTYPE_I32, {groups + 1});
  desc.d = dense(test.d_dtype, {m, n});
  std::string what = std::string("scaled_matmul ") + label(desc.a) + " x " + label(desc.b) +
                     " -> " + label(desc.d);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  // Codes: random grid values (i8 in [-127, 127]; fp8 finite codes of
  // magnitude up to 8); scales: distinct per block, powers of two apart.
  const auto codes_for = [&](hal_dtype_t dtype, int64_t count) {
    std::vector<int64_t> codes(static_cast<size_t>(count));
    const auto r = random_ints(ctx.random(), count, dtype == HAL_DTYPE_I8 ? -127 : 0,
                               dtype == HAL_DTYPE_I8 ? 128 : 256);
    for (size_t i = 0; i < codes.size(); ++i) {
      codes[i] = static_cast<int64_t>(r[i]);
      if (dtype != HAL_DTYPE_I8) {
        const double v = fp8_decode(static_cast<uint8_t>(codes[i]), dtype);
        if (!std::isfinite(v) || std::fabs(v) > 8) codes[i] &= 0xa7;  // small, finite
      }
    }
    return codes;
  };
  const auto value_of = [](hal_dtype_t dtype, int64_t code) {
    return dtype == HAL_DTYPE_I8 ? static_cast<double>(static_cast<int8_t>(code))
                                 : fp8_decode(static_cast<uint8_t>(code), dtype);
  };
  const auto scales_for = [&](int64_t count) {
    auto s = random_values(ctx.random(), count, HAL_DTYPE_F32, 0.5, 1);
    for (size_t i = 0; i < s.size(); ++i) s[i] = std::ldexp(s[i], static_cast<int>(i % 5) - 6);
    return s;
  };
  const auto a = codes_for(test.a_dtype, m * k);
  const auto b = codes_for(test.b_dtype, groups * n * k);
  const auto as = scales_for(numel(desc.a_scale));
  const auto bs = scales_for(numel(desc.b_scale));
  DeviceTensor da(ctx.device(), desc.a), das(ctx.device(), desc.a_scale, as),
      db(ctx.device(), desc.b), dbs(ctx.device(), desc.b_scale, bs),
      dd(ctx.device(), desc.d, std::vector<double>(static_cast<size_t>(m * n), 0.0));
  da.upload_integers(a);
  db.upload_integers(b);
  std::optional<DeviceTensor> offsets;
  if (grouped) {
    offsets.emplace(ctx.device(), desc.offsets);
    offsets->upload_integers(test.offsets);
  }
  // d's rows outside every segment keep what they held: 0 here.
  execute(ctx, plan,
          {da.data(), das.data(), db.data(), dbs.data(), grouped ? offsets->data() : nullptr,
           dd.data()});
  const auto got = dd.download();
  std::vector<double> want(static_cast<size_t>(m * n), 0.0);
  std::vector<double> magnitude(want.size(), 0.0);
  const int64_t s_cols_a = k / abc, s_rows_b = n / bbr, s_cols_b = k / bbc;
  for (int64_t r = 0; r < m; ++r) {
    int64_t g = grouped ? -1 : 0;
    for (int64_t e = 0; grouped && e < groups; ++e)
      if (r >= test.offsets[e] && r < test.offsets[e + 1]) g = e;
    if (g < 0) continue;
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double av =
            value_of(test.a_dtype, a[r * k + kk]) * as[(r / abr) * s_cols_a + kk / abc];
        const double bv = value_of(test.b_dtype, b[(g * n + j) * k + kk]) *
                          bs[(g * s_rows_b + j / bbr) * s_cols_b + kk / bbc];
        sum += av * bv;
        mag += std::fabs(av * bv);
      }
      want[r * n + j] = sum;
      magnitude[r * n + j] = mag;
    }
  }
  // SPEC §17.6.12: within t * sum |A B| (t = 1e-5 f32, 8e-3 bf16).
  const double t = test.d_dtype == HAL_DTYPE_F32 ? 1e-5 : 8e-3;
  for (size_t i = 0; i < want.size(); ++i) {
    HC_REQUIRE(std::fabs(got[i] - want[i]) <= t * magnitude[i] + 1e-30,
               what + ": d[" + std::to_string(i / n) + ", " + std::to_string(i % n) +
                   "] = " + std::to_string(got[i]) + ", want " + std::to_string(want[i]) +
                   " (dequantize-then-matmul in float64)");
  }
  dd.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.lowp.scaled_matmul",
                "block-scaled int8 and fp8 matmul against dequantize-then-matmul in float64", {}) {
  const ScaledMatmulCase cases[] = {
      {HAL_DTYPE_I8, HAL_DTYPE_I8, HAL_DTYPE_F32, 11, 9, 40, {1, 0}, {1, 0}, {}},
      {HAL_DTYPE_I8, HAL_DTYPE_I8, HAL_DTYPE_BF16, 4, 5, 64, {1, 32}, {0, 0}, {}},
      {HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F32, 6, 128, 256, {1, 128}, {128, 128}, {}},
      {HAL_DTYPE_F8_E5M2, HAL_DTYPE_F8_E4M3, HAL_DTYPE_BF16, 5, 7, 128, {1, 0}, {1, 64}, {}},
  };
  for (const ScaledMatmulCase& test : cases) check_scaled_matmul(ctx, test);
}

HALCONFORM_TEST("operators.lowp.grouped_scaled_matmul",
                "the MoE form: contiguous expert segments, an empty one, a row in none", {}) {
  const ScaledMatmulCase cases[] = {
      {HAL_DTYPE_F8_E4M3,
       HAL_DTYPE_F8_E4M3,
       HAL_DTYPE_F32,
       13,
       128,
       128,
       {1, 128},
       {128, 128},
       {0, 4, 4, 12}},
      {HAL_DTYPE_I8, HAL_DTYPE_I8, HAL_DTYPE_F32, 13, 6, 24, {1, 0}, {1, 0}, {0, 4, 4, 12}},
  };
  for (const ScaledMatmulCase& test : cases) check_scaled_matmul(ctx, test);
}

HALCONFORM_TEST("operators.lowp.fake_quantize",
                "fake quantization forward on the grid; the straight-through gradient only "
                "inside the clipping range; LSQ's scale gradient",
                {}) {
  const int64_t rows = 4, cols = 40;
  for (hal_dtype_t q : {HAL_DTYPE_I8, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2}) {
    for (Blocks blocks : {Blocks{0, 0}, Blocks{1, 0}}) {
      const int64_t scales = blocks.rows != 0 ? rows : 1;
      auto desc = header_of<hal_op_fake_quantize_desc_t>(HAL_OP_FAKE_QUANTIZE);
      desc.qdtype = q;
      desc.blocks = {blocks.rows, blocks.cols};
      desc.x = dense(HAL_DTYPE_F32, {rows, cols});
      desc.scale = dense(HAL_DTYPE_F32, {scales, 1});
      desc.y = desc.x;
      const std::string what = std::string("fake_quantize ") + dtype_label(q) +
                               (blocks.rows != 0 ? " per channel" : " per tensor");
      Plan forward;
      plan_or_skip(ctx, &desc.header, forward);
      // x spans past the clipping range: |x| up to 1.6 qmax s.
      std::vector<double> scale(static_cast<size_t>(scales));
      for (int64_t s = 0; s < scales; ++s) scale[s] = std::ldexp(1.0, -3 - static_cast<int>(s));
      auto x = random_values(ctx.random(), rows * cols, HAL_DTYPE_F32, -1.6, 1.6);
      for (int64_t i = 0; i < rows * cols; ++i)
        x[i] = static_cast<float>(x[i] * quant_max(q) * scale[blocks.rows ? i / cols : 0]);
      const auto grad_y = random_values(ctx.random(), rows * cols, HAL_DTYPE_F32);
      DeviceTensor dx(ctx.device(), desc.x, x), ds(ctx.device(), desc.scale, scale),
          dy(ctx.device(), desc.x);
      execute(ctx, forward, {dx.data(), ds.data(), dy.data()});
      std::vector<double> y(x.size()), gx(x.size()), gs(scale.size(), 0.0),
          gs_mag(scale.size(), 0.0);
      for (int64_t i = 0; i < rows * cols; ++i) {
        const size_t si = blocks.rows != 0 ? static_cast<size_t>(i / cols) : 0;
        const double v = static_cast<float>(x[i]) / static_cast<float>(scale[si]);
        const double lo = quant_min(q), hi = quant_max(q);
        const double grid = grid_value(v, q);
        y[i] = grid * scale[si];
        const bool inside = v >= lo && v <= hi;
        gx[i] = inside ? grad_y[i] : 0.0;
        const double d = v < lo ? lo : v > hi ? hi : grid - v;
        gs[si] += grad_y[i] * d;
        gs_mag[si] += std::fabs(grad_y[i] * d);
      }
      expect_close(dy.download(), y, {0, 1e-7}, what);
      for (bool learned : {false, true}) {
        auto back = desc;
        back.header.kind = HAL_OP_FAKE_QUANTIZE_BACKWARD;
        back.flags = learned ? HAL_FAKE_QUANTIZE_GRAD_SCALE : 0;
        back.grad_scale_factor = learned ? 0.5f : 0.0f;
        back.grad_y = back.grad_x = desc.x;
        back.grad_scale = desc.scale;
        Plan backward;
        plan_or_skip(ctx, &back.header, backward);
        DeviceTensor dgy(ctx.device(), desc.x, grad_y), dgx(ctx.device(), desc.x),
            dgs(ctx.device(), desc.scale);
        execute(ctx, backward,
                {dx.data(), ds.data(), dgy.data(), dgx.data(), learned ? dgs.data() : nullptr});
        expect_close(dgx.download(), gx, {0, 0},
                     what + " backward grad_x (straight-through inside [lo, hi] only)");
        if (learned) {
          const auto got = dgs.download();
          for (size_t s = 0; s < gs.size(); ++s) {
            HC_REQUIRE(std::fabs(got[s] - 0.5 * gs[s]) <= 1e-5 * gs_mag[s] + 1e-12,
                       what + " backward grad_scale[" + std::to_string(s) + "] = " +
                           std::to_string(got[s]) + ", want " + std::to_string(0.5 * gs[s]));
          }
        }
      }
    }
  }
}

HALCONFORM_TEST("operators.lowp.fake_quantize_pytorch",
                "fake quantization with PyTorch's conventions: v = x * (1/s); the "
                "straight-through gradient and LSQ's cases on the rounded value, the half "
                "quantum beyond each end of int8's range included",
                {}) {
  const int64_t rows = 3, cols = 48;
  auto desc = header_of<hal_op_fake_quantize_desc_t>(HAL_OP_FAKE_QUANTIZE);
  desc.qdtype = HAL_DTYPE_I8;
  desc.flags = HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE;
  desc.blocks = {1, 0};
  desc.x = desc.y = dense(HAL_DTYPE_F32, {rows, cols});
  desc.scale = dense(HAL_DTYPE_F32, {rows, 1});
  Plan forward;
  plan_or_skip(ctx, &desc.header, forward);
  const std::vector<double> scale = {0.037, 0.0231, 0.11};
  auto x = random_values(ctx.random(), rows * cols, HAL_DTYPE_F32, -180.0, 180.0);
  // Rounded-value positions beyond each end (inside for this mask, outside for LSQ's), the
  // ties at their edges (-128.5 rounds to -128, 127.5 to 128) and the ends.
  const double bands[] = {127.3, 127.5, 127.49, -128.5, -128.7, -128.2, 127.0, -128.0};
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float s = static_cast<float>(scale[static_cast<size_t>(i / cols)]);
    const int64_t c = i % cols;
    const double u = c < 8 ? bands[c] : x[i];
    x[i] = static_cast<float>(u * s);
  }
  const auto grad_y = random_values(ctx.random(), rows * cols, HAL_DTYPE_F32);
  DeviceTensor dx(ctx.device(), desc.x, x), ds(ctx.device(), desc.scale, scale),
      dy(ctx.device(), desc.x);
  execute(ctx, forward, {dx.data(), ds.data(), dy.data()});
  std::vector<double> y(x.size()), gx(x.size()), gs(scale.size(), 0.0), gs_mag(scale.size(), 0.0);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const size_t si = static_cast<size_t>(i / cols);
    const float s = static_cast<float>(scale[si]);
    const double v = static_cast<float>(static_cast<float>(x[i]) * (1.0f / s));
    const double rounded = std::nearbyint(v);
    const double grid = std::min(127.0, std::max(-128.0, rounded));
    y[i] = static_cast<float>(grid * s);
    const bool inside = rounded >= -128.0 && rounded <= 127.0;
    gx[i] = inside ? grad_y[i] : 0.0;
    const double d = rounded < -128.0 ? -128.0 : rounded > 127.0 ? 127.0 : grid - v;
    gs[si] += grad_y[i] * d;
    gs_mag[si] += std::fabs(grad_y[i] * d);
  }
  expect_close(dy.download(), y, {0, 0}, "fake_quantize i8 reciprocal scale");
  auto back = desc;
  back.header.kind = HAL_OP_FAKE_QUANTIZE_BACKWARD;
  back.flags = HAL_FAKE_QUANTIZE_GRAD_SCALE | HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE |
               HAL_FAKE_QUANTIZE_CLIP_ROUNDED;
  back.grad_scale_factor = 0.25f;
  back.grad_y = back.grad_x = desc.x;
  back.grad_scale = desc.scale;
  Plan backward;
  plan_or_skip(ctx, &back.header, backward);
  DeviceTensor dgy(ctx.device(), desc.x, grad_y), dgx(ctx.device(), desc.x),
      dgs(ctx.device(), desc.scale);
  execute(ctx, backward, {dx.data(), ds.data(), dgy.data(), dgx.data(), dgs.data()});
  expect_close(dgx.download(), gx, {0, 0},
               "fake_quantize i8 backward grad_x (straight-through where the rounded value is "
               "inside [-128, 127])");
  const auto got = dgs.download();
  for (size_t s = 0; s < gs.size(); ++s) {
    HC_REQUIRE(std::fabs(got[s] - 0.25 * gs[s]) <= 1e-5 * gs_mag[s] + 1e-12,
               "fake_quantize i8 backward grad_scale[" + std::to_string(s) +
                   "] = " + std::to_string(got[s]) + ", want " + std::to_string(0.25 * gs[s]));
  }
}

HALCONFORM_TEST("operators.lowp.errors",
                "scales of the wrong shape, a block that does not divide k, mixed operand "
                "classes: refused",
                {}) {
  auto quantize = header_of<hal_op_quantize_desc_t>(HAL_OP_QUANTIZE);
  quantize.blocks = {1, 128};
  quantize.x = dense(HAL_DTYPE_F32, {4, 256});
  quantize.q = dense(HAL_DTYPE_F8_E4M3, {4, 256});
  quantize.scale = dense(HAL_DTYPE_F32, {2, 4});
  expect_refused(ctx, &quantize.header, "a scale of the wrong shape");
  quantize.scale = dense(HAL_DTYPE_F32, {4, 2});
  quantize.blocks = {1, 100};
  expect_refused(ctx, &quantize.header, "a block that does not divide the columns");
  auto matmul = header_of<hal_op_scaled_matmul_desc_t>(HAL_OP_SCALED_MATMUL);
  matmul.a_blocks = {1, 128};
  matmul.b_blocks = {128, 128};
  matmul.a = dense(HAL_DTYPE_F8_E4M3, {8, 256});
  matmul.a_scale = dense(HAL_DTYPE_F32, {8, 2});
  matmul.b = dense(HAL_DTYPE_F8_E4M3, {128, 256});
  matmul.b_scale = dense(HAL_DTYPE_F32, {2, 1});
  matmul.d = dense(HAL_DTYPE_F32, {8, 128});
  expect_refused(ctx, &matmul.header, "b_scale transposed");
  matmul.b_scale = dense(HAL_DTYPE_F32, {1, 2});
  matmul.a_blocks = {1, 96};
  expect_refused(ctx, &matmul.header, "a group size that does not divide k");
  matmul.a_blocks = {1, 128};
  matmul.a.dtype = HAL_DTYPE_I8;
  expect_refused(ctx, &matmul.header, "int8 times fp8");
  auto fake = header_of<hal_op_fake_quantize_desc_t>(HAL_OP_FAKE_QUANTIZE);
  fake.qdtype = HAL_DTYPE_U8;
  fake.x = fake.y = dense(HAL_DTYPE_F32, {4, 8});
  fake.scale = dense(HAL_DTYPE_F32, {1, 1});
  expect_refused(ctx, &fake.header, "a qdtype that is not a quantized type");
}
