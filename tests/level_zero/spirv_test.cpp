// The SPIR-V checks the level_zero plugin makes before zeModuleCreate reads
// an image: size, header, byte order, version, bound, instruction lengths.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "spirv.hpp"

using hal::level_zero::check_spirv_image;

namespace {

// Header + OpCapability Kernel + OpMemoryModel Physical64 OpenCL.
std::vector<uint32_t> minimal_module() {
  return {0x07230203u, 0x00010200u, 0, 8, 0, (2u << 16) | 17, 6, (3u << 16) | 14, 2, 2};
}

bool check(const std::vector<uint32_t>& words, std::string& why, size_t trim = 0) {
  return check_spirv_image(words.data(), words.size() * 4 - trim, why);
}

}  // namespace

TEST_CASE("a well-formed module passes", "[spirv]") {
  std::string why;
  CHECK(check(minimal_module(), why));
  CHECK(why.empty());
}

TEST_CASE("the byte-swapped form passes: SPIR-V allows either order", "[spirv]") {
  std::vector<uint32_t> words = minimal_module();
  for (uint32_t& word : words) word = __builtin_bswap32(word);
  std::string why;
  CHECK(check(words, why));
}

TEST_CASE("a size that is not whole words is refused", "[spirv]") {
  std::string why;
  CHECK_FALSE(check(minimal_module(), why, 1));
  CHECK(why.find("whole number of 32-bit words; 39 bytes is not") != std::string::npos);
}

TEST_CASE("an image shorter than the header is refused", "[spirv]") {
  const std::vector<uint32_t> words = {0x07230203u, 0x00010000u, 0, 8};
  std::string why;
  CHECK_FALSE(check(words, why));
  CHECK(why.find("16 bytes is shorter than its 20-byte header") != std::string::npos);
  CHECK_FALSE(check_spirv_image(words.data(), 0, why));
}

TEST_CASE("a foreign magic number is refused with its value", "[spirv]") {
  std::vector<uint32_t> words = minimal_module();
  words[0] = 0x464c457fu;  // an ELF image
  std::string why;
  CHECK_FALSE(check(words, why));
  CHECK(why == "the magic number is 0x464c457f, not SPIR-V's 0x07230203");
}

TEST_CASE("an unknown version and a zero bound are refused", "[spirv]") {
  std::vector<uint32_t> words = minimal_module();
  words[1] = 0x00020000u;
  std::string why;
  CHECK_FALSE(check(words, why));
  CHECK(why.find("not SPIR-V 1.0 to 1.6") != std::string::npos);
  words = minimal_module();
  words[3] = 0;
  CHECK_FALSE(check(words, why));
  CHECK(why == "the id bound is 0");
}

TEST_CASE("a truncated instruction is refused where it starts", "[spirv]") {
  std::vector<uint32_t> words = minimal_module();
  words.pop_back();  // OpMemoryModel now declares 3 words and has 2
  std::string why;
  CHECK_FALSE(check(words, why));
  CHECK(why == "the instruction at word 7 (3 words) ends past the end of the 9-word image");
  words = minimal_module();
  words[5] = 17;  // word count 0
  CHECK_FALSE(check(words, why));
  CHECK(why == "the instruction at word 5 has a word count of 0");
}
