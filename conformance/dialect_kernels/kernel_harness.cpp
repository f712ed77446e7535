// The parts of the kernel harness both backends share: launches and the
// host references of the storage types.
#include "kernel_harness.hpp"

#include <cfenv>

namespace hal_test {

void run(TestDevice& device, const std::string& name, const Shape& shape,
         const std::vector<Arg>& args) {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  for (int d = 0; d < 3; ++d) {
    config.grid[d] = shape.grid[d];
    config.block[d] = shape.block[d];
  }
  config.shared_memory_bytes = shape.shared_bytes;
  std::vector<hal_kernel_arg_t> values;
  for (const Arg& arg : args) values.push_back({arg.bytes.data(), arg.size});
  const hal_kernel_t kernel = device.kernel(name);
  INFO(device.label << " " << name << ": " << hal_error_last_message());
  REQUIRE(hal_launch_kernel(kernel, &config, static_cast<uint32_t>(values.size()), values.data(),
                            device.stream) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(device.stream) == HAL_SUCCESS);
}

uint16_t reference_f32_to_f16(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (std::isnan(value)) return sign | 0x7e00;
  if (magnitude >= 65520.0) return sign | 0x7c00;  // rounds past the largest half, 65504
  std::fesetround(FE_TONEAREST);
  if (magnitude < std::ldexp(1.0, -14)) {  // subnormal: multiples of 2^-24
    return static_cast<uint16_t>(
        sign | static_cast<uint16_t>(std::nearbyint(magnitude / std::ldexp(1.0, -24))));
  }
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
  --exponent;                        // magnitude = 1.m * 2^exponent
  double mantissa = std::nearbyint((magnitude / std::ldexp(1.0, exponent) - 1.0) * 1024.0);
  if (mantissa == 1024.0) {
    mantissa = 0;
    ++exponent;
  }
  if (exponent > 15) return sign | 0x7c00;
  return static_cast<uint16_t>(sign | ((exponent + 15) << 10) | static_cast<int>(mantissa));
}

float reference_f16_to_f32(uint16_t bits) {
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 31) return mantissa != 0 ? NAN : static_cast<float>(sign * INFINITY);
  if (exponent == 0) return static_cast<float>(sign * std::ldexp(mantissa, -24));
  return static_cast<float>(sign * std::ldexp(1024 + mantissa, exponent - 25));
}

uint16_t reference_f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t down = bits & 0xffff0000u, up = down + 0x10000u;  // the two neighbours
  float low, high_float;
  std::memcpy(&low, &down, 4);
  std::memcpy(&high_float, &up, 4);
  // Past the largest bf16 the upper neighbour is infinity; IEEE rounding
  // measures to 2^128 there (what the next value would be with a wider exponent).
  const double high = std::isinf(high_float) ? std::copysign(std::ldexp(1.0, 128), high_float)
                                             : static_cast<double>(high_float);
  const double below = std::fabs(static_cast<double>(value) - low);
  const double above = std::fabs(high - value);
  const uint32_t chosen = below < above        ? down
                          : above < below      ? up
                          : ((down >> 16) & 1) ? up
                                               : down;
  return static_cast<uint16_t>(chosen >> 16);
}

float reference_bf16_to_f32(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

}  // namespace hal_test
