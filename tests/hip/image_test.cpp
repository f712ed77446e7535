// The code object checks the hip plugin makes before hipModuleLoadData reads
// an image (it takes no size), and the metadata reader: a real code object
// from hiprtc, then truncated, forged and bundled variants of it, and random
// corruptions that must be refused or read without a read out of bounds.
#include <catch2/catch.hpp>

#include <elf.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hiprtc.hpp"
#include "image.hpp"

namespace {

constexpr char kMixedSource[] =
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "mixed(void* p, unsigned u, float f, double d, long long i) {\n"
    "  if (p) *static_cast<double*>(p) = u + f + d + i;\n"
    "}\n";

// kMixedSource compiled by the system's hiprtc for |arch|.
std::string compile_for(const std::string& arch) {
  std::string why;
  auto hiprtc = hal::hip::Hiprtc::open(nullptr, why);
  INFO(why);
  REQUIRE(hiprtc != nullptr);
  std::string out, log;
  INFO(log);
  REQUIRE(hiprtc->compile(kMixedSource, "mixed.hip", arch, out, log));
  return out;
}

const std::string& code_object() {
  static const std::string code = compile_for("gfx90a");
  return code;
}

bool check(const std::string& image, std::string& why) {
  return hal::hip::check_code_object(image.data(), image.size(), why);
}

template <class T>
void put(std::string& image, size_t offset, T value) {
  std::memcpy(image.data() + offset, &value, sizeof(T));
}

// A clang offload bundle: the magic, the count, then offset, size, triple
// size and triple per entry, then the entries' bytes.
std::string bundle(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string header = "__CLANG_OFFLOAD_BUNDLE__";
  header.append(8, '\0');
  put<uint64_t>(header, 24, entries.size());
  size_t table = header.size();
  for (const auto& entry : entries) table += 24 + entry.first.size();
  std::string body;
  for (const auto& [triple, bytes] : entries) {
    std::string record(24, '\0');
    put<uint64_t>(record, 0, bytes.empty() ? 0 : table + body.size());
    put<uint64_t>(record, 8, bytes.size());
    put<uint64_t>(record, 16, triple.size());
    header += record + triple;
    body += bytes;
  }
  return header + body;
}

}  // namespace

TEST_CASE("a hiprtc code object is accepted and its metadata read", "[image]") {
  const std::string& code = code_object();
  std::string why;
  REQUIRE(check(code, why));
  std::vector<hal::hip::KernelMetadata> kernels;
  REQUIRE(hal::hip::read_kernel_metadata(code.data(), code.size(), kernels, why));
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].name == "mixed");
  CHECK(kernels[0].arg_sizes == std::vector<uint32_t>{8, 4, 4, 8, 8});
  CHECK(kernels[0].max_flat_workgroup_size == 256);
}

TEST_CASE("truncated and forged code objects are refused before the runtime", "[image]") {
  const std::string& code = code_object();
  std::string why;
  CHECK_FALSE(check(code.substr(0, 40), why));
  CHECK(why.find("shorter than its header") != std::string::npos);
  CHECK_FALSE(check(code.substr(0, code.size() / 2), why));
  CHECK(why.find("outside the") != std::string::npos);  // the section headers sit at the end
  std::string image = code;
  put<uint16_t>(image, offsetof(Elf64_Ehdr, e_machine), EM_X86_64);
  CHECK_FALSE(check(image, why));
  CHECK(why.find("not an AMD GPU code object (EM_AMDGPU, 224)") != std::string::npos);
  image = code;
  image[EI_CLASS] = ELFCLASS32;
  CHECK_FALSE(check(image, why));
  CHECK(why.find("64-bit") != std::string::npos);
  image = code;
  put<uint64_t>(image, offsetof(Elf64_Ehdr, e_shoff), UINT64_MAX - 8);
  CHECK_FALSE(check(image, why));
  CHECK(why.find("section header table") != std::string::npos);
  // A section whose extent overflows: offset + size wraps around.
  image = code;
  Elf64_Ehdr header;
  std::memcpy(&header, image.data(), sizeof(header));
  const size_t first = header.e_shoff + sizeof(Elf64_Shdr);  // section 1
  put<uint64_t>(image, first + offsetof(Elf64_Shdr, sh_size), UINT64_MAX);
  CHECK_FALSE(check(image, why));
  CHECK(why.find("section 1 ends past the end") != std::string::npos);
  CHECK_FALSE(
      check("\x7f"
            "ELF",
            why));
  CHECK_FALSE(check(std::string("not a code object at all"), why));
  CHECK(why.find("neither an AMD GPU code object") != std::string::npos);
  CHECK_FALSE(check(std::string(), why));
}

