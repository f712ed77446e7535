// The loader's side of issue 32 ("Security and correctness, round 2"), each
// tested as a class:
// - a copy of a handle's bytes is foreign, for every handle type, live or
//   destroyed, with the validation layer off and on (SPEC §3);
// - memory hal_mem_free released is refused by every call that takes a
//   pointer, and given back to the plugin later (SPEC §6, "Freed memory");
// - hal_device_synchronize names the lost stream (SPEC §4.4);
// - HAL_TRACE follows no planted link and waits on no FIFO (SPEC §15).
#include "test_support.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

using namespace loader_test;
namespace fs = std::filesystem;

namespace {

// Sets a variable for the scope (the layers read HAL_VALIDATION and
// HAL_TRACE at hal_init).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old, had_ = true;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), saved_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, saved_;
  bool had_ = false;
};

// A fresh private directory below the build tree's scratch, removed after.
struct SecurityScratch {
  std::string path;
  SecurityScratch() {
    fs::create_directories(HAL_TEST_SCRATCH_DIR);
    std::string pattern = std::string(HAL_TEST_SCRATCH_DIR) + "/security_XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~SecurityScratch() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  SecurityScratch(const SecurityScratch&) = delete;
  SecurityScratch& operator=(const SecurityScratch&) = delete;
};

std::string slurp(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// One live and one destroyed handle of every type, on the mock plugin's
// first device (devices are never destroyed: only live).
struct AllHandles {
  hal_device_t device = nullptr;
  hal_stream_t stream[2] = {};
  hal_event_t event[2] = {};
  hal_module_t module[2] = {};
  hal_kernel_t kernel[2] = {};
  hal_comm_t comm[2] = {};
  hal_op_plan_t plan[2] = {};
  hal_moe_routing_t routing[2] = {};

  AllHandles() {
    device = device_of("mock");
    static const char kSource[] = "kernel void scale() {}";
    hal_module_desc_t module_desc{};
    module_desc.struct_size = sizeof(module_desc);
    module_desc.format = HAL_MODULE_FORMAT_OPENCL_C;
    module_desc.data = kSource;
    module_desc.size = sizeof(kSource) - 1;
    hal_kernel_desc_t kernel_desc{};
    kernel_desc.struct_size = sizeof(kernel_desc);
    kernel_desc.name = "scale";
    hal_op_unary_desc_t scale{};
    scale.header.struct_size = sizeof(scale);
    scale.header.kind = HAL_OP_UNARY;
    scale.activation = HAL_ACTIVATION_NONE;
    scale.alpha = 2.0f;
    const int64_t shape[1] = {16};
    hal_tensor_desc_contiguous(&scale.x, HAL_DTYPE_F32, 1, shape);
    hal_tensor_desc_contiguous(&scale.out, HAL_DTYPE_F32, 1, shape);
    hal_moe_routing_desc_t routing_desc = HAL_MOE_ROUTING_DESC_INIT;
    routing_desc.num_experts = 1;
    routing_desc.top_k = 1;
    for (int i = 0; i < 2; ++i) {
      REQUIRE(hal_stream_create(device, HAL_STREAM_FLAG_NONE, &stream[i]) == HAL_SUCCESS);
      REQUIRE(hal_event_create(device, HAL_EVENT_FLAG_NONE, &event[i]) == HAL_SUCCESS);
      REQUIRE(hal_module_load(device, &module_desc, &module[i]) == HAL_SUCCESS);
      REQUIRE(hal_kernel_get(module[i], &kernel_desc, &kernel[i]) == HAL_SUCCESS);
      REQUIRE(hal_comm_init_all(1, &device, nullptr, &comm[i]) == HAL_SUCCESS);
      REQUIRE(hal_op_plan_create(device, &scale.header, 0, &plan[i]) == HAL_SUCCESS);
    }
    for (int i = 0; i < 2; ++i) {
      REQUIRE(hal_moe_routing_create(comm[0], &routing_desc, nullptr, stream[0], &routing[i]) ==
              HAL_SUCCESS);
    }
    REQUIRE(hal_moe_routing_destroy(routing[1]) == HAL_SUCCESS);
    REQUIRE(hal_op_plan_destroy(plan[1]) == HAL_SUCCESS);
    REQUIRE(hal_comm_destroy(comm[1]) == HAL_SUCCESS);
    REQUIRE(hal_module_unload(module[1]) == HAL_SUCCESS);  // and its kernel
    REQUIRE(hal_event_destroy(event[1]) == HAL_SUCCESS);
    REQUIRE(hal_stream_destroy(stream[1]) == HAL_SUCCESS);
  }
  ~AllHandles() {
    CHECK(hal_moe_routing_destroy(routing[0]) == HAL_SUCCESS);
    CHECK(hal_op_plan_destroy(plan[0]) == HAL_SUCCESS);
    CHECK(hal_comm_destroy(comm[0]) == HAL_SUCCESS);
    CHECK(hal_module_unload(module[0]) == HAL_SUCCESS);
    CHECK(hal_event_destroy(event[0]) == HAL_SUCCESS);
    CHECK(hal_stream_destroy(stream[0]) == HAL_SUCCESS);
  }
};

// The bytes of a handle, copied where no handle lives. Every slot is at
// least 64 bytes, so the copy holds the whole header and what follows it
// (the plugin's object among it): used as a handle it would reach the plugin.
struct Forgery {
  alignas(64) unsigned char bytes[64];
  explicit Forgery(const void* handle) { std::memcpy(bytes, handle, sizeof(bytes)); }
  template <class T>
  T as() {
    return reinterpret_cast<T>(bytes);
  }
};

// Forgeries of one handle of each type.
struct Forgeries {
  Forgery stream, event, module, kernel, comm, plan, routing, device;
  Forgeries(const AllHandles& h, int which)
      : stream(h.stream[which]),
        event(h.event[which]),
        module(h.module[which]),
        kernel(h.kernel[which]),
        comm(h.comm[which]),
        plan(h.plan[which]),
        routing(h.routing[which]),
        device(h.device) {}
};

struct ForgedCall {
  const char* what;
  std::function<hal_result_t()> call;
};

// Every handle type's calls on its forgery: a use and, where the type has
// one, a destroy.
std::vector<ForgedCall> forged_calls(Forgeries& f) {
  return {
      {"hal_stream_synchronize",
       [&] { return hal_stream_synchronize(f.stream.as<hal_stream_t>()); }},
      {"hal_stream_destroy", [&] { return hal_stream_destroy(f.stream.as<hal_stream_t>()); }},
      {"hal_event_query", [&] { return hal_event_query(f.event.as<hal_event_t>()); }},
      {"hal_event_destroy", [&] { return hal_event_destroy(f.event.as<hal_event_t>()); }},
      {"hal_kernel_get",
       [&] {
         hal_kernel_desc_t desc{};
         desc.struct_size = sizeof(desc);
         desc.name = "scale";
         hal_kernel_t out = nullptr;
         return hal_kernel_get(f.module.as<hal_module_t>(), &desc, &out);
       }},
      {"hal_module_unload", [&] { return hal_module_unload(f.module.as<hal_module_t>()); }},
      {"hal_kernel_get_info",
       [&] {
         hal_kernel_info_t info{};
         info.struct_size = sizeof(info);
         return hal_kernel_get_info(f.kernel.as<hal_kernel_t>(), &info);
       }},
      {"hal_comm_count",
       [&] {
         uint32_t count = 0;
         return hal_comm_count(f.comm.as<hal_comm_t>(), &count);
       }},
      {"hal_comm_destroy", [&] { return hal_comm_destroy(f.comm.as<hal_comm_t>()); }},
      {"hal_op_plan_get_info",
       [&] {
         hal_op_plan_info_t info{};
         info.struct_size = sizeof(info);
         return hal_op_plan_get_info(f.plan.as<hal_op_plan_t>(), &info);
       }},
      {"hal_op_plan_destroy", [&] { return hal_op_plan_destroy(f.plan.as<hal_op_plan_t>()); }},
      {"hal_moe_routing_destroy",
       [&] { return hal_moe_routing_destroy(f.routing.as<hal_moe_routing_t>()); }},
      {"hal_device_synchronize",
       [&] { return hal_device_synchronize(f.device.as<hal_device_t>()); }},
  };
}

}  // namespace

TEST_CASE("a copy of a handle's bytes is foreign, for every handle type, live or destroyed",
          "[handles][security]") {
  for (const char* validation : {"0", "1"}) {
    ScopedEnv layer("HAL_VALIDATION", validation);
    Session session(kPluginDir, "mock");
    REQUIRE(session.result == HAL_SUCCESS);
    AllHandles handles;
    for (int which : {0, 1}) {
      Forgeries forgeries(handles, which);
      for (const ForgedCall& forged : forged_calls(forgeries)) {
        INFO("HAL_VALIDATION=" << validation << ", " << forged.what << " on a copy of a "
                               << (which == 0 ? "live" : "destroyed") << " handle");
        CHECK(forged.call() == HAL_ERROR_INVALID_HANDLE);
        CHECK(contains(last_detail().message, "is not a HAL handle"));
      }
    }
    // The originals were not touched by the destroys of their copies.
    CHECK(hal_stream_synchronize(handles.stream[0]) == HAL_SUCCESS);
    CHECK(hal_event_query(handles.event[0]) == HAL_SUCCESS);
    uint32_t count = 0;
    CHECK(hal_comm_count(handles.comm[0], &count) == HAL_SUCCESS);
    hal_op_plan_info_t info{};
    info.struct_size = sizeof(info);
    CHECK(hal_op_plan_get_info(handles.plan[0], &info) == HAL_SUCCESS);
    CHECK(hal_stream_synchronize(handles.stream[1]) == HAL_ERROR_DESTROYED_HANDLE);
  }
}

TEST_CASE("a pointer into no HAL memory is never read as a handle", "[handles][security]") {
  ScopedEnv layer("HAL_VALIDATION", "0");
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  // Unmapped memory, a misaligned pointer into a real handle, a random integer.
  void* unmapped = reinterpret_cast<void*>(uintptr_t{0x10});
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device_of("mock"), HAL_STREAM_FLAG_NONE, &stream) == HAL_SUCCESS);
  for (void* bogus : {unmapped, static_cast<void*>(reinterpret_cast<char*>(stream) + 8),
                      reinterpret_cast<void*>(uintptr_t{0x7ffd00001230})}) {
    CAPTURE(bogus);
    CHECK(hal_stream_synchronize(static_cast<hal_stream_t>(bogus)) == HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_event_query(static_cast<hal_event_t>(bogus)) == HAL_ERROR_INVALID_HANDLE);
  }
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("memory hal_mem_free released is refused by every call that takes a pointer",
          "[memory][security]") {
  ScopedEnv layer("HAL_VALIDATION", "0");
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, HAL_STREAM_FLAG_NONE, &stream) == HAL_SUCCESS);
  void* freed = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 4096, 0, &freed) == HAL_SUCCESS);
  REQUIRE(hal_mem_free(freed) == HAL_SUCCESS);
  char* inside = static_cast<char*>(freed) + 100;
  std::vector<char> host(4096, 1);

  CHECK(hal_memcpy_async(freed, host.data(), 16, stream) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last_detail().message, "dst "));
  CHECK(contains(last_detail().message, "which hal_mem_free released"));
  CHECK(hal_memcpy_async(host.data(), inside, 16, stream) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last_detail().message, "src "));
  CHECK(hal_memset_async(inside, 0, 16, stream) == HAL_ERROR_INVALID_ARGUMENT);
  hal_memory_info_t info{};
  info.struct_size = sizeof(info);
  CHECK(hal_mem_get_info(inside, &info) == HAL_ERROR_NOT_FOUND);
  CHECK(contains(last_detail().message, "which hal_mem_free released"));
  CHECK(hal_mem_free(freed) == HAL_ERROR_NOT_FOUND);
  CHECK(contains(last_detail().message, "was freed already"));

  // A launch whose pointer argument points into it (the mock's kernel would
  // write through it).
  static const char kSource[] = "kernel void scale() {}";
  hal_module_desc_t module_desc{};
  module_desc.struct_size = sizeof(module_desc);
  module_desc.format = HAL_MODULE_FORMAT_OPENCL_C;
  module_desc.data = kSource;
  module_desc.size = sizeof(kSource) - 1;
  hal_module_t module = nullptr;
  REQUIRE(hal_module_load(device, &module_desc, &module) == HAL_SUCCESS);
  hal_kernel_desc_t kernel_desc{};
  kernel_desc.struct_size = sizeof(kernel_desc);
  kernel_desc.name = "scale";
  hal_kernel_t kernel = nullptr;
  REQUIRE(hal_kernel_get(module, &kernel_desc, &kernel) == HAL_SUCCESS);
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;
  uint32_t n = 4;
  float factor = 2;
  const hal_kernel_arg_t args[] = {{&inside, 8}, {&n, 4}, {&factor, 4}};
  CHECK(hal_launch_kernel(kernel, &config, 3, args, stream) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(contains(last_detail().message, "a pointer argument"));

  // A fresh allocation is usable; the freed one goes back to the plugin once
  // enough later frees push it out of the window, and is then (as any
  // memory HAL does not know) host memory again.
  void* live = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 4096, 0, &live) == HAL_SUCCESS);
  CHECK(hal_memcpy_async(live, host.data(), 16, stream) == HAL_SUCCESS);
  CHECK(hal_stream_synchronize(stream) == HAL_SUCCESS);
  for (int i = 0; i < 300; ++i) {
    void* churn = nullptr;
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 64, 0, &churn) == HAL_SUCCESS);
    REQUIRE(hal_mem_free(churn) == HAL_SUCCESS);
  }
  // (The process heap may have reused the address for a later block, itself
  // freed: either way it is no allocation to free.)
  CHECK(hal_mem_free(freed) == HAL_ERROR_NOT_FOUND);
  CHECK(hal_mem_free(live) == HAL_SUCCESS);
  CHECK(hal_module_unload(module) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("freed memory held back goes back to a full device before it says so",
          "[memory][security]") {
  // The cpu plugin with a 4 MiB budget: free everything, then the whole
  // budget is one allocation away although the frees are held back.
  ScopedEnv layer("HAL_VALIDATION", "0");
  ScopedEnv budget("HAL_CPU_DEVICE_MEMORY", "4194304");
  ScopedEnv devices("HAL_CPU_DEVICES", "1");
  Session session(HAL_TEST_BUILD_PLUGIN_DIR, "cpu");
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("cpu");
  const hal_device_properties_t properties = properties_of(device);
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) {
    void* block = nullptr;
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 1 << 20, 0, &block) == HAL_SUCCESS);
    blocks.push_back(block);
  }
  for (void* block : blocks) REQUIRE(hal_mem_free(block) == HAL_SUCCESS);
  void* whole = nullptr;
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, properties.max_allocation_bytes, 0, &whole) ==
        HAL_SUCCESS);
  CHECK(hal_mem_free(whole) == HAL_SUCCESS);
}

