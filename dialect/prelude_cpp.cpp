// The C++ backend's prelude: what the dialect's builtins mean on the host.
// It starts with the text of api/hal/cpu_kernel.h (embedded at build time),
// so a translated module compiles without HAL's headers installed.
#include "hal_dialect/dialect.hpp"

namespace hal::dialect {
namespace {

constexpr std::string_view kCpuKernelHeader =
#include "cpu_kernel_header.inc"
    ;

constexpr std::string_view kCppPrelude = R"hal_prelude(
// ---- HAL kernel dialect prelude: C++ (cpu plugin) ----
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>
typedef int32_t hal_i32;
typedef uint32_t hal_u32;
typedef int64_t hal_i64;
typedef uint64_t hal_u64;
typedef float hal_f32;
typedef double hal_f64;
typedef uint16_t hal_f16;   // storage only: load_f16/store_f16 convert
typedef uint16_t hal_bf16;  // storage only: load_bf16/store_bf16 convert
using std::abs; using std::acos; using std::asin; using std::atan; using std::atan2; using std::ceil;
using std::cos; using std::cosh; using std::erf; using std::exp; using std::exp2;
using std::fabs; using std::floor; using std::fma; using std::fmax; using std::fmin;
using std::fmod; using std::log; using std::log2; using std::pow; using std::round;
using std::sin; using std::sinh; using std::sqrt; using std::tan; using std::tanh;

// A loop over the work-items of one parallel region, declared free of
// dependences between iterations: one work-item's iteration can depend on
// another's only through a data race (no barrier orders them; the dialect's
// atomics are calls the vectoriser leaves alone), so the compiler may take
// them as independent instead of proving that every store of one work-item
// misses every load of the next.
#if defined(__clang__)
#define HAL_RT_INDEPENDENT_ITEMS _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define HAL_RT_INDEPENDENT_ITEMS _Pragma("GCC ivdep")
#else
#define HAL_RT_INDEPENDENT_ITEMS
#endif
// An interleaved region's body holds several work-items' copies of its code,
// often past the inliner's size limits; not inlined into the work-item loop,
// the call clobbers memory for the vectoriser and the loop stays scalar.
#if defined(__GNUC__)
#define HAL_RT_ALWAYS_INLINE __attribute__((always_inline))
#else
#define HAL_RT_ALWAYS_INLINE
#endif

namespace hal_rt {
// The block's shape, copied out of the context so the work-item loop's
// bounds and ids live in registers.
struct Block {
  explicit Block(const hal_cpu_block_context_t* ctx) {
    for (int d = 0; d < 3; ++d) {
      size[d] = static_cast<int>(ctx->block[d]);
      id[d] = static_cast<int>(ctx->block_id[d]);
      groups[d] = static_cast<int>(ctx->grid[d]);
    }
  }
  int items() const { return size[0] * size[1] * size[2]; }
  int size[3];
  int id[3];
  int groups[3];
};
// One work-item: its local id in a block. Out-of-range dimensions give the
// values OpenCL gives (id 0, size 1).
struct Item {
  const Block* block;
  int lid[3];
  int local_id(int d) const { return d >= 0 && d < 3 ? lid[d] : 0; }
  int local_size(int d) const { return d >= 0 && d < 3 ? block->size[d] : 1; }
  int group_id(int d) const { return d >= 0 && d < 3 ? block->id[d] : 0; }
  int num_groups(int d) const { return d >= 0 && d < 3 ? block->groups[d] : 1; }
  int global_id(int d) const { return group_id(d) * local_size(d) + local_id(d); }
  int global_size(int d) const { return num_groups(d) * local_size(d); }
  // The work-item's index in its block, x fastest: its slot in per-item storage.
  int linear() const { return (lid[2] * block->size[1] + lid[1]) * block->size[0] + lid[0]; }
};
// Kernels without barriers: a loop over the work-items, x innermost.
template <class Body>
inline void run_items(const Block& block, Body& body) {
  for (int z = 0; z < block.size[2]; ++z)
    for (int y = 0; y < block.size[1]; ++y)
      for (int x = 0; x < block.size[0]; ++x) body(Item{&block, {x, y, z}});
}
// A loop over x in [0, n); kIndependent: declared free of dependences
// between iterations (HAL_RT_INDEPENDENT_ITEMS).
template <bool kIndependent, class Step>
inline void item_loop(int n, const Step& step) {
  if constexpr (kIndependent) {
    HAL_RT_INDEPENDENT_ITEMS
    for (int x = 0; x < n; ++x) step(x);
  } else {
    for (int x = 0; x < n; ++x) step(x);
  }
}
// Kernels split at their barriers: one such loop per parallel region. The
// work-items of a region may run in any order (nothing orders them before
// the next barrier), so two rows go through the x loop together: their
// bodies are independent, which gives the vectoriser two chains instead of
// one (a loop-carried sum per work-item, as in a tiled matmul, is otherwise
// bound by the latency of its adds). kIndependent: the x loop is declared
// free of dependences between work-items, for regions that write several
// per-item values back, where the compiler would otherwise need more
// run-time overlap checks than it is willing to emit.
template <bool kIndependent = false, class Body>
inline void run_region(const Block& block, Body&& body) {
  for (int z = 0; z < block.size[2]; ++z) {
    int y = 0;
    for (; y + 1 < block.size[1]; y += 2) {
      item_loop<kIndependent>(block.size[0], [&](int x) {
        body(Item{&block, {x, y, z}});
        body(Item{&block, {x, y + 1, z}});
      });
    }
    for (; y < block.size[1]; ++y) {
      item_loop<kIndependent>(block.size[0], [&](int x) { body(Item{&block, {x, y, z}}); });
    }
  }
}
// Calls |wide| with K work-items: (x + J * dx, y + J * dy, z) for J < K.
template <class Wide, int... J>
HAL_RT_ALWAYS_INLINE inline void call_wide(const Wide& wide, const Block& block, int x, int dx,
                                           int y, int dy, int z, std::integer_sequence<int, J...>) {
  wide(Item{&block, {x + J * dx, y + J * dy, z}}...);
}
// An interleaved region (the emitter's Region::interleaved): |wide| runs K
// work-items at once, |narrow| one. K rows go through the x loop together;
// rows left over (a block with fewer than K rows, or its last rows) go as K
// stretches of one row, and the items left after those run one at a time.
// The x loop is declared independent (HAL_RT_INDEPENDENT_ITEMS: different
// work-items, which inside a region depend on each other only through data
// races): each iteration holds K work-items' loads and stores, more overlap
// checks than the compiler would emit.
template <int K, class Wide, class Narrow>
inline void run_region_interleaved(const Block& block, const Wide& wide, const Narrow& narrow) {
  constexpr auto copies = std::make_integer_sequence<int, K>{};
  const int nx = block.size[0], ny = block.size[1];
  for (int z = 0; z < block.size[2]; ++z) {
    int y = 0;
    for (; y + K <= ny; y += K) {
      item_loop<true>(nx, [&](int x) { call_wide(wide, block, x, 0, y, 1, z, copies); });
    }
    for (; y < ny; ++y) {
      const int stretch = nx / K;
      item_loop<true>(stretch, [&](int x) { call_wide(wide, block, x, stretch, y, 0, z, copies); });
      for (int x = K * stretch; x < nx; ++x) narrow(Item{&block, {x, y, z}});
    }
  }
}
// The values a split kernel keeps across its regions: one array per
// variable, one element per work-item, all from one allocation per block.
class ItemStorage {
 public:
  template <class... T>
  static size_t bytes(size_t items) {
    return (size_t{0} + ... + padded(items * sizeof(T)));
  }
  explicit ItemStorage(size_t bytes)
      : base_(static_cast<unsigned char*>(::operator new(bytes, std::align_val_t{64}))) {}
  ~ItemStorage() { ::operator delete(base_, std::align_val_t{64}); }
  ItemStorage(const ItemStorage&) = delete;
  ItemStorage& operator=(const ItemStorage&) = delete;
  template <class T>
  std::remove_cv_t<T>* take(size_t items) {
    auto* slots = reinterpret_cast<std::remove_cv_t<T>*>(base_ + used_);
    used_ += padded(items * sizeof(T));
    return slots;
  }

