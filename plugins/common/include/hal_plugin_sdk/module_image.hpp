// module_load's bytes: what hal_module_desc_t hands a plugin, in memory
// (data, size) or as a file (path). Written once for the plugins that read
// a module whole before their driver sees it.
#ifndef HAL_PLUGIN_SDK_MODULE_IMAGE_HPP_
#define HAL_PLUGIN_SDK_MODULE_IMAGE_HPP_

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "hal_plugin.h"
#include "hal_plugin_sdk/report.hpp"

namespace hal::plugin {

// The image of |desc| in |out|. A file that cannot be read is
// HAL_ERROR_NOT_FOUND with the reason. With |text|, an image in memory ends
// at its first NUL (source text), as a file's never does.
inline hal_result_t read_module_image(const hal_module_desc_t& desc, const ErrorReporter& report,
                                      std::string& out, bool text = false) {
  if (desc.data != nullptr) {
    const auto* bytes = static_cast<const char*>(desc.data);
    out.assign(bytes, text ? strnlen(bytes, desc.size) : desc.size);
    return HAL_SUCCESS;
  }
  std::ifstream file(desc.path, std::ios::binary);
  if (!file) {
    return report.fail(HAL_ERROR_NOT_FOUND, errno, "module_load: cannot read '%s': %s", desc.path,
                       std::strerror(errno));
  }
  out.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  return HAL_SUCCESS;
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_MODULE_IMAGE_HPP_
