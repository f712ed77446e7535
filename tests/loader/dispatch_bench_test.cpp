// The loader's per-call cost: hal_stream_query through libhal against the
// mock plugin's stream_query called directly through its own table. Hidden
// ([.]): a measurement to run by hand, not a timed test on shared machines:
//   loader_tests "[.bench]" -s
#include "test_support.hpp"

#include <hal_plugin.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>

using namespace loader_test;

namespace {

template <class Call>
double nanoseconds_per_call(Call&& call) {
  constexpr int kCalls = 2'000'000;
  double best = 1e9;
  for (int repeat = 0; repeat < 7; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) call();
    const auto stop = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(stop - start).count() / kCalls);
  }
  return best;
}

void ignore_error(void*, hal_result_t, int64_t, const char*) {}
void ignore_log(void*, hal_log_level_t, const char*) {}

}  // namespace

TEST_CASE("dispatch overhead of hal_stream_query", "[.bench]") {
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device_of("mock"), 0, &stream) == HAL_SUCCESS);
  const double through_loader = nanoseconds_per_call([&] { (void)hal_stream_query(stream); });

  // A second copy of the plugin, opened directly: its own table and stream.
  void* library = dlopen((kPluginDir + "/hal_plugin_mock.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(library != nullptr);
  auto entry = reinterpret_cast<hal_plugin_entry_fn_t>(dlsym(library, "hal_plugin_entry"));
  REQUIRE(entry != nullptr);
  hal_plugin_host_t host{sizeof(host), HAL_ABI_VERSION, 0, nullptr, ignore_error, ignore_log};
  hal_plugin_v1_t plugin{};
  plugin.struct_size = sizeof(plugin);
  REQUIRE(entry(&host, &plugin) == HAL_SUCCESS);
  hal_impl_device_t* device = nullptr;
  REQUIRE(plugin.table->device_open(plugin.context, 0, &device) == HAL_SUCCESS);
  hal_impl_stream_t* direct_stream = nullptr;
  REQUIRE(plugin.table->stream_create(device, 0, &direct_stream) == HAL_SUCCESS);
  auto* volatile query = plugin.table->stream_query;  // no inlining across the table
  const double direct = nanoseconds_per_call([&] { (void)query(direct_stream); });
  WARN("hal_stream_query: " << through_loader
                            << " ns/call; the plugin's stream_query directly: " << direct
                            << " ns/call; loader overhead: " << through_loader - direct << " ns");
  REQUIRE(plugin.table->stream_destroy(direct_stream) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  // The plugin library stays loaded: the loader's copy shares its statics.
}
