// The cpu plugin through the public API (libhal), as an application uses it.
// CTest runs this with HAL_PLUGINS=cpu and HAL_CPU_DEVICES=2.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hal.h"

namespace {

// hal_init for the test's scope; the cpu plugin contributes two devices.
class Session {
 public:
  Session() {
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    uint32_t count = 0;
    REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
    REQUIRE(count == 2);
    for (uint32_t i = 0; i < count; ++i) REQUIRE(hal_device_get(i, &devices_[i]) == HAL_SUCCESS);
  }
  ~Session() { hal_shutdown(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  hal_device_t device(int i) const { return devices_[i]; }

 private:
  std::array<hal_device_t, 2> devices_{};
};

template <class... Args>
std::array<hal_kernel_arg_t, sizeof...(Args)> kernel_args(const Args&... values) {
  return {hal_kernel_arg_t{&values, sizeof(Args)}...};
}

hal_launch_config_t config_of(std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
                              uint32_t shared = 0) {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  for (int d = 0; d < 3; ++d) {
    config.grid[d] = grid[d];
    config.block[d] = block[d];
  }
  config.shared_memory_bytes = shared;
  return config;
}

hal_module_t load_kernels(hal_device_t device) {
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
  desc.path = HAL_TEST_CPU_KERNELS_PATH;
  hal_module_t module = nullptr;
  REQUIRE(hal_module_load(device, &desc, &module) == HAL_SUCCESS);
  return module;
}

hal_kernel_t get_kernel(hal_module_t module, const char* name) {
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = name;
  hal_kernel_t kernel = nullptr;
  REQUIRE(hal_kernel_get(module, &desc, &kernel) == HAL_SUCCESS);
  return kernel;
}

hal_result_t launch_affine(hal_kernel_t affine, uint32_t* x, uint32_t n, uint32_t a, uint32_t b,
                           hal_stream_t stream) {
  const auto args = kernel_args(x, n, a, b);
  const hal_launch_config_t config = config_of({(n + 63) / 64, 1, 1}, {64, 1, 1});
  return hal_launch_kernel(affine, &config, 4, args.data(), stream);
}

std::string last_message() {
  return hal_error_last_message();
}

}  // namespace

TEST_CASE("the cpu plugin loads with two devices", "[cpu][api]") {
  Session session;
  uint32_t reports = 0;
  REQUIRE(hal_plugin_report_count(&reports) == HAL_SUCCESS);
  bool found = false;
  for (uint32_t i = 0; i < reports; ++i) {
    hal_plugin_report_t report{};
    report.struct_size = sizeof(report);
    REQUIRE(hal_plugin_report_get(i, &report) == HAL_SUCCESS);
    if (std::string(report.name) == "cpu") {
      found = true;
      CHECK(report.outcome == HAL_PLUGIN_LOADED);
      CHECK(report.device_count == 2);
    }
  }
  CHECK(found);
  hal_device_properties_t props{};
  props.struct_size = sizeof(props);
  REQUIRE(hal_device_get_properties(session.device(1), &props) == HAL_SUCCESS);
  CHECK(std::string(props.plugin) == "cpu");
  CHECK(props.plugin_device_index == 1);
  CHECK(props.type == HAL_DEVICE_TYPE_CPU);
  CHECK((props.capabilities & HAL_DEVICE_CAP_KERNELS) != 0);
  CHECK(props.total_memory_bytes > 0);
  CHECK(hal_device_synchronize(session.device(0)) == HAL_SUCCESS);
}

TEST_CASE("memory kinds, sizes, alignment, reuse and exhaustion", "[cpu][api][memory]") {
  Session session;
  hal_device_t device = session.device(0);
  for (hal_memory_kind_t kind : {HAL_MEMORY_DEVICE, HAL_MEMORY_HOST, HAL_MEMORY_SHARED}) {
    for (size_t size : {size_t{1}, size_t{777}, size_t{5} << 20}) {
      for (size_t alignment : {size_t{0}, size_t{256}, size_t{1} << 16}) {
        void* ptr = nullptr;
        REQUIRE(hal_mem_alloc(device, kind, size, alignment, &ptr) == HAL_SUCCESS);
        CHECK(reinterpret_cast<uintptr_t>(ptr) % std::max<size_t>(alignment, 64) == 0);
        std::memset(ptr, 1, size);
        REQUIRE(hal_mem_free(ptr) == HAL_SUCCESS);
      }
    }
  }
  void* first = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 4 << 20, 0, &first) == HAL_SUCCESS);
  REQUIRE(hal_mem_free(first) == HAL_SUCCESS);
  // The loader holds freed memory back for a while (SPEC.md §6, "Freed
  // memory"): not handed out again at once...
  void* second = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 4 << 20, 0, &second) == HAL_SUCCESS);
  CHECK(second != first);
  REQUIRE(hal_mem_free(second) == HAL_SUCCESS);
  // ... then given back to the plugin, whose cache serves the next request.
  for (int i = 0; i < 256; ++i) {
    void* small = nullptr;
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 64, 0, &small) == HAL_SUCCESS);
    REQUIRE(hal_mem_free(small) == HAL_SUCCESS);
  }
  void* third = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 4 << 20, 0, &third) == HAL_SUCCESS);
  CHECK((third == first || third == second));  // served from the cache
  REQUIRE(hal_mem_free(third) == HAL_SUCCESS);

  hal_device_properties_t props{};
  props.struct_size = sizeof(props);
  REQUIRE(hal_device_get_properties(device, &props) == HAL_SUCCESS);
  void* none = nullptr;
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, props.total_memory_bytes + 4096, 0, &none) ==
        HAL_ERROR_OUT_OF_MEMORY);
  CHECK(none == nullptr);
}

