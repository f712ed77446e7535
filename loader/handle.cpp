#include "handle.hpp"

#include "error.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>

namespace hal::loader {

namespace {

const char* article(HandleKind kind) {
  return kind == HandleKind::kEvent ? "an" : "a";
}

size_t round_up_power_of_two(size_t value) {
  size_t rounded = 64;
  while (rounded < value) rounded <<= 1;
  return rounded;
}

size_t page_bytes() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : 4096;
}

// One slab per handle type, at most a few per kind (tests make their own).
constexpr size_t kMaxSlabs = 16;
std::array<std::atomic<HandleSlab*>, kMaxSlabs> g_slabs{};

}  // namespace

const char* kind_name(HandleKind kind) noexcept {
  switch (kind) {
    case HandleKind::kDevice:
      return "device";
    case HandleKind::kStream:
      return "stream";
    case HandleKind::kEvent:
      return "event";
    case HandleKind::kModule:
      return "module";
    case HandleKind::kKernel:
      return "kernel";
    case HandleKind::kComm:
      return "communicator";
  }
  return "unknown";
}

hal_result_t reject_handle(const void* handle, HandleKind expected, const char* function,
                           const char* argument) noexcept {
  if (handle == nullptr) {
    return fail(HAL_ERROR_INVALID_HANDLE, function, "%s is NULL, expected %s %s handle", argument,
                article(expected), kind_name(expected));
  }
  // A slot of the kind's slab is a handle of that kind given out earlier; not
  // live, it was destroyed (its page may since read as zeroes).
  const auto* header = static_cast<const DispatchHeader*>(handle);
  if (HandleSlab::any_handed_out(expected, handle) &&
      header->magic.load(std::memory_order_relaxed) != kLiveMagic) {
    return fail(HAL_ERROR_DESTROYED_HANDLE, function, "%s %p is a %s that was already destroyed",
                argument, handle, kind_name(expected));
  }
  // Every handle the loader gave out starts with a DispatchHeader; anything
  // else is foreign and reading its first bytes is the best check available.
  const uint32_t magic = header->magic.load(std::memory_order_relaxed);
  const uint32_t kind = header->kind;
  const bool known_kind = kind >= static_cast<uint32_t>(HandleKind::kDevice) &&
                          kind <= static_cast<uint32_t>(HandleKind::kComm);
  if (magic == kDestroyedMagic && kind == static_cast<uint32_t>(expected)) {
    return fail(HAL_ERROR_DESTROYED_HANDLE, function, "%s %p is a %s that was already destroyed",
                argument, handle, kind_name(expected));
  }
  if ((magic == kLiveMagic || magic == kDestroyedMagic) && known_kind) {
    return fail(HAL_ERROR_INVALID_HANDLE, function, "%s %p is a %s%s handle, not %s %s handle",
                argument, handle, magic == kDestroyedMagic ? "destroyed " : "",
                kind_name(static_cast<HandleKind>(kind)), article(expected), kind_name(expected));
  }
  return fail(HAL_ERROR_INVALID_HANDLE, function,
              "%s %p is not a HAL handle (expected %s %s handle)", argument, handle,
              article(expected), kind_name(expected));
}

hal_result_t reject_destroying(const void* handle, HandleKind kind, const char* function,
                               const char* argument) noexcept {
  return fail(HAL_ERROR_DESTROYED_HANDLE, function,
              "%s %p is a %s that another thread is destroying (or has destroyed)", argument,
              handle, kind_name(kind));
}

// ---- HandleSlab --------------------------------------------------------------

HandleSlab::HandleSlab(HandleKind kind, size_t slot_bytes, size_t arena_bytes, size_t max_arenas)
    : kind_(kind),
      slot_bytes_(round_up_power_of_two(slot_bytes)),
      group_bytes_(std::max(page_bytes(), slot_bytes_)),
      arena_bytes_(std::max(arena_bytes, group_bytes_) / group_bytes_ * group_bytes_),
      max_arenas_(std::max<size_t>(max_arenas, 1)) {}

