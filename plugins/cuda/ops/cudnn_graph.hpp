// What every cuDNN-backed op of the cuda plugin shares (convolution.cpp,
// pooling.cpp, batch_norm.cpp): backend descriptors owned by RAII, a builder
// that keeps the first failed call, HAL tensors in cuDNN's [N, C, spatial...]
// order, the graph of one operation planned twice (operands aligned to 16
// bytes, and aligned only to their element), and the execution: a variant
// pack, the device handle's stream, cudnnBackendExecute.
#ifndef HAL_PLUGINS_CUDA_OPS_CUDNN_GRAPH_HPP_
#define HAL_PLUGINS_CUDA_OPS_CUDNN_GRAPH_HPP_

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cudnn.hpp"
#include "hal_plugin.h"
#include "ops.hpp"

namespace hal::cuda {
class Device;
class Stream;

namespace ops {

inline constexpr int64_t kCudnnFastAlignment = 16;

// One tensor of an operation as cuDNN sees it.
struct DnnTensor {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int64_t element_bytes = 4;
  int rank = 0;  // 4 or 5
  std::array<int64_t, 5> dims{}, strides{};
  bool by_value = false;  // a host scalar in the variant pack (epsilon, momentum)
};

// A backend descriptor, destroyed through its library.
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(const CudnnApi* api, cudnnBackendDescriptor_t desc) : api_(api), desc_(desc) {}
  Descriptor(Descriptor&& other) noexcept
      : api_(other.api_), desc_(std::exchange(other.desc_, nullptr)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    if (this != &other) {
      reset();
      api_ = other.api_;
      desc_ = std::exchange(other.desc_, nullptr);
    }
    return *this;
  }
  ~Descriptor() { reset(); }
  cudnnBackendDescriptor_t get() const { return desc_; }

 private:
  void reset() {
    if (desc_ != nullptr) api_->cudnnBackendDestroyDescriptor(desc_);
    desc_ = nullptr;
  }
  const CudnnApi* api_ = nullptr;
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// Builds descriptors, remembering the first failure (later calls do nothing).
class Builder {
 public:
  explicit Builder(const Cudnn& dnn) : dnn_(dnn), api_(dnn.api()) {}

  Descriptor create(cudnnBackendDescriptorType_t type, const char* what);
  void set(const Descriptor& desc, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const void* values, const char* what);
  // Sets a descriptor-valued attribute to |value|.
  void set_desc(const Descriptor& desc, cudnnBackendAttributeName_t name, const Descriptor& value,
                const char* what);
  void finalize(const Descriptor& desc, const char* what);
  void get(const Descriptor& desc, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* values,
           const char* what);
  void check(cudnnStatus_t status, const char* what) {
    if (status != CUDNN_STATUS_SUCCESS && failure_status_ == CUDNN_STATUS_SUCCESS) {
      failure_status_ = status;
      failure_call_ = what;
    }
  }
  bool failed() const { return failure_status_ != CUDNN_STATUS_SUCCESS; }
  cudnnStatus_t status() const { return failure_status_; }
  void clear() {
    failure_status_ = CUDNN_STATUS_SUCCESS;
    failure_call_.clear();
  }
  std::string failure_text() const {
    return failure_call_ + " failed: " + dnn_.status_text(failure_status_);
  }

  // A finalized tensor descriptor of |t|, declared aligned to |alignment|
  // bytes (at least its element's).
  Descriptor tensor(const DnnTensor& t, int64_t alignment);

 private:
  const Cudnn& dnn_;
  const CudnnApi& api_;
  cudnnStatus_t failure_status_ = CUDNN_STATUS_SUCCESS;
  std::string failure_call_;
};

// cuDNN's type of a HAL float dtype; false for the others.
bool dnn_type(hal_dtype_t dtype, cudnnDataType_t* out, int64_t* bytes);

// HAL's activation-shaped tensor in cuDNN's dimension order: [N, C,
// spatial...] whatever |layout| (a filter [K, C/groups, k...]), with its
// strides; |spatial| 0 or 1 lifted to 2 (leading extents of 1, strided as if
// outer), so the result has rank 4 or 5. |spatial| at most 3.
DnnTensor dnn_tensor(const hal_tensor_desc_t& t, hal_channel_layout_t layout, uint32_t spatial,
                     int64_t uid);

// A per-channel tensor (rank 1 [C], any stride) as cuDNN's [1, C, 1, ...] of |rank|.
DnnTensor dnn_channel_tensor(const hal_tensor_desc_t& t, int rank, int64_t uid);

// A by-value f32 scalar ([1, 1, 1, 1]) whose host pointer goes in the variant pack.
DnnTensor dnn_scalar(int64_t uid);

// The plan of one alignment: an execution plan, its workspace, and what it
// was made of (kept alive with it).
struct Executable {
  std::vector<Descriptor> keep;
  Descriptor plan;
  int64_t workspace = 0;
  bool ok() const { return plan.get() != nullptr; }
};

// Puts |operation| (finalized, made of |parts|) in a graph of its own, asks
// the heuristic (CUDNN_HEUR_MODE_INSTANT) for engine configurations and
// takes the first allowed one that finalizes. f32 data refuses the engines
// noted TENSOR_CORE or DOWN_CONVERT_INPUTS (TF32); |deterministic| those
// noted NONDETERMINISTIC. No plan: |why| and |status| say why.
Executable plan_graph(Builder& b, cudnnHandle_t handle, Descriptor operation,
                      std::vector<Descriptor> parts, bool f32, bool deterministic, std::string& why,
                      cudnnStatus_t& status);

// The state of a cuDNN plan: the library, the device's handle, its two
// alignment variants, and the operands of the variant pack.
struct GraphState {
  virtual ~GraphState() = default;
  std::shared_ptr<const Cudnn> dnn;
  cudnnHandle_t handle = nullptr;
  Executable fast, any;
  int64_t workspace() const {
    return std::max(fast.ok() ? fast.workspace : 0, any.ok() ? any.workspace : 0);
  }
};

// One variant-pack entry: a unique id and its pointer (device memory, or a
// host scalar for a by-value tensor).
struct PackEntry {
  int64_t uid = 0;
  void* pointer = nullptr;
  bool by_value = false;
};

// Runs |state|'s plan for these pointers on |stream|: the 16-byte variant
// when every device pointer is so aligned, else the element-aligned one; the
// workspace checked against the chosen plan's. Errors reported through |device|.
hal_result_t execute_graph(Device& device, Stream& stream, const GraphState& state,
                           const std::vector<PackEntry>& entries, void* workspace,
                           size_t workspace_bytes);

// Destroys |state| with the device's context current and its handle locked:
// an execution plan may hold kernels cuDNN compiled into that context.
void destroy_graph(Device& device, std::unique_ptr<GraphState>& state);

}  // namespace ops
}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_OPS_CUDNN_GRAPH_HPP_
