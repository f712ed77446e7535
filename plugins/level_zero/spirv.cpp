#include "spirv.hpp"

#include <cstdio>
#include <cstring>

namespace hal::level_zero {
namespace {

constexpr size_t kHeaderWords = 5;
constexpr uint32_t kMaxMinorVersion = 6;

uint32_t swap_bytes(uint32_t word) {
  return __builtin_bswap32(word);
}

}  // namespace

bool check_spirv_image(const void* data, size_t size, std::string& why) {
  if (size % 4 != 0) {
    why = "a SPIR-V image is a whole number of 32-bit words; " + std::to_string(size) +
          " bytes is not";
    return false;
  }
  if (size < kHeaderWords * 4) {
    why = "a SPIR-V image of " + std::to_string(size) + " bytes is shorter than its 20-byte header";
    return false;
  }
  const auto* bytes = static_cast<const unsigned char*>(data);
  auto word = [&](size_t index) {
    uint32_t value;
    std::memcpy(&value, bytes + index * 4, sizeof(value));
    return value;
  };
  bool swapped = false;
  if (word(0) != kSpirvMagic) {
    if (swap_bytes(word(0)) != kSpirvMagic) {
      char text[96];
      std::snprintf(text, sizeof(text), "the magic number is 0x%08x, not SPIR-V's 0x%08x", word(0),
                    kSpirvMagic);
      why = text;
      return false;
    }
    swapped = true;  // SPIR-V allows either byte order; the words say which
  }
  auto read = [&](size_t index) { return swapped ? swap_bytes(word(index)) : word(index); };
  const uint32_t version = read(1);
  const uint32_t major = (version >> 16) & 0xff, minor = (version >> 8) & 0xff;
  if ((version & 0xff0000ffu) != 0 || major != 1 || minor > kMaxMinorVersion) {
    char text[96];
    std::snprintf(text, sizeof(text), "the version word 0x%08x is not SPIR-V 1.0 to 1.%u", version,
                  kMaxMinorVersion);
    why = text;
    return false;
  }
  if (read(3) == 0) {
    why = "the id bound is 0";
    return false;
  }
  const size_t words = size / 4;
  size_t at = kHeaderWords;
  while (at < words) {
    const uint32_t count = read(at) >> 16;
    if (count == 0) {
      why = "the instruction at word " + std::to_string(at) + " has a word count of 0";
      return false;
    }
    if (count > words - at) {
      why = "the instruction at word " + std::to_string(at) + " (" + std::to_string(count) +
            " words) ends past the end of the " + std::to_string(words) + "-word image";
      return false;
    }
    at += count;
  }
  return true;
}

}  // namespace hal::level_zero