TEST_CASE("hal_device_synchronize names the lost stream", "[streams][security]") {
  // A collective on one rank of two times out on its stream (SPEC §4.4).
  ScopedEnv devices("HAL_CPU_DEVICES", "2");
  Session session(HAL_TEST_BUILD_PLUGIN_DIR, "cpu");
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t pair[2] = {device_of("cpu", 0), device_of("cpu", 1)};
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = 100;
  hal_comm_t comms[2] = {};
  REQUIRE(hal_comm_init_all(2, pair, &config, comms) == HAL_SUCCESS);
  hal_stream_t healthy = nullptr, failing = nullptr;
  REQUIRE(hal_stream_create(pair[0], HAL_STREAM_FLAG_NONE, &healthy) == HAL_SUCCESS);
  REQUIRE(hal_stream_create(pair[0], HAL_STREAM_FLAG_NONE, &failing) == HAL_SUCCESS);
  void* buffer = nullptr;
  REQUIRE(hal_mem_alloc(pair[0], HAL_MEMORY_DEVICE, 64, 0, &buffer) == HAL_SUCCESS);
  // Rank 1 never joins: rank 0's call is enqueued, then times out on its stream.
  REQUIRE(hal_allreduce(buffer, buffer, 16, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms[0], failing) ==
          HAL_SUCCESS);
  CHECK(hal_device_synchronize(pair[0]) == HAL_ERROR_DEVICE_LOST);
  char expected[64];
  std::snprintf(expected, sizeof(expected), "stream %p is lost: ", static_cast<void*>(failing));
  CHECK(contains(last_detail().message, std::string("hal_device_synchronize: ") + expected));
  CHECK(hal_stream_synchronize(healthy) == HAL_SUCCESS);
  CHECK(hal_stream_synchronize(failing) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_comm_abort(comms[0]) == HAL_SUCCESS);
  CHECK(hal_comm_abort(comms[1]) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(failing) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(healthy) == HAL_SUCCESS);
  CHECK(hal_mem_free(buffer) == HAL_SUCCESS);
}