TEST_CASE("offload bundles: entries inside the image, a GPU entry that is a code object",
          "[image]") {
  const std::string& code = code_object();
  std::string why;
  const std::string good =
      bundle({{"host-x86_64-unknown-linux", ""}, {"hipv4-amdgcn-amd-amdhsa--gfx90a", code}});
  REQUIRE(check(good, why));
  std::vector<hal::hip::KernelMetadata> kernels;
  REQUIRE(hal::hip::read_kernel_metadata(good.data(), good.size(), kernels, why));
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].name == "mixed");

  CHECK_FALSE(check(good.substr(0, good.size() - 1), why));  // the code object is cut short
  CHECK(why.find("ends past the end") != std::string::npos);
  std::string forged = good;
  put<uint64_t>(forged, 24, uint64_t{1} << 40);  // the entry count
  CHECK_FALSE(check(forged, why));
  CHECK(why.find("declares") != std::string::npos);
  forged = good;
  put<uint64_t>(forged, 32 + 16, uint64_t{1} << 40);  // the first triple's size
  CHECK_FALSE(check(forged, why));
  CHECK(why.find("target name") != std::string::npos);
  CHECK_FALSE(check(bundle({{"host-x86_64-unknown-linux", ""}}), why));
  CHECK(why.find("no AMD GPU (amdgcn) entry") != std::string::npos);
  std::string not_elf = code;
  put<uint16_t>(not_elf, offsetof(Elf64_Ehdr, e_machine), EM_X86_64);
  CHECK_FALSE(check(bundle({{"hipv4-amdgcn-amd-amdhsa--gfx90a", not_elf}}), why));
  CHECK(why.find("bundle entry hipv4-amdgcn-amd-amdhsa--gfx90a") != std::string::npos);
  CHECK_FALSE(check(std::string("__CLANG_OFFLOAD_BUNDLE__\x01", 25), why));
}

