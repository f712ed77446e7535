// The operator entries of the cpu plugin's table: matmul, convolution,
// pooling and batch norm to the oneDNN planners, every other kind to the
// native ones; what they decline goes on to the loader's portable
// implementations.
#include <memory>

#include "../device.hpp"
#include "../stream.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "ops.hpp"

namespace hal::cpu {
namespace {

ops::OpPlan* to_op_plan(hal_impl_op_plan_t* plan) {
  return reinterpret_cast<ops::OpPlan*>(plan);
}

}  // namespace

// The cpu plugin's implementation of each op kind, named before planning (the
// loader filters it first): oneDNN's primitives where the build has oneDNN,
// none of its own for group norm (no primitive before oneDNN 3.3; this
// plugin builds on 2.6), the native planners for every other kind.
const char* op_implementation(hal_impl_device_t*, hal_op_kind_t kind) {
  switch (kind) {
    case HAL_OP_MATMUL:
    case HAL_OP_CONVOLUTION:
    case HAL_OP_CONVOLUTION_BACKWARD_DATA:
    case HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS:
    case HAL_OP_POOLING:
    case HAL_OP_POOLING_BACKWARD:
    case HAL_OP_BATCH_NORM:
    case HAL_OP_BATCH_NORM_BACKWARD:
#ifdef HAL_CPU_HAS_ONEDNN
      return ops::kOneDnnName;
#else
      return nullptr;
#endif
    case HAL_OP_GROUP_NORM:
    case HAL_OP_GROUP_NORM_BACKWARD:
      return nullptr;
    default:
      return ops::kNativeName;
  }
}

// The loader asks only for a kind op_implementation names.
hal_result_t op_plan_create(hal_impl_device_t* device, const hal_op_header_t* desc,
                            hal_op_plan_flags_t flags, hal_impl_op_plan_t** out_plan,
                            size_t* out_workspace_bytes, const char** out_implementation) {
  const plugin::ErrorReporter& report = to_device(device)->report();
  return plugin::guarded(report, "op_plan_create", [&]() -> hal_result_t {
    const char* implementation = op_implementation(device, desc->kind);
    ops::Decline decline;
    std::unique_ptr<ops::OpPlan> plan;
    if (implementation == nullptr) {
      decline.reason = "the cpu plugin has no implementation of its own for this op";
#ifdef HAL_CPU_HAS_ONEDNN
    } else if (desc->kind == HAL_OP_MATMUL) {
      plan = ops::plan_matmul(*reinterpret_cast<const hal_op_matmul_desc_t*>(desc), flags, decline);
    } else if (desc->kind == HAL_OP_POOLING || desc->kind == HAL_OP_POOLING_BACKWARD) {
      plan =
          ops::plan_pooling(*reinterpret_cast<const hal_op_pooling_desc_t*>(desc), flags, decline);
    } else if (desc->kind == HAL_OP_BATCH_NORM || desc->kind == HAL_OP_BATCH_NORM_BACKWARD) {
      plan = ops::plan_batch_norm(*reinterpret_cast<const hal_op_batch_norm_desc_t*>(desc), flags,
                                  decline);
    } else if (desc->kind == HAL_OP_CONVOLUTION || desc->kind == HAL_OP_CONVOLUTION_BACKWARD_DATA ||
               desc->kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS) {
      plan = ops::plan_convolution(*reinterpret_cast<const hal_op_convolution_desc_t*>(desc), flags,
                                   decline);
#endif
    } else {
      plan = ops::plan_native(*desc, flags, decline);
    }
    if (!plan) return report.fail_message(HAL_ERROR_UNSUPPORTED, 0, decline.reason);
    *out_workspace_bytes = plan->workspace_bytes();
    *out_implementation = implementation;
    *out_plan = reinterpret_cast<hal_impl_op_plan_t*>(plan.release());
    return HAL_SUCCESS;
  });
}

hal_result_t op_plan_destroy(hal_impl_op_plan_t* plan) {
  std::unique_ptr<ops::OpPlan> owned(to_op_plan(plan));
  return HAL_SUCCESS;
}

hal_result_t op_execute(hal_impl_op_plan_t* plan, hal_impl_stream_t* stream,
                        const hal_op_exec_args_t* args) {
  Stream& target = *to_stream(stream);
  return plugin::guarded(target.device().report(), "op_execute",
                         [&] { return to_op_plan(plan)->enqueue(target, *args); });
}

}  // namespace hal::cpu