 private:
  static size_t padded(size_t bytes) { return (bytes + 63) & ~size_t{63}; }
  unsigned char* base_;
  size_t used_ = 0;
};
}  // namespace hal_rt

template <class T> static inline T hal_min(T a, T b) { return b < a ? b : a; }
template <class T> static inline T hal_max(T a, T b) { return a < b ? b : a; }
static inline float hal_rsqrt(float x) { return 1.0f / std::sqrt(x); }
static inline double hal_rsqrt(double x) { return 1.0 / std::sqrt(x); }

// Atomics: relaxed, as OpenCL 1.2's atomic_* and CUDA's atomic*.
template <class T> static inline T hal_atomic_add(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
template <class T> static inline T hal_atomic_sub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
static inline float hal_atomic_add(float* p, float v) {
  float old, next;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do { next = old + v; } while (!__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return old;
}
template <class T> static inline T hal_atomic_min(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
  return old;
}
template <class T> static inline T hal_atomic_max(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
  return old;
}
template <class T> static inline T hal_atomic_xchg(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
template <class T> static inline T hal_atomic_cas(T* p, T expected, T desired) {
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return expected;
}

// f16 and bf16 are storage types; arithmetic is f32. Conversions round to
// nearest even (F. Giesen's float_to_half_fast3_rtne for f16).
static inline float hal_f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign != 0 ? -magnitude : magnitude;
  }
  bits = exponent == 31 ? (sign | 0x7f800000u | (mantissa << 13))
                        : (sign | ((exponent + 112u) << 23) | (mantissa << 13));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
static inline uint16_t hal_f32_to_f16(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint32_t o;
  if (f >= (143u << 23)) {
    o = f > (255u << 23) ? 0x7e00u : 0x7c00u;
  } else if (f < (113u << 23)) {
    const uint32_t magic_bits = 126u << 23;
    float magic, x;
    std::memcpy(&magic, &magic_bits, 4);
    std::memcpy(&x, &f, 4);
    x += magic;
    uint32_t r;
    std::memcpy(&r, &x, 4);
    o = r - magic_bits;
  } else {
    const uint32_t odd = (f >> 13) & 1u;
    f += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;
    f += odd;
    o = f >> 13;
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}
static inline float hal_bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
static inline uint16_t hal_f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
#define hal_load_f16(p) hal_f16_to_f32(*(p))
#define hal_store_f16(p, v) (*(p) = hal_f32_to_f16(v))
#define hal_load_bf16(p) hal_bf16_to_f32(*(p))
#define hal_store_bf16(p, v) (*(p) = hal_f32_to_bf16(v))
)hal_prelude";

constexpr std::string_view kCoroutinePrelude = R"hal_prelude(
#include <coroutine>
#include <exception>
#include <vector>
namespace hal_rt {
// Work-item frames of one block come from one arena, so a block costs one
// allocation instead of one per work-item.
struct FrameArena {
  unsigned char* base = nullptr;
  size_t used = 0, capacity = 0, items = 0;
  ~FrameArena() { ::operator delete(base); }
  void* take(size_t size) {
    size = (size + 63) & ~size_t{63};
    if (base == nullptr) {
      capacity = size * items;
      base = static_cast<unsigned char*>(::operator new(capacity));
    }
    if (used + size > capacity) return ::operator new(size);
    void* frame = base + used;
    used += size;
    return frame;
  }
  bool owns(void* p) const {
    return p >= static_cast<void*>(base) && p < static_cast<void*>(base + capacity);
  }
};
// static, not inline: an inline variable is an STB_GNU_UNIQUE symbol, which
// glibc never unloads, so every module with it would stay mapped for good.
static thread_local FrameArena* current_arena = nullptr;

struct ItemTask {
  struct promise_type {
    ItemTask get_return_object() {
      return ItemTask{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
    static void* operator new(size_t size) {
      return current_arena != nullptr ? current_arena->take(size) : ::operator new(size);
    }
    static void operator delete(void* p) {
      if (current_arena == nullptr || !current_arena->owns(p)) ::operator delete(p);
    }
  };
  std::coroutine_handle<promise_type> handle;
};
// barrier(): every work-item suspends here; the block resumes them all.
struct Barrier {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  void await_resume() const noexcept {}
};
// Kernels with barriers: one pass over the work-items per barrier interval.
template <class Body>
inline void run_items_with_barriers(const Block& block, Body& body) {
  FrameArena arena;
  arena.items = static_cast<size_t>(block.size[0]) * block.size[1] * block.size[2];
  FrameArena* const outer = current_arena;
  current_arena = &arena;
  std::vector<std::coroutine_handle<ItemTask::promise_type>> items;
  items.reserve(arena.items);
  for (int z = 0; z < block.size[2]; ++z)
    for (int y = 0; y < block.size[1]; ++y)
      for (int x = 0; x < block.size[0]; ++x) items.push_back(body(Item{&block, {x, y, z}}).handle);
  for (bool running = true; running;) {
    running = false;
    for (auto item : items) {
      if (item.done()) continue;
      item.resume();
      running |= !item.done();
    }
  }
  for (auto item : items) item.destroy();
  current_arena = outer;
}
}  // namespace hal_rt
)hal_prelude";

constexpr std::string_view kBoundsCheckHeader =
#include "bounds_check_header.inc"
    ;

// Bounds-checked translations (SPEC.md §14.1): `global T*` becomes
// hal_rt::checked<T>, a pointer that carries the argument it came from and
// checks each access against that argument's allocation.
constexpr std::string_view kBoundsPrelude = R"hal_prelude(
#include <cstddef>
namespace hal_rt {
template <class T> struct checked {
  T* p = nullptr;
  hal_bounds_record_t* record = nullptr;  // null: not checked
  uintptr_t origin = 0;                   // the argument's own pointer
  uint32_t arg = 0;
  checked() = default;
  checked(std::nullptr_t) {}
  // A raw pointer (an address the emitter could not keep checked, such as
  // &tile[i][j]): not checked.
  checked(T* raw) : p(raw) {}
  checked(T* raw, hal_bounds_record_t* r, uint32_t a)
      : p(raw), record(r), origin(reinterpret_cast<uintptr_t>(raw)), arg(a) {}
  template <class U, typename std::enable_if<std::is_convertible<U*, T*>::value, int>::type = 0>
  checked(const checked<U>& o) : p(o.p), record(o.record), origin(o.origin), arg(o.arg) {}
  template <class U, typename std::enable_if<!std::is_convertible<U*, T*>::value, long>::type = 0>
  explicit checked(const checked<U>& o)
      : p((T*)(o.p)), record(o.record), origin(o.origin), arg(o.arg) {}

  T& at(ptrdiff_t i) const {
    // Integer arithmetic: an address out of bounds is computed without the
    // undefined behaviour of pointer arithmetic past an object.
    const uintptr_t a = reinterpret_cast<uintptr_t>(p) +
                        static_cast<uintptr_t>(i * static_cast<ptrdiff_t>(sizeof(T)));
    if (record != nullptr) {
      const hal_bounds_range_t& r = record->ranges[arg];
      if ((r.begin | r.end) != 0 && (a < r.begin || a > r.end || r.end - a < sizeof(T)))
        return bad(a);
    }
    return *reinterpret_cast<T*>(a);
  }
  T& bad(uintptr_t a) const {
    __atomic_fetch_add(&record->bad_accesses, 1, __ATOMIC_RELAXED);
    uint32_t expected = 0;
    if (__atomic_compare_exchange_n(&record->claimed, &expected, 1u, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      record->arg_index = arg;
      record->element_bytes = static_cast<uint32_t>(sizeof(T));
      record->element_index = static_cast<int64_t>(a - origin) / static_cast<int64_t>(sizeof(T));
      record->read_only = std::is_const<T>::value ? 1u : 0u;
    }
    // The access does not happen: a read gives 0, a write lands here.
    static thread_local typename std::remove_const<T>::type nothing;
    nothing = typename std::remove_const<T>::type();
    return nothing;
  }
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  T& operator[](I i) const { return at(static_cast<ptrdiff_t>(i)); }
  T& operator*() const { return at(0); }
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  checked operator+(I i) const {
    checked c = *this;
    c.p = reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) +
                               static_cast<uintptr_t>(static_cast<ptrdiff_t>(i) *
                                                      static_cast<ptrdiff_t>(sizeof(T))));
    return c;
  }
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  checked operator-(I i) const { return *this + (-static_cast<ptrdiff_t>(i)); }
  ptrdiff_t operator-(const checked& o) const {
    return (static_cast<ptrdiff_t>(reinterpret_cast<uintptr_t>(p)) -
            static_cast<ptrdiff_t>(reinterpret_cast<uintptr_t>(o.p))) /
           static_cast<ptrdiff_t>(sizeof(T));
  }
  template <class I> checked& operator+=(I i) { return *this = *this + i; }
  template <class I> checked& operator-=(I i) { return *this = *this - i; }
  checked& operator++() { return *this = *this + 1; }
  checked& operator--() { return *this = *this - 1; }
  checked operator++(int) { checked old = *this; ++*this; return old; }
  checked operator--(int) { checked old = *this; --*this; return old; }
  bool operator==(const checked& o) const { return p == o.p; }
  bool operator!=(const checked& o) const { return p != o.p; }
  bool operator<(const checked& o) const { return p < o.p; }
  bool operator<=(const checked& o) const { return p <= o.p; }
  bool operator>(const checked& o) const { return p > o.p; }
  bool operator>=(const checked& o) const { return p >= o.p; }
  bool operator==(std::nullptr_t) const { return p == nullptr; }
  bool operator!=(std::nullptr_t) const { return p != nullptr; }
  explicit operator bool() const { return p != nullptr; }
  bool operator!() const { return p == nullptr; }
};
template <class I, class T, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
checked<T> operator+(I i, const checked<T>& c) { return c + i; }
}  // namespace hal_rt
// The atomics on a checked pointer: the element is checked, then updated.
template <class T, class V> static inline T hal_atomic_add(hal_rt::checked<T> p, V v) { return hal_atomic_add(&p[0], static_cast<T>(v)); }
template <class T, class V> static inline T hal_atomic_sub(hal_rt::checked<T> p, V v) { return hal_atomic_sub(&p[0], static_cast<T>(v)); }
template <class T, class V> static inline T hal_atomic_min(hal_rt::checked<T> p, V v) { return hal_atomic_min(&p[0], static_cast<T>(v)); }
template <class T, class V> static inline T hal_atomic_max(hal_rt::checked<T> p, V v) { return hal_atomic_max(&p[0], static_cast<T>(v)); }
template <class T, class V> static inline T hal_atomic_xchg(hal_rt::checked<T> p, V v) { return hal_atomic_xchg(&p[0], static_cast<T>(v)); }
template <class T, class V, class W> static inline T hal_atomic_cas(hal_rt::checked<T> p, V e, W d) { return hal_atomic_cas(&p[0], static_cast<T>(e), static_cast<T>(d)); }
)hal_prelude";

}  // namespace

std::string_view cpp_bounds_prelude() {
  static const std::string prelude = std::string("// ---- hal_dialect/bounds_check.h ----\n") +
                                     std::string(kBoundsCheckHeader) + std::string(kBoundsPrelude);
  return prelude;
}

std::string_view cpp_prelude() {
  static const std::string prelude = std::string("// ---- hal/cpu_kernel.h ----\n") +
                                     std::string(kCpuKernelHeader) + std::string(kCppPrelude);
  return prelude;
}

std::string_view cpp_coroutine_prelude() {
  return kCoroutinePrelude;
}

}  // namespace hal::dialect
