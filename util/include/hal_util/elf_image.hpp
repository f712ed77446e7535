#pragma once
// Checks an ELF shared object before dlopen maps it. dlopen trusts the file:
// a segment that reaches past the end of a truncated file is mapped anyway and
// the first touch of it kills the process with SIGBUS. These checks bound
// every structure the dynamic loader (and HAL's own symbol lookup) reads.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hal::util {

// True when |data| (|size| bytes) is an ELF shared object (ET_DYN) of this
// host's class, byte order and machine whose header, program headers, every
// segment's file bytes, the section header table and every section's file
// bytes lie inside |size|. Otherwise false with |why| set (one phrase, e.g.
// "a PT_LOAD segment ends at byte 8192, past the end of the 4096-byte file").
bool check_elf_image(const void* data, size_t size, std::string& why);

// A symbol the object itself defines in its dynamic symbol table (.dynsym):
// not undefined (imported), global or weak binding, default or protected
// visibility.
struct ElfDefinedSymbol {
  std::string name;
  bool function = false;  // STT_FUNC; anything else (STT_OBJECT, ...) is data
};

// The symbols the image defines. |data| must have passed check_elf_image.
// An image without a .dynsym section defines none.
std::vector<ElfDefinedSymbol> elf_defined_symbols(const void* data, size_t size);

// Reads |path| as read_regular_file does (a regular file, at most 1 GiB; a
// FIFO or device is refused without blocking) and checks it with
// check_elf_image. False with |why| naming the path and the reason.
bool check_elf_file(const std::string& path, std::string& why);

}  // namespace hal::util
