// The dispatch header every public handle starts with, its validation, the
// in-use count that keeps a destroy from pulling a handle from under a call,
// and the slab whose slots are never handed out twice in a row, so a stale
// handle stays recognisable.
#pragma once

#include <hal/plugin_v1.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hal::loader {

class PluginRecord;

enum class HandleKind : uint32_t {
  kDevice = 1,
  kStream,
  kEvent,
  kModule,
  kKernel,
  kComm,
  kOpPlan,
  kMoeRouting,
};

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
bool is_live(const Handle* handle, HandleKind kind) noexcept;  // below, after the slabs

// The slow path of validation: records why |handle| was rejected and returns
// HAL_ERROR_INVALID_HANDLE or HAL_ERROR_DESTROYED_HANDLE.
hal_result_t reject_handle(const void* handle, HandleKind expected, const char* function,
                           const char* argument) noexcept;

// The failure of a call that found its handle being destroyed by another
// thread: HAL_ERROR_DESTROYED_HANDLE.
hal_result_t reject_destroying(const void* handle, HandleKind kind, const char* function,
                               const char* argument) noexcept;

// Which handles the calls of one thread are using: hazard slots, written
// only by their thread and read by destroys. Never freed; a thread's record
// is reused by a later thread after it exits.
struct ThreadHazards {
  static constexpr uint32_t kSlots = 16;  // nested calls (fallback host functions) included
  std::atomic<const void*> slots[kSlots] = {};
  uint32_t depth = 0;  // the owning thread's slots in use
  std::atomic<bool> owned{false};
  ThreadHazards* next = nullptr;  // the global list; set before publication
};

// The calling thread's record. Not initial-exec: that marks libhal STATIC_TLS,
// and a libhal loaded by dlopen (a Python extension, a framework's plugin)
// would then fail with "cannot allocate memory in static TLS block". libhal is
// built with TLS descriptors (-mtls-dialect=gnu2, loader/CMakeLists.txt), so
// the access is still a short call without __tls_get_addr.
extern __thread ThreadHazards* t_thread_hazards;
// HAL_ERROR_INTERNAL: every hazard slot of the thread is in use.
hal_result_t reject_too_deep(const char* function) noexcept;
// Gives the calling thread a record; the slow path of the first call.
ThreadHazards* register_thread_hazards() noexcept;
// True where the kernel has no private expedited membarrier: readers then
// order their hazard store before their magic load with a full fence.
extern std::atomic<bool> g_readers_fence;
void reader_full_fence() noexcept;

// Holds a handle against a concurrent destroy for the length of one call:
// acquire() validates it and publishes it in the thread's hazard slot; the
// destructor clears the slot. A destroy that marked the handle first makes
// acquire fail with HAL_ERROR_DESTROYED_HANDLE; one that marks it later
// waits until the call has cleared its slot (begin_destroy). The cost is two
// plain stores and a second magic load: the destroy pays for the ordering
// with a process-wide membarrier.
template <class Handle>
class HandleUse {
 public:
  HandleUse() = default;
  HandleUse(const HandleUse&) = delete;
  HandleUse& operator=(const HandleUse&) = delete;
  ~HandleUse() {
    if (slot_ == nullptr) return;
    slot_->store(nullptr, std::memory_order_release);
    --t_thread_hazards->depth;
  }

  hal_result_t acquire(Handle* handle, HandleKind kind, const char* function,
                       const char* argument) noexcept {
    if (try_acquire(handle, kind)) [[likely]]
      return HAL_SUCCESS;
    // Why it failed: the handle is (now) not live, or no slot was free.
    if (!is_live(handle, kind)) return reject_handle(handle, kind, function, argument);
    return reject_too_deep(function);
  }

