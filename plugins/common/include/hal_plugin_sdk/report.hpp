// Error reporting for plugins: every failure goes to the loader through
// host->set_error as one sentence plus the vendor's native code, and no
// exception ever crosses the C table.
#ifndef HAL_PLUGIN_SDK_REPORT_HPP_
#define HAL_PLUGIN_SDK_REPORT_HPP_

#include <cstdarg>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <system_error>

#include "hal_plugin.h"

namespace hal::plugin {

// Formats messages and hands them to the loader. Copyable and cheap: it only
// holds the host table, which is valid until plugin_shutdown returns.
class ErrorReporter {
 public:
  ErrorReporter() = default;
  explicit ErrorReporter(const hal_plugin_host_t* host) : host_(host) {}

  // Records |result| with a printf-style sentence and returns |result|, so a
  // call site reads `return report.fail(HAL_ERROR_..., 0, "...", ...);`.
  __attribute__((format(printf, 4, 5))) hal_result_t fail(hal_result_t result, int64_t native_code,
                                                          const char* format, ...) const {
    char message[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(message, sizeof(message), format, args);
    va_end(args);
    if (host_ != nullptr && host_->set_error != nullptr) {
      host_->set_error(host_->host_context, result, native_code, message);
    }
    return result;
  }

  // fail() for a message of any length, such as a compiler's diagnostics.
  hal_result_t fail_message(hal_result_t result, int64_t native_code,
                            const std::string& message) const {
    if (host_ != nullptr && host_->set_error != nullptr) {
      host_->set_error(host_->host_context, result, native_code, message.c_str());
    }
    return result;
  }

  __attribute__((format(printf, 3, 4))) void log(hal_log_level_t level, const char* format,
                                                 ...) const {
    if (host_ == nullptr || host_->log == nullptr) return;
    char message[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(message, sizeof(message), format, args);
    va_end(args);
    host_->log(host_->host_context, level, message);
  }

 private:
  const hal_plugin_host_t* host_ = nullptr;
};

// Runs |body| (returning hal_result_t) and turns any exception into a result
// with a sentence naming |function|: the table is a C ABI and must not throw.
template <class Body>
hal_result_t guarded(const ErrorReporter& report, const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return report.fail(HAL_ERROR_OUT_OF_MEMORY, 0, "%s: the host is out of memory", function);
  } catch (const std::system_error& error) {
    // Thread creation and mutexes report resource exhaustion this way.
    return report.fail(HAL_ERROR_OUT_OF_MEMORY, error.code().value(), "%s: %s", function,
                       error.what());
  } catch (const std::exception& error) {
    return report.fail(HAL_ERROR_INTERNAL, 0, "%s: unexpected exception: %s", function,
                       error.what());
  } catch (...) {
    return report.fail(HAL_ERROR_INTERNAL, 0, "%s: unexpected exception", function);
  }
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_REPORT_HPP_
