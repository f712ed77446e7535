// The cpu plugin's table driven directly: entry, devices, memory.
#include <catch2/catch.hpp>

#include <cstring>
#include <algorithm>
#include <atomic>
#include <thread>

#include "plugin_harness.hpp"

using hal::test::last_error;
using hal::test::PluginInstance;

TEST_CASE("entry negotiates the ABI and identifies the plugin", "[cpu][table][entry]") {
  SECTION("a loader of another ABI major is refused") {
    hal_plugin_host_t host = hal::test::make_host(HAL_MAKE_VERSION(2, 0, 0));
    hal_plugin_v1_t info{};
    info.struct_size = sizeof(info);
    REQUIRE(hal::test::plugin_entry()(&host, &info) == HAL_ERROR_ABI_MISMATCH);
    CHECK(last_error().message.find("ABI") != std::string::npos);
    CHECK(info.table == nullptr);
  }
  SECTION("identity and table") {
    PluginInstance plugin;
    CHECK(std::string(plugin.info().name) == "cpu");
    CHECK(std::string(plugin.info().version).size() > 0);
    CHECK(std::string(plugin.info().vendor).size() > 0);
    CHECK(std::string(plugin.info().build_id).size() > 0);
    CHECK(plugin.info().abi_version == HAL_ABI_VERSION);
    CHECK(plugin.table().struct_size == sizeof(hal_plugin_table_v1_t));
    CHECK(plugin.device_count() == 2);
  }
  SECTION("HAL_CPU_DEVICES picks the device count, 0 included") {
    PluginInstance none("0");
    CHECK(none.device_count() == 0);
    PluginInstance three("3");
    CHECK(three.device_count() == 3);
    PluginInstance defaulted(nullptr);
    CHECK(defaulted.device_count() == 2);
  }
  SECTION("an invalid HAL_CPU_DEVICES fails the entry with a clear message") {
    for (const char* bad : {"two", "-1", "", "1000", "2x"}) {
      setenv("HAL_CPU_DEVICES", bad, 1);
      hal_plugin_host_t host = hal::test::make_host();
      hal_plugin_v1_t info{};
      info.struct_size = sizeof(info);
      CHECK(hal::test::plugin_entry()(&host, &info) == HAL_ERROR_INVALID_ARGUMENT);
      CHECK(last_error().message.find("HAL_CPU_DEVICES") != std::string::npos);
    }
    setenv("HAL_CPU_DEVICES", "2", 1);
  }
  SECTION("device_open opens each index below device_count") {
    // The plugin trusts the loader to ask for 0..device_count-1 only (SPEC
    // 10.3); an index past that is the loader's to never send.
    PluginInstance plugin;
    uint32_t count = 0;
    REQUIRE(plugin.table().device_count(plugin.info().context, &count) == HAL_SUCCESS);
    REQUIRE(count == 2);
    hal_impl_device_t* first = nullptr;
    hal_impl_device_t* second = nullptr;
    CHECK(plugin.table().device_open(plugin.info().context, 0, &first) == HAL_SUCCESS);
    CHECK(plugin.table().device_open(plugin.info().context, 1, &second) == HAL_SUCCESS);
    CHECK(first != nullptr);
    CHECK(second != nullptr);
    CHECK(first != second);
  }
}

