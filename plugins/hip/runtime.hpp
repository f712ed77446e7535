// The HIP runtime as the hip plugin uses it: libamdhip64.so.5 opened at run
// time (never linked, so the plugin loads where no runtime is installed, and
// a stand-in can replace it), every entry point resolved with dlsym, and the
// names of hipError_t codes for messages.
#ifndef HAL_PLUGINS_HIP_RUNTIME_HPP_
#define HAL_PLUGINS_HIP_RUNTIME_HPP_

#include <hip/hip_runtime_api.h>

#include <memory>
#include <string>

#include "hal_plugin.h"
#include "hal_plugin_sdk/vendor_library.hpp"

namespace hal::hip {

// One pointer per runtime function the plugin calls; decltype of the
// header's declaration gives the exact signature of the 5.x ABI the plugin
// was built against (hipDeviceProp_t's layout changed in HIP 6, whose
// library is libamdhip64.so.6: the default name pins the major version).
struct RuntimeApi {
// clang-format off
#define HAL_HIP_RUNTIME_FUNCTIONS(X) \
  X(hipDriverGetVersion) X(hipGetDeviceCount) X(hipDeviceGetUuid) \
  X(hipSetDevice) X(hipDeviceSynchronize) X(hipFree) X(hipHostFree) X(hipMemcpyAsync) \
  X(hipMemsetAsync) \
  X(hipStreamCreateWithFlags) X(hipStreamDestroy) X(hipStreamSynchronize) X(hipStreamQuery) \
  X(hipStreamWaitEvent) X(hipStreamAddCallback) X(hipEventCreateWithFlags) X(hipEventDestroy) \
  X(hipEventRecord) X(hipEventQuery) X(hipEventSynchronize) X(hipEventElapsedTime) \
  X(hipModuleLoadData) X(hipModuleUnload) X(hipModuleGetFunction) X(hipFuncGetAttribute) \
  X(hipModuleLaunchKernel)
// clang-format on
#define HAL_HIP_DECLARE(name) decltype(&::name) name = nullptr;
  HAL_HIP_RUNTIME_FUNCTIONS(HAL_HIP_DECLARE)
#undef HAL_HIP_DECLARE
  // In C++ the header overloads these with templates (hipMalloc(T**, ...)),
  // so decltype cannot name them: the C signatures, written out.
  hipError_t (*hipMalloc)(void** ptr, size_t size) = nullptr;
  hipError_t (*hipHostMalloc)(void** ptr, size_t size, unsigned int flags) = nullptr;
  hipError_t (*hipMallocManaged)(void** ptr, size_t size, unsigned int flags) = nullptr;
#define HAL_HIP_OVERLOADED_FUNCTIONS(X) X(hipMalloc) X(hipHostMalloc) X(hipMallocManaged)
  // hipDeviceProp_t of the 5.x layout the plugin was built against: from
  // ROCm 6 on, whose struct differs (R0600), the library's
  // hipGetDevicePropertiesR0000 (the unversioned name a program that opens
  // the library with dlopen gets is not reliably either layout: ROCm/ROCm
  // issue 2728); with HIP 5, hipGetDeviceProperties.
  decltype(&::hipGetDeviceProperties) hipGetDeviceProperties = nullptr;
  // Optional: declared by the 5.2 header but not exported by its library
  // (stream_enqueue_host_fn then uses hipStreamAddCallback). Null when absent.
  decltype(&::hipLaunchHostFunc) hipLaunchHostFunc = nullptr;
};

// The opened runtime library. Absent (with the reason) when the amdgpu
// kernel driver's /dev/kfd is missing (then the runtime is not even loaded:
// see open()), when libamdhip64.so.5 is missing or misses an entry point.
class Runtime {
 public:
  // Checks the kernel driver's node (HAL_HIP_KFD_PATH, else /dev/kfd), then
  // opens HAL_HIP_RUNTIME_PATH, else the first of libamdhip64.so.7, .so.6,
  // .so.5 found (library_search.hpp: the dynamic linker, then the ROCm
  // directories). Loading the real
  // runtime starts the HSA runtime, which costs tens of milliseconds and
  // threads in every process that loads HAL with plugin discovery on; where
  // the kernel driver is absent that can only end in hipErrorNoDevice, so
  // it is skipped. Returns null and sets |why| when the runtime is unusable.
  static std::unique_ptr<Runtime> open(std::string& why);
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const RuntimeApi& api() const { return api_; }
  const std::string& path() const { return library_.path(); }
  void* library() const { return library_.handle(); }
  int version() const { return version_; }  // hipDriverGetVersion, e.g. 50221153

 private:
  Runtime() = default;
  hal::plugin::VendorLibrary library_;
  int version_ = 0;
  RuntimeApi api_;
};

// A hipError_t as the runtime returned it, held as its integer: a runtime (a
// newer one, a stand-in) may return a code outside the header's enum, and
// reading such a value as a hipError_t is undefined behaviour (clang's
// -fsanitize=enum reports it). A call's result goes straight into one:
// `const HipStatus result = api.hipMalloc(...)`.
using HipStatus = int;

// "hipErrorOutOfMemory (2)". The names come from the plugin's own table of
// the header's codes, never from the runtime's hipGetErrorName: HIP 5.2's
// crashes (strlen of NULL) on a code outside its enum, and a stand-in or a
// newer runtime may return one.
std::string hip_error_text(HipStatus code);

// The HAL result a hipError_t maps to when the call site knows nothing more
// specific.
hal_result_t result_of(HipStatus code);

// "HIP 5.2.21153" from hipDriverGetVersion's major * 10^7 + minor * 10^5 + patch.
std::string version_text(int version);

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_RUNTIME_HPP_
