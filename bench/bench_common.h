// Shared helpers of the HAL benchmarks: clock, statistics, command line,
// table and JSON output, a noise estimate and a compiler barrier.
//
// Benchmarks are programs, not timed tests: nothing here asserts on time.
// Every figure is a median over repetitions with its [min-max], and the
// variants of one benchmark run interleaved within each repetition so the
// ratios come from the same time window.
#ifndef HAL_BENCH_COMMON_H_
#define HAL_BENCH_COMMON_H_

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "hal.h"

namespace bench {

// ---- clock ------------------------------------------------------------------

inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Keeps |value| alive and forces the compiler to assume memory is read and
// written, so a loop around it is neither removed nor merged.
template <class T>
inline void do_not_optimize(const T& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}
inline void clobber_memory() {
  asm volatile("" : : : "memory");
}

// ---- statistics -------------------------------------------------------------

struct Stats {
  double median = 0;
  double min = 0;
  double max = 0;
  size_t n = 0;
};

inline Stats summarize(std::vector<double> samples) {
  Stats s;
  s.n = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t mid = samples.size() / 2;
  s.median = samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
  s.min = samples.front();
  s.max = samples.back();
  return s;
}

inline std::string fmt(double v, int precision = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

// "12.34 [11.90-13.02]"
inline std::string fmt_stats(const Stats& s, int precision = 2) {
  return fmt(s.median, precision) + " [" + fmt(s.min, precision) + "-" + fmt(s.max, precision) +
         "]";
}

// ---- command line -----------------------------------------------------------

// A minimal parser: "--name value", "--name=value" and flags "--name".
class Args {
 public:
  Args(int argc, char** argv) : argv_(argv + 1, argv + argc) {}

  bool flag(std::string_view name) {
    for (size_t i = 0; i < argv_.size(); ++i) {
      if (argv_[i] == name) {
        used_.push_back(i);
        return true;
      }
    }
    return false;
  }

  // Returns the value of "--name V" / "--name=V", or |fallback|.
  std::string str(std::string_view name, std::string fallback) {
    for (size_t i = 0; i < argv_.size(); ++i) {
      const std::string& a = argv_[i];
      if (a == name && i + 1 < argv_.size()) {
        used_.push_back(i);
        used_.push_back(i + 1);
        return argv_[i + 1];
      }
      if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
        used_.push_back(i);
        return a.substr(name.size() + 1);
      }
    }
    return fallback;
  }

  long long integer(std::string_view name, long long fallback, long long min_value = 1) {
    const std::string v = str(name, "");
    if (v.empty()) return fallback;
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 0);
    if (errno != 0 || end == v.c_str() || *end != '\0' || x < min_value) {
      std::fprintf(stderr, "error: %.*s wants an integer >= %lld, got '%s'\n",
                   static_cast<int>(name.size()), name.data(), min_value, v.c_str());
      std::exit(2);
    }
    return x;
  }

  // Call after every option was read: rejects anything left over.
  void finish() const {
    for (size_t i = 0; i < argv_.size(); ++i) {
      if (std::find(used_.begin(), used_.end(), i) == used_.end()) {
        std::fprintf(stderr, "error: unknown argument '%s' (see --help)\n", argv_[i].c_str());
        std::exit(2);
      }
    }
  }

 private:
  std::vector<std::string> argv_;
  std::vector<size_t> used_;
};

// ---- output -----------------------------------------------------------------

