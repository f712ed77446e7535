#include "names.hpp"

namespace halconform {
namespace {

struct NamedBit {
  uint32_t bit;
  const char* name;
};

constexpr NamedBit kCapabilities[] = {
    {HAL_DEVICE_CAP_KERNELS, "HAL_DEVICE_CAP_KERNELS"},
    {HAL_DEVICE_CAP_EVENT_TIMING, "HAL_DEVICE_CAP_EVENT_TIMING"},
    {HAL_DEVICE_CAP_HOST_CALLBACKS, "HAL_DEVICE_CAP_HOST_CALLBACKS"},
    {HAL_DEVICE_CAP_HOST_MEMORY, "HAL_DEVICE_CAP_HOST_MEMORY"},
    {HAL_DEVICE_CAP_SHARED_MEMORY, "HAL_DEVICE_CAP_SHARED_MEMORY"},
    {HAL_DEVICE_CAP_UNIFIED_ADDRESSING, "HAL_DEVICE_CAP_UNIFIED_ADDRESSING"},
    {HAL_DEVICE_CAP_PEER_ACCESS, "HAL_DEVICE_CAP_PEER_ACCESS"},
    {HAL_DEVICE_CAP_STREAM_QUERY, "HAL_DEVICE_CAP_STREAM_QUERY"},
};

constexpr NamedBit kModuleFormats[] = {
    {1u << HAL_MODULE_FORMAT_CPU_SHARED_OBJECT, "HAL_MODULE_FORMAT_CPU_SHARED_OBJECT"},
    {1u << HAL_MODULE_FORMAT_OPENCL_C, "HAL_MODULE_FORMAT_OPENCL_C"},
    {1u << HAL_MODULE_FORMAT_SPIRV, "HAL_MODULE_FORMAT_SPIRV"},
    {1u << HAL_MODULE_FORMAT_PTX, "HAL_MODULE_FORMAT_PTX"},
    {1u << HAL_MODULE_FORMAT_CUBIN, "HAL_MODULE_FORMAT_CUBIN"},
    {1u << HAL_MODULE_FORMAT_HSACO, "HAL_MODULE_FORMAT_HSACO"},
};

template <size_t N>
std::string join_bits(uint32_t bits, const NamedBit (&table)[N]) {
  std::string names;
  for (const NamedBit& entry : table) {
    if ((bits & entry.bit) == 0) continue;
    if (!names.empty()) names += "|";
    names += entry.name;
    bits &= ~entry.bit;
  }
  if (bits != 0) names += (names.empty() ? "" : "|") + std::to_string(bits);
  return names.empty() ? "none" : names;
}

}  // namespace

std::string capability_names(hal_device_caps_t capabilities) {
  return join_bits(capabilities, kCapabilities);
}

std::string module_format_names(uint32_t formats) {
  return join_bits(formats, kModuleFormats);
}

const char* device_type_name(hal_device_type_t type) {
  switch (type) {
    case HAL_DEVICE_TYPE_CPU:
      return "cpu";
    case HAL_DEVICE_TYPE_GPU:
      return "gpu";
    case HAL_DEVICE_TYPE_ACCELERATOR:
      return "accelerator";
    default:
      return "unknown";
  }
}

std::string version_string(uint32_t version) {
  return std::to_string(HAL_VERSION_MAJOR(version)) + "." +
         std::to_string(HAL_VERSION_MINOR(version)) + "." +
         std::to_string(HAL_VERSION_PATCH(version));
}

}  // namespace halconform
