// Which ABI minor introduced each op kind and dtype, and the gate the loader
// builds on it (SPEC §2: a plugin never receives an enum value newer than
// its own minor). The tables of this ABI, and the gate against made-up
// tables of a future minor (kinds from 55 and dtypes from 11 in 1.2).
#include <catch2/catch.hpp>

#include <hal/ops.h>

#include <string>

#include "hal_ops/abi_minor.hpp"

using hal::ops::MinorFrom;

namespace {

uint32_t abi(uint32_t minor) {
  return HAL_MAKE_VERSION(HAL_ABI_VERSION_MAJOR, minor, 0);
}

hal::ops::OpSignature signature_of(hal_dtype_t dtype, bool used = true) {
  hal::ops::OpSignature signature;
  const int64_t shape[1] = {4};
  hal_tensor_desc_t tensor{};
  hal_tensor_desc_contiguous(&tensor, dtype, 1, shape);
  if (used) {
    hal::ops::add_operand(signature, "x", hal::ops::Role::kInput, tensor);
  } else {
    hal::ops::add_unused(signature, "x");
    signature.operands.back().tensor.dtype = dtype;
  }
  return signature;
}

}  // namespace

TEST_CASE("abi minor: every op kind and dtype of this ABI came in 1.1, none after it",
          "[ops][abi]") {
  CHECK(HAL_ABI_VERSION_MINOR == 1);
  for (uint32_t kind = 0; kind < HAL_OP_KIND_COUNT; ++kind) {
    CAPTURE(kind);
    CHECK(hal::ops::introduced_minor(kind, hal::ops::op_kind_minors()) == 1);
  }
  for (uint32_t dtype = 0; dtype < HAL_DTYPE_COUNT; ++dtype) {
    CAPTURE(dtype);
    CHECK(hal::ops::introduced_minor(dtype, hal::ops::dtype_minors()) == 1);
  }
}

TEST_CASE("abi minor: the gate names the first value newer than the plugin", "[ops][abi]") {
  const auto f32 = signature_of(HAL_DTYPE_F32);
  SECTION("this ABI's tables") {
    CHECK(hal::ops::newer_than_plugin(abi(1), HAL_OP_SOFTMAX, f32).empty());
    CHECK(hal::ops::newer_than_plugin(abi(7), HAL_OP_SOFTMAX, f32).empty());
    CHECK(hal::ops::newer_than_plugin(abi(0), HAL_OP_SOFTMAX, f32) ==
          "the plugin declares ABI 1.0, older than 1.1, which added softmax");
  }
  SECTION("a future minor: its kinds and dtypes are kept from 1.1 plugins only") {
    const MinorFrom kinds[] = {{0, 1}, {55, 2}};
    const MinorFrom dtypes[] = {{0, 1}, {11, 2}};
    const auto future_kind = static_cast<hal_op_kind_t>(55);
    const auto future_dtype = static_cast<hal_dtype_t>(11);
    CHECK(hal::ops::introduced_minor(54, kinds) == 1);
    CHECK(hal::ops::introduced_minor(55, kinds) == 2);
    CHECK(hal::ops::introduced_minor(1000, kinds) == 2);
    CHECK_THAT(hal::ops::newer_than_plugin(abi(1), future_kind, f32, kinds, dtypes),
               Catch::StartsWith("the plugin declares ABI 1.1, older than 1.2, which added"));
    CHECK(hal::ops::newer_than_plugin(abi(2), future_kind, f32, kinds, dtypes).empty());
    const auto newer = signature_of(future_dtype);
    CHECK_THAT(hal::ops::newer_than_plugin(abi(1), HAL_OP_SOFTMAX, newer, kinds, dtypes),
               Catch::StartsWith("the plugin declares ABI 1.1, older than 1.2, which added the "
                                 "dtype") &&
                   Catch::EndsWith("(operand x)"));
    CHECK(hal::ops::newer_than_plugin(abi(2), HAL_OP_SOFTMAX, newer, kinds, dtypes).empty());
    // An unused operand carries no dtype to the plugin.
    CHECK(hal::ops::newer_than_plugin(abi(1), HAL_OP_SOFTMAX, signature_of(future_dtype, false),
                                      kinds, dtypes)
              .empty());
  }
}