namespace {

// hal_init with HAL_TRACE=|path| (and the trace closed again) must return
// within seconds; a FIFO with no reader would block a plain open forever,
// so a reader is opened to free it when it does not.
bool traced_init_returns(const std::string& path) {
  ScopedEnv trace("HAL_TRACE", path.c_str());
  std::atomic<bool> done{false};
  std::thread init([&] {
    { Session session(kPluginDir, "minimal"); }
    done = true;
  });
  for (int i = 0; i < 1000 && !done; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool returned = done;
  if (!returned) {
    struct stat status {};
    if (stat(path.c_str(), &status) == 0 && S_ISFIFO(status.st_mode)) {
      const int reader = open(path.c_str(), O_RDONLY | O_NONBLOCK);
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (reader >= 0) close(reader);
    }
  }
  init.join();
  return returned;
}

}  // namespace

TEST_CASE("HAL_TRACE follows no planted link, waits on no FIFO, uses no directory others own",
          "[layers][security]") {
  SecurityScratch scratch;
  const std::string victim = scratch.path + "/victim";
  write_text(victim, "precious");
  // /tmp's shape: everyone may add names, only their owners remove them.
  const std::string sticky = scratch.path + "/tmp";
  REQUIRE(mkdir(sticky.c_str(), 0700) == 0);
  REQUIRE(chmod(sticky.c_str(), 01777) == 0);
  const std::string open_dir = scratch.path + "/open";
  REQUIRE(mkdir(open_dir.c_str(), 0700) == 0);
  REQUIRE(chmod(open_dir.c_str(), 0777) == 0);

  SECTION("a symbolic link to a file to protect") {
    const std::string link = sticky + "/trace.json";
    REQUIRE(symlink(victim.c_str(), link.c_str()) == 0);
    CHECK(traced_init_returns(link));
    CHECK(slurp(victim) == "precious");
  }
  SECTION("a hard link to a file to protect") {
    const std::string link = sticky + "/trace.json";
    REQUIRE(::link(victim.c_str(), link.c_str()) == 0);
    CHECK(traced_init_returns(link));
    CHECK(slurp(victim) == "precious");
  }
  SECTION("a FIFO") {
    const std::string fifo = sticky + "/trace.json";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(traced_init_returns(fifo));
  }
  SECTION("a directory others may write to without the sticky bit") {
    const std::string trace = open_dir + "/trace.json";
    CHECK(traced_init_returns(trace));
    CHECK_FALSE(fs::exists(trace));
  }
  SECTION("another user's file") {
    if (geteuid() != 0) return;  // only root can give a file away
    const std::string theirs = sticky + "/trace.json";
    write_text(theirs, "theirs");
    REQUIRE(chown(theirs.c_str(), 65534, 65534) == 0);
    CHECK(traced_init_returns(theirs));
    CHECK(slurp(theirs) == "theirs");
  }
  SECTION("a regular file of ours, in a directory of ours or in /tmp's shape, is written") {
    for (const std::string& trace : {scratch.path + "/trace.json", sticky + "/mine.json"}) {
      write_text(trace, "old");
      CHECK(traced_init_returns(trace));
      const std::string text = slurp(trace);
      CHECK(text.rfind("{\"displayTimeUnit\"", 0) == 0);
      CHECK(text.find("old") == std::string::npos);
    }
  }
}
