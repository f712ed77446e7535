// Bounds checks of a HAL_MODULE_FORMAT_CUBIN image before the driver reads
// it: cuModuleLoadData takes no size and trusts the offsets inside the image,
// so a truncated or forged one would make it read past the caller's buffer.
#ifndef HAL_PLUGINS_CUDA_IMAGE_HPP_
#define HAL_PLUGINS_CUDA_IMAGE_HPP_

#include <cstddef>
#include <string>

namespace hal::cuda {

// True when |data| (|size| bytes) is a cubin (a 64-bit little-endian ELF for
// EM_CUDA whose header tables, segments and sections lie inside |size|) or a
// fatbin (its header's declared size lies inside |size|). Otherwise false
// with |why| (one phrase).
bool check_binary_image(const void* data, size_t size, std::string& why);

// The real architecture a cubin was built for (90 for sm_90), read from its
// ELF header's e_flags as cuobjdump does: bits 8..15 in the ELF ABI version 8
// cubins of CUDA 13 (NVRTC 13.0 writes e_flags 0x6005a04 for sm_90), bits
// 0..7 before. 0 when |data| is not a cubin whose check passes.
int cubin_arch(const void* data, size_t size);

// True when |data| (|size| bytes) reads as PTX text: no NUL byte (the driver
// would stop reading there), a `.version` directive before any other, and a
// `.target` directive, whose first target (`sm_90`) goes to |target|.
// Otherwise false with |why| (one phrase). The kernel cache checks an entry
// with it before the driver sees one (the driver's own parse of a PTX the
// caller passes gives its CUresult instead).
bool check_ptx_text(const void* data, size_t size, std::string& target, std::string& why);

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_IMAGE_HPP_
