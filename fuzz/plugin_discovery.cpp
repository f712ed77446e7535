// Fuzz target (b): plugin discovery over corrupt plugin files and directories.
//
// Each input builds a fresh plugin directory and runs hal_init over it:
// - a layout byte chooses which entries exist: a copy of a working plugin
//   with its ELF header and section header table mutated, an intact copy, a
//   text file, an empty file, a directory, a FIFO and a dangling symlink, all named
//   like plugins, plus a file that is not named like one;
// - (offset, value) pairs mutate the copy, but only where the dynamic
//   loader checks and refuses cleanly or never looks: e_ident, e_type,
//   e_machine, e_version, e_flags, e_ehsize, e_phentsize, e_sh* and the
//   section header table. Program headers, segments and code stay intact,
//   so a mutated file either loads as the original or fails in dlopen: the
//   target fuzzes HAL's handling of those outcomes, not ld.so;
// - the rest is the search list (extra, maybe bogus, entries inside the
//   directory) or, in explicit mode, the HAL_PLUGINS-style list.
// Every outcome must be a report with a reason, never a crash; hal_init
// fails only in explicit mode.
#include "fuzz_input.hpp"

#include <hal.h>

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using hal_fuzz::FuzzInput;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> template_plugin;
fs::path directory;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "plugin_discovery: invariant broken: %s: %s\n", what,
               hal_error_last_message());
  std::abort();
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Whether byte |offset| of the ELF header is one the mutations may change.
bool mutable_header_byte(size_t offset) {
  const auto in = [offset](size_t begin, size_t size) {
    return offset >= begin && offset < begin + size;
  };
  return in(0, EI_NIDENT) || in(offsetof(Elf64_Ehdr, e_type), 2 + 2 + 4) ||
         in(offsetof(Elf64_Ehdr, e_shoff), 8) || in(offsetof(Elf64_Ehdr, e_flags), 4 + 2) ||
         in(offsetof(Elf64_Ehdr, e_phentsize), 2) || in(offsetof(Elf64_Ehdr, e_shentsize), 6);
}

std::vector<uint8_t> mutated_plugin(FuzzInput& in) {
  std::vector<uint8_t> bytes = template_plugin;
  Elf64_Ehdr header;
  std::memcpy(&header, bytes.data(), sizeof header);
  const size_t table_begin = header.e_shoff;
  const size_t table_size = static_cast<size_t>(header.e_shnum) * header.e_shentsize;
  const uint32_t mutations = in.below(8);
  for (uint32_t i = 0; i < mutations; ++i) {
    const bool in_table = in.below(2) == 0 && table_begin + table_size <= bytes.size();
    const size_t offset = in_table ? table_begin + in.below(static_cast<uint32_t>(table_size))
                                   : in.below(sizeof(Elf64_Ehdr));
    const uint8_t value = in.byte();
    if (in_table || mutable_header_byte(offset)) bytes[offset] = value;
  }
  return bytes;
}

// A path component from the input, kept inside the directory.
std::string safe_name(FuzzInput& in) {
  std::string name = in.text(24);
  for (char& c : name) {
    if (c == '/' || c == ':' || c == ',' || c == '\0') c = '_';
  }
  if (name == "." || name == "..") name = "dots";
  return name;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::ifstream in(HAL_FUZZ_TEMPLATE_PLUGIN_PATH, std::ios::binary);
  template_plugin.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (template_plugin.size() < sizeof(Elf64_Ehdr)) broken("cannot read the template plugin");
  char name[] = "/tmp/hal_fuzz_plugins_XXXXXX";
  if (mkdtemp(name) == nullptr) broken("mkdtemp");
  directory = name;
  std::atexit([] {
    std::error_code ignored;
    fs::remove_all(directory, ignored);
  });
  unsetenv("HAL_PLUGINS");
  unsetenv("HAL_PLUGIN_PATH");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(directory, ignored))
    fs::remove_all(entry, ignored);

  const uint8_t layout = in.byte();
  // A new file each time: unlinked above, so ld.so never reuses a mapping.
  if (layout & 1) write_file(directory / "hal_plugin_fuzzed.so", mutated_plugin(in));
  if (layout & 2) write_file(directory / "hal_plugin_intact.so", template_plugin);
  if (layout & 4) write_file(directory / "hal_plugin_text.so", {'n', 'o', 't', ' ', 'E', 'L', 'F'});
  if (layout & 8) write_file(directory / "hal_plugin_empty.so", {});
  if (layout & 16) {
    // Not regular files: refused before any open, so hal_init never blocks.
    fs::create_directory(directory / "hal_plugin_directory.so", ignored);
    mkfifo((directory / "hal_plugin_fifo.so").c_str(), 0600);
  }
  if (layout & 32)
    fs::create_symlink(directory / "missing", directory / "hal_plugin_dangling.so", ignored);
  if (layout & 64) write_file(directory / "not_a_plugin_name.so", template_plugin);

  const bool explicit_list = (layout & 128) != 0;
  std::string list = directory.string();
  const uint32_t extra = in.below(4);
  for (uint32_t i = 0; i < extra; ++i) {
    list += explicit_list ? "," : ":";
    const std::string name = safe_name(in);
    list += explicit_list && in.below(2) == 0 ? name : (directory / name).string();
  }
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  options.skip_default_search = 1;
  if (explicit_list) {
    // The directory itself is not a plugin: an explicit list of it fails.
    options.plugins = list.c_str();
  } else {
    options.plugin_path = list.c_str();
  }
  const hal_result_t result = hal_init(&options);
  if (result != HAL_SUCCESS) {
    if (!explicit_list) broken("hal_init failed over a search path");
    if (result != HAL_ERROR_PLUGIN_LOAD) broken("hal_init failed with an unexpected result");
    return 0;
  }
  uint32_t reports = 0;
  if (hal_plugin_report_count(&reports) != HAL_SUCCESS) broken("hal_plugin_report_count");
  for (uint32_t i = 0; i < reports; ++i) {
    hal_plugin_report_t report{};
    report.struct_size = sizeof(report);
    if (hal_plugin_report_get(i, &report) != HAL_SUCCESS) broken("hal_plugin_report_get");
    const bool failed = report.outcome != HAL_PLUGIN_LOADED;
    if (failed && (report.reason == nullptr || report.reason[0] == '\0'))
      broken("a failed candidate without a reason");
  }
  uint32_t devices = 0;
  if (hal_device_count(&devices) != HAL_SUCCESS) broken("hal_device_count");
  if (hal_shutdown() != HAL_SUCCESS) broken("hal_shutdown");
  return 0;
}
