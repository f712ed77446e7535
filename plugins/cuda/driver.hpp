// The CUDA Driver API as the cuda plugin uses it: libcuda.so.1 opened at run
// time (never linked, so the plugin loads where no driver is installed), every
// entry point resolved through cuGetProcAddress, and the names of CUresult
// codes for messages (the driver's own cuGetErrorName when it has one).
#ifndef HAL_PLUGINS_CUDA_DRIVER_HPP_
#define HAL_PLUGINS_CUDA_DRIVER_HPP_

#include <cuda.h>

#include <memory>
#include <string>

#include "hal_plugin.h"
#include "hal_plugin_sdk/vendor_library.hpp"

namespace hal::cuda {

// One pointer per driver function the plugin calls. decltype of the header's
// declaration gives the exact signature of the version the header maps the
// name to (cuMemAlloc -> cuMemAlloc_v2), which is the version
// cuGetProcAddress returns for CUDA_VERSION.
struct DriverApi {
// clang-format off
#define HAL_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuDeviceGetCount) X(cuDeviceGet) \
  X(cuDeviceGetName) X(cuDeviceGetUuid) X(cuDeviceTotalMem) X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent) X(cuCtxSetCurrent) \
  X(cuMemGetInfo) X(cuPointerGetAttribute) X(cuStreamWaitValue32) \
  X(cuCtxSynchronize) X(cuMemAlloc) X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost) \
  X(cuMemAllocManaged) X(cuMemcpyAsync) X(cuMemsetD8Async) X(cuStreamCreate) X(cuStreamDestroy) \
  X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamWaitEvent) X(cuLaunchHostFunc) \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) \
  X(cuEventElapsedTime) X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction) \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel)
// clang-format on
#define HAL_CUDA_DECLARE(name) decltype(&::name) name = nullptr;
  HAL_CUDA_DRIVER_FUNCTIONS(HAL_CUDA_DECLARE)
  // Optional (CUDA 12.4+ drivers): null when the driver lacks them.
#define HAL_CUDA_OPTIONAL_FUNCTIONS(X) X(cuFuncGetParamInfo)
  HAL_CUDA_OPTIONAL_FUNCTIONS(HAL_CUDA_DECLARE)
#undef HAL_CUDA_DECLARE
};

// The opened driver library. Absent (with the reason) when libcuda.so.1 is
// missing, lacks cuGetProcAddress, misses an entry point, or cuInit fails.
class Driver {
 public:
  // Opens |path| (HAL_CUDA_DRIVER_PATH when set, else "libcuda.so.1") and
  // calls cuInit(0). Returns null and sets |why| when the driver is unusable.
  static std::unique_ptr<Driver> open(std::string& why);
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  const DriverApi& api() const { return api_; }
  const std::string& path() const { return library_.path(); }
  int version() const { return version_; }  // cuDriverGetVersion, e.g. 13000

 private:
  Driver() = default;
  hal::plugin::VendorLibrary library_;
  int version_ = 0;
  DriverApi api_;
};

// "CUDA_ERROR_OUT_OF_MEMORY (2)". |api| may be null (or lack cuGetErrorName):
// the plugin's own table names the codes it knows, since the driver's stub
// library leaves the name NULL.
std::string cu_error_text(const DriverApi* api, CUresult code);

// The HAL result a CUresult maps to when the call site knows nothing more
// specific.
hal_result_t result_of(CUresult code);

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_DRIVER_HPP_