TEST_CASE("kernels: vector add, 3-D grid, many arguments, shared memory", "[cpu][api][kernel]") {
  Session session;
  hal_device_t device = session.device(1);
  hal_module_t module = load_kernels(device);
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);

  SECTION("vector add") {
    const uint32_t n = 10007;
    float *a = nullptr, *b = nullptr, *c = nullptr;
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * 4, 0, reinterpret_cast<void**>(&a)) ==
            HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * 4, 0, reinterpret_cast<void**>(&b)) ==
            HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_SHARED, n * 4, 0, reinterpret_cast<void**>(&c)) ==
            HAL_SUCCESS);
    for (uint32_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i);
      b[i] = 2.0f;
    }
    const auto args = kernel_args(a, b, c, n);
    const hal_launch_config_t config = config_of({(n + 127) / 128, 1, 1}, {128, 1, 1});
    REQUIRE(hal_launch_kernel(get_kernel(module, "vector_add"), &config, 4, args.data(), stream) ==
            HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    for (uint32_t i = 0; i < n; ++i) REQUIRE(c[i] == static_cast<float>(i) + 2.0f);
    for (float* p : {a, b, c}) REQUIRE(hal_mem_free(p) == HAL_SUCCESS);
  }
  SECTION("3-D grid with odd sizes") {
    const uint32_t nx = 11, ny = 7, nz = 5;
    uint32_t* out = nullptr;
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, nx * ny * nz * 16, 0,
                          reinterpret_cast<void**>(&out)) == HAL_SUCCESS);
    REQUIRE(hal_memset_async(out, 0, nx * ny * nz * 16, stream) == HAL_SUCCESS);
    const auto args = kernel_args(out, nx, ny, nz);
    const hal_launch_config_t config = config_of({4, 3, 2}, {3, 3, 3});
    REQUIRE(hal_launch_kernel(get_kernel(module, "write_index"), &config, 4, args.data(), stream) ==
            HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    for (uint32_t z = 0; z < nz; ++z)
      for (uint32_t y = 0; y < ny; ++y)
        for (uint32_t x = 0; x < nx; ++x) {
          const uint32_t* slot = out + 4 * ((z * ny + y) * nx + x);
          REQUIRE((slot[0] == x && slot[1] == y && slot[2] == z && slot[3] == 1));
        }
    REQUIRE(hal_mem_free(out) == HAL_SUCCESS);
  }
  SECTION("23 arguments of every type") {
    const std::vector<hal_arg_type_t> types = {
        HAL_ARG_POINTER, HAL_ARG_I32, HAL_ARG_U32, HAL_ARG_I64,     HAL_ARG_U64, HAL_ARG_F32,
        HAL_ARG_F64,     HAL_ARG_I32, HAL_ARG_U32, HAL_ARG_I64,     HAL_ARG_U64, HAL_ARG_F32,
        HAL_ARG_F64,     HAL_ARG_I32, HAL_ARG_U32, HAL_ARG_I64,     HAL_ARG_U64, HAL_ARG_F32,
        HAL_ARG_F64,     HAL_ARG_F32, HAL_ARG_F64, HAL_ARG_POINTER, HAL_ARG_I32};
    hal_kernel_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.name = "many_args";
    desc.arg_types = types.data();
    desc.arg_count = static_cast<uint32_t>(types.size());
    hal_kernel_t kernel = nullptr;
    REQUIRE(hal_kernel_get(module, &desc, &kernel) == HAL_SUCCESS);
    int64_t* out = nullptr;
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 23 * 8, 0, reinterpret_cast<void**>(&out)) ==
            HAL_SUCCESS);
    const int32_t i32 = -5;
    const uint32_t u32 = 4000000000u;
    const int64_t i64 = -(int64_t{1} << 50);
    const uint64_t u64 = ~uint64_t{0} - 1;
    const float f32 = 0.75f;
    const double f64 = -1.5e-300;
    void* const ptr = out;
    const auto args = kernel_args(out, i32, u32, i64, u64, f32, f64, i32, u32, i64, u64, f32, f64,
                                  i32, u32, i64, u64, f32, f64, f32, f64, ptr, i32);
    const hal_launch_config_t config = config_of({1, 1, 1}, {1, 1, 1});
    REQUIRE(hal_launch_kernel(kernel, &config, 23, args.data(), stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    const auto* d = reinterpret_cast<const double*>(out);
    for (int base : {0, 6, 12}) {
      CHECK(out[base + 0] == i32);
      CHECK(out[base + 1] == u32);
      CHECK(out[base + 2] == i64);
      CHECK(static_cast<uint64_t>(out[base + 3]) == u64);
      CHECK(d[base + 4] == f32);
      CHECK(d[base + 5] == f64);
    }
    CHECK(d[18] == f32);
    CHECK(d[19] == f64);
    CHECK(out[20] == static_cast<int64_t>(reinterpret_cast<uintptr_t>(ptr)));
    CHECK(out[21] == i32);
    REQUIRE(hal_mem_free(out) == HAL_SUCCESS);
  }
  SECTION("shared memory sums per block") {
    const uint32_t n = 5000, threads = 64, blocks = (n + threads - 1) / threads;
    float *in = nullptr, *out = nullptr;
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * 4, 0, reinterpret_cast<void**>(&in)) ==
            HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, blocks * 4, 0,
                          reinterpret_cast<void**>(&out)) == HAL_SUCCESS);
    for (uint32_t i = 0; i < n; ++i) in[i] = 1.0f;
    const auto args = kernel_args(in, out, n);
    const hal_launch_config_t config = config_of({blocks, 1, 1}, {threads, 1, 1}, threads * 4);
    REQUIRE(hal_launch_kernel(get_kernel(module, "block_sum"), &config, 3, args.data(), stream) ==
            HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    for (uint32_t b = 0; b < blocks; ++b) {
      REQUIRE(out[b] == static_cast<float>(std::min(threads, n - b * threads)));
    }
    REQUIRE(hal_mem_free(in) == HAL_SUCCESS);
    REQUIRE(hal_mem_free(out) == HAL_SUCCESS);
  }
  REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
}