  // acquire() without the report: false when |handle| is not a live handle
  // of |kind| or the thread has no free slot.
  bool try_acquire(Handle* handle, HandleKind kind) noexcept {
    if (!is_live(handle, kind)) [[unlikely]]
      return false;
    ThreadHazards* hazards = t_thread_hazards;
    if (hazards == nullptr) [[unlikely]]
      hazards = register_thread_hazards();
    if (hazards == nullptr || hazards->depth == ThreadHazards::kSlots) [[unlikely]]
      return false;
    std::atomic<const void*>* slot = &hazards->slots[hazards->depth];
    slot->store(handle, std::memory_order_relaxed);
    if (g_readers_fence.load(std::memory_order_relaxed)) [[unlikely]] {
      reader_full_fence();
    } else {
      std::atomic_signal_fence(std::memory_order_seq_cst);  // see begin_destroy
    }
    if (!is_live(handle, kind)) [[unlikely]] {
      slot->store(nullptr, std::memory_order_relaxed);
      return false;
    }
    ++hazards->depth;
    slot_ = slot;
    return true;
  }

  bool held() const noexcept { return slot_ != nullptr; }

 private:
  std::atomic<const void*>* slot_ = nullptr;
};

// The first step of every destroy, after validation: marks |header|
// destroyed (one destroy wins the mark), then waits until no call of any
// thread still uses the handle. False when another destroy marked it first,
// or when the calling thread itself is inside a call using the handle (a
// host function run by a fallback): the caller reports
// HAL_ERROR_DESTROYED_HANDLE. Calls hold a handle only for their own length,
// so the wait ends.
bool begin_destroy(DispatchHeader& header) noexcept;

// begin_destroy in two steps, for a destroy that must act between them
// (hal_comm_abort signals a blocked collective, which then returns, before it
// waits): mark_destroyed is the mark (false as begin_destroy's), and
// wait_until_unused the wait for the calls that still use the handle.
bool mark_destroyed(DispatchHeader& header) noexcept;
void wait_until_unused(const DispatchHeader& header) noexcept;

// Handle memory. Each handle type has one process-wide slab: address space
// mapped in arenas that are never unmapped, carved into fixed-size slots
// handed out in address order. A destroyed handle's slot keeps its header
// (magic kDestroyedMagic) and is not handed out again until every other slot
// of the slab has been: with the default sizes, hundreds of millions of
// creations of the same kind later. A page whose slots are all destroyed is
// given back to the system (it then reads as zeroes, which reject_handle
// still recognises as a destroyed slot). So a stale handle never aliases a
// live one of its kind within that window, and the memory of destroyed
// handles is not kept. Slab memory is ordinary mmap'd memory: sanitizers see
// the objects' own heap members, not the slots.
class HandleSlab {
 public:
  // |slot_bytes| is rounded up to a power of two, at least 64.
  HandleSlab(HandleKind kind, size_t slot_bytes, size_t arena_bytes = size_t{64} << 20,
             size_t max_arenas = 256);
  ~HandleSlab() = delete;  // process-lifetime: stale handles stay readable
  HandleSlab(const HandleSlab&) = delete;
  HandleSlab& operator=(const HandleSlab&) = delete;

  // Uninitialised memory for one handle. Throws std::bad_alloc when mapping
  // fails or every slot is live.
  void* allocate();
  // The handle in |slot| has been destroyed (its header marked destroyed).
  void release(void* slot) noexcept;
  // Whether |pointer| is the start of a slot this slab has handed out.
  bool handed_out(const void* pointer) const noexcept;
  // Whether |pointer| is the start of a slot of an arena this slab mapped:
  // no lock and no read of |pointer|'s memory, so every call can afford it.
  // A slot of a mapped arena that was never handed out reads as zeroes.
  bool holds_slot(const void* pointer) const noexcept {
    const auto address = reinterpret_cast<uintptr_t>(pointer);
    const size_t mapped = mapped_arenas_.load(std::memory_order_acquire);
    for (size_t index = 0; index < mapped; ++index) {
      const uintptr_t offset = address - arena_bases_[index].load(std::memory_order_relaxed);
      if (offset < arena_bytes_) return (offset & (slot_bytes_ - 1)) == 0;
    }
    return false;
  }

  HandleKind kind() const noexcept { return kind_; }
  size_t slot_bytes() const noexcept { return slot_bytes_; }
  // For tests: how many times every slot has been gone through.
  uint64_t laps() const noexcept;

