// Values outside an enum, passed by a C caller (enum_values_from_c.c) where
// the ABI takes an enum: each is refused with INVALID_ARGUMENT (or named
// HAL_RESULT_UNKNOWN), never read as an out-of-range C++ enum. The
// sanitizer trees build with -fsanitize=undefined, which includes clang's
// -fsanitize=enum: before the ABI enums had a fixed C++ underlying type
// (HAL_ENUM, hal/result.h), reading -1 as a hal_result_t was reported there.
#include "test_support.hpp"

#include <cstdint>
#include <limits>
#include <string>

extern "C" {
const char* c_result_string(int32_t raw);
hal_result_t c_mem_alloc(hal_device_t device, int32_t raw_kind, void** out);
hal_result_t c_module_load(hal_device_t device, int32_t raw_format, hal_module_t* out);
hal_result_t c_kernel_get(hal_module_t module, int32_t raw_arg_type, hal_kernel_t* out);
}

using namespace loader_test;

namespace {

// Negative (bit 31 set: outside the range of an enum whose enumerators are
// all in 0..0x7fffffff), just past the enumerators, and the largest.
constexpr int32_t kOutOfRange[] = {-1,         std::numeric_limits<int32_t>::min(),    -2, 1000,
                                   0x40000000, std::numeric_limits<int32_t>::max() - 1};

}  // namespace

TEST_CASE("hal_result_string names an out-of-range value from C HAL_RESULT_UNKNOWN",
          "[result][enum]") {
  for (const int32_t raw : kOutOfRange) {
    INFO("value " << raw);
    CHECK(std::string(c_result_string(raw)) == "HAL_RESULT_UNKNOWN");
  }
  CHECK(std::string(c_result_string(HAL_ERROR_REMOTE)) == "HAL_ERROR_REMOTE");
}

TEST_CASE("out-of-range enum values from C are refused at the ABI", "[memory][kernel][enum]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  hal_module_t module = nullptr;
  REQUIRE(c_module_load(device, HAL_MODULE_FORMAT_OPENCL_C, &module) == HAL_SUCCESS);
  for (const int32_t raw : kOutOfRange) {
    INFO("value " << raw);
    void* pointer = nullptr;
    CHECK(c_mem_alloc(device, raw, &pointer) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last_detail().message, Catch::Contains("kind"));
    CHECK(pointer == nullptr);
    hal_module_t refused = nullptr;
    CHECK(c_module_load(device, raw, &refused) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last_detail().message, Catch::Contains("is not a hal_module_format_t"));
    CHECK(refused == nullptr);
    hal_kernel_t kernel = nullptr;
    CHECK(c_kernel_get(module, raw, &kernel) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last_detail().message, Catch::Contains("desc->arg_types[2]"));
    CHECK(kernel == nullptr);
  }
  // The valid values still work through the same C calls.
  void* pointer = nullptr;
  CHECK(c_mem_alloc(device, HAL_MEMORY_DEVICE, &pointer) == HAL_SUCCESS);
  CHECK(hal_mem_free(pointer) == HAL_SUCCESS);
  hal_kernel_t kernel = nullptr;
  CHECK(c_kernel_get(module, HAL_ARG_F32, &kernel) == HAL_SUCCESS);
  CHECK(hal_module_unload(module) == HAL_SUCCESS);
}

TEST_CASE("a plugin's code outside hal_result_t reaches the caller as HAL_ERROR_INTERNAL",
          "[kernel][enum]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_OPENCL_C;
  hal_module_t module = nullptr;
  desc.data = "bogus";
  desc.size = 5;
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_INTERNAL);
  Detail detail = last_detail();
  CHECK(detail.result == HAL_ERROR_INTERNAL);
  CHECK(detail.plugin == "mock");
  CHECK(detail.message ==
        "hal_module_load: plugin 'mock' returned -7, which is not a hal_result_t failure");
  desc.data = "reported bogus";
  desc.size = 14;
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_INTERNAL);
  detail = last_detail();
  CHECK(detail.message ==
        "hal_module_load: plugin 'mock' returned 4242, which is not a "
        "hal_result_t failure (its report: mock: a code of its own)");
  CHECK(module == nullptr);
}
