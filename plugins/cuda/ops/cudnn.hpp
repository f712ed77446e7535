// cuDNN as the cuda plugin uses it: libcudnn.so.9 opened with dlopen at the
// first convolution plan on a cuda device (HAL_CUDA_CUDNN_PATH, else the
// soname in the places library_search.hpp names), never linked and never
// opened at plugin load, as cuBLASLt (cublaslt.hpp).
//
// The plugin speaks cuDNN 9's graph ("backend") API, cudnn_graph.h: opaque
// descriptors built with cudnnBackendCreateDescriptor / SetAttribute /
// Finalize, an operation graph, the engine heuristic's configurations, an
// execution plan, and cudnnBackendExecute with a variant pack. cuDNN 9 marks
// the legacy per-op API (cudnnConvolutionForward, cudnnPoolingForward,
// cudnnBatchNormalization*: cudnn_cnn.h, cudnn_ops.h) deprecated, to be
// removed in a later major version; the graph API is the supported one, and
// it also says what HAL's descriptors say and the legacy API cannot
// (asymmetric padding: PRE_PADDINGS and POST_PADDINGS). cuDNN 8 had the
// same graph API but other sonames and sub-libraries: 9 only.
#ifndef HAL_PLUGINS_CUDA_OPS_CUDNN_HPP_
#define HAL_PLUGINS_CUDA_OPS_CUDNN_HPP_

#include <cudnn_graph.h>

#include <memory>
#include <mutex>
#include <string>

#include "hal_plugin.h"
#include "hal_plugin_sdk/vendor_library.hpp"
#include "vendor_handle.hpp"

namespace hal::cuda {

class Device;

namespace ops {

// One pointer per cuDNN function the plugin calls, typed by the header.
struct CudnnApi {
// clang-format off
#define HAL_CUDNN_FUNCTIONS(X) \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) \
  X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendFinalize) \
  X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute) X(cudnnBackendExecute)
// clang-format on
#define HAL_CUDNN_DECLARE(name) decltype(&::name) name = nullptr;
  HAL_CUDNN_FUNCTIONS(HAL_CUDNN_DECLARE)
#undef HAL_CUDNN_DECLARE
};

// The opened library, pinned for the process once accepted (as cuBLASLt:
// cuDNN keeps CUDA runtime state that is not built to be unloaded).
class Cudnn {
 public:
  using Handle = cudnnHandle_t;
  using Status = cudnnStatus_t;
  static constexpr Status kSuccess = CUDNN_STATUS_SUCCESS;
  static constexpr const char* kCreateName = "cudnnCreate";

  // Opens HAL_CUDA_CUDNN_PATH or libcudnn.so.9. Null, with |why|, when
  // absent, incomplete or not cuDNN 9.
  static std::shared_ptr<const Cudnn> open(std::string& why);

  const CudnnApi& api() const { return api_; }
  const std::string& path() const { return library_.path(); }
  size_t version() const { return version_; }  // cudnnGetVersion, e.g. 91900

  // "CUDNN_STATUS_NOT_SUPPORTED (3000)".
  std::string status_text(cudnnStatus_t status) const;

  Status create_handle(Handle* out) const { return api_.cudnnCreate(out); }
  void destroy_handle(Handle handle) const { api_.cudnnDestroy(handle); }

 private:
  Cudnn() = default;
  hal::plugin::VendorLibrary library_;
  size_t version_ = 0;
  CudnnApi api_;
};

// The plugin's cuDNN (vendor_handle.hpp).
using CudnnLoader = LibraryLoader<Cudnn>;

// One device's cuDNN handle, created at the first plan that needs it. A
// handle carries one stream (cudnnSetStream), so every execution on the
// device sets its stream and runs under lock().
class DeviceDnn : public DeviceHandle<Cudnn> {
 public:
  using DeviceHandle::DeviceHandle;

  // Held from cudnnSetStream to the end of the call that uses the stream.
  std::unique_lock<std::mutex> lock() const { return std::unique_lock(execute_mutex_); }

 private:
  mutable std::mutex execute_mutex_;
};

// The HAL result of a failed cuDNN call at execution.
hal_result_t result_of(cudnnStatus_t status);

}  // namespace ops
}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_OPS_CUDNN_HPP_
