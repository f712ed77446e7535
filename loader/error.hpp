// The thread-local error detail behind hal_error_get_detail, and the helpers
// every API entry uses to fail with a precise sentence.
#pragma once

#include <hal/plugin_v1.h>

#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>

namespace hal::loader {

// The detail of the last failed HAL call on this thread.
struct ErrorDetail {
  bool has_failure = false;
  hal_result_t result = HAL_SUCCESS;
  const char* function = "";  // always a string literal: the public function's name
  std::string message;
  std::string plugin;
  int64_t native_code = 0;
};

ErrorDetail& thread_error_detail() noexcept;

// Keeps the thread's error detail across a scope whose failures the caller
// answers itself (SPEC 4.2: a call that succeeds leaves the detail exactly as
// it was): a public hal_* call the loader makes on the caller's behalf and
// whose failure it handles (a decline, a cleanup), or a drain whose loss is
// dropped. At the end of the scope the detail is put back, unless keep_new()
// says the scope's failure is the public call's own. Without memory for the
// copy the detail may change; the result stays right.
class KeepErrorDetail {
 public:
  KeepErrorDetail() noexcept {
    try {
      saved_ = thread_error_detail();
    } catch (const std::exception&) {
    }
  }
  ~KeepErrorDetail() {
    if (saved_) thread_error_detail() = std::move(*saved_);
  }
  KeepErrorDetail(const KeepErrorDetail&) = delete;
  KeepErrorDetail& operator=(const KeepErrorDetail&) = delete;
  // The failure met in the scope becomes (stays) the thread's detail.
  void keep_new() noexcept { saved_.reset(); }

 private:
  std::optional<ErrorDetail> saved_;
};

// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Records "<function>: <formatted sentence>" from the loader and returns |result|.
hal_result_t fail(hal_result_t result, const char* function, const char* fmt, ...) noexcept
    __attribute__((format(printf, 3, 4)));

// Turns a failure a plugin returned into the public call's failure. Uses the
// sentence the plugin reported through host->set_error when there is one, else
// says that the plugin gave none. A code outside hal_result_t's failures (a
// plugin bug) becomes HAL_ERROR_INTERNAL, so callers only ever see the closed set.
hal_result_t fail_from_plugin(hal_result_t result, const char* function,
                              const std::string& plugin_name) noexcept;

// host->set_error: stages the plugin's sentence and native code on this thread,
// apart from the error detail. The report becomes the detail only when
// fail_from_plugin turns the plugin's result into the public call's failure;
// a call that succeeds after a plugin reported (a lost stream's drain dropped,
// a decline answered by another path) leaves the detail as it was (SPEC 4.2).
// A later report, a loader failure (fail) and the end of a guarded public
// call drop a report nobody took.
void record_plugin_error(const std::string& plugin_name, hal_result_t result, int64_t native_code,
                         const char* message) noexcept;

// Takes the sentence a plugin reported and drops the staged report (used for
// load reports, declines, and to forget a report the call answers otherwise);
// "" when none is staged.
std::string take_plugin_message();

// Drops the report a plugin staged on this thread, if any.
void drop_plugin_report() noexcept;

// HAL_LOG is set to something other than "" or "0" (read at each call, so a
// test or a long-running process can change it between hal_init calls).
bool log_enabled() noexcept;

// With HAL_LOG on, prints "hal: <source>: <formatted text>" and a newline on
// stderr in one write. |source| is "loader" or a plugin's name.
void log_line(const char* source, const char* fmt, ...) noexcept
    __attribute__((format(printf, 2, 3)));

// The static name of a result code.
const char* result_name(hal_result_t result) noexcept;

// Runs an API body, converting exceptions so none crosses the C ABI.
// A report a plugin staged during the call and nobody took ends with it, so
// that it never becomes the reason of a later call's failure.
template <class Body>
hal_result_t guarded(const char* function, Body&& body) noexcept {
  struct DropReportAtEnd {
    DropReportAtEnd() = default;
    DropReportAtEnd(const DropReportAtEnd&) = delete;
    DropReportAtEnd& operator=(const DropReportAtEnd&) = delete;
    ~DropReportAtEnd() { drop_plugin_report(); }
  } drop_report_at_end;
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, function, "the host ran out of memory");
  } catch (const std::exception& e) {
    return fail(HAL_ERROR_INTERNAL, function, "internal loader error: %s", e.what());
  } catch (...) {
    return fail(HAL_ERROR_INTERNAL, function, "internal loader error: unknown exception");
  }
}

}  // namespace hal::loader
