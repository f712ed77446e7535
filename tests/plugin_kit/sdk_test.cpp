// The plugin SDK's handshake (hal_plugin_sdk/negotiate.hpp) against a host
// table built here: every refusal of SPEC.md §10.1 with its result and
// sentence, |out_plugin| untouched on any failure, exceptions contained.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <new>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "hal_plugin_sdk/allocations.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/module_image.hpp"
#include "hal_plugin_sdk/negotiate.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "hal_plugin_sdk/table.hpp"
#include "hal_plugin_sdk/uuid.hpp"
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

// ---- hal_plugin_sdk/table.hpp ----------------------------------------------

namespace {

using hal::plugin::Entry;
using hal::plugin::EntrySet;

// The entry at |entry|'s place in |table|, as the loader reads it.
const void* entry_at(const hal_plugin_table_v1_t& table, Entry entry) {
  const void* slot = nullptr;
  std::memcpy(&slot,
              reinterpret_cast<const char*>(&table) + sizeof(size_t) +
                  static_cast<uint32_t>(entry) * sizeof(void*),
              sizeof(slot));
  return slot;
}

}  // namespace

TEST_CASE("the entry list names every entry of the table once, in its order", "[sdk]") {
  CHECK(hal::plugin::kEntryCount ==
        (sizeof(hal_plugin_table_v1_t) - sizeof(size_t)) / sizeof(void*));
  CHECK(hal::plugin::entry_name(Entry::plugin_shutdown) == "plugin_shutdown");
  CHECK(hal::plugin::entry_name(Entry::launch_kernel) == "launch_kernel");
  CHECK(hal::plugin::entry_name(Entry::comm_init_rank_exchange) == "comm_init_rank_exchange");
  // The parts cover every entry, each once.
  const EntrySet parts[] = {hal::plugin::kPluginEntries,     hal::plugin::kDeviceEntries,
                            hal::plugin::kMemoryEntries,     hal::plugin::kStreamEntries,
                            hal::plugin::kEventEntries,      hal::plugin::kKernelEntries,
                            hal::plugin::kCollectiveEntries, hal::plugin::kOperatorEntries};
  for (uint32_t i = 0; i < hal::plugin::kEntryCount; ++i) {
    int owners = 0;
    for (const EntrySet& part : parts) owners += part.has(static_cast<Entry>(i)) ? 1 : 0;
    INFO(hal::plugin::entry_name(static_cast<Entry>(i)));
    CHECK(owners == 1);
  }
  CHECK(hal::plugin::kKernelEntries == (EntrySet(Entry::module_load) | Entry::module_unload |
                                        Entry::kernel_get | Entry::launch_kernel));
  const EntrySet without = hal::plugin::kStreamEntries - Entry::stream_query;
  CHECK(without.has(Entry::stream_create));
  CHECK_FALSE(without.has(Entry::stream_query));
  CHECK_FALSE(without.has(Entry::event_create));
}

// ---- hal_plugin_sdk/entries.hpp --------------------------------------------

