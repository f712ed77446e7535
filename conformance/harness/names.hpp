// Names as halconform prints them: the enumerator spelling of hal_util's
// tables (the one table per enum, util/names.cpp), and version numbers.
#ifndef HAL_CONFORMANCE_HARNESS_NAMES_HPP_
#define HAL_CONFORMANCE_HARNESS_NAMES_HPP_

#include <hal.h>

#include <string>

#include "hal_util/names.hpp"

namespace halconform {

// "HAL_DEVICE_CAP_KERNELS|HAL_DEVICE_CAP_EVENT_TIMING"; "none" for 0.
inline std::string capability_names(hal_device_caps_t capabilities) {
  return hal::util::capability_names(capabilities, hal::util::Spelling::kEnumerator);
}
// "HAL_MODULE_FORMAT_CPU_SHARED_OBJECT|..." for a (1u << format) mask.
inline std::string module_format_names(uint32_t formats) {
  return hal::util::module_format_names(formats, hal::util::Spelling::kEnumerator);
}
// "cpu", "gpu", "accelerator"; "unknown" otherwise.
inline const char* device_type_name(hal_device_type_t type) {
  return hal::util::device_type_name(type);
}
// "1.0.0".
inline std::string version_string(uint32_t version) {
  return std::to_string(HAL_VERSION_MAJOR(version)) + "." +
         std::to_string(HAL_VERSION_MINOR(version)) + "." +
         std::to_string(HAL_VERSION_PATCH(version));
}

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_NAMES_HPP_
