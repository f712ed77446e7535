#include "handle.hpp"

#include "error.hpp"

#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <thread>

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
    case HandleKind::kOpPlan:
      return "operator plan";
    case HandleKind::kMoeRouting:
      return "MoE routing";
  }
  return "unknown";
}

hal_result_t reject_handle(const void* handle, HandleKind expected, const char* function,
                           const char* argument) noexcept {
  if (handle == nullptr) {
    return fail(HAL_ERROR_INVALID_HANDLE, function, "%s is NULL, expected %s %s handle", argument,
                article(expected), kind_name(expected));
  }
  // Only a slot a slab handed out is read: a handle is never anywhere else,
  // so a copy of a handle's bytes, or any other memory, is foreign unread.
  // A slot of the expected kind's slab that is not live was destroyed (its
  // page may since read as zeroes).
  const auto* header = static_cast<const DispatchHeader*>(handle);
  if (HandleSlab::any_handed_out(expected, handle)) {
    // Live again it cannot be: a live one failed the check only by racing
    // its destroy.
    return fail(HAL_ERROR_DESTROYED_HANDLE, function, "%s %p is a %s that was already destroyed",
                argument, handle, kind_name(expected));
  }
  for (uint32_t kind = static_cast<uint32_t>(HandleKind::kDevice);
       kind <= static_cast<uint32_t>(HandleKind::kMoeRouting); ++kind) {
    const auto other = static_cast<HandleKind>(kind);
    if (other == expected || !HandleSlab::any_handed_out(other, handle)) continue;
    const bool destroyed = header->magic.load(std::memory_order_relaxed) != kLiveMagic;
    return fail(HAL_ERROR_INVALID_HANDLE, function, "%s %p is a %s%s handle, not %s %s handle",
                argument, handle, destroyed ? "destroyed " : "", kind_name(other),
                article(expected), kind_name(expected));
  }
  return fail(HAL_ERROR_INVALID_HANDLE, function,
              "%s %p is not a HAL handle (expected %s %s handle)", argument, handle,
              article(expected), kind_name(expected));
}

hal_result_t reject_destroying(const void* handle, HandleKind kind, const char* function,
                               const char* argument) noexcept {
  return fail(HAL_ERROR_DESTROYED_HANDLE, function,
              "%s %p is a %s that another thread destroyed first, or that a call of this thread "
              "is still using (a host function may not destroy the stream it runs on)",
              argument, handle, kind_name(kind));
}

// ---- hazard slots --------------------------------------------------------------

__thread ThreadHazards* t_thread_hazards = nullptr;
std::atomic<bool> g_readers_fence{false};

namespace {

std::atomic<ThreadHazards*> g_hazards_head{nullptr};
std::atomic<uint64_t> g_fence_word{0};

// Whether destroys order themselves against readers with membarrier: decided
// once, before any thread publishes its first hazard.
bool use_membarrier() noexcept {
  static const bool registered = [] {
    const bool ok = syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    if (!ok) g_readers_fence.store(true, std::memory_order_relaxed);
    return ok;
  }();
  return registered;
}

// Gives the thread's record back when the thread exits.
struct HazardsReleaser {
  ~HazardsReleaser() {
    if (t_thread_hazards != nullptr) {
      t_thread_hazards->owned.store(false, std::memory_order_release);
      t_thread_hazards = nullptr;
    }
  }
};
thread_local HazardsReleaser t_releaser;

bool held_by_this_thread(const void* handle) noexcept {
  const ThreadHazards* hazards = t_thread_hazards;
  if (hazards == nullptr) return false;
  for (uint32_t i = 0; i < hazards->depth; ++i) {
    if (hazards->slots[i].load(std::memory_order_relaxed) == handle) return true;
  }
  return false;
}

}  // namespace

void reader_full_fence() noexcept {
  g_fence_word.fetch_add(0, std::memory_order_seq_cst);  // a locked instruction: a full fence
}

ThreadHazards* register_thread_hazards() noexcept {
  use_membarrier();   // before the first hazard store: g_readers_fence is settled
  (void)&t_releaser;  // constructs it, so its destructor runs at thread exit
  for (ThreadHazards* record = g_hazards_head.load(std::memory_order_acquire); record != nullptr;
       record = record->next) {
    bool expected = false;
    if (record->owned.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
      record->depth = 0;
      t_thread_hazards = record;
      return record;
    }
  }
  ThreadHazards* record = new (std::nothrow) ThreadHazards();
  if (record == nullptr) return nullptr;
  record->owned.store(true, std::memory_order_relaxed);
  record->next = g_hazards_head.load(std::memory_order_relaxed);
  while (!g_hazards_head.compare_exchange_weak(record->next, record, std::memory_order_release)) {
  }
  t_thread_hazards = record;
  return record;
}

hal_result_t reject_too_deep(const char* function) noexcept {
  return fail(HAL_ERROR_INTERNAL, function,
              "calls nested more than %u deep on this thread (host functions run by a fallback "
              "calling HAL)",
              ThreadHazards::kSlots);
}

bool begin_destroy(DispatchHeader& header) noexcept {
  if (!mark_destroyed(header)) return false;
  wait_until_unused(header);
  return true;
}

bool mark_destroyed(DispatchHeader& header) noexcept {
  if (held_by_this_thread(&header)) return false;
  uint32_t expected = kLiveMagic;
  return header.magic.compare_exchange_strong(expected, kDestroyedMagic, std::memory_order_seq_cst);
}

void wait_until_unused(const DispatchHeader& header) noexcept {
  // Readers store their hazard, then load the magic, with only a compiler
  // fence between. The membarrier makes every other running thread execute a
  // full barrier: a reader either sees the destroyed magic, or its hazard is
  // visible to the scan below (the asymmetric-fence argument of hazard
  // pointers and userspace RCU).
  if (use_membarrier()) {
    syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  } else {
    reader_full_fence();
  }
  for (const ThreadHazards* record = g_hazards_head.load(std::memory_order_acquire);
       record != nullptr; record = record->next) {
    for (const std::atomic<const void*>& slot : record->slots) {
      for (uint32_t spins = 0; slot.load(std::memory_order_acquire) == &header; ++spins) {
        if (spins > 64) std::this_thread::yield();
      }
    }
  }
}

// ---- HandleSlab --------------------------------------------------------------

HandleSlab::HandleSlab(HandleKind kind, size_t slot_bytes, size_t arena_bytes, size_t max_arenas)
    : kind_(kind),
      slot_bytes_(round_up_power_of_two(slot_bytes)),
      group_bytes_(std::max(page_bytes(), slot_bytes_)),
      arena_bytes_(std::max(arena_bytes, group_bytes_) / group_bytes_ * group_bytes_),
      max_arenas_(std::max<size_t>(max_arenas, 1)),
      arena_bases_(new std::atomic<uintptr_t>[max_arenas_]) {
  for (size_t index = 0; index < max_arenas_; ++index) {
    arena_bases_[index].store(0, std::memory_order_relaxed);
  }
}

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
      arena_bases_[arenas_.size() - 1].store(reinterpret_cast<uintptr_t>(base),
                                             std::memory_order_relaxed);
      mapped_arenas_.store(arenas_.size(), std::memory_order_release);
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
