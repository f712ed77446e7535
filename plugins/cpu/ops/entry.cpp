// The operator entries of the cpu plugin's table: matmul to the oneDNN
// planner, every other kind to the native ones; what they decline goes on
// to the loader's portable implementations.
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

hal_result_t op_plan_create(hal_impl_device_t* device, const hal_op_header_t* desc,
                            hal_op_plan_flags_t flags, hal_impl_op_plan_t** out_plan,
                            size_t* out_workspace_bytes, const char** out_implementation) {
  const plugin::ErrorReporter& report = to_device(device)->report();
  return plugin::guarded(report, "op_plan_create", [&]() -> hal_result_t {
    ops::Decline decline;
    std::unique_ptr<ops::OpPlan> plan;
    const char* implementation = ops::kNativeName;
    if (desc->kind == HAL_OP_MATMUL) {
#ifdef HAL_CPU_HAS_ONEDNN
      plan = ops::plan_matmul(*reinterpret_cast<const hal_op_matmul_desc_t*>(desc), flags, decline);
      implementation = ops::kOneDnnName;
#else
      decline.reason = "matmul needs oneDNN, which this build of the plugin lacks";
#endif
    } else if (desc->kind == HAL_OP_CONVOLUTION || desc->kind == HAL_OP_CONVOLUTION_BACKWARD_DATA ||
               desc->kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS || desc->kind == HAL_OP_POOLING ||
               desc->kind == HAL_OP_POOLING_BACKWARD || desc->kind == HAL_OP_BATCH_NORM ||
               desc->kind == HAL_OP_BATCH_NORM_BACKWARD) {
#ifdef HAL_CPU_HAS_ONEDNN
      implementation = ops::kOneDnnName;
      if (desc->kind == HAL_OP_POOLING || desc->kind == HAL_OP_POOLING_BACKWARD) {
        plan = ops::plan_pooling(*reinterpret_cast<const hal_op_pooling_desc_t*>(desc), flags,
                                 decline);
      } else if (desc->kind == HAL_OP_BATCH_NORM || desc->kind == HAL_OP_BATCH_NORM_BACKWARD) {
        plan = ops::plan_batch_norm(*reinterpret_cast<const hal_op_batch_norm_desc_t*>(desc), flags,
                                    decline);
      } else {
        plan = ops::plan_convolution(*reinterpret_cast<const hal_op_convolution_desc_t*>(desc),
                                     flags, decline);
      }
#else
      decline.reason =
          "convolution, pooling and batch norm need oneDNN, which this build of the plugin lacks";
#endif
    } else if (desc->kind == HAL_OP_GROUP_NORM || desc->kind == HAL_OP_GROUP_NORM_BACKWARD) {
      decline.reason =
          "group norm has no oneDNN primitive before oneDNN 3.3 (this plugin builds on 2.6) and no "
          "native implementation here";
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
