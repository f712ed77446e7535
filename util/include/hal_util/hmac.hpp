#pragma once
// HMAC-SHA-256 (RFC 2104) over hal_util's SHA-256: what the collectives
// store's challenge-response needs, without a TLS library.

#include <array>
#include <initializer_list>
#include <cstddef>
#include <cstdint>
#include <span>

#include "hal_util/sha256.hpp"

namespace hal::util {

using Sha256Digest = Sha256::Digest;

Sha256Digest sha256(std::span<const uint8_t> data) noexcept;

// HMAC-SHA-256 of the concatenation of |parts| under |key|.
Sha256Digest hmac_sha256(std::span<const uint8_t> key,
                         std::initializer_list<std::span<const uint8_t>> parts) noexcept;

// HMAC-SHA-256 under one key whose two padded blocks are hashed once, when
// it is made: each MAC then costs its message's blocks and two more (the
// TCP store's per-frame MACs).
class HmacSha256 {
 public:
  explicit HmacSha256(std::span<const uint8_t> key) noexcept;
  Sha256Digest mac(std::initializer_list<std::span<const uint8_t>> parts) const noexcept;

 private:
  Sha256 inner_;  // after the key XOR ipad block
  Sha256 outer_;  // after the key XOR opad block
};

// Compares without a data-dependent early exit.
bool equal_in_constant_time(std::span<const uint8_t> a, std::span<const uint8_t> b) noexcept;

// Fills |out| from the kernel's random source (getrandom); false when it fails.
bool random_bytes(std::span<uint8_t> out) noexcept;

}  // namespace hal::util
