#include "hal_util/hmac.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hal::util {

Sha256Digest sha256(std::span<const uint8_t> data) noexcept {
  return Sha256::of(data.data(), data.size());
}

HmacSha256::HmacSha256(std::span<const uint8_t> key) noexcept {
  std::array<uint8_t, 64> block{};
  if (key.size() > block.size()) {
    const Sha256Digest short_key = sha256(key);
    std::memcpy(block.data(), short_key.data(), short_key.size());
  } else if (!key.empty()) {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::array<uint8_t, 64> pad;
  for (size_t i = 0; i < pad.size(); ++i) pad[i] = block[i] ^ 0x36;
  inner_.update(pad.data(), pad.size());
  for (size_t i = 0; i < pad.size(); ++i) pad[i] = block[i] ^ 0x5c;
  outer_.update(pad.data(), pad.size());
}

Sha256Digest HmacSha256::mac(std::initializer_list<std::span<const uint8_t>> parts) const noexcept {
  Sha256 inner = inner_;
  for (std::span<const uint8_t> part : parts) inner.update(part.data(), part.size());
  const Sha256Digest inner_digest = inner.finish();
  Sha256 outer = outer_;
  outer.update(inner_digest.data(), inner_digest.size());
  return outer.finish();
}

Sha256Digest hmac_sha256(std::span<const uint8_t> key,
                         std::initializer_list<std::span<const uint8_t>> parts) noexcept {
  return HmacSha256(key).mac(parts);
}

bool equal_in_constant_time(std::span<const uint8_t> a, std::span<const uint8_t> b) noexcept {
  if (a.size() != b.size()) return false;
  uint8_t difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= a[i] ^ b[i];
  return difference == 0;
}

bool random_bytes(std::span<uint8_t> out) noexcept {
  size_t filled = 0;
  while (filled < out.size()) {
    const ssize_t got = ::getrandom(out.data() + filled, out.size() - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    filled += static_cast<size_t>(got);
  }
  return true;
}

}  // namespace hal::util
