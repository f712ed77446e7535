// hal/result.h: result names and the error detail.
#include "api_common.hpp"

using namespace hal::loader;

const char* hal_result_string(hal_result_t result) {
  return result_name(result);
}

hal_result_t hal_error_get_detail(hal_error_detail_t* out_detail) {
  // These never record a failure of their own: that would replace the very
  // detail the caller is asking for.
  if (out_detail == nullptr) return HAL_ERROR_NULL_POINTER;
  if (out_detail->struct_size < sizeof(hal_error_detail_t)) return HAL_ERROR_INVALID_ARGUMENT;
  const ErrorDetail& detail = thread_error_detail();
  if (!detail.has_failure) return HAL_ERROR_NOT_FOUND;
  hal_error_detail_t copy{};
  copy.result = detail.result;
  copy.function = detail.function;
  copy.message = detail.message.c_str();
  copy.plugin = detail.plugin.c_str();
  copy.native_code = detail.native_code;
  write_sized(copy, out_detail);
  return HAL_SUCCESS;
}

const char* hal_error_last_message(void) {
  const ErrorDetail& detail = thread_error_detail();
  return detail.has_failure ? detail.message.c_str() : "";
}
