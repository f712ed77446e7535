// The tracing layer: HAL_TRACE=FILE.json writes every intercepted API call
// and the execution of every stream operation as a Chrome / Perfetto trace
// (Trace Event Format, JSON object form); HAL_TRACE_SUMMARY=1 prints a table
// of calls, counts and times on stderr at the last hal_shutdown.
//
// - API calls are complete events ("ph":"X", category "api") on the calling
//   thread's track, with the call's arguments by name and its result. For a
//   stream operation this event is its enqueue.
// - Execution: the loader enqueues a host function before and one after each
//   stream operation (through the plugin's own stream_enqueue_host_fn, so
//   ordering is the stream's). The first stamps the start, the second emits
//   a complete event (category "stream") on a track of its own per stream,
//   named "stream 0x... (device N, plugin)". Stream order makes those spans
//   disjoint, so one row per stream shows them all. A plugin without host
//   functions gets enqueue events only.
#pragma once

#include "layers/api_calls.hpp"
#include "layers/layers.hpp"
#include "objects.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace hal::loader::layers::tracing {

// Nanoseconds on the monotonic clock.
uint64_t now_ns() noexcept;

// Opens |path| (may be NULL: summary only) and resets the counters; false
// with a message on stderr when the file cannot be created.
bool open(const char* path, bool summary) noexcept;
// Closes the file and prints the summary when it was asked for.
void close() noexcept;
// Whether events are being written (a file is open).
bool writing() noexcept;

// Counts one call for the summary and, when writing, emits its event with
// |arguments| (JSON members without braces, may be empty).
void finish_call(size_t api_index, uint64_t begin_ns, hal_result_t result,
                 const std::string& arguments) noexcept;

// ---- describing arguments --------------------------------------------------------

void append_number(std::string& out, const char* name, long long value);
void append_unsigned(std::string& out, const char* name, unsigned long long value);
void append_pointer(std::string& out, const char* name, const void* value);
void append_device(std::string& out, const char* name, const hal_device_s* device);
void append_stream(std::string& out, const char* name, const hal_stream_s* stream);

// |valid|: the call succeeded, so its handle arguments may be dereferenced.
template <class T>
void append_argument(std::string& out, const char* name, T value, bool valid) {
  if constexpr (std::is_same_v<T, hal_device_t>) {
    if (valid && value != nullptr) return append_device(out, name, value);
    append_pointer(out, name, value);
  } else if constexpr (std::is_same_v<T, hal_stream_t>) {
    if (valid && value != nullptr) return append_stream(out, name, value);
    append_pointer(out, name, value);
  } else if constexpr (std::is_pointer_v<T> && std::is_function_v<std::remove_pointer_t<T>>) {
    append_pointer(out, name, reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(value)));
  } else if constexpr (std::is_pointer_v<T>) {
    append_pointer(out, name, static_cast<const void*>(value));
  } else if constexpr (std::is_enum_v<T> || std::is_signed_v<T>) {
    append_number(out, name, static_cast<long long>(value));
  } else {
    append_unsigned(out, name, static_cast<unsigned long long>(value));
  }
}

template <class Api, class... Args>
void trace_call(uint64_t begin_ns, hal_result_t result, Args... args) noexcept {
  std::string arguments;
  if (writing()) {
    try {
      [[maybe_unused]] const bool valid = result == HAL_SUCCESS || result == HAL_NOT_READY;
      size_t index = 0;
      (append_argument(arguments, Api::kArgs[index++], args, valid), ...);
    } catch (...) {
      arguments.clear();  // out of memory: the event goes without arguments
    }
  }
  finish_call(Api::kIndex, begin_ns, result, arguments);
}

// ---- stream operations -------------------------------------------------------------

struct ExecutionSpan;

// Placed in an enqueue entry right after it takes the stream's enqueue lock:
// brackets the operation with the host functions that time its execution.
// The span is named |operation|, or "|operation| [|qualifier|]" (an op and
// the implementation that serves it). Spans go to the HAL_TRACE file and
// into HAL_TRACE_SUMMARY's per-operation table. A span with |timed_line|
// (HAL_OPS_VERBOSE) opens whether tracing is on or not, and prints the line
// given to report_when_finished with the execution's time: both come from
// the stream's own order, so timing an operation never waits for the
// stream (a thread driving several ranks of a communicator enqueues one
// rank's collective before the next rank's, and a wait there would never
// end).
class StreamOpSpan {
 public:
  StreamOpSpan(hal_stream_s* stream, const char* operation, uint64_t bytes,
               const char* qualifier = nullptr, bool timed_line = false) noexcept {
    if (tracing_on() || timed_line) [[unlikely]]
      begin(stream, operation, bytes, qualifier, timed_line);
  }
  ~StreamOpSpan() {
    if (span_ != nullptr) [[unlikely]]
      end();
  }
  StreamOpSpan(const StreamOpSpan&) = delete;
  StreamOpSpan& operator=(const StreamOpSpan&) = delete;

  // For a span made with |timed_line|, once the operation was enqueued:
  // |line| goes to stderr followed by " <time> ms" when the operation has
  // run, or at once, marked untimed, on a plugin without host functions.
  void report_when_finished(std::string line) noexcept;

 private:
  void begin(hal_stream_s* stream, const char* operation, uint64_t bytes, const char* qualifier,
             bool timed_line) noexcept;
  void end() noexcept;

  hal_stream_s* stream_ = nullptr;
  // Shared with the host function before the operation, so that the span
  // outlives it whether or not the one after could be enqueued.
  std::shared_ptr<ExecutionSpan> span_;
  bool timed_line_ = false;
};

}  // namespace hal::loader::layers::tracing
