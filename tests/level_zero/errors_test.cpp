// The level_zero plugin's own names for ze_result_t codes and their HAL
// mapping (Level Zero 1.8 has no call that names a code).
#include <catch2/catch.hpp>

#include <string>

#include "loader.hpp"

using hal::level_zero::result_of;
using hal::level_zero::ze_error_text;
using hal::level_zero::ze_result_name;

TEST_CASE("every ze_result_t of the header has its name", "[errors]") {
  CHECK(std::string(ze_result_name(ZE_RESULT_SUCCESS)) == "ZE_RESULT_SUCCESS");
  CHECK(std::string(ze_result_name(ZE_RESULT_ERROR_UNINITIALIZED)) ==
        "ZE_RESULT_ERROR_UNINITIALIZED");
  CHECK(std::string(ze_result_name(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE)) ==
        "ZE_RESULT_ERROR_MODULE_BUILD_FAILURE");
  CHECK(std::string(ze_result_name(ZE_RESULT_ERROR_UNKNOWN)) == "ZE_RESULT_ERROR_UNKNOWN");
  CHECK(std::string(ze_result_name(ZE_RESULT_EXP_ERROR_REMOTE_DEVICE)) ==
        "ZE_RESULT_EXP_ERROR_REMOTE_DEVICE");
  CHECK(ze_result_name(static_cast<ze_result_t>(0x12345)) == nullptr);
}

TEST_CASE("an error's text is the name and the code in hex", "[errors]") {
  CHECK(ze_error_text(ZE_RESULT_ERROR_UNINITIALIZED) ==
        "ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)");
  CHECK(ze_error_text(static_cast<ze_result_t>(0x12345)) == "ze_result_t (0x12345)");
}

TEST_CASE("ze_result_t codes map to the HAL results", "[errors]") {
  CHECK(result_of(ZE_RESULT_SUCCESS) == HAL_SUCCESS);
  CHECK(result_of(ZE_RESULT_NOT_READY) == HAL_NOT_READY);
  CHECK(result_of(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY) == HAL_ERROR_OUT_OF_MEMORY);
  CHECK(result_of(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY) == HAL_ERROR_OUT_OF_MEMORY);
  CHECK(result_of(ZE_RESULT_ERROR_UNSUPPORTED_SIZE) == HAL_ERROR_OUT_OF_MEMORY);
  CHECK(result_of(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE) == HAL_ERROR_INVALID_MODULE);
  CHECK(result_of(ZE_RESULT_ERROR_INVALID_NATIVE_BINARY) == HAL_ERROR_INVALID_MODULE);
  CHECK(result_of(ZE_RESULT_ERROR_INVALID_KERNEL_NAME) == HAL_ERROR_NOT_FOUND);
  CHECK(result_of(ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION) == HAL_ERROR_INVALID_LAUNCH);
  CHECK(result_of(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE) == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(result_of(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE) == HAL_ERROR_UNSUPPORTED);
  CHECK(result_of(ZE_RESULT_ERROR_DEVICE_LOST) == HAL_ERROR_DEVICE_LOST);
  CHECK(result_of(ZE_RESULT_ERROR_INVALID_ARGUMENT) == HAL_ERROR_INTERNAL);
}
