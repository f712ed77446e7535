// A stand-in Level Zero driver for the level_zero plugin's tests: the real
// loader (libze_loader.so.1) opens it through ZE_ENABLE_ALT_DRIVERS and takes
// its entry points from the DDI table getters below, as from a vendor's
// driver. Two GPUs with fixed properties; USM memory from the host heap;
// each immediate command list runs its commands in order on a thread of its
// own; events and timestamps on the host clock; SPIR-V modules parsed for
// their entry points and parameter counts (no code runs); every launch
// recorded with its arguments as set at the append. The command lists,
// memory and launch records are the stand-ins' shared bookkeeping
// (tests/fake_vendor).
#include <ze_ddi.h>
#include <zes_ddi.h>
#include <zet_ddi.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fake_driver.h"
#include "fake_vendor.hpp"

namespace {

constexpr uint32_t kDeviceCount = 2;
constexpr size_t kMaxFillPattern = 16;
constexpr uint32_t kMaxGroupSize = 1024;

struct Event;

// 16 GiB, as a data-centre GPU declares; HAL_FAKE_ZE_MEMORY_MB=<n> declares less, for a
// certification run whose memory tests allocate and touch all of it (host memory here).
uint64_t declared_memory_bytes() {
  if (const char* megabytes = std::getenv("HAL_FAKE_ZE_MEMORY_MB")) {
    // Whole megabytes from 1 MiB to 16 TiB; anything else (not a number, 0, a size whose bytes
    // would not fit) leaves the default.
    char* end = nullptr;
    const unsigned long long value = std::strtoull(megabytes, &end, 10);
    if (end != megabytes && *end == '\0' && value > 0 && value <= (1ull << 24)) {
      return uint64_t{value} << 20;
    }
  }
  return uint64_t{16} << 30;
}

// One block may be as large as the memory, at most FAKE_ZE_MAX_ALLOC_BYTES.
uint64_t max_allocation_bytes() {
  const uint64_t total = declared_memory_bytes();
  return total < FAKE_ZE_MAX_ALLOC_BYTES ? total : FAKE_ZE_MAX_ALLOC_BYTES;
}

// All of the driver's state, under one lock (a test driver: simple beats
// fast); the host's signal: an event signalled, pause lifted, work queued.
struct State : fake_vendor::Host {
  std::map<std::string, long> live;  // guarded by the lock
  fake_vendor::LaunchLog<fake_ze_launch_t> launches{*this};
};

State& state() {
  static State* instance = new State();  // never destroyed: list threads may outlive exit
  return *instance;
}

void count(const char* what, long delta) {
  std::lock_guard lock(state().mutex);
  state().live[what] += delta;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

struct Driver {
  int tag = 0;
};
Driver g_driver;

struct Device {
  uint32_t index = 0;
};
Device g_devices[kDeviceCount] = {{0}, {1}};

Device* device_of(ze_device_handle_t handle) {
  for (auto& device : g_devices) {
    if (reinterpret_cast<ze_device_handle_t>(&device) == handle) return &device;
  }
  return nullptr;
}

struct NoInfo {};
using Heap = fake_vendor::Heap<NoInfo>;

struct Context {
  Heap allocations;  // guarded by the lock
};

struct EventPool {
  uint32_t count = 0;
  bool timestamps = false;
};

struct Event {
  EventPool* pool = nullptr;
  bool signaled = false;  // guarded by the lock
  uint64_t stamp = 0;     // guarded by the lock
};

void signal_locked(Event* event) {
  event->signaled = true;
  event->stamp = now_ns();
  state().changed.notify_all();
}

// An immediate command list: its commands in order on a thread of its own;
// deleting it runs what is queued, then joins.
struct CommandList : fake_vendor::Stream {
  CommandList() : Stream(state(), next_id++) {}
  static inline std::atomic<uint64_t> next_id{1};
};

// SPIR-V as far as the driver needs it: entry point names and the
// parameter count of each entry's function.
struct Module {
  std::map<std::string, uint32_t> kernels;
};

struct Kernel {
  std::string name;
  uint32_t arg_count = 0;
  uint32_t group_size[3] = {1, 1, 1};
  std::vector<std::vector<uint8_t>> args;  // guarded by the plugin's launch lock
  std::vector<size_t> local_sizes;         // non-zero: a __local argument
};

struct BuildLog {
  std::string text;
};

// ---- global, driver, device -------------------------------------------------

ze_result_t fake_init(ze_init_flags_t flags) {
  if (flags != 0 && (flags & ZE_INIT_FLAG_GPU_ONLY) == 0) return ZE_RESULT_ERROR_UNINITIALIZED;
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_driver_get(uint32_t* count, ze_driver_handle_t* drivers) {
  if (count == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (*count == 0 || drivers == nullptr) {
    *count = 1;
    return ZE_RESULT_SUCCESS;
  }
  drivers[0] = reinterpret_cast<ze_driver_handle_t>(&g_driver);
  *count = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_driver_api_version(ze_driver_handle_t, ze_api_version_t* version) {
  *version = ZE_API_VERSION_1_4;
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_driver_properties(ze_driver_handle_t, ze_driver_properties_t* properties) {
  properties->driverVersion = 23456;
  std::memset(properties->uuid.id, 0x5a, sizeof(properties->uuid.id));
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_device_get(ze_driver_handle_t, uint32_t* count, ze_device_handle_t* devices) {
  if (*count == 0 || devices == nullptr) {
    *count = kDeviceCount;
    return ZE_RESULT_SUCCESS;
  }
  const uint32_t n = std::min(*count, kDeviceCount);
  for (uint32_t i = 0; i < n; ++i) devices[i] = reinterpret_cast<ze_device_handle_t>(&g_devices[i]);
  *count = n;
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_device_properties(ze_device_handle_t handle, ze_device_properties_t* out) {
  const Device* device = device_of(handle);
  if (device == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  out->type = ZE_DEVICE_TYPE_GPU;
  out->vendorId = 0x8086;
  out->deviceId = 0x0bd5;
  std::memset(out->uuid.id, 0, sizeof(out->uuid.id));
  out->uuid.id[0] = 0xf0;
  out->uuid.id[15] = static_cast<uint8_t>(device->index);
  out->coreClockRate = 1600;  // MHz
  out->maxMemAllocSize = max_allocation_bytes();
  out->maxHardwareContexts = 64;
  out->numThreadsPerEU = 8;
  out->physicalEUSimdWidth = 8;
  out->numEUsPerSubslice = 8;
  out->numSubslicesPerSlice = 4;
  out->numSlices = 2;
  out->timerResolution = 1;  // ns per tick
  out->timestampValidBits = 64;
  out->kernelTimestampValidBits = 64;
  std::snprintf(out->name, sizeof(out->name), "HAL stand-in Level Zero GPU %u", device->index);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_device_compute(ze_device_handle_t, ze_device_compute_properties_t* out) {
  out->maxTotalGroupSize = kMaxGroupSize;
  out->maxGroupSizeX = kMaxGroupSize;
  out->maxGroupSizeY = kMaxGroupSize;
  out->maxGroupSizeZ = 64;
  out->maxGroupCountX = 0x7fffffff;
  out->maxGroupCountY = 65535;
  out->maxGroupCountZ = 65535;
  out->maxSharedLocalMemory = 65536;
  out->numSubGroupSizes = 3;
  out->subGroupSizes[0] = 8;
  out->subGroupSizes[1] = 16;
  out->subGroupSizes[2] = 32;
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_device_memory(ze_device_handle_t, uint32_t* count,
                               ze_device_memory_properties_t* out) {
  if (*count == 0 || out == nullptr) {
    *count = 1;
    return ZE_RESULT_SUCCESS;
  }
  out[0].maxClockRate = 1000;  // MHz
  out[0].maxBusWidth = 256;    // bits
  out[0].totalSize = declared_memory_bytes();
  std::snprintf(out[0].name, sizeof(out[0].name), "HBM");
  *count = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_device_access(ze_device_handle_t, ze_device_memory_access_properties_t* out) {
  const ze_memory_access_cap_flags_t rw = ZE_MEMORY_ACCESS_CAP_FLAG_RW;
  out->hostAllocCapabilities = rw;
  out->deviceAllocCapabilities = rw;
  out->sharedSingleDeviceAllocCapabilities = rw;
  out->sharedCrossDeviceAllocCapabilities = 0;
  out->sharedSystemAllocCapabilities = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_device_queue_groups(ze_device_handle_t, uint32_t* count,
                                     ze_command_queue_group_properties_t* out) {
  // A copy engine first, so the plugin has to look for the compute group.
  if (*count == 0 || out == nullptr) {
    *count = 2;
    return ZE_RESULT_SUCCESS;
  }
  const uint32_t n = std::min(*count, 2u);
  for (uint32_t i = 0; i < n; ++i) {
    out[i].flags = i == 0 ? ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY
                          : ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE |
                                ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
    out[i].maxMemoryFillPatternSize = kMaxFillPattern;
    out[i].numQueues = 1;
  }
  *count = n;
  return ZE_RESULT_SUCCESS;
}

// ---- context and memory -------------------------------------------------------

ze_result_t fake_context_create(ze_driver_handle_t, const ze_context_desc_t*,
                                ze_context_handle_t* out) {
  *out = reinterpret_cast<ze_context_handle_t>(new Context());
  count("contexts", 1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_context_destroy(ze_context_handle_t handle) {
  std::unique_ptr<Context> context(reinterpret_cast<Context*>(handle));
  {
    std::lock_guard lock(state().mutex);
    state().live["allocations"] -= static_cast<long>(context->allocations.size());
    context->allocations.clear();
  }
  count("contexts", -1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t allocate(ze_context_handle_t handle, size_t size, size_t alignment, void** out) {
  if (out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (size == 0) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  if (size > max_allocation_bytes()) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  if (size == FAKE_ZE_OOM_BYTES) return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
  if ((alignment & (alignment - 1)) != 0) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  void* ptr = Heap::reserve(size, std::max<size_t>(alignment, 64));
  if (ptr == nullptr) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  auto* context = reinterpret_cast<Context*>(handle);
  std::lock_guard lock(state().mutex);
  context->allocations.add(ptr, size, NoInfo{});
  state().live["allocations"] += 1;
  *out = ptr;
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_alloc_device(ze_context_handle_t context, const ze_device_mem_alloc_desc_t*,
                              size_t size, size_t alignment, ze_device_handle_t device,
                              void** out) {
  if (device_of(device) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return allocate(context, size, alignment, out);
}

ze_result_t fake_alloc_host(ze_context_handle_t context, const ze_host_mem_alloc_desc_t*,
                            size_t size, size_t alignment, void** out) {
  return allocate(context, size, alignment, out);
}

ze_result_t fake_alloc_shared(ze_context_handle_t context, const ze_device_mem_alloc_desc_t*,
                              const ze_host_mem_alloc_desc_t*, size_t size, size_t alignment,
                              ze_device_handle_t device, void** out) {
  if (device != nullptr && device_of(device) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return allocate(context, size, alignment, out);
}

ze_result_t fake_free(ze_context_handle_t handle, void* ptr) {
  auto* context = reinterpret_cast<Context*>(handle);
  std::lock_guard lock(state().mutex);
  if (!context->allocations.release(ptr)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  state().live["allocations"] -= 1;
  return ZE_RESULT_SUCCESS;
}

// ---- command lists ------------------------------------------------------------

CommandList* list_of(ze_command_list_handle_t handle) {
  return reinterpret_cast<CommandList*>(handle);
}

Event* event_of(ze_event_handle_t handle) {
  return reinterpret_cast<Event*>(handle);
}

ze_result_t fake_list_create_immediate(ze_context_handle_t, ze_device_handle_t device,
                                       const ze_command_queue_desc_t* desc,
                                       ze_command_list_handle_t* out) {
  if (device_of(device) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc->ordinal != 1) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // the compute group
  *out = reinterpret_cast<ze_command_list_handle_t>(new CommandList());
  count("command_lists", 1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_list_destroy(ze_command_list_handle_t handle) {
  delete list_of(handle);  // runs what is queued, then joins
  count("command_lists", -1);
  return ZE_RESULT_SUCCESS;
}

// The optional signal event of an append, after the command.
void push(ze_command_list_handle_t handle, std::function<void()> run, ze_event_handle_t signal) {
  Event* event = event_of(signal);
  list_of(handle)->push([run = std::move(run), event] {
    if (run) run();
    if (event != nullptr) {
      std::lock_guard lock(state().mutex);
      signal_locked(event);
    }
  });
}

ze_result_t fake_append_copy(ze_command_list_handle_t list, void* dst, const void* src, size_t size,
                             ze_event_handle_t signal, uint32_t wait_count, ze_event_handle_t*) {
  if (dst == nullptr || src == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (wait_count != 0) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
  push(
      list, [=] { std::memmove(dst, src, size); }, signal);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_append_fill(ze_command_list_handle_t list, void* dst, const void* pattern,
                             size_t pattern_size, size_t size, ze_event_handle_t signal,
                             uint32_t wait_count, ze_event_handle_t*) {
  if (dst == nullptr || pattern == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (pattern_size == 0 || pattern_size > kMaxFillPattern ||
      (pattern_size & (pattern_size - 1)) != 0) {
    return ZE_RESULT_ERROR_INVALID_SIZE;
  }
  if (wait_count != 0) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
  // Read when the fill runs, as a device would: the plugin must keep it.
  const auto* bytes = static_cast<const uint8_t*>(pattern);
  push(
      list,
      [=] {
        auto* out = static_cast<uint8_t*>(dst);
        for (size_t i = 0; i < size; ++i) out[i] = bytes[i % pattern_size];
      },
      signal);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_append_barrier(ze_command_list_handle_t list, ze_event_handle_t signal,
                                uint32_t wait_count, ze_event_handle_t*) {
  if (wait_count != 0) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
  count("barriers", 1);
  push(list, nullptr, signal);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_append_signal(ze_command_list_handle_t list, ze_event_handle_t event) {
  if (event == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  push(list, nullptr, event);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_append_wait(ze_command_list_handle_t list, uint32_t wait_count,
                             ze_event_handle_t* events) {
  if (events == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  for (uint32_t i = 0; i < wait_count; ++i) {
    Event* event = event_of(events[i]);
    list_of(list)->push(nullptr, [event] { return event->signaled; });
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_append_reset(ze_command_list_handle_t list, ze_event_handle_t handle) {
  Event* event = event_of(handle);
  list_of(list)->push([event] {
    std::lock_guard lock(state().mutex);
    event->signaled = false;
  });
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_append_launch(ze_command_list_handle_t list, ze_kernel_handle_t handle,
                               const ze_group_count_t* groups, ze_event_handle_t signal,
                               uint32_t wait_count, ze_event_handle_t*) {
  if (groups == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (wait_count != 0) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
  const auto* kernel = reinterpret_cast<const Kernel*>(handle);
  fake_ze_launch_t launch{};
  std::snprintf(launch.name, sizeof(launch.name), "%s", kernel->name.c_str());
  launch.group_count[0] = groups->groupCountX;
  launch.group_count[1] = groups->groupCountY;
  launch.group_count[2] = groups->groupCountZ;
  std::memcpy(launch.group_size, kernel->group_size, sizeof(launch.group_size));
  launch.arg_count = kernel->arg_count;
  size_t at = 0;
  for (uint32_t i = 0; i < kernel->arg_count && i < 32; ++i) {
    if (kernel->local_sizes[i] != 0) {
      launch.local_args |= 1u << i;
      launch.arg_sizes[i] = static_cast<uint32_t>(kernel->local_sizes[i]);
      continue;
    }
    const auto& value = kernel->args[i];
    if (value.empty()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // never set
    launch.arg_sizes[i] = static_cast<uint32_t>(value.size());
    if (at + value.size() <= sizeof(launch.args))
      std::memcpy(launch.args + at, value.data(), value.size());
    at += value.size();
  }
  launch.list_id = list_of(list)->id;
  state().launches.add(launch);
  push(list, nullptr, signal);
  return ZE_RESULT_SUCCESS;
}

// ---- events -------------------------------------------------------------------

ze_result_t fake_pool_create(ze_context_handle_t, const ze_event_pool_desc_t* desc, uint32_t,
                             ze_device_handle_t*, ze_event_pool_handle_t* out) {
  if (desc->count == 0) return ZE_RESULT_ERROR_INVALID_SIZE;
  auto* pool = new EventPool();
  pool->count = desc->count;
  pool->timestamps = (desc->flags & ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP) != 0;
  *out = reinterpret_cast<ze_event_pool_handle_t>(pool);
  count("event_pools", 1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_pool_destroy(ze_event_pool_handle_t pool) {
  delete reinterpret_cast<EventPool*>(pool);
  count("event_pools", -1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_event_create(ze_event_pool_handle_t handle, const ze_event_desc_t* desc,
                              ze_event_handle_t* out) {
  auto* pool = reinterpret_cast<EventPool*>(handle);
  if (desc->index >= pool->count) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  auto* event = new Event();
  event->pool = pool;
  *out = reinterpret_cast<ze_event_handle_t>(event);
  count("events", 1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_event_destroy(ze_event_handle_t event) {
  delete event_of(event);
  count("events", -1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_event_signal(ze_event_handle_t event) {
  std::lock_guard lock(state().mutex);
  signal_locked(event_of(event));
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_event_reset(ze_event_handle_t event) {
  std::lock_guard lock(state().mutex);
  event_of(event)->signaled = false;
  state().live["event_resets"] += 1;  // every zeEventHostReset, for the tests
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_event_synchronize(ze_event_handle_t handle, uint64_t timeout_ns) {
  Event* event = event_of(handle);
  std::unique_lock lock(state().mutex);
  if (timeout_ns == UINT64_MAX) {
    // Paused work stays paused: the plugin's host function threads wait
    // here too. A test lifts the pause before it synchronises.
    state().changed.wait(lock, [&] { return event->signaled; });
    return ZE_RESULT_SUCCESS;
  }
  const bool signaled = state().changed.wait_for(lock, std::chrono::nanoseconds(timeout_ns),
                                                 [&] { return event->signaled; });
  return signaled ? ZE_RESULT_SUCCESS : ZE_RESULT_NOT_READY;
}

ze_result_t fake_event_query(ze_event_handle_t event) {
  std::lock_guard lock(state().mutex);
  return event_of(event)->signaled ? ZE_RESULT_SUCCESS : ZE_RESULT_NOT_READY;
}

ze_result_t fake_event_timestamp(ze_event_handle_t handle, ze_kernel_timestamp_result_t* out) {
  Event* event = event_of(handle);
  if (!event->pool->timestamps) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  std::lock_guard lock(state().mutex);
  if (!event->signaled) return ZE_RESULT_NOT_READY;
  out->global.kernelStart = out->global.kernelEnd = event->stamp;
  out->context = out->global;
  return ZE_RESULT_SUCCESS;
}

// ---- modules and kernels --------------------------------------------------------

constexpr uint32_t kOpCapability = 17, kOpEntryPoint = 15, kOpFunction = 54,
                   kOpFunctionParameter = 55, kCapabilityShader = 1;

// Parses |words| into |module|; false with a log line when the driver would
// refuse it.
bool parse_spirv(const uint32_t* words, size_t count, Module& module, std::string& log) {
  if (count < 5 || words[0] != 0x07230203u) {
    log = "fake driver: not a little-endian SPIR-V module";
    return false;
  }
  std::map<uint32_t, std::string> entries;  // function id -> name
  std::map<uint32_t, uint32_t> params;      // function id -> parameter count
  uint32_t current = 0;
  for (size_t at = 5; at < count;) {
    const uint32_t length = words[at] >> 16, opcode = words[at] & 0xffff;
    if (length == 0 || length > count - at) {
      log = "fake driver: instruction at word " + std::to_string(at) + " overruns the module";
      return false;
    }
    if (opcode == kOpCapability && length >= 2 && words[at + 1] == kCapabilityShader) {
      log =
          "fake driver: the module declares the Shader capability; Level Zero runs Kernel "
          "modules";
      return false;
    }
    if (opcode == kOpEntryPoint && length >= 4) {
      const char* name = reinterpret_cast<const char*>(words + at + 3);
      entries[words[at + 2]] = std::string(name, strnlen(name, (length - 3) * 4));
    }
    if (opcode == kOpFunction && length >= 3) current = words[at + 2], params[current] = 0;
    if (opcode == kOpFunctionParameter) ++params[current];
    at += length;
  }
  if (entries.empty()) {
    log = "fake driver: the module has no OpEntryPoint";
    return false;
  }
  for (const auto& [id, name] : entries) module.kernels[name] = params[id];
  return true;
}

ze_result_t fake_module_create(ze_context_handle_t, ze_device_handle_t,
                               const ze_module_desc_t* desc, ze_module_handle_t* out,
                               ze_module_build_log_handle_t* out_log) {
  if (desc->format != ZE_MODULE_FORMAT_IL_SPIRV) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (desc->pInputModule == nullptr || desc->inputSize % 4 != 0) {
    return ZE_RESULT_ERROR_INVALID_NATIVE_BINARY;
  }
  std::vector<uint32_t> words(desc->inputSize / 4);
  std::memcpy(words.data(), desc->pInputModule, desc->inputSize);
  auto module = std::make_unique<Module>();
  std::string log;
  const bool built = parse_spirv(words.data(), words.size(), *module, log);
  if (out_log != nullptr) {
    *out_log = reinterpret_cast<ze_module_build_log_handle_t>(new BuildLog{log});
    count("build_logs", 1);
  }
  if (!built) return ZE_RESULT_ERROR_MODULE_BUILD_FAILURE;
  *out = reinterpret_cast<ze_module_handle_t>(module.release());
  count("modules", 1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_module_destroy(ze_module_handle_t module) {
  delete reinterpret_cast<Module*>(module);
  count("modules", -1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_log_string(ze_module_build_log_handle_t handle, size_t* size, char* out) {
  const auto* log = reinterpret_cast<const BuildLog*>(handle);
  if (out == nullptr) {
    *size = log->text.size() + 1;
    return ZE_RESULT_SUCCESS;
  }
  const size_t n = std::min(*size, log->text.size() + 1);
  if (n > 0) {
    std::memcpy(out, log->text.c_str(), n);
    out[n - 1] = '\0';
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_log_destroy(ze_module_build_log_handle_t log) {
  delete reinterpret_cast<BuildLog*>(log);
  count("build_logs", -1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_kernel_create(ze_module_handle_t handle, const ze_kernel_desc_t* desc,
                               ze_kernel_handle_t* out) {
  const auto* module = reinterpret_cast<const Module*>(handle);
  if (desc->pKernelName == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  const auto it = module->kernels.find(desc->pKernelName);
  if (it == module->kernels.end()) return ZE_RESULT_ERROR_INVALID_KERNEL_NAME;
  auto* kernel = new Kernel();
  kernel->name = it->first;
  kernel->arg_count = it->second;
  kernel->args.resize(it->second);
  kernel->local_sizes.resize(it->second);
  *out = reinterpret_cast<ze_kernel_handle_t>(kernel);
  count("kernels", 1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_kernel_destroy(ze_kernel_handle_t kernel) {
  delete reinterpret_cast<Kernel*>(kernel);
  count("kernels", -1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_kernel_properties(ze_kernel_handle_t handle, ze_kernel_properties_t* out) {
  const auto* kernel = reinterpret_cast<const Kernel*>(handle);
  out->numKernelArgs = kernel->arg_count;
  out->requiredGroupSizeX = out->requiredGroupSizeY = out->requiredGroupSizeZ = 0;
  out->localMemSize = 0;
  out->maxSubgroupSize = 32;
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_kernel_set_arg(ze_kernel_handle_t handle, uint32_t index, size_t size,
                                const void* value) {
  auto* kernel = reinterpret_cast<Kernel*>(handle);
  if (index >= kernel->arg_count) return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX;
  // A value is at most 256 bytes here; a __local size (no value) is any.
  if (size == 0 || (value != nullptr && size > 256)) {
    return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE;
  }
  if (value == nullptr) {
    kernel->local_sizes[index] = size;
    kernel->args[index].clear();
  } else {
    kernel->local_sizes[index] = 0;
    const auto* bytes = static_cast<const uint8_t*>(value);
    kernel->args[index].assign(bytes, bytes + size);
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t fake_kernel_group_size(ze_kernel_handle_t handle, uint32_t x, uint32_t y, uint32_t z) {
  if (x == 0 || y == 0 || z == 0 || uint64_t{x} * y * z > kMaxGroupSize) {
    return ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION;
  }
  auto* kernel = reinterpret_cast<Kernel*>(handle);
  kernel->group_size[0] = x, kernel->group_size[1] = y, kernel->group_size[2] = z;
  return ZE_RESULT_SUCCESS;
}

}  // namespace

// ---- the DDI table getters the loader calls ---------------------------------------

FAKE_EXPORT ze_result_t zeGetGlobalProcAddrTable(ze_api_version_t, ze_global_dditable_t* table) {
  table->pfnInit = fake_init;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetDriverProcAddrTable(ze_api_version_t, ze_driver_dditable_t* table) {
  table->pfnGet = fake_driver_get;
  table->pfnGetApiVersion = fake_driver_api_version;
  table->pfnGetProperties = fake_driver_properties;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetDeviceProcAddrTable(ze_api_version_t, ze_device_dditable_t* table) {
  table->pfnGet = fake_device_get;
  table->pfnGetProperties = fake_device_properties;
  table->pfnGetComputeProperties = fake_device_compute;
  table->pfnGetMemoryProperties = fake_device_memory;
  table->pfnGetMemoryAccessProperties = fake_device_access;
  table->pfnGetCommandQueueGroupProperties = fake_device_queue_groups;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetContextProcAddrTable(ze_api_version_t, ze_context_dditable_t* table) {
  table->pfnCreate = fake_context_create;
  table->pfnDestroy = fake_context_destroy;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetMemProcAddrTable(ze_api_version_t, ze_mem_dditable_t* table) {
  table->pfnAllocDevice = fake_alloc_device;
  table->pfnAllocHost = fake_alloc_host;
  table->pfnAllocShared = fake_alloc_shared;
  table->pfnFree = fake_free;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetCommandListProcAddrTable(ze_api_version_t,
                                                      ze_command_list_dditable_t* table) {
  table->pfnCreateImmediate = fake_list_create_immediate;
  table->pfnDestroy = fake_list_destroy;
  table->pfnAppendMemoryCopy = fake_append_copy;
  table->pfnAppendMemoryFill = fake_append_fill;
  table->pfnAppendBarrier = fake_append_barrier;
  table->pfnAppendSignalEvent = fake_append_signal;
  table->pfnAppendWaitOnEvents = fake_append_wait;
  table->pfnAppendEventReset = fake_append_reset;
  table->pfnAppendLaunchKernel = fake_append_launch;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetEventPoolProcAddrTable(ze_api_version_t,
                                                    ze_event_pool_dditable_t* table) {
  table->pfnCreate = fake_pool_create;
  table->pfnDestroy = fake_pool_destroy;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetEventProcAddrTable(ze_api_version_t, ze_event_dditable_t* table) {
  table->pfnCreate = fake_event_create;
  table->pfnDestroy = fake_event_destroy;
  table->pfnHostSignal = fake_event_signal;
  table->pfnHostReset = fake_event_reset;
  table->pfnHostSynchronize = fake_event_synchronize;
  table->pfnQueryStatus = fake_event_query;
  table->pfnQueryKernelTimestamp = fake_event_timestamp;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetModuleProcAddrTable(ze_api_version_t, ze_module_dditable_t* table) {
  table->pfnCreate = fake_module_create;
  table->pfnDestroy = fake_module_destroy;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetModuleBuildLogProcAddrTable(ze_api_version_t,
                                                         ze_module_build_log_dditable_t* table) {
  table->pfnGetString = fake_log_string;
  table->pfnDestroy = fake_log_destroy;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zeGetKernelProcAddrTable(ze_api_version_t, ze_kernel_dditable_t* table) {
  table->pfnCreate = fake_kernel_create;
  table->pfnDestroy = fake_kernel_destroy;
  table->pfnGetProperties = fake_kernel_properties;
  table->pfnSetArgumentValue = fake_kernel_set_arg;
  table->pfnSetGroupSize = fake_kernel_group_size;
  return ZE_RESULT_SUCCESS;
}

// The tables the stand-in leaves empty: the 1.8 loader refuses a driver
// without every core, tools (zet) and sysman (zes) getter.
#define FAKE_EMPTY_TABLE(name, type)                      \
  FAKE_EXPORT ze_result_t name(ze_api_version_t, type*) { \
    return ZE_RESULT_SUCCESS;                             \
  }
// clang-format off
#define FAKE_EMPTY_TABLES(X) \
  X(zeGetCommandQueueProcAddrTable, ze_command_queue_dditable_t) \
  X(zeGetFenceProcAddrTable, ze_fence_dditable_t) X(zeGetImageProcAddrTable, ze_image_dditable_t) \
  X(zeGetSamplerProcAddrTable, ze_sampler_dditable_t) \
  X(zeGetPhysicalMemProcAddrTable, ze_physical_mem_dditable_t) \
  X(zeGetVirtualMemProcAddrTable, ze_virtual_mem_dditable_t) \
  X(zetGetDeviceProcAddrTable, zet_device_dditable_t) \
  X(zetGetContextProcAddrTable, zet_context_dditable_t) \
  X(zetGetCommandListProcAddrTable, zet_command_list_dditable_t) \
  X(zetGetModuleProcAddrTable, zet_module_dditable_t) \
  X(zetGetKernelProcAddrTable, zet_kernel_dditable_t) \
  X(zetGetMetricGroupProcAddrTable, zet_metric_group_dditable_t) \
  X(zetGetMetricGroupExpProcAddrTable, zet_metric_group_exp_dditable_t) \
  X(zetGetMetricProcAddrTable, zet_metric_dditable_t) \
  X(zetGetMetricStreamerProcAddrTable, zet_metric_streamer_dditable_t) \
  X(zetGetMetricQueryPoolProcAddrTable, zet_metric_query_pool_dditable_t) \
  X(zetGetMetricQueryProcAddrTable, zet_metric_query_dditable_t) \
  X(zetGetTracerExpProcAddrTable, zet_tracer_exp_dditable_t) \
  X(zetGetDebugProcAddrTable, zet_debug_dditable_t) \
  X(zesGetDriverProcAddrTable, zes_driver_dditable_t) \
  X(zesGetDeviceProcAddrTable, zes_device_dditable_t) \
  X(zesGetSchedulerProcAddrTable, zes_scheduler_dditable_t) \
  X(zesGetPerformanceFactorProcAddrTable, zes_performance_factor_dditable_t) \
  X(zesGetPowerProcAddrTable, zes_power_dditable_t) \
  X(zesGetFrequencyProcAddrTable, zes_frequency_dditable_t) \
  X(zesGetEngineProcAddrTable, zes_engine_dditable_t) \
  X(zesGetStandbyProcAddrTable, zes_standby_dditable_t) \
  X(zesGetFirmwareProcAddrTable, zes_firmware_dditable_t) \
  X(zesGetMemoryProcAddrTable, zes_memory_dditable_t) \
  X(zesGetFabricPortProcAddrTable, zes_fabric_port_dditable_t) \
  X(zesGetTemperatureProcAddrTable, zes_temperature_dditable_t) \
  X(zesGetPsuProcAddrTable, zes_psu_dditable_t) X(zesGetFanProcAddrTable, zes_fan_dditable_t) \
  X(zesGetLedProcAddrTable, zes_led_dditable_t) X(zesGetRasProcAddrTable, zes_ras_dditable_t) \
  X(zesGetDiagnosticsProcAddrTable, zes_diagnostics_dditable_t)
// clang-format on
FAKE_EMPTY_TABLES(FAKE_EMPTY_TABLE)

// ---- test-only queries (fake_driver.h) ---------------------------------------------

FAKE_VENDOR_TEST_QUERIES(ze, fake_ze_launch_t)

FAKE_EXPORT long fake_ze_live(const char* what) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto it = s.live.find(what);
  return it == s.live.end() ? 0 : it->second;
}
