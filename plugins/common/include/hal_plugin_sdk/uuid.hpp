// A device uuid derived from a name, for devices whose driver gives none
// (a virtual device, an OpenCL device): stable across runs and builds for
// the same name, so a device keeps its identity (SPEC.md §10.6).
#ifndef HAL_PLUGIN_SDK_UUID_HPP_
#define HAL_PLUGIN_SDK_UUID_HPP_

#include <cstdint>
#include <string_view>

namespace hal::plugin {

// FNV-1a over |text|, from a seed.
constexpr uint64_t fnv1a(std::string_view text, uint64_t seed) {
  uint64_t hash = 14695981039346656037ull ^ seed;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

// Two FNV-1a hashes of |identity| (differently seeded), low byte first.
inline void uuid_from_name(std::string_view identity, uint8_t (&out)[16]) {
  const uint64_t high = fnv1a(identity, 0);
  const uint64_t low = fnv1a(identity, 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(high >> (8 * i));
    out[8 + i] = static_cast<uint8_t>(low >> (8 * i));
  }
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_UUID_HPP_
