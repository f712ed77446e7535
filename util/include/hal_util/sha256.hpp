#pragma once
// SHA-256 (FIPS 180-4): the content hash the kernel cache (kernel_cache.hpp) records
// for each object and checks before loading it. Small and dependency-free.

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

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace hal::util
