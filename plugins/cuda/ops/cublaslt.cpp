#include "cublaslt.hpp"

#include <string>

#include "../library_search.hpp"

namespace hal::cuda::ops {
namespace {

constexpr char kDefaultLibrary[] = "libcublasLt.so.13";

// The statuses of cublas_api.h by name, for a library without
// cublasLtGetStatusName (or one answering NULL).
const char* known_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return nullptr;
  }
}

}  // namespace

std::shared_ptr<const CublasLt> CublasLt::open(std::string& why) {
  std::shared_ptr<CublasLt> lt(new CublasLt());
  if (!open_first_candidate(lt->library_, "HAL_CUDA_CUBLASLT_PATH",
                            {kDefaultLibrary, "libcublasLt.so.12"}, why)) {
    return nullptr;
  }
  const std::string path = lt->library_.path();
  CublasLtApi& api = lt->api_;
  std::string missing;
#define HAL_CUBLASLT_RESOLVE(name)                                             \
  api.name = reinterpret_cast<decltype(api.name)>(lt->library_.symbol(#name)); \
  if (api.name == nullptr && missing.empty()) missing = #name;
  HAL_CUBLASLT_FUNCTIONS(HAL_CUBLASLT_RESOLVE)
#undef HAL_CUBLASLT_RESOLVE
  api.cublasLtGetStatusName = reinterpret_cast<decltype(api.cublasLtGetStatusName)>(
      lt->library_.symbol("cublasLtGetStatusName"));
  if (!missing.empty()) {
    why = path + " has no " + missing + ": not a cuBLASLt of CUDA 11 or later";
    return nullptr;  // closed again: nothing of it was used
  }
  lt->library_.pin();
  lt->version_ = api.cublasLtGetVersion();
  return lt;
}

std::string CublasLt::status_text(cublasStatus_t status) const {
  const char* name =
      api_.cublasLtGetStatusName != nullptr ? api_.cublasLtGetStatusName(status) : nullptr;
  // A library may answer an unknown code with a placeholder; prefer ours then.
  if (name == nullptr || name[0] == '\0') name = known_name(status);
  if (name == nullptr) name = "cuBLAS status";
  return std::string(name) + " (" + std::to_string(static_cast<int>(status)) + ")";
}

hal_result_t result_of(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return HAL_SUCCESS;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return HAL_ERROR_OUT_OF_MEMORY;
    case CUBLAS_STATUS_INVALID_VALUE:
      return HAL_ERROR_INVALID_ARGUMENT;
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return HAL_ERROR_UNSUPPORTED;
    case CUBLAS_STATUS_EXECUTION_FAILED:
    case CUBLAS_STATUS_MAPPING_ERROR:
      return HAL_ERROR_DEVICE_LOST;  // a kernel failed to launch or to reach its memory
    default:
      return HAL_ERROR_INTERNAL;
  }
}

}  // namespace hal::cuda::ops