namespace {

// Plugin objects that record what reached them and fail or throw on request,
// so that each entry can be seen to reach the right object and to keep every
// exception inside.
struct Script {
  hal::plugin::ErrorReporter reporter;
  std::vector<std::string> calls;
  std::string throw_in;  // the method that throws std::bad_alloc
  int released = 0;
  int plugins_deleted = 0;
  void call(const std::string& what) {
    calls.push_back(what);
    if (what == throw_in) throw std::bad_alloc();
  }
};

struct TestStream;
struct TestEvent;
struct TestModule;

struct TestDevice {
  Script* script;
  int index;
  hal_device_properties_t props{};
  const hal::plugin::ErrorReporter& report() const { return script->reporter; }
  const hal_device_properties_t& properties() const { return props; }
  hal_result_t synchronize() {
    script->call("synchronize");
    return HAL_ERROR_DEVICE_LOST;  // the device's own answer goes back
  }
  hal_result_t allocate(hal_memory_kind_t kind, size_t size, size_t alignment, void** out) {
    script->call("allocate " + std::to_string(kind) + " " + std::to_string(size) + " " +
                 std::to_string(alignment));
    *out = this;
    return HAL_SUCCESS;
  }
  hal_result_t free(void* ptr) {
    script->call(ptr == this ? "free" : "free?");
    throw std::runtime_error("freed twice");
  }
  void release_all() {
    ++script->released;
    if (script->throw_in == "release_all") throw std::runtime_error("release failed");
  }
  void remove_stream(TestStream* stream);
  void remove_event(TestEvent* event);
  void remove_module(TestModule* module);
};

struct TestPlugin {
  Script* script;
  std::vector<std::unique_ptr<TestDevice>> devices_;
  ~TestPlugin() { ++script->plugins_deleted; }
  const std::vector<std::unique_ptr<TestDevice>>& devices() const { return devices_; }
};

struct TestStream {
  TestDevice& owner;
  TestDevice& device() const { return owner; }
  static hal_result_t create(TestDevice& device, hal_stream_flags_t flags, TestStream*& out) {
    device.script->call("stream_create " + std::to_string(flags));
    out = new TestStream{device};
    return HAL_SUCCESS;
  }
  hal_result_t copy(void*, const void*, size_t size) {
    owner.script->call("copy " + std::to_string(size));
    return HAL_SUCCESS;
  }
  void fill(void*, uint8_t value, size_t) { owner.script->call("fill " + std::to_string(value)); }
  hal_result_t synchronize() {
    owner.script->call("stream_synchronize");
    return HAL_SUCCESS;
  }
  hal_result_t query() {
    owner.script->call("query");
    return HAL_NOT_READY;
  }
  hal_result_t wait(TestEvent& event);
  hal_result_t enqueue_host_fn(hal_host_fn_t fn, void* user_data) {
    owner.script->call("host_fn");
    fn(user_data);
    return HAL_SUCCESS;
  }
};

struct TestEvent {
  TestDevice& owner;
  float stamp = 0;
  TestDevice& device() const { return owner; }
  static hal_result_t create(TestDevice& device, hal_event_flags_t flags, TestEvent*& out) {
    device.script->call("event_create " + std::to_string(flags));
    out = new TestEvent{device};
    return HAL_SUCCESS;
  }
  hal_result_t record(TestStream& stream) {
    owner.script->call(&stream.owner == &owner ? "record" : "record?");
    return HAL_SUCCESS;
  }
  hal_result_t query() { return HAL_SUCCESS; }
  hal_result_t synchronize() { return HAL_SUCCESS; }
  static hal_result_t elapsed_ms(TestEvent& start, TestEvent& end, float& out_ms) {
    out_ms = end.stamp - start.stamp;
    return HAL_SUCCESS;
  }
};

hal_result_t TestStream::wait(TestEvent& event) {
  owner.script->call(&event.owner == &owner ? "wait" : "wait?");
  return HAL_SUCCESS;
}

struct TestKernel : hal::plugin::KernelInfo {
  int id;
  TestKernel(int id_value, std::vector<hal_arg_type_t> types)
      : KernelInfo("saxpy", std::move(types), 128, 16), id(id_value) {}
  hal_result_t launch(TestStream& stream, const hal_launch_config_t& config, uint32_t arg_count,
                      const hal_kernel_arg_t*) {
    stream.owner.script->call("launch " + std::to_string(id) + " " +
                              std::to_string(config.grid[0]) + " " + std::to_string(arg_count));
    return HAL_SUCCESS;
  }
};

struct TestModule {
  TestDevice& owner;
  TestKernel kernel{7, {HAL_ARG_POINTER, HAL_ARG_F32}};
  TestDevice& device() const { return owner; }
  static hal_result_t load(TestDevice& device, const hal_module_desc_t& desc, TestModule*& out) {
    device.script->call(std::string("load ") + desc.path);
    if (desc.size == 0) return device.report().fail(HAL_ERROR_INVALID_MODULE, 0, "empty");
    out = new TestModule{device};
    return HAL_SUCCESS;
  }
  hal_result_t get_kernel(const hal_kernel_desc_t& desc, TestKernel*& out) {
    owner.script->call(std::string("kernel ") + desc.name);
    out = &kernel;
    return HAL_SUCCESS;
  }
};

void TestDevice::remove_stream(TestStream* stream) {
  script->call("remove_stream");
  delete stream;
}
void TestDevice::remove_event(TestEvent* event) {
  delete event;
}
void TestDevice::remove_module(TestModule* module) {
  script->call("remove_module");
  delete module;
}

struct TestComm {
  TestDevice& owner;
  uint32_t rank;
  TestDevice& device() const { return owner; }
  static hal_result_t init_local(std::span<TestDevice* const> devices, const hal_comm_config_t&,
                                 std::vector<std::unique_ptr<TestComm>>& out) {
    for (uint32_t i = 0; i < devices.size(); ++i) {
      out.push_back(std::make_unique<TestComm>(TestComm{*devices[i], i}));
    }
    return HAL_SUCCESS;
  }
  static hal_result_t init_rank(TestDevice&, uint32_t, uint32_t, const hal_comm_config_t&,
                                TestComm*&) {
    return HAL_ERROR_UNSUPPORTED;  // the loader's path, without set_error
  }
  static hal_result_t init_rank_exchange(TestDevice& device, uint32_t, uint32_t rank,
                                         const hal_comm_config_t&,
                                         const hal_comm_exchange_t& exchange, TestComm*& out) {
    uint32_t value = rank;
    if (hal_result_t sent = exchange.broadcast(exchange.context, 0, &value, sizeof(value));
        sent != HAL_SUCCESS) {
      return sent;
    }
    out = new TestComm{device, value};
    return HAL_SUCCESS;
  }
  void destroy() { owner.script->call("comm_destroy " + std::to_string(rank)); }
  void abort() {
    owner.script->call("abort");
    throw std::runtime_error("abort failed");
  }
  hal_result_t error() { return HAL_ERROR_REMOTE; }
  hal_result_t enqueue(TestStream&, std::span<const hal_collective_call_t> calls) {
    owner.script->call("enqueue " + std::to_string(calls.size()));
    return HAL_SUCCESS;
  }
};

struct TestPlan {
  static const char* implementation(hal_op_kind_t kind) {
    return kind == HAL_OP_MATMUL ? "test.plan" : nullptr;
  }
  static hal_result_t create(TestDevice& device, const hal_op_header_t& desc, hal_op_plan_flags_t,
                             std::unique_ptr<TestPlan>& out, size_t& workspace,
                             const char*& implementation) {
    if (desc.kind != HAL_OP_MATMUL) {
      return device.report().fail(HAL_ERROR_UNSUPPORTED, 0, "only matmul");
    }
    out = std::make_unique<TestPlan>();
    workspace = 64;
    implementation = "test.plan";
    return HAL_SUCCESS;
  }
  hal_result_t enqueue(TestStream& stream, const hal_op_exec_args_t&) const {
    stream.owner.script->call("execute");
    return HAL_SUCCESS;
  }
};

using TestEntries = hal::plugin::ObjectEntries<TestPlugin, TestDevice, TestStream, TestEvent,
                                               TestModule, TestKernel, TestComm, TestPlan>;
constexpr EntrySet kEverything =
    hal::plugin::kCoreEntries | hal::plugin::kCollectiveEntries | hal::plugin::kOperatorEntries;

}  // namespace

