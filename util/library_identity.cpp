#include "hal_util/library_identity.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

namespace hal::util {

std::string library_identity(const void* symbol) {
  Dl_info info{};
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) {
    return "unknown library";
  }
  std::string identity = info.dli_fname;
  struct stat status {};
  if (stat(info.dli_fname, &status) == 0) {
    const long long mtime_ns =
        static_cast<long long>(status.st_mtim.tv_sec) * 1000000000LL + status.st_mtim.tv_nsec;
    identity += " size " + std::to_string(status.st_size) + " mtime " + std::to_string(mtime_ns) +
                " inode " + std::to_string(status.st_ino);
  }
  return identity;
}

}  // namespace hal::util
