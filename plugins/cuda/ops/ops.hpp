// The cuda plugin's own operators (the operator entries of api/hal/plugin_v1.h),
// tried by the loader before its portable ones: HAL_OP_MATMUL on cuBLASLt
// ("cuda.cublaslt"), the three convolution kinds, pooling and batch norm on
// cuDNN ("cuda.cudnn", when the plugin was built with cuDNN's headers). Every other op, and every
// case the vendor library cannot express, is declined with HAL_ERROR_UNSUPPORTED and a sentence
// saying why, and the loader's portable implementation serves it.
#ifndef HAL_PLUGINS_CUDA_OPS_OPS_HPP_
#define HAL_PLUGINS_CUDA_OPS_OPS_HPP_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "hal_plugin.h"

namespace hal::cuda {

class Device;
class Stream;

namespace ops {

// The name hal_op_plan_get_info reports for the plans served here.
inline constexpr char kCublasLtName[] = "cuda.cublaslt";
inline constexpr char kCudnnName[] = "cuda.cudnn";

// Whether |kind| is one of the convolution kinds cuDNN serves.
inline bool is_convolution(hal_op_kind_t kind) {
  return kind == HAL_OP_CONVOLUTION || kind == HAL_OP_CONVOLUTION_BACKWARD_DATA ||
         kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS;
}

// Whether cuDNN serves |kind| (convolution, pooling, batch norm) where the
// plugin was built with its headers.
inline bool is_cudnn_kind(hal_op_kind_t kind) {
  return is_convolution(kind) || kind == HAL_OP_POOLING || kind == HAL_OP_POOLING_BACKWARD ||
         kind == HAL_OP_BATCH_NORM || kind == HAL_OP_BATCH_NORM_BACKWARD;
}

// A planned operator. Executions enqueue device work that needs nothing of
// the plan once the enqueue returned, so a plan may be destroyed at any time.
class OpPlan {
 public:
  // op_plan_create (ops/entry.cpp): matmul to the cuBLASLt planner; every
  // other kind is declined (HAL_ERROR_UNSUPPORTED, with the sentence why).
  static hal_result_t create(Device& device, const hal_op_header_t& desc, hal_op_plan_flags_t flags,
                             std::unique_ptr<OpPlan>& out_plan, size_t& out_workspace_bytes,
                             const char*& out_implementation);
  // The implementation create uses for |kind|, named before any planning:
  // cuBLASLt for matmul, cuDNN for convolution, none of the plugin's own
  // for the other kinds.
  static const char* implementation(hal_op_kind_t kind) {
    if (kind == HAL_OP_MATMUL) return kCublasLtName;
#if HAL_CUDA_HAVE_CUDNN
    if (is_cudnn_kind(kind)) return kCudnnName;
#endif
    return nullptr;
  }
  virtual ~OpPlan() = default;
  // Enqueues one execution on |stream|; the loader checked |args|.
  virtual hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const = 0;
};

// The outcome of planning: a plan, or a decline (HAL_ERROR_UNSUPPORTED and
// |reason|, with cuBLASLt's status as |native_code| where it said no), or
// another failure already reported through the device.
struct Planned {
  hal_result_t result = HAL_ERROR_UNSUPPORTED;
  std::unique_ptr<OpPlan> plan;
  size_t workspace_bytes = 0;
  std::string reason;
  int64_t native_code = 0;
};

// A plan that declines, with its reason (and the vendor library's status code).
inline Planned decline(std::string reason, int64_t native_code = 0) {
  Planned planned;
  planned.result = HAL_ERROR_UNSUPPORTED;
  planned.reason = std::move(reason);
  planned.native_code = native_code;
  return planned;
}

// Plans HAL_OP_MATMUL on cublasLtMatmul.
Planned plan_matmul(Device& device, const hal_op_matmul_desc_t& desc, hal_op_plan_flags_t flags);

#if HAL_CUDA_HAVE_CUDNN
// Plans the convolution kinds on cuDNN's graph API (convolution.cpp).
Planned plan_convolution(Device& device, const hal_op_convolution_desc_t& desc,
                         hal_op_plan_flags_t flags);
// Pooling on cuDNN's resample operations (pooling.cpp).
Planned plan_pooling(Device& device, const hal_op_pooling_desc_t& desc, hal_op_plan_flags_t flags);
// Batch norm in training on cuDNN's norm operations (batch_norm.cpp).
Planned plan_batch_norm(Device& device, const hal_op_batch_norm_desc_t& desc,
                        hal_op_plan_flags_t flags);
#endif

}  // namespace ops

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_OPS_OPS_HPP_