TEST_CASE("make_table sets exactly the entries a plugin implements", "[sdk]") {
  constexpr EntrySet kSome = hal::plugin::kCoreEntries - Entry::stream_enqueue_host_fn;
  constexpr hal_plugin_table_v1_t table = hal::plugin::make_table<TestEntries, kSome>();
  static_assert(table.struct_size == sizeof(hal_plugin_table_v1_t));
  for (uint32_t i = 0; i < hal::plugin::kEntryCount; ++i) {
    const auto entry = static_cast<Entry>(i);
    INFO(hal::plugin::entry_name(entry));
    CHECK((entry_at(table, entry) != nullptr) == kSome.has(entry));
  }
  // Each entry at its own place: the table calls what its name says.
  CHECK(table.stream_query == &TestEntries::stream_query);
  CHECK(table.device_count == &TestEntries::device_count);
  constexpr hal_plugin_table_v1_t all = hal::plugin::make_table<TestEntries, kEverything>();
  for (uint32_t i = 0; i < hal::plugin::kEntryCount; ++i) {
    INFO(hal::plugin::entry_name(static_cast<Entry>(i)));
    CHECK(entry_at(all, static_cast<Entry>(i)) != nullptr);
  }
  CHECK(all.comm_init_rank_exchange == &TestEntries::comm_init_rank_exchange);
}

