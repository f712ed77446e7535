// The byte-level helpers the collective engine's transports share.
#ifndef HAL_COLLECTIVE_BYTES_HPP_
#define HAL_COLLECTIVE_BYTES_HPP_

#include <cstddef>
#include <cstring>

namespace hal::collective {

// The unit shared segments and rings are sized in.
inline constexpr size_t kPageBytes = 4096;

constexpr size_t round_up(size_t value, size_t unit) {
  return (value + unit - 1) / unit * unit;
}

// Copies unless source and destination are the same (an in-place call).
inline void copy_block(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes != 0) std::memcpy(dst, src, bytes);
}

}  // namespace hal::collective

#endif  // HAL_COLLECTIVE_BYTES_HPP_
