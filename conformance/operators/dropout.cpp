// HAL_OP_DROPOUT against a host Philox-4x32-10 written from Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3" (SC'11), checked against
// Random123's published known-answer vectors: the mask must match bit for
// bit, the values to the dtype's rounding.
#include <array>
#include <cmath>
#include <cstdint>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

using Block = std::array<uint32_t, 4>;

// Ten rounds; the key is bumped by the Weyl constants after each round.
Block philox4x32_10(Block counter, std::array<uint32_t, 2> key) {
  constexpr uint64_t kMultiplier0 = 0xD2511F53u;
  constexpr uint64_t kMultiplier1 = 0xCD9E8D57u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = kMultiplier0 * counter[0];
    const uint64_t product1 = kMultiplier1 * counter[2];
    counter = {static_cast<uint32_t>(product1 >> 32) ^ counter[1] ^ key[0],
               static_cast<uint32_t>(product1),
               static_cast<uint32_t>(product0 >> 32) ^ counter[3] ^ key[1],
               static_cast<uint32_t>(product0)};
    key[0] += 0x9E3779B9u;
    key[1] += 0xBB67AE85u;
  }
  return counter;
}

// ops.h: key = seed (low word, high word), counter = (offset + i/4) as a
// 64-bit number in words 0 (low) and 1 (high), words 2 and 3 zero; element i
// keeps when word i%4 / 2^32 >= p.
std::vector<bool> host_mask(uint64_t seed, uint64_t offset, double p, int64_t count) {
  std::vector<bool> keep(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t block = offset + static_cast<uint64_t>(i / 4);
    const Block words =
        philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
                      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    keep[static_cast<size_t>(i)] = std::ldexp(static_cast<double>(words[i % 4]), -32) >= p;
  }
  return keep;
}

hal_op_dropout_desc_t dropout_desc(float p, bool backward, const hal_tensor_desc_t& x,
                                   const hal_tensor_desc_t& out, const hal_tensor_desc_t* mask) {
  hal_op_dropout_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_DROPOUT;
  desc.probability = p;
  desc.backward = backward ? 1 : 0;
  desc.has_mask = mask != nullptr ? 1 : 0;
  desc.x = x;
  desc.out = out;
  if (mask != nullptr) desc.mask = *mask;
  return desc;
}

std::vector<hal_op_scalar_t> scalars(uint64_t seed, uint64_t offset) {
  hal_op_scalar_t s{}, o{};
  s.u64 = seed;
  o.u64 = offset;
  return {s, o};
}

struct Result {
  std::vector<double> out;
  std::vector<double> mask;
};

// Runs one dropout and checks it against the host Philox; returns what it wrote.
Result run_dropout(TestContext& ctx, float p, bool backward, const hal_tensor_desc_t& x_layout,
                   const hal_tensor_desc_t& out_layout, uint64_t seed, uint64_t offset,
                   const std::vector<double>* given = nullptr) {
  const hal_tensor_desc_t mask_layout = dense(HAL_DTYPE_U8, shape_of(x_layout));
  hal_op_dropout_desc_t desc = dropout_desc(p, backward, x_layout, out_layout, &mask_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto x =
      given != nullptr ? *given : random_values(ctx.random(), numel(x_layout), x_layout.dtype);
  DeviceTensor dx(ctx.device(), x_layout, x), dout(ctx.device(), out_layout),
      dmask(ctx.device(), mask_layout);
  execute(ctx, plan, {dx.data(), dout.data(), dmask.data()}, scalars(seed, offset));
  const std::string what = std::string(backward ? "dropout backward " : "dropout ") +
                           std::to_string(p) + " " + label(x_layout) + " -> " + label(out_layout);
  const auto keep = host_mask(seed, offset, p, numel(x_layout));
  Result result{dout.download(), dmask.download()};
  std::vector<double> expected_mask(keep.size()), expected(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) {
    expected_mask[i] = keep[i] ? 1 : 0;
    expected[i] = keep[i] ? x[i] / (1.0 - p) : 0.0;
  }
  expect_close(result.mask, expected_mask, {0, 0}, what + " mask");
  expect_close(result.out, expected, tolerance_for(out_layout.dtype, 2), what);
  dout.check_untouched(what);
  dmask.check_untouched(what + " mask");
  return result;
}

}  // namespace

