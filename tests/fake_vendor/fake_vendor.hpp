// What the stand-in vendor libraries of the GPU plugins' tests share
// (tests/cuda/fake_driver, a libcuda.so.1; tests/hip/fake_runtime, a
// libamdhip64.so.5; tests/level_zero/fake_driver, a Level Zero driver): the
// driver-side bookkeeping under one lock, so that each stand-in keeps only
// its vendor's API surface (entry points, error codes, what it models of its
// vendor's documented behaviour).
// - Host: the lock, the "something changed" signal and the test's pause.
// - Stream: work run in order on a thread of its own (a CUDA or HIP stream,
//   a Level Zero immediate command list), held while the device is paused.
// - EventState and its functions: records and waits counted when enqueued,
//   completed when the stream reaches them, as CUDA and HIP capture them.
// - Heap: host memory standing in for device memory, found by any pointer
//   into a block.
// - LaunchLog and the launch record: every launch as the library received it.
// - elf_extent: the bytes an ELF image spans (a module load takes no size).
// Each stand-in links its own copy (a static library): one Host a library.
#ifndef HAL_TESTS_FAKE_VENDOR_FAKE_VENDOR_HPP_
#define HAL_TESTS_FAKE_VENDOR_FAKE_VENDOR_HPP_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fake_launch.h"

// The vendor's entry points and the test queries, exported from a library
// built with hidden visibility.
#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace fake_vendor {

// The device's lock, its signal and the pause a test sets. A stand-in keeps
// one for its life and never destroys it (host functions may outlive exit).
struct Host {
  std::mutex mutex;
  std::condition_variable changed;  // any queue, pause or event changed
  bool paused = false;              // guarded by mutex

  // While paused, queued work waits; unpausing lets each stream run it.
  void set_paused(bool pause);
  // Resumes a paused device (a synchronize would never return), then waits
  // under the lock until |done|.
  void wait_until(const std::function<bool()>& done);
};

// Work run in order on a thread of its own. Each piece may wait for a
// condition first (|ready|, checked under the host's lock); while the host
// is paused nothing starts, except when the stream is stopping.
class Stream {
 public:
  Stream(Host& host, uint64_t id);
  virtual ~Stream();  // stop() if the vendor did not
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Caller holds the host's lock.
  void push_locked(std::function<void()> work, std::function<bool()> ready = nullptr);
  void push(std::function<void()> work, std::function<bool()> ready = nullptr);
  // Nothing queued and nothing running. Caller holds the host's lock.
  bool idle() const;
  // Lets what is queued run (paused or not), then joins the thread. Call it
  // without the host's lock.
  void stop();

  const uint64_t id;  // opaque, recorded with launches

 private:
  struct Work {
    std::function<bool()> ready;
    std::function<void()> run;
  };
  bool runnable() const;
  void loop();

  Host& host_;
  std::deque<Work> queue_;  // guarded by the host's lock
  bool busy_ = false;       // guarded by the host's lock
  bool stopping_ = false;   // guarded by the host's lock
  std::thread worker_;      // last: started once the rest is made
};

// An event, shared with the work that records or waits for it, which may
// outlive the vendor's handle (CUDA and HIP let pending waits on a destroyed
// event complete). Guarded by the host's lock.
struct EventState {
  bool timing = true;
  uint64_t recorded = 0;   // records enqueued
  uint64_t completed = 0;  // records reached
  std::chrono::steady_clock::time_point when;
};

// The vendor's event handle holds one.
struct Event {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

// The work a record of |event| enqueues: the record counts now, and
// completes (with its time) when the stream reaches it. Caller holds the lock.
std::function<void()> record_work(Host& host, const std::shared_ptr<EventState>& event);
// The work a wait for |event| enqueues: it waits for the record enqueued
// last before this call. Caller holds the lock.
std::function<void()> wait_work(Host& host, const std::shared_ptr<EventState>& event);
// Every record enqueued so far has been reached. Caller holds the lock.
bool reached(const EventState& event);
// Waits (resuming a paused device) until every record of |event| enqueued so
// far was reached.
void synchronize(Host& host, const Event& event);

enum class Elapsed { kDone, kNotReady, kInvalid };
// The time between two events' last records, in ms: kNotReady while either
// is pending, kInvalid for an event without timing or never recorded.
// Caller holds the lock.
Elapsed elapsed(const EventState& first, const EventState& last, float* ms);

// Host memory standing in for device memory: blocks by base, each with its
// size and what the vendor keeps of it. Caller holds the host's lock, except
// for reserve.
template <class Info>
class Heap {
 public:
  struct Block {
    size_t bytes;
    Info info;
  };
  Heap() = default;
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;
  ~Heap() { clear(); }

