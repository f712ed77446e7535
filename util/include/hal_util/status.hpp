// The one internal error carrier: HAL_SUCCESS, or a failure's result code with its sentence. Code
// inside HAL that can fail for a reason the caller must hear returns a Status (or takes a
// Status&); the ABI edge turns it into hal_result_t plus the thread's error detail (the loader's
// fail(), a plugin's ErrorReporter). IREE carries one status type throughout the same way.
#ifndef HAL_UTIL_STATUS_HPP_
#define HAL_UTIL_STATUS_HPP_

#include <hal/result.h>

#include <string>
#include <utility>

namespace hal {

struct Status {
  hal_result_t result = HAL_SUCCESS;
  std::string message;

  bool ok() const { return result == HAL_SUCCESS; }
  static Status failure(hal_result_t code, std::string text) { return {code, std::move(text)}; }
};

}  // namespace hal

#endif  // HAL_UTIL_STATUS_HPP_