TEST_CASE("module errors through the API", "[cpu][api][module]") {
  Session session;
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
  hal_module_t module = nullptr;
  const char junk[] =
      "\x7f"
      "ELF but not really";
  desc.data = junk;
  desc.size = sizeof(junk);
  CHECK(hal_module_load(session.device(0), &desc, &module) == HAL_ERROR_INVALID_MODULE);
  desc.data = nullptr;
  desc.size = 0;
  desc.path = HAL_TEST_CPU_NOT_ELF_PATH;
  CHECK(hal_module_load(session.device(0), &desc, &module) == HAL_ERROR_INVALID_MODULE);

  module = load_kernels(session.device(0));
  hal_kernel_desc_t kdesc{};
  kdesc.struct_size = sizeof(kdesc);
  hal_kernel_t kernel = nullptr;
  kdesc.name = "missing_entry";
  CHECK(hal_kernel_get(module, &kdesc, &kernel) == HAL_ERROR_NOT_FOUND);
  CHECK(last_message().find("missing_entry") != std::string::npos);
  kdesc.name = "many_args";
  CHECK(hal_kernel_get(module, &kdesc, &kernel) == HAL_ERROR_ARGUMENT_MISMATCH);
  const hal_arg_type_t wrong[] = {HAL_ARG_POINTER, HAL_ARG_F32};
  kdesc.name = "vector_add";
  kdesc.arg_types = wrong;
  kdesc.arg_count = 2;
  CHECK(hal_kernel_get(module, &kdesc, &kernel) == HAL_ERROR_ARGUMENT_MISMATCH);
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
}

