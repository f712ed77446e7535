#include "cublaslt.hpp"

#include <string>
#include <vector>

#include "../device.hpp"
#include "../library_search.hpp"
#include "hal_util/env.hpp"

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
  const std::vector<std::string> candidates =
      library_candidates("HAL_CUDA_CUBLASLT_PATH", {kDefaultLibrary, "libcublasLt.so.12"});
  std::string first_error;
  for (const std::string& candidate : candidates) {
    if (lt->library_.open(candidate, why)) break;
    if (first_error.empty()) first_error = why;
  }
  if (lt->library_.handle() == nullptr) {
    why = candidates.size() == 1 && hal::util::env_nonempty("HAL_CUDA_CUBLASLT_PATH") != nullptr
              ? first_error
              : searched_places(first_error);
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

std::shared_ptr<const CublasLt> CublasLtLoader::get(std::string& why) {
  std::lock_guard lock(mutex_);
  if (!tried_) {
    tried_ = true;
    lt_ = CublasLt::open(why_);
  }
  if (!lt_) why = why_;
  return lt_;
}

DeviceBlas::~DeviceBlas() {
  std::lock_guard lock(mutex_);
  if (handle_ != nullptr) lt_->api().cublasLtDestroy(handle_);
}

cublasLtHandle_t DeviceBlas::handle(Device& device, std::shared_ptr<const CublasLt>* out_lt,
                                    std::string& why, cublasStatus_t* out_status) {
  std::lock_guard lock(mutex_);
  *out_status = CUBLAS_STATUS_SUCCESS;
  if (handle_ != nullptr) {
    *out_lt = lt_;
    return handle_;
  }
  std::shared_ptr<const CublasLt> lt = loader_.get(why);
  if (!lt) return nullptr;
  const ContextScope bound = device.bind();
  if (!bound.ok()) {
    why = "cuCtxSetCurrent failed: " + cu_error_text(&device.api(), bound.result());
    return nullptr;
  }
  cublasLtHandle_t created = nullptr;
  if (const cublasStatus_t status = lt->api().cublasLtCreate(&created);
      status != CUBLAS_STATUS_SUCCESS) {
    *out_status = status;
    why = "cublasLtCreate failed: " + lt->status_text(status);
    return nullptr;
  }
  lt_ = std::move(lt);
  handle_ = created;
  *out_lt = lt_;
  return handle_;
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
