#include "hal_util/elf_image.hpp"

#include <elf.h>
#include <fcntl.h>
#include <link.h>

#include <cstring>
#include <limits>

#include "hal_util/secure_file.hpp"

namespace hal::util {
namespace {

#if __SIZEOF_POINTER__ == 8
constexpr unsigned char kHostClass = ELFCLASS64;
#else
constexpr unsigned char kHostClass = ELFCLASS32;
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr unsigned char kHostData = ELFDATA2LSB;
#else
constexpr unsigned char kHostData = ELFDATA2MSB;
#endif
#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#elif defined(__i386__)
constexpr uint16_t kHostMachine = EM_386;
#elif defined(__arm__)
constexpr uint16_t kHostMachine = EM_ARM;
#elif defined(__powerpc64__) || defined(__powerpc__)
constexpr uint16_t kHostMachine = __SIZEOF_POINTER__ == 8 ? EM_PPC64 : EM_PPC;
#elif defined(__riscv)
constexpr uint16_t kHostMachine = EM_RISCV;
#elif defined(__s390x__)
constexpr uint16_t kHostMachine = EM_S390;
#else
#error "hal_util/elf_image: unknown host machine"
#endif

using Ehdr = ElfW(Ehdr);
using Phdr = ElfW(Phdr);
using Shdr = ElfW(Shdr);
using Sym = ElfW(Sym);

// True when [offset, offset + count * entry) lies in [0, size), without overflow.
bool table_fits(uint64_t offset, uint64_t count, uint64_t entry, size_t size) {
  if (offset > size) return false;
  if (entry != 0 && count > (size - offset) / entry) return false;
  return true;
}

std::string end_text(uint64_t offset, uint64_t length) {
  // offset + length may overflow: name it as offset and length then.
  if (length > std::numeric_limits<uint64_t>::max() - offset) {
    return "starts at byte " + std::to_string(offset) + " and is " + std::to_string(length) +
           " bytes long";
  }
  return "ends at byte " + std::to_string(offset + length);
}

const char* segment_name(uint32_t type) {
  switch (type) {
    case PT_LOAD:
      return "PT_LOAD";
    case PT_DYNAMIC:
      return "PT_DYNAMIC";
    case PT_INTERP:
      return "PT_INTERP";
    case PT_NOTE:
      return "PT_NOTE";
    case PT_TLS:
      return "PT_TLS";
    case PT_GNU_EH_FRAME:
      return "PT_GNU_EH_FRAME";
    default:
      return "program";
  }
}

template <class T>
T read_at(const unsigned char* bytes, uint64_t offset) {
  T value;
  std::memcpy(&value, bytes + offset, sizeof(T));
  return value;
}

// The section count (extended numbering: 0 with the real count in section 0).
uint64_t section_count(const unsigned char* bytes, const Ehdr& header) {
  if (header.e_shnum != 0 || header.e_shoff == 0) return header.e_shnum;
  return read_at<Shdr>(bytes, header.e_shoff).sh_size;
}

}  // namespace

bool check_elf_image(const void* data, size_t size, std::string& why) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  const std::string file = "the " + std::to_string(size) + "-byte file";
  if (size < EI_NIDENT || std::memcmp(bytes, ELFMAG, SELFMAG) != 0) {
    why = "invalid ELF header: it is not an ELF file (no ELF magic number)";
    return false;
  }
  if (size < sizeof(Ehdr)) {
    why = "file too short: " + file + " is smaller than an ELF header";
    return false;
  }
  const Ehdr header = read_at<Ehdr>(bytes, 0);
  if (header.e_ident[EI_CLASS] != kHostClass) {
    why = std::string("it is a ") + (header.e_ident[EI_CLASS] == ELFCLASS32 ? "32" : "64") +
          "-bit ELF object or of an unknown class; this host loads " +
          (kHostClass == ELFCLASS64 ? "64" : "32") + "-bit objects";
    if (header.e_ident[EI_CLASS] != ELFCLASS32 && header.e_ident[EI_CLASS] != ELFCLASS64) {
      why = "its ELF class " + std::to_string(header.e_ident[EI_CLASS]) + " is unknown";
    }
    return false;
  }
  if (header.e_ident[EI_DATA] != kHostData) {
    why = "its byte order is not this host's";
    return false;
  }
  if (header.e_ident[EI_VERSION] != EV_CURRENT || header.e_version != EV_CURRENT) {
    why = "its ELF version is not EV_CURRENT";
    return false;
  }
  if (header.e_type != ET_DYN) {
    why = "it is not a shared object (ELF type " + std::to_string(header.e_type) +
          ", a shared object is ET_DYN = 3)";
    return false;
  }
  if (header.e_machine != kHostMachine) {
    why = "it is built for ELF machine " + std::to_string(header.e_machine) +
          ", not this host's (" + std::to_string(kHostMachine) + ")";
    return false;
  }
  if (header.e_ehsize != sizeof(Ehdr)) {
    why = "its ELF header size " + std::to_string(header.e_ehsize) + " is not " +
          std::to_string(sizeof(Ehdr));
    return false;
  }
  if (header.e_phnum == 0 || header.e_phentsize != sizeof(Phdr)) {
    why = "it has no program headers, or of the wrong size";
    return false;
  }
  if (!table_fits(header.e_phoff, header.e_phnum, sizeof(Phdr), size)) {
    why = "its program header table " + end_text(header.e_phoff, header.e_phnum * sizeof(Phdr)) +
          ", past the end of " + file;
    return false;
  }
  bool has_load = false;
  for (uint64_t i = 0; i < header.e_phnum; ++i) {
    const Phdr segment = read_at<Phdr>(bytes, header.e_phoff + i * sizeof(Phdr));
    has_load = has_load || segment.p_type == PT_LOAD;
    if (segment.p_filesz == 0) continue;
    if (!table_fits(segment.p_offset, 1, segment.p_filesz, size)) {
      why = std::string("a ") + segment_name(segment.p_type) + " segment " +
            end_text(segment.p_offset, segment.p_filesz) + ", past the end of " + file +
            " (the file is truncated or damaged)";
      return false;
    }
    if (segment.p_type == PT_LOAD && segment.p_filesz > segment.p_memsz) {
      why = "a PT_LOAD segment has more file bytes than memory bytes";
      return false;
    }
  }
  if (!has_load) {
    why = "it has no PT_LOAD segment";
    return false;
  }
  if (header.e_shoff != 0) {
    if (header.e_shentsize != sizeof(Shdr) || !table_fits(header.e_shoff, 1, sizeof(Shdr), size)) {
      why = "its section header table " + end_text(header.e_shoff, sizeof(Shdr)) +
            " or has the wrong entry size, past the end of " + file;
      return false;
    }
    const uint64_t sections = section_count(bytes, header);
    if (!table_fits(header.e_shoff, sections, sizeof(Shdr), size)) {
      why = "its section header table of " + std::to_string(sections) + " entries " +
            end_text(header.e_shoff, sections * sizeof(Shdr)) + ", past the end of " + file +
            " (the file is truncated or damaged)";
      return false;
    }
    for (uint64_t i = 0; i < sections; ++i) {
      const Shdr section = read_at<Shdr>(bytes, header.e_shoff + i * sizeof(Shdr));
      if (section.sh_type == SHT_NOBITS || section.sh_size == 0) continue;
      if (!table_fits(section.sh_offset, 1, section.sh_size, size)) {
        why = "section " + std::to_string(i) + " " + end_text(section.sh_offset, section.sh_size) +
              ", past the end of " + file + " (the file is truncated or damaged)";
        return false;
      }
    }
    if (sections != 0 && header.e_shstrndx != SHN_XINDEX && header.e_shstrndx >= sections) {
      why = "its section name table index is out of range";
      return false;
    }
  }
  return true;
}

