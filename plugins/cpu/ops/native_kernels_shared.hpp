// What the cpu plugin's native loops (native_kernels*.cpp, one file per
// family of operators so that the families compile in parallel) share:
// element access by type, NaN-propagating max and min, and the fixed-order
// lane sums. Everything is inline: each ISA clone of a loop compiles it for
// its own ISA (only the native_kernels*.cpp files include this).
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_KERNELS_SHARED_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_KERNELS_SHARED_HPP_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "native_kernels.hpp"
#include "native_math.hpp"

namespace hal::cpu::ops::native {

// ---- element access -----------------------------------------------------------------

struct F32 {
  using Storage = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
struct Bf16 {
  using Storage = uint16_t;
  static float load(uint16_t v) { return from_bf16(v); }
  static uint16_t store(float v) { return to_bf16(v); }
};

template <typename E>
inline const typename E::Storage* in(ConstRef ref) {
  return static_cast<const typename E::Storage*>(ref.data);
}
template <typename E>
inline typename E::Storage* out(Ref ref) {
  return static_cast<typename E::Storage*>(ref.data);
}

// Calls body.template operator()<E>() with E the element type of |type|.
template <typename Body>
inline void with_type(Type type, Body&& body) {
  if (type == Type::kF32) {
    body.template operator()<F32>();
  } else {
    body.template operator()<Bf16>();
  }
}

inline float nan_max(float a, float b) {
  if (a != a || b != b) return std::numeric_limits<float>::quiet_NaN();
  return a > b ? a : b;
}
inline float nan_min(float a, float b) {
  if (a != a || b != b) return std::numeric_limits<float>::quiet_NaN();
  return a < b ? a : b;
}

constexpr size_t kLanes = 64;  // columns per block, and lanes of a one-value sum

// Asks for |bytes| from |data| on into the caches, a line at a time. A row
// loop that reads its row more than once calls it for the next row after
// the first pass, so that the next row streams in from memory while the
// passes over the cache-resident row run (the hardware prefetcher stops at
// each 4 KiB page and does not know the rows).
inline void prefetch_bytes(const void* data, size_t bytes) {
  const char* at = static_cast<const char*>(data);
  for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(at + offset, 0, 3);
}

// The sum of f(j) over j in [0, n) in 16 lanes, then the lanes and the tail in order.
template <typename F>
inline float lane_sum(size_t n, F f) {
  constexpr size_t kSumLanes = 16;
  float lanes[kSumLanes] = {};
  size_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes) {
    for (size_t k = 0; k < kSumLanes; ++k) lanes[k] += f(j + k);
  }
  float sum = 0.0f;
  for (size_t k = 0; k < kSumLanes; ++k) sum += lanes[k];
  for (; j < n; ++j) sum += f(j);
  return sum;
}

}  // namespace hal::cpu::ops::native

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_KERNELS_SHARED_HPP_