  // |bytes| rounded up to |alignment| (a power of two) from the host heap;
  // null when there is none. Takes no lock.
  static void* reserve(size_t bytes, size_t alignment) {
    return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  }
  void add(void* base, size_t bytes, Info info) { blocks_.emplace(base, Block{bytes, info}); }
  // Frees the block at |base|, its record into |out| when not null; false
  // when |base| is no block's base.
  bool release(void* base, Block* out = nullptr) {
    const auto it = blocks_.find(base);
    if (it == blocks_.end()) return false;
    if (out != nullptr) *out = it->second;
    blocks_.erase(it);
    std::free(base);
    return true;
  }
  // The block holding |pointer| (interior pointers too), or null.
  const Block* find(const void* pointer) const {
    auto it = blocks_.upper_bound(const_cast<void*>(pointer));
    if (it == blocks_.begin()) return nullptr;
    --it;
    const auto* base = static_cast<const char*>(it->first);
    return static_cast<const char*>(pointer) < base + it->second.bytes ? &it->second : nullptr;
  }
  size_t size() const { return blocks_.size(); }
  // Frees every block.
  void clear() {
    for (const auto& [base, block] : blocks_) std::free(base);
    blocks_.clear();
  }

 private:
  std::map<void*, Block> blocks_;
};

// What a launch recorded of the kernel and its configuration, before its
// parameters (copy_params).
fake_kernel_launch_t launch_record(const std::string& name, const uint32_t grid[3],
                                   const uint32_t block[3], uint32_t shared_bytes,
                                   uint64_t stream_id);
// Copies the parameters of a launch, params[i] of sizes[i] bytes, as the
// vendor does at the call; false when they do not fit the record.
bool copy_params(fake_kernel_launch_t& launch, const std::vector<uint32_t>& sizes,
                 void* const* params);

// Every launch in the order received, read back by the test queries.
template <class Launch>
class LaunchLog {
 public:
  explicit LaunchLog(Host& host) : host_(host) {}
  void add(const Launch& launch) {
    std::lock_guard lock(host_.mutex);
    launches_.push_back(launch);
  }
  size_t count() const {
    std::lock_guard lock(host_.mutex);
    return launches_.size();
  }
  // 1 and the launch at |index| into |out|, 0 past the end.
  int get(size_t index, Launch* out) const {
    std::lock_guard lock(host_.mutex);
    if (index >= launches_.size()) return 0;
    *out = launches_[index];
    return 1;
  }

 private:
  Host& host_;
  std::vector<Launch> launches_;  // guarded by the host's lock
};

// How many allocations, streams, events or modules (|name|) a stand-in's
// state |s| holds (its members of those names); -1 for another name. Caller
// holds the lock.
template <class State>
long count_live(const State& s, std::string_view name) {
  if (name == "allocations") return static_cast<long>(s.allocations.size());
  if (name == "streams") return static_cast<long>(s.streams.size());
  if (name == "events") return static_cast<long>(s.events.size());
  if (name == "modules") return static_cast<long>(s.modules.size());
  return -1;
}

// The bytes an ELF64 image spans by its own headers: the header, the
// section and program header tables and every section with file contents.
// The plugin checked the image's bounds before the call (the vendor's load
// takes no size), so the header tables may be read.
size_t elf_extent(const unsigned char* data);

}  // namespace fake_vendor

// The test queries every stand-in exports, fake_<prefix>_launch_count,
// fake_<prefix>_launch_get and fake_<prefix>_set_paused (declared in its
// header), over its state(): a Host with a LaunchLog named launches.
#define FAKE_VENDOR_TEST_QUERIES(prefix, launch_type)                          \
  FAKE_EXPORT size_t fake_##prefix##_launch_count(void) {                      \
    return state().launches.count();                                           \
  }                                                                            \
  FAKE_EXPORT int fake_##prefix##_launch_get(size_t index, launch_type* out) { \
    return state().launches.get(index, out);                                   \
  }                                                                            \
  FAKE_EXPORT void fake_##prefix##_set_paused(int paused) {                    \
    state().set_paused(paused != 0);                                           \
  }

#endif  // HAL_TESTS_FAKE_VENDOR_FAKE_VENDOR_HPP_
