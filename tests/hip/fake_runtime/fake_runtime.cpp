// A stand-in for libamdhip64.so.5, for testing the hip plugin without a GPU:
// the HIP runtime entry points the plugin resolves, serving memory, streams
// and events from host memory. Each stream runs its work in order on a
// thread of its own (so a blocking host function blocks only its stream, as
// in HIP), and waits while the test pauses the device. Code objects are read
// for their kernels and argument sizes (the AMDGPU metadata, through the
// plugin's own reader, image.cpp) and must be built for gfx90a; launches are
// recorded with their arguments (they run nothing), read back through
// fake_runtime.h. Like HIP 5.2's library it exports no hipLaunchHostFunc,
// so host functions take the plugin's hipStreamAddCallback path; built with
// FAKE_HIP_LAUNCH_HOST_FUNC (a second library, as later runtimes) it does.
// Built with FAKE_HIP_ROCM6 (libamdhip64.so.6) it answers as ROCm 6.2 does
// where it matters to the plugin: hipDriverGetVersion says 6.2, and the 5.x
// hipDeviceProp_t is served only as hipGetDevicePropertiesR0000 (ROCm 6
// changed the struct, R0600; a program that dlopens the library cannot rely
// on the unversioned name's layout, ROCm/ROCm issue 2728, so this stand-in
// does not export it).
// Environment: HAL_FAKE_HIP_DEVICES (default 2), HAL_FAKE_HIP_COUNT_ERROR (a
// hipError_t hipGetDeviceCount returns).
// The streams, events, memory and launch records are the stand-ins' shared
// bookkeeping (tests/fake_vendor).
#include <elf.h>
#include <hip/hip_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fake_runtime.h"
#include "fake_vendor.hpp"
#include "image.hpp"

// (The hip* entry points are exported by the header's own declarations.)

struct ihipStream_t : fake_vendor::Stream {
  ihipStream_t(fake_vendor::Host& host, uint64_t id, int on_device)
      : Stream(host, id), device(on_device) {}
  const int device;
};
struct ihipEvent_t : fake_vendor::Event {};
struct ihipModuleSymbol_t {
  hal::hip::KernelMetadata kernel;
};
struct ihipModule_t {
  std::vector<std::unique_ptr<ihipModuleSymbol_t>> functions;
};

namespace {

constexpr int kMaxDevices = 2;
constexpr int kCuCount[kMaxDevices] = {4, 8};
constexpr size_t kTotalMemory = size_t{2} << 30;  // above FAKE_HIP_OOM_BYTES
constexpr uint32_t kGfx90aMach = 0x3f;            // EF_AMDGPU_MACH_AMDGCN_GFX90A

struct NoInfo {};

struct State : fake_vendor::Host {
  fake_vendor::Heap<NoInfo> allocations;  // device, host and managed
  std::set<ihipStream_t*> streams;
  ihipStream_t* null_stream = nullptr;  // the NULL stream, made on first use
  std::set<ihipEvent_t*> events;
  std::set<ihipModule_t*> modules;
  fake_vendor::LaunchLog<fake_hip_launch_t> launches{*this};
  long pending_callbacks = 0;
  long host_funcs = 0;  // hipLaunchHostFunc calls
  uint64_t next_stream_id = 1;
};

State& state() {
  static State* instance = new State();  // never destroyed: host functions may outlive exit
  return *instance;
}

int device_count() {
  const char* count = std::getenv("HAL_FAKE_HIP_DEVICES");
  return count != nullptr ? std::max(0, std::min(kMaxDevices, std::atoi(count))) : kMaxDevices;
}

thread_local int current_device = 0;

// Caller holds the lock.
ihipStream_t* stream_or_null_stream(hipStream_t stream) {
  if (stream != nullptr) return stream;
  State& s = state();
  if (s.null_stream == nullptr) s.null_stream = new ihipStream_t(s, 0, 0);
  return s.null_stream;
}

void submit(hipStream_t stream, std::function<void()> work) {
  std::lock_guard lock(state().mutex);
  stream_or_null_stream(stream)->push_locked(std::move(work));
}

}  // namespace

// ---- the runtime API ------------------------------------------------------------

