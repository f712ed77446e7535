// stress.leaks: nothing leaks across cycles. Modules loaded and unloaded
// (from files and from memory, every kernel source), streams and events,
// operator plans and communicators created and destroyed, HAL initialised
// and shut down in a process of its own: after warm-up cycles the process's
// file descriptors, mappings, threads and resident memory (read from /proc)
// are measured, then after many more cycles they must be back within a
// stated slack (SPEC.md, Conformance: "Nothing leaks across cycles").
#include <dirent.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"
#include "options.hpp"
#include "../core/kernel_sources.hpp"

extern char** environ;

namespace halconform {
namespace {

// What the process holds, from /proc/self.
struct Usage {
  long fds = 0;
  long mappings = 0;
  long threads = 0;
  long rss_kib = 0;
};

Usage usage_now() {
  Usage u;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) u.fds += entry->d_name[0] != '.' ? 1 : 0;
    closedir(dir);
    --u.fds;  // the directory's own descriptor
  }
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) ++u.mappings;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) u.threads = std::stol(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kib = std::stol(line.substr(6));
  }
  return u;
}

// A leak grows with the cycles; a pool, a cache or an allocator's arena
// grows once and stays. So the cycles run in two halves after a warm-up, and
// what the second half adds must stay within this slack (a leak of one
// descriptor, mapping or thread a cycle, or 256 KiB a cycle, exceeds it):
constexpr long kFdSlack = 1;
constexpr long kMappingSlack = 4;
constexpr long kThreadSlack = 1;
constexpr long kRssSlackKib = 4 * 1024;

// Under AddressSanitizer freed memory waits in a quarantine (up to 256 MiB)
// instead of coming back: resident memory grows with any churn, so it says
// nothing about leaks there (LeakSanitizer reports what is never freed).
#if defined(HAL_SANITIZER_ADDRESS)
constexpr bool kResidentMemoryMeasured = false;
#else
constexpr bool kResidentMemoryMeasured = true;
#endif

// Threads that finish exiting, memory the allocator gives back: a short wait
// for the counts to come down before the measurement.
Usage settled(const Usage& baseline) {
  Usage u = usage_now();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while ((u.threads > baseline.threads || u.fds > baseline.fds) &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    u = usage_now();
  }
  return u;
}

// "" or what the second half of |cycles| added past the slack.
std::string compare(const Usage& middle, const Usage& after, int cycles, const char* what) {
  std::string out;
  auto check = [&](const char* name, long before, long now, long slack, const char* unit) {
    if (now - before <= slack) return;
    out += strf("%s%s grew from %ld to %ld%s (slack %ld)", out.empty() ? "" : "; ", name, before,
                now, unit, slack);
  };
  check("open file descriptors", middle.fds, after.fds, kFdSlack, "");
  check("mappings", middle.mappings, after.mappings, kMappingSlack, "");
  check("threads", middle.threads, after.threads, kThreadSlack, "");
  if (kResidentMemoryMeasured) {
    check("resident memory", middle.rss_kib, after.rss_kib, kRssSlackKib, " KiB");
  }
  if (out.empty()) return {};
  return strf("over the last %d of %d cycles of %s, ", cycles / 2, cycles, what) + out +
         ": something is not released (a leak grows with the cycles)";
}

std::string figures(const Usage& a, const Usage& b, const Usage& c) {
  return strf(
      "fds %ld/%ld/%ld, mappings %ld/%ld/%ld, threads %ld/%ld/%ld, rss %ld/%ld/%ld KiB "
      "(after warm-up / half / all)",
      a.fds, b.fds, c.fds, a.mappings, b.mappings, c.mappings, a.threads, b.threads, c.threads,
      a.rss_kib, b.rss_kib, c.rss_kib);
}

// Warm-up, then |cycles| in two halves, and the comparison of the halves.
void check_cycles(TestContext& ctx, const char* what, int cycles,
                  const std::function<void(int)>& one_cycle) {
  const int warm_up = 5;
  for (int i = 0; i < warm_up; ++i) one_cycle(i);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const Usage base = usage_now();
  for (int i = 0; i < cycles / 2; ++i) one_cycle(warm_up + i);
  const Usage middle = settled(base);
  for (int i = cycles / 2; i < cycles; ++i) one_cycle(warm_up + i);
  const Usage after = settled(middle);
  const std::string problem = compare(middle, after, cycles, what);
  if (!problem.empty()) fail(problem + "; " + figures(base, middle, after));
  ctx.note(strf("%d cycles of %s: ", cycles, what) + figures(base, middle, after));
}

