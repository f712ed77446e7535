// hal_tensor_desc_contiguous (hal/ops.h) has a defined result for every
// input, compiled as C++ and as C (the sanitizer trees run this under
// UndefinedBehaviorSanitizer, which stops at a signed overflow): the
// tensor's own shape array as |shape|; strides past INT64_MAX (shapes of
// 2^63 elements and more), which saturate there and hal_op_plan_create then
// refuses as too large to address; a rank above HAL_TENSOR_MAX_RANK, of
// which only HAL_TENSOR_MAX_RANK extents are read.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hal.h"

extern "C" void contiguous_from_c(hal_tensor_desc_t* tensor, hal_dtype_t dtype, uint32_t rank,
                                  const int64_t* shape);

namespace {

using Fill = void (*)(hal_tensor_desc_t*, hal_dtype_t, uint32_t, const int64_t*);

void contiguous_from_cpp(hal_tensor_desc_t* tensor, hal_dtype_t dtype, uint32_t rank,
                         const int64_t* shape) {
  hal_tensor_desc_contiguous(tensor, dtype, rank, shape);
}

constexpr int64_t kMax = INT64_MAX;
constexpr int64_t k2to32 = int64_t{1} << 32;
constexpr int64_t k2to62 = int64_t{1} << 62;

struct Case {
  const char* what;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // expected
};

const Case kCases[] = {
    {"rank 0", {}, {}},
    {"dense", {2, 3, 4}, {12, 4, 1}},
    {"extents <= 0 step like 1", {5, 0, -3, 2}, {2, 2, 2, 1}},
    {"exactly 2^62 elements", {2, k2to62 / 2}, {k2to62 / 2, 1}},
    {"2^64 elements: the outer stride saturates", {3, k2to32, k2to32}, {kMax, k2to32, 1}},
    {"saturated strides stay saturated outwards", {7, 5, k2to62, 4}, {kMax, kMax, 4, 1}},
    {"the largest extents", {kMax, kMax, kMax}, {kMax, kMax, 1}},
};

void check_case(Fill fill, const Case& c) {
  INFO(c.what);
  hal_tensor_desc_t tensor;
  std::memset(&tensor, 0xff, sizeof tensor);  // garbage beyond the rank must be cleared
  fill(&tensor, HAL_DTYPE_F32, static_cast<uint32_t>(c.shape.size()), c.shape.data());
  REQUIRE(tensor.rank == c.shape.size());
  CHECK(tensor.dtype == HAL_DTYPE_F32);
  for (uint32_t d = 0; d < HAL_TENSOR_MAX_RANK; ++d) {
    INFO("dimension " << d);
    if (d < tensor.rank) {
      CHECK(tensor.shape[d] == c.shape[d]);
      CHECK(tensor.strides[d] == c.strides[d]);
    } else {
      CHECK(tensor.shape[d] == 0);
      CHECK(tensor.strides[d] == 0);
    }
  }
}

}  // namespace

TEST_CASE("contiguous strides are exact, or saturate at INT64_MAX past it (C++ and C)") {
  for (Fill fill : {&contiguous_from_cpp, &contiguous_from_c}) {
    for (const Case& c : kCases) check_case(fill, c);
  }
}

TEST_CASE("the descriptor's own shape array may be passed as the shape (C++ and C)") {
  for (Fill fill : {&contiguous_from_cpp, &contiguous_from_c}) {
    for (const Case& c : kCases) {
      INFO(c.what);
      hal_tensor_desc_t tensor{};
      for (size_t d = 0; d < c.shape.size(); ++d) tensor.shape[d] = c.shape[d];
      fill(&tensor, HAL_DTYPE_BF16, static_cast<uint32_t>(c.shape.size()), tensor.shape);
      CHECK(tensor.dtype == HAL_DTYPE_BF16);
      for (size_t d = 0; d < c.shape.size(); ++d) {
        CHECK(tensor.shape[d] == c.shape[d]);
        CHECK(tensor.strides[d] == c.strides[d]);
      }
    }
  }
}

TEST_CASE("a rank above the maximum reads only HAL_TENSOR_MAX_RANK extents and is kept") {
  for (Fill fill : {&contiguous_from_cpp, &contiguous_from_c}) {
    // Exactly HAL_TENSOR_MAX_RANK extents exist: AddressSanitizer stops a
    // read of a ninth.
    const std::vector<int64_t> shape(HAL_TENSOR_MAX_RANK, 2);
    hal_tensor_desc_t tensor{};
    fill(&tensor, HAL_DTYPE_F32, HAL_TENSOR_MAX_RANK + 1, shape.data());
    CHECK(tensor.rank == HAL_TENSOR_MAX_RANK + 1);
    int64_t stride = 1;
    for (uint32_t d = HAL_TENSOR_MAX_RANK; d-- > 0;) {
      CHECK(tensor.shape[d] == 2);
      CHECK(tensor.strides[d] == stride);
      stride *= 2;
    }
  }
}

TEST_CASE("hal_op_plan_create refuses what a too-large shape gives, naming the tensor") {
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  hal_device_t device = nullptr;
  REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  const std::vector<std::vector<int64_t>> too_large = {
      {3, k2to32, k2to32}, {kMax, kMax, kMax}, {k2to62, 4}, {2, 2, k2to62}};
  for (const std::vector<int64_t>& shape : too_large) {
    hal_op_unary_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_UNARY;
    desc.activation = HAL_ACTIVATION_RELU;
    desc.alpha = 1.0f;
    hal_tensor_desc_contiguous(&desc.x, HAL_DTYPE_F32, static_cast<uint32_t>(shape.size()),
                               shape.data());
    desc.out = desc.x;
    hal_op_plan_t plan = nullptr;
    CHECK(hal_op_plan_create(device, &desc.header, 0, &plan) == HAL_ERROR_INVALID_ARGUMENT);
    const std::string message = hal_error_last_message();
    INFO(message);
    CHECK(message.find("x f32[") != std::string::npos);
    CHECK(message.find("too large to address") != std::string::npos);
    CHECK(plan == nullptr);
  }
  // A rank above the maximum, as the function keeps it.
  const std::vector<int64_t> nine(HAL_TENSOR_MAX_RANK, 1);
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_UNARY;
  desc.alpha = 1.0f;
  hal_tensor_desc_contiguous(&desc.x, HAL_DTYPE_F32, HAL_TENSOR_MAX_RANK + 1, nine.data());
  desc.out = desc.x;
  hal_op_plan_t plan = nullptr;
  CHECK(hal_op_plan_create(device, &desc.header, 0, &plan) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(hal_error_last_message()).find("rank 9") != std::string::npos);
  REQUIRE(hal_shutdown() == HAL_SUCCESS);
}