TEST_CASE("a code object is for the architecture its ELF header names, features included",
          "[image]") {
  // The reference is the compiler: each image is for exactly the target it
  // was compiled for (features sorted by name, as a target ID writes them).
  const std::vector<std::pair<std::string, std::string>> targets = {
      {"gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-"},
      {"gfx90a", "gfx90a"},
      {"gfx90a:xnack+", "gfx90a:xnack+"},
      {"gfx908", "gfx908"},
      {"gfx906:sramecc-", "gfx906:sramecc-"},
      {"gfx1030", "gfx1030"},
  };
  std::vector<std::string> images;
  for (const auto& target : targets) images.push_back(compile_for(target.first));
  for (size_t built = 0; built < targets.size(); ++built) {
    for (size_t asked = 0; asked < targets.size(); ++asked) {
      CAPTURE(targets[built].first, targets[asked].first);
      std::string why;
      const bool is_for = hal::hip::code_object_is_for(images[built].data(), images[built].size(),
                                                       targets[asked].first, why);
      CHECK(is_for == (built == asked));
      if (!is_for) {
        CHECK(why == "the code object is built for " + targets[built].second + ", not " +
                         targets[asked].second);
      }
    }
  }
  std::string why;
  // The features in another order name the same target.
  CHECK(hal::hip::code_object_is_for(images[0].data(), images[0].size(), "gfx90a:xnack-:sramecc+",
                                     why));

  // A header forged to another processor, or to a code object version
  // before v3 (no feature bits), is refused; so is anything not a code object.
  std::mt19937 random(4242);
  const std::string& plain = images[1];
  for (int round = 0; round < 64; ++round) {
    std::string forged = plain;
    Elf64_Ehdr header;
    std::memcpy(&header, forged.data(), sizeof(header));
    const uint32_t mach = static_cast<uint32_t>(random() % 256);
    if (mach == (header.e_flags & 0xff)) continue;
    put<uint32_t>(forged, offsetof(Elf64_Ehdr, e_flags), (header.e_flags & ~0xffu) | mach);
    CAPTURE(mach);
    CHECK_FALSE(hal::hip::code_object_is_for(forged.data(), forged.size(), "gfx90a", why));
    CHECK(why.find("the code object is built for ") == 0);
  }
  std::string old_version = plain;
  old_version[EI_ABIVERSION] = 0;
  CHECK_FALSE(hal::hip::code_object_is_for(old_version.data(), old_version.size(), "gfx90a", why));
  CHECK(why.find("version 0") != std::string::npos);
  CHECK_FALSE(hal::hip::code_object_is_for("not a code object", 17, "gfx90a", why));
  CHECK(why.find("neither an AMD GPU code object") != std::string::npos);

  // A bundle is for an architecture when one of its GPU entries is.
  const std::string both = bundle({{"host-x86_64-unknown-linux", ""},
                                   {"hipv4-amdgcn-amd-amdhsa--gfx908", images[3]},
                                   {"hipv4-amdgcn-amd-amdhsa--gfx1030", images[5]}});
  CHECK(hal::hip::code_object_is_for(both.data(), both.size(), "gfx1030", why));
  CHECK(hal::hip::code_object_is_for(both.data(), both.size(), "gfx908", why));
  CHECK_FALSE(hal::hip::code_object_is_for(both.data(), both.size(), "gfx90a", why));
  CHECK(why == "the offload bundle's code objects are built for gfx908, gfx1030, not gfx90a");
}

TEST_CASE("malformed metadata is refused, never read past", "[image]") {
  std::string image = code_object();
  const size_t key = image.find("amdhsa.kernels");
  REQUIRE(key != std::string::npos);
  REQUIRE(static_cast<unsigned char>(image[key - 1]) == 0xae);  // fixstr, 14 bytes
  image[key - 1] = static_cast<char>(0xc1);                     // never used in msgpack
  std::string why;
  REQUIRE(check(image, why));  // the ELF is intact
  std::vector<hal::hip::KernelMetadata> kernels;
  CHECK_FALSE(hal::hip::read_kernel_metadata(image.data(), image.size(), kernels, why));
  CHECK(why.find("metadata is malformed") != std::string::npos);
  CHECK(kernels.empty());
}

TEST_CASE("random corruptions never read out of bounds", "[image]") {
  // Under ASan this is the proof; without it, the checks still must not crash.
  const std::string& code = code_object();
  std::mt19937 random(20261203);
  size_t accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string image = code;
    const int flips = 1 + static_cast<int>(random() % 8);
    for (int i = 0; i < flips; ++i) {
      image[random() % image.size()] = static_cast<char>(random());
    }
    if (round % 7 == 0) image.resize(random() % image.size());
    std::string why;
    std::vector<hal::hip::KernelMetadata> kernels;
    if (hal::hip::check_code_object(image.data(), image.size(), why)) {
      ++accepted;
      hal::hip::read_kernel_metadata(image.data(), image.size(), kernels, why);
    }
  }
  CHECK(accepted > 0);  // flips in code bytes leave a valid ELF: the reader ran
}
