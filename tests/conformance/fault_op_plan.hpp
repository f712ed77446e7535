// The operator-entry plumbing the fault plugin's planted operator faults share (fault_ops.cpp,
// fault_lowp.cpp): a plan that keeps the descriptor the loader gave and either wraps the real
// plugin's plan or (the faulty op) is served by the fault plugin itself, on the host, in stream
// order (cpu device memory is host memory).
#ifndef HAL_TESTS_CONFORMANCE_FAULT_OP_PLAN_HPP_
#define HAL_TESTS_CONFORMANCE_FAULT_OP_PLAN_HPP_

#include <hal_plugin.h>

#include <memory>
#include <vector>

namespace fault_op_plan {

struct WrappedPlan {
  hal_impl_op_plan_t* real = nullptr;  // nullptr: served by the fault plugin
  std::vector<unsigned char> desc;     // the descriptor as the loader gave it

  explicit WrappedPlan(const hal_op_header_t* given) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(given);
    desc.assign(bytes, bytes + given->struct_size);
  }
  hal_op_kind_t kind() const { return as<hal_op_header_t>().kind; }
  template <class Desc>
  const Desc& as() const {
    return *reinterpret_cast<const Desc*>(desc.data());
  }
};

// Hands |plan| to the loader as the fault plugin's own implementation |name|, with no workspace.
inline hal_result_t serve_here(std::unique_ptr<WrappedPlan> plan, const char* name,
                               hal_impl_op_plan_t** out_plan, size_t* out_workspace_bytes,
                               const char** out_implementation) {
  *out_workspace_bytes = 0;
  *out_implementation = name;
  *out_plan = reinterpret_cast<hal_impl_op_plan_t*>(plan.release());
  return HAL_SUCCESS;
}

// Plans |passed| (the loader's descriptor, or a changed copy) with |real| and hands |plan|,
// wrapping the real plan, to the loader.
inline hal_result_t plan_with_real(const hal_plugin_table_v1_t* real,
                                   std::unique_ptr<WrappedPlan> plan, hal_impl_device_t* device,
                                   const hal_op_header_t* passed, hal_op_plan_flags_t flags,
                                   hal_impl_op_plan_t** out_plan, size_t* out_workspace_bytes,
                                   const char** out_implementation) {
  const hal_result_t result = real->op_plan_create(device, passed, flags, &plan->real,
                                                   out_workspace_bytes, out_implementation);
  if (result != HAL_SUCCESS) return result;
  *out_plan = reinterpret_cast<hal_impl_op_plan_t*>(plan.release());
  return HAL_SUCCESS;
}

inline hal_result_t destroy(const hal_plugin_table_v1_t* real, hal_impl_op_plan_t* handle) {
  std::unique_ptr<WrappedPlan> plan(reinterpret_cast<WrappedPlan*>(handle));
  if (plan->real != nullptr) return real->op_plan_destroy(plan->real);
  return HAL_SUCCESS;
}

// Enqueues |fn| on |stream| with |job|, which |fn| owns once it is enqueued.
template <class Job>
hal_result_t enqueue_host(const hal_plugin_table_v1_t* real, hal_impl_stream_t* stream,
                          hal_host_fn_t fn, std::unique_ptr<Job> job) {
  const hal_result_t result = real->stream_enqueue_host_fn(stream, fn, job.get());
  if (result == HAL_SUCCESS) job.release();
  return result;
}

// The real plugin's implementation of |kind| ("fault" where it names none).
inline const char* real_implementation(const hal_plugin_table_v1_t* real, hal_impl_device_t* device,
                                       hal_op_kind_t kind) {
  return real->op_implementation != nullptr ? real->op_implementation(device, kind) : "fault";
}

}  // namespace fault_op_plan

#endif  // HAL_TESTS_CONFORMANCE_FAULT_OP_PLAN_HPP_
