// Checks of a HAL_MODULE_FORMAT_HSACO image before the runtime reads it, and
// the kernels its metadata declares. hipModuleLoadData takes no size and
// trusts the offsets inside the image, so a truncated or forged one would
// make it read past the caller's buffer.
#ifndef HAL_PLUGINS_HIP_IMAGE_HPP_
#define HAL_PLUGINS_HIP_IMAGE_HPP_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hal::hip {

// True when |data| (|size| bytes) is an AMD GPU code object (a 64-bit
// little-endian ELF for EM_AMDGPU whose header tables, segments and sections
// lie inside |size|) or a clang offload bundle ("__CLANG_OFFLOAD_BUNDLE__")
// whose entries lie inside |size| and whose GPU entries are such code
// objects. Otherwise false with |why| (one phrase).
bool check_code_object(const void* data, size_t size, std::string& why);

// One kernel as the code object's metadata (NT_AMDGPU_METADATA, msgpack)
// declares it: its explicit arguments' sizes (the hidden_* arguments the
// runtime fills are left out) and its workgroup size limit.
struct KernelMetadata {
  std::string name;
  std::vector<uint32_t> arg_sizes;
  uint32_t max_flat_workgroup_size = 0;  // 0: not declared
  uint32_t group_segment_fixed_size = 0;
};

// The kernels of a code object |check_code_object| accepted (of its first
// GPU entry for a bundle). False with |why| when it has no metadata note or
// the note is malformed; every read is bounds-checked.
bool read_kernel_metadata(const void* data, size_t size, std::vector<KernelMetadata>& out,
                          std::string& why);

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_IMAGE_HPP_
