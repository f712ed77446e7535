#include "hal_util/kernel_cache.hpp"

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <sstream>

#include "hal_util/env.hpp"
#include "hal_util/sha256.hpp"

namespace hal::util {
namespace {

namespace fs = std::filesystem;

// A record holds one line; anything longer is not one.
constexpr size_t kMaxRecordBytes = 4096;

// Entry names are built from these, so a prefix or suffix must not reach
// outside the directory or hide among the temporaries.
bool is_plain_name_part(const std::string& text, bool leading_dot) {
  if (text.empty() || text.size() > 32) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool word = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!(word || (leading_dot && i == 0 && c == '.'))) return false;
  }
  return !leading_dot || (text[0] == '.' && text.size() > 1);
}

}  // namespace

std::string KernelCache::key_of(const std::vector<std::string_view>& parts) {
  Sha256 hash;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) hash.update("\0", 1);
    hash.update(parts[i].data(), parts[i].size());
  }
  return Sha256::hex(hash.finish()).substr(0, 32);
}

bool KernelCache::open(std::string prefix, std::string object_suffix, std::string& why) {
  directory_.reset();
  if (!is_plain_name_part(prefix, false) || !is_plain_name_part(object_suffix, true) ||
      object_suffix == ".sha256") {
    why = "'" + prefix + "' and '" + object_suffix +
          "' do not make kernel cache entry names ([a-z0-9_] and a '.' suffix)";
    return false;
  }
  prefix_ = std::move(prefix);
  object_suffix_ = std::move(object_suffix);
  std::string base;
  std::vector<std::string> components;
  auto split = [&](const std::string& directory, std::vector<std::string> below) {
    fs::path normal = fs::path(directory).lexically_normal();
    if (!normal.has_filename() && normal.has_parent_path() && normal != normal.root_path()) {
      normal = normal.parent_path();  // a trailing '/'
    }
    if (normal.has_filename() && normal.filename() != "..") {
      base = normal.has_parent_path() ? normal.parent_path().string() : ".";
      components.push_back(normal.filename().string());
    } else {
      base = normal.string();
    }
    components.insert(components.end(), below.begin(), below.end());
  };
  if (const char* dir = env_nonempty("HAL_CACHE_DIR")) {
    split(dir, {});
  } else if (const char* xdg = env_nonempty("XDG_CACHE_HOME")) {
    split(xdg, {"hal"});
  } else if (const char* home = env_nonempty("HOME")) {
    base = home;
    components = {".cache", "hal"};
  } else {
    why = "none of HAL_CACHE_DIR, XDG_CACHE_HOME and HOME is set";
    return false;
  }
  path_ = base;
  for (const std::string& name : components) path_ += (path_.back() == '/' ? "" : "/") + name;
  directory_ = open_private_directory(base, components, why);
  return directory_.valid();
}

std::string KernelCache::object_name(const std::string& key) const {
  return prefix_ + "-" + key + object_suffix_;
}

std::string KernelCache::record_name(const std::string& key) const {
  return prefix_ + "-" + key + ".sha256";
}

std::string KernelCache::record_tag() const {
  return "hal-" + prefix_ + "-cache 1";
}

std::string KernelCache::object_path(const std::string& key) const {
  return path_ + (!path_.empty() && path_.back() == '/' ? "" : "/") + object_name(key);
}

bool KernelCache::read(const std::string& key, const Validator& validate,
                       std::vector<unsigned char>& image, std::string& why) const {
  image.clear();
  why.clear();
  if (!is_open()) return false;
  ReadRule rule;
  rule.no_follow = true;
  rule.must_be_private = true;
  rule.max_bytes = kMaxRecordBytes;
  std::vector<unsigned char> record_bytes;
  int error = 0;
  const std::string record_file = record_name(key);
  if (!read_regular_file(directory_.get(), record_file, rule, record_bytes, error, why)) {
    if (error == ENOENT)
      why.clear();
    else
      why = "its record '" + record_file + "': " + why;
    return false;
  }
  std::istringstream record(std::string(record_bytes.begin(), record_bytes.end()));
  std::string tag, version, hash_word, hash, size_word;
  uint64_t size = 0;
  record >> tag >> version >> hash_word >> hash >> size_word >> size;
  if (!record || tag + " " + version != record_tag() || hash_word != "sha256" ||
      size_word != "size" || hash.size() != 64) {
    why = "its record '" + record_file + "' is not a HAL cache record";
    return false;
  }
  rule.max_bytes = kMaxObjectBytes;
  const std::string object_file = object_name(key);
  if (!read_regular_file(directory_.get(), object_file, rule, image, error, why)) {
    why = "'" + object_file + "': " + why;
    image.clear();
    return false;
  }
  if (image.size() != size || Sha256::hex(Sha256::of(image.data(), image.size())) != hash) {
    why = "'" + object_file + "' does not match the SHA-256 and size its record holds";
    image.clear();
    return false;
  }
  if (validate && !validate(image, why)) {
    why = "'" + object_file + "': " + why;
    image.clear();
    return false;
  }
  return true;
}

int KernelCache::write(const std::string& key, const std::vector<unsigned char>& image) const {
  if (!is_open()) return EBADF;
  if (int error =
          write_file_atomically(directory_.get(), object_name(key), image.data(), image.size())) {
    return error;
  }
  const std::string record = record_tag() + " sha256 " +
                             Sha256::hex(Sha256::of(image.data(), image.size())) + " size " +
                             std::to_string(image.size()) + "\n";
  return write_file_atomically(directory_.get(), record_name(key), record.data(), record.size());
}

}  // namespace hal::util