void sleep_ms(void* milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(milliseconds)));
}

}  // namespace

HALCONFORM_TEST("stress.leaks.modules",
                "loading and unloading modules (files and memory, every kernel source) returns "
                "descriptors, mappings, threads and memory",
                {HAL_DEVICE_CAP_KERNELS}) {
  const std::vector<KernelSource> sources = kernel_sources(ctx);
  Stream stream(ctx.device());
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;
  size_t used = 0;
  for (const KernelSource& source : sources) {
    {
      SourceModule probe(ctx.device(), source);
      if (probe.load_result() != HAL_SUCCESS) continue;
    }
    ++used;
    // The other form too: a file's bytes from memory, memory written to a file.
    std::vector<char> image = source.image;
    if (image.empty()) {
      std::ifstream file(source.path, std::ios::binary);
      image.assign(std::istreambuf_iterator<char>(file), {});
    }
    check_cycles(ctx, ("module load/unload of " + source.name).c_str(), ctx.by_tier(30, 100, 400),
                 [&](int cycle) {
                   hal_module_desc_t desc{};
                   desc.struct_size = sizeof(desc);
                   desc.format = source.format;
                   if (cycle % 2 == 0 && !source.path.empty()) {
                     desc.path = source.path.c_str();
                   } else {
                     desc.data = image.data();
                     desc.size = image.size();
                   }
                   hal_module_t module = nullptr;
                   HC_OK(hal_module_load(ctx.device(), &desc, &module));
                   hal_kernel_desc_t kernel_desc{};
                   kernel_desc.struct_size = sizeof(kernel_desc);
                   kernel_desc.name = "empty";
                   static const hal_arg_type_t kNone[1] = {HAL_ARG_POINTER};
                   kernel_desc.arg_types = kNone;
                   hal_kernel_t kernel = nullptr;
                   const hal_result_t got = hal_kernel_get(module, &kernel_desc, &kernel);
                   if (got == HAL_SUCCESS) {
                     hal_launch_kernel(kernel, &config, 0, nullptr, stream);
                     hal_stream_synchronize(stream);
                   }
                   HC_OK(hal_module_unload(module));
                   HC_OK(got);
                 });
  }
  if (used == 0) ctx.skip("no conformance kernel source loads on this device");
}

HALCONFORM_TEST("stress.leaks.streams_events",
                "creating and destroying streams (with work) and events (recorded, waited on) "
                "returns descriptors, mappings, threads and memory",
                {}) {
  Buffer buffer(ctx.device(), 65536);
  check_cycles(ctx, "stream and event create/destroy", ctx.by_tier(50, 300, 2000), [&](int) {
    hal_stream_t stream = nullptr, waiter = nullptr;
    HC_OK(hal_stream_create(ctx.device(), 0, &stream));
    HC_OK(hal_stream_create(ctx.device(), 0, &waiter));
    hal_event_t event = nullptr;
    HC_OK(hal_event_create(ctx.device(), 0, &event));
    HC_OK(hal_memset_async(buffer.get(), 1, buffer.size(), stream));
    HC_OK(hal_event_record(event, stream));
    HC_OK(hal_stream_wait_event(waiter, event));
    HC_OK(hal_memset_async(buffer.get(), 2, 64, waiter));
    HC_OK(hal_event_destroy(event));
    HC_OK(hal_stream_destroy(stream));
    HC_OK(hal_stream_destroy(waiter));
    if (ctx.has(HAL_DEVICE_CAP_EVENT_TIMING)) {
      hal_event_t timed = nullptr;
      HC_OK(hal_event_create(ctx.device(), HAL_EVENT_FLAG_TIMING, &timed));
      HC_OK(hal_event_destroy(timed));
    }
  });
}

HALCONFORM_TEST("stress.leaks.host_functions",
                "host functions enqueued and run return what they used", {}) {
  Stream stream(ctx.device());
  int none = 0;
  check_cycles(ctx, "host functions", ctx.by_tier(200, 2000, 20000), [&](int) {
    HC_OK(hal_stream_enqueue_host_fn(stream, sleep_ms, &none));
    if (ctx.has(HAL_DEVICE_CAP_HOST_CALLBACKS)) HC_OK(hal_stream_synchronize(stream));
  });
}

