#pragma once
// Files and directories HAL creates or trusts on a machine shared with other
// users: the one place of these rules (SPEC.md §15, "Files").
// - A private directory (the kernel cache) is owned by the effective uid,
//   not accessible to group or others and not a symbolic link; files are
//   opened relative to it with O_NOFOLLOW, created with O_EXCL, replaced by
//   rename.
// - A file HAL reads at a path a user gave (a module image, a plugin, a
//   secret) is read only when it is a regular file, opened with O_NONBLOCK
//   and checked with fstat: a FIFO or a device never blocks or floods the
//   reader (read_regular_file).
// - A file HAL writes at a path a user gave (HAL_TRACE, halconform's
//   reports) is opened in a directory nobody else can swap it in (owned by
//   root or the effective uid; writable by others only with the sticky bit,
//   as /tmp), with O_NOFOLLOW and O_NONBLOCK, and used only when what is open
//   is a regular file of the effective uid with one link: a symbolic link,
//   a hard link or a FIFO planted under the name is refused, never followed
//   or waited on (open_user_output_file).

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace hal::util {

// An owned file descriptor; -1 is none.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// How private the last directory of open_private_directory must be.
enum class Privacy {
  kNotWritableByOthers,  // like every component: others may read, not write
  kOwnerOnly,            // no access at all for group or others (0700)
};

// Opens |trusted_base| (a directory the user named: symbolic links in it are
// followed, its owner is not checked), then each of |private_components| below
// it in turn, creating a missing one with mode 0700 (and setting exactly 0700
// on a directory it created). Each component and the final directory
// (|trusted_base| itself when there are no components) must be a directory,
// not a symbolic link, owned by the effective uid and not writable by group
// or others; the final one, with |last| kOwnerOnly, not accessible to them
// at all. Returns the final directory, or an invalid fd with |why| set (a
// sentence naming the path and the rule it breaks).
UniqueFd open_private_directory(const std::string& trusted_base,
                                const std::vector<std::string>& private_components,
                                std::string& why, Privacy last = Privacy::kNotWritableByOthers);

// Checks an open file or directory: owned by the effective uid, not writable
// by group or others. |what| names it in |why|.
bool is_private(int fd, const std::string& what, std::string& why);

// Stricter: owned by the effective uid and no access at all for group or
// others (mode 0700 for a directory, 0600 for a file): what the kernel cache
// and its key must be (SPEC.md §8).
bool is_owner_only(int fd, const std::string& what, std::string& why);

// How read_regular_file opens its file.
struct ReadRule {
  bool no_follow = false;        // O_NOFOLLOW: the last component must not be a symbolic link
  bool must_be_private = false;  // owned by the effective uid, not group/other writable
  bool owner_only = false;       // no access at all for group or others (a secret)
  size_t max_bytes = size_t{1} << 30;
};

// Reads the regular file |name| (relative to |directory_fd|, or AT_FDCWD) into
// |out|. Opens with O_NONBLOCK, so a FIFO cannot block the open, then refuses
// anything fstat does not call a regular file, and files over max_bytes. On
// failure returns false with |error| (an errno value, or 0 for a rule) and
// |why| (a phrase: "it is a FIFO, not a regular file").
bool read_regular_file(int directory_fd, const std::string& name, const ReadRule& rule,
                       std::vector<unsigned char>& out, int& error, std::string& why);

// Writes |size| bytes to |name| in |directory_fd| so that a reader sees the
// old file or the whole new one: a fresh temporary (O_CREAT|O_EXCL|O_NOFOLLOW,
// mode 0600) in the same directory, written, fsync'ed, then renamed over
// |name|. Returns 0 or the errno of the step that failed (the temporary is
// removed then).
int write_file_atomically(int directory_fd, const std::string& name, const void* data, size_t size);

// Opens |path| (a name a user gave HAL) for writing from its start, by the
// rule at the top of this file; a missing file is created with |mode|. The
// existing file is truncated only once it passed the checks. Returns the
// file, or an invalid fd with |why| (a sentence naming the path and the rule
// it breaks).
UniqueFd open_user_output_file(const std::string& path, mode_t mode, std::string& why);

// Writes |size| bytes to |path| through open_user_output_file; false with |why|.
bool write_user_file(const std::string& path, const void* data, size_t size, std::string& why);

// Writes all of |size| bytes to |fd|, retrying short writes and EINTR; 0 or errno.
int write_all(int fd, const void* data, size_t size);

// A fresh directory only this process's user can enter (mkdtemp: mode 0700,
// an unpredictable name) under $TMPDIR, else /tmp; removed with its contents
// when the object is destroyed.
class PrivateTempDirectory {
 public:
  PrivateTempDirectory() = default;
  ~PrivateTempDirectory();
  PrivateTempDirectory(const PrivateTempDirectory&) = delete;
  PrivateTempDirectory& operator=(const PrivateTempDirectory&) = delete;

  // Creates the directory; false with |why| (and errno) on failure.
  bool create(const char* prefix, std::string& why);
  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }

 private:
  std::string path_;
  UniqueFd fd_;
};

// Describes a failed write: "the disk holding '<where>' is full" for ENOSPC,
// EDQUOT and EFBIG, else strerror.
std::string describe_write_error(int error, const std::string& where);
// True for the errors describe_write_error calls a full disk.
bool is_disk_full(int error);

}  // namespace hal::util
