#include "allocator.hpp"

#include "runtime.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace hal_torch {
namespace {

// Sizes up to 1 MiB are rounded to 512 bytes; larger ones to an eighth of
// their power of two (at most 12.5% slack), so that nearby sizes share blocks.
size_t round_size(size_t n) {
  constexpr size_t kSmall = size_t{1} << 20;
  constexpr size_t kQuantum = 512;
  if (n <= kSmall) return (n + kQuantum - 1) / kQuantum * kQuantum;
  size_t power = kSmall;
  while (power * 2 <= n) power *= 2;
  const size_t step = power / 8;
  return (n + step - 1) / step * step;
}

// Events recorded on |streams| now (the streams' work so far), on each stream's device.
std::vector<hal_event_t> record_events(const std::vector<c10::Stream>& streams) {
  std::vector<hal_event_t> events;
  for (const c10::Stream& stream : streams) {
    hal_event_t event = nullptr;
    const c10::DeviceIndex index = stream.device_index();
    if (hal_event_create(device_handle(index), 0, &event) != HAL_SUCCESS) {
      // Out of events: wait for the stream instead, which is what the event would say.
      hal_stream_synchronize(stream_handle(stream));
      continue;
    }
    if (hal_event_record(event, stream_handle(stream)) != HAL_SUCCESS) {
      hal_event_destroy(event);
      hal_stream_synchronize(stream_handle(stream));
      continue;
    }
    events.push_back(event);
  }
  return events;
}

// True when every event is complete (a failed query counts as complete: the
// device is lost and runs nothing more); destroys them then.
bool events_complete(std::vector<hal_event_t>& events) {
  for (hal_event_t event : events) {
    if (hal_event_query(event) == HAL_NOT_READY) return false;
  }
  for (hal_event_t event : events) hal_event_destroy(event);
  events.clear();
  return true;
}

void wait_and_destroy(std::vector<hal_event_t>& events) {
  for (hal_event_t event : events) {
    hal_event_synchronize(event);
    hal_event_destroy(event);
  }
  events.clear();
}

// ---- device memory ------------------------------------------------------------------------

struct Block {
  void* ptr = nullptr;
  size_t size = 0;
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;          // the stream it was allocated on
  std::vector<c10::Stream> uses;     // other streams it was recorded on
  std::vector<hal_event_t> waiting;  // when freed with uses: their events
};

void free_device_block(void* ptr);

class DeviceCachingAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const c10::DeviceIndex device = current_device();
    const c10::Device where(kHalDeviceType, device);
    if (n == 0) return {nullptr, nullptr, &free_device_block, where};
    const size_t size = round_size(n);
    const c10::Stream stream = current_stream(device);
    std::lock_guard<std::mutex> lock(mutex_);
    MemoryStats& stats = stats_locked(device);
    reclaim_pending_locked();
    Block* block = take_cached_locked(device, stream.id(), size);
    if (block == nullptr) block = allocate_new_locked(device, stream.id(), size, stats);
    live_.emplace(block->ptr, block);
    stats.allocated_bytes += static_cast<int64_t>(size);
    stats.peak_allocated_bytes = std::max(stats.peak_allocated_bytes, stats.allocated_bytes);
    ++stats.allocations;
    return {block->ptr, block->ptr, &free_device_block, where};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_device_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    const c10::DeviceIndex device = current_device();
    hal_stream_t stream = current_hal_stream(device);
    check(hal_memcpy_async(dest, src, count, stream), "copying hal memory");
    check(hal_stream_synchronize(stream), "copying hal memory");
  }

  bool initialized() override { return device_count() > 0; }

  void emptyCache(c10::MempoolId_t /*pool*/) override { release_cached(); }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get_context() == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = live_.find(ptr.get_context());
    if (found == live_.end()) return;  // not ours (from_blob, DLPack import)
    Block* block = found->second;
    if (stream.device_index() == block->device && stream.id() == block->stream) return;
    if (std::find(block->uses.begin(), block->uses.end(), stream) == block->uses.end()) {
      block->uses.push_back(stream);
    }
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const MemoryStats s = stats(device);
    c10::CachingDeviceAllocator::DeviceStats out;
    auto set = [](c10::CachingAllocator::StatArray& array, int64_t current, int64_t peak) {
      auto& aggregate = array[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
      aggregate.current = current;
      aggregate.peak = peak;
    };
    set(out.allocated_bytes, s.allocated_bytes, s.peak_allocated_bytes);
    set(out.active_bytes, s.allocated_bytes, s.peak_allocated_bytes);
    set(out.requested_bytes, s.allocated_bytes, s.peak_allocated_bytes);
    set(out.reserved_bytes, s.reserved_bytes, s.peak_reserved_bytes);
    out.num_alloc_retries = s.alloc_retries;
    out.num_ooms = s.ooms;
    out.num_device_alloc = s.hal_allocations;
    out.num_device_free = s.hal_frees;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    MemoryStats& s = stats_locked(device);
    s.allocations = s.hal_allocations = s.hal_frees = s.alloc_retries = s.ooms = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    MemoryStats& s = stats_locked(device);
    s.peak_allocated_bytes = s.allocated_bytes;
    s.peak_reserved_bytes = s.reserved_bytes;
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    const uint64_t total = device_state(device).properties.total_memory_bytes;
    const MemoryStats s = stats(device);
    const uint64_t used = static_cast<uint64_t>(s.reserved_bytes);
    return {static_cast<size_t>(total > used ? total - used : 0), static_cast<size_t>(total)};
  }

  MemoryStats stats(c10::DeviceIndex device) {
    check_device_index(device);
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_locked(device);
  }

  void release(void* ptr) noexcept {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = live_.find(ptr);
    if (found == live_.end()) return;
    Block* block = found->second;
    live_.erase(found);
    stats_locked(block->device).allocated_bytes -= static_cast<int64_t>(block->size);
    if (block->uses.empty()) {
      cached_[{block->device, block->stream, block->size}].push_back(block);
      return;
    }
    block->waiting = record_events(block->uses);
    block->uses.clear();
    pending_.push_back(block);
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Block* block : pending_) wait_and_destroy(block->waiting);
    for (Block* block : pending_)
      cached_[{block->device, block->stream, block->size}].push_back(block);
    pending_.clear();
    for (auto& [key, blocks] : cached_) {
      for (Block* block : blocks) free_to_hal_locked(block);
    }
    cached_.clear();
  }

 private:
  using CacheKey = std::tuple<c10::DeviceIndex, c10::StreamId, size_t>;

  MemoryStats& stats_locked(c10::DeviceIndex device) {
    if (stats_.size() <= static_cast<size_t>(device))
      stats_.resize(static_cast<size_t>(device) + 1);
    return stats_[static_cast<size_t>(device)];
  }

  void reclaim_pending_locked() {
    if (pending_.empty()) return;
    auto still_waiting = std::remove_if(pending_.begin(), pending_.end(), [&](Block* block) {
      if (!events_complete(block->waiting)) return false;
      cached_[{block->device, block->stream, block->size}].push_back(block);
      return true;
    });
    pending_.erase(still_waiting, pending_.end());
  }

  Block* take_cached_locked(c10::DeviceIndex device, c10::StreamId stream, size_t size) {
    auto found = cached_.find({device, stream, size});
    if (found == cached_.end() || found->second.empty()) return nullptr;
    Block* block = found->second.back();
    found->second.pop_back();
    return block;
  }

  Block* allocate_new_locked(c10::DeviceIndex device, c10::StreamId stream, size_t size,
                             MemoryStats& stats) {
    hal_device_t handle = device_handle(device);
    void* ptr = nullptr;
    hal_result_t result = hal_mem_alloc(handle, HAL_MEMORY_DEVICE, size, 0, &ptr);
    if (result == HAL_ERROR_OUT_OF_MEMORY) {
      // Give this device's cached blocks back and try once more.
      ++stats.alloc_retries;
      for (auto& [key, blocks] : cached_) {
        if (std::get<0>(key) != device) continue;
        for (Block* block : blocks) free_to_hal_locked(block);
        blocks.clear();
      }
      result = hal_mem_alloc(handle, HAL_MEMORY_DEVICE, size, 0, &ptr);
    }
    if (result != HAL_SUCCESS) {
      if (result == HAL_ERROR_OUT_OF_MEMORY) ++stats.ooms;
      std::ostringstream context;
      context << "allocating " << size << " bytes on hal:" << static_cast<int>(device) << " ("
              << stats.allocated_bytes << " bytes in tensors, " << stats.reserved_bytes
              << " reserved by the caching allocator, "
              << device_state(device).properties.total_memory_bytes << " in the device)";
      raise_hal_error(result, context.str());
    }
    ++stats.hal_allocations;
    stats.reserved_bytes += static_cast<int64_t>(size);
    stats.peak_reserved_bytes = std::max(stats.peak_reserved_bytes, stats.reserved_bytes);
    auto* block = new Block;
    block->ptr = ptr;
    block->size = size;
    block->device = device;
    block->stream = stream;
    return block;
  }

  void free_to_hal_locked(Block* block) {
    MemoryStats& stats = stats_locked(block->device);
    if (hal_mem_free(block->ptr) == HAL_SUCCESS) {
      ++stats.hal_frees;
      stats.reserved_bytes -= static_cast<int64_t>(block->size);
    }
    delete block;
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block*> live_;
  std::map<CacheKey, std::vector<Block*>> cached_;
  std::vector<Block*> pending_;
  std::vector<MemoryStats> stats_;
};

