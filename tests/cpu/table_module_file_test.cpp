// What the cpu plugin's module_load and kernel_get refuse: images that would
// kill the process inside dlopen (truncated objects), paths that are not
// regular files (a FIFO must not block, /dev/zero must not flood memory), and
// symbols that are not kernels of the module (libc's abort reached through
// the module's dependencies, exported data, imports).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "table_helpers.hpp"

using namespace hal::test;

namespace {

std::vector<char> read_file(const char* path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// A fresh directory for the test's files, removed at the end.
struct ScratchDirectory {
  std::string path;
  ScratchDirectory() {
    std::string pattern = "/tmp/hal-cpu-test-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~ScratchDirectory() {
    const std::string command = "rm -rf '" + path + "'";
    (void)std::system(command.c_str());
  }
};

}  // namespace

TEST_CASE("truncated shared objects are refused before dlopen", "[cpu][table][module]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  const std::vector<char> image = read_file(HAL_TEST_CPU_KERNELS_PATH);
  REQUIRE(image.size() > 4096);
  ScratchDirectory scratch;
  const std::string truncated_path = scratch.path + "/truncated.so";
  // Cuts inside the ELF header, the program headers, the code, and just
  // before the end (the section header table); seeded random cuts besides.
  std::vector<size_t> cuts = {0, 1, 16, 63, 64, 200, image.size() / 2, image.size() - 1};
  std::mt19937 random(20261201);
  for (int i = 0; i < 8; ++i) cuts.push_back(random() % image.size());
  for (size_t cut : cuts) {
    CAPTURE(cut);
    hal_module_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
    hal_impl_module_t* module = nullptr;
    if (cut > 0) {  // in memory (size 0 is the loader's INVALID_ARGUMENT)
      desc.data = image.data();
      desc.size = cut;
      CHECK(t.module_load(device, &desc, &module) == HAL_ERROR_INVALID_MODULE);
      CHECK(last_error().message.find("not a loadable") != std::string::npos);
    }
    {
      std::ofstream file(truncated_path, std::ios::binary | std::ios::trunc);
      file.write(image.data(), static_cast<std::streamsize>(cut));
    }
    desc.data = nullptr;
    desc.size = 0;
    desc.path = truncated_path.c_str();
    CHECK(t.module_load(device, &desc, &module) == HAL_ERROR_INVALID_MODULE);
    CHECK(last_error().message.find(truncated_path) != std::string::npos);
  }
  // The whole image still loads, from memory and from a file.
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
  desc.data = image.data();
  desc.size = image.size();
  hal_impl_module_t* module = nullptr;
  REQUIRE(t.module_load(device, &desc, &module) == HAL_SUCCESS);
  REQUIRE(t.module_unload(module) == HAL_SUCCESS);
}

TEST_CASE("module paths that are not regular files are refused at once", "[cpu][table][module]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  ScratchDirectory scratch;
  const std::string fifo = scratch.path + "/kernels.so";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  struct Case {
    std::string path;
    const char* reason;
  };
  for (const Case& c : {Case{fifo, "FIFO"}, Case{"/dev/zero", "character device"},
                        Case{scratch.path, "directory"}}) {
    CAPTURE(c.path);
    hal_module_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
    desc.path = c.path.c_str();
    hal_impl_module_t* module = nullptr;
    CHECK(t.module_load(plugin.device(0), &desc, &module) == HAL_ERROR_INVALID_MODULE);
    CHECK(last_error().message.find(c.reason) != std::string::npos);
    // The same for dialect source read from such a path.
    desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
    CHECK(t.module_load(plugin.device(0), &desc, &module) == HAL_ERROR_INVALID_MODULE);
  }
}

TEST_CASE("only functions the module defines are kernels", "[cpu][table][module]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
  desc.path = HAL_TEST_CPU_HOSTILE_PATH;
  hal_impl_module_t* module = nullptr;
  REQUIRE(t.module_load(plugin.device(0), &desc, &module) == HAL_SUCCESS);
  const hal_arg_type_t no_args[1] = {HAL_ARG_U32};
  for (const char* name : {
           "abort",                            // imported by the module, defined by libc
           "malloc",                           // not even imported: a dependency's
           "exported_data",                    // the module's data
           "hal_kernel_signature_real_kernel"  // the module's data too
       }) {
    CAPTURE(name);
    hal_kernel_desc_t kernel_desc{};
    kernel_desc.struct_size = sizeof(kernel_desc);
    kernel_desc.name = name;
    kernel_desc.arg_types = no_args;
    kernel_desc.arg_count = 0;
    hal_impl_kernel_t* kernel = nullptr;
    CHECK(t.kernel_get(module, &kernel_desc, &kernel, nullptr) == HAL_ERROR_NOT_FOUND);
    CHECK(last_error().message.find(name) != std::string::npos);
  }
  hal_kernel_desc_t kernel_desc{};
  kernel_desc.struct_size = sizeof(kernel_desc);
  kernel_desc.name = "real_kernel";
  hal_impl_kernel_t* kernel = nullptr;
  CHECK(t.kernel_get(module, &kernel_desc, &kernel, nullptr) == HAL_SUCCESS);
  REQUIRE(t.module_unload(module) == HAL_SUCCESS);
}