HALCONFORM_TEST("operators.dropout.philox_known_answers",
                "the host reference Philox-4x32-10 reproduces Random123's vectors", {}) {
  const Block zero = philox4x32_10({0, 0, 0, 0}, {0, 0});
  HC_REQUIRE((zero == Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}),
             std::string("philox4x32_10(0, 0) is wrong"));
  const Block ones = philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u});
  HC_REQUIRE((ones == Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}),
             std::string("philox4x32_10(~0, ~0) is wrong"));
  const Block pi = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                 {0xa4093822u, 0x299f31d0u});
  HC_REQUIRE((pi == Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}),
             std::string("philox4x32_10(pi digits) is wrong"));
}

HALCONFORM_TEST("operators.dropout.forward", "mask bit-exact vs host Philox, every dtype", {}) {
  constexpr hal_dtype_t kDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
  for (hal_dtype_t dtype : kDtypes) {
    run_dropout(ctx, 0.3f, false, dense(dtype, {7, 129}), dense(dtype, {7, 129}),
                0x0123456789abcdefull, 5);
    run_dropout(ctx, 0.5f, false, dense(dtype, {1001}), dense(HAL_DTYPE_F32, {1001}), 42, 0);
  }
  // Element indices are row-major in x whatever the views.
  run_dropout(ctx, 0.25f, false, transposed(dense(HAL_DTYPE_F32, {13, 6}), 0, 1),
              padded(HAL_DTYPE_F32, {6, 13}, 3), 7, 1000);
  // The counter's 64 bits: offset + i/4 carries into word 1.
  run_dropout(ctx, 0.4f, false, dense(HAL_DTYPE_F32, {50}), dense(HAL_DTYPE_F32, {50}),
              0xffffffff00000001ull, 0xfffffffcull);
}

HALCONFORM_TEST("operators.dropout.keep_fraction", "about 1 - p of the elements are kept", {}) {
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const int64_t n = 4000;
    const auto result =
        run_dropout(ctx, p, false, dense(HAL_DTYPE_F32, {n}), dense(HAL_DTYPE_F32, {n}), 2024, 77);
    double kept = 0;
    for (double m : result.mask) kept += m;
    const double expected = static_cast<double>(n) * (1.0 - p);
    const double sigma = std::sqrt(static_cast<double>(n) * p * (1.0 - p));
    HC_REQUIRE(
        std::fabs(kept - expected) < 5 * sigma,
        "p " + std::to_string(p) + ": kept " + std::to_string(kept) + " of " + std::to_string(n));
  }
}

HALCONFORM_TEST("operators.dropout.backward", "backward regenerates the forward's mask", {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_BF16, {9, 37});
  const auto forward = run_dropout(ctx, 0.35f, false, layout, layout, 99, 12345);
  const auto backward = run_dropout(ctx, 0.35f, true, layout, layout, 99, 12345);
  expect_identical(backward.mask, forward.mask, "backward mask = forward mask");
  for (size_t i = 0; i < forward.mask.size(); ++i) {
    HC_REQUIRE(forward.mask[i] != 0 || backward.out[i] == 0,
               "grad_x at a dropped element is not 0");
  }
}

HALCONFORM_TEST("operators.dropout.identity_and_in_place", "p = 0 is identity; out may be x", {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {333});
  const auto x = random_values(ctx.random(), 333, HAL_DTYPE_F32);
  const auto result = run_dropout(ctx, 0.0f, false, layout, layout, 1, 2, &x);
  expect_close(result.out, x, {0, 0}, "p = 0");

  hal_op_dropout_desc_t desc = dropout_desc(0.5f, false, layout, layout, nullptr);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), layout, x);
  execute(ctx, plan, {dx.data(), dx.data(), nullptr}, scalars(3, 4));
  const auto keep = host_mask(3, 4, 0.5, 333);
  std::vector<double> expected(333);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = keep[i] ? 2 * x[i] : 0;
  expect_close(dx.download(), expected, {0, 0}, "in place, no mask");
}

