// hal_util's private directories and file reads and writes: what the kernel
// cache and the compiler's scratch directory rely on against other local
// users (a world-writable or foreign directory, a planted symbolic link, a
// FIFO or a device where a file is expected).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hal_util/secure_file.hpp"

namespace {

struct ScratchDirectory {
  std::string path;
  ScratchDirectory() {
    std::string pattern = "/tmp/hal-files-test-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~ScratchDirectory() {
    const std::string command = "chmod -R u+rwx '" + path + "'; rm -rf '" + path + "'";
    (void)std::system(command.c_str());
  }
};

std::string slurp(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

mode_t mode_of(const std::string& path) {
  struct stat status {};
  REQUIRE(lstat(path.c_str(), &status) == 0);
  return status.st_mode & 07777;
}

}  // namespace

TEST_CASE("private directories are created 0700 whatever the umask", "[cpu][files][private]") {
  ScratchDirectory scratch;
  const mode_t saved = umask(0);
  std::string why;
  hal::util::UniqueFd fd = hal::util::open_private_directory(scratch.path, {".cache", "hal"}, why);
  umask(saved);
  REQUIRE(fd.valid());
  CHECK(mode_of(scratch.path + "/.cache") == 0700);
  CHECK(mode_of(scratch.path + "/.cache/hal") == 0700);
  // Opening it again finds the same directory.
  hal::util::UniqueFd again =
      hal::util::open_private_directory(scratch.path + "/.cache", {"hal"}, why);
  CHECK(again.valid());
}

TEST_CASE("hostile directories are refused with a reason", "[cpu][files][private]") {
  ScratchDirectory scratch;
  std::string why;
  SECTION("writable by others") {
    REQUIRE(mkdir((scratch.path + "/cache").c_str(), 0700) == 0);
    REQUIRE(chmod((scratch.path + "/cache").c_str(), 0777) == 0);
    CHECK_FALSE(hal::util::open_private_directory(scratch.path, {"cache"}, why).valid());
    CHECK(why.find("mode 0777") != std::string::npos);
    // Below it too: a private component under a shared one is refused at the shared one.
    CHECK_FALSE(hal::util::open_private_directory(scratch.path, {"cache", "hal"}, why).valid());
    CHECK(why.find("group or others may write") != std::string::npos);
  }
  SECTION("writable by the group") {
    REQUIRE(mkdir((scratch.path + "/cache").c_str(), 0700) == 0);
    REQUIRE(chmod((scratch.path + "/cache").c_str(), 0770) == 0);
    CHECK_FALSE(hal::util::open_private_directory(scratch.path, {"cache"}, why).valid());
    CHECK(why.find("mode 0770") != std::string::npos);
  }
  SECTION("a symbolic link to a private directory") {
    REQUIRE(mkdir((scratch.path + "/real").c_str(), 0700) == 0);
    REQUIRE(symlink((scratch.path + "/real").c_str(), (scratch.path + "/cache").c_str()) == 0);
    CHECK_FALSE(hal::util::open_private_directory(scratch.path, {"cache", "hal"}, why).valid());
    CHECK(why.find("symbolic link") != std::string::npos);
    // Nothing was created through the link.
    CHECK(access((scratch.path + "/real/hal").c_str(), F_OK) != 0);
  }
  SECTION("owned by another user") {
    if (geteuid() == 0) {
      REQUIRE(mkdir((scratch.path + "/cache").c_str(), 0700) == 0);
      REQUIRE(chown((scratch.path + "/cache").c_str(), 65534, 65534) == 0);
      CHECK_FALSE(hal::util::open_private_directory(scratch.path, {"cache"}, why).valid());
    } else {
      // "/" belongs to root.
      CHECK_FALSE(hal::util::open_private_directory("/", {}, why).valid());
    }
    CHECK(why.find("owned by uid") != std::string::npos);
  }
  SECTION("a file where a directory should be") {
    std::ofstream(scratch.path + "/cache") << "x";
    CHECK_FALSE(hal::util::open_private_directory(scratch.path, {"cache"}, why).valid());
    CHECK_FALSE(why.empty());
  }
}

TEST_CASE("reading refuses what is not a regular file", "[cpu][files][read]") {
  ScratchDirectory scratch;
  const std::string fifo = scratch.path + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  std::vector<unsigned char> bytes;
  int error = 0;
  std::string why;
  const hal::util::ReadRule rule;
  CHECK_FALSE(hal::util::read_regular_file(AT_FDCWD, fifo, rule, bytes, error, why));
  CHECK(why.find("FIFO") != std::string::npos);
  CHECK_FALSE(hal::util::read_regular_file(AT_FDCWD, "/dev/zero", rule, bytes, error, why));
  CHECK(why.find("character device") != std::string::npos);
  CHECK_FALSE(
      hal::util::read_regular_file(AT_FDCWD, scratch.path + "/absent", rule, bytes, error, why));
  CHECK(error == ENOENT);

  const std::string file = scratch.path + "/file";
  std::ofstream(file) << "twelve bytes";
  REQUIRE(chmod(file.c_str(), 0600) == 0);
  REQUIRE(hal::util::read_regular_file(AT_FDCWD, file, rule, bytes, error, why));
  CHECK(std::string(bytes.begin(), bytes.end()) == "twelve bytes");
  hal::util::ReadRule small = rule;
  small.max_bytes = 11;
  CHECK_FALSE(hal::util::read_regular_file(AT_FDCWD, file, small, bytes, error, why));
  CHECK(why.find("limit") != std::string::npos);

  // no_follow refuses a link, must_be_private a file others may write.
  const std::string link = scratch.path + "/link";
  REQUIRE(symlink(file.c_str(), link.c_str()) == 0);
  hal::util::ReadRule strict = rule;
  strict.no_follow = true;
  strict.must_be_private = true;
  CHECK_FALSE(hal::util::read_regular_file(AT_FDCWD, link, strict, bytes, error, why));
  CHECK(why.find("symbolic link") != std::string::npos);
  CHECK(hal::util::read_regular_file(AT_FDCWD, file, strict, bytes, error, why));
  REQUIRE(chmod(file.c_str(), 0666) == 0);
  CHECK_FALSE(hal::util::read_regular_file(AT_FDCWD, file, strict, bytes, error, why));
  CHECK(why.find("group or others") != std::string::npos);
}

TEST_CASE("atomic writes replace a planted link instead of following it", "[cpu][files][write]") {
  ScratchDirectory scratch;
  std::string why;
  hal::util::UniqueFd directory = hal::util::open_private_directory(scratch.path, {"cache"}, why);
  REQUIRE(directory.valid());
  // A file someone wants overwritten, and a link to it at the name HAL writes.
  const std::string victim = scratch.path + "/victim";
  std::ofstream(victim) << "precious";
  REQUIRE(symlink(victim.c_str(), (scratch.path + "/cache/entry").c_str()) == 0);
  REQUIRE(hal::util::write_file_atomically(directory.get(), "entry", "new", 3) == 0);
  CHECK(slurp(victim) == "precious");
  CHECK(slurp(scratch.path + "/cache/entry") == "new");
  CHECK((mode_of(scratch.path + "/cache/entry") & 0777) == 0600);
  struct stat status {};
  REQUIRE(lstat((scratch.path + "/cache/entry").c_str(), &status) == 0);
  CHECK(S_ISREG(status.st_mode));
  // No temporary is left behind.
  const std::string listing = scratch.path + "/cache";
  size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(listing)) {
    (void)entry;
    ++entries;
  }
  CHECK(entries == 1);
}

TEST_CASE("private temporary directories are 0700 and removed", "[cpu][files][temp]") {
  std::string path;
  {
    hal::util::PrivateTempDirectory directory;
    std::string why;
    REQUIRE(directory.create("hal-test-", why));
    path = directory.path();
    CHECK(mode_of(path) == 0700);
    std::ofstream(path + "/inside") << "x";
  }
  CHECK(access(path.c_str(), F_OK) != 0);
}

TEST_CASE("a full disk is named as one", "[cpu][files][write]") {
  CHECK(hal::util::describe_write_error(ENOSPC, "/cache").find("disk holding '/cache' is full") !=
        std::string::npos);
  CHECK(hal::util::describe_write_error(EDQUOT, "/cache").find("is full") != std::string::npos);
  CHECK(hal::util::describe_write_error(EFBIG, "/cache").find("RLIMIT_FSIZE") != std::string::npos);
  CHECK(hal::util::is_disk_full(ENOSPC));
  CHECK_FALSE(hal::util::is_disk_full(EACCES));
}
