#include "error.hpp"

#include "hal_util/env.hpp"
#include "hal_util/names.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

namespace hal::loader {

namespace {

// What a plugin said through host->set_error, kept apart from the detail
// until the loader makes the plugin's result the public call's failure.
struct StagedPluginReport {
  bool pending = false;
  std::string plugin;
  int64_t native_code = 0;
  std::string message;
};

// The thread's error state: the public detail and the plugin report staged
// beside it.
struct ThreadErrorState {
  ErrorDetail detail;
  StagedPluginReport staged;
};

ThreadErrorState& thread_error_state() noexcept {
  // A thread's thread_local objects are destroyed before the static ones of a process that
  // exits, so a plugin reporting a failure from a static destructor (a stream drained at exit)
  // would write into this thread's freed strings: the double free a failed stream caused at
  // exit. After its teardown the thread gets a state that is never destroyed, built in
  // storage that needs no destructor (its strings stay reachable through it until the end).
  thread_local bool torn_down = false;
  struct Owned {
    ThreadErrorState state;
    ~Owned() { torn_down = true; }
  };
  thread_local Owned owned;
  if (!torn_down) return owned.state;
  alignas(ThreadErrorState) thread_local unsigned char late_storage[sizeof(ThreadErrorState)];
  thread_local ThreadErrorState* late = nullptr;
  if (late == nullptr) late = ::new (static_cast<void*>(late_storage)) ThreadErrorState();
  return *late;
}

StagedPluginReport& staged_report() noexcept {
  return thread_error_state().staged;
}

}  // namespace

ErrorDetail& thread_error_detail() noexcept {
  return thread_error_state().detail;
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
// The call fails with it: a report a plugin staged is not taken any more.
void store(hal_result_t result, const char* function, std::string&& message,
           std::string_view plugin, int64_t native_code) noexcept {
  staged_report().pending = false;
  ErrorDetail& detail = thread_error_detail();
  detail.has_failure = true;
  detail.result = result;
  detail.function = function;
  detail.native_code = native_code;
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
  StagedPluginReport& staged = staged_report();
  const bool reported = staged.pending && staged.plugin == plugin_name;
  std::string message;
  int64_t native_code = 0;
  if (result == HAL_SUCCESS ||
      hal::util::find_name(hal::util::result_table(), static_cast<uint32_t>(result)) == nullptr) {
    // Not a failure the ABI knows: the caller gets the closed set's "a plugin bug".
    try {
      message = format("%s: plugin '%s' returned %d, which is not a hal_result_t failure", function,
                       plugin_name.c_str(), static_cast<int>(result));
      if (reported) message += " (its report: " + staged.message + ")";
    } catch (...) {
    }
    store(HAL_ERROR_INTERNAL, function, std::move(message), plugin_name, 0);
    return HAL_ERROR_INTERNAL;
  }
  try {
    if (reported) {
      message = std::string(function) + ": " + staged.message;
      native_code = staged.native_code;
    } else {
      message = format("%s: plugin '%s' returned %s without a detail", function,
                       plugin_name.c_str(), result_name(result));
    }
  } catch (...) {
    // Out of memory while describing a failure: the code still tells the story.
  }
  store(result, function, std::move(message), plugin_name, native_code);
  return result;
}

void record_plugin_error(const std::string& plugin_name, hal_result_t /*result*/,
                         int64_t native_code, const char* message) noexcept {
  // The result is the one the plugin returns, which fail_from_plugin is given.
  StagedPluginReport& staged = staged_report();
  staged.pending = true;
  staged.native_code = native_code;
  try {
    staged.plugin = plugin_name;
    staged.message = message != nullptr ? message : "";
  } catch (...) {
    // No memory for the report: the plugin's failure gets the generic sentence.
    staged.pending = false;
  }
}

std::string take_plugin_message() {
  StagedPluginReport& staged = staged_report();
  if (!staged.pending) return {};
  staged.pending = false;
  return std::move(staged.message);
}

void drop_plugin_report() noexcept {
  staged_report().pending = false;
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