TEST_CASE("the object entries cast, call the object's method and keep exceptions in", "[sdk]") {
  Fixture f;
  Script script;
  script.reporter = hal::plugin::ErrorReporter(&f.host);
  auto* plugin = new TestPlugin{&script, {}};
  for (int i = 0; i < 2; ++i) {
    plugin->devices_.push_back(std::make_unique<TestDevice>(TestDevice{&script, i}));
  }
  constexpr hal_plugin_table_v1_t t = hal::plugin::make_table<TestEntries, kEverything>();
  auto* context = reinterpret_cast<hal_plugin_context_t*>(plugin);

  uint32_t count = 0;
  REQUIRE(t.device_count(context, &count) == HAL_SUCCESS);
  REQUIRE(count == 2);
  hal_impl_device_t* devices[2] = {};
  for (uint32_t i = 0; i < count; ++i)
    REQUIRE(t.device_open(context, i, &devices[i]) == HAL_SUCCESS);
  CHECK(reinterpret_cast<TestDevice*>(devices[1])->index == 1);

  SECTION("device and memory") {
    plugin->devices_[0]->props.struct_size = sizeof(hal_device_properties_t);
    std::memset(plugin->devices_[0]->props.name, 'g', 8);
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    CHECK(t.device_get_properties(devices[0], &properties) == HAL_SUCCESS);
    CHECK(std::string(properties.name, 8) == "gggggggg");
    CHECK(t.device_synchronize(devices[0]) == HAL_ERROR_DEVICE_LOST);
    void* allocation = nullptr;
    CHECK(t.mem_alloc(devices[1], HAL_MEMORY_HOST, 4096, 256, &allocation) == HAL_SUCCESS);
    CHECK(allocation == devices[1]);
    script.throw_in = "allocate " + std::to_string(HAL_MEMORY_DEVICE) + " 1 64";
    CHECK(t.mem_alloc(devices[1], HAL_MEMORY_DEVICE, 1, 64, &allocation) ==
          HAL_ERROR_OUT_OF_MEMORY);
    CHECK(f.recorded.message == "mem_alloc: the host is out of memory");
    CHECK(t.mem_free(devices[1], devices[1]) == HAL_ERROR_INTERNAL);
    CHECK(f.recorded.message == "mem_free: unexpected exception: freed twice");
    t.device_close(devices[0]);
    script.throw_in = "release_all";
    t.device_close(devices[0]);  // dropped: device_close returns nothing
    CHECK(script.released == 2);
  }

  SECTION("streams, events, modules and launches") {
    hal_impl_stream_t* stream = nullptr;
    REQUIRE(t.stream_create(devices[1], 0, &stream) == HAL_SUCCESS);
    CHECK(&reinterpret_cast<TestStream*>(stream)->owner == plugin->devices_[1].get());
    CHECK(t.memcpy_async(stream, nullptr, nullptr, 48) == HAL_SUCCESS);
    CHECK(t.memset_async(stream, nullptr, 9, 1) == HAL_SUCCESS);  // a void method: success
    CHECK(t.stream_query(stream) == HAL_NOT_READY);
    hal_impl_event_t* start = nullptr;
    hal_impl_event_t* end = nullptr;
    REQUIRE(t.event_create(devices[1], HAL_EVENT_FLAG_TIMING, &start) == HAL_SUCCESS);
    REQUIRE(t.event_create(devices[1], HAL_EVENT_FLAG_TIMING, &end) == HAL_SUCCESS);
    reinterpret_cast<TestEvent*>(end)->stamp = 2.5f;
    CHECK(t.event_record(end, stream) == HAL_SUCCESS);
    CHECK(t.stream_wait_event(stream, end) == HAL_SUCCESS);
    float ms = 0;
    CHECK(t.event_elapsed_ms(start, end, &ms) == HAL_SUCCESS);
    CHECK(ms == 2.5f);
    int ran = 0;
    CHECK(t.stream_enqueue_host_fn(
              stream, [](void* n) { ++*static_cast<int*>(n); }, &ran) == HAL_SUCCESS);
    CHECK(ran == 1);

    hal_module_desc_t desc{};
    desc.path = "k.so";
    hal_impl_module_t* module = nullptr;
    CHECK(t.module_load(devices[1], &desc, &module) == HAL_ERROR_INVALID_MODULE);
    CHECK(module == nullptr);  // a failed create hands out nothing
    CHECK(f.recorded.message == "empty");
    desc.size = 1;
    REQUIRE(t.module_load(devices[1], &desc, &module) == HAL_SUCCESS);
    hal_kernel_desc_t kernel_desc{};
    kernel_desc.name = "saxpy";
    hal_impl_kernel_t* kernel = nullptr;
    hal_kernel_info_t info{};
    info.struct_size = sizeof(info);
    REQUIRE(t.kernel_get(module, &kernel_desc, &kernel, &info) == HAL_SUCCESS);
    CHECK(reinterpret_cast<TestKernel*>(kernel)->id == 7);
    // The entry reports what the kernel is bound to.
    CHECK(std::string(info.name) == "saxpy");
    CHECK(info.arg_count == 2);
    CHECK(info.arg_types[1] == HAL_ARG_F32);
    CHECK(info.max_threads_per_block == 128);
    CHECK(info.static_shared_memory_bytes == 16);
    REQUIRE(t.kernel_get(module, &kernel_desc, &kernel, nullptr) == HAL_SUCCESS);
    hal_launch_config_t config{};
    config.grid[0] = 5;
    CHECK(t.launch_kernel(stream, kernel, &config, 0, nullptr) == HAL_SUCCESS);
    CHECK(t.module_unload(module) == HAL_SUCCESS);

    script.throw_in = "stream_synchronize";
    CHECK(t.stream_synchronize(stream) == HAL_ERROR_OUT_OF_MEMORY);
    CHECK(f.recorded.message == "stream_synchronize: the host is out of memory");
    CHECK(t.event_destroy(start) == HAL_SUCCESS);
    CHECK(t.event_destroy(end) == HAL_SUCCESS);
    CHECK(t.stream_destroy(stream) == HAL_SUCCESS);
    CHECK(script.calls == std::vector<std::string>{
                              "stream_create 0", "copy 48", "fill 9", "query", "event_create 1",
                              "event_create 1", "record", "wait", "host_fn", "load k.so",
                              "load k.so", "kernel saxpy", "kernel saxpy", "launch 7 5 0",
                              "remove_module", "stream_synchronize", "remove_stream"});
  }

  SECTION("collectives and operators") {
    hal_impl_stream_t* stream = nullptr;
    REQUIRE(t.stream_create(devices[0], 0, &stream) == HAL_SUCCESS);
    hal_comm_config_t config{};
    hal_impl_comm_t* comms[2] = {};
    REQUIRE(t.comm_init_local(2, devices, &config, comms) == HAL_SUCCESS);
    CHECK(&reinterpret_cast<TestComm*>(comms[1])->owner == plugin->devices_[1].get());
    CHECK(reinterpret_cast<TestComm*>(comms[1])->rank == 1);
    hal_impl_comm_t* rank = nullptr;
    CHECK(t.comm_init_rank(devices[0], 2, 0, &config, &rank) == HAL_ERROR_UNSUPPORTED);
    CHECK(rank == nullptr);
    struct Root {
      static hal_result_t broadcast(void*, uint32_t, void* data, size_t) {
        *static_cast<uint32_t*>(data) = 5;  // rank 0's value reaches this rank
        return HAL_SUCCESS;
      }
    };
    const hal_comm_exchange_t exchange{sizeof(hal_comm_exchange_t), nullptr, Root::broadcast};
    REQUIRE(t.comm_init_rank_exchange(devices[1], 2, 1, &config, &exchange, &rank) == HAL_SUCCESS);
    CHECK(reinterpret_cast<TestComm*>(rank)->rank == 5);
    CHECK(&reinterpret_cast<TestComm*>(rank)->owner == plugin->devices_[1].get());
    CHECK(t.comm_destroy(rank) == HAL_SUCCESS);
    const hal_collective_call_t calls[3] = {};
    CHECK(t.comm_enqueue(comms[0], stream, 3, calls) == HAL_SUCCESS);
    CHECK(t.comm_get_async_error(comms[0]) == HAL_ERROR_REMOTE);
    t.comm_abort(comms[0]);  // its exception stays inside
    CHECK(t.comm_destroy(comms[0]) == HAL_SUCCESS);
    CHECK(t.comm_destroy(comms[1]) == HAL_SUCCESS);

    hal_op_header_t op{};
    op.kind = HAL_OP_SOFTMAX;
    hal_impl_op_plan_t* plan = nullptr;
    size_t workspace = 0;
    const char* implementation = nullptr;
    CHECK(t.op_plan_create(devices[0], &op, 0, &plan, &workspace, &implementation) ==
          HAL_ERROR_UNSUPPORTED);
    CHECK(f.recorded.message == "only matmul");
    op.kind = HAL_OP_MATMUL;
    REQUIRE(t.op_plan_create(devices[0], &op, 0, &plan, &workspace, &implementation) ==
            HAL_SUCCESS);
    CHECK(workspace == 64);
    CHECK(std::string(implementation) == "test.plan");
    const hal_op_exec_args_t args{};
    CHECK(t.op_execute(plan, stream, &args) == HAL_SUCCESS);
    CHECK(t.op_plan_destroy(plan) == HAL_SUCCESS);
    CHECK(t.stream_destroy(stream) == HAL_SUCCESS);
    CHECK(script.calls == std::vector<std::string>{"stream_create 0", "comm_destroy 5", "enqueue 3",
                                                   "abort", "comm_destroy 0", "comm_destroy 1",
                                                   "execute", "remove_stream"});
  }

  // plugin_shutdown: every device released (a failure dropped), then the plugin deleted.
  script.throw_in = "release_all";
  const int released = script.released;
  t.plugin_shutdown(context);
  CHECK(script.released == released + 1);  // the first device threw: the rest is dropped too
  CHECK(script.plugins_deleted == 1);
}

