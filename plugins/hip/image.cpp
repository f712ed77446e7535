#include "image.hpp"

#include "hal_plugin_sdk/device_elf.hpp"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace hal::hip {
namespace {

#ifndef EM_AMDGPU
constexpr uint16_t EM_AMDGPU = 224;
#endif
constexpr uint32_t kNoteAmdgpuMetadata = 32;  // NT_AMDGPU_METADATA
constexpr char kBundleMagic[] = "__CLANG_OFFLOAD_BUNDLE__";
constexpr size_t kBundleMagicSize = sizeof(kBundleMagic) - 1;
constexpr uint64_t kMaxBundleEntries = 4096;
constexpr int kMaxMsgpackDepth = 16;

using plugin::table_fits;

template <class T>
T read(const unsigned char* data, size_t offset) {
  return plugin::read_unaligned<T>(data, offset);
}

// EF_AMDGPU_MACH: the processor an AMD GPU code object is for (the AMDGPU
// ELF ABI, LLVM's AMDGPUUsage; llvm/BinaryFormat/ELF.h).
constexpr uint32_t kMachMask = 0x0ff;
struct Processor {
  std::string_view name;
  uint32_t mach;
};
constexpr Processor kProcessors[] = {
    {"gfx600", 0x20},  {"gfx601", 0x21},  {"gfx602", 0x3a},  {"gfx700", 0x22},  {"gfx701", 0x23},
    {"gfx702", 0x24},  {"gfx703", 0x25},  {"gfx704", 0x26},  {"gfx705", 0x3b},  {"gfx801", 0x28},
    {"gfx802", 0x29},  {"gfx803", 0x2a},  {"gfx805", 0x3c},  {"gfx810", 0x2b},  {"gfx900", 0x2c},
    {"gfx902", 0x2d},  {"gfx904", 0x2e},  {"gfx906", 0x2f},  {"gfx908", 0x30},  {"gfx909", 0x31},
    {"gfx90a", 0x3f},  {"gfx90c", 0x32},  {"gfx940", 0x40},  {"gfx941", 0x4b},  {"gfx942", 0x4c},
    {"gfx950", 0x4f},  {"gfx1010", 0x33}, {"gfx1011", 0x34}, {"gfx1012", 0x35}, {"gfx1013", 0x42},
    {"gfx1030", 0x36}, {"gfx1031", 0x37}, {"gfx1032", 0x38}, {"gfx1033", 0x39}, {"gfx1034", 0x3e},
    {"gfx1035", 0x3d}, {"gfx1036", 0x45}, {"gfx1100", 0x41}, {"gfx1101", 0x46}, {"gfx1102", 0x47},
    {"gfx1103", 0x44}, {"gfx1150", 0x43}, {"gfx1151", 0x4a}, {"gfx1152", 0x55}, {"gfx1153", 0x58},
    {"gfx1200", 0x48}, {"gfx1201", 0x4e},
};

// The ELF OS ABI of an HSA code object and its versions (EI_ABIVERSION).
constexpr uint8_t kOsAbiAmdgpuHsa = 64;
constexpr uint8_t kAbiVersionV3 = 1;
constexpr uint8_t kAbiVersionV4 = 2;
// Code object v3: one bit per feature, set when it is on.
constexpr uint32_t kXnackV3 = 0x100;
constexpr uint32_t kSrameccV3 = 0x200;
// Code object v4 on: two bits per feature.
constexpr uint32_t kXnackMaskV4 = 0x300;
constexpr uint32_t kSrameccMaskV4 = 0xc00;

// One target feature's setting in a code object, as a gcnArchName writes it.
enum class Feature { kUnspecified, kOn, kOff };

std::string_view feature_text(Feature feature) {
  switch (feature) {
    case Feature::kOn:
      return "+";
    case Feature::kOff:
      return "-";
    case Feature::kUnspecified:
      break;
  }
  return "";
}

// v4 on: 0 unsupported and 1 any (both written as nothing), 2 off, 3 on.
Feature feature_v4(uint32_t flags, uint32_t mask) {
  const uint32_t selection = (flags & mask) / (mask & ~(mask << 1));
  if (selection == 3) return Feature::kOn;
  if (selection == 2) return Feature::kOff;
  return Feature::kUnspecified;
}

// The target an ELF code object's header records, written as a gcnArchName
// would be ("gfx90a:sramecc+:xnack-"); |known| false when the header's
// processor or code object version is not one this reader knows.
std::string elf_target(const Elf64_Ehdr& header, bool& known) {
  const uint32_t mach = header.e_flags & kMachMask;
  std::string target;
  for (const Processor& processor : kProcessors) {
    if (processor.mach == mach) target = processor.name;
  }
  known = !target.empty() && header.e_ident[EI_OSABI] == kOsAbiAmdgpuHsa &&
          header.e_ident[EI_ABIVERSION] >= kAbiVersionV3;
  if (!known) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict) on "text" + std::string&&.
    std::string unknown = "machine ";
    unknown.append(std::to_string(mach)).append(" (code object ABI ");
    unknown.append(std::to_string(header.e_ident[EI_OSABI])).append(" version ");
    unknown.append(std::to_string(header.e_ident[EI_ABIVERSION])).append(")");
    return unknown;
  }
  Feature sramecc, xnack;
  if (header.e_ident[EI_ABIVERSION] >= kAbiVersionV4) {
    sramecc = feature_v4(header.e_flags, kSrameccMaskV4);
    xnack = feature_v4(header.e_flags, kXnackMaskV4);
  } else {
    sramecc = (header.e_flags & kSrameccV3) != 0 ? Feature::kOn : Feature::kUnspecified;
    xnack = (header.e_flags & kXnackV3) != 0 ? Feature::kOn : Feature::kUnspecified;
  }
  // The order of a target ID: features sorted by name.
  if (sramecc != Feature::kUnspecified) target.append(":sramecc").append(feature_text(sramecc));
  if (xnack != Feature::kUnspecified) target.append(":xnack").append(feature_text(xnack));
  return target;
}

