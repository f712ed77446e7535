// The plugin SDK's handshake (hal_plugin_sdk/negotiate.hpp) against a host
// table built here: every refusal of SPEC.md §10.1 with its result and
// sentence, |out_plugin| untouched on any failure, exceptions contained.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "hal_plugin_sdk/negotiate.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"

namespace {

struct Recorded {
  int calls = 0;
  hal_result_t result = HAL_SUCCESS;
  std::string message;
};

void record_error(void* context, hal_result_t result, int64_t, const char* message) {
  auto* recorded = static_cast<Recorded*>(context);
  ++recorded->calls;
  recorded->result = result;
  recorded->message = message;
}

void ignore_log(void*, hal_log_level_t, const char*) {}

struct Fixture {
  Recorded recorded;
  hal_plugin_host_t host{
      sizeof(hal_plugin_host_t), HAL_ABI_VERSION, 0, &recorded, record_error, ignore_log};
  hal_plugin_v1_t out{};
  Fixture() { out.struct_size = sizeof(out); }
};

const hal_plugin_table_v1_t kTable{};  // never called: only its address is handed on
constexpr hal::plugin::Identity kIdentity = {"sdktest", "1.2.3", "HAL tests", "build 7"};
hal_plugin_context_t* const kContext = reinterpret_cast<hal_plugin_context_t*>(0x1000);

hal_result_t create_ok(const hal::plugin::ErrorReporter&, hal_plugin_context_t** out_context) {
  *out_context = kContext;
  return HAL_SUCCESS;
}

bool untouched(const hal_plugin_v1_t& out) {
  return out.abi_version == 0 && out.name == nullptr && out.version == nullptr &&
         out.vendor == nullptr && out.build_id == nullptr && out.context == nullptr &&
         out.table == nullptr;
}

}  // namespace

TEST_CASE("enter describes the plugin on success", "[sdk]") {
  Fixture f;
  REQUIRE(hal::plugin::enter(&f.host, &f.out, kIdentity, kTable, create_ok) == HAL_SUCCESS);
  CHECK(f.out.abi_version == HAL_ABI_VERSION);
  CHECK(std::strcmp(f.out.name, "sdktest") == 0);
  CHECK(std::strcmp(f.out.version, "1.2.3") == 0);
  CHECK(std::strcmp(f.out.vendor, "HAL tests") == 0);
  CHECK(std::strcmp(f.out.build_id, "build 7") == 0);
  CHECK(f.out.context == kContext);
  CHECK(f.out.table == &kTable);
  CHECK(f.recorded.calls == 0);
}

TEST_CASE("enter accepts any minor of its major", "[sdk]") {
  Fixture f;
  f.host.abi_version = HAL_MAKE_VERSION(HAL_ABI_VERSION_MAJOR, 1023, 4095);
  CHECK(hal::plugin::enter(&f.host, &f.out, kIdentity, kTable, create_ok) == HAL_SUCCESS);
}

TEST_CASE("enter refuses what it cannot negotiate, and writes nothing", "[sdk]") {
  Fixture f;
  SECTION("NULL host or out struct") {
    CHECK(hal::plugin::enter(nullptr, &f.out, kIdentity, kTable, create_ok) ==
          HAL_ERROR_NULL_POINTER);
    CHECK(hal::plugin::enter(&f.host, nullptr, kIdentity, kTable, create_ok) ==
          HAL_ERROR_NULL_POINTER);
    CHECK(f.recorded.calls == 0);
  }
  SECTION("a host struct too small to hold its services") {
    f.host.struct_size = offsetof(hal_plugin_host_t, log);
    CHECK(hal::plugin::enter(&f.host, &f.out, kIdentity, kTable, create_ok) ==
          HAL_ERROR_ABI_MISMATCH);
    CHECK(f.recorded.calls == 0);  // set_error may lie outside the struct
  }
  SECTION("another ABI major, either way") {
    for (uint32_t major : {HAL_ABI_VERSION_MAJOR + 1, HAL_ABI_VERSION_MAJOR - 1}) {
      f.host.abi_version = HAL_MAKE_VERSION(major, 0, 0);
      CHECK(hal::plugin::enter(&f.host, &f.out, kIdentity, kTable, create_ok) ==
            HAL_ERROR_ABI_MISMATCH);
      CHECK(f.recorded.result == HAL_ERROR_ABI_MISMATCH);
      CHECK(f.recorded.message.find("sdktest plugin implements HAL ABI") != std::string::npos);
      CHECK(f.recorded.message.find(std::to_string(major) + ".0") != std::string::npos);
    }
  }
  SECTION("an out struct smaller than v1.0") {
    f.out.struct_size = offsetof(hal_plugin_v1_t, table);
    CHECK(hal::plugin::enter(&f.host, &f.out, kIdentity, kTable, create_ok) ==
          HAL_ERROR_ABI_MISMATCH);
    CHECK(f.recorded.message.find("smaller than the v1.0 struct") != std::string::npos);
    f.out.struct_size = 0;
  }
  SECTION("create fails with its own result and sentence") {
    const auto fail = [](const hal::plugin::ErrorReporter& report, hal_plugin_context_t**) {
      return report.fail(HAL_ERROR_DEVICE_LOST, 42, "driver said %d", 42);
    };
    CHECK(hal::plugin::enter(&f.host, &f.out, kIdentity, kTable, fail) == HAL_ERROR_DEVICE_LOST);
    CHECK(f.recorded.message == "driver said 42");
  }
  SECTION("create throws") {
    const auto throw_oom = [](const hal::plugin::ErrorReporter&, hal_plugin_context_t**) {
      throw std::bad_alloc();
      return HAL_SUCCESS;
    };
    CHECK(hal::plugin::enter(&f.host, &f.out, kIdentity, kTable, throw_oom) ==
          HAL_ERROR_OUT_OF_MEMORY);
    const auto throw_other = [](const hal::plugin::ErrorReporter&, hal_plugin_context_t**) {
      throw std::runtime_error("boom");
      return HAL_SUCCESS;
    };
    CHECK(hal::plugin::enter(&f.host, &f.out, kIdentity, kTable, throw_other) ==
          HAL_ERROR_INTERNAL);
    CHECK(f.recorded.message.find("boom") != std::string::npos);
  }
  f.out.struct_size = sizeof(f.out);
  CHECK(untouched(f.out));
}

TEST_CASE("write_versioned_struct stops at the caller's struct_size", "[sdk]") {
  hal_device_properties_t full{};
  full.struct_size = sizeof(full);
  std::memset(full.name, 'n', sizeof(full.name));
  full.peak_memory_bandwidth = 5.0;
  for (size_t size : {size_t{0}, sizeof(size_t), offsetof(hal_device_properties_t, vendor),
                      sizeof(hal_device_properties_t)}) {
    unsigned char buffer[sizeof(hal_device_properties_t) + 16];
    std::memset(buffer, 0xAB, sizeof(buffer));
    auto* out = reinterpret_cast<hal_device_properties_t*>(buffer);
    out->struct_size = size;
    out->next = nullptr;
    hal::plugin::write_versioned_struct(full, out);
    CHECK(out->struct_size == size);  // the caller's header is the caller's
    const size_t header = offsetof(hal_device_properties_t, name);
    for (size_t i = std::max(size, header); i < sizeof(buffer); ++i) {
      REQUIRE(buffer[i] == 0xAB);  // nothing past struct_size
    }
    if (size > header) CHECK(buffer[header] == 'n');
  }
}