// ---- hal_plugin_sdk/objects.hpp, allocations.hpp, module_image.hpp, uuid.hpp

namespace {

// Records, in |order|, when an object of kind |name| is destroyed.
struct Tracked {
  std::vector<std::string>* order;
  std::string name;
  ~Tracked() { order->push_back(name); }
};
struct TrackedStream : Tracked {};
struct TrackedEvent : Tracked {};
struct TrackedModule : Tracked {};

struct TrackedDevice : hal::plugin::DeviceBase<TrackedStream, TrackedEvent, TrackedModule> {
  using DeviceBase::DeviceBase;
};

}  // namespace

TEST_CASE("a device's objects go when they are removed or the device releases them", "[sdk]") {
  std::vector<std::string> order;
  TrackedDevice device{hal::plugin::ErrorReporter()};
  TrackedModule* module =
      device.add_module(std::make_unique<TrackedModule>(TrackedModule{{&order, "module"}}));
  device.add_event(std::make_unique<TrackedEvent>(TrackedEvent{{&order, "event"}}));
  TrackedStream* kept =
      device.add_stream(std::make_unique<TrackedStream>(TrackedStream{{&order, "stream 1"}}));
  device.add_stream(std::make_unique<TrackedStream>(TrackedStream{{&order, "stream 2"}}));
  order.clear();  // the temporaries moved from
  device.remove_stream(kept);
  CHECK(order == std::vector<std::string>{"stream 1"});
  int streams = 0;
  device.for_each_stream([&](const std::unique_ptr<TrackedStream>&) { ++streams; });
  CHECK(streams == 1);
  device.remove_module(module);
  device.remove_module(module);  // not there any more: nothing happens
  CHECK(order == std::vector<std::string>{"stream 1", "module"});
  // Streams first: their work may use the events and modules.
  device.add_module(std::make_unique<TrackedModule>(TrackedModule{{&order, "module 2"}}));
  order.clear();
  device.release_all();
  CHECK(order == std::vector<std::string>{"stream 2", "event", "module 2"});
  device.release_all();
  CHECK(order.size() == 3);
}

