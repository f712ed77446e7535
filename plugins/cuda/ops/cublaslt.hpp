// cuBLASLt as the cuda plugin uses it: libcublasLt.so.13 opened with dlopen
// at the first matmul plan on a cuda device (HAL_CUDA_CUBLASLT_PATH, else the
// library's soname), never linked and never opened at plugin load, so the
// plugin loads everywhere and the library costs nothing until an operator
// needs it. One handle per device, created on first use with the device's
// context current.
#ifndef HAL_PLUGINS_CUDA_OPS_CUBLASLT_HPP_
#define HAL_PLUGINS_CUDA_OPS_CUBLASLT_HPP_

#include <cublasLt.h>

#include <memory>
#include <mutex>
#include <string>

#include "hal_plugin.h"
#include "hal_plugin_sdk/vendor_library.hpp"
#include "vendor_handle.hpp"

namespace hal::cuda {

class Device;

namespace ops {

// One pointer per cuBLASLt function the plugin calls, typed by the header's
// declaration (the library exports these names unversioned).
struct CublasLtApi {
// clang-format off
#define HAL_CUBLASLT_FUNCTIONS(X) \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate) \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)
// clang-format on
#define HAL_CUBLASLT_DECLARE(name) decltype(&::name) name = nullptr;
  HAL_CUBLASLT_FUNCTIONS(HAL_CUBLASLT_DECLARE)
  // Optional: names a status; the plugin's own table serves without it.
  decltype(&::cublasLtGetStatusName) cublasLtGetStatusName = nullptr;
#undef HAL_CUBLASLT_DECLARE
};

// The opened library, pinned for the process once accepted (VendorLibrary): cuBLASLt keeps CUDA
// runtime state that is not built to be unloaded while the driver stays loaded (as the driver
// itself, driver.cpp), and plans may outlive the plugin context.
class CublasLt {
 public:
  using Handle = cublasLtHandle_t;
  using Status = cublasStatus_t;
  static constexpr Status kSuccess = CUBLAS_STATUS_SUCCESS;
  static constexpr const char* kCreateName = "cublasLtCreate";

  // Opens HAL_CUDA_CUBLASLT_PATH or libcublasLt.so.13. Null, with |why|
  // ("libcublasLt.so.13 not found: <dlerror>"), when absent or incomplete.
  static std::shared_ptr<const CublasLt> open(std::string& why);

  const CublasLtApi& api() const { return api_; }
  const std::string& path() const { return library_.path(); }
  size_t version() const { return version_; }  // cublasLtGetVersion, e.g. 130000

  // "CUBLAS_STATUS_NOT_SUPPORTED (15)": the library's name when it has one,
  // else the plugin's table.
  std::string status_text(cublasStatus_t status) const;

  Status create_handle(Handle* out) const { return api_.cublasLtCreate(out); }
  void destroy_handle(Handle handle) const { api_.cublasLtDestroy(handle); }

 private:
  CublasLt() = default;
  hal::plugin::VendorLibrary library_;  // pinned once accepted
  size_t version_ = 0;
  CublasLtApi api_;
};

// The plugin's cuBLASLt, and one device's handle of it, created at the first
// matmul plan on the device (vendor_handle.hpp).
using CublasLtLoader = LibraryLoader<CublasLt>;
using DeviceBlas = DeviceHandle<CublasLt>;

// The HAL result of a failed cuBLASLt call at execution.
hal_result_t result_of(cublasStatus_t status);

}  // namespace ops
}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_OPS_CUBLASLT_HPP_
