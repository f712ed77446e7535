// A stand-in for libcuda.so.1, for testing the cuda plugin without a GPU:
// cuGetProcAddress_v2 and the entry points the plugin uses, serving memory,
// streams and events from host memory. Each stream runs its work in order on
// a thread of its own (so a blocking host function blocks only its stream, as
// in CUDA), and waits while the test pauses the device; launches are recorded
// with their parameters (they run nothing), read back through fake_driver.h. Environment:
// HAL_FAKE_CUDA_DEVICES (default 2), HAL_FAKE_CUDA_INIT_ERROR (a CUresult cuInit returns),
// HAL_FAKE_CUDA_NO_STREAM_MEMOPS (cuStreamWaitValue32 answers
// CUDA_ERROR_NOT_SUPPORTED), HAL_FAKE_CUDA_DRIVER_VERSION (default 13000: what cuDriverGetVersion
// says; cuGetProcAddress refuses a cudaVersion above it, as an older driver cannot serve entry
// points newer than itself), HAL_FAKE_CUDA_CC (default 90: every device's compute capability,
// major * 10 + minor).
//
// It models the documented behaviour the plugin must live with:
// - A primary context exists while retained; creating it reserves device
//   memory (kContextReserve), so cuMemGetInfo (which needs a current context)
//   reports less free than cuDeviceTotalMem, and cuMemAlloc charges whole
//   2 MiB pages against what is free.
// - A fatal error (fake_cuda_inject_fault: CUDA_ERROR_ILLEGAL_ADDRESS, ...) is
//   sticky: every later call with that context current returns it.
// - cuMemcpyAsync with pageable host memory (memory CUDA did not allocate)
//   synchronises with the stream and copies before it returns ("API
//   synchronization behavior"); cuMemsetD8Async refuses pageable memory.
// - Host functions (cuLaunchHostFunc) of every stream run on one driver
//   thread, one at a time ("Host functions without a mandated order (such as
//   in independent streams) execute in undefined order and may be
//   serialized"), and a CUDA call from that thread returns
//   CUDA_ERROR_NOT_PERMITTED ("The host function must not make any CUDA API
//   calls. Attempting to use a CUDA API may result in
//   cudaErrorNotPermitted"). The stand-in cuBLASLt and NCCL order their work
//   on a stream through fake_cuStreamWork instead (the stream's own thread).
// The streams, events, memory and launch records are the stand-ins' shared
// bookkeeping (tests/fake_vendor).
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <elf.h>

#include "fake_driver.h"
#include "fake_vendor.hpp"

// Exported by name too, as libcuda.so.1 does: the plugin asks for the
// driver's version before it resolves the rest, and tests set and read
// the thread's current context as the CUDA runtime would.
FAKE_EXPORT CUresult CUDAAPI cuDriverGetVersion(int* version);
FAKE_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext context);
FAKE_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext* context);

struct CUctx_st {
  int ordinal = 0;
  std::atomic<long> references{0};             // changed under the state's mutex, read by ready()
  std::atomic<CUresult> sticky{CUDA_SUCCESS};  // a fatal error, returned by every later call
};
struct CUstream_st : fake_vendor::Stream {
  CUstream_st(fake_vendor::Host& host, uint64_t id, CUcontext current)
      : Stream(host, id), context(current) {}
  const CUcontext context;  // current at its creation: cuCtxSynchronize waits for its own
};
struct CUevent_st : fake_vendor::Event {};
struct CUfunc_st {
  std::string name;
  std::vector<uint32_t> param_sizes;
  int max_threads = 1024;
};
struct CUmod_st {
  std::vector<CUfunc_st*> functions;
};

