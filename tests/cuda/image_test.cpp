// The cubin and fatbin bounds checks the cuda plugin runs before the driver
// reads an image (cuModuleLoadData takes no size).
#include <catch2/catch.hpp>

#include <elf.h>

#include <cstring>
#include <string>
#include <vector>

#include "image.hpp"

namespace {

// A minimal cubin-shaped ELF: the header, one section header (a 16-byte
// PROGBITS section right after it) and the section's bytes.
std::vector<unsigned char> make_cubin() {
  std::vector<unsigned char> image(sizeof(Elf64_Ehdr) + 16 + sizeof(Elf64_Shdr), 0);
  Elf64_Ehdr header{};
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = ELFCLASS64;
  header.e_ident[EI_DATA] = ELFDATA2LSB;
  header.e_machine = EM_CUDA;
  header.e_ehsize = sizeof(Elf64_Ehdr);
  header.e_shoff = sizeof(Elf64_Ehdr) + 16;
  header.e_shnum = 1;
  header.e_shentsize = sizeof(Elf64_Shdr);
  std::memcpy(image.data(), &header, sizeof(header));
  Elf64_Shdr section{};
  section.sh_type = SHT_PROGBITS;
  section.sh_offset = sizeof(Elf64_Ehdr);
  section.sh_size = 16;
  std::memcpy(image.data() + header.e_shoff, &section, sizeof(section));
  return image;
}

template <class T>
void patch(std::vector<unsigned char>& image, size_t offset, T value) {
  std::memcpy(image.data() + offset, &value, sizeof(T));
}

std::vector<unsigned char> make_fatbin(uint64_t body, size_t actual_body) {
  std::vector<unsigned char> image(16 + actual_body, 0);
  patch<uint32_t>(image, 0, 0xBA55ED50u);
  patch<uint16_t>(image, 4, 1);
  patch<uint16_t>(image, 6, 16);
  patch<uint64_t>(image, 8, body);
  return image;
}

}  // namespace

TEST_CASE("a well-formed cubin and fatbin pass", "[image]") {
  std::string why;
  auto cubin = make_cubin();
  CHECK(hal::cuda::check_binary_image(cubin.data(), cubin.size(), why));
  auto fatbin = make_fatbin(64, 64);
  CHECK(hal::cuda::check_binary_image(fatbin.data(), fatbin.size(), why));
}

TEST_CASE("every truncation of a cubin is refused", "[image]") {
  const auto cubin = make_cubin();
  for (size_t size = 0; size < cubin.size(); ++size) {
    std::string why;
    INFO("size " << size);
    CHECK_FALSE(hal::cuda::check_binary_image(cubin.data(), size, why));
    CHECK_FALSE(why.empty());
  }
}

TEST_CASE("forged offsets and sizes are refused, overflow included", "[image]") {
  std::string why;
  const size_t shdr = sizeof(Elf64_Ehdr) + 16;
  SECTION("a section past the end") {
    auto cubin = make_cubin();
    patch<uint64_t>(cubin, shdr + offsetof(Elf64_Shdr, sh_size), 1u << 20);
    CHECK_FALSE(hal::cuda::check_binary_image(cubin.data(), cubin.size(), why));
    CHECK(why.find("section 0") != std::string::npos);
  }
  SECTION("a section whose end overflows") {
    auto cubin = make_cubin();
    patch<uint64_t>(cubin, shdr + offsetof(Elf64_Shdr, sh_offset), UINT64_MAX - 4);
    CHECK_FALSE(hal::cuda::check_binary_image(cubin.data(), cubin.size(), why));
  }
  SECTION("a section header table past the end") {
    auto cubin = make_cubin();
    patch<uint16_t>(cubin, offsetof(Elf64_Ehdr, e_shnum), 1000);
    CHECK_FALSE(hal::cuda::check_binary_image(cubin.data(), cubin.size(), why));
    CHECK(why.find("section header table") != std::string::npos);
  }
  SECTION("an ELF for another machine") {
    auto cubin = make_cubin();
    patch<uint16_t>(cubin, offsetof(Elf64_Ehdr, e_machine), EM_X86_64);
    CHECK_FALSE(hal::cuda::check_binary_image(cubin.data(), cubin.size(), why));
    CHECK(why.find("not a CUDA cubin") != std::string::npos);
  }
  SECTION("a fatbin declaring more than it has") {
    auto fatbin = make_fatbin(65, 64);
    CHECK_FALSE(hal::cuda::check_binary_image(fatbin.data(), fatbin.size(), why));
    auto huge = make_fatbin(UINT64_MAX, 8);
    CHECK_FALSE(hal::cuda::check_binary_image(huge.data(), huge.size(), why));
  }
  SECTION("text") {
    const std::string text = ".version 9.0";
    CHECK_FALSE(hal::cuda::check_binary_image(text.data(), text.size(), why));
    CHECK(why.find("neither a cubin") != std::string::npos);
  }
}
