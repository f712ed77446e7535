// The operator entries of the cuda plugin's table: matmul to the cuBLASLt
// planner; every other kind is declined (no native kernel yet), so the
// loader's portable implementations serve it.
#include <memory>

#include "../device.hpp"
#include "../stream.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "hal_util/names.hpp"
#include "ops.hpp"

namespace hal::cuda {
namespace {

ops::OpPlan* to_op_plan(hal_impl_op_plan_t* plan) {
  return reinterpret_cast<ops::OpPlan*>(plan);
}

}  // namespace

hal_result_t op_plan_create(hal_impl_device_t* device, const hal_op_header_t* desc,
                            hal_op_plan_flags_t flags, hal_impl_op_plan_t** out_plan,
                            size_t* out_workspace_bytes, const char** out_implementation) {
  Device& owner = *to_device(device);
  const plugin::ErrorReporter& report = owner.report();
  return plugin::guarded(report, "op_plan_create", [&]() -> hal_result_t {
    if (desc->kind != HAL_OP_MATMUL) {
      return report.fail(HAL_ERROR_UNSUPPORTED, 0,
                         "%s has no native implementation in the cuda plugin yet",
                         hal::util::op_kind_name(desc->kind));
    }
    ops::Planned planned =
        ops::plan_matmul(owner, *reinterpret_cast<const hal_op_matmul_desc_t*>(desc), flags);
    if (planned.result == HAL_ERROR_UNSUPPORTED) {
      return report.fail_message(HAL_ERROR_UNSUPPORTED, planned.native_code,
                                 "cuBLASLt: " + planned.reason);
    }
    if (planned.result != HAL_SUCCESS) return planned.result;  // reported by the planner
    *out_workspace_bytes = planned.workspace_bytes;
    *out_implementation = ops::kCublasLtName;
    *out_plan = reinterpret_cast<hal_impl_op_plan_t*>(planned.plan.release());
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

}  // namespace hal::cuda