namespace {

constexpr int kSmCount[] = {4, 8};
constexpr size_t kTotalMemory = size_t{2} << 30;       // above FAKE_CUDA_OOM_BYTES
constexpr size_t kContextReserve = size_t{300} << 20;  // what a context takes of it
constexpr size_t kPage = size_t{2} << 20;              // cuMemAlloc's charge unit

enum class Kind { kDevice, kHost, kManaged };
struct Charge {
  Kind kind;
  int ordinal;  // the device charged (device and managed)
  size_t charged;
};
using Heap = fake_vendor::Heap<Charge>;

struct State : fake_vendor::Host {
  bool initialised = false;
  int device_count = 2;
  CUctx_st contexts[2];
  long context_creations = 0;  // a primary context made (retained from 0)
  size_t used[2] = {0, 0};     // device memory charged, by device
  Heap allocations;
  std::set<CUstream_st*> streams;
  CUstream_st* legacy_stream = nullptr;  // the NULL stream, made on first use
  std::set<CUevent_st*> events;
  std::set<CUmod_st*> modules;
  fake_vendor::LaunchLog<fake_cuda_launch_t> launches{*this};
  uint64_t next_stream_id = 1;
};

State& state() {
  static State* instance = new State();  // never destroyed: host functions may outlive exit
  return *instance;
}

thread_local CUcontext current_context = nullptr;
thread_local bool on_driver_thread = false;  // running a host function
std::atomic<long> driver_thread_calls{0};    // CUDA calls made from there

// The driver thread every stream's host functions run on, one at a time.
class DriverThread {
 public:
  // Runs |fn(user_data)| there and returns when it returned.
  void run(CUhostFn fn, void* user_data) {
    std::unique_lock lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    const uint64_t ticket = ++posted_;
    jobs_.push_back({fn, user_data});
    changed_.notify_all();
    changed_.wait(lock, [&] { return done_ >= ticket; });
  }

 private:
  void loop() {
    on_driver_thread = true;
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return !jobs_.empty(); });
      const auto [fn, user_data] = jobs_.front();
      jobs_.pop_front();
      lock.unlock();
      fn(user_data);
      lock.lock();
      ++done_;
      changed_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<CUhostFn, void*>> jobs_;
  uint64_t posted_ = 0, done_ = 0;
  std::thread thread_;  // never joined: it lives as long as the process
};

DriverThread& driver_thread() {
  static DriverThread* instance = new DriverThread();  // never destroyed, as state()
  return *instance;
}

// |stream|, or the legacy (NULL) stream, made on first use. Caller holds the lock.
CUstream_st* stream_or_legacy(CUstream stream) {
  if (stream != nullptr) return stream;
  State& s = state();
  if (s.legacy_stream == nullptr) s.legacy_stream = new CUstream_st(s, 0, nullptr);
  return s.legacy_stream;
}

void submit(CUstream stream, std::function<void()> work) {
  std::lock_guard lock(state().mutex);
  stream_or_legacy(stream)->push_locked(std::move(work));
}

CUctx_st foreign_context{-1, 1, CUDA_SUCCESS};  // "another library's" context

CUresult ready() {
  if (!state().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (on_driver_thread) {
    ++driver_thread_calls;  // CUDA need not refuse them: a real driver may deadlock instead
    return CUDA_ERROR_NOT_PERMITTED;
  }
  if (current_context == nullptr || current_context == &foreign_context) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (current_context->references == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return current_context->sticky;
}

// The allocation holding |pointer| (interior pointers too), or null:
// memory CUDA does not know, i.e. pageable host memory. Caller holds the mutex.
const Heap::Block* find_allocation(const void* pointer) {
  return state().allocations.find(pointer);
}

// Reads the entries of a PTX text: ".entry NAME(" then ".param .TYPE" lines
// until ")", and ".maxntid X, Y, Z".
bool parse_ptx(std::string_view text, CUmod_st& out) {
  if (text.find(".version") == std::string_view::npos) return false;
  size_t at = 0;
  while ((at = text.find(".entry ", at)) != std::string_view::npos) {
    at += 7;
    const size_t open = text.find('(', at);
    if (open == std::string_view::npos) return false;
    auto* function = new CUfunc_st();
    function->name = std::string(text.substr(at, open - at));
    while (!function->name.empty() && function->name.back() == ' ') function->name.pop_back();
    const size_t close = text.find(')', open);
    const std::string_view params = text.substr(open, close - open);
    size_t p = 0;
    while ((p = params.find(".param .", p)) != std::string_view::npos) {
      p += 8;
      const std::string_view type = params.substr(p, 3);
      uint32_t size = 4;
      if (type == "u64" || type == "b64" || type == "s64" || type == "f64") size = 8;
      if (type.substr(0, 2) == "u8" || type.substr(0, 2) == "b8" || type.substr(0, 2) == "s8") {
        size = 1;
      }
      function->param_sizes.push_back(size);
    }
    const size_t next_entry = text.find(".entry ", close);
    const size_t maxntid = text.find(".maxntid ", close);
    if (maxntid != std::string_view::npos && maxntid < next_entry) {
      function->max_threads = std::atoi(std::string(text.substr(maxntid + 9, 8)).c_str());
    }
    out.functions.push_back(function);
    at = close;
  }
  return true;
}

}  // namespace

// ---- the driver API ---------------------------------------------------------------

extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (const char* error = std::getenv("HAL_FAKE_CUDA_INIT_ERROR")) {
    return static_cast<CUresult>(std::atoi(error));
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const char* count = std::getenv("HAL_FAKE_CUDA_DEVICES")) {
    s.device_count = std::max(0, std::min(2, std::atoi(count)));
  }
  s.initialised = true;
  return CUDA_SUCCESS;
}

