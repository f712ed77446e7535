#include "error.hpp"

#include "hal_util/env.hpp"
#include "hal_util/names.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

namespace hal::loader {

ErrorDetail& thread_error_detail() noexcept {
  // A thread's thread_local objects are destroyed before the static ones of a process that
  // exits, so a plugin reporting a failure from a static destructor (a stream drained at exit)
  // would write into this thread's freed strings: the double free a failed stream caused at
  // exit. After its teardown the thread gets a detail that is never destroyed, built in
  // storage that needs no destructor (its strings stay reachable through it until the end).
  thread_local bool torn_down = false;
  struct Owned {
    ErrorDetail detail;
    ~Owned() { torn_down = true; }
  };
  thread_local Owned owned;
  if (!torn_down) return owned.detail;
  alignas(ErrorDetail) thread_local unsigned char late_storage[sizeof(ErrorDetail)];
  thread_local ErrorDetail* late = nullptr;
  if (late == nullptr) late = ::new (static_cast<void*>(late_storage)) ErrorDetail();
  return *late;
}

namespace {

std::string vformat(const char* fmt, va_list args) {
  va_list measure;
  va_copy(measure, args);
  const int length = std::vsnprintf(nullptr, 0, fmt, measure);
  va_end(measure);
  if (length <= 0) return {};
  std::string text(static_cast<size_t>(length), '\0');
  std::vsnprintf(text.data(), text.size() + 1, fmt, args);
  return text;
}

// Stores a detail; on allocation failure keeps what fits (an empty sentence).
void store(hal_result_t result, const char* function, std::string&& message,
           std::string_view plugin, int64_t native_code) noexcept {
  ErrorDetail& detail = thread_error_detail();
  detail.has_failure = true;
  detail.result = result;
  detail.function = function;
  detail.native_code = native_code;
  detail.plugin_report_pending = false;
  try {
    detail.message = std::move(message);
    detail.plugin.assign(plugin);
  } catch (...) {
    detail.message.clear();
    detail.plugin.clear();
  }
}

}  // namespace

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string text = vformat(fmt, args);
  va_end(args);
  return text;
}

hal_result_t fail(hal_result_t result, const char* function, const char* fmt, ...) noexcept {
  std::string message;
  try {
    va_list args;
    va_start(args, fmt);
    message = std::string(function) + ": " + vformat(fmt, args);
    va_end(args);
  } catch (...) {
    // Out of memory while describing a failure: the code still tells the story.
  }
  store(result, function, std::move(message), "loader", 0);
  return result;
}

hal_result_t fail_from_plugin(hal_result_t result, const char* function,
                              const std::string& plugin_name) noexcept {
  ErrorDetail& detail = thread_error_detail();
  if (result == HAL_SUCCESS ||
      hal::util::find_name(hal::util::result_table(), static_cast<uint32_t>(result)) == nullptr) {
    // Not a failure the ABI knows: the caller gets the closed set's "a plugin bug".
    std::string message;
    try {
      message = format("%s: plugin '%s' returned %d, which is not a hal_result_t failure", function,
                       plugin_name.c_str(), static_cast<int>(result));
      if (detail.plugin_report_pending && detail.plugin == plugin_name) {
        message += " (its report: " + detail.message + ")";
      }
    } catch (...) {
    }
    detail.plugin_report_pending = false;
    store(HAL_ERROR_INTERNAL, function, std::move(message), plugin_name, 0);
    return HAL_ERROR_INTERNAL;
  }
  if (detail.plugin_report_pending && detail.plugin == plugin_name) {
    detail.plugin_report_pending = false;
    detail.has_failure = true;
    detail.result = result;
    detail.function = function;
    try {
      detail.message = std::string(function) + ": " + detail.message;
    } catch (...) {
    }
    return result;
  }
  std::string message;
  try {
    message = format("%s: plugin '%s' returned %s without a detail", function, plugin_name.c_str(),
                     result_name(result));
  } catch (...) {
  }
  store(result, function, std::move(message), plugin_name, 0);
  return result;
}

void record_plugin_error(const std::string& plugin_name, hal_result_t result, int64_t native_code,
                         const char* message) noexcept {
  store(result, "", std::string(), plugin_name, native_code);
  ErrorDetail& detail = thread_error_detail();
  try {
    detail.message = message != nullptr ? message : "";
  } catch (...) {
  }
  detail.plugin_report_pending = true;
}

std::string take_plugin_message() {
  ErrorDetail& detail = thread_error_detail();
  if (!detail.plugin_report_pending) return {};
  detail.plugin_report_pending = false;
  return detail.message;
}

bool log_enabled() noexcept {
  const char* value = hal::util::env("HAL_LOG");
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

void log_line(const char* source, const char* fmt, ...) noexcept {
  if (!log_enabled()) return;
  try {
    va_list args;
    va_start(args, fmt);
    std::string line = std::string("hal: ") + source + ": " + vformat(fmt, args) + "\n";
    va_end(args);
    std::fputs(line.c_str(), stderr);
  } catch (...) {
    // Out of memory while logging: the line is lost, nothing else.
  }
}

const char* result_name(hal_result_t result) noexcept {
  // The one table of result names is hal_util's (util/names.cpp).
  const hal::util::EnumName* entry =
      hal::util::find_name(hal::util::result_table(), static_cast<uint32_t>(result));
  return entry != nullptr ? entry->enumerator : "HAL_RESULT_UNKNOWN";
}

}  // namespace hal::loader
