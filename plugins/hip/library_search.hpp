// Where the hip plugin looks for the ROCm libraries it opens at run time:
// the HIP runtime (libamdhip64.so.7, .so.6, .so.5: ROCm 7, 6 and 5) and, from
// ROCm 6 on, hiprtc (libhiprtc.so.7, .so.6), which ROCm 5 kept inside
// libamdhip64. A ROCm install is often not on the dynamic linker's path
// (/opt/rocm-6.2.0/lib), so its directories are searched too, as the cuda
// plugin searches the toolkit's (plugins/cuda/library_search.hpp).
#ifndef HAL_PLUGINS_HIP_LIBRARY_SEARCH_HPP_
#define HAL_PLUGINS_HIP_LIBRARY_SEARCH_HPP_

#include <initializer_list>
#include <string>
#include <vector>

namespace hal::hip {

// The paths to try, in order: |variable|'s value alone when it is set (the
// user's pin); otherwise, for each soname in the order given (newest ROCm
// first), the soname as the dynamic linker finds it, then the file of that
// name in $ROCM_PATH/lib, /opt/rocm/lib and /opt/rocm-*/lib where it exists.
// Environment variables are ignored in setuid programs (hal_util/env.hpp).
std::vector<std::string> rocm_library_candidates(const char* variable,
                                                 std::initializer_list<const char*> sonames);

// "<first error>; also looked in <dirs>" for a report.
std::string rocm_searched_places(const std::string& first_error);

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_LIBRARY_SEARCH_HPP_
