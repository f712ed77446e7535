#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104): what the collectives
// store's challenge-response needs, without a TLS library. Not for bulk data.

#include <array>
#include <initializer_list>
#include <cstddef>
#include <cstdint>
#include <span>

namespace hal::util {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256() noexcept;
  void update(std::span<const uint8_t> data) noexcept;
  Sha256Digest finish() noexcept;  // the object is spent afterwards

 private:
  void block(const uint8_t* p) noexcept;
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(std::span<const uint8_t> data) noexcept;

// HMAC-SHA-256 of the concatenation of |parts| under |key|.
Sha256Digest hmac_sha256(std::span<const uint8_t> key,
                         std::initializer_list<std::span<const uint8_t>> parts) noexcept;

// Compares without a data-dependent early exit.
bool equal_in_constant_time(std::span<const uint8_t> a, std::span<const uint8_t> b) noexcept;

// Fills |out| from the kernel's random source (getrandom); false when it fails.
bool random_bytes(std::span<uint8_t> out) noexcept;

}  // namespace hal::util
