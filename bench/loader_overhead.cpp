// The loader's cost per call: the public API through libhal against calling
// the cpu plugin's function table directly, interleaved in every repetition.
//
//   direct  table->stream_query(impl_stream)   public  hal_stream_query(stream)
//   direct  table->event_query(impl_event)     public  hal_event_query(event)
//
// The public path runs twice: first with every layer off (HAL_VALIDATION=0,
// no HAL_TRACE: the cost of the layers' one branch is inside "overhead"),
// then in a second hal_init with HAL_VALIDATION=1 (the "validation on"
// column), each again interleaved with the direct calls.
//
// Both queries are answered on an idle stream / a completed event, so the
// call itself (handle checks, dispatch, the plugin's query) is all that is
// timed. The direct path loads its own copy of the plugin file, so that its
// hal_plugin_entry runs in an instance separate from the one libhal loads
// (the ABI says the entry is called once per loaded plugin).
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "bench_common.h"
#include "hal_plugin.h"

#ifndef HAL_BENCH_CPU_PLUGIN_PATH
#define HAL_BENCH_CPU_PLUGIN_PATH ""
#endif

namespace {

constexpr double kGoalNs = 10.0;

void usage() {
  std::printf(
      "usage: loader_overhead [options]\n"
      "\n"
      "Nanoseconds per call of hal_stream_query / hal_event_query through libhal against\n"
      "the same entries of the cpu plugin's table called directly (dlopen + hal_plugin_entry).\n"
      "\n"
      "  --reps N         repetitions, each times every variant once (default 9)\n"
      "  --calls N        calls per sample (default 5000000)\n"
      "  --plugins LIST   hal_init_options_t.plugins for the public path (default \"cpu\")\n"
      "  --plugin-so PATH the plugin file for the direct path (default: the one built,\n"
      "                   %s)\n"
      "  --json           print the results as JSON instead of the table\n"
      "  --help           this text\n"
      "\n"
      "Reported: ns/call, median [min-max]; overhead = public - direct within each repetition.\n"
      "Goal: overhead <= %.0f ns per call.\n",
      HAL_BENCH_CPU_PLUGIN_PATH, kGoalNs);
}

// ---- the direct path: our own host, our own instance of the plugin ---------

std::string g_last_plugin_error;

void host_set_error(void*, hal_result_t result, int64_t native_code, const char* message) {
  g_last_plugin_error = std::string(hal_result_string(result)) + " (native " +
                        std::to_string(native_code) + "): " + (message ? message : "");
}
void host_log(void*, hal_log_level_t, const char*) {}

[[noreturn]] void direct_fail(const char* what, hal_result_t r) {
  std::fprintf(stderr, "direct path: %s failed: %s; plugin said: %s\n", what, hal_result_string(r),
               g_last_plugin_error.c_str());
  std::exit(1);
}
#define DIRECT_CHECK(expr)                             \
  do {                                                 \
    const hal_result_t d_r_ = (expr);                  \
    if (d_r_ != HAL_SUCCESS) direct_fail(#expr, d_r_); \
  } while (0)

// Copies |path| to a fresh temporary file and returns its name ("" on failure).
std::string copy_to_temp(const std::string& path) {
  const char* dir = std::getenv("TMPDIR");
  std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/hal_bench_plugin_XXXXXX.so";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int out = mkstemps(name.data(), 3);
  if (out < 0) return "";
  const int in = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool ok = in >= 0;
  char buf[1 << 16];
  while (ok) {
    const ssize_t n = read(in, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0 || write(out, buf, static_cast<size_t>(n)) != n) ok = false;
  }
  if (in >= 0) ::close(in);
  ::close(out);
  if (!ok) {
    unlink(name.data());
    return "";
  }
  return name.data();
}

struct Direct {
  void* dl = nullptr;
  hal_plugin_host_t host{};
  hal_plugin_v1_t plugin{};
  const hal_plugin_table_v1_t* table = nullptr;
  hal_impl_device_t* device = nullptr;
  hal_impl_stream_t* stream = nullptr;
  hal_impl_event_t* event = nullptr;

  void open(const std::string& so) {
    const std::string copy = copy_to_temp(so);
    if (copy.empty()) {
      std::fprintf(stderr, "error: cannot copy %s to a temporary file: %s\n", so.c_str(),
                   std::strerror(errno));
      std::exit(1);
    }
    dl = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    unlink(copy.c_str());  // stays mapped
    if (!dl) {
      std::fprintf(stderr, "error: dlopen(%s, copy of %s): %s\n", copy.c_str(), so.c_str(),
                   dlerror());
      std::exit(1);
    }
    auto entry = reinterpret_cast<hal_plugin_entry_fn_t>(dlsym(dl, HAL_PLUGIN_ENTRY_NAME));
    if (!entry) {
      std::fprintf(stderr, "error: %s has no %s\n", so.c_str(), HAL_PLUGIN_ENTRY_NAME);
      std::exit(1);
    }
    host.struct_size = sizeof host;
    host.abi_version = HAL_ABI_VERSION;
    host.set_error = host_set_error;
    host.log = host_log;
    plugin.struct_size = sizeof plugin;
    DIRECT_CHECK(entry(&host, &plugin));
    table = plugin.table;
    if (!table || !table->device_count || !table->device_open || !table->stream_create ||
        !table->stream_query || !table->event_create || !table->event_query) {
      std::fprintf(stderr, "error: the plugin's table lacks an entry this benchmark needs\n");
      std::exit(1);
    }
    uint32_t count = 0;
    DIRECT_CHECK(table->device_count(plugin.context, &count));
    if (count == 0) {
      std::fprintf(stderr, "error: the plugin reports no device\n");
      std::exit(1);
    }
    DIRECT_CHECK(table->device_open(plugin.context, 0, &device));
    DIRECT_CHECK(table->stream_create(device, 0, &stream));
    DIRECT_CHECK(table->event_create(device, 0, &event));
    if (table->event_record) DIRECT_CHECK(table->event_record(event, stream));
    if (table->stream_synchronize) DIRECT_CHECK(table->stream_synchronize(stream));
  }

  void close() {
    if (table->event_destroy) DIRECT_CHECK(table->event_destroy(event));
    if (table->stream_destroy) DIRECT_CHECK(table->stream_destroy(stream));
    if (table->device_close) table->device_close(device);
    if (table->plugin_shutdown) table->plugin_shutdown(plugin.context);
    dlclose(dl);
  }
};

// ---- the timed loops ---------------------------------------------------------

struct Counter {
  long long not_success = 0;
  hal_result_t last_bad = HAL_SUCCESS;
  void add(hal_result_t r) {
    if (r != HAL_SUCCESS) {
      ++not_success;
      last_bad = r;
    }
  }
};

// ns per call of |fn(arg)|.
template <class Fn, class Arg>
double time_calls(Fn fn, Arg arg, long long n, Counter& c) {
  long long bad = 0;
  hal_result_t last = HAL_SUCCESS;
  const double t0 = bench::now_s();
  for (long long i = 0; i < n; ++i) {
    const hal_result_t r = fn(arg);
    bench::do_not_optimize(r);
    if (r != HAL_SUCCESS) {
      ++bad;
      last = r;
    }
  }
  const double dt = bench::now_s() - t0;
  if (bad) {
    c.not_success += bad;
    c.last_bad = last;
  }
  return dt * 1e9 / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  if (args.flag("--help") || args.flag("-h")) {
    usage();
    return 0;
  }
  const long long reps = args.integer("--reps", 9);
  const long long calls = args.integer("--calls", 5000000);
  const std::string plugins = args.str("--plugins", "cpu");
  const std::string so = args.str("--plugin-so", HAL_BENCH_CPU_PLUGIN_PATH);
  const bool json = args.flag("--json");
  args.finish();
  if (so.empty()) {
    std::fprintf(stderr, "error: no plugin file; pass --plugin-so PATH\n");
    return 2;
  }

  // Layers are chosen at hal_init: off for the main columns.
  setenv("HAL_VALIDATION", "0", 1);
  setenv("HAL_TRACE", "", 1);
  setenv("HAL_TRACE_SUMMARY", "0", 1);
  bench::NoiseMeter noise;

  Direct direct;
  direct.open(so);

  hal_device_properties_t props{};
  hal_device_t device = bench::hal_open_device(plugins, "cpu", 0, &props);
  hal_stream_t stream = nullptr;
  hal_event_t event = nullptr;
  BENCH_HAL_CHECK(hal_stream_create(device, 0, &stream));
  BENCH_HAL_CHECK(hal_event_create(device, 0, &event));
  BENCH_HAL_CHECK(hal_event_record(event, stream));
  BENCH_HAL_CHECK(hal_stream_synchronize(stream));

  const auto* table = direct.table;
  struct Variant {
    std::string name;
    std::function<double(long long, Counter&)> run;
    std::vector<double> samples;
    Counter counter;
  };
  std::vector<Variant> v;
  v.push_back({"direct table->stream_query",
               [&](long long n, Counter& c) {
                 return time_calls(table->stream_query, direct.stream, n, c);
               },
               {},
               {}});
  v.push_back({"public hal_stream_query",
               [&](long long n, Counter& c) { return time_calls(hal_stream_query, stream, n, c); },
               {},
               {}});
  v.push_back(
      {"direct table->event_query",
       [&](long long n, Counter& c) { return time_calls(table->event_query, direct.event, n, c); },
       {},
       {}});
  v.push_back({"public hal_event_query",
               [&](long long n, Counter& c) { return time_calls(hal_event_query, event, n, c); },
               {},
               {}});

  for (auto& x : v) x.run(std::max(1LL, calls / 10), x.counter);  // warm-up
  std::vector<double> diff_stream, diff_event;
  for (long long r = 0; r < reps; ++r) {
    double ns[4];
    for (size_t k = 0; k < v.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % v.size();
      ns[i] = v[i].run(calls, v[i].counter);
      v[i].samples.push_back(ns[i]);
    }
    diff_stream.push_back(ns[1] - ns[0]);
    diff_event.push_back(ns[3] - ns[2]);
  }
  // The second session: the same public calls with the validation layer on.
  BENCH_HAL_CHECK(hal_event_destroy(event));
  BENCH_HAL_CHECK(hal_stream_destroy(stream));
  BENCH_HAL_CHECK(hal_shutdown());
  setenv("HAL_VALIDATION", "1", 1);
  device = bench::hal_open_device(plugins, "cpu", 0, &props);
  BENCH_HAL_CHECK(hal_stream_create(device, 0, &stream));
  BENCH_HAL_CHECK(hal_event_create(device, 0, &event));
  BENCH_HAL_CHECK(hal_event_record(event, stream));
  BENCH_HAL_CHECK(hal_stream_synchronize(stream));
  Counter validated_counter;
  std::vector<double> validated_stream, validated_event, validated_diff_stream,
      validated_diff_event;
  for (long long r = 0; r < reps; ++r) {
    const double direct_stream = v[0].run(calls, v[0].counter);
    const double public_stream = time_calls(hal_stream_query, stream, calls, validated_counter);
    const double direct_event = v[2].run(calls, v[2].counter);
    const double public_event = time_calls(hal_event_query, event, calls, validated_counter);
    validated_stream.push_back(public_stream);
    validated_event.push_back(public_event);
    validated_diff_stream.push_back(public_stream - direct_stream);
    validated_diff_event.push_back(public_event - direct_event);
  }
  if (validated_counter.not_success)
    std::fprintf(stderr, "warning: validated calls returned %s %lld times\n",
                 hal_result_string(validated_counter.last_bad), validated_counter.not_success);
  const bench::Stats vs = bench::summarize(validated_stream);
  const bench::Stats ve = bench::summarize(validated_event);
  const bench::Stats vds = bench::summarize(validated_diff_stream);
  const bench::Stats vde = bench::summarize(validated_diff_event);
  const double other = noise.other_vcpus();

  for (const auto& x : v) {
    if (x.counter.not_success)
      std::fprintf(stderr, "warning: %s returned %s %lld times (expected HAL_SUCCESS)\n",
                   x.name.c_str(), hal_result_string(x.counter.last_bad), x.counter.not_success);
  }

  std::vector<bench::Stats> s;
  for (const auto& x : v) s.push_back(bench::summarize(x.samples));
  const bench::Stats ds = bench::summarize(diff_stream);
  const bench::Stats de = bench::summarize(diff_event);

  if (json) {
    bench::Json j("loader_overhead");
    j.note("device", props.name);
    j.note_number("calls_per_sample", static_cast<double>(calls));
    j.note_number("reps", static_cast<double>(reps));
    j.note_number("noise_other_vcpus", other);
    for (size_t i = 0; i < v.size(); ++i) j.result(v[i].name, "ns/call", s[i]);
    j.result("overhead stream_query (public - direct)", "ns/call", ds);
    j.result("overhead event_query (public - direct)", "ns/call", de);
    j.result("public hal_stream_query, validation on", "ns/call", vs);
    j.result("public hal_event_query, validation on", "ns/call", ve);
    j.result("overhead stream_query, validation on", "ns/call", vds);
    j.result("overhead event_query, validation on", "ns/call", vde);
    j.print();
  } else {
    bench::print_machine_line();
    std::printf("# device: %s; %lld calls per sample, %lld reps, interleaved\n", props.name, calls,
                reps);
    bench::Table t({"call", "direct ns/call", "public ns/call", "overhead ns/call", "goal",
                    "validation on ns/call", "validation overhead"});
    auto goal = [](const bench::Stats& d) {
      return "<= " + bench::fmt(kGoalNs, 0) + " ns (" + (d.median <= kGoalNs ? "met" : "missed") +
             ")";
    };
    t.row({"stream_query", bench::fmt_stats(s[0]), bench::fmt_stats(s[1]), bench::fmt_stats(ds),
           goal(ds), bench::fmt_stats(vs), bench::fmt_stats(vds)});
    t.row({"event_query", bench::fmt_stats(s[2]), bench::fmt_stats(s[3]), bench::fmt_stats(de),
           goal(de), bench::fmt_stats(ve), bench::fmt_stats(vde)});
    t.print();
    std::printf("# overhead = public - direct, per repetition; median [min-max]\n");
    std::printf(
        "# layers off in the public column; validation on: a second hal_init with "
        "HAL_VALIDATION=1\n");
    std::printf("# noise: other processes used %.2f vCPU during the run\n", other);
  }

  BENCH_HAL_CHECK(hal_event_destroy(event));
  BENCH_HAL_CHECK(hal_stream_destroy(stream));
  BENCH_HAL_CHECK(hal_shutdown());
  direct.close();
  return 0;
}
