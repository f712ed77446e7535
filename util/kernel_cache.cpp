#include "hal_util/kernel_cache.hpp"

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <span>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "hal_util/env.hpp"
#include "hal_util/hmac.hpp"
#include "hal_util/sha256.hpp"

namespace hal::util {
namespace {

namespace fs = std::filesystem;

// A record holds one line; anything longer is not one.
constexpr size_t kMaxRecordBytes = 4096;
// The secret key's size: as long as the HMAC's output.
constexpr size_t kSecretBytes = 32;
constexpr char kSecretName[] = "key";
constexpr char kObjectsName[] = "objects";
constexpr char kRecordSuffix[] = ".record";

// The cache directory's secret key, created once: a fresh private temporary
// is filled, then linked under the key's name, which fails when another
// process got there first (then its key is used). Readers never see a
// partial key. A key another user could have read is refused, not used.
bool open_secret(int directory, const std::string& where, std::vector<unsigned char>& secret,
                 std::string& why) {
  ReadRule rule;
  rule.no_follow = true;
  rule.must_be_private = true;
  rule.max_bytes = kSecretBytes;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int error = 0;
    if (read_regular_file(directory, kSecretName, rule, secret, error, why)) {
      UniqueFd fd(openat(directory, kSecretName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      if (!fd.valid() || !is_owner_only(fd.get(), "the cache key '" + where + "'", why)) {
        why += "; delete it and HAL makes a new one";
        return false;
      }
      if (secret.size() != kSecretBytes) {
        why = "the cache key '" + where + "' is " + std::to_string(secret.size()) + " bytes, not " +
              std::to_string(kSecretBytes) + "; delete it and HAL makes a new one";
        return false;
      }
      return true;
    }
    if (error != ENOENT) {
      why = "the cache key '" + where + "': " + why;
      return false;
    }
    std::vector<uint8_t> fresh(kSecretBytes);
    if (!random_bytes(fresh)) {
      why = "no random bytes for a cache key: " + std::string(std::strerror(errno));
      return false;
    }
    std::vector<uint8_t> name_bits(8);
    random_bytes(name_bits);
    const std::string temporary =
        std::string(kSecretName) + ".tmp." + std::to_string(getpid()) + "." +
        Sha256::hex(Sha256::of(name_bits.data(), name_bits.size())).substr(0, 16);
    UniqueFd fd(openat(directory, temporary.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) {
      why = "cannot create a cache key in '" + where + "': " + std::strerror(errno);
      return false;
    }
    int written = write_all(fd.get(), fresh.data(), fresh.size());
    if (written == 0 && fsync(fd.get()) != 0) written = errno;
    fd.reset();
    const bool linked =
        written == 0 && linkat(directory, temporary.c_str(), directory, kSecretName, 0) == 0;
    const int link_error = errno;
    unlinkat(directory, temporary.c_str(), 0);
    if (written != 0) {
      why = describe_write_error(written, where);
      return false;
    }
    if (!linked && link_error != EEXIST) {
      why = "cannot create the cache key '" + where + "': " + std::strerror(link_error);
      return false;
    }
    // Linked, or another process linked its key first: read what is there.
  }
  why = "the cache key '" + where + "' could not be created";
  return false;
}

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
      object_suffix == kRecordSuffix) {
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
  std::string root = base;
  for (const std::string& name : components) root += (root.back() == '/' ? "" : "/") + name;
  UniqueFd cache = open_private_directory(base, components, why, Privacy::kOwnerOnly);
  if (!cache.valid()) return false;
  const std::string secret_path = root + (root.back() == '/' ? "" : "/") + kSecretName;
  if (!open_secret(cache.get(), secret_path, secret_, why)) return false;
  path_ = root + (root.back() == '/' ? "" : "/") + kObjectsName;
  directory_ = open_private_directory(root, {kObjectsName}, why, Privacy::kOwnerOnly);
  if (!directory_.valid()) secret_.clear();
  return directory_.valid();
}

std::string KernelCache::object_name(const std::string& key) const {
  return prefix_ + "-" + key + object_suffix_;
}

std::string KernelCache::record_name(const std::string& key) const {
  return prefix_ + "-" + key + kRecordSuffix;
}

std::string KernelCache::record_tag() const {
  return "hal-" + prefix_ + "-cache 2";
}

std::string KernelCache::mac_of(const std::string& key,
                                const std::vector<unsigned char>& image) const {
  // The tag, the entry's key and the object, each length-delimited by the
  // NUL the first two cannot hold: an object is bound to its own entry.
  const std::string tag = record_tag();
  const auto bytes = [](const std::string& text) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()),
                                    text.size() + 1);  // with its NUL
  };
  const Sha256Digest mac = hmac_sha256(secret_, {bytes(tag), bytes(key), image});
  return Sha256::hex(mac);
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
  std::string tag, version, mac_word, mac, size_word;
  uint64_t size = 0;
  record >> tag >> version >> mac_word >> mac >> size_word >> size;
  if (!record || tag + " " + version != record_tag() || mac_word != "hmac-sha256" ||
      size_word != "size" || mac.size() != 64) {
    why = "its record '" + record_file + "' is not a HAL cache record of this version";
    return false;
  }
  rule.max_bytes = kMaxObjectBytes;
  const std::string object_file = object_name(key);
  if (!read_regular_file(directory_.get(), object_file, rule, image, error, why)) {
    why = "'" + object_file + "': " + why;
    image.clear();
    return false;
  }
  const std::string expected = mac_of(key, image);
  const auto as_bytes = [](const std::string& text) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  };
  if (image.size() != size || !equal_in_constant_time(as_bytes(mac), as_bytes(expected))) {
    why = "'" + object_file +
          "' does not match its record: not written by HAL for this user (its HMAC under the "
          "cache's secret key differs), or changed since";
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
  const std::string record = record_tag() + " hmac-sha256 " + mac_of(key, image) + " size " +
                             std::to_string(image.size()) + "\n";
  return write_file_atomically(directory_.get(), record_name(key), record.data(), record.size());
}

}  // namespace hal::util
