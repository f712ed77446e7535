// A device code object in ELF64 (a CUDA cubin, an AMD GPU code object) checked before the
// vendor's loader reads it: a module is untrusted input (SPEC.md, threat model), and a driver
// that follows a header or section past the end of the bytes it was given reads out of bounds.
// Written once for the plugins that hand ELF images to their driver (cuda, hip).
#ifndef HAL_PLUGIN_SDK_DEVICE_ELF_HPP_
#define HAL_PLUGIN_SDK_DEVICE_ELF_HPP_

#include <elf.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace hal::plugin {

// The |T| at |offset| of |data|, which the caller checked holds it.
template <class T>
T read_unaligned(const unsigned char* data, size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof(T));
  return value;
}

// offset + count * entry <= size, without overflow.
inline bool table_fits(uint64_t offset, uint64_t count, uint64_t entry, size_t size) {
  if (count == 0) return true;
  if (entry == 0 || count > (UINT64_MAX - offset) / entry) return false;
  return offset + count * entry <= size;
}

// True when |data| (|size| bytes) is a 64-bit little-endian ELF image for |machine| whose header,
// program and section header tables, every segment's file bytes and every section's file bytes
// lie inside |size|. Otherwise false with |why| set. |kind| names the object as the messages do
// ("a cubin"), |machine_text| the machine ("a CUDA cubin (EM_CUDA, 190)").
inline bool check_device_elf(const unsigned char* data, size_t size, uint16_t machine,
                             const char* kind, const char* machine_text, std::string& why) {
  if (size < sizeof(Elf64_Ehdr)) {
    why = "an ELF image of " + std::to_string(size) + " bytes is shorter than its header";
    return false;
  }
  const auto header = read_unaligned<Elf64_Ehdr>(data, 0);
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB) {
    why = std::string("the ELF image is not 64-bit little-endian, as ") + kind + " is";
    return false;
  }
  if (header.e_machine != machine) {
    why = "the ELF image is for machine " + std::to_string(header.e_machine) + ", not " +
          machine_text;
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
    const auto segment = read_unaligned<Elf64_Phdr>(data, header.e_phoff + i * sizeof(Elf64_Phdr));
    if (segment.p_filesz != 0 && !table_fits(segment.p_offset, 1, segment.p_filesz, size)) {
      why = "segment " + std::to_string(i) + " ends past the end of the " + std::to_string(size) +
            "-byte image";
      return false;
    }
  }
  for (uint16_t i = 0; i < header.e_shnum; ++i) {
    const auto section = read_unaligned<Elf64_Shdr>(data, header.e_shoff + i * sizeof(Elf64_Shdr));
    if (section.sh_type != SHT_NOBITS && section.sh_size != 0 &&
        !table_fits(section.sh_offset, 1, section.sh_size, size)) {
      why = "section " + std::to_string(i) + " ends past the end of the " + std::to_string(size) +
            "-byte image";
      return false;
    }
  }
  return true;
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_DEVICE_ELF_HPP_