std::vector<ElfDefinedSymbol> elf_defined_symbols(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::vector<ElfDefinedSymbol> symbols;
  // check_elf_image bounded all of this; checked again here so a caller that
  // skipped it gets an empty list rather than a read past the image.
  if (size < sizeof(Ehdr)) return symbols;
  const Ehdr header = read_at<Ehdr>(bytes, 0);
  if (header.e_shoff == 0 || !table_fits(header.e_shoff, 1, sizeof(Shdr), size)) return symbols;
  const uint64_t sections = section_count(bytes, header);
  if (!table_fits(header.e_shoff, sections, sizeof(Shdr), size)) return symbols;
  for (uint64_t i = 0; i < sections; ++i) {
    const Shdr table = read_at<Shdr>(bytes, header.e_shoff + i * sizeof(Shdr));
    if (table.sh_type != SHT_DYNSYM || table.sh_entsize != sizeof(Sym) || table.sh_link >= sections)
      continue;
    const Shdr strings = read_at<Shdr>(bytes, header.e_shoff + table.sh_link * sizeof(Shdr));
    if (strings.sh_type != SHT_STRTAB || !table_fits(table.sh_offset, 1, table.sh_size, size) ||
        !table_fits(strings.sh_offset, 1, strings.sh_size, size)) {
      continue;
    }
    const uint64_t count = table.sh_size / sizeof(Sym);
    for (uint64_t s = 1; s < count; ++s) {
      const Sym symbol = read_at<Sym>(bytes, table.sh_offset + s * sizeof(Sym));
      const unsigned binding = ELF64_ST_BIND(symbol.st_info);
      const unsigned type = ELF64_ST_TYPE(symbol.st_info);
      const unsigned visibility = ELF64_ST_VISIBILITY(symbol.st_other);
      if (symbol.st_shndx == SHN_UNDEF) continue;  // imported
      if (binding != STB_GLOBAL && binding != STB_WEAK) continue;
      if (visibility != STV_DEFAULT && visibility != STV_PROTECTED) continue;
      if (type == STT_SECTION || type == STT_FILE || type == STT_TLS) continue;
      if (symbol.st_name >= strings.sh_size) continue;
      const char* name = reinterpret_cast<const char*>(bytes + strings.sh_offset + symbol.st_name);
      const size_t length = strnlen(name, strings.sh_size - symbol.st_name);
      if (length == strings.sh_size - symbol.st_name) continue;  // not terminated in the table
      symbols.push_back({std::string(name, length), type == STT_FUNC});
    }
  }
  return symbols;
}

bool check_elf_file(const std::string& path, std::string& why) {
  std::vector<unsigned char> bytes;
  int error = 0;
  std::string reason;
  if (!read_regular_file(AT_FDCWD, path, ReadRule{}, bytes, error, reason) ||
      !check_elf_image(bytes.data(), bytes.size(), reason)) {
    why = "'" + path + "' is not a loadable shared object: " + reason;
    return false;
  }
  return true;
}

}  // namespace hal::util
