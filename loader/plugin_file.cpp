#include "plugin_file.hpp"

#include "error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace hal::loader {

namespace fs = std::filesystem;

namespace {

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Owned by root or by us: nobody else can have changed it.
std::string ownership_refusal(const char* what, const std::string& path, const struct stat& st) {
  const uid_t us = geteuid();
  if (st.st_uid != 0 && st.st_uid != us) {
    return format("refused: %s %s is owned by uid %u, neither root nor the effective user (uid %u)",
                  what, path.c_str(), static_cast<unsigned>(st.st_uid), static_cast<unsigned>(us));
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return format("refused: %s %s is world-writable (mode %04o): any local user could replace it",
                  what, path.c_str(), static_cast<unsigned>(st.st_mode & 07777));
  }
  return {};
}

// The directory a plugin lies in decides which files appear there, so it is
// held to the same rule as the file (even with the sticky bit: anyone could
// add a hal_plugin_*.so to a world-writable directory).
std::string directory_refusal(const fs::path& directory) {
  struct stat st {};
  if (::stat(directory.c_str(), &st) != 0) {
    return format("refused: cannot stat the plugin directory %s: %s", directory.c_str(),
                  std::strerror(errno));
  }
  return ownership_refusal("the plugin directory", directory.string(), st);
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string plugin_file_refusal(const std::string& path) {
  struct stat named {};
  // A file that cannot be stat'ed is left to dlopen, whose message says why.
  if (::stat(path.c_str(), &named) != 0) return {};
  if (!S_ISREG(named.st_mode)) {
    return format("refused: %s is %s, not a regular file", path.c_str(),
                  file_type_name(named.st_mode));
  }
  // Open without blocking and check that what is open is what was checked:
  // the name cannot have been swapped for a FIFO in between.
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) return {};
  struct stat opened {};
  if (::fstat(fd.get(), &opened) != 0 || !S_ISREG(opened.st_mode) ||
      opened.st_dev != named.st_dev || opened.st_ino != named.st_ino) {
    return format("refused: %s changed while it was being checked", path.c_str());
  }
  if (std::string refusal = ownership_refusal("the plugin file", path, opened); !refusal.empty())
    return refusal;

  const fs::path named_directory = fs::path(path).parent_path();
  if (std::string refusal = directory_refusal(named_directory); !refusal.empty()) return refusal;
  std::error_code error;
  const fs::path real_directory = fs::canonical(path, error).parent_path();
  if (!error && real_directory != named_directory) return directory_refusal(real_directory);
  return {};
}

}  // namespace hal::loader
