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

// True when the code object |check_code_object| accepted was built for
// |arch|, a gcnArchName such as "gfx90a:sramecc+:xnack-" (for a bundle: when
// one of its GPU entries was), as its ELF header records it: the processor
// (e_flags & EF_AMDGPU_MACH) is |arch|'s, and, from code object v3 on, the
// xnack and sramecc settings are those |arch| names ('+' on, '-' off; a
// feature |arch| leaves out is "any" or unsupported). A processor this
// plugin does not know the machine number of is refused. Otherwise false
// with |why| (one phrase naming the target the image was built for).
bool code_object_is_for(const void* data, size_t size, const std::string& arch, std::string& why);

// One kernel as the code object's metadata (NT_AMDGPU_METADATA, msgpack)
// declares it: its explicit arguments' sizes (the hidden_* arguments the
// runtime fills are left out), its workgroup size limit, and the resources
// the compiler gave it (what a GPU-less register/spill report reads: the
// same figures rocprof and --save-temps' .s show).
struct KernelMetadata {
  std::string name;
  std::vector<uint32_t> arg_sizes;
  uint32_t max_flat_workgroup_size = 0;     // 0: not declared
  uint32_t group_segment_fixed_size = 0;    // static LDS bytes
  uint32_t private_segment_fixed_size = 0;  // scratch bytes per work-item (spills, local arrays)
  int64_t sgpr_count = -1, vgpr_count = -1, agpr_count = -1;  // -1: not in the metadata
  int64_t sgpr_spill_count = -1, vgpr_spill_count = -1;       // registers spilled
  uint32_t wavefront_size = 0;
};

// The kernels of a code object |check_code_object| accepted (of its first
// GPU entry for a bundle). False with |why| when it has no metadata note or
// the note is malformed; every read is bounds-checked.
bool read_kernel_metadata(const void* data, size_t size, std::vector<KernelMetadata>& out,
                          std::string& why);

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_IMAGE_HPP_