hipError_t hipDriverGetVersion(int* version) {
  if (version == nullptr) return hipErrorInvalidValue;
#ifdef FAKE_HIP_ROCM6
  *version = 60241134;  // HIP 6.2.41134
#else
  *version = 50221153;  // HIP 5.2.21153, what Debian 12's runtime answers
#endif
  return hipSuccess;
}

hipError_t hipGetDeviceCount(int* count) {
  if (count == nullptr) return hipErrorInvalidValue;
  if (const char* error = std::getenv("HAL_FAKE_HIP_COUNT_ERROR")) {
    *count = 0;
    return static_cast<hipError_t>(std::atoi(error));
  }
  *count = device_count();
  return hipSuccess;
}

#ifdef FAKE_HIP_ROCM6
FAKE_EXPORT hipError_t hipGetDevicePropertiesR0000(hipDeviceProp_t* p, int device);
hipError_t hipGetDevicePropertiesR0000(hipDeviceProp_t* p, int device) {
#else
hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int device) {
#endif
  if (p == nullptr) return hipErrorInvalidValue;
  if (device < 0 || device >= device_count()) return hipErrorInvalidDevice;
  *p = hipDeviceProp_t{};
  std::snprintf(p->name, sizeof(p->name), "HAL fake AMD GPU %d", device);
  std::snprintf(p->gcnArchName, sizeof(p->gcnArchName), "gfx90a:sramecc+:xnack-");
  p->totalGlobalMem = kTotalMemory;
  p->sharedMemPerBlock = 64 * 1024;
  p->warpSize = 64;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = p->maxThreadsDim[2] = 1024;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65536;
  p->clockRate = 1700000;        // kHz
  p->memoryClockRate = 1600000;  // kHz
  p->memoryBusWidth = 4096;
  p->multiProcessorCount = kCuCount[device];
  p->managedMemory = 1;
  p->major = 9;
  p->minor = 0;
  return hipSuccess;
}

hipError_t hipDeviceGetUuid(hipUUID* uuid, hipDevice_t device) {
  if (uuid == nullptr) return hipErrorInvalidValue;
  for (int i = 0; i < 16; ++i) uuid->bytes[i] = static_cast<char>(0xb0 + i + 16 * device);
  return hipSuccess;
}

hipError_t hipSetDevice(int device) {
  if (device < 0 || device >= device_count()) return hipErrorInvalidDevice;
  current_device = device;
  return hipSuccess;
}

hipError_t hipDeviceSynchronize(void) {
  State& s = state();
  const int device = current_device;
  s.wait_until([&] {
    for (ihipStream_t* stream : s.streams) {
      if (stream->device == device && !stream->idle()) return false;
    }
    return s.null_stream == nullptr || s.null_stream->idle();
  });
  return hipSuccess;
}

namespace {
hipError_t allocate(void** out, size_t bytes) {
  if (out == nullptr) return hipErrorInvalidValue;
  if (bytes == 0) {
    *out = nullptr;
    return hipSuccess;  // as HIP: a null pointer
  }
  if (bytes == FAKE_HIP_OOM_BYTES || bytes > kTotalMemory) return hipErrorOutOfMemory;
  void* memory = fake_vendor::Heap<NoInfo>::reserve(bytes, 256);
  if (memory == nullptr) return hipErrorOutOfMemory;
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.allocations.add(memory, bytes, NoInfo{});
  *out = memory;
  return hipSuccess;
}
hipError_t release(void* memory) {
  if (memory == nullptr) return hipSuccess;
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.allocations.release(memory) ? hipSuccess : hipErrorInvalidValue;
}
}  // namespace

hipError_t hipMalloc(void** out, size_t bytes) {
  return allocate(out, bytes);
}
hipError_t hipFree(void* pointer) {
  return release(pointer);
}
hipError_t hipHostMalloc(void** out, size_t bytes, unsigned int flags) {
  if ((flags & ~(hipHostMallocPortable | hipHostMallocMapped)) != 0) return hipErrorInvalidValue;
  return allocate(out, bytes);
}
hipError_t hipHostFree(void* pointer) {
  return release(pointer);
}
hipError_t hipMallocManaged(void** out, size_t bytes, unsigned int flags) {
  if (flags != hipMemAttachGlobal && flags != hipMemAttachHost) return hipErrorInvalidValue;
  return allocate(out, bytes);
}