int driver_version() {
  const char* configured = std::getenv("HAL_FAKE_CUDA_DRIVER_VERSION");
  return configured != nullptr ? std::atoi(configured) : 13000;
}

int compute_capability() {
  const char* configured = std::getenv("HAL_FAKE_CUDA_CC");
  return configured != nullptr ? std::atoi(configured) : 90;
}

// The newest PTX ISA (major * 10 + minor) the driver of |version| JIT-
// compiles, from the PTX ISA's release history: 8.0 came with CUDA 12.0 and
// each 12.x minor added one up to 8.5 (12.5, 12.6), then 8.7 (12.8), 8.8
// (12.9), 9.0 (13.0).
int newest_ptx_isa(int version) {
  const int major = version / 1000, minor = version % 1000 / 10;
  if (major >= 13) return 90 + minor;
  if (major < 12) return 78;
  if (minor >= 9) return 88;
  if (minor >= 8) return 87;
  return 80 + std::min(minor, 5);
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = driver_version();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** name) {
  switch (error) {
    case CUDA_SUCCESS:
      *name = "CUDA_SUCCESS";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *name = "CUDA_ERROR_OUT_OF_MEMORY";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_READY:
      *name = "CUDA_ERROR_NOT_READY";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_PTX:
      *name = "CUDA_ERROR_INVALID_PTX";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND:
      *name = "CUDA_ERROR_NOT_FOUND";
      return CUDA_SUCCESS;
    default:
      *name = nullptr;
      return CUDA_ERROR_INVALID_VALUE;  // the plugin's table names the rest
  }
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (!state().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  *count = state().device_count;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= state().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int length, CUdevice device) {
  std::snprintf(name, static_cast<size_t>(length), "HAL fake GPU %d", device);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  for (int i = 0; i < 16; ++i) uuid->bytes[i] = static_cast<char>(0xa0 + i + 16 * device);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice) {
  *bytes = kTotalMemory;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = compute_capability() / 10;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = compute_capability() % 10;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = kSmCount[device];
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *value = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *value = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *value = 0x7fffffff;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *value = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *value = 48 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = 227 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *value = 1500000;
      break;  // kHz
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *value = 2000000;
      break;  // kHz
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *value = 256;
      break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      *value = 1;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.contexts[device].ordinal = device;
  if (s.contexts[device].references++ == 0) {
    ++s.context_creations;
    s.contexts[device].sticky = CUDA_SUCCESS;  // a new context
  }
  *context = &s.contexts[device];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.contexts[device].references == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --s.contexts[device].references;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
  current_context = context;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* context) {
  if (!state().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  *context = current_context;
  return CUDA_SUCCESS;
}

// Free is what the device has less its live contexts' reserves and what is
// allocated on it (cuMemGetInfo: "the free and total amount of memory
// available for allocation by the CUDA context").
CUresult CUDAAPI cuMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mutex);
  const int ordinal = current_context->ordinal;
  *total_bytes = kTotalMemory;
  *free_bytes = kTotalMemory - kContextReserve - s.used[ordinal];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  State& s = state();
  const CUcontext context = current_context;
  // The current context's streams only, as CUDA: another device's stream may
  // wait (a collective) for work this thread has yet to enqueue.
  s.wait_until([&] {
    for (CUstream_st* stream : s.streams) {
      if (stream->context == context && !stream->idle()) return false;
    }
    return s.legacy_stream == nullptr || s.legacy_stream->idle();
  });
  return CUDA_SUCCESS;
}

