#pragma once
// The per-user kernel cache every plugin that compiles at run time shares
// (SPEC.md §8, "The kernel cache"): where the directory is and what makes it
// trusted, how an entry is named, its record, and the checks an entry passes
// before its bytes are handed back. One implementation, so the cpu, cuda and
// hip plugins cannot drift apart in what they trust.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "hal_util/secure_file.hpp"

namespace hal::util {

class KernelCache {
 public:
  // A check of an entry's bytes beyond its record: the plugin's own image
  // validation (ELF, PTX text, AMD GPU code object). False with |why|.
  using Validator = std::function<bool(const std::vector<unsigned char>& image, std::string& why)>;

  // The largest object an entry may hold.
  static constexpr size_t kMaxObjectBytes = size_t{1} << 30;

  // The key of an entry: the first 128 bits (32 hex digits) of the SHA-256
  // of |parts| joined by NUL bytes. The parts are everything that changes
  // the compiled bytes.
  static std::string key_of(const std::vector<std::string_view>& parts);

  // Opens the cache directory: $HAL_CACHE_DIR, else $XDG_CACHE_HOME/hal,
  // else $HOME/.cache/hal. The directory the user named (HAL_CACHE_DIR's
  // parent, XDG_CACHE_HOME's parent, HOME) is taken as it is; every component
  // below it must be owned by this user and not writable by others (or is
  // created so), and the cache directory itself must be accessible to this
  // user only (0700). With none of the three there is no cache: a shared
  // fallback such as /tmp/hal-cache would let another user plant objects.
  //
  // Inside: "key", this user's secret key (32 random bytes, mode 0600,
  // created once, atomically), and "objects/", the entries:
  // "<prefix>-<key><suffix>" (the object) and "<prefix>-<key>.record" (its
  // record: the object's size and an HMAC-SHA-256 under the secret key of
  // the record's tag, the entry's key and the object). False with |why|
  // (naming the path and the rule it breaks).
  bool open(std::string prefix, std::string object_suffix, std::string& why);

  bool is_open() const { return directory_.valid(); }
  // The objects' directory's path, for messages.
  const std::string& path() const { return path_; }
  // The path of |key|'s object, for messages.
  std::string object_path(const std::string& key) const;

  // The object of |key|, when both files are private regular files (no
  // symbolic link followed), the record's size and HMAC are those of this
  // object under this user's secret key, and |validate| accepts the bytes.
  // Otherwise false with |why|: empty when there simply is no entry, else
  // the reason the entry is not used.
  bool read(const std::string& key, const Validator& validate, std::vector<unsigned char>& image,
            std::string& why) const;

  // Stores |image| as the entry of |key|: the object, then its record, each
  // written to a temporary, fsync'ed and renamed into place.
  // A reader that meets an object and a record of different writers sees a
  // mismatch and rebuilds. Returns 0 or errno.
  int write(const std::string& key, const std::vector<unsigned char>& image) const;

 private:
  std::string object_name(const std::string& key) const;
  std::string record_name(const std::string& key) const;
  std::string record_tag() const;  // "hal-<prefix>-cache 2"
  // The record's MAC of |image| as the entry of |key|, in hex.
  std::string mac_of(const std::string& key, const std::vector<unsigned char>& image) const;

  UniqueFd directory_;  // the objects' directory
  std::vector<unsigned char> secret_;
  std::string path_;
  std::string prefix_;
  std::string object_suffix_;
};

}  // namespace hal::util
