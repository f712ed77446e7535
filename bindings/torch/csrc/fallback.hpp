// The CPU fallback: every aten op without a hal kernel runs its CPU kernel,
// never fails for want of one, and is counted (metrics.hpp).
//
// Device tensors reach the CPU kernel as aliases of the device memory when
// the device's memory is host-accessible (HAL_DEVICE_CAP_UNIFIED_ADDRESSING:
// the cpu plugin), after the current stream is synchronised, so in-place and
// out= results land in place; otherwise as host copies, whose mutated
// arguments are copied back. Results are moved to the op's hal device; a
// view of an aliased input comes back as a view. Random ops draw from a CPU
// generator seeded from the hal generator, so torch.hal.manual_seed holds.
//
// HAL_TORCH_FALLBACK: warn (default; one warning per op), silent, or error
// (NotImplementedError naming the op and why it has no hal kernel).
#ifndef HAL_TORCH_FALLBACK_HPP_
#define HAL_TORCH_FALLBACK_HPP_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>

#include <string>

namespace hal_torch {

enum class FallbackMode { kWarn, kSilent, kError };

FallbackMode fallback_mode();
void set_fallback_mode(FallbackMode mode);

// The boxed fallback registered for every op of the hal key.
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Why the next fallback on this thread runs (a native kernel that declines a
// case says so before it falls back); shown in its warning and error.
void set_fallback_reason(std::string reason);

}  // namespace hal_torch

// From inside a native kernel: run |op| (an at::_ops struct, e.g.
// at::_ops::mm) through the fallback because of |reason|.
#define HAL_FALLBACK(op, reason, ...)        \
  (::hal_torch::set_fallback_reason(reason), \
   ::at::native::call_fallback_fn<&::hal_torch::fallback, op>::call(__VA_ARGS__))
#define HAL_FALLBACK_SYMINT(op, reason, ...) \
  (::hal_torch::set_fallback_reason(reason), \
   ::at::native::call_fallback_fn_symint<&::hal_torch::fallback, op>::call(__VA_ARGS__))

#endif  // HAL_TORCH_FALLBACK_HPP_