DeviceCachingAllocator& the_device_allocator() {
  static auto* const instance = new DeviceCachingAllocator;  // outlives every tensor
  return *instance;
}

void free_device_block(void* ptr) {
  the_device_allocator().release(ptr);
}

// ---- pinned host memory -------------------------------------------------------------------

struct HostBlock {
  void* ptr = nullptr;
  size_t size = 0;
  bool from_hal = false;
  std::vector<hal_event_t> uses;  // copies that may still touch it
};

void free_host_block(void* ptr);

class HostCachingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return {nullptr, nullptr, &free_host_block, cpu};
    const size_t size = round_size(n);
    std::lock_guard<std::mutex> lock(mutex_);
    reclaim_pending_locked();
    HostBlock* block = nullptr;
    if (auto found = cached_.find(size); found != cached_.end() && !found->second.empty()) {
      block = found->second.back();
      found->second.pop_back();
    } else {
      block = allocate_new(size);
    }
    live_.emplace(block->ptr, block);
    return {block->ptr, block->ptr, &free_host_block, cpu};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_host_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  bool contains(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    HostBlock* block = find_locked(ptr);
    return block != nullptr && block->from_hal;
  }

  void record(const void* ptr, const c10::Stream& stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    HostBlock* block = find_locked(ptr);
    if (block == nullptr) return;
    // Forget the uses that are over, so a long-lived buffer keeps a short list.
    auto done = std::remove_if(block->uses.begin(), block->uses.end(), [](hal_event_t event) {
      if (hal_event_query(event) == HAL_NOT_READY) return false;
      hal_event_destroy(event);
      return true;
    });
    block->uses.erase(done, block->uses.end());
    for (hal_event_t event : record_events({stream})) block->uses.push_back(event);
  }

  void release(void* ptr) noexcept {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = live_.find(ptr);
    if (found == live_.end()) return;
    HostBlock* block = found->second;
    live_.erase(found);
    if (block->uses.empty()) {
      cached_[block->size].push_back(block);
    } else {
      pending_.push_back(block);
    }
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (HostBlock* block : pending_) {
      wait_and_destroy(block->uses);
      cached_[block->size].push_back(block);
    }
    pending_.clear();
    for (auto& [size, blocks] : cached_) {
      for (HostBlock* block : blocks) {
        if (block->from_hal) {
          hal_mem_free(block->ptr);
        } else {
          std::free(block->ptr);
        }
        delete block;
      }
    }
    cached_.clear();
  }

 private:
  HostBlock* find_locked(const void* ptr) {
    auto after = live_.upper_bound(const_cast<void*>(ptr));
    if (after == live_.begin()) return nullptr;
    HostBlock* block = std::prev(after)->second;
    const auto* base = static_cast<const char*>(block->ptr);
    const auto* p = static_cast<const char*>(ptr);
    return p < base + block->size ? block : nullptr;
  }

  void reclaim_pending_locked() {
    auto still_waiting = std::remove_if(pending_.begin(), pending_.end(), [&](HostBlock* block) {
      if (!events_complete(block->uses)) return false;
      cached_[block->size].push_back(block);
      return true;
    });
    pending_.erase(still_waiting, pending_.end());
  }

  static HostBlock* allocate_new(size_t size) {
    auto* block = new HostBlock;
    block->size = size;
    for (int i = 0; i < device_count(); ++i) {
      DeviceState& state = device_state(static_cast<c10::DeviceIndex>(i));
      if (!state.has_host_memory) continue;
      if (hal_mem_alloc(state.handle, HAL_MEMORY_HOST, size, 0, &block->ptr) == HAL_SUCCESS) {
        block->from_hal = true;
        return block;
      }
    }
    block->ptr = std::aligned_alloc(64, (size + 63) / 64 * 64);
    if (block->ptr == nullptr) {
      delete block;
      C10_THROW_ERROR(OutOfMemoryError,
                      "allocating " + std::to_string(size) + " bytes of host memory failed");
    }
    return block;
  }

  std::mutex mutex_;
  std::map<void*, HostBlock*> live_;
  std::map<size_t, std::vector<HostBlock*>> cached_;
  std::vector<HostBlock*> pending_;
};

HostCachingAllocator& the_host_allocator() {
  static auto* const instance = new HostCachingAllocator;
  return *instance;
}

void free_host_block(void* ptr) {
  the_host_allocator().release(ptr);
}

}  // namespace

c10::DeviceAllocator& device_allocator() {
  return the_device_allocator();
}
c10::Allocator& host_allocator() {
  return the_host_allocator();
}

bool is_pinned_host_pointer(const void* ptr) {
  return the_host_allocator().contains(ptr);
}

void record_host_use(const void* ptr, const c10::Stream& stream) {
  the_host_allocator().record(ptr, stream);
}

void empty_cache() {
  the_device_allocator().release_cached();
  the_host_allocator().release_cached();
}

MemoryStats memory_stats(c10::DeviceIndex device) {
  return the_device_allocator().stats(device);
}

void reset_peak_memory_stats(c10::DeviceIndex device) {
  the_device_allocator().resetPeakStats(device);
}

// Registered at load: torch asks for the hal device type's allocator by key.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &the_device_allocator())

}  // namespace hal_torch
