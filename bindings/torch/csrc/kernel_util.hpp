// What the aten kernels on hal_ops share: operands from a TensorIterator (its
// broadcasting, type promotion and output allocation, PyTorch's own rules),
// native-call counting, and running a plan or saying why not.
#ifndef HAL_TORCH_KERNEL_UTIL_HPP_
#define HAL_TORCH_KERNEL_UTIL_HPP_

#include "fallback.hpp"
#include "metrics.hpp"
#include "plans.hpp"
#include "runtime.hpp"

#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

namespace hal_torch {

// The layout of operand |arg| of |iter| (TensorIterator's coalesced dimensions,
// fastest first, turned into HAL's row-major order); nullopt past rank 8 or
// for a dtype HAL lacks.
std::optional<hal_tensor_desc_t> iter_desc(const at::TensorIteratorBase& iter, int arg);

// The value of a CPU scalar operand as HAL's run-time scalar (f64 and i64 both set).
hal_op_scalar_t scalar_value(const c10::Scalar& value);

// The hal device index of |t| (which must be a hal tensor).
inline c10::DeviceIndex hal_index(const at::TensorBase& t) {
  return t.device().index();
}

// Counts a native call of |op| once the kernel has enqueued its work.
#define HAL_COUNT_NATIVE(op_name)                                                   \
  do {                                                                              \
    static ::hal_torch::OpCounter& hal_counter_ = ::hal_torch::op_counter(op_name); \
    ++hal_counter_.native;                                                          \
  } while (0)

// The outcome of trying one native path: empty reason = done.
struct Declined {
  std::string reason;
};

// Plans |desc| on |device|; on a decline stores HAL's reason in |why| and returns null.
template <typename Desc>
const Plan* plan_or_reason(c10::DeviceIndex device, const Desc& desc, std::string& why,
                           std::span<const std::byte> extra = {}) {
  const PlanResult planned = plan_for(device, desc, extra);
  if (!planned) why = *planned.decline;
  return planned.plan;
}

// True when |t| needs a temporary output: it overlaps one of the inputs
// without being exactly the same view.
bool output_conflicts(const at::Tensor& out, std::initializer_list<const at::Tensor*> inputs);

// A fresh tensor of |t|'s sizes, dtype and device (contiguous).
at::Tensor empty_like_contiguous(const at::Tensor& t);

}  // namespace hal_torch

#endif  // HAL_TORCH_KERNEL_UTIL_HPP_