HALCONFORM_TEST("stress.leaks.plans",
                "creating, executing and destroying operator plans returns what they used", {}) {
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_UNARY;
  desc.activation = HAL_ACTIVATION_RELU;
  desc.alpha = 1.0f;
  const int64_t shape[1] = {4096};
  hal_tensor_desc_contiguous(&desc.x, HAL_DTYPE_F32, 1, shape);
  hal_tensor_desc_contiguous(&desc.out, HAL_DTYPE_F32, 1, shape);
  hal_op_plan_t probe = nullptr;
  const hal_result_t planned = hal_op_plan_create(ctx.device(), &desc.header, 0, &probe);
  if (planned == HAL_ERROR_UNSUPPORTED) {
    ctx.skip(std::string("the device has no operator implementation: ") + hal_error_last_message());
  }
  HC_OK(planned);
  HC_OK(hal_op_plan_destroy(probe));
  Stream stream(ctx.device());
  Buffer x(ctx.device(), 4096 * 4), out(ctx.device(), 4096 * 4);
  check_cycles(ctx, "operator plan create/execute/destroy", ctx.by_tier(30, 100, 500), [&](int) {
    hal_op_plan_t plan = nullptr;
    HC_OK(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan));
    void* operands[2] = {x.get(), out.get()};
    hal_op_exec_args_t args{};
    args.struct_size = sizeof(args);
    args.operand_count = 2;
    args.operands = operands;
    hal_op_plan_info_t info{};
    info.struct_size = sizeof(info);
    HC_OK(hal_op_plan_get_info(plan, &info));
    std::unique_ptr<Buffer> workspace;
    if (info.workspace_bytes > 0) {
      workspace = std::make_unique<Buffer>(ctx.device(), info.workspace_bytes);
      args.workspace = workspace->get();
      args.workspace_bytes = info.workspace_bytes;
    }
    HC_OK(hal_op_execute(plan, &args, stream));
    HC_OK(hal_stream_synchronize(stream));
    HC_OK(hal_op_plan_destroy(plan));
  });
}

HALCONFORM_TEST("stress.leaks.communicators",
                "creating, using and destroying communicators over the plugin's devices returns "
                "what they used",
                {}) {
  std::vector<hal_device_t> devices{ctx.device()};
  for (hal_device_t device : ctx.plugin_devices()) {
    if (device != ctx.device() && devices.size() < 4) devices.push_back(device);
  }
  const auto n = static_cast<uint32_t>(devices.size());
  std::vector<hal_stream_t> streams(n);
  std::vector<Buffer> buffers;
  for (uint32_t r = 0; r < n; ++r) {
    HC_OK(hal_stream_create(devices[r], 0, &streams[r]));
    buffers.emplace_back(devices[r], 4096);
  }
  struct Release {
    std::vector<hal_stream_t>& streams;
    ~Release() {
      for (hal_stream_t s : streams) hal_stream_destroy(s);
    }
  } release{streams};
  check_cycles(ctx, strf("communicators of %u ranks", n).c_str(), ctx.by_tier(20, 50, 300),
               [&](int) {
                 std::vector<hal_comm_t> comms(n);
                 hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
                 config.timeout_ms = 30000;
                 HC_OK(hal_comm_init_all(n, devices.data(), &config, comms.data()));
                 HC_OK(hal_group_start());
                 for (uint32_t r = 0; r < n; ++r) {
                   hal_allreduce(buffers[r].get(), buffers[r].get(), 1024, HAL_DTYPE_F32,
                                 HAL_REDUCE_SUM, comms[r], streams[r]);
                 }
                 HC_OK(hal_group_end());
                 for (uint32_t r = 0; r < n; ++r) HC_OK(hal_stream_synchronize(streams[r]));
                 for (hal_comm_t comm : comms) HC_OK(hal_comm_destroy(comm));
               });
}

