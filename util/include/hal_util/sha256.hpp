#pragma once
// SHA-256 (FIPS 180-4): the content hash the kernel cache (kernel_cache.hpp) records
// for each object and checks before loading it, and the hash under the TCP
// store's HMACs. Small and dependency-free; blocks go through the CPU's SHA
// extensions where it has them (chosen once, at load), else a portable loop.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hal::util {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  void update(const void* data, size_t size);
  // The digest of everything given to update(); the object is spent after it.
  Digest finish();

  static Digest of(const void* data, size_t size);
  // Lower-case hexadecimal, 64 characters.
  static std::string hex(const Digest& digest);

  // Whether blocks go through the CPU's SHA extensions (tests compare the
  // two paths).
  static bool uses_cpu_extensions();
  static void compress_portable_for_testing(std::array<uint32_t, 8>& state, const uint8_t* data,
                                            size_t blocks);
  std::array<uint32_t, 8> state_for_testing() const;

 private:
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace hal::util
