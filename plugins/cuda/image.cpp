#include "image.hpp"

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace hal::cuda {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50u;

template <class T>
T read(const unsigned char* data, size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof(T));
  return value;
}

// offset + count * entry <= size, without overflow.
bool table_fits(uint64_t offset, uint64_t count, uint64_t entry, size_t size) {
  if (count == 0) return true;
  if (entry == 0 || count > (UINT64_MAX - offset) / entry) return false;
  return offset + count * entry <= size;
}

bool check_cubin(const unsigned char* data, size_t size, std::string& why) {
  if (size < sizeof(Elf64_Ehdr)) {
    why = "an ELF image of " + std::to_string(size) + " bytes is shorter than its header";
    return false;
  }
  const auto header = read<Elf64_Ehdr>(data, 0);
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB) {
    why = "the ELF image is not 64-bit little-endian, as a cubin is";
    return false;
  }
  if (header.e_machine != EM_CUDA) {
    why = "the ELF image is for machine " + std::to_string(header.e_machine) +
          ", not a CUDA cubin (EM_CUDA, 190)";
    return false;
  }
  if (!table_fits(header.e_phoff, header.e_phnum, sizeof(Elf64_Phdr), size) ||
      (header.e_phnum != 0 && header.e_phentsize != sizeof(Elf64_Phdr))) {
    why = "the program header table lies outside the " + std::to_string(size) + "-byte image";
    return false;
  }
  if (!table_fits(header.e_shoff, header.e_shnum, sizeof(Elf64_Shdr), size) ||
      (header.e_shnum != 0 && header.e_shentsize != sizeof(Elf64_Shdr))) {
    why = "the section header table lies outside the " + std::to_string(size) + "-byte image";
    return false;
  }
  for (uint16_t i = 0; i < header.e_phnum; ++i) {
    const auto segment = read<Elf64_Phdr>(data, header.e_phoff + i * sizeof(Elf64_Phdr));
    if (!table_fits(segment.p_offset, 1, segment.p_filesz, size) && segment.p_filesz != 0) {
      why = "segment " + std::to_string(i) + " ends past the end of the " + std::to_string(size) +
            "-byte image";
      return false;
    }
  }
  for (uint16_t i = 0; i < header.e_shnum; ++i) {
    const auto section = read<Elf64_Shdr>(data, header.e_shoff + i * sizeof(Elf64_Shdr));
    if (section.sh_type != SHT_NOBITS && section.sh_size != 0 &&
        !table_fits(section.sh_offset, 1, section.sh_size, size)) {
      why = "section " + std::to_string(i) + " ends past the end of the " + std::to_string(size) +
            "-byte image";
      return false;
    }
  }
  return true;
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
