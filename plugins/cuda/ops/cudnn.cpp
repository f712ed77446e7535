#include "cudnn.hpp"

#include <string>

#include "../library_search.hpp"

namespace hal::cuda::ops {
namespace {

constexpr char kDefaultLibrary[] = "libcudnn.so.9";
// cudnnGetVersion is major * 10000 + minor * 100 + patch from cuDNN 9 on
// (cuDNN 8 used major * 1000: 8907 for 8.9.7).
constexpr size_t kFirstVersion = 90000;

}  // namespace

std::shared_ptr<const Cudnn> Cudnn::open(std::string& why) {
  std::shared_ptr<Cudnn> dnn(new Cudnn());
  if (!open_first_candidate(dnn->library_, "HAL_CUDA_CUDNN_PATH", {kDefaultLibrary}, why)) {
    return nullptr;
  }
  const std::string path = dnn->library_.path();
  CudnnApi& api = dnn->api_;
  std::string missing;
#define HAL_CUDNN_RESOLVE(name)                                                 \
  api.name = reinterpret_cast<decltype(api.name)>(dnn->library_.symbol(#name)); \
  if (api.name == nullptr && missing.empty()) missing = #name;
  HAL_CUDNN_FUNCTIONS(HAL_CUDNN_RESOLVE)
#undef HAL_CUDNN_RESOLVE
  if (!missing.empty()) {
    why = path + " has no " + missing + ": not a cuDNN with the graph API";
    return nullptr;
  }
  const size_t version = api.cudnnGetVersion();
  if (version < kFirstVersion) {
    why = path + " is cuDNN version " + std::to_string(version) + "; the plugin needs cuDNN 9";
    return nullptr;
  }
  dnn->library_.pin();
  dnn->version_ = version;
  return dnn;
}

std::string Cudnn::status_text(cudnnStatus_t status) const {
  const char* name = api_.cudnnGetErrorString(status);
  if (name == nullptr || name[0] == '\0') name = "cuDNN status";
  return std::string(name) + " (" + std::to_string(static_cast<int>(status)) + ")";
}

// cuDNN 9 groups its statuses by thousands (cudnn_graph.h, cudnnStatus_t):
// 1xxx not initialized, 2xxx bad parameter, 3xxx not supported, 4xxx
// internal error, 5xxx execution failed.
hal_result_t result_of(cudnnStatus_t status) {
  const int code = static_cast<int>(status);
  if (code == 0) return HAL_SUCCESS;
  if (code == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED) return HAL_ERROR_OUT_OF_MEMORY;
  switch (code / 1000) {
    case 2:
      return HAL_ERROR_INVALID_ARGUMENT;
    case 3:
      return HAL_ERROR_UNSUPPORTED;
    case 5:
      return HAL_ERROR_DEVICE_LOST;  // a kernel failed to launch or to finish
    default:
      return HAL_ERROR_INTERNAL;
  }
}

}  // namespace hal::cuda::ops
