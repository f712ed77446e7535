#include "hal_ops/spatial.hpp"

namespace hal::ops {

std::string layout_name(hal_channel_layout_t layout, uint32_t spatial_dims, bool filter) {
  static const char* const kSpatialNames[] = {"W", "HW", "DHW"};
  const std::string spatial =
      spatial_dims >= 1 && spatial_dims <= kSpatial ? kSpatialNames[spatial_dims - 1] : "?";
  const std::string outer = filter ? "O" : "N";
  const std::string channel = filter ? "I" : "C";
  return layout == HAL_CHANNELS_LAST ? outer + spatial + channel : outer + channel + spatial;
}

}  // namespace hal::ops