// A Markdown table, printed with aligned columns.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void row(std::vector<std::string> cells) {
    cells.resize(header_.size());
    rows_.push_back(std::move(cells));
  }
  void print(std::FILE* out = stdout) const {
    std::vector<size_t> w(header_.size());
    for (size_t c = 0; c < header_.size(); ++c) {
      w[c] = header_[c].size();
      for (const auto& r : rows_) w[c] = std::max(w[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
      std::fputs("|", out);
      for (size_t c = 0; c < cells.size(); ++c)
        std::fprintf(out, " %-*s |", static_cast<int>(w[c]), cells[c].c_str());
      std::fputs("\n", out);
    };
    line(header_);
    std::fputs("|", out);
    for (size_t c = 0; c < header_.size(); ++c)
      std::fprintf(out, "%s|", std::string(w[c] + 2, '-').c_str());
    std::fputs("\n", out);
    for (const auto& r : rows_) line(r);
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

inline std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Collects results as {"name", "unit", "median", "min", "max", "n"} records
// plus free-form notes, and prints them as one JSON object.
class Json {
 public:
  explicit Json(std::string benchmark) : benchmark_(std::move(benchmark)) {}
  void note(const std::string& key, const std::string& value) {
    notes_.push_back(cat({"\"", json_escape(key), "\": \"", json_escape(value), "\""}));
  }
  void note_number(const std::string& key, double value) {
    notes_.push_back(cat({"\"", json_escape(key), "\": ", json_number(value)}));
  }
  void result(const std::string& name, const std::string& unit, const Stats& s) {
    results_.push_back(
        cat({"{\"name\": \"", json_escape(name), "\", \"unit\": \"", json_escape(unit),
             "\", \"median\": ", json_number(s.median), ", \"min\": ", json_number(s.min),
             ", \"max\": ", json_number(s.max), ", \"n\": ", std::to_string(s.n), "}"}));
  }
  void print(std::FILE* out = stdout) const {
    std::fprintf(out, "{\n  \"benchmark\": \"%s\",\n", json_escape(benchmark_).c_str());
    for (const auto& n : notes_) std::fprintf(out, "  %s,\n", n.c_str());
    std::fputs("  \"results\": [\n", out);
    for (size_t i = 0; i < results_.size(); ++i)
      std::fprintf(out, "    %s%s\n", results_[i].c_str(), i + 1 < results_.size() ? "," : "");
    std::fputs("  ]\n}\n", out);
  }

 private:
  // Appends the parts (GCC 12 at -O3 warns falsely, -Wrestrict, on "literal" + std::string&&).
  static std::string cat(std::initializer_list<std::string_view> parts) {
    std::string out;
    for (std::string_view p : parts) out.append(p);
    return out;
  }
  std::string benchmark_;
  std::vector<std::string> notes_;
  std::vector<std::string> results_;
};

// ---- machine and noise ----------------------------------------------------

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

inline unsigned online_cpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : 1u;
}

// Estimates how many vCPUs other processes kept busy while the benchmark ran:
// busy time from /proc/stat minus this process's own CPU time, over the wall
// time. Near 0 means the figures were taken on a quiet machine.
class NoiseMeter {
 public:
  NoiseMeter() { start(); }
  void start() {
    wall_ = now_s();
    busy_ = system_busy_s();
    self_ = self_cpu_s();
  }
  double other_vcpus() const {
    const double wall = now_s() - wall_;
    if (wall <= 0 || busy_ < 0) return NAN;
    const double busy = system_busy_s() - busy_;
    const double self = self_cpu_s() - self_;
    return std::max(0.0, (busy - self) / wall);
  }

 private:
  static double system_busy_s() {
    std::ifstream in("/proc/stat");
    std::string cpu;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                       steal = 0;
    if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal))
      return -1;
    const long hz = sysconf(_SC_CLK_TCK);
    return static_cast<double>(user + nice + system + irq + softirq) / static_cast<double>(hz);
  }
  static double self_cpu_s() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec; };
    return tv(ru.ru_utime) + tv(ru.ru_stime);
  }
  double wall_ = 0;
  double busy_ = 0;
  double self_ = 0;
};

// ---- how much of a core each thread gets ---------------------------------------

// A VM's vCPU is a host thread: the hypervisor may run it on an SMT sibling of
// a core that another vCPU (of this VM or of another tenant) is using, for
// stretches of tens of milliseconds to seconds. Every thread on such a vCPU
// then runs compute at about half speed, and NoiseMeter sees nothing (no
// other process in the VM is busy). Measured on the project's 2-vCPU VMs
// (2026-12, AMD EPYC): a plain 2-thread FMA loop, nothing of HAL's, ran at
// half speed per thread in long stretches of 400 ~0.3 ms rounds, whether its
// threads spun or slept between rounds; whole rows of bench/sgemm, HAL's and
// the peers' alike, ran at one core's speed on 2 threads.
//
// core_efficiency(threads) runs an FMA-bound loop on |threads| threads at once
// (one: just this thread) and returns the slowest thread's rate over the best
// one-thread rate this process has seen (the loop also runs alone each call):
// ~1 when every thread has a core to itself, ~0.5 when it shares one. It
// costs a few milliseconds. Figures taken while it is well under 1 say more
// about the host than about the code measured.
namespace detail {

// |iterations| of kChains independent 16-lane multiply-adds: enough chains to
// fill two FMA pipes whatever vector width the compiler picks.
__attribute__((noinline)) inline float fma_loop(int64_t iterations) {
  using Lanes = float __attribute__((vector_size(64)));
  constexpr int kChains = 12;
  Lanes acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = Lanes{} + 0.001f * static_cast<float>(c);
  const Lanes x = Lanes{} + 0.999999f, y = Lanes{} + 1e-7f;
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * x + y;
    clobber_memory();
  }
  Lanes sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum += acc[c];
  return sum[0];
}