hipError_t hipMemcpyAsync(void* dst, const void* src, size_t bytes, hipMemcpyKind kind,
                          hipStream_t stream) {
  if (kind != hipMemcpyDefault) return hipErrorInvalidMemcpyDirection;
  if ((dst == nullptr || src == nullptr) && bytes != 0) return hipErrorInvalidValue;
  submit(stream, [=] { std::memcpy(dst, src, bytes); });
  return hipSuccess;
}

hipError_t hipMemsetAsync(void* dst, int value, size_t bytes, hipStream_t stream) {
  if (dst == nullptr && bytes != 0) return hipErrorInvalidValue;
  submit(stream, [=] { std::memset(dst, value, bytes); });
  return hipSuccess;
}

hipError_t hipStreamCreateWithFlags(hipStream_t* out, unsigned int flags) {
  if (out == nullptr) return hipErrorInvalidValue;
  if (flags != hipStreamNonBlocking && flags != hipStreamDefault) return hipErrorInvalidValue;
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto* stream = new ihipStream_t(s, s.next_stream_id++, current_device);
  s.streams.insert(stream);
  *out = stream;
  return hipSuccess;
}

hipError_t hipStreamDestroy(hipStream_t stream) {
  State& s = state();
  {
    std::lock_guard lock(s.mutex);
    if (s.streams.erase(stream) == 0) return hipErrorInvalidHandle;
  }
  stream->stop();  // its queued work still runs, as in HIP
  delete stream;
  return hipSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
  if (stream == nullptr) return hipDeviceSynchronize();
  state().wait_until([stream] { return stream->idle(); });
  return hipSuccess;
}

hipError_t hipStreamQuery(hipStream_t stream) {
  std::lock_guard lock(state().mutex);
  if (stream == nullptr) stream = state().null_stream;
  return stream == nullptr || stream->idle() ? hipSuccess : hipErrorNotReady;
}

hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags) {
  if (flags != 0 || event == nullptr) return hipErrorInvalidValue;
  std::lock_guard lock(state().mutex);
  // The record enqueued last, as HIP captures it.
  stream_or_null_stream(stream)->push_locked(fake_vendor::wait_work(state(), event->state));
  return hipSuccess;
}

hipError_t hipStreamAddCallback(hipStream_t stream, hipStreamCallback_t callback, void* user_data,
                                unsigned int flags) {
  if (callback == nullptr || flags != 0) return hipErrorInvalidValue;
  {
    std::lock_guard lock(state().mutex);
    ++state().pending_callbacks;
  }
  submit(stream, [=] {
    callback(stream, hipSuccess, user_data);
    std::lock_guard lock(state().mutex);
    --state().pending_callbacks;
  });
  return hipSuccess;
}

#ifdef FAKE_HIP_LAUNCH_HOST_FUNC
hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void* user_data) {
  if (fn == nullptr) return hipErrorInvalidValue;
  {
    std::lock_guard lock(state().mutex);
    ++state().host_funcs;
  }
  submit(stream, [=] { fn(user_data); });
  return hipSuccess;
}
#endif

hipError_t hipEventCreateWithFlags(hipEvent_t* out, unsigned flags) {
  if (out == nullptr) return hipErrorInvalidValue;
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto* event = new ihipEvent_t();
  event->state->timing = (flags & hipEventDisableTiming) == 0;
  s.events.insert(event);
  *out = event;
  return hipSuccess;
}

hipError_t hipEventDestroy(hipEvent_t event) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.events.erase(event) == 0) return hipErrorInvalidHandle;
  delete event;  // enqueued records and waits keep its state
  return hipSuccess;
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.events.count(event) == 0) return hipErrorInvalidHandle;
  stream_or_null_stream(stream)->push_locked(fake_vendor::record_work(s, event->state));
  return hipSuccess;
}

hipError_t hipEventQuery(hipEvent_t event) {
  std::lock_guard lock(state().mutex);
  return fake_vendor::reached(*event->state) ? hipSuccess : hipErrorNotReady;
}

hipError_t hipEventSynchronize(hipEvent_t event) {
  fake_vendor::synchronize(state(), *event);
  return hipSuccess;
}

hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
  if (ms == nullptr) return hipErrorInvalidValue;
  std::lock_guard lock(state().mutex);
  switch (fake_vendor::elapsed(*start->state, *stop->state, ms)) {
    case fake_vendor::Elapsed::kDone:
      return hipSuccess;
    case fake_vendor::Elapsed::kNotReady:
      return hipErrorNotReady;
    case fake_vendor::Elapsed::kInvalid:
      break;
  }
  return hipErrorInvalidHandle;
}

hipError_t hipModuleLoadData(hipModule_t* out, const void* image) {
  if (out == nullptr || image == nullptr) return hipErrorInvalidValue;
  const auto* bytes = static_cast<const unsigned char*>(image);
  // Only plain gfx90a code objects (the plugin checked the bounds; a bundle
  // would need its entry found first, which this stand-in leaves out).
  if (std::memcmp(bytes, ELFMAG, SELFMAG) != 0) return hipErrorInvalidImage;
  Elf64_Ehdr header;
  std::memcpy(&header, bytes, sizeof(header));
  if ((header.e_flags & 0xff) != kGfx90aMach) return hipErrorNoBinaryForGpu;
  std::vector<hal::hip::KernelMetadata> kernels;
  std::string why;
  if (!hal::hip::read_kernel_metadata(bytes, fake_vendor::elf_extent(bytes), kernels, why)) {
    return hipErrorInvalidKernelFile;
  }
  auto module = std::make_unique<ihipModule_t>();
  for (auto& kernel : kernels) {
    module->functions.push_back(std::make_unique<ihipModuleSymbol_t>(ihipModuleSymbol_t{kernel}));
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.modules.insert(module.get());
  *out = module.release();
  return hipSuccess;
}

hipError_t hipModuleUnload(hipModule_t module) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.modules.erase(module) == 0) return hipErrorInvalidHandle;
  delete module;
  return hipSuccess;
}

hipError_t hipModuleGetFunction(hipFunction_t* out, hipModule_t module, const char* name) {
  if (out == nullptr || module == nullptr || name == nullptr) return hipErrorInvalidValue;
  for (const auto& function : module->functions) {
    if (function->kernel.name == name) {
      *out = function.get();
      return hipSuccess;
    }
  }
  return hipErrorNotFound;
}

hipError_t hipFuncGetAttribute(int* value, hipFunction_attribute attribute, hipFunction_t f) {
  if (value == nullptr || f == nullptr) return hipErrorInvalidValue;
  switch (attribute) {
    case HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = f->kernel.max_flat_workgroup_size != 0
                   ? static_cast<int>(f->kernel.max_flat_workgroup_size)
                   : 1024;
      return hipSuccess;
    case HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *value = static_cast<int>(f->kernel.group_segment_fixed_size);
      return hipSuccess;
    default:
      return hipErrorInvalidValue;
  }
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                                 unsigned int bx, unsigned int by, unsigned int bz,
                                 unsigned int shared, hipStream_t stream, void** params,
                                 void** extra) {
  if (f == nullptr) return hipErrorInvalidResourceHandle;
  const std::vector<uint32_t>& sizes = f->kernel.arg_sizes;
  if (extra != nullptr || (params == nullptr && !sizes.empty())) return hipErrorInvalidValue;
  const uint64_t limit =
      f->kernel.max_flat_workgroup_size != 0 ? f->kernel.max_flat_workgroup_size : 1024;
  if (uint64_t{bx} * by * bz > limit || shared > 64 * 1024) return hipErrorInvalidConfiguration;
  const uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  fake_hip_launch_t launch = fake_vendor::launch_record(f->kernel.name, grid, block, shared,
                                                        stream != nullptr ? stream->id : 0);
  launch.device = current_device;
  // Copied at the call, as HIP does.
  if (!fake_vendor::copy_params(launch, sizes, params)) return hipErrorInvalidValue;
  state().launches.add(launch);
  return hipSuccess;
}

// ---- the test queries -----------------------------------------------------------

FAKE_VENDOR_TEST_QUERIES(hip, fake_hip_launch_t)

FAKE_EXPORT long fake_hip_live(const char* what) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const std::string_view name(what);
  if (const long count = fake_vendor::count_live(s, name); count >= 0) return count;
  if (name == "callbacks") return s.pending_callbacks;
#ifdef FAKE_HIP_LAUNCH_HOST_FUNC
  if (name == "host_funcs") return s.host_funcs;
#endif
  return -1;
}
