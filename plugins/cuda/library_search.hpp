// Where the cuda plugin looks for the vendor libraries it opens at run time
// (NVRTC, cuBLASLt, NCCL): a CUDA install does not always put them on the
// dynamic linker's path. PyTorch's CUDA wheels, for one, ship them under
// site-packages/nvidia/<package>/lib (nvidia/cuda_nvrtc/lib, nvidia/cublas/lib,
// nvidia/nccl/lib for CUDA 12; nvidia/cu13/lib for CUDA 13).
#ifndef HAL_PLUGINS_CUDA_LIBRARY_SEARCH_HPP_
#define HAL_PLUGINS_CUDA_LIBRARY_SEARCH_HPP_

#include <initializer_list>
#include <string>
#include <vector>

#include "hal_plugin_sdk/vendor_library.hpp"

namespace hal::cuda {

// The paths to try, in order: |variable|'s value alone when it is set (the
// user's pin: nothing else is tried); otherwise each soname as the dynamic
// linker finds it (LD_LIBRARY_PATH, the ldconfig cache, a copy already loaded
// by the process), then each soname in the toolkit's directories
// ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda: lib64 and targets/*/lib) and in
// the Python wheels' nvidia/*/lib directories (of $VIRTUAL_ENV, $CONDA_PREFIX,
// ~/.local and the system's pythons), where the file exists. Environment
// variables are ignored in setuid programs (hal_util/env.hpp).
std::vector<std::string> library_candidates(const char* variable,
                                            std::initializer_list<const char*> sonames);

// "libnvrtc.so.13: not found (dlerror); also looked in <dirs>" for a report.
std::string searched_places(const std::string& first_error);

// Opens the first of library_candidates(|variable|, |sonames|) that loads into
// |library|. False when none does, with |why|: the pinned path's own error
// when |variable| is set, else searched_places of the first error.
bool open_first_candidate(hal::plugin::VendorLibrary& library, const char* variable,
                          std::initializer_list<const char*> sonames, std::string& why);

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_LIBRARY_SEARCH_HPP_