  // A slab created by for_type() for |kind| that handed out |pointer|, if any.
  static bool any_handed_out(HandleKind kind, const void* pointer) noexcept;

 private:
  struct Arena {
    char* base;
    std::vector<uint32_t> live;  // live slots per group
  };
  size_t group_of(size_t offset) const noexcept { return offset / group_bytes_; }
  void release_group(Arena& arena, size_t group) noexcept;
  void leave_group() noexcept;  // the cursor moves on from its group

  const HandleKind kind_;
  const size_t slot_bytes_;
  const size_t group_bytes_;  // max(page, slot): the unit given back to the system
  const size_t arena_bytes_;
  const size_t max_arenas_;
  mutable std::mutex mutex_;
  std::vector<Arena> arenas_;
  // The arenas' bases for holds_slot, published in mapping order: an entry
  // is written before mapped_arenas_ counts it, and never changes again.
  std::unique_ptr<std::atomic<uintptr_t>[]> arena_bases_;
  std::atomic<size_t> mapped_arenas_{0};
  size_t cursor_arena_ = 0;   // where the next slot comes from
  size_t cursor_offset_ = 0;  //   (offset within the arena)
  uint64_t laps_ = 0;         // completed passes over all max_arenas_ arenas
};

// Registers |slab| for reject_handle's stale-handle check.
void register_slab(HandleSlab* slab) noexcept;

// The slab of handle type |Handle| (which names its kind as Handle::kKind).
template <class Handle>
HandleSlab& slab_of() {
  static HandleSlab* const slab = [] {
    auto* created = new HandleSlab(Handle::kKind, sizeof(Handle));
    register_slab(created);
    return created;
  }();
  return *slab;
}

// A live handle of type |Handle|: a slot of its type's slab (so a pointer to
// anything else, a copy of a handle's bytes included, is never read), with
// the live magic and the kind. One range check and two loads.
template <class Handle>
inline bool is_live(const Handle* handle, HandleKind kind) noexcept {
  static_assert(offsetof(Handle, header) == 0, "the dispatch header must be at offset 0");
  return handle != nullptr && slab_of<std::remove_cv_t<Handle>>().holds_slot(handle) &&
         handle->header.magic.load(std::memory_order_relaxed) == kLiveMagic &&
         handle->header.kind == static_cast<uint32_t>(kind);
}

// Destroys a handle and gives its slot back to its slab. The header is marked
// destroyed first, unless begin_destroy did already.
template <class Handle>
struct SlabDelete {
  void operator()(Handle* handle) const noexcept {
    handle->header.magic.store(kDestroyedMagic, std::memory_order_release);
    handle->~Handle();  // the header's members are trivial: its bytes stay
    slab_of<Handle>().release(handle);
  }
};

template <class Handle>
using HandleOwner = std::unique_ptr<Handle, SlabDelete<Handle>>;

// Constructs a handle in a fresh slot of its slab.
template <class Handle, class... Args>
HandleOwner<Handle> make_handle(Args&&... args) {
  void* slot = slab_of<Handle>().allocate();
  try {
    return HandleOwner<Handle>(new (slot) Handle(std::forward<Args>(args)...));
  } catch (...) {
    slab_of<Handle>().release(slot);
    throw;
  }
}

// The live objects of one kind on one device (or, for communicators, in the
// registry): what device_synchronize and hal_shutdown walk, each held by its
// slab slot.
template <class Handle, class Owner = HandleOwner<Handle>>
class LiveSet {
 public:
  Handle* add(Owner handle) {
    Handle* raw = handle.get();
    std::lock_guard lock(mutex_);
    objects_.emplace(raw, std::move(handle));
    return raw;
  }

  Owner take(Handle* handle) {
    std::lock_guard lock(mutex_);
    auto found = objects_.find(handle);
    if (found == objects_.end()) return nullptr;
    Owner owned = std::move(found->second);
    objects_.erase(found);
    return owned;
  }

  std::vector<Owner> take_all() {
    std::lock_guard lock(mutex_);
    std::vector<Owner> all;
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
  std::unordered_map<Handle*, Owner> objects_;
};

}  // namespace hal::loader
