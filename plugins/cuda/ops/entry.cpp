// The operator entries of the cuda plugin's table (hal_plugin_sdk/entries.hpp)
// plan here: matmul to the cuBLASLt planner, the convolution, pooling and
// batch-norm kinds to the cuDNN planners; every other kind is declined (no
// native kernel yet), so the loader's portable implementations serve it.
#include <memory>

#include "../device.hpp"
#include "hal_util/names.hpp"
#include "ops.hpp"

namespace hal::cuda::ops {

hal_result_t OpPlan::create(Device& owner, const hal_op_header_t& desc, hal_op_plan_flags_t flags,
                            std::unique_ptr<OpPlan>& out_plan, size_t& out_workspace_bytes,
                            const char*& out_implementation) {
  const plugin::ErrorReporter& report = owner.report();
#if HAL_CUDA_HAVE_CUDNN
  if (is_cudnn_kind(desc.kind)) {
    Planned planned =
        is_convolution(desc.kind)
            ? plan_convolution(owner, reinterpret_cast<const hal_op_convolution_desc_t&>(desc),
                               flags)
        : desc.kind == HAL_OP_POOLING || desc.kind == HAL_OP_POOLING_BACKWARD
            ? plan_pooling(owner, reinterpret_cast<const hal_op_pooling_desc_t&>(desc), flags)
            : plan_batch_norm(owner, reinterpret_cast<const hal_op_batch_norm_desc_t&>(desc),
                              flags);
    if (planned.result == HAL_ERROR_UNSUPPORTED) {
      return report.fail_message(HAL_ERROR_UNSUPPORTED, planned.native_code,
                                 "cuDNN: " + planned.reason);
    }
    if (planned.result != HAL_SUCCESS) return planned.result;
    out_workspace_bytes = planned.workspace_bytes;
    out_implementation = kCudnnName;
    out_plan = std::move(planned.plan);
    return HAL_SUCCESS;
  }
#endif
  if (desc.kind != HAL_OP_MATMUL) {
    return report.fail(HAL_ERROR_UNSUPPORTED, 0,
                       "%s has no native implementation in the cuda plugin yet",
                       hal::util::op_kind_name(desc.kind));
  }
  Planned planned = plan_matmul(owner, reinterpret_cast<const hal_op_matmul_desc_t&>(desc), flags);
  if (planned.result == HAL_ERROR_UNSUPPORTED) {
    return report.fail_message(HAL_ERROR_UNSUPPORTED, planned.native_code,
                               "cuBLASLt: " + planned.reason);
  }
  if (planned.result != HAL_SUCCESS) return planned.result;  // reported by the planner
  out_workspace_bytes = planned.workspace_bytes;
  out_implementation = kCublasLtName;
  out_plan = std::move(planned.plan);
  return HAL_SUCCESS;
}

}  // namespace hal::cuda::ops