// The loader owns the declared-versus-module signature rule and the launch
// limits (SPEC 10.3); the plugin reports the module's signature and limits.
TEST_CASE("the loader compares signatures and counts static shared memory", "[cpu][api][kernel]") {
  Session session;
  hal_device_t device = session.device(0);
  hal_module_t module = load_kernels(device);
  hal_kernel_desc_t kdesc{};
  kdesc.struct_size = sizeof(kdesc);
  kdesc.name = "vector_add";  // exports "ptr,ptr,ptr,u32"
  hal_kernel_t kernel = nullptr;

  SECTION("every declared signature but the module's is refused, with both named") {
    std::mt19937 random(20261201);
    const hal_arg_type_t exported[] = {HAL_ARG_POINTER, HAL_ARG_POINTER, HAL_ARG_POINTER,
                                       HAL_ARG_U32};
    for (int trial = 0; trial < 40; ++trial) {
      // Never NULL, so a count of 0 declares "no arguments".
      std::array<hal_arg_type_t, 6> declared{};
      std::fill(declared.begin(), declared.end(), HAL_ARG_F32);
      std::copy(exported, exported + 4, declared.begin());
      const uint32_t count = static_cast<uint32_t>(random() % 6);
      if (count != 0) declared[random() % count] = static_cast<hal_arg_type_t>(random() % 7);
      kdesc.arg_types = declared.data();
      kdesc.arg_count = count;
      const bool same =
          std::equal(declared.begin(), declared.begin() + count, exported, exported + 4);
      const hal_result_t got = hal_kernel_get(module, &kdesc, &kernel);
      CHECK(got == (same ? HAL_SUCCESS : HAL_ERROR_ARGUMENT_MISMATCH));
      if (!same) {
        INFO(last_message());
        CHECK(last_message().find("disagrees with the module's \"ptr,ptr,ptr,u32\"") !=
              std::string::npos);
      }
    }
  }
  SECTION("static and dynamic shared memory share the device's budget") {
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    REQUIRE(hal_device_get_properties(device, &properties) == HAL_SUCCESS);
    kernel = get_kernel(module, "static_shared");
    hal_kernel_info_t info{};
    info.struct_size = sizeof(info);
    REQUIRE(hal_kernel_get_info(kernel, &info) == HAL_SUCCESS);
    REQUIRE(info.static_shared_memory_bytes == 60u * 1024u);
    REQUIRE(properties.max_shared_memory_bytes > info.static_shared_memory_bytes);
    const uint32_t room = properties.max_shared_memory_bytes - info.static_shared_memory_bytes;
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
    const hal_launch_config_t fits = config_of({1, 1, 1}, {1, 1, 1}, room);
    CHECK(hal_launch_kernel(kernel, &fits, 0, nullptr, stream) == HAL_SUCCESS);
    const hal_launch_config_t over = config_of({1, 1, 1}, {1, 1, 1}, room + 1);
    CHECK(hal_launch_kernel(kernel, &over, 0, nullptr, stream) == HAL_ERROR_INVALID_LAUNCH);
    CHECK(last_message().find("static shared memory") != std::string::npos);
    const hal_launch_config_t most = config_of({1, 1, 1}, {1, 1, 1}, UINT32_MAX);
    CHECK(hal_launch_kernel(kernel, &most, 0, nullptr, stream) == HAL_ERROR_INVALID_LAUNCH);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
  }
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
}

