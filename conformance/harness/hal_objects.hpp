// RAII owners of HAL objects for test bodies: a failing check throws, and the
// destructors release what the test made, so one failure does not leak into
// the next test of the same worker.
#ifndef HAL_CONFORMANCE_HARNESS_HAL_OBJECTS_HPP_
#define HAL_CONFORMANCE_HARNESS_HAL_OBJECTS_HPP_

#include <hal.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace halconform {

class Stream {
 public:
  explicit Stream(hal_device_t device);
  Stream(Stream&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;
  ~Stream();
  hal_stream_t get() const { return handle_; }
  operator hal_stream_t() const { return handle_; }
  // Gives up ownership (the test destroys it itself and checks the result).
  hal_stream_t release() { return std::exchange(handle_, nullptr); }

 private:
  hal_stream_t handle_ = nullptr;
};

class Event {
 public:
  explicit Event(hal_device_t device, hal_event_flags_t flags = HAL_EVENT_FLAG_NONE);
  Event(Event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  ~Event();
  hal_event_t get() const { return handle_; }
  operator hal_event_t() const { return handle_; }
  hal_event_t release() { return std::exchange(handle_, nullptr); }

 private:
  hal_event_t handle_ = nullptr;
};

// An allocation; |bytes()| is typed access for kinds the host may touch.
class Buffer {
 public:
  Buffer(hal_device_t device, size_t size, hal_memory_kind_t kind = HAL_MEMORY_DEVICE,
         size_t alignment = 0);
  Buffer(Buffer&& other) noexcept
      : pointer_(std::exchange(other.pointer_, nullptr)), size_(other.size_) {}
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer();
  void* get() const { return pointer_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(pointer_); }
  size_t size() const { return size_; }
  void* release() { return std::exchange(pointer_, nullptr); }

 private:
  void* pointer_ = nullptr;
  size_t size_ = 0;
};

// Raw allocations freed together at scope exit (tests that allocate in bulk).
struct AllocationList {
  AllocationList() = default;
  AllocationList(const AllocationList&) = delete;
  AllocationList& operator=(const AllocationList&) = delete;
  ~AllocationList() {
    for (void* pointer : pointers) hal_mem_free(pointer);
  }
  std::vector<void*> pointers;
};

// The conformance kernels module loaded on one device.
class Module {
 public:
  Module(hal_device_t device, const std::string& path);
  Module(Module&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Module& operator=(Module&&) = delete;
  ~Module();
  hal_module_t get() const { return handle_; }
  // The kernel |name| with the signature the module exports.
  hal_kernel_t kernel(const char* name) const;

 private:
  hal_module_t handle_ = nullptr;
};

// A host function (hal_stream_enqueue_host_fn) that sets the std::atomic<bool> at |flag|.
inline void set_flag(void* flag) {
  static_cast<std::atomic<bool>*>(flag)->store(true);
}

// A host function that holds a stream until the test opens the gate: the
// deterministic way to keep work pending while a test looks at it. Gives up
// after |max_hold_seconds| so a mistake is a slow test, not a hang, but a gate
// that gave up fails the test: open() throws, so an ordering fault that made a
// call wait for the held work (a deadlock the time-out broke) is never a pass.
class HostGate {
 public:
  explicit HostGate(double max_hold_seconds = 20.0);
  HostGate(const HostGate&) = delete;
  HostGate& operator=(const HostGate&) = delete;
  ~HostGate() { release(); }
  void enqueue_on(hal_stream_t stream);
  // Opens the gate; throws TestFailure when it had already opened by itself.
  void open();
  // Opens the gate without checking (from a helper thread, or a destructor).
  void release();
  bool was_held_open_by_timeout() const;

 private:
  // What a held host function waits on. Each enqueued hold owns a share of
  // it: the gate usually goes out of scope right after it opens, while the
  // stream's thread is still waking from the wait (reading the flag, then
  // unlocking the mutex); those must not be the gate's own members.
  struct State {
    std::mutex mutex;
    std::condition_variable opened;
    bool open = false;
    bool timed_out = false;
    double max_hold_seconds = 0;
  };
  static void hold(void* share);  // |share|: a new std::shared_ptr<State>, deleted here
  std::shared_ptr<State> state_;
};

// Seeded random bytes.
std::vector<uint8_t> random_bytes(size_t size, uint64_t seed);
// Copies |size| bytes from device memory at |src| into a host vector (synchronously on
// |stream|); fails naming hal_memcpy_async when the copy leaves a byte unwritten.
std::vector<uint8_t> read_back(hal_stream_t stream, const void* src, size_t size);
// The first index where |actual| and |expected| differ, or SIZE_MAX; a
// readable sentence about it in |out_message|.
size_t first_mismatch(const uint8_t* actual, const uint8_t* expected, size_t size,
                      std::string& out_message);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_HAL_OBJECTS_HPP_