HALCONFORM_TEST("stress.leaks.init_shutdown",
                "hal_init and the last hal_shutdown, cycled in a process of their own, return "
                "descriptors, mappings, threads and memory; nested init/shutdown is a reference",
                {}) {
  // A nested pair only counts a reference (SPEC.md §11.2): the worker's HAL stays up.
  HC_OK(hal_init(nullptr));
  HC_OK(hal_shutdown());
  hal_device_properties_t still{};
  still.struct_size = sizeof(still);
  HC_OK(hal_device_get_properties(ctx.device(), &still));
  // Whole cycles: halconform --lifecycle in a fresh process (no HAL state of the worker).
  uint32_t index = 0;
  for (uint32_t i = 0; i < ctx.plugin_devices().size(); ++i) {
    if (ctx.plugin_devices()[i] == ctx.device()) index = i;
  }
  (void)index;
  const std::string plugin = ctx.settings().plugin_path;
  HC_REQUIRE(!plugin.empty(), std::string("the worker does not know its plugin's path"));
  const int cycles = ctx.by_tier(30, 60, 300);
  char output_name[] = "/tmp/halconform-lifecycle-XXXXXX";
  const int output = mkstemp(output_name);
  HC_REQUIRE(output >= 0, std::string("mkstemp failed"));
  unlink(output_name);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, output, STDOUT_FILENO);
  const std::string executable = executable_path();
  const std::string count = std::to_string(cycles);
  std::vector<char*> argv = {const_cast<char*>(executable.c_str()),
                             const_cast<char*>("--lifecycle"), const_cast<char*>(plugin.c_str()),
                             const_cast<char*>(count.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, executable.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    close(output);
    fail(strf("posix_spawn of %s --lifecycle failed: %s", executable.c_str(), strerror(spawned)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string text(16384, '\0');
  const ssize_t n = pread(output, text.data(), text.size(), 0);
  close(output);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  HC_REQUIRE(
      WIFEXITED(status) && WEXITSTATUS(status) == 0,
      "halconform --lifecycle (hal_init / hal_shutdown cycles) did not finish cleanly: " + text);
  Usage base, middle, after;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    Usage u;
    char which[16] = {};
    if (std::sscanf(line.c_str(), "%15s %ld %ld %ld %ld", which, &u.fds, &u.mappings, &u.threads,
                    &u.rss_kib) != 5) {
      continue;
    }
    (std::strcmp(which, "baseline") == 0 ? base
     : std::strcmp(which, "middle") == 0 ? middle
                                         : after) = u;
  }
  HC_REQUIRE(base.fds > 0 && after.fds > 0,
             "halconform --lifecycle printed no measurements: " + text);
  const std::string problem = compare(middle, after, cycles, "hal_init / hal_shutdown");
  if (!problem.empty()) fail(problem + "; " + figures(base, middle, after));
  ctx.note(strf("%d cycles of hal_init / hal_shutdown: ", cycles) + figures(base, middle, after));
}

// The body of `halconform --lifecycle PLUGIN CYCLES`: warm-up cycles, a
// baseline, the cycles in two halves; "baseline", "middle" and "after" lines
// (descriptors, mappings, threads, resident KiB) on stdout.
int run_lifecycle(int argc, char** argv) {
  if (argc < 4) return 2;
  const std::string plugin = argv[2];
  const int cycles = std::atoi(argv[3]);
  auto one_cycle = [&]() -> bool {
    hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
    options.plugins = plugin.c_str();
    options.skip_default_search = 1;
    if (hal_init(&options) != HAL_SUCCESS) {
      std::printf("hal_init failed: %s\n", hal_error_last_message());
      return false;
    }
    uint32_t count = 0;
    hal_device_count(&count);
    for (uint32_t i = 0; i < count; ++i) {
      hal_device_t device = nullptr;
      hal_device_get(i, &device);
      hal_stream_t stream = nullptr;
      void* memory = nullptr;
      if (hal_stream_create(device, 0, &stream) == HAL_SUCCESS &&
          hal_mem_alloc(device, HAL_MEMORY_DEVICE, 1 << 20, 0, &memory) == HAL_SUCCESS) {
        hal_memset_async(memory, 1, 1 << 20, stream);
        hal_stream_synchronize(stream);
      }
      // Left for hal_shutdown to release, as SPEC.md §11.2 says it does.
    }
    if (hal_shutdown() != HAL_SUCCESS) {
      std::printf("hal_shutdown failed: %s\n", hal_error_last_message());
      return false;
    }
    return true;
  };
  // Warm-up long enough for the C allocator to reach its steady state: each
  // cycle frees 1 MiB per device, which raises glibc's mmap threshold, so the
  // next cycles' blocks come from the heap and stay resident. That growth is
  // bounded (measured: +4 MiB per device over the first ~25 cycles, then
  // flat at 60 cycles), a leak is not; after 3 warm-up cycles the 2-device
  // null skeleton failed the 4 MiB slack by 4 KiB in CI.
  for (int i = 0; i < 32; ++i) {
    if (!one_cycle()) return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const Usage base = usage_now();
  for (int i = 0; i < cycles / 2; ++i) {
    if (!one_cycle()) return 1;
  }
  const Usage middle = settled(base);
  for (int i = cycles / 2; i < cycles; ++i) {
    if (!one_cycle()) return 1;
  }
  const Usage after = settled(middle);
  for (const auto& [name, u] :
       {std::pair{"baseline", base}, {"middle", middle}, {"after", after}}) {
    std::printf("%s %ld %ld %ld %ld\n", name, u.fds, u.mappings, u.threads, u.rss_kib);
  }
  return 0;
}

}  // namespace halconform