TEST_CASE("device properties", "[cpu][table][device]") {
  PluginInstance plugin;
  hal_device_properties_t p0{};
  p0.struct_size = sizeof(p0);
  REQUIRE(plugin.table().device_get_properties(plugin.device(0), &p0) == HAL_SUCCESS);
  hal_device_properties_t p1{};
  p1.struct_size = sizeof(p1);
  REQUIRE(plugin.table().device_get_properties(plugin.device(1), &p1) == HAL_SUCCESS);

  CHECK(p0.struct_size == sizeof(p0));
  CHECK(std::string(p0.name).find("HAL CPU device 0") == 0);
  CHECK(std::string(p0.vendor).size() > 0);
  CHECK(p0.type == HAL_DEVICE_TYPE_CPU);
  const uint32_t caps = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_EVENT_TIMING |
                        HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_HOST_MEMORY |
                        HAL_DEVICE_CAP_SHARED_MEMORY | HAL_DEVICE_CAP_UNIFIED_ADDRESSING |
                        HAL_DEVICE_CAP_PEER_ACCESS | HAL_DEVICE_CAP_STREAM_QUERY |
                        HAL_DEVICE_CAP_COLLECTIVES | HAL_DEVICE_CAP_ALLTOALLV;
  CHECK(p0.capabilities == caps);
  CHECK(p0.module_formats ==
        ((1u << HAL_MODULE_FORMAT_CPU_SHARED_OBJECT) | (1u << HAL_MODULE_FORMAT_HAL_DIALECT)));
  CHECK(p0.compute_units >= 1);
  CHECK(p0.total_memory_bytes > 0);
  CHECK(p0.max_allocation_bytes <= p0.total_memory_bytes);
  CHECK(p0.min_alignment_bytes >= 64);
  CHECK(p0.max_threads_per_block == 1024);
  CHECK(p0.max_block_dims[0] == 1024);
  CHECK(p0.max_grid_dims[0] == 0x7fffffffu);
  CHECK(p0.max_grid_dims[1] == 65535);
  CHECK(p0.max_shared_memory_bytes == 64 * 1024);
  CHECK((p0.subgroup_size == 4 || p0.subgroup_size == 8 || p0.subgroup_size == 16));
  CHECK(p0.peak_fp32_flops > 0);
  // A stable uuid per index: the same twice, different across devices.
  CHECK(std::memcmp(p0.uuid, p1.uuid, 16) != 0);
  hal_device_properties_t again{};
  again.struct_size = sizeof(again);
  plugin.table().device_get_properties(plugin.device(0), &again);
  CHECK(std::memcmp(p0.uuid, again.uuid, 16) == 0);

  SECTION("struct_size is respected: an older, smaller struct is not overrun") {
    struct {
      hal_device_properties_t props;
      unsigned char guard[64];
    } buffer;
    std::memset(&buffer, 0xAB, sizeof(buffer));
    const size_t small = offsetof(hal_device_properties_t, compute_units);
    buffer.props.struct_size = small;
    buffer.props.next = nullptr;
    REQUIRE(plugin.table().device_get_properties(plugin.device(0), &buffer.props) == HAL_SUCCESS);
    CHECK(buffer.props.struct_size == small);
    CHECK(std::string(buffer.props.name) == p0.name);
    const auto* bytes = reinterpret_cast<const unsigned char*>(&buffer.props);
    for (size_t i = small; i < sizeof(buffer); ++i) REQUIRE(bytes[i] == 0xAB);
  }
}