// |arch| with its features sorted by name, as a target ID orders them.
std::string canonical_arch(const std::string& arch) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= arch.size()) {
    const size_t end = std::min(arch.find(':', start), arch.size());
    parts.push_back(arch.substr(start, end - start));
    start = end + 1;
  }
  std::sort(parts.begin() + 1, parts.end());
  std::string canonical = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) canonical.append(":").append(parts[i]);
  return canonical;
}

bool check_elf(const unsigned char* data, size_t size, std::string& why) {
  return plugin::check_device_elf(data, size, EM_AMDGPU, "an AMD GPU code object",
                                  "an AMD GPU code object (EM_AMDGPU, 224)", why);
}

struct BundleEntry {
  uint64_t offset, size;
  std::string_view triple;
};

// The entries of an offload bundle, each inside |size|. Layout: the magic,
// u64 count, then per entry u64 offset, u64 size, u64 triple size, triple.
bool bundle_entries(const unsigned char* data, size_t size, std::vector<BundleEntry>& out,
                    std::string& why) {
  if (size < kBundleMagicSize + 8) {
    why = "an offload bundle of " + std::to_string(size) + " bytes is shorter than its header";
    return false;
  }
  const uint64_t count = read<uint64_t>(data, kBundleMagicSize);
  if (count == 0 || count > kMaxBundleEntries) {
    why = "the offload bundle declares " + std::to_string(count) + " entries";
    return false;
  }
  size_t at = kBundleMagicSize + 8;
  for (uint64_t i = 0; i < count; ++i) {
    if (size - at < 24) {
      why = "entry " + std::to_string(i) + " of the offload bundle is cut off by the end of the " +
            std::to_string(size) + "-byte image";
      return false;
    }
    BundleEntry entry{read<uint64_t>(data, at), read<uint64_t>(data, at + 8), {}};
    const uint64_t triple_size = read<uint64_t>(data, at + 16);
    at += 24;
    if (triple_size > size - at) {
      why = "the target name of bundle entry " + std::to_string(i) + " ends past the image";
      return false;
    }
    entry.triple = std::string_view(reinterpret_cast<const char*>(data + at), triple_size);
    at += triple_size;
    if (entry.size != 0 && !table_fits(entry.offset, 1, entry.size, size)) {
      why = "bundle entry " + std::to_string(i) + " (" + std::string(entry.triple) + ", " +
            std::to_string(entry.size) + " bytes at " + std::to_string(entry.offset) +
            ") ends past the end of the " + std::to_string(size) + "-byte image";
      return false;
    }
    out.push_back(entry);
  }
  return true;
}