TEST_CASE("allocations carve an over-aligned block and give back its base and kind", "[sdk]") {
  hal::plugin::Allocations allocations(256);
  CHECK(allocations.block_bytes(1000, 64) == 1000);          // the driver's alignment serves it
  CHECK(allocations.block_bytes(1000, 4096) == 5096);        // room to align inside
  CHECK(allocations.block_bytes(SIZE_MAX - 10, 4096) == 0);  // overflow: refused
  alignas(4096) static char arena[3 * 4096];
  void* base = arena + 256;  // aligned to 256, not to 4096
  void* ptr = allocations.add(HAL_MEMORY_HOST, base, 4096);
  CHECK(reinterpret_cast<uintptr_t>(ptr) % 4096 == 0);
  CHECK(static_cast<char*>(ptr) >= static_cast<char*>(base));
  CHECK(static_cast<char*>(ptr) + 1000 <= static_cast<char*>(base) + 5096);
  void* plain = allocations.add(HAL_MEMORY_DEVICE, arena, 64);
  CHECK(plain == arena);
  hal::plugin::Allocations::Block block{};
  CHECK_FALSE(allocations.take(base, block));  // the caller's pointer, not the base
  REQUIRE(allocations.take(ptr, block));
  CHECK(block.base == base);
  CHECK(block.kind == HAL_MEMORY_HOST);
  CHECK_FALSE(allocations.take(ptr, block));  // once
  const auto left = allocations.take_all();
  REQUIRE(left.size() == 1);
  CHECK(left[0].base == arena);
  CHECK(left[0].kind == HAL_MEMORY_DEVICE);
  CHECK(allocations.take_all().empty());
}