namespace {
CUresult allocate(void** out, size_t bytes, Kind kind) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == FAKE_CUDA_OOM_BYTES || bytes > kTotalMemory) return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = state();
  const int ordinal = current_context->ordinal;
  const size_t charged = kind == Kind::kHost ? 0 : (bytes + kPage - 1) / kPage * kPage;
  {
    std::lock_guard lock(s.mutex);
    if (s.used[ordinal] + charged > kTotalMemory - kContextReserve) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s.used[ordinal] += charged;
  }
  void* memory = Heap::reserve(bytes, 256);
  std::lock_guard lock(s.mutex);
  if (memory == nullptr) {
    s.used[ordinal] -= charged;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.allocations.add(memory, bytes, Charge{kind, ordinal, charged});
  *out = memory;
  return CUDA_SUCCESS;
}
CUresult release(void* memory) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mutex);
  Heap::Block freed;
  if (!s.allocations.release(memory, &freed)) return CUDA_ERROR_INVALID_VALUE;
  s.used[freed.info.ordinal] -= freed.info.charged;
  return CUDA_SUCCESS;
}
}  // namespace

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* out, size_t bytes) {
  void* memory = nullptr;
  const CUresult r = allocate(&memory, bytes, Kind::kDevice);
  if (r == CUDA_SUCCESS) *out = reinterpret_cast<CUdeviceptr>(memory);
  return r;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr pointer) {
  return release(reinterpret_cast<void*>(pointer));
}
CUresult CUDAAPI cuMemHostAlloc(void** out, size_t bytes, unsigned int) {
  return allocate(out, bytes, Kind::kHost);
}
CUresult CUDAAPI cuMemFreeHost(void* pointer) {
  return release(pointer);
}
CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* out, size_t bytes, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  void* memory = nullptr;
  const CUresult r = allocate(&memory, bytes, Kind::kManaged);
  if (r == CUDA_SUCCESS) *out = reinterpret_cast<CUdeviceptr>(memory);
  return r;
}

// CUDA_ERROR_INVALID_VALUE for memory CUDA does not know (pageable).
CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                       CUdeviceptr pointer) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  if (attribute != CU_POINTER_ATTRIBUTE_MEMORY_TYPE) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(state().mutex);
  const Heap::Block* found = find_allocation(reinterpret_cast<void*>(pointer));
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *static_cast<CUmemorytype*>(data) =
      found->info.kind == Kind::kHost ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister(void*, size_t, unsigned int) {
  return CUDA_ERROR_NOT_SUPPORTED;  // not modelled: the plugin stages instead
}
CUresult CUDAAPI cuMemHostUnregister(void*) {
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  bool pageable = false;
  {
    std::lock_guard lock(state().mutex);
    pageable = find_allocation(reinterpret_cast<void*>(dst)) == nullptr ||
               find_allocation(reinterpret_cast<void*>(src)) == nullptr;
    stream = stream_or_legacy(stream);
  }
  if (pageable) {
    // Pageable to device: "a stream sync is performed before the copy is
    // initiated"; device to pageable: "returns only once the copy has
    // completed". Both: the caller waits for the stream, then the copy.
    state().wait_until([stream] { return stream->idle(); });
    std::memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    return CUDA_SUCCESS;
  }
  submit(stream, [=] {
    std::memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  });
  return CUDA_SUCCESS;
}