TEST_CASE("memory allocation", "[cpu][table][memory]") {
  PluginInstance plugin;
  const hal_plugin_table_v1_t& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);

  SECTION("every kind, many sizes and alignments; memory is usable") {
    for (hal_memory_kind_t kind : {HAL_MEMORY_DEVICE, HAL_MEMORY_HOST, HAL_MEMORY_SHARED}) {
      for (size_t size : {size_t{1}, size_t{63}, size_t{4097}, size_t{100001}, size_t{3} << 20}) {
        for (size_t alignment : {size_t{1}, size_t{64}, size_t{4096}, size_t{1} << 21}) {
          void* ptr = nullptr;
          REQUIRE(t.mem_alloc(device, kind, size, alignment, &ptr) == HAL_SUCCESS);
          CHECK(reinterpret_cast<uintptr_t>(ptr) % std::max<size_t>(alignment, 64) == 0);
          std::memset(ptr, 0x5A, size);
          CHECK(static_cast<unsigned char*>(ptr)[size - 1] == 0x5A);
          REQUIRE(t.mem_free(device, ptr) == HAL_SUCCESS);
        }
      }
    }
  }
  SECTION("live allocations do not overlap") {
    std::vector<std::pair<char*, size_t>> blocks;
    for (size_t i = 1; i <= 200; ++i) {
      void* ptr = nullptr;
      const size_t size = (i * 977) % 70000 + 1;
      REQUIRE(t.mem_alloc(device, HAL_MEMORY_DEVICE, size, 64, &ptr) == HAL_SUCCESS);
      blocks.emplace_back(static_cast<char*>(ptr), size);
    }
    std::sort(blocks.begin(), blocks.end());
    for (size_t i = 1; i < blocks.size(); ++i) {
      REQUIRE(blocks[i - 1].first + blocks[i - 1].second <= blocks[i].first);
    }
    for (auto& [ptr, size] : blocks) REQUIRE(t.mem_free(device, ptr) == HAL_SUCCESS);
  }
  SECTION("freed blocks are reused from the cache") {
    for (size_t size : {size_t{256}, size_t{8} << 20}) {
      void* first = nullptr;
      REQUIRE(t.mem_alloc(device, HAL_MEMORY_DEVICE, size, 64, &first) == HAL_SUCCESS);
      REQUIRE(t.mem_free(device, first) == HAL_SUCCESS);
      void* second = nullptr;
      REQUIRE(t.mem_alloc(device, HAL_MEMORY_DEVICE, size, 64, &second) == HAL_SUCCESS);
      CHECK(second == first);
      REQUIRE(t.mem_free(device, second) == HAL_SUCCESS);
    }
  }
  SECTION("the budget is enforced") {
    hal_device_properties_t props{};
    props.struct_size = sizeof(props);
    t.device_get_properties(device, &props);
    void* ptr = nullptr;
    CHECK(t.mem_alloc(device, HAL_MEMORY_DEVICE, props.total_memory_bytes + 1, 64, &ptr) ==
          HAL_ERROR_OUT_OF_MEMORY);
    CHECK(last_error().message.find("do not fit") != std::string::npos);
    CHECK(ptr == nullptr);
  }
  SECTION("HAL_CPU_DEVICE_MEMORY sets the budget; filling it gives OUT_OF_MEMORY") {
    PluginInstance small("1", "16777216");
    hal_device_properties_t props{};
    props.struct_size = sizeof(props);
    small.table().device_get_properties(small.device(0), &props);
    CHECK(props.total_memory_bytes == 16u << 20);
    std::vector<void*> blocks;
    void* ptr = nullptr;
    while (small.table().mem_alloc(small.device(0), HAL_MEMORY_DEVICE, 1u << 20, 64, &ptr) ==
           HAL_SUCCESS) {
      blocks.push_back(ptr);
      REQUIRE(blocks.size() <= 16);
    }
    CHECK(last_error().result == HAL_ERROR_OUT_OF_MEMORY);
    CHECK(blocks.size() >= 4);  // large blocks round to 2 MiB pages: 8 of them fit
    for (void* block : blocks)
      REQUIRE(small.table().mem_free(small.device(0), block) == HAL_SUCCESS);
    REQUIRE(small.table().mem_alloc(small.device(0), HAL_MEMORY_DEVICE, 1u << 20, 64, &ptr) ==
            HAL_SUCCESS);
    REQUIRE(small.table().mem_free(small.device(0), ptr) == HAL_SUCCESS);
  }
  SECTION("freeing something unknown is NOT_FOUND") {
    int local = 0;
    CHECK(t.mem_free(device, &local) == HAL_ERROR_NOT_FOUND);
  }
  SECTION("allocation is thread-safe") {
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] {
        for (int round = 0; round < 200; ++round) {
          void* ptr = nullptr;
          const size_t size = size_t(64) << ((round + i) % 14);
          if (t.mem_alloc(device, HAL_MEMORY_DEVICE, size, 64, &ptr) != HAL_SUCCESS) {
            ++failures;
            continue;
          }
          std::memset(ptr, i, size);
          if (static_cast<unsigned char*>(ptr)[size - 1] != i) ++failures;
          if (t.mem_free(device, ptr) != HAL_SUCCESS) ++failures;
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    CHECK(failures == 0);
  }
}