TEST_CASE("a module's image comes from memory or its file", "[sdk]") {
  Fixture f;
  const hal::plugin::ErrorReporter report(&f.host);
  const char text[] = "kernel\0tail";
  hal_module_desc_t desc{};
  desc.data = text;
  desc.size = sizeof(text);
  std::string image;
  REQUIRE(hal::plugin::read_module_image(desc, report, image) == HAL_SUCCESS);
  CHECK(image.size() == sizeof(text));  // binary: every byte
  REQUIRE(hal::plugin::read_module_image(desc, report, image, true) == HAL_SUCCESS);
  CHECK(image == "kernel");  // text: up to the NUL

  std::mt19937 random(11);
  std::string bytes(3000, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  const std::string path = "sdk_test_module_image.bin";
  {
    std::FILE* file = std::fopen(path.c_str(), "wb");
    REQUIRE(file != nullptr);
    REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size());
    std::fclose(file);
  }
  hal_module_desc_t from_file{};
  from_file.path = path.c_str();
  REQUIRE(hal::plugin::read_module_image(from_file, report, image, true) == HAL_SUCCESS);
  CHECK(image == bytes);  // a file is read whole, NULs included
  std::remove(path.c_str());
  CHECK(hal::plugin::read_module_image(from_file, report, image) == HAL_ERROR_NOT_FOUND);
  CHECK(f.recorded.message.find("cannot read 'sdk_test_module_image.bin'") != std::string::npos);
}

TEST_CASE("a uuid from a name is stable and tells names apart", "[sdk]") {
  uint8_t first[16] = {}, again[16] = {}, other[16] = {};
  hal::plugin::uuid_from_name("hal-opencl/Portable/cpu/0", first);
  hal::plugin::uuid_from_name("hal-opencl/Portable/cpu/0", again);
  hal::plugin::uuid_from_name("hal-opencl/Portable/cpu/1", other);
  CHECK(std::memcmp(first, again, 16) == 0);
  CHECK(std::memcmp(first, other, 16) != 0);
  // FNV-1a, the published reference value of "a" (64-bit offset basis).
  CHECK(hal::plugin::fnv1a("a", 0) == 0xaf63dc4c8601ec8cull);
}
