// module_load's bytes: what hal_module_desc_t hands a plugin, in memory
// (data, size) or as a file (path). Written once for the plugins that read
// a module whole before their driver sees it.
#ifndef HAL_PLUGIN_SDK_MODULE_IMAGE_HPP_
#define HAL_PLUGIN_SDK_MODULE_IMAGE_HPP_

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "hal_plugin.h"
#include "hal_plugin_sdk/report.hpp"

namespace hal::plugin {

// The largest module file read (a module image is far smaller; a path that
// names something endless, like /dev/zero, must not exhaust memory).
inline constexpr size_t kMaxModuleFileBytes = size_t{1} << 30;

// The image of |desc| in |out|. With |text|, an image in memory ends at its
// first NUL (source text), as a file's never does. A file at a path a user
// gave is read by the rule of SPEC.md §15: only a regular file, opened
// without blocking (a FIFO never hangs the load) and never followed past
// kMaxModuleFileBytes. A missing file is HAL_ERROR_NOT_FOUND, any other
// refusal HAL_ERROR_INVALID_MODULE, with the reason.
inline hal_result_t read_module_image(const hal_module_desc_t& desc, const ErrorReporter& report,
                                      std::string& out, bool text = false) {
  if (desc.data != nullptr) {
    const auto* bytes = static_cast<const char*>(desc.data);
    out.assign(bytes, text ? strnlen(bytes, desc.size) : desc.size);
    return HAL_SUCCESS;
  }
  auto refuse = [&](int error, const char* why) {
    return report.fail(error == ENOENT ? HAL_ERROR_NOT_FOUND : HAL_ERROR_INVALID_MODULE, error,
                       "module_load: cannot read '%s': %s", desc.path, why);
  };
  const int fd = open(desc.path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    return refuse(error, std::strerror(error));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int error = errno;
    return refuse(error, std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) return refuse(EINVAL, "it is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxModuleFileBytes) {
    return refuse(EFBIG, "it is larger than 1 GiB");
  }
  out.assign(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t got = read(fd, out.data() + done, out.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      return refuse(error, std::strerror(error));
    }
    if (got == 0) break;  // shrank while read: what is there is the image
    done += static_cast<size_t>(got);
  }
  out.resize(done);
  return HAL_SUCCESS;
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_MODULE_IMAGE_HPP_