bool gpu_entry(const BundleEntry& entry) {
  return entry.size != 0 && entry.triple.find("amdgcn") != std::string_view::npos;
}

bool is_bundle(const unsigned char* data, size_t size) {
  return size >= kBundleMagicSize && std::memcmp(data, kBundleMagic, kBundleMagicSize) == 0;
}

// ---- a bounds-checked msgpack reader, enough for the AMDGPU metadata -------

struct Msgpack {
  const unsigned char* data;
  size_t size;
  size_t at = 0;
  bool failed = false;

  bool need(size_t bytes) {
    if (failed || size - at < bytes) failed = true;
    return !failed;
  }
  uint64_t be(size_t bytes) {
    if (!need(bytes)) return 0;
    uint64_t value = 0;
    for (size_t i = 0; i < bytes; ++i) value = value << 8 | data[at + i];
    at += bytes;
    return value;
  }
  uint8_t byte() { return static_cast<uint8_t>(be(1)); }

  // The next value's kind and length; |kind|: 'm' map, 'a' array, 's' string,
  // 'u' unsigned, 'i' signed, 'o' other (skipped by length).
  char header(uint64_t& length) {
    const uint8_t b = byte();
    length = 0;
    if (failed) return 'o';
    if (b <= 0x7f) return length = b, 'u';
    if (b >= 0xe0) return 'i';
    if ((b & 0xf0) == 0x80) return length = b & 0x0f, 'm';
    if ((b & 0xf0) == 0x90) return length = b & 0x0f, 'a';
    if ((b & 0xe0) == 0xa0) return length = b & 0x1f, 's';
    switch (b) {
      case 0xc0:
      case 0xc2:
      case 0xc3:
        return 'o';
      case 0xc4:
        return length = be(1), 'b';
      case 0xc5:
        return length = be(2), 'b';
      case 0xc6:
        return length = be(4), 'b';
      case 0xca:
        return length = 4, 'b';
      case 0xcb:
        return length = 8, 'b';
      case 0xcc:
        return length = be(1), 'u';
      case 0xcd:
        return length = be(2), 'u';
      case 0xce:
        return length = be(4), 'u';
      case 0xcf:
        return length = be(8), 'u';
      case 0xd0:
        return length = 1, 'b';
      case 0xd1:
        return length = 2, 'b';
      case 0xd2:
        return length = 4, 'b';
      case 0xd3:
        return length = 8, 'b';
      case 0xd9:
        return length = be(1), 's';
      case 0xda:
        return length = be(2), 's';
      case 0xdb:
        return length = be(4), 's';
      case 0xdc:
        return length = be(2), 'a';
      case 0xdd:
        return length = be(4), 'a';
      case 0xde:
        return length = be(2), 'm';
      case 0xdf:
        return length = be(4), 'm';
      case 0xd4:
        return length = 2, 'b';  // fixext 1: type byte + 1
      case 0xd5:
        return length = 3, 'b';
      case 0xd6:
        return length = 5, 'b';
      case 0xd7:
        return length = 9, 'b';
      case 0xd8:
        return length = 17, 'b';
      case 0xc7:
        return length = be(1) + 1, 'b';
      case 0xc8:
        return length = be(2) + 1, 'b';
      case 0xc9:
        return length = be(4) + 1, 'b';
      default:
        failed = true;  // 0xc1 is never used
        return 'o';
    }
  }
  void bytes(uint64_t length) {
    if (need(length)) at += length;
  }
  void skip(int depth = 0) {
    if (depth > kMaxMsgpackDepth) {
      failed = true;
      return;
    }
    uint64_t length = 0;
    const char kind = header(length);
    if (kind == 's' || kind == 'b') bytes(length);
    // Each element is at least one byte: a count above the bytes left is forged.
    if ((kind == 'm' || kind == 'a') && length > size - at) failed = true;
    for (uint64_t i = 0; !failed && kind == 'a' && i < length; ++i) skip(depth + 1);
    for (uint64_t i = 0; !failed && kind == 'm' && i < 2 * length; ++i) skip(depth + 1);
  }
  bool string(std::string& out) {
    uint64_t length = 0;
    if (header(length) != 's' || !need(length)) return failed = true, false;
    out.assign(reinterpret_cast<const char*>(data + at), length);
    at += length;
    return true;
  }
  uint64_t unsigned_value() {
    uint64_t value = 0;
    if (header(value) != 'u') failed = true;
    return value;
  }
  uint64_t container(char expected) {
    uint64_t length = 0;
    if (header(length) != expected || length > size - at) failed = true;
    return failed ? 0 : length;
  }
};

