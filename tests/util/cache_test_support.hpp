// What the kernel cache tests share (tests/util, tests/cuda, tests/hip): a
// scratch directory, a scoped environment variable, file helpers, a log that
// collects the cache's lines, and seeded damage to an entry, written from the
// record format SPEC.md §8 gives (not from the cache's code).
#ifndef HAL_TESTS_UTIL_CACHE_TEST_SUPPORT_HPP_
#define HAL_TESTS_UTIL_CACHE_TEST_SUPPORT_HPP_

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "hal_plugin.h"
#include "hal_util/hmac.hpp"
#include "hal_util/sha256.hpp"

namespace cache_test {

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

// A fresh directory under /tmp, removed with everything in it.
struct Scratch {
  std::string path;
  Scratch() {
    std::string pattern = "/tmp/hal-cache-test-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

inline std::string slurp(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const std::string& bytes, mode_t mode = 0600) {
  unlink(path.c_str());
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << bytes;
    REQUIRE(file.good());
  }
  REQUIRE(chmod(path.c_str(), mode) == 0);
}

inline std::set<std::string> listing(const std::string& directory) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

// The one file in |directory| whose name ends in |suffix|.
inline std::string only_entry(const std::string& directory, const std::string& suffix) {
  std::string found;
  for (const std::string& name : listing(directory)) {
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      REQUIRE(found.empty());
      found = name;
    }
  }
  REQUIRE(!found.empty());
  return found;
}

// Where a cache directory keeps its entries (SPEC.md §8): "objects/".
inline std::string objects_dir(const std::string& cache_dir) {
  return cache_dir + "/objects";
}

// "<prefix>-<key>.record" beside "<prefix>-<key><suffix>".
inline std::string record_path(const std::string& object_path, const std::string& suffix) {
  return object_path.substr(0, object_path.size() - suffix.size()) + ".record";
}

// The cache's secret key: "key" beside "objects/".
inline std::string secret_of(const std::string& object_path) {
  const std::filesystem::path objects = std::filesystem::path(object_path).parent_path();
  return slurp((objects.parent_path() / "key").string());
}

// The record SPEC.md §8 gives a valid entry of |object| stored at
// |object_path| ("<dir>/objects/<prefix>-<32 hex digits><suffix>"): the tag,
// the HMAC-SHA-256 under the cache's key of the tag, the entry's key and the
// object (the first two with their terminating NUL), and the size.
inline std::string record_for(const std::string& object_path, const std::string& object,
                              std::string secret = {}) {
  const std::string name = std::filesystem::path(object_path).filename().string();
  const std::string prefix = name.substr(0, name.find('-'));
  const std::string key = name.substr(prefix.size() + 1, 32);
  if (secret.empty()) secret = secret_of(object_path);
  const std::string tag = "hal-" + prefix + "-cache 2";
  const auto with_nul = [](const std::string& text) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.c_str()),
                                    text.size() + 1);
  };
  const auto mac = hal::util::hmac_sha256(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(secret.data()), secret.size()),
      {with_nul(tag), with_nul(key),
       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(object.data()), object.size())});
  return tag + " hmac-sha256 " + hal::util::Sha256::hex(mac) + " size " +
         std::to_string(object.size()) + "\n";
}

inline ino_t inode_of(const std::string& path) {
  struct stat status {};
  REQUIRE(stat(path.c_str(), &status) == 0);
  return status.st_ino;
}

// The cache's log lines, as a plugin's ErrorReporter would receive them.
struct CollectedLog {
  std::mutex mutex;
  std::vector<std::string> lines;
  auto sink() {
    return [this](hal_log_level_t, const std::string& line) {
      std::lock_guard lock(mutex);
      lines.push_back(line);
    };
  }
  bool mentions(const std::string& text) {
    std::lock_guard lock(mutex);
    for (const std::string& line : lines) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
  void clear() {
    std::lock_guard lock(mutex);
    lines.clear();
  }
};

// What this process writes to stderr (where HAL_LOG=1 sends the log lines)
// while it lives: for tests that see the cache through the public API.
class StderrCapture {
 public:
  explicit StderrCapture(const std::string& file) : file_(file) {
    std::fflush(stderr);
    saved_ = dup(2);
    REQUIRE(saved_ >= 0);
    const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(dup2(fd, 2) == 2);
    close(fd);
  }
  ~StderrCapture() { restore(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  // Ends the capture; what was written.
  std::string text() {
    restore();
    return slurp(file_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  std::string file_;
  int saved_ = -1;
};

// One seeded kind of damage to an entry (object |object_path| and its record
// |record|): what a crash, a full disk, a bad copy or a same-named plant
// leaves. Returns a phrase for CAPTURE.
inline std::string damage_entry(std::mt19937& random, const std::string& object_path,
                                const std::string& record) {
  const std::string object = slurp(object_path);
  REQUIRE(!object.empty());
  std::uniform_int_distribution<size_t> anywhere(0, object.size() - 1);
  switch (std::uniform_int_distribution<int>(0, 6)(random)) {
    case 0: {  // one flipped bit
      std::string bytes = object;
      const size_t at = anywhere(random);
      bytes[at] = static_cast<char>(bytes[at] ^ (1 << (random() % 8)));
      write_file(object_path, bytes);
      return "a bit flipped at " + std::to_string(at);
    }
    case 1: {  // truncated
      const size_t keep = anywhere(random);
      write_file(object_path, object.substr(0, keep));
      return "truncated to " + std::to_string(keep);
    }
    case 2: {  // random bytes appended
      std::string bytes = object;
      const size_t extra = 1 + random() % 64;
      for (size_t i = 0; i < extra; ++i) bytes.push_back(static_cast<char>(random()));
      write_file(object_path, bytes);
      return std::to_string(extra) + " bytes appended";
    }
    case 3: {  // the record truncated
      const std::string text = slurp(record);
      const size_t keep = random() % text.size();
      write_file(record, text.substr(0, keep));
      return "the record truncated to " + std::to_string(keep);
    }
    case 4: {  // the record of another object
      write_file(record, record_for(object_path, object + " "));
      return "a record of another object";
    }
    case 5: {  // the object removed, the record left
      REQUIRE(unlink(object_path.c_str()) == 0);
      return "the object removed";
    }
    default: {  // random bytes with a matching record: passes the hash, not the image check
      std::string bytes(16 + random() % 256, '\0');
      for (char& byte : bytes) byte = static_cast<char>(random());
      write_file(object_path, bytes);
      write_file(record, record_for(object_path, bytes));
      return "random bytes with a matching record";
    }
  }
}

}  // namespace cache_test

#endif  // HAL_TESTS_UTIL_CACHE_TEST_SUPPORT_HPP_