namespace {
struct OrderLog {
  std::vector<int> order;
};
struct OrderCall {
  OrderLog* log;
  int value;
};
void log_value(void* user_data) {
  auto* call = static_cast<OrderCall*>(user_data);
  call->log->order.push_back(call->value);
}
void pause_briefly(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
}
}  // namespace

TEST_CASE("stream order, host functions and events through the API", "[cpu][api][stream]") {
  Session session;
  hal_device_t device = session.device(0);
  hal_module_t module = load_kernels(device);
  hal_kernel_t affine = get_kernel(module, "affine_u32");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);

  SECTION("a chain of kernels, copies and host functions") {
    const uint32_t n = 2049;
    uint32_t *x = nullptr, *y = nullptr;
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * 4, 0, reinterpret_cast<void**>(&x)) ==
            HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * 4, 0, reinterpret_cast<void**>(&y)) ==
            HAL_SUCCESS);
    std::mt19937 random(7);
    std::vector<uint32_t> host(n);
    for (uint32_t& v : host) v = random();
    const std::vector<uint32_t> initial = host;
    REQUIRE(hal_memcpy_async(x, initial.data(), n * 4, stream) == HAL_SUCCESS);
    OrderLog log;
    std::vector<OrderCall> calls(100);
    for (int step = 0; step < 100; ++step) {
      const uint32_t a = random() | 1, b = random();
      REQUIRE(launch_affine(affine, x, n, a, b, stream) == HAL_SUCCESS);
      REQUIRE(hal_memcpy_async(y, x, n * 4, stream) == HAL_SUCCESS);
      REQUIRE(hal_memcpy_async(x, y, n * 4, stream) == HAL_SUCCESS);
      calls[step] = {&log, step};
      REQUIRE(hal_stream_enqueue_host_fn(stream, &log_value, &calls[step]) == HAL_SUCCESS);
      for (uint32_t& v : host) v = v * a + b;
    }
    std::vector<uint32_t> result(n);
    REQUIRE(hal_memcpy_async(result.data(), x, n * 4, stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    CHECK(result == host);
    REQUIRE(log.order.size() == 100);
    for (int i = 0; i < 100; ++i) REQUIRE(log.order[i] == i);
    REQUIRE(hal_mem_free(x) == HAL_SUCCESS);
    REQUIRE(hal_mem_free(y) == HAL_SUCCESS);
  }
  SECTION("events: timing, query, synchronize, destroy with a wait pending") {
    hal_event_t start = nullptr, end = nullptr;
    REQUIRE(hal_event_create(device, HAL_EVENT_FLAG_TIMING, &start) == HAL_SUCCESS);
    REQUIRE(hal_event_create(device, HAL_EVENT_FLAG_TIMING, &end) == HAL_SUCCESS);
    CHECK(hal_event_query(start) == HAL_SUCCESS);
    float ms = 0;
    CHECK(hal_event_elapsed_ms(start, end, &ms) == HAL_ERROR_INVALID_STATE);
    REQUIRE(hal_event_record(start, stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_enqueue_host_fn(stream, &pause_briefly, nullptr) == HAL_SUCCESS);
    REQUIRE(hal_event_record(end, stream) == HAL_SUCCESS);
    hal_stream_t other = nullptr;
    REQUIRE(hal_stream_create(session.device(1), 0, &other) == HAL_SUCCESS);
    REQUIRE(hal_stream_wait_event(other, end) == HAL_SUCCESS);
    OrderLog log;
    OrderCall after{&log, 1};
    REQUIRE(hal_stream_enqueue_host_fn(other, &log_value, &after) == HAL_SUCCESS);
    REQUIRE(hal_event_synchronize(end) == HAL_SUCCESS);
    REQUIRE(hal_event_elapsed_ms(start, end, &ms) == HAL_SUCCESS);
    CHECK(ms > 0.0f);
    REQUIRE(hal_event_destroy(end) == HAL_SUCCESS);
    REQUIRE(hal_event_destroy(start) == HAL_SUCCESS);
    REQUIRE(hal_stream_destroy(other) == HAL_SUCCESS);  // waits for its pending work
    CHECK(log.order == std::vector<int>{1});
  }
  REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
}

TEST_CASE("ping-pong across two devices from four threads", "[cpu][api][event]") {
  Session session;
  hal_module_t m0 = load_kernels(session.device(0));
  hal_module_t m1 = load_kernels(session.device(1));
  hal_kernel_t k0 = get_kernel(m0, "affine_u32");
  hal_kernel_t k1 = get_kernel(m1, "affine_u32");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 4; ++id) {
    threads.emplace_back([&, id] {
      constexpr uint32_t n = 777;
      hal_stream_t s0 = nullptr, s1 = nullptr;
      hal_event_t e0 = nullptr, e1 = nullptr;
      uint32_t *x0 = nullptr, *x1 = nullptr;
      bool ok = hal_stream_create(session.device(0), 0, &s0) == HAL_SUCCESS &&
                hal_stream_create(session.device(1), 0, &s1) == HAL_SUCCESS &&
                hal_event_create(session.device(0), 0, &e0) == HAL_SUCCESS &&
                hal_event_create(session.device(1), 0, &e1) == HAL_SUCCESS &&
                hal_mem_alloc(session.device(0), HAL_MEMORY_DEVICE, n * 4, 0,
                              reinterpret_cast<void**>(&x0)) == HAL_SUCCESS &&
                hal_mem_alloc(session.device(1), HAL_MEMORY_DEVICE, n * 4, 0,
                              reinterpret_cast<void**>(&x1)) == HAL_SUCCESS;
      std::mt19937 random(31 * id + 1);
      std::vector<uint32_t> host(n);
      for (uint32_t& v : host) v = random();
      const std::vector<uint32_t> initial = host;
      ok = ok && hal_memcpy_async(x0, initial.data(), n * 4, s0) == HAL_SUCCESS;
      for (int round = 0; ok && round < 40; ++round) {
        const uint32_t a0 = random() | 1, b0 = random(), a1 = random() | 1, b1 = random();
        ok &= launch_affine(k0, x0, n, a0, b0, s0) == HAL_SUCCESS;
        ok &= hal_event_record(e0, s0) == HAL_SUCCESS;
        ok &= hal_stream_wait_event(s1, e0) == HAL_SUCCESS;
        ok &= hal_memcpy_async(x1, x0, n * 4, s1) == HAL_SUCCESS;
        ok &= launch_affine(k1, x1, n, a1, b1, s1) == HAL_SUCCESS;
        ok &= hal_event_record(e1, s1) == HAL_SUCCESS;
        ok &= hal_stream_wait_event(s0, e1) == HAL_SUCCESS;
        ok &= hal_memcpy_async(x0, x1, n * 4, s0) == HAL_SUCCESS;
        for (uint32_t& v : host) v = (v * a0 + b0) * a1 + b1;
      }
      std::vector<uint32_t> result(n);
      ok = ok && hal_memcpy_async(result.data(), x0, n * 4, s0) == HAL_SUCCESS;
      ok = ok && hal_stream_synchronize(s0) == HAL_SUCCESS;
      ok = ok && result == host;
      hal_stream_destroy(s0);
      hal_stream_destroy(s1);
      hal_event_destroy(e0);
      hal_event_destroy(e1);
      hal_mem_free(x0);
      hal_mem_free(x1);
      if (!ok) ++failures;
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures == 0);
  REQUIRE(hal_module_unload(m0) == HAL_SUCCESS);
  REQUIRE(hal_module_unload(m1) == HAL_SUCCESS);
}
