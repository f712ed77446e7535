// Where the cuda plugin looks for NVRTC, cuBLASLt and NCCL
// (plugins/cuda/library_search.hpp): a pin in the environment alone; else
// the sonames, then the toolkit's directories, then the Python wheels'
// site-packages/nvidia/*/lib, where the file is.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "library_search.hpp"

namespace {

namespace fs = std::filesystem;

void touch(const fs::path& file) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << "not a library";
}

long index_of(const std::vector<std::string>& list, const std::string& item) {
  const auto it = std::find(list.begin(), list.end(), item);
  return it == list.end() ? -1 : static_cast<long>(it - list.begin());
}

}  // namespace

TEST_CASE("vendor libraries are searched in the toolkit and in Python wheels", "[search]") {
  const fs::path root =
      fs::temp_directory_path() / ("hal-library-search-" + std::to_string(getpid()));
  fs::remove_all(root);
  const fs::path toolkit_file = root / "toolkit/lib64/libnvrtc.so.13";
  const fs::path wheel_file =
      root / "venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13";
  const fs::path other_wheel = root / "venv/lib/python3.12/site-packages/nvidia/nccl/lib/x.so";
  touch(toolkit_file);
  touch(wheel_file);
  touch(other_wheel);
  setenv("CUDA_HOME", (root / "toolkit").c_str(), 1);
  setenv("VIRTUAL_ENV", (root / "venv").c_str(), 1);
  unsetenv("HAL_TEST_LIBRARY_PIN");

  const std::vector<std::string> found =
      hal::cuda::library_candidates("HAL_TEST_LIBRARY_PIN", {"libnvrtc.so.13", "libnvrtc.so.12"});
  // The sonames first (the dynamic linker's own search), in order...
  REQUIRE(found.size() >= 4);
  CHECK(found[0] == "libnvrtc.so.13");
  CHECK(found[1] == "libnvrtc.so.12");
  // ...then the files that exist: the toolkit's before the wheel's; a soname
  // that is not there, and a file of another name, are not candidates.
  const long toolkit = index_of(found, toolkit_file.string());
  const long wheel = index_of(found, wheel_file.string());
  CHECK(toolkit >= 2);
  CHECK(wheel > toolkit);
  CHECK(index_of(found, (root / "toolkit/lib64/libnvrtc.so.12").string()) == -1);
  CHECK(index_of(found, other_wheel.string()) == -1);
  const std::string searched = hal::cuda::searched_places("libnvrtc.so.13 not found: x");
  CHECK(searched.find("libnvrtc.so.13 not found: x; also looked in " +
                      (root / "toolkit/lib64").string()) == 0);

  // A pin is the only candidate: the user chose it.
  setenv("HAL_TEST_LIBRARY_PIN", "/opt/pinned/libnvrtc.so.13", 1);
  CHECK(hal::cuda::library_candidates("HAL_TEST_LIBRARY_PIN", {"libnvrtc.so.13"}) ==
        std::vector<std::string>{"/opt/pinned/libnvrtc.so.13"});
  unsetenv("HAL_TEST_LIBRARY_PIN");
  unsetenv("CUDA_HOME");
  unsetenv("VIRTUAL_ENV");
  fs::remove_all(root);
}