bool read_args(Msgpack& reader, KernelMetadata& kernel) {
  const uint64_t count = reader.container('a');
  for (uint64_t i = 0; !reader.failed && i < count; ++i) {
    const uint64_t fields = reader.container('m');
    uint64_t size = 0;
    std::string kind;
    for (uint64_t f = 0; !reader.failed && f < fields; ++f) {
      std::string key;
      if (!reader.string(key)) break;
      if (key == ".size") {
        size = reader.unsigned_value();
      } else if (key == ".value_kind") {
        reader.string(kind);
      } else {
        reader.skip();
      }
    }
    if (kind.rfind("hidden_", 0) != 0) kernel.arg_sizes.push_back(static_cast<uint32_t>(size));
  }
  return !reader.failed;
}

bool read_metadata(Msgpack& reader, std::vector<KernelMetadata>& out) {
  const uint64_t entries = reader.container('m');
  for (uint64_t e = 0; !reader.failed && e < entries; ++e) {
    std::string key;
    if (!reader.string(key)) break;
    if (key != "amdhsa.kernels") {
      reader.skip();
      continue;
    }
    const uint64_t kernels = reader.container('a');
    for (uint64_t k = 0; !reader.failed && k < kernels; ++k) {
      KernelMetadata kernel;
      const uint64_t fields = reader.container('m');
      for (uint64_t f = 0; !reader.failed && f < fields; ++f) {
        std::string field;
        if (!reader.string(field)) break;
        if (field == ".name") {
          reader.string(kernel.name);
        } else if (field == ".args") {
          read_args(reader, kernel);
        } else if (field == ".max_flat_workgroup_size") {
          kernel.max_flat_workgroup_size = static_cast<uint32_t>(reader.unsigned_value());
        } else if (field == ".group_segment_fixed_size") {
          kernel.group_segment_fixed_size = static_cast<uint32_t>(reader.unsigned_value());
        } else if (field == ".private_segment_fixed_size") {
          kernel.private_segment_fixed_size = static_cast<uint32_t>(reader.unsigned_value());
        } else if (field == ".sgpr_count") {
          kernel.sgpr_count = static_cast<int64_t>(reader.unsigned_value());
        } else if (field == ".vgpr_count") {
          kernel.vgpr_count = static_cast<int64_t>(reader.unsigned_value());
        } else if (field == ".agpr_count") {
          kernel.agpr_count = static_cast<int64_t>(reader.unsigned_value());
        } else if (field == ".sgpr_spill_count") {
          kernel.sgpr_spill_count = static_cast<int64_t>(reader.unsigned_value());
        } else if (field == ".vgpr_spill_count") {
          kernel.vgpr_spill_count = static_cast<int64_t>(reader.unsigned_value());
        } else if (field == ".wavefront_size") {
          kernel.wavefront_size = static_cast<uint32_t>(reader.unsigned_value());
        } else {
          reader.skip();
        }
      }
      out.push_back(std::move(kernel));
    }
  }
  return !reader.failed;
}

