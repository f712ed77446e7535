// The dispatch header every public handle starts with, its validation, and
// the quarantine that keeps destroyed handles recognisable.
#pragma once

#include <hal/plugin_v1.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hal::loader {

class PluginRecord;

enum class HandleKind : uint32_t { kDevice = 1, kStream, kEvent, kModule, kKernel, kComm };

inline constexpr uint32_t kLiveMagic = 0x314c4148u;       // "HAL1"
inline constexpr uint32_t kDestroyedMagic = 0x44414544u;  // "DEAD"

// At offset 0 of every public handle. Dispatch is: check magic and kind, load
// plugin->table, call. The magic is atomic only so that a racy use-after-destroy
// stays a detected error rather than a data race; relaxed loads are plain moves.
struct DispatchHeader {
  std::atomic<uint32_t> magic;
  uint32_t kind;
  const PluginRecord* plugin;

  DispatchHeader(HandleKind handle_kind, const PluginRecord* owner) noexcept
      : magic(kLiveMagic), kind(static_cast<uint32_t>(handle_kind)), plugin(owner) {}
};

const char* kind_name(HandleKind kind) noexcept;

template <class Handle>
inline bool is_live(const Handle* handle, HandleKind kind) noexcept {
  static_assert(offsetof(Handle, header) == 0, "the dispatch header must be at offset 0");
  return handle != nullptr && handle->header.magic.load(std::memory_order_relaxed) == kLiveMagic &&
         handle->header.kind == static_cast<uint32_t>(kind);
}

// The slow path of validation: records why |handle| was rejected and returns
// HAL_ERROR_INVALID_HANDLE or HAL_ERROR_DESTROYED_HANDLE.
hal_result_t reject_handle(const void* handle, HandleKind expected, const char* function,
                           const char* argument) noexcept;

// Destroyed handles stay allocated with kDestroyedMagic, the most recent
// |capacity| of them, so a use-after-destroy or a double destroy reads a
// recognisable header instead of freed memory. Older ones are freed.
template <class Handle>
class Quarantine {
 public:
  explicit Quarantine(size_t capacity) : capacity_(capacity) {}

  void retire(std::unique_ptr<Handle> handle) {
    handle->header.magic.store(kDestroyedMagic, std::memory_order_relaxed);
    std::unique_ptr<Handle> evicted;
    std::lock_guard lock(mutex_);
    retired_.push_back(std::move(handle));
    if (retired_.size() > capacity_) {
      evicted = std::move(retired_.front());
      retired_.pop_front();
    }
  }

  size_t size() const {
    std::lock_guard lock(mutex_);
    return retired_.size();
  }

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<std::unique_ptr<Handle>> retired_;
};

// The live objects of one kind on one device: what device_synchronize and
// hal_shutdown walk.
template <class Handle>
class LiveSet {
 public:
  Handle* add(std::unique_ptr<Handle> handle) {
    Handle* raw = handle.get();
    std::lock_guard lock(mutex_);
    objects_.emplace(raw, std::move(handle));
    return raw;
  }

  std::unique_ptr<Handle> take(Handle* handle) {
    std::lock_guard lock(mutex_);
    auto found = objects_.find(handle);
    if (found == objects_.end()) return nullptr;
    std::unique_ptr<Handle> owned = std::move(found->second);
    objects_.erase(found);
    return owned;
  }

  std::vector<std::unique_ptr<Handle>> take_all() {
    std::lock_guard lock(mutex_);
    std::vector<std::unique_ptr<Handle>> all;
    all.reserve(objects_.size());
    for (auto& [raw, owned] : objects_) all.push_back(std::move(owned));
    objects_.clear();
    return all;
  }

  // Calls |visit| on each live object while holding the set's lock, so none is
  // destroyed underneath; stops at the first failure and returns it.
  template <class Visit>
  hal_result_t for_each(Visit&& visit) const {
    std::lock_guard lock(mutex_);
    for (const auto& [raw, owned] : objects_) {
      const hal_result_t result = visit(raw);
      if (result != HAL_SUCCESS) return result;
    }
    return HAL_SUCCESS;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<Handle*, std::unique_ptr<Handle>> objects_;
};

}  // namespace hal::loader
