// Names of HAL enums and bit sets as halconform prints them.
#ifndef HAL_CONFORMANCE_HARNESS_NAMES_HPP_
#define HAL_CONFORMANCE_HARNESS_NAMES_HPP_

#include <hal.h>

#include <string>

namespace halconform {

// "HAL_DEVICE_CAP_KERNELS|HAL_DEVICE_CAP_EVENT_TIMING"; "none" for 0.
std::string capability_names(hal_device_caps_t capabilities);
// "HAL_MODULE_FORMAT_CPU_SHARED_OBJECT|..." for a (1u << format) mask.
std::string module_format_names(uint32_t formats);
const char* device_type_name(hal_device_type_t type);
// "1.0.0".
std::string version_string(uint32_t version);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_NAMES_HPP_