// The metadata note's bytes in a checked ELF; false when it has none.
bool find_metadata_note(const unsigned char* data, size_t size, const unsigned char*& desc,
                        size_t& desc_size) {
  const auto header = read<Elf64_Ehdr>(data, 0);
  for (uint16_t i = 0; i < header.e_shnum; ++i) {
    const auto section = read<Elf64_Shdr>(data, header.e_shoff + i * sizeof(Elf64_Shdr));
    // check_elf verified every section's extent; checked again so this
    // never depends on being called after it.
    if (section.sh_type != SHT_NOTE || section.sh_offset > size ||
        section.sh_size > size - section.sh_offset) {
      continue;
    }
    size_t at = section.sh_offset;
    const size_t end = section.sh_offset + section.sh_size;
    while (end - at >= 12) {
      const uint32_t name_size = read<uint32_t>(data, at);
      const uint32_t body_size = read<uint32_t>(data, at + 4);
      const uint32_t type = read<uint32_t>(data, at + 8);
      const uint64_t name_padded = (uint64_t{name_size} + 3) & ~uint64_t{3};
      const uint64_t body_padded = (uint64_t{body_size} + 3) & ~uint64_t{3};
      at += 12;
      if (name_padded > end - at || body_size > end - at - name_padded) break;
      const std::string_view name(reinterpret_cast<const char*>(data + at), name_size);
      if (type == kNoteAmdgpuMetadata && name.substr(0, 6) == "AMDGPU") {
        desc = data + at + name_padded;
        desc_size = body_size;
        return true;
      }
      at += name_padded + std::min<uint64_t>(body_padded, end - at - name_padded);
    }
  }
  return false;
}

}  // namespace

bool check_code_object(const void* data, size_t size, std::string& why) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (size >= SELFMAG && std::memcmp(bytes, ELFMAG, SELFMAG) == 0) {
    return check_elf(bytes, size, why);
  }
  if (is_bundle(bytes, size)) {
    std::vector<BundleEntry> entries;
    if (!bundle_entries(bytes, size, entries, why)) return false;
    bool any = false;
    for (const BundleEntry& entry : entries) {
      if (!gpu_entry(entry)) continue;
      any = true;
      std::string inner;
      if (!check_elf(bytes + entry.offset, entry.size, inner)) {
        why = "bundle entry " + std::string(entry.triple) + ": " + inner;
        return false;
      }
    }
    if (!any) why = "the offload bundle has no AMD GPU (amdgcn) entry";
    return any;
  }
  why = "neither an AMD GPU code object (ELF) nor a clang offload bundle";
  return false;
}

bool code_object_is_for(const void* data, size_t size, const std::string& arch, std::string& why) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (!check_code_object(data, size, why)) return false;
  const std::string wanted = canonical_arch(arch);
  const auto elf_is_for = [&](const unsigned char* elf, std::string& built_for) {
    bool known = false;
    built_for = elf_target(read<Elf64_Ehdr>(elf, 0), known);
    return known && built_for == wanted;
  };
  std::string built_for;
  if (!is_bundle(bytes, size)) {
    if (elf_is_for(bytes, built_for)) return true;
    why = "the code object is built for " + built_for + ", not " + wanted;
    return false;
  }
  std::vector<BundleEntry> entries;
  bundle_entries(bytes, size, entries, why);
  std::string targets;
  for (const BundleEntry& entry : entries) {
    if (!gpu_entry(entry)) continue;
    if (elf_is_for(bytes + entry.offset, built_for)) return true;
    targets += (targets.empty() ? "" : ", ") + built_for;
  }
  why = "the offload bundle's code objects are built for " + targets + ", not " + wanted;
  return false;
}

bool read_kernel_metadata(const void* data, size_t size, std::vector<KernelMetadata>& out,
                          std::string& why) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (!check_code_object(data, size, why)) return false;
  if (is_bundle(bytes, size)) {
    std::vector<BundleEntry> entries;
    bundle_entries(bytes, size, entries, why);
    for (const BundleEntry& entry : entries) {
      if (gpu_entry(entry)) return read_kernel_metadata(bytes + entry.offset, entry.size, out, why);
    }
  }
  const unsigned char* desc = nullptr;
  size_t desc_size = 0;
  if (!find_metadata_note(bytes, size, desc, desc_size)) {
    why = "the code object has no AMDGPU metadata note";
    return false;
  }
  Msgpack reader{desc, desc_size};
  if (!read_metadata(reader, out)) {
    why = "the code object's AMDGPU metadata is malformed (msgpack, at byte " +
          std::to_string(reader.at) + " of " + std::to_string(desc_size) + ")";
    out.clear();
    return false;
  }
  return true;
}

}  // namespace hal::hip
