// A device's allocations for a plugin whose driver aligns them to a fixed
// |native| boundary (256 bytes for cuMemAlloc and hipMalloc): an alignment
// above it is carved out of a block |alignment| bytes larger. Each
// allocation remembers its kind and the block the driver returned, so that
// mem_free calls the right free on the right pointer. Thread-safe.
#ifndef HAL_PLUGIN_SDK_ALLOCATIONS_HPP_
#define HAL_PLUGIN_SDK_ALLOCATIONS_HPP_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hal_plugin.h"

namespace hal::plugin {

class Allocations {
 public:
  struct Block {
    hal_memory_kind_t kind;
    void* base;  // what the driver returned (below the pointer when carved)
  };

  explicit Allocations(size_t native_alignment) : native_(native_alignment) {}

  // The bytes to ask the driver for; 0 when |size| and the carving's slack
  // overflow the address space.
  size_t block_bytes(size_t size, size_t alignment) const {
    if (alignment <= native_) return size;
    const size_t bytes = size + alignment;
    return bytes < size ? 0 : bytes;
  }
  // The allocation the caller gets from the driver's |base|, remembered.
  void* add(hal_memory_kind_t kind, void* base, size_t alignment) {
    void* ptr = base;
    if (alignment > native_) {
      const auto address = reinterpret_cast<uintptr_t>(base);
      ptr = reinterpret_cast<void*>((address + alignment - 1) & ~(uintptr_t{alignment} - 1));
    }
    std::lock_guard lock(mutex_);
    blocks_.emplace(ptr, Block{kind, base});
    return ptr;
  }
  // Forgets |ptr|: false when it is no allocation here.
  bool take(void* ptr, Block& out_block) {
    std::lock_guard lock(mutex_);
    const auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return false;
    out_block = it->second;
    blocks_.erase(it);
    return true;
  }
  // Forgets every allocation (a device's teardown frees what the
  // application left).
  std::vector<Block> take_all() {
    std::vector<Block> all;
    std::lock_guard lock(mutex_);
    all.reserve(blocks_.size());
    for (const auto& [ptr, block] : blocks_) all.push_back(block);
    blocks_.clear();
    return all;
  }

 private:
  const size_t native_;
  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;  // by the caller's pointer, guarded by mutex_
};

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_ALLOCATIONS_HPP_