// Seconds |fma_loop(iterations)| takes on this thread.
inline double fma_loop_seconds(int64_t iterations) {
  const double start = now_s();
  do_not_optimize(fma_loop(iterations));
  return now_s() - start;
}

}  // namespace detail

inline double core_efficiency(unsigned threads) {
  // About 1 ms of work per thread: calibrated once, on one thread.
  static const int64_t iterations = [] {
    int64_t n = 1000;
    while (detail::fma_loop_seconds(n) < 1e-3 && n < (int64_t{1} << 30)) n *= 2;
    return n;
  }();
  static std::atomic<double> best_solo{1e30};  // seconds: the fastest solo run so far
  const double solo = detail::fma_loop_seconds(iterations);
  double best = best_solo.load();
  while (solo < best && !best_solo.compare_exchange_weak(best, solo)) {
  }
  best = std::min(best, solo);
  std::vector<double> seconds(std::max(threads, 1u), solo);
  if (threads > 1) {
    std::vector<std::thread> others;
    std::atomic<bool> go{false};  // the threads spin on it so that they start together
    for (unsigned t = 1; t < threads; ++t) {
      others.emplace_back([&, t] {
        while (!go.load(std::memory_order_acquire)) {
        }
        seconds[t] = detail::fma_loop_seconds(iterations);
      });
    }
    go.store(true, std::memory_order_release);
    seconds[0] = detail::fma_loop_seconds(iterations);
    for (std::thread& other : others) other.join();
  }
  const double slowest = *std::max_element(seconds.begin(), seconds.end());
  return slowest > 0 ? best / slowest : 0.0;
}

inline void print_machine_line(std::FILE* out = stdout) {
  std::fprintf(out, "# machine: %s, %u online vCPUs\n", cpu_model().c_str(), online_cpus());
}

// ---- HAL helpers ------------------------------------------------------------

[[noreturn]] inline void hal_fail(const char* what, hal_result_t r, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: %s failed: %s: %s\n", file, line, what, hal_result_string(r),
               hal_error_last_message());
  std::exit(1);
}

#define BENCH_HAL_CHECK(expr)                                                            \
  do {                                                                                   \
    const hal_result_t bench_r_ = (expr);                                                \
    if (bench_r_ != HAL_SUCCESS) ::bench::hal_fail(#expr, bench_r_, __FILE__, __LINE__); \
  } while (0)

// Initialises HAL with only the plugin |plugins| (a name or a path, as
// hal_init_options_t.plugins takes it) and returns the first device of the
// plugin named |plugin_name| that has all |required_caps|.
inline hal_device_t hal_open_device(const std::string& plugins, const char* plugin_name,
                                    hal_device_caps_t required_caps,
                                    hal_device_properties_t* out_props) {
  hal_init_options_t opts = HAL_INIT_OPTIONS_INIT;
  opts.plugins = plugins.c_str();
  BENCH_HAL_CHECK(hal_init(&opts));
  uint32_t count = 0;
  BENCH_HAL_CHECK(hal_device_count(&count));
  for (uint32_t i = 0; i < count; ++i) {
    hal_device_t dev = nullptr;
    BENCH_HAL_CHECK(hal_device_get(i, &dev));
    hal_device_properties_t props{};
    props.struct_size = sizeof props;
    BENCH_HAL_CHECK(hal_device_get_properties(dev, &props));
    if (std::strcmp(props.plugin, plugin_name) == 0 &&
        (props.capabilities & required_caps) == required_caps) {
      if (out_props) *out_props = props;
      return dev;
    }
  }
  std::fprintf(stderr, "error: no device of plugin '%s' with capabilities 0x%x among %u devices\n",
               plugin_name, required_caps, count);
  std::exit(1);
}

}  // namespace bench

#endif  // HAL_BENCH_COMMON_H_