void* HandleSlab::allocate() {
  std::lock_guard lock(mutex_);
  // At most one full pass over every group looking for a free one.
  const size_t groups_per_arena = arena_bytes_ / group_bytes_;
  for (size_t tries = 0; tries <= max_arenas_ * groups_per_arena + 1;) {
    if (cursor_arena_ == arenas_.size() && arenas_.size() < max_arenas_) {
      void* base = mmap(nullptr, arena_bytes_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) throw std::bad_alloc();
      arenas_.push_back(Arena{static_cast<char*>(base), std::vector<uint32_t>(groups_per_arena)});
    }
    if (cursor_arena_ == arenas_.size()) {  // every arena mapped and gone through: a new lap
      cursor_arena_ = 0;
      cursor_offset_ = 0;
      ++laps_;
    }
    Arena& arena = arenas_[cursor_arena_];
    if (cursor_offset_ == arena_bytes_) {
      ++cursor_arena_;
      cursor_offset_ = 0;
      continue;
    }
    const size_t group = group_of(cursor_offset_);
    // Starting a group on a later lap: only one whose slots are all destroyed.
    if (cursor_offset_ % group_bytes_ == 0 && arena.live[group] != 0) {
      cursor_offset_ += group_bytes_;
      ++tries;
      continue;
    }
    void* slot = arena.base + cursor_offset_;
    ++arena.live[group];
    cursor_offset_ += slot_bytes_;
    if (cursor_offset_ % group_bytes_ == 0) leave_group();
    return slot;
  }
  throw std::bad_alloc();
}

void HandleSlab::leave_group() noexcept {
  // The group just filled: if its slots all died already, nobody releases it later.
  Arena& arena = arenas_[cursor_arena_];
  const size_t group = group_of(cursor_offset_ - 1);
  if (arena.live[group] == 0) release_group(arena, group);
}

void HandleSlab::release_group(Arena& arena, size_t group) noexcept {
  // Anonymous private memory reads as zeroes afterwards; the range stays mapped.
  madvise(arena.base + group * group_bytes_, group_bytes_, MADV_DONTNEED);
}

void HandleSlab::release(void* slot) noexcept {
  std::lock_guard lock(mutex_);
  const auto address = reinterpret_cast<uintptr_t>(slot);
  for (size_t index = 0; index < arenas_.size(); ++index) {
    Arena& arena = arenas_[index];
    const auto base = reinterpret_cast<uintptr_t>(arena.base);
    if (address < base || address - base >= arena_bytes_) continue;
    const size_t offset = address - base;
    const size_t group = group_of(offset);
    if (--arena.live[group] != 0) return;
    // The group the cursor is filling is released when the cursor leaves it.
    const bool filling = index == cursor_arena_ && group == group_of(cursor_offset_) &&
                         cursor_offset_ % group_bytes_ != 0;
    if (!filling) release_group(arena, group);
    return;
  }
}

bool HandleSlab::handed_out(const void* pointer) const noexcept {
  std::lock_guard lock(mutex_);
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  for (size_t index = 0; index < arenas_.size(); ++index) {
    const auto base = reinterpret_cast<uintptr_t>(arenas_[index].base);
    if (address < base || address - base >= arena_bytes_) continue;
    const size_t offset = address - base;
    if (offset % slot_bytes_ != 0) return false;
    return laps_ > 0 || index < cursor_arena_ ||
           (index == cursor_arena_ && offset < cursor_offset_);
  }
  return false;
}

uint64_t HandleSlab::laps() const noexcept {
  std::lock_guard lock(mutex_);
  return laps_;
}

bool HandleSlab::any_handed_out(HandleKind kind, const void* pointer) noexcept {
  for (const std::atomic<HandleSlab*>& entry : g_slabs) {
    const HandleSlab* slab = entry.load(std::memory_order_acquire);
    if (slab != nullptr && slab->kind() == kind && slab->handed_out(pointer)) return true;
  }
  return false;
}

void register_slab(HandleSlab* slab) noexcept {
  for (std::atomic<HandleSlab*>& entry : g_slabs) {
    HandleSlab* expected = nullptr;
    if (entry.compare_exchange_strong(expected, slab, std::memory_order_acq_rel)) return;
  }
}

}  // namespace hal::loader