// Not used by the plugin: bench/cuda_peer's raw side, smoke-run over the fake.
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                   CUstream stream) {
  return cuMemcpyAsync(dst, src, bytes, stream);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count,
                                 CUstream stream) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard lock(state().mutex);
    if (find_allocation(reinterpret_cast<void*>(dst)) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  submit(stream, [=] { std::memset(reinterpret_cast<void*>(dst), value, count); });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream* out, unsigned int flags) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  if (flags != CU_STREAM_NON_BLOCKING && flags != CU_STREAM_DEFAULT)
    return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto* stream = new CUstream_st(s, s.next_stream_id++, current_context);
  s.streams.insert(stream);
  *out = stream;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
  State& s = state();
  {
    std::lock_guard lock(s.mutex);
    if (s.streams.erase(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  stream->stop();  // its queued work still runs, as in CUDA
  delete stream;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  if (stream == nullptr) return cuCtxSynchronize();
  state().wait_until([stream] { return stream->idle(); });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamQuery(CUstream stream) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(state().mutex);
  if (stream == nullptr) stream = state().legacy_stream;
  return stream == nullptr || stream->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  if (flags != 0 || event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(state().mutex);
  // The record enqueued last, as CUDA captures it.
  stream_or_legacy(stream)->push_locked(fake_vendor::wait_work(state(), event->state));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream stream, CUhostFn fn, void* user_data) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  // The stream waits while the driver thread runs the function.
  submit(stream, [=] { driver_thread().run(fn, user_data); });
  return CUDA_SUCCESS;
}

// The stand-in libraries' work in stream order, on the stream's own thread
// (not a CUDA entry point: cuGetProcAddress gives it to them by this name).
CUresult CUDAAPI fake_cuStreamWork(CUstream stream, CUhostFn fn, void* user_data) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  submit(stream, [=] { fn(user_data); });
  return CUDA_SUCCESS;
}

// Later work waits until (int32_t)(*addr - value) >= 0 (GEQ, the default), or
// *addr == value (EQ). The host writes the word without telling the fake, so
// the wait polls it.
CUresult CUDAAPI cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                     unsigned int flags) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  if (flags != CU_STREAM_WAIT_VALUE_GEQ && flags != CU_STREAM_WAIT_VALUE_EQ) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A device without stream memory operations ("CUDA_ERROR_NOT_SUPPORTED").
  if (std::getenv("HAL_FAKE_CUDA_NO_STREAM_MEMOPS") != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  {
    std::lock_guard lock(state().mutex);
    if (find_allocation(reinterpret_cast<void*>(addr)) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  auto* word = reinterpret_cast<uint32_t*>(addr);
  submit(stream, [=] {
    State& s = state();
    std::unique_lock lock(s.mutex);
    while (true) {
      const uint32_t seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
      if (flags == CU_STREAM_WAIT_VALUE_EQ ? seen == value
                                           : static_cast<int32_t>(seen - value) >= 0) {
        return;
      }
      s.changed.wait_for(lock, std::chrono::microseconds(100));
    }
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* out, unsigned int flags) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto* event = new CUevent_st();
  event->state->timing = (flags & CU_EVENT_DISABLE_TIMING) == 0;
  s.events.insert(event);
  *out = event;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent event) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.events.erase(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete event;  // enqueued records and waits keep its state
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent event, CUstream stream) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  stream_or_legacy(stream)->push_locked(fake_vendor::record_work(s, event->state));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent event) {
  std::lock_guard lock(state().mutex);
  return fake_vendor::reached(*event->state) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent event) {
  fake_vendor::synchronize(state(), *event);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  std::lock_guard lock(state().mutex);
  switch (fake_vendor::elapsed(*start->state, *end->state, ms)) {
    case fake_vendor::Elapsed::kDone:
      return CUDA_SUCCESS;
    case fake_vendor::Elapsed::kNotReady:
      return CUDA_ERROR_NOT_READY;
    case fake_vendor::Elapsed::kInvalid:
      break;
  }
  return CUDA_ERROR_INVALID_HANDLE;
}

// The kernels of a cubin: each global STT_FUNC symbol, with the parameter
// sizes and the thread limit its ".nv.info.<name>" section records (EIATTR
// records: u8 format, u8 attribute, then a u16 size and payload for format
// 4 (EIFMT_SVAL), a 2-byte value otherwise; EIATTR_KPARAM_INFO (0x17):
// u32 index, u16 ordinal, u16 offset, u32 whose bits 18..31 are the size;
// EIATTR_MAX_THREADS (0x05): three u32). The layout NVRTC 13.0 writes.
bool parse_cubin(const unsigned char* data, size_t size, CUmod_st& out) {
  if (size < sizeof(Elf64_Ehdr)) return false;
  Elf64_Ehdr header;
  std::memcpy(&header, data, sizeof(header));
  if (header.e_machine != EM_CUDA || header.e_shentsize != sizeof(Elf64_Shdr) ||
      header.e_shoff + uint64_t{header.e_shnum} * sizeof(Elf64_Shdr) > size ||
      header.e_shstrndx >= header.e_shnum) {
    return false;
  }
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  std::memcpy(sections.data(), data + header.e_shoff, header.e_shnum * sizeof(Elf64_Shdr));
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_type != SHT_NOBITS && section.sh_offset + section.sh_size > size) return false;
  }
  const auto string_at = [&](const Elf64_Shdr& table, uint32_t offset) {
    if (offset >= table.sh_size) return std::string();
    const auto* start = reinterpret_cast<const char*>(data + table.sh_offset + offset);
    return std::string(start, strnlen(start, table.sh_size - offset));
  };
  const Elf64_Shdr& names = sections[header.e_shstrndx];
  std::map<std::string, const Elf64_Shdr*> by_name;
  for (const Elf64_Shdr& section : sections) by_name[string_at(names, section.sh_name)] = &section;
  for (const Elf64_Shdr& symtab : sections) {
    if (symtab.sh_type != SHT_SYMTAB || symtab.sh_link >= sections.size()) continue;
    const Elf64_Shdr& strings = sections[symtab.sh_link];
    for (size_t at = 0; at + sizeof(Elf64_Sym) <= symtab.sh_size; at += sizeof(Elf64_Sym)) {
      Elf64_Sym symbol;
      std::memcpy(&symbol, data + symtab.sh_offset + at, sizeof(symbol));
      if (ELF64_ST_TYPE(symbol.st_info) != STT_FUNC || ELF64_ST_BIND(symbol.st_info) != STB_GLOBAL)
        continue;
      auto* function = new CUfunc_st();
      function->name = string_at(strings, symbol.st_name);
      out.functions.push_back(function);
      const auto info = by_name.find(".nv.info." + function->name);
      if (info == by_name.end()) continue;
      const unsigned char* records = data + info->second->sh_offset;
      const size_t bytes = info->second->sh_size;
      std::map<uint16_t, uint32_t> by_ordinal;
      for (size_t r = 0; r + 4 <= bytes;) {
        const uint8_t format = records[r], attribute = records[r + 1];
        if (format != 4) {
          r += 4;
          continue;
        }
        uint16_t length = 0;
        std::memcpy(&length, records + r + 2, 2);
        const unsigned char* payload = records + r + 4;
        if (r + 4 + length > bytes) return false;
        if (attribute == 0x17 && length >= 12) {
          uint16_t ordinal = 0;
          uint32_t flags = 0;
          std::memcpy(&ordinal, payload + 4, 2);
          std::memcpy(&flags, payload + 8, 4);
          by_ordinal[ordinal] = flags >> 18;
        } else if (attribute == 0x05 && length >= 12) {
          uint32_t threads[3];
          std::memcpy(threads, payload, 12);
          function->max_threads = static_cast<int>(threads[0] * threads[1] * threads[2]);
        }
        r += 4 + length;
      }
      for (const auto& [ordinal, bytes_of] : by_ordinal) function->param_sizes.push_back(bytes_of);
    }
  }
  return true;
}

