// hal_util's ELF image checker over a real shared object, its seeded
// truncations and mutations, and its defined-symbol listing; and SHA-256
// against the FIPS 180-4 examples.
#include <catch2/catch.hpp>

#include <elf.h>
#include <link.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "hal_util/elf_image.hpp"
#include "hal_util/sha256.hpp"

namespace {

std::vector<unsigned char> read_file(const char* path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(file),
                                    std::istreambuf_iterator<char>());
}

// The largest end (offset + file size) of any segment or section, and of the
// header tables: an independent statement of "everything lies in the file".
size_t furthest_end(const std::vector<unsigned char>& image) {
  ElfW(Ehdr) header;
  std::memcpy(&header, image.data(), sizeof(header));
  size_t end = header.e_phoff + size_t{header.e_phnum} * sizeof(ElfW(Phdr));
  for (size_t i = 0; i < header.e_phnum; ++i) {
    ElfW(Phdr) segment;
    std::memcpy(&segment, image.data() + header.e_phoff + i * sizeof(segment), sizeof(segment));
    // A segment with no file bytes (PT_GNU_STACK) reads nothing from the file.
    if (segment.p_filesz != 0) end = std::max<size_t>(end, segment.p_offset + segment.p_filesz);
  }
  end = std::max<size_t>(end, header.e_shoff + size_t{header.e_shnum} * sizeof(ElfW(Shdr)));
  return end;
}

}  // namespace

TEST_CASE("the ELF checker accepts real shared objects", "[cpu][files][elf]") {
  for (const char* path : {HAL_TEST_CPU_KERNELS_PATH, HAL_TEST_CPU_HOSTILE_PATH}) {
    CAPTURE(path);
    const std::vector<unsigned char> image = read_file(path);
    std::string why;
    CHECK(hal::util::check_elf_image(image.data(), image.size(), why));
    CHECK(why.empty());
    std::string file_why;
    CHECK(hal::util::check_elf_file(path, file_why));
  }
}

TEST_CASE("the ELF checker refuses every truncation of a real object", "[cpu][files][elf]") {
  const std::vector<unsigned char> image = read_file(HAL_TEST_CPU_KERNELS_PATH);
  REQUIRE(image.size() > 1024);
  // The section header table ends the file: any cut loses part of it.
  REQUIRE(furthest_end(image) == image.size());
  std::mt19937 random(7);
  std::vector<size_t> cuts;
  for (size_t cut = 0; cut < 256; ++cut) cuts.push_back(cut);  // every cut in the headers
  for (int i = 0; i < 2000; ++i) cuts.push_back(random() % image.size());
  for (size_t cut : cuts) {
    std::vector<unsigned char> truncated(image.begin(), image.begin() + static_cast<long>(cut));
    std::string why;
    if (hal::util::check_elf_image(truncated.data(), truncated.size(), why)) {
      FAIL("accepted a cut at byte " << cut << " of " << image.size());
    }
    CHECK_FALSE(why.empty());
  }
}

TEST_CASE("the ELF checker survives seeded mutations", "[cpu][files][elf]") {
  // Under the sanitizers, neither the checker nor the symbol listing reads
  // outside the image, whatever its bytes say; what it accepts keeps every
  // segment and table inside the file.
  const std::vector<unsigned char> image = read_file(HAL_TEST_CPU_KERNELS_PATH);
  std::mt19937 random(20261201);
  size_t accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<unsigned char> mutant = image;
    const int flips = 1 + static_cast<int>(random() % 8);
    for (int f = 0; f < flips; ++f) {
      // Mostly the headers, where the offsets are; sometimes anywhere.
      const size_t limit =
          random() % 4 == 0 ? mutant.size() : std::min<size_t>(mutant.size(), 1024);
      const size_t at = random() % limit;
      mutant[at] = static_cast<unsigned char>(random());
    }
    // Sometimes the header tables are pointed at the end of the image.
    if (random() % 8 == 0) {
      ElfW(Ehdr) header;
      std::memcpy(&header, mutant.data(), sizeof(header));
      header.e_shoff = mutant.size() - random() % 64;
      std::memcpy(mutant.data(), &header, sizeof(header));
    }
    std::string why;
    if (!hal::util::check_elf_image(mutant.data(), mutant.size(), why)) {
      CHECK_FALSE(why.empty());
      continue;
    }
    ++accepted;
    ElfW(Ehdr) header;
    std::memcpy(&header, mutant.data(), sizeof(header));
    if (header.e_shoff != 0 && header.e_shnum != 0) REQUIRE(furthest_end(mutant) <= mutant.size());
    (void)hal::util::elf_defined_symbols(mutant.data(), mutant.size());
  }
  CHECK(accepted > 0);  // flips in padding and code leave a valid object
}