HALCONFORM_TEST("operators.dropout.empty_and_scalar", "rank 0 and empty tensors", {}) {
  run_dropout(ctx, 0.5f, false, dense(HAL_DTYPE_F32, {}), dense(HAL_DTYPE_F32, {}), 5, 6);
  run_dropout(ctx, 0.5f, false, dense(HAL_DTYPE_F32, {0, 3}), dense(HAL_DTYPE_F32, {0, 3}), 5, 6);
}

HALCONFORM_TEST("operators.dropout.deterministic", "same seed and offset, same bits", {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F16, {5, 77});
  const auto x = random_values(ctx.random(), numel(layout), HAL_DTYPE_F16);
  const auto a = run_dropout(ctx, 0.2f, false, layout, layout, 11, 22, &x);
  const auto b = run_dropout(ctx, 0.2f, false, layout, layout, 11, 22, &x);
  expect_identical(a.out, b.out, "dropout deterministic");
  const auto c = run_dropout(ctx, 0.2f, false, layout, layout, 12, 22, &x);
  HC_REQUIRE(c.mask != a.mask, std::string("another seed gave the same mask"));
}

HALCONFORM_TEST("operators.dropout.errors", "each descriptor and execution rule is refused", {}) {
  const auto refused = [&](const hal_op_dropout_desc_t& desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  const hal_tensor_desc_t x = dense(HAL_DTYPE_F32, {4, 5});
  const hal_tensor_desc_t mask = dense(HAL_DTYPE_U8, {4, 5});
  refused(dropout_desc(1.0f, false, x, x, nullptr), "p = 1");
  refused(dropout_desc(-0.1f, false, x, x, nullptr), "p < 0");
  refused(dropout_desc(std::nanf(""), false, x, x, nullptr), "p NaN");
  refused(dropout_desc(0.5f, false, x, dense(HAL_DTYPE_F32, {5, 4}), nullptr), "out shape");
  refused(dropout_desc(0.5f, false, dense(HAL_DTYPE_I32, {4, 5}), x, nullptr), "x dtype");
  const hal_tensor_desc_t f32_mask = dense(HAL_DTYPE_F32, {4, 5});
  refused(dropout_desc(0.5f, false, x, x, &f32_mask), "mask dtype");
  const hal_tensor_desc_t short_mask = dense(HAL_DTYPE_U8, {4, 4});
  refused(dropout_desc(0.5f, false, x, x, &short_mask), "mask shape");
  hal_op_dropout_desc_t desc = dropout_desc(0.5f, false, x, x, &mask);
  desc.has_mask = 2;
  refused(desc, "has_mask not 0 or 1");
  desc = dropout_desc(0.5f, false, x, x, nullptr);
  desc.backward = 3;
  refused(desc, "backward not 0 or 1");
  desc.backward = 0;
  desc.reserved = 1;
  refused(desc, "reserved");

  // Execution: the two scalars are required, a mask given without has_mask is refused.
  desc = dropout_desc(0.5f, false, x, x, nullptr);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), x, random_values(ctx.random(), 20, HAL_DTYPE_F32)),
      dout(ctx.device(), x), dmask(ctx.device(), mask);
  HC_EXPECT_RESULT(try_execute(ctx, plan, {dx.data(), dout.data(), nullptr}),
                   HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(try_execute(ctx, plan, {dx.data(), dout.data(), dmask.data()}, scalars(1, 2)),
                   HAL_ERROR_INVALID_ARGUMENT);
  HC_REQUIRE(plan.info().scalar_count == 2, std::string("dropout takes two scalars"));
}