// Copies |text| into the caller's log buffer as CU_JIT_*_LOG_BUFFER asks:
// capped at the IN size (the NUL included), the filled size written back.
void write_jit_log(const std::string& text, char* buffer, void** size_slot) {
  if (buffer == nullptr || size_slot == nullptr) return;
  const size_t capacity = static_cast<size_t>(reinterpret_cast<uintptr_t>(*size_slot));
  if (capacity == 0) return;
  const size_t bytes = std::min(text.size(), capacity - 1);
  std::memcpy(buffer, text.data(), bytes);
  buffer[bytes] = '\0';
  *size_slot = reinterpret_cast<void*>(static_cast<uintptr_t>(bytes + 1));
}

// The number after |directive| in |text| ("9.0" -> 90 for .version,
// "sm_90" -> 90 for .target), with the line it is on; 0 when absent.
int ptx_number(std::string_view text, std::string_view directive, int& line) {
  const size_t at = text.find(directive);
  if (at == std::string_view::npos) return 0;
  line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
  size_t p = at + directive.size();
  while (p < text.size() && !(text[p] >= '0' && text[p] <= '9')) ++p;
  int value = 0;
  while (p < text.size() && ((text[p] >= '0' && text[p] <= '9') || text[p] == '.')) {
    if (text[p] != '.') value = value * 10 + (text[p] - '0');
    ++p;
  }
  return value;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* out, const void* image, unsigned int count,
                                    CUjit_option* options, void** values) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || image == nullptr ||
      (count != 0 && (options == nullptr || values == nullptr)))
    return CUDA_ERROR_INVALID_VALUE;
  char* error_log = nullptr;
  void** error_size = nullptr;
  char* info_log = nullptr;
  void** info_size = nullptr;
  for (unsigned int i = 0; i < count; ++i) {
    switch (options[i]) {
      case CU_JIT_ERROR_LOG_BUFFER:
        error_log = static_cast<char*>(values[i]);
        break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        error_size = &values[i];
        break;
      case CU_JIT_INFO_LOG_BUFFER:
        info_log = static_cast<char*>(values[i]);
        break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        info_size = &values[i];
        break;
      default:
        break;
    }
  }
  // Nothing written: the sizes say 0 bytes filled.
  if (error_size != nullptr && error_log == nullptr) *error_size = nullptr;
  const auto refuse = [&](CUresult code, const std::string& why) {
    write_jit_log(why, error_log, error_size);
    if (info_size != nullptr) *info_size = nullptr;
    return code;
  };
  const auto* bytes = static_cast<const unsigned char*>(image);
  auto* module = new CUmod_st();
  const int device = compute_capability();
  if (std::memcmp(bytes, ELFMAG, SELFMAG) == 0) {
    Elf64_Ehdr header;
    std::memcpy(&header, bytes, sizeof(header));
    const size_t extent = fake_vendor::elf_extent(bytes);
    const int arch =
        static_cast<int>(header.e_ident[EI_ABIVERSION] >= 8 ? (header.e_flags >> 8) & 0xffu
                                                            : header.e_flags & 0xffu);
    if (arch / 10 != device / 10 || arch % 10 > device % 10) {
      delete module;
      return refuse(
          CUDA_ERROR_NO_BINARY_FOR_GPU,
          "cubin for sm_" + std::to_string(arch) + " cannot run on sm_" + std::to_string(device));
    }
    if (!parse_cubin(bytes, extent, *module)) {
      for (CUfunc_st* f : module->functions) delete f;
      delete module;
      return refuse(CUDA_ERROR_INVALID_IMAGE, "the cubin's sections cannot be read");
    }
  } else {
    const std::string_view text(reinterpret_cast<const char*>(bytes));
    int line = 0;
    const int isa = ptx_number(text, ".version", line);
    const int newest = newest_ptx_isa(driver_version());
    if (isa > newest) {
      delete module;
      return refuse(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                    "ptxas application ptx input, line " + std::to_string(line) +
                        "; fatal   : Unsupported .version " + std::to_string(isa / 10) + "." +
                        std::to_string(isa % 10) + "; current version is '" +
                        std::to_string(newest / 10) + "." + std::to_string(newest % 10) + "'");
    }
    const int target = ptx_number(text, ".target sm_", line);
    if (target > device) {
      delete module;
      return refuse(CUDA_ERROR_INVALID_PTX,
                    "ptxas application ptx input, line " + std::to_string(line) +
                        "; fatal   : SM version specified by .target is higher than default SM "
                        "version assumed");
    }
    if (!parse_ptx(text, *module)) {
      for (CUfunc_st* f : module->functions) delete f;
      delete module;
      return refuse(CUDA_ERROR_INVALID_PTX,
                    "ptxas application ptx input, line 1; fatal   : Parsing error near '" +
                        std::string(text.substr(0, 16)) + "': syntax error");
    }
  }
  write_jit_log("info    : " + std::to_string(module->functions.size()) + " entry function(s)",
                info_log, info_size);
  if (error_size != nullptr) *error_size = nullptr;
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.modules.insert(module);
  *out = module;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule* out, const void* image) {
  return cuModuleLoadDataEx(out, image, 0, nullptr, nullptr);
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.modules.erase(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  for (CUfunc_st* f : module->functions) delete f;
  delete module;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* out, CUmodule module, const char* name) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  for (CUfunc_st* f : module->functions) {
    if (f->name == name) {
      *out = f;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction f) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = f->max_threads;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *value = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  if (index >= f->param_sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  size_t at = 0;
  for (size_t i = 0; i <= index; ++i) {
    at = (at + f->param_sizes[i] - 1) / f->param_sizes[i] * f->param_sizes[i];  // aligned
    if (i < index) at += f->param_sizes[i];
  }
  *offset = at;
  *size = f->param_sizes[index];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction, CUfunction_attribute attribute, int value) {
  if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES || value > 227 * 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shared, CUstream stream, void** params, void** extra) {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  if (extra != nullptr || (params == nullptr && !f->param_sizes.empty())) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (uint64_t{bx} * by * bz > static_cast<uint64_t>(f->max_threads)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  fake_cuda_launch_t launch =
      fake_vendor::launch_record(f->name, grid, block, shared, stream != nullptr ? stream->id : 0);
  // Copied at the call, as CUDA does.
  if (!fake_vendor::copy_params(launch, f->param_sizes, params)) return CUDA_ERROR_INVALID_VALUE;
  state().launches.add(launch);
  return CUDA_SUCCESS;
}

}  // extern "C"

// ---- the exports: cuGetProcAddress and the test queries ---------------------------

FAKE_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                                 cuuint64_t flags,
                                                 CUdriverProcAddressQueryResult* status) {
  static const std::map<std::string_view, void*> kTable = {
#define FAKE_ENTRY(name) {#name, reinterpret_cast<void*>(&name)},
      FAKE_ENTRY(cuInit) FAKE_ENTRY(cuDriverGetVersion) FAKE_ENTRY(cuGetErrorName) FAKE_ENTRY(
          cuDeviceGetCount) FAKE_ENTRY(cuDeviceGet) FAKE_ENTRY(cuDeviceGetName)
          FAKE_ENTRY(cuDeviceGetUuid) FAKE_ENTRY(cuDeviceTotalMem) FAKE_ENTRY(cuDeviceGetAttribute)
              FAKE_ENTRY(cuDevicePrimaryCtxRetain) FAKE_ENTRY(cuDevicePrimaryCtxRelease) FAKE_ENTRY(
                  cuCtxSetCurrent) FAKE_ENTRY(cuCtxSynchronize) FAKE_ENTRY(cuMemAlloc)
                  FAKE_ENTRY(cuMemFree) FAKE_ENTRY(cuMemHostAlloc) FAKE_ENTRY(cuMemFreeHost)
                      FAKE_ENTRY(cuMemAllocManaged) FAKE_ENTRY(cuMemcpyAsync) FAKE_ENTRY(
                          cuMemcpyDtoDAsync) FAKE_ENTRY(cuMemsetD8Async) FAKE_ENTRY(cuStreamCreate)
                          FAKE_ENTRY(cuStreamDestroy) FAKE_ENTRY(cuStreamSynchronize) FAKE_ENTRY(
                              cuStreamQuery) FAKE_ENTRY(cuStreamWaitEvent)
                              FAKE_ENTRY(cuLaunchHostFunc) FAKE_ENTRY(cuEventCreate) FAKE_ENTRY(
                                  cuEventDestroy) FAKE_ENTRY(cuEventRecord) FAKE_ENTRY(cuEventQuery)
                                  FAKE_ENTRY(cuEventSynchronize) FAKE_ENTRY(cuEventElapsedTime)
                                      FAKE_ENTRY(cuModuleLoadData) FAKE_ENTRY(cuModuleLoadDataEx)
                                          FAKE_ENTRY(cuModuleUnload) FAKE_ENTRY(cuModuleGetFunction)
                                              FAKE_ENTRY(cuFuncGetAttribute) FAKE_ENTRY(
                                                  cuFuncGetParamInfo) FAKE_ENTRY(cuFuncSetAttribute)
                                                  FAKE_ENTRY(cuLaunchKernel) FAKE_ENTRY(
                                                      cuCtxGetCurrent) FAKE_ENTRY(cuMemGetInfo)
                                                      FAKE_ENTRY(cuPointerGetAttribute)
                                                          FAKE_ENTRY(cuMemHostRegister)
                                                              FAKE_ENTRY(cuMemHostUnregister)
                                                                  FAKE_ENTRY(cuStreamWaitValue32)
                                                                      FAKE_ENTRY(fake_cuStreamWork)
#undef FAKE_ENTRY
  };
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (flags != CU_GET_PROC_ADDRESS_DEFAULT || cuda_version < 12000 ||
      cuda_version > driver_version()) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  const auto it = kTable.find(symbol);
  if (it == kTable.end()) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = it->second;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

FAKE_VENDOR_TEST_QUERIES(cuda, fake_cuda_launch_t)

FAKE_EXPORT long fake_cuda_live(const char* what) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const std::string_view name(what);
  if (const long count = fake_vendor::count_live(s, name); count >= 0) return count;
  if (name == "contexts") return s.contexts[0].references + s.contexts[1].references;
  if (name == "context_creations") return s.context_creations;
  if (name == "driver_thread_calls") return driver_thread_calls.load();
  return -1;
}

FAKE_EXPORT void* fake_cuda_foreign_context(void) {
  return &foreign_context;
}

FAKE_EXPORT void fake_cuda_inject_fault(int ordinal, int code) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.contexts[ordinal].sticky = static_cast<CUresult>(code);
  s.changed.notify_all();
}