TEST_CASE("defined symbols are the module's own functions and data", "[cpu][files][elf]") {
  const std::vector<unsigned char> image = read_file(HAL_TEST_CPU_HOSTILE_PATH);
  std::string why;
  REQUIRE(hal::util::check_elf_image(image.data(), image.size(), why));
  bool kernel = false, data = false, signature = false;
  for (const hal::util::ElfDefinedSymbol& symbol :
       hal::util::elf_defined_symbols(image.data(), image.size())) {
    CHECK(symbol.name != "abort");  // imported, not defined
    CHECK(symbol.name != "getenv");
    kernel = kernel || (symbol.name == "real_kernel" && symbol.function);
    data = data || (symbol.name == "exported_data" && !symbol.function);
    signature =
        signature || (symbol.name == "hal_kernel_signature_real_kernel" && !symbol.function);
  }
  CHECK(kernel);
  CHECK(data);
  CHECK(signature);
}

TEST_CASE("the ELF checker names what is wrong", "[cpu][files][elf]") {
  const std::vector<unsigned char> image = read_file(HAL_TEST_CPU_KERNELS_PATH);
  std::string why;
  const char text[] = "not an object at all, just text that is long enough for a header....";
  CHECK_FALSE(hal::util::check_elf_image(text, sizeof(text), why));
  CHECK(why.find("invalid ELF header") != std::string::npos);
  std::vector<unsigned char> mutant = image;
  mutant[EI_CLASS] = ELFCLASS32;
  CHECK_FALSE(hal::util::check_elf_image(mutant.data(), mutant.size(), why));
  CHECK(why.find("32-bit") != std::string::npos);
  mutant = image;
  ElfW(Ehdr) header;
  std::memcpy(&header, mutant.data(), sizeof(header));
  header.e_type = ET_EXEC;
  std::memcpy(mutant.data(), &header, sizeof(header));
  CHECK_FALSE(hal::util::check_elf_image(mutant.data(), mutant.size(), why));
  CHECK(why.find("not a shared object") != std::string::npos);
  header.e_type = ET_DYN;
  header.e_machine = static_cast<uint16_t>(header.e_machine + 1);
  std::memcpy(mutant.data(), &header, sizeof(header));
  CHECK_FALSE(hal::util::check_elf_image(mutant.data(), mutant.size(), why));
  CHECK(why.find("machine") != std::string::npos);
  std::string file_why;
  CHECK_FALSE(hal::util::check_elf_file("/dev/zero", file_why));
  CHECK(file_why.find("character device") != std::string::npos);
}

TEST_CASE("SHA-256 matches the FIPS 180-4 examples", "[cpu][files][sha256]") {
  using hal::util::Sha256;
  CHECK(Sha256::hex(Sha256::of("", 0)) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256::hex(Sha256::of("abc", 3)) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(Sha256::hex(Sha256::of(two_blocks.data(), two_blocks.size())) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a' given in uneven pieces: the streaming path.
  Sha256 streamed;
  const std::string piece(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    const size_t take = std::min(left, piece.size());
    streamed.update(piece.data(), take);
    left -= take;
  }
  CHECK(Sha256::hex(streamed.finish()) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
