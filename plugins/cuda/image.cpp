#include "image.hpp"

#include "hal_plugin_sdk/device_elf.hpp"

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace hal::cuda {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50u;

using plugin::table_fits;

template <class T>
T read(const unsigned char* data, size_t offset) {
  return plugin::read_unaligned<T>(data, offset);
}

bool check_cubin(const unsigned char* data, size_t size, std::string& why) {
  return plugin::check_device_elf(data, size, EM_CUDA, "a cubin", "a CUDA cubin (EM_CUDA, 190)",
                                  why);
}

bool check_fatbin(const unsigned char* data, size_t size, std::string& why) {
  // magic u32, version u16, header size u16, size of what follows u64.
  if (size < 16) {
    why = "a fatbin of " + std::to_string(size) + " bytes is shorter than its header";
    return false;
  }
  const uint64_t header_size = read<uint16_t>(data, 6);
  const uint64_t body_size = read<uint64_t>(data, 8);
  if (header_size < 16 || body_size > UINT64_MAX - header_size || header_size + body_size > size) {
    why = "the fatbin declares " + std::to_string(header_size) + " + " + std::to_string(body_size) +
          " bytes, more than the " + std::to_string(size) + "-byte image";
    return false;
  }
  return true;
}

}  // namespace

bool check_binary_image(const void* data, size_t size, std::string& why) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (size >= SELFMAG && std::memcmp(bytes, ELFMAG, SELFMAG) == 0) {
    return check_cubin(bytes, size, why);
  }
  if (size >= 4 && read<uint32_t>(bytes, 0) == kFatbinMagic) return check_fatbin(bytes, size, why);
  why = "neither a cubin (ELF) nor a fatbin (magic 0xBA55ED50)";
  return false;
}

int cubin_arch(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string why;
  if (size < SELFMAG || std::memcmp(bytes, ELFMAG, SELFMAG) != 0 || !check_cubin(bytes, size, why))
    return 0;
  const auto header = read<Elf64_Ehdr>(bytes, 0);
  const uint32_t flags = header.e_flags;
  return static_cast<int>(header.e_ident[EI_ABIVERSION] >= 8 ? (flags >> 8) & 0xffu
                                                             : flags & 0xffu);
}

namespace {

// The first word of |line| after |directive| and blanks ("sm_90" from
// ".target sm_90, debug"); empty when |line| is not that directive.
std::string_view directive_word(std::string_view line, std::string_view directive) {
  if (line.substr(0, directive.size()) != directive) return {};
  line.remove_prefix(directive.size());
  if (line.empty() || (line.front() != ' ' && line.front() != '\t')) return {};
  const size_t start = line.find_first_not_of(" \t");
  if (start == std::string_view::npos) return {};
  line.remove_prefix(start);
  return line.substr(0, line.find_first_of(" \t,\r"));
}

}  // namespace

bool check_ptx_text(const void* data, size_t size, std::string& target, std::string& why) {
  const std::string_view text(static_cast<const char*>(data), size);
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    why = "a NUL byte at offset " + std::to_string(nul) + " (PTX is text)";
    return false;
  }
  bool versioned = false;
  target.clear();
  for (size_t at = 0; at < text.size() && target.empty();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string_view::npos) continue;
    line.remove_prefix(start);
    if (line.substr(0, 2) == "//") continue;
    if (!versioned) {
      if (directive_word(line, ".version").empty()) {
        why = "its first directive is not .version";
        return false;
      }
      versioned = true;
      continue;
    }
    target = std::string(directive_word(line, ".target"));
  }
  if (!versioned) {
    why = "no .version directive";
    return false;
  }
  if (target.empty()) {
    why = "no .target directive";
    return false;
  }
  return true;
}

}  // namespace hal::cuda
