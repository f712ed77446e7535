// The plugin SDK's handshake (hal_plugin_sdk/negotiate.hpp) against a host
// table built here: every refusal of SPEC.md §10.1 with its result and
// sentence, |out_plugin| untouched on any failure, exceptions contained.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hal_plugin_sdk/device_entries.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"
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

// ---- hal_plugin_sdk/kernel_signature.hpp ---------------------------------

namespace {

// A module's own signatures, shaped as hal_dialect's TranslatedModule is.
struct Record {
  std::string entry;
  std::vector<hal_arg_type_t> arg_types;
};
struct Dialect {
  std::vector<Record> kernels;
  const Record* find(const std::string& name) const {
    for (const Record& kernel : kernels) {
      if (kernel.entry == name) return &kernel;
    }
    return nullptr;
  }
};

hal_kernel_desc_t kernel_desc(const char* name, const std::vector<hal_arg_type_t>* types) {
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = name;
  desc.arg_types = types != nullptr ? types->data() : nullptr;
  desc.arg_count = types != nullptr ? static_cast<uint32_t>(types->size()) : 0;
  return desc;
}

}  // namespace

TEST_CASE("a kernel is bound to its module's signature, else to the caller's", "[sdk]") {
  Fixture f;
  const hal::plugin::ErrorReporter report(&f.host);
  const Dialect dialect{{{"scale", {HAL_ARG_POINTER, HAL_ARG_F32}}, {"fill", {HAL_ARG_U32}}}};
  const std::vector<hal_arg_type_t> declared = {HAL_ARG_I64, HAL_ARG_F64, HAL_ARG_POINTER};
  const Record* record = nullptr;
  std::vector<hal_arg_type_t> types = {HAL_ARG_I32};

  // The module's record wins over what the caller declares.
  hal_kernel_desc_t desc = kernel_desc("fill", &declared);
  CHECK(hal::plugin::resolve_kernel_signature(report, &dialect, desc, "unused", record, types) ==
        HAL_SUCCESS);
  CHECK(record == &dialect.kernels[1]);
  CHECK(types == dialect.kernels[1].arg_types);
  CHECK(f.recorded.calls == 0);

  // A binary module: the caller's signature, or none with the reason given.
  const Dialect* binary = nullptr;
  CHECK(hal::plugin::resolve_kernel_signature(report, binary, desc, "unused", record, types) ==
        HAL_SUCCESS);
  CHECK(record == nullptr);
  CHECK(types == declared);
  // A declared signature without arguments: arg_types set, arg_count 0.
  desc = kernel_desc("empty", &declared);
  desc.arg_count = 0;
  CHECK(hal::plugin::resolve_kernel_signature(report, binary, desc, "unused", record, types) ==
        HAL_SUCCESS);
  CHECK(types.empty());
  desc = kernel_desc("scale", nullptr);
  CHECK(hal::plugin::resolve_kernel_signature(report, binary, desc, "binaries carry none", record,
                                              types) == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(f.recorded.result == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(f.recorded.message == "kernel_get: 'scale' has no signature: binaries carry none");

  // A name the module lacks: not found, with the kernels it has.
  desc = kernel_desc("missing", &declared);
  CHECK(hal::plugin::resolve_kernel_signature(report, &dialect, desc, "unused", record, types) ==
        HAL_ERROR_NOT_FOUND);
  CHECK(record == nullptr);
  CHECK(f.recorded.message ==
        "kernel_get: the module has no kernel 'missing' (its kernels: scale, fill)");
}

TEST_CASE("a declared signature is checked against the sizes the vendor reports", "[sdk]") {
  const hal::plugin::ArgumentWording wording{"the entry", "parameter", "the entry"};
  // Seeded signatures; the reference sizes come from the SDK's one table.
  std::mt19937 random(1203);
  for (int round = 0; round < 200; ++round) {
    std::vector<hal_arg_type_t> types(random() % (HAL_MAX_KERNEL_ARGS + 1));
    std::vector<size_t> sizes;
    for (hal_arg_type_t& type : types) {
      const auto& entry = hal::plugin::kArgTypes[random() % std::size(hal::plugin::kArgTypes)];
      type = entry.type;
      sizes.push_back(entry.size);
    }
    CAPTURE(hal::plugin::format_signature(types.data(), types.size()));
    CHECK(hal::plugin::signature_size_disagreement(sizes, types, wording).empty());
    if (types.empty()) continue;
    const size_t at = random() % types.size();
    std::vector<size_t> wrong = sizes;
    wrong[at] = sizes[at] == 4 ? 8 : 4;
    CHECK(hal::plugin::signature_size_disagreement(wrong, types, wording)
              .find("parameter " + std::to_string(at) + " of the entry is " +
                    std::to_string(wrong[at]) + " bytes") == 0);
  }
  const std::vector<hal_arg_type_t> types = {HAL_ARG_POINTER, HAL_ARG_F32};
  CHECK(hal::plugin::signature_size_disagreement({8, 4, 8}, types, wording) ==
        "the entry takes 3 parameters (bytes: 8,4,8), the declared signature \"ptr,f32\" has 2");
  CHECK(hal::plugin::signature_size_disagreement(
            {8, 8}, types, {"the code object's kernel", "argument", "the kernel"}) ==
        "argument 1 of the kernel is 8 bytes, the declared signature \"ptr,f32\" makes it f32 "
        "(4 bytes)");
}

TEST_CASE("write_kernel_info fills what the caller's struct has room for", "[sdk]") {
  const std::string name = "scale";
  const std::vector<hal_arg_type_t> types = {HAL_ARG_POINTER, HAL_ARG_F32, HAL_ARG_U32};
  hal::plugin::write_kernel_info(name, types, 256, 1024, nullptr);  // no struct: nothing
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  hal::plugin::write_kernel_info(name, types, 256, 1024, &info);
  CHECK(info.name == name.c_str());
  REQUIRE(info.arg_count == 3);
  CHECK(info.arg_types[0] == HAL_ARG_POINTER);
  CHECK(info.arg_types[1] == HAL_ARG_F32);
  CHECK(info.arg_types[2] == HAL_ARG_U32);
  CHECK(info.max_threads_per_block == 256);
  CHECK(info.static_shared_memory_bytes == 1024);
  hal_kernel_info_t old{};
  old.struct_size = offsetof(hal_kernel_info_t, max_threads_per_block);
  hal::plugin::write_kernel_info(name, types, 256, 1024, &old);
  CHECK(old.arg_count == 3);
  CHECK(old.max_threads_per_block == 0);  // past the caller's struct_size
}

// ---- hal_plugin_sdk/device_entries.hpp -----------------------------------

namespace {

// A device that records what reached it and throws on request.
struct ScriptedDevice {
  hal::plugin::ErrorReporter reporter;
  hal_device_properties_t props{};
  bool throw_bad_alloc = false;
  bool throw_on_release = false;
  int released = 0;
  std::vector<std::string> calls;

  const hal::plugin::ErrorReporter& report() const { return reporter; }
  const hal_device_properties_t& properties() const { return props; }
  hal_result_t synchronize() {
    calls.push_back("synchronize");
    return HAL_ERROR_DEVICE_LOST;
  }
  hal_result_t allocate(hal_memory_kind_t kind, size_t size, size_t alignment, void** out) {
    if (throw_bad_alloc) throw std::bad_alloc();
    calls.push_back("allocate " + std::to_string(kind) + " " + std::to_string(size) + " " +
                    std::to_string(alignment));
    *out = this;
    return HAL_SUCCESS;
  }
  hal_result_t free(void* ptr) {
    calls.push_back(ptr == this ? "free" : "free?");
    throw std::runtime_error("freed twice");
  }
  void release_all() {
    ++released;
    if (throw_on_release) throw std::runtime_error("release failed");
  }
};

using Entries = hal::plugin::DeviceEntries<ScriptedDevice>;

}  // namespace

TEST_CASE("the device entries hand each call to the device, and no exception leaves", "[sdk]") {
  Fixture f;
  ScriptedDevice device;
  device.reporter = hal::plugin::ErrorReporter(&f.host);
  std::memset(device.props.name, 'g', 8);
  device.props.struct_size = sizeof(device.props);
  auto* handle = reinterpret_cast<hal_impl_device_t*>(&device);

  hal_plugin_table_v1_t table{};
  Entries::fill(table);
  REQUIRE(table.device_close != nullptr);
  REQUIRE(table.mem_alloc != nullptr);

  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  CHECK(table.device_get_properties(handle, &properties) == HAL_SUCCESS);
  CHECK(std::string(properties.name, 8) == "gggggggg");
  CHECK(table.device_synchronize(handle) == HAL_ERROR_DEVICE_LOST);  // the device's own result

  void* allocation = nullptr;
  CHECK(table.mem_alloc(handle, HAL_MEMORY_DEVICE, 4096, 256, &allocation) == HAL_SUCCESS);
  CHECK(allocation == &device);
  device.throw_bad_alloc = true;
  CHECK(table.mem_alloc(handle, HAL_MEMORY_DEVICE, 1, 0, &allocation) == HAL_ERROR_OUT_OF_MEMORY);
  CHECK(f.recorded.message == "mem_alloc: the host is out of memory");
  CHECK(table.mem_free(handle, allocation) == HAL_ERROR_INTERNAL);
  CHECK(f.recorded.message == "mem_free: unexpected exception: freed twice");
  CHECK(device.calls ==
        std::vector<std::string>{
            "synchronize", "allocate " + std::to_string(HAL_MEMORY_DEVICE) + " 4096 256", "free"});

  table.device_close(handle);
  device.throw_on_release = true;
  table.device_close(handle);  // dropped: device_close returns nothing
  CHECK(device.released == 2);
}
