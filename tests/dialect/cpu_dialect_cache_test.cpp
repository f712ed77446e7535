// The cpu plugin's kernel cache and compiler against a hostile machine: a
// planted, truncated or linked cache entry is rebuilt and never run; a cache
// directory others may write, or that is a symbolic link or someone else's,
// is not used; without HOME there is no shared fallback; a hanging or chatty
// compiler is stopped; a full disk is reported as one; no predictable
// temporary name is followed.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hal.h"
#include "cache_test_support.hpp"
#include "hal_util/sha256.hpp"

namespace fs = std::filesystem;

namespace {

constexpr const char* kSource = R"(
kernel void fill(global int* out, int value, int n) {
  int i = global_id(0);
  if (i < n) out[i] = value + i;
}
)";

// Sets or unsets an environment variable for the scope.
class EnvOverride {
 public:
  EnvOverride(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~EnvOverride() {
    if (saved_) {
      setenv(name_.c_str(), saved_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  EnvOverride(const EnvOverride&) = delete;
  EnvOverride& operator=(const EnvOverride&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

struct Scratch {
  std::string path;
  Scratch() {
    std::string pattern = "/tmp/hal-dialect-test-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~Scratch() {
    const std::string command = "chmod -R u+rwx '" + path + "' 2>/dev/null; rm -rf '" + path + "'";
    (void)std::system(command.c_str());
  }
};

std::string slurp(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes, mode_t mode = 0600) {
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << bytes;
    REQUIRE(file.good());
  }
  REQUIRE(chmod(path.c_str(), mode) == 0);
}

std::set<std::string> listing(const std::string& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

// The one object entry (cpu-<key>.so) of the cache |directory| (in its
// objects/ directory, SPEC.md §8).
std::string only_entry(const std::string& directory) {
  std::string found;
  for (const std::string& name : listing(directory + "/objects")) {
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) {
      REQUIRE(found.empty());
      found = name;
    }
  }
  REQUIRE(!found.empty());
  return found;
}

std::string detail_message() {
  hal_error_detail_t detail{};
  detail.struct_size = sizeof(detail);
  REQUIRE(hal_error_get_detail(&detail) == HAL_SUCCESS);
  return detail.message;
}

class Session {
 public:
  Session() {
    setenv("HAL_CPU_DEVICES", "1", 0);
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    REQUIRE(hal_device_get(0, &device_) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(device_, 0, &stream_) == HAL_SUCCESS);
  }
  ~Session() {
    hal_stream_destroy(stream_);
    hal_shutdown();
  }
  hal_result_t load(const std::string& source, hal_module_t* out) {
    hal_module_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
    desc.data = source.c_str();
    desc.size = source.size();
    return hal_module_load(device_, &desc, out);
  }
  // Loads kSource and runs fill(out, 5, 64): the module works.
  void load_and_run() {
    hal_module_t module = nullptr;
    REQUIRE(load(kSource, &module) == HAL_SUCCESS);
    hal_kernel_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.name = "fill";
    hal_kernel_t fill = nullptr;
    REQUIRE(hal_kernel_get(module, &desc, &fill) == HAL_SUCCESS);
    void* out = nullptr;
    REQUIRE(hal_mem_alloc(device_, HAL_MEMORY_DEVICE, 64 * sizeof(int), 0, &out) == HAL_SUCCESS);
    const int value = 5, n = 64;
    const hal_kernel_arg_t args[] = {{&out, sizeof(out)}, {&value, 4}, {&n, 4}};
    hal_launch_config_t config{};
    config.struct_size = sizeof(config);
    config.grid[0] = config.grid[1] = config.grid[2] = 1;
    config.block[0] = 64, config.block[1] = config.block[2] = 1;
    REQUIRE(hal_launch_kernel(fill, &config, 3, args, stream_) == HAL_SUCCESS);
    std::vector<int> host(64);
    REQUIRE(hal_memcpy_async(host.data(), out, 64 * sizeof(int), stream_) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream_) == HAL_SUCCESS);
    for (int i = 0; i < n; ++i) REQUIRE(host[i] == 5 + i);
    REQUIRE(hal_mem_free(out) == HAL_SUCCESS);
    REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
  }

 private:
  hal_device_t device_ = nullptr;
  hal_stream_t stream_ = nullptr;
};

// The record a valid entry of |object| at |entry| has (SPEC.md §8: keyed
// with the cache's secret key, which lies beside objects/).
std::string record_for(const std::string& entry, const std::string& object,
                       const std::string& secret = {}) {
  return cache_test::record_for(entry, object, secret);
}

std::string record_name(const std::string& entry) {
  return entry.substr(0, entry.size() - 3) + ".record";
}

}  // namespace

TEST_CASE("cpu dialect cache: planted, linked and truncated entries are rebuilt, never run",
          "[dialect][cpu][cache]") {
  Scratch scratch;
  const std::string cache = scratch.path + "/cache";
  const std::string marker = scratch.path + "/planted-code-ran";
  EnvOverride cache_dir("HAL_CACHE_DIR", cache.c_str());
  EnvOverride marker_env("HAL_TEST_MARKER", marker.c_str());
  const std::string hostile = slurp(HAL_TEST_HOSTILE_PATH);
  REQUIRE(hostile.size() > 1000);
  Session session;
  session.load_and_run();
  const std::string entry = cache + "/objects/" + only_entry(cache);
  const std::string record = record_name(entry);
  const std::string good = slurp(entry);
  CHECK(slurp(record) == record_for(entry, good));

  // Another object at the entry's name: the record's HMAC is not its own.
  write_file(entry, hostile);
  session.load_and_run();
  CHECK(access(marker.c_str(), F_OK) != 0);
  CHECK(slurp(entry) != hostile);
  CHECK(slurp(record) == record_for(entry, slurp(entry)));

  // Another object with a record that would pass an unkeyed check: its
  // SHA-256, or an HMAC under another cache's key (a copied cache).
  for (const std::string& planted_record :
       {"hal-cpu-cache 2 hmac-sha256 " +
            hal::util::Sha256::hex(hal::util::Sha256::of(hostile.data(), hostile.size())) +
            " size " + std::to_string(hostile.size()) + "\n",
        record_for(entry, hostile, std::string(32, 's'))}) {
    write_file(entry, hostile);
    write_file(record, planted_record);
    session.load_and_run();
    CHECK(access(marker.c_str(), F_OK) != 0);
    CHECK(slurp(entry) != hostile);
  }

  // A symbolic link at the entry's name, to an object with a matching record.
  const std::string elsewhere = scratch.path + "/elsewhere.so";
  write_file(elsewhere, hostile);
  REQUIRE(unlink(entry.c_str()) == 0);
  REQUIRE(symlink(elsewhere.c_str(), entry.c_str()) == 0);
  write_file(record, record_for(entry, hostile));
  session.load_and_run();
  CHECK(access(marker.c_str(), F_OK) != 0);
  struct stat status {};
  REQUIRE(lstat(entry.c_str(), &status) == 0);
  CHECK(S_ISREG(status.st_mode));
  CHECK(slurp(elsewhere) == hostile);

  // A truncated entry (a crash or a full disk while it was copied by hand).
  const std::string rebuilt = slurp(entry);
  write_file(entry, rebuilt.substr(0, rebuilt.size() / 2));
  session.load_and_run();
  CHECK(slurp(entry).size() == rebuilt.size());
  // The entry is private.
  REQUIRE(stat(cache.c_str(), &status) == 0);
  CHECK((status.st_mode & 0777) == 0700);
  REQUIRE(stat((cache + "/objects").c_str(), &status) == 0);
  CHECK((status.st_mode & 0777) == 0700);
  REQUIRE(stat(entry.c_str(), &status) == 0);
  CHECK((status.st_mode & 0077) == 0);
}

TEST_CASE("cpu dialect cache: a directory others control is not used", "[dialect][cpu][cache]") {
  Scratch scratch;
  const std::string marker = scratch.path + "/planted-code-ran";
  EnvOverride marker_env("HAL_TEST_MARKER", marker.c_str());
  const std::string hostile = slurp(HAL_TEST_HOSTILE_PATH);
  // The entry's name, from a compile into a good cache.
  const std::string good = scratch.path + "/good";
  std::string name;
  {
    EnvOverride cache_dir("HAL_CACHE_DIR", good.c_str());
    Session session;
    session.load_and_run();
    name = only_entry(good);
  }
  // A complete, consistent planted entry (a key, the object and its record
  // under that key) in a directory the plugin must not trust.
  auto plant = [&](const std::string& directory, mode_t mode) {
    REQUIRE(mkdir(directory.c_str(), 0700) == 0);
    REQUIRE(mkdir((directory + "/objects").c_str(), 0700) == 0);
    const std::string secret(32, 'p');
    write_file(directory + "/key", secret);
    const std::string entry = directory + "/objects/" + name;
    write_file(entry, hostile);
    write_file(record_name(entry), record_for(entry, hostile, secret));
    REQUIRE(chmod(directory.c_str(), mode) == 0);
  };
  std::vector<std::string> hostile_directories;
  const std::string shared = scratch.path + "/shared";
  plant(shared, 0777);
  hostile_directories.push_back(shared);
  const std::string group = scratch.path + "/group";
  plant(group, 0770);
  hostile_directories.push_back(group);
  const std::string readable = scratch.path + "/readable";  // the umask's 0755
  plant(readable, 0755);
  hostile_directories.push_back(readable);
  const std::string target = scratch.path + "/target";
  plant(target, 0700);
  const std::string link = scratch.path + "/link";
  REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
  hostile_directories.push_back(link);
  if (geteuid() == 0) {  // CI runs as root: a directory of another user
    const std::string foreign = scratch.path + "/foreign";
    plant(foreign, 0700);
    REQUIRE(chown(foreign.c_str(), 65534, 65534) == 0);
    hostile_directories.push_back(foreign);
  }
  for (const std::string& directory : hostile_directories) {
    CAPTURE(directory);
    const std::set<std::string> before = listing(directory);
    EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
    Session session;
    session.load_and_run();  // compiled without the cache
    CHECK(access(marker.c_str(), F_OK) != 0);
    CHECK(listing(directory) == before);
  }
  // The same planted entry in a private directory would have been used: the
  // checks above are what kept it out, not a bad plant.
  {
    EnvOverride cache_dir("HAL_CACHE_DIR", target.c_str());
    Session session;
    hal_module_t module = nullptr;
    (void)session.load(kSource, &module);
    CHECK(access(marker.c_str(), F_OK) == 0);
    if (module != nullptr) hal_module_unload(module);
  }
}

TEST_CASE("cpu dialect cache: without HOME there is no shared fallback", "[dialect][cpu][cache]") {
  Scratch scratch;
  const bool shared_existed = access("/tmp/hal-cache", F_OK) == 0;
  EnvOverride no_cache("HAL_CACHE_DIR", nullptr);
  EnvOverride no_xdg("XDG_CACHE_HOME", nullptr);
  EnvOverride no_home("HOME", nullptr);
  EnvOverride tmpdir("TMPDIR", scratch.path.c_str());
  Session session;
  session.load_and_run();
  CHECK((access("/tmp/hal-cache", F_OK) == 0) == shared_existed);
  // The private compile directory is gone again.
  CHECK(listing(scratch.path).empty());
}

TEST_CASE("cpu dialect cache: the compiler's version probe follows no planted link",
          "[dialect][cpu][cache]") {
  Scratch scratch;
  EnvOverride cache_dir("HAL_CACHE_DIR", (scratch.path + "/cache").c_str());
  // The name the probe once wrote, planted as a link to a file to protect.
  const std::string victim = scratch.path + "/victim";
  write_file(victim, "precious");
  const std::string planted = "/tmp/hal-cxx-version-" + std::to_string(getpid()) + ".txt";
  unlink(planted.c_str());
  REQUIRE(symlink(victim.c_str(), planted.c_str()) == 0);
  {
    Session session;
    session.load_and_run();
  }
  CHECK(slurp(victim) == "precious");
  unlink(planted.c_str());
}

TEST_CASE("cpu dialect compiler: a hanging compiler is killed at HAL_CXX_TIMEOUT_S",
          "[dialect][cpu][compiler]") {
  Scratch scratch;
  EnvOverride cache_dir("HAL_CACHE_DIR", (scratch.path + "/cache").c_str());
  Session session;
  hal_module_t module = nullptr;
  // Hangs when asked its version; hangs compiling, with a child of its own
  // holding the output pipe.
  const std::string hang_version = scratch.path + "/hang-version";
  write_file(hang_version, "#!/bin/sh\nexec sleep 120\n", 0755);
  const std::string hang_compile = scratch.path + "/hang-compile";
  write_file(
      hang_compile,
      "#!/bin/sh\ncase \"$1\" in --version) echo hanging-c++ 1.0;; *) sleep 120 & sleep 120;; "
      "esac\n",
      0755);
  for (const std::string& compiler : {hang_version, hang_compile}) {
    CAPTURE(compiler);
    EnvOverride cxx("HAL_CXX", compiler.c_str());
    EnvOverride timeout("HAL_CXX_TIMEOUT_S", "1");
    REQUIRE(session.load(kSource, &module) == HAL_ERROR_TIMEOUT);
    const std::string message = detail_message();
    CHECK(message.find("HAL_CXX_TIMEOUT_S = 1 seconds") != std::string::npos);
    CHECK(message.find(compiler) != std::string::npos);
  }
  {
    EnvOverride bad("HAL_CXX_TIMEOUT_S", "soon");
    REQUIRE(session.load(kSource, &module) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(detail_message().find("HAL_CXX_TIMEOUT_S is 'soon'") != std::string::npos);
  }
  session.load_and_run();  // the real compiler and the default limit again
}

TEST_CASE("cpu dialect compiler: a chatty compiler is stopped at the output cap",
          "[dialect][cpu][compiler]") {
  Scratch scratch;
  EnvOverride cache_dir("HAL_CACHE_DIR", (scratch.path + "/cache").c_str());
  Session session;
  hal_module_t module = nullptr;
  const std::string chatty_version = scratch.path + "/chatty-version";
  write_file(chatty_version, "#!/bin/sh\nexec yes chatty\n", 0755);
  const std::string chatty_compile = scratch.path + "/chatty-compile";
  write_file(chatty_compile,
             "#!/bin/sh\ncase \"$1\" in --version) echo chatty-c++ 1.0;; *) yes 'error: chatty';; "
             "esac\n",
             0755);
  for (const std::string& compiler : {chatty_version, chatty_compile}) {
    CAPTURE(compiler);
    EnvOverride cxx("HAL_CXX", compiler.c_str());
    REQUIRE(session.load(kSource, &module) == HAL_ERROR_INVALID_MODULE);
    const std::string message = detail_message();
    CHECK(message.find("wrote more than 1048576 bytes") != std::string::npos);
    CHECK(message.find("chatty") != std::string::npos);  // the first of it is kept
    CHECK(message.size() < 16384);
  }
  session.load_and_run();
}

TEST_CASE("cpu dialect compiler: a full disk is reported as one", "[dialect][cpu][compiler]") {
  Scratch scratch;
  EnvOverride cache_dir("HAL_CACHE_DIR", (scratch.path + "/cache").c_str());
  Session session;
  // RLIMIT_FSIZE stands in for a full disk without a mount: the first write
  // past it fails (EFBIG; SIGXFSZ ignored as a careful service would).
  struct sigaction ignore {
  }, saved_action{};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(sigaction(SIGXFSZ, &ignore, &saved_action) == 0);
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  rlimit tiny = saved;
  tiny.rlim_cur = 64;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &tiny) == 0);
  hal_module_t module = nullptr;
  const hal_result_t result = session.load(kSource, &module);
  const std::string message = detail_message();
  REQUIRE(setrlimit(RLIMIT_FSIZE, &saved) == 0);
  REQUIRE(sigaction(SIGXFSZ, &saved_action, nullptr) == 0);
  CHECK(result == HAL_ERROR_OUT_OF_MEMORY);
  CHECK(message.find("disk holding") != std::string::npos);
  CHECK(message.find("dialect source is invalid") == std::string::npos);
  session.load_and_run();
}
