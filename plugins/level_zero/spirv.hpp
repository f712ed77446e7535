// Checks of a HAL_MODULE_FORMAT_SPIRV image before the driver reads it:
// zeModuleCreate trusts the image, so a truncated or foreign one is refused
// with a precise reason first.
#ifndef HAL_PLUGINS_LEVEL_ZERO_SPIRV_HPP_
#define HAL_PLUGINS_LEVEL_ZERO_SPIRV_HPP_

#include <cstddef>
#include <cstdint>
#include <string>

namespace hal::level_zero {

inline constexpr uint32_t kSpirvMagic = 0x07230203u;

// True when |data| (|size| bytes) is a SPIR-V module: a whole number of
// 32-bit words, at least the 5-word header, the magic number in either byte
// order, a version 1.0 to 1.6, an id bound above 0, and every instruction's
// word count inside the image. Otherwise false with |why| (one phrase).
bool check_spirv_image(const void* data, size_t size, std::string& why);

}  // namespace hal::level_zero

#endif  // HAL_PLUGINS_LEVEL_ZERO_SPIRV_HPP_
