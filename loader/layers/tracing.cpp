#include "layers/tracing.hpp"

#include "error.hpp"
#include "hal_util/secure_file.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace hal::loader::layers::tracing {

// What one stream operation's pair of host functions share. Stream order
// runs the one after the operation after the one before, and each holds a
// share: when the second cannot be enqueued, the first still can run.
struct ExecutionSpan {
  uint32_t track = 0;
  uint32_t device = 0;
  std::string operation;  // owned: the op plan that named it may be gone when it ends
  uint64_t bytes = 0;
  const void* stream = nullptr;
  uint64_t begin_ns = 0;
  bool traced = false;  // to the trace file and the summary: not nested in another span
  std::string line;     // HAL_OPS_VERBOSE's, printed with the time once the operation ran
};

// The payload of either host function of a span: its share.
using SpanShare = std::shared_ptr<ExecutionSpan>;

namespace {

// Spans this thread has open (StreamOpSpan objects alive with a span).
thread_local int open_spans_on_this_thread = 0;

// Stream tracks get thread ids far above any real one, so they never merge
// with a thread's track.
constexpr uint32_t kFirstStreamTrack = 0x40000000u;

struct CallCounters {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> total_ns{0};
  std::atomic<uint64_t> max_ns{0};
};

// Executed stream operations of one name, for the summary.
struct SpanTotals {
  uint64_t count = 0;
  uint64_t total_ns = 0;
};

struct TraceState {
  std::mutex mutex;  // the file, the track table and the span totals
  std::FILE* file = nullptr;
  std::atomic<bool> file_open{false};  // read without the mutex by writing()
  bool first_event = true;
  std::atomic<bool> summary{false};  // read without the mutex by spans
  std::map<std::string, SpanTotals> span_totals;
  uint64_t origin_ns = 0;
  std::unordered_map<const void*, uint32_t> stream_tracks;
  std::array<CallCounters, kApiCount> counters;
};

TraceState& state() {
  static TraceState trace;
  return trace;
}

long process_id() {
  static const long pid = static_cast<long>(getpid());
  return pid;
}

long thread_id() {
  thread_local const long tid = static_cast<long>(syscall(SYS_gettid));
  return tid;
}

double micros_since_origin(uint64_t ns) {
  return static_cast<double>(ns - state().origin_ns) / 1000.0;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += format("\\u%04x", static_cast<unsigned>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Writes one event object; the caller holds the mutex.
void write_event_locked(TraceState& trace, const std::string& event) {
  if (trace.file == nullptr) return;
  std::fputs(trace.first_event ? "\n" : ",\n", trace.file);
  std::fputs(event.c_str(), trace.file);
  trace.first_event = false;
}

// The track of |stream|, named on first use.
uint32_t track_of_locked(TraceState& trace, const void* stream, uint32_t device,
                         const char* plugin) {
  const auto found = trace.stream_tracks.find(stream);
  if (found != trace.stream_tracks.end()) return found->second;
  const uint32_t track = kFirstStreamTrack + static_cast<uint32_t>(trace.stream_tracks.size());
  trace.stream_tracks.emplace(stream, track);
  const std::string name = format("stream %p (device %u, %s)", stream, device, plugin);
  write_event_locked(trace, format("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":%u,"
                                   "\"args\":{\"name\":%s}}",
                                   process_id(), track, json_string(name).c_str()));
  return track;
}

// A tracing host function the plugin refused is not the caller's failure.
void forget_plugin_message() noexcept {
  try {
    take_plugin_message();
  } catch (...) {
  }
}

void run_span_begin(void* data) noexcept {
  const std::unique_ptr<SpanShare> share(static_cast<SpanShare*>(data));
  (*share)->begin_ns = now_ns();
}

void run_span_end(void* data) noexcept {
  const std::unique_ptr<SpanShare> share(static_cast<SpanShare*>(data));
  const ExecutionSpan& span = **share;
  const uint64_t end_ns = now_ns();
  if (!span.line.empty()) {
    std::fprintf(stderr, "%s %.3f ms\n", span.line.c_str(),
                 static_cast<double>(end_ns - span.begin_ns) / 1e6);
  }
  if (!span.traced) return;
  try {
    TraceState& trace = state();
    if (trace.summary.load(std::memory_order_acquire)) {
      std::lock_guard lock(trace.mutex);
      SpanTotals& totals = trace.span_totals[span.operation];
      ++totals.count;
      totals.total_ns += end_ns - span.begin_ns;
    }
    if (!writing()) return;
    const std::string event = format(
        "{\"name\":%s,\"cat\":\"stream\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%ld,"
        "\"tid\":%u,\"args\":{\"device\":%u,\"stream\":\"%p\",\"bytes\":%llu}}",
        json_string(span.operation).c_str(), micros_since_origin(span.begin_ns),
        static_cast<double>(end_ns - span.begin_ns) / 1000.0, process_id(), span.track, span.device,
        span.stream, static_cast<unsigned long long>(span.bytes));
    std::lock_guard lock(trace.mutex);
    write_event_locked(trace, event);
  } catch (...) {
    // Out of memory on a worker thread: the span is lost, nothing else.
  }
}

// Enqueues |run| on |stream| with a share of |span|; false (and the
// plugin's message dropped) when the plugin refuses it or memory is out.
bool enqueue_span_function(const hal_plugin_table_v1_t& table, hal_stream_s* stream,
                           void (*run)(void*) noexcept, const SpanShare& span) noexcept {
  std::unique_ptr<SpanShare> share;
  try {
    share = std::make_unique<SpanShare>(span);
  } catch (...) {
    return false;
  }
  if (table.stream_enqueue_host_fn(stream->impl, run, share.get()) != HAL_SUCCESS) {
    forget_plugin_message();
    return false;
  }
  share.release();  // the host function owns its share
  return true;
}

void print_summary(TraceState& trace) {
  uint64_t total_calls = 0;
  for (const CallCounters& counters : trace.counters) total_calls += counters.calls.load();
  std::fprintf(stderr, "hal: trace summary: %llu calls\n",
               static_cast<unsigned long long>(total_calls));
  std::fprintf(stderr, "%-28s %10s %8s %12s %10s %10s\n", "call", "count", "errors", "total ms",
               "mean us", "max us");
  for (size_t index = 0; index < kApiCount; ++index) {
    const CallCounters& counters = trace.counters[index];
    const uint64_t calls = counters.calls.load();
    if (calls == 0) continue;
    const double total_ns = static_cast<double>(counters.total_ns.load());
    std::fprintf(stderr, "%-28s %10llu %8llu %12.3f %10.3f %10.3f\n", api_name(index),
                 static_cast<unsigned long long>(calls),
                 static_cast<unsigned long long>(counters.failures.load()), total_ns / 1e6,
                 total_ns / 1e3 / static_cast<double>(calls),
                 static_cast<double>(counters.max_ns.load()) / 1e3);
  }
  if (trace.span_totals.empty()) return;
  // Where the streams spent their time, largest first: an op's line is
  // "kind [implementation]", so a training step's profile reads off directly.
  std::vector<std::pair<std::string, SpanTotals>> spans(trace.span_totals.begin(),
                                                        trace.span_totals.end());
  std::sort(spans.begin(), spans.end(),
            [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
  uint64_t all_ns = 0;
  for (const auto& [name, totals] : spans) all_ns += totals.total_ns;
  std::fprintf(stderr, "hal: stream operations executed: %.3f ms in all\n",
               static_cast<double>(all_ns) / 1e6);
  std::fprintf(stderr, "%-44s %10s %12s %10s %7s\n", "operation", "count", "total ms", "mean us",
               "share");
  for (const auto& [name, totals] : spans) {
    const double total_ns = static_cast<double>(totals.total_ns);
    std::fprintf(stderr, "%-44s %10llu %12.3f %10.3f %6.1f%%\n", name.c_str(),
                 static_cast<unsigned long long>(totals.count), total_ns / 1e6,
                 total_ns / 1e3 / static_cast<double>(totals.count),
                 all_ns > 0 ? 100.0 * total_ns / static_cast<double>(all_ns) : 0.0);
  }
}

}  // namespace

uint64_t now_ns() noexcept {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

bool open(const char* path, bool summary) noexcept {
  TraceState& trace = state();
  std::lock_guard lock(trace.mutex);
  for (CallCounters& counters : trace.counters) {
    counters.calls = 0;
    counters.failures = 0;
    counters.total_ns = 0;
    counters.max_ns = 0;
  }
  trace.stream_tracks.clear();
  trace.span_totals.clear();
  trace.summary.store(summary, std::memory_order_release);
  trace.origin_ns = now_ns();
  trace.first_event = true;
  if (path == nullptr || path[0] == '\0') return true;
  // The one rule for a file at a path a user gave (hal_util/secure_file.hpp,
  // SPEC.md §15): no symbolic or hard link followed, no FIFO waited on, no
  // directory another user could swap the file in.
  std::string why;
  hal::util::UniqueFd fd = hal::util::open_user_output_file(path, 0600, why);
  trace.file = fd.valid() ? fdopen(fd.get(), "w") : nullptr;
  if (trace.file == nullptr) {
    if (fd.valid()) why = std::string("fdopen: ") + std::strerror(errno);
    std::fprintf(stderr,
                 "hal: tracing: cannot create HAL_TRACE file '%s': %s; tracing to no file\n", path,
                 why.c_str());
    return false;
  }
  fd.release();  // the FILE owns it now
  trace.file_open.store(true, std::memory_order_release);
  std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", trace.file);
  write_event_locked(trace, format("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%ld,"
                                   "\"args\":{\"name\":\"HAL (pid %ld)\"}}",
                                   process_id(), process_id()));
  return true;
}

void close() noexcept {
  TraceState& trace = state();
  std::lock_guard lock(trace.mutex);
  if (trace.file != nullptr) {
    std::fputs("\n]}\n", trace.file);
    std::fclose(trace.file);
    trace.file = nullptr;
    trace.file_open.store(false, std::memory_order_release);
  }
  if (trace.summary.load()) print_summary(trace);
  trace.summary.store(false, std::memory_order_release);
}

bool writing() noexcept {
  return state().file_open.load(std::memory_order_acquire);
}

void finish_call(size_t api_index, uint64_t begin_ns, hal_result_t result,
                 const std::string& arguments) noexcept {
  const uint64_t end_ns = now_ns();
  const uint64_t elapsed = end_ns - begin_ns;
  TraceState& trace = state();
  CallCounters& counters = trace.counters[api_index];
  counters.calls.fetch_add(1, std::memory_order_relaxed);
  if (result != HAL_SUCCESS && result != HAL_NOT_READY)
    counters.failures.fetch_add(1, std::memory_order_relaxed);
  counters.total_ns.fetch_add(elapsed, std::memory_order_relaxed);
  uint64_t seen = counters.max_ns.load(std::memory_order_relaxed);
  while (elapsed > seen && !counters.max_ns.compare_exchange_weak(seen, elapsed)) {
  }
  if (!writing()) return;
  try {
    const std::string event = format(
        "{\"name\":\"%s\",\"cat\":\"api\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%ld,"
        "\"tid\":%ld,\"args\":{%s%s\"result\":\"%s\"}}",
        api_name(api_index), micros_since_origin(begin_ns), static_cast<double>(elapsed) / 1000.0,
        process_id(), thread_id(), arguments.c_str(), arguments.empty() ? "" : ",",
        result_name(result));
    std::lock_guard lock(trace.mutex);
    write_event_locked(trace, event);
  } catch (...) {
    // Out of memory: this event is lost, the call's result is not affected.
  }
}

void append_number(std::string& out, const char* name, long long value) {
  out += format("%s\"%s\":%lld", out.empty() ? "" : ",", name, value);
}

void append_unsigned(std::string& out, const char* name, unsigned long long value) {
  out += format("%s\"%s\":%llu", out.empty() ? "" : ",", name, value);
}

void append_pointer(std::string& out, const char* name, const void* value) {
  out += format("%s\"%s\":\"%p\"", out.empty() ? "" : ",", name, value);
}

void append_device(std::string& out, const char* name, const hal_device_s* device) {
  out += format("%s\"%s\":%u", out.empty() ? "" : ",", name, device->properties.index);
}

void append_stream(std::string& out, const char* name, const hal_stream_s* stream) {
  append_pointer(out, name, stream);
  // A call that succeeded may have destroyed the stream (hal_stream_destroy),
  // and a destroyed handle's slab page may already read as zeroes: name the
  // device only while the handle is live, and read its pointer once.
  if (!is_live(stream, HandleKind::kStream)) return;
  if (const hal_device_s* device = stream->device; device != nullptr) {
    out += format(",\"device\":%u", device->properties.index);
  }
}

void StreamOpSpan::begin(hal_stream_s* stream, const char* operation, uint64_t bytes,
                         const char* qualifier, bool timed_line) noexcept {
  timed_line_ = timed_line;
  const hal_plugin_table_v1_t& table = table_of(stream);
  // An operation made of other stream operations (an op served by the
  // portable kernels) is one traced span: the launches inside it trace none.
  const bool traced = open_spans_on_this_thread == 0 && tracing_on() &&
                      (writing() || state().summary.load(std::memory_order_acquire));
  if ((!traced && !timed_line) || table.stream_enqueue_host_fn == nullptr) return;
  try {
    auto span = std::make_shared<ExecutionSpan>();
    span->device = stream->device->properties.index;
    span->operation = operation;
    if (qualifier != nullptr) {
      span->operation += " [";
      span->operation += qualifier;
      span->operation += ']';
    }
    span->bytes = bytes;
    span->stream = stream;
    span->traced = traced;
    if (traced) {
      TraceState& trace = state();
      std::lock_guard lock(trace.mutex);
      span->track =
          track_of_locked(trace, stream, span->device, stream->device->plugin->name.c_str());
    }
    if (!enqueue_span_function(table, stream, run_span_begin, span)) return;
    stream_ = stream;
    span_ = std::move(span);
    if (traced) ++open_spans_on_this_thread;
  } catch (...) {
    // Out of memory: no span for this operation.
  }
}

void StreamOpSpan::report_when_finished(std::string line) noexcept {
  if (!timed_line_) return;
  if (span_ != nullptr) {
    span_->line = std::move(line);
    return;
  }
  std::fprintf(stderr, "%s (untimed: no host function on the stream to time it)\n", line.c_str());
}

void StreamOpSpan::end() noexcept {
  if (span_->traced) --open_spans_on_this_thread;
  // Refused: the function before keeps its share, so nothing waits for it
  // (a wait here would be one the caller never asked for).
  enqueue_span_function(table_of(stream_), stream_, run_span_end, span_);
  span_.reset();
}

}  // namespace hal::loader::layers::tracing
