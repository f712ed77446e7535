#include "hal_util/secure_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "hal_util/env.hpp"

namespace hal::util {
namespace {

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// Opens one component below |parent| as a directory without following a
// symbolic link; creates it (0700) when absent.
UniqueFd open_component(int parent, const std::string& name, const std::string& path,
                        std::string& why) {
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = openat(parent, name.c_str(), kFlags);
  if (fd < 0 && errno == ENOENT) {
    const bool created = mkdirat(parent, name.c_str(), 0700) == 0;
    if (!created && errno != EEXIST) {
      why = "cannot create '" + path + "': " + std::strerror(errno);
      return UniqueFd();
    }
    fd = openat(parent, name.c_str(), kFlags);
    // A directory HAL itself just made is 0700 whatever a default ACL of
    // its parent added (the umask only takes bits away).
    if (created && fd >= 0) fchmod(fd, 0700);
  }
  if (fd < 0) {
    const int error = errno;
    struct stat status {};
    if ((error == ELOOP || error == ENOTDIR) &&
        fstatat(parent, name.c_str(), &status, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(status.st_mode)) {
      why = "'" + path + "' is a symbolic link; HAL does not follow one there";
    } else {
      why = "cannot open the directory '" + path + "': " + std::strerror(error);
    }
  }
  return UniqueFd(fd);
}

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

bool is_private(int fd, const std::string& what, std::string& why) {
  struct stat status {};
  if (fstat(fd, &status) != 0) {
    why = "cannot stat " + what + ": " + std::strerror(errno);
    return false;
  }
  if (status.st_uid != geteuid()) {
    why = what + " is owned by uid " + std::to_string(status.st_uid) +
          ", not by this process (uid " + std::to_string(geteuid()) + ")";
    return false;
  }
  if ((status.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(status.st_mode & 07777));
    why = what + " has mode " + mode + ": group or others may write to it";
    return false;
  }
  return true;
}

bool is_owner_only(int fd, const std::string& what, std::string& why) {
  if (!is_private(fd, what, why)) return false;
  struct stat status {};
  if (fstat(fd, &status) != 0) {
    why = "cannot stat " + what + ": " + std::strerror(errno);
    return false;
  }
  if ((status.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(status.st_mode & 07777));
    why = what + " has mode " + mode + ": group or others may read or enter it";
    return false;
  }
  return true;
}

UniqueFd open_private_directory(const std::string& trusted_base,
                                const std::vector<std::string>& private_components,
                                std::string& why, Privacy last) {
  UniqueFd directory(open(trusted_base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory.valid()) {
    why = "cannot open the directory '" + trusted_base + "': " + std::strerror(errno);
    return UniqueFd();
  }
  std::string path = trusted_base;
  for (const std::string& name : private_components) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      why = "'" + name + "' is not a plain directory name";
      return UniqueFd();
    }
    path += (path.empty() || path.back() == '/' ? "" : "/") + name;
    UniqueFd next = open_component(directory.get(), name, path, why);
    if (!next.valid()) return UniqueFd();
    if (!is_private(next.get(), "'" + path + "'", why)) return UniqueFd();
    directory = std::move(next);
  }
  if (private_components.empty() && !is_private(directory.get(), "'" + path + "'", why)) {
    return UniqueFd();
  }
  if (last == Privacy::kOwnerOnly && !is_owner_only(directory.get(), "'" + path + "'", why)) {
    return UniqueFd();
  }
  return directory;
}

bool read_regular_file(int directory_fd, const std::string& name, const ReadRule& rule,
                       std::vector<unsigned char>& out, int& error, std::string& why) {
  error = 0;
  const int flags =
      O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (rule.no_follow ? O_NOFOLLOW : 0);
  UniqueFd fd(openat(directory_fd, name.c_str(), flags));
  if (!fd.valid()) {
    error = errno;
    why = error == ELOOP && rule.no_follow ? "it is a symbolic link" : std::strerror(error);
    return false;
  }
  struct stat status {};
  if (fstat(fd.get(), &status) != 0) {
    error = errno;
    why = std::strerror(error);
    return false;
  }
  if (!S_ISREG(status.st_mode)) {
    why = std::string("it is ") + file_type_name(status.st_mode) + ", not a regular file";
    return false;
  }
  if (rule.must_be_private && !is_private(fd.get(), "it", why)) return false;
  if (rule.owner_only && (status.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(status.st_mode & 07777));
    why = std::string("it has mode ") + mode + ": group or others may access it";
    return false;
  }
  if (static_cast<uint64_t>(status.st_size) > rule.max_bytes) {
    why = "it is " + std::to_string(status.st_size) + " bytes, more than the limit of " +
          std::to_string(rule.max_bytes);
    return false;
  }
  // Back to blocking reads: a regular file never blocks anyway.
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  out.resize(static_cast<size_t>(status.st_size));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      why = std::strerror(error);
      return false;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done != out.size()) {
    why = "it shrank while it was read";
    return false;
  }
  return true;
}

UniqueFd open_user_output_file(const std::string& path, mode_t mode, std::string& why) {
  const std::filesystem::path named(path);
  const std::string name = named.filename().string();
  if (name.empty() || name == "." || name == "..") {
    why = "'" + path + "' does not name a file";
    return UniqueFd();
  }
  // The directory is the one the user named (symbolic links in it followed);
  // nobody else may be able to swap what is in it.
  const std::string directory =
      named.has_parent_path() ? named.parent_path().string() : std::string(".");
  UniqueFd parent(open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat status {};
  if (!parent.valid() || fstat(parent.get(), &status) != 0) {
    why = "cannot open the directory '" + directory + "': " + std::strerror(errno);
    return UniqueFd();
  }
  const uid_t us = geteuid();
  if (status.st_uid != 0 && status.st_uid != us) {
    why = "the directory '" + directory + "' is owned by uid " + std::to_string(status.st_uid) +
          ", neither root nor this process (uid " + std::to_string(us) +
          "): its owner could replace the file";
    return UniqueFd();
  }
  if ((status.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (status.st_mode & S_ISVTX) == 0) {
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(status.st_mode & 07777));
    why = "the directory '" + directory + "' has mode " + octal +
          ": others may write to it and it has no sticky bit, so they could replace the file";
    return UniqueFd();
  }
  // O_NOFOLLOW: a symbolic link planted under the name is not followed;
  // O_NONBLOCK: a FIFO does not block the open. No O_TRUNC before the checks.
  UniqueFd fd(openat(parent.get(), name.c_str(),
                     O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode));
  if (!fd.valid()) {
    const int error = errno;
    why = "cannot open '" + path + "' for writing: " +
          (error == ELOOP   ? std::string("it is a symbolic link, which HAL does not follow")
           : error == ENXIO ? std::string("it is a FIFO with no reader, not a regular file")
                            : std::string(std::strerror(error)));
    return UniqueFd();
  }
  if (fstat(fd.get(), &status) != 0) {
    why = "cannot stat '" + path + "': " + std::strerror(errno);
    return UniqueFd();
  }
  if (!S_ISREG(status.st_mode)) {
    why = "'" + path + "' is " + file_type_name(status.st_mode) + ", not a regular file";
    return UniqueFd();
  }
  if (status.st_uid != us) {
    why = "'" + path + "' belongs to uid " + std::to_string(status.st_uid) +
          ", not to this process (uid " + std::to_string(us) + ")";
    return UniqueFd();
  }
  if (status.st_nlink != 1) {
    why = "'" + path + "' has " + std::to_string(status.st_nlink) +
          " links: it may be a hard link to another file";
    return UniqueFd();
  }
  if (ftruncate(fd.get(), 0) != 0) {
    why = "cannot truncate '" + path + "': " + std::strerror(errno);
    return UniqueFd();
  }
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  return fd;
}

bool write_user_file(const std::string& path, const void* data, size_t size, std::string& why) {
  UniqueFd fd = open_user_output_file(path, 0644, why);
  if (!fd.valid()) return false;
  if (const int error = write_all(fd.get(), data, size); error != 0) {
    why = describe_write_error(error, path);
    return false;
  }
  if (close(fd.release()) != 0) {
    why = describe_write_error(errno, path);
    return false;
  }
  return true;
}

int write_all(int fd, const void* data, size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  for (size_t written = 0; written < size;) {
    const ssize_t n = write(fd, bytes + written, size - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    written += static_cast<size_t>(n);
  }
  return 0;
}

int write_file_atomically(int directory_fd, const std::string& name, const void* data,
                          size_t size) {
  static std::atomic<uint64_t> counter{0};
  std::random_device entropy;
  const std::string temporary = name + ".tmp." + std::to_string(getpid()) + "." +
                                std::to_string(counter.fetch_add(1)) + "." +
                                std::to_string(entropy());
  UniqueFd fd(openat(directory_fd, temporary.c_str(),
                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return errno;
  int error = write_all(fd.get(), data, size);
  if (error == 0 && fsync(fd.get()) != 0) error = errno;
  if (error == 0 && close(fd.release()) != 0) error = errno;
  if (error == 0 && renameat(directory_fd, temporary.c_str(), directory_fd, name.c_str()) != 0) {
    error = errno;
  }
  if (error != 0) unlinkat(directory_fd, temporary.c_str(), 0);
  return error;
}

PrivateTempDirectory::~PrivateTempDirectory() {
  if (path_.empty()) return;
  fd_.reset();
  // Only this user can write below the directory; remove_all does not follow
  // symbolic links.
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

bool PrivateTempDirectory::create(const char* prefix, std::string& why) {
  const char* base = env_nonempty("TMPDIR");
  std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + "XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    why = "cannot create a private temporary directory '" + pattern + "': " + std::strerror(errno);
    return false;
  }
  path_ = pattern;
  fd_.reset(open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd_.valid()) {
    why = "cannot open the temporary directory '" + path_ + "': " + std::strerror(errno);
    return false;
  }
  return is_private(fd_.get(), "the temporary directory '" + path_ + "'", why);
}

bool is_disk_full(int error) {
  return error == ENOSPC || error == EDQUOT || error == EFBIG;
}

std::string describe_write_error(int error, const std::string& where) {
  if (error == ENOSPC || error == EDQUOT) {
    return "the disk holding '" + where + "' is full (" + std::strerror(error) + ")";
  }
  if (error == EFBIG) {
    return "the disk holding '" + where +
           "' takes no more of this process's data: " + std::strerror(error) +
           " (the file size limit, RLIMIT_FSIZE)";
  }
  return "cannot write '" + where + "': " + std::strerror(error);
}

}  // namespace hal::util
