// SPEC.md §4.1 "Which error is reported", steps 1 to 3, written once:
//
//   if (hal_result_t r = check_preconditions(kFunction, Held{stream, "stream", stream_use},
//                                            Required{out_event, "out_event"});
//       r != HAL_SUCCESS)
//     return r;
//
// checks, and reports the first failure of:
//   1. HAL_ERROR_NOT_INITIALIZED, before any argument is read;
//   2. the handles, in the order given (the order of the parameters):
//      INVALID_HANDLE for NULL (unless the step is Nullable), foreign or of
//      another type, DESTROYED_HANDLE for a destroyed one of the expected type;
//   3. HAL_ERROR_NULL_POINTER for the Required pointers, in the order given.
// Whatever order the steps are listed in, handles come before pointers, so an
// entry point cannot get the precedence wrong by writing its list. Steps 4 and
// later (values, ranges, devices, capabilities) are each call's own.
//
// The validation layer checks handles against its own records (stale handles
// that left the slab's window) with the same step 2: first_handle_fault()
// with its own handle check.
//
// Everything here is templates over plain structs, and nothing allocates.
// The fast path (every step passes) inlines into each entry point as a
// straight line of loads and compares, as the hand-written sequences did;
// the first failure calls the cold first_fault(), which walks the steps again
// in the order above to report the right one (bench/loader_overhead: the
// per-call overhead is unchanged).
#pragma once

#include "error.hpp"
#include "handle.hpp"
#include "registry.hpp"

#include <hal/collective.h>
#include <hal/device.h>
#include <hal/event.h>
#include <hal/kernel.h>
#include <hal/moe.h>
#include <hal/ops.h>
#include <hal/stream.h>

#include <type_traits>

namespace hal::loader {

// The handle kind of loader object type |H| (hal_stream_s, ...).
template <class H>
constexpr HandleKind handle_kind_of() noexcept {
  using T = std::remove_cv_t<H>;
  if constexpr (std::is_same_v<T, hal_device_s>)
    return HandleKind::kDevice;
  else if constexpr (std::is_same_v<T, hal_stream_s>)
    return HandleKind::kStream;
  else if constexpr (std::is_same_v<T, hal_event_s>)
    return HandleKind::kEvent;
  else if constexpr (std::is_same_v<T, hal_module_s>)
    return HandleKind::kModule;
  else if constexpr (std::is_same_v<T, hal_kernel_s>)
    return HandleKind::kKernel;
  else if constexpr (std::is_same_v<T, hal_op_plan_s>)
    return HandleKind::kOpPlan;
  else if constexpr (std::is_same_v<T, hal_moe_routing_s>)
    return HandleKind::kMoeRouting;
  else {
    static_assert(std::is_same_v<T, hal_comm_s>, "not a HAL handle type");
    return HandleKind::kComm;
  }
}

// Whether |T| is a public handle type (hal_stream_t, ...).
template <class T>
inline constexpr bool is_handle_type_v =
    std::is_pointer_v<T> &&
    (std::is_same_v<T, hal_device_t> || std::is_same_v<T, hal_stream_t> ||
     std::is_same_v<T, hal_event_t> || std::is_same_v<T, hal_module_t> ||
     std::is_same_v<T, hal_kernel_t> || std::is_same_v<T, hal_comm_t> ||
     std::is_same_v<T, hal_op_plan_t> || std::is_same_v<T, hal_moe_routing_t>);

namespace preconditions {

// A handle validated and held against a concurrent destroy for the rest of
// the call (|use| outlives the call's use of the handle).
template <class H>
struct Held {
  H* handle;
  const char* name;
  HandleUse<H>& use;
};

// A handle validated but not held: devices (never destroyed while HAL is
// initialised) and handles the call itself destroys (begin_destroy holds them).
template <class H>
struct Live {
  H* handle;
  const char* name;
};

// As Live, but NULL passes: the destroy functions' documented no-op. The
// caller returns HAL_SUCCESS for NULL after the check.
template <class H>
struct Nullable {
  H* handle;
  const char* name;
};

// An argument that is not a handle, for first_handle_fault's callers that
// describe every argument (the validation layer).
struct NotAHandle {};

// A required pointer (out-pointer, descriptor, buffer): NULL is
// HAL_ERROR_NULL_POINTER.
struct Required {
  const void* pointer;
  const char* name;
};

template <class H>
Held(H*, const char*, HandleUse<H>&) -> Held<H>;
template <class H>
Live(H*, const char*) -> Live<H>;
template <class H>
Nullable(H*, const char*) -> Nullable<H>;

template <class T>
struct is_handle_step : std::false_type {};
template <class H>
struct is_handle_step<Held<H>> : std::true_type {};
template <class H>
struct is_handle_step<Live<H>> : std::true_type {};
template <class H>
struct is_handle_step<Nullable<H>> : std::true_type {};

// The loader's check of one handle step: the magic and kind in its header.
// A Held step already acquired by the fast path passes.
struct HeaderCheck {
  template <class H>
  hal_result_t operator()(const char* function, Held<H>& step, bool&) const noexcept {
    if (step.use.held()) return HAL_SUCCESS;
    return step.use.acquire(step.handle, handle_kind_of<H>(), function, step.name);
  }
  template <class H>
  hal_result_t operator()(const char* function, Live<H>& step, bool&) const noexcept {
    if (is_live(step.handle, handle_kind_of<H>())) return HAL_SUCCESS;
    return reject_handle(step.handle, handle_kind_of<H>(), function, step.name);
  }
  template <class H>
  hal_result_t operator()(const char* function, Nullable<H>& step, bool&) const noexcept {
    if (step.handle == nullptr || is_live(step.handle, handle_kind_of<H>())) return HAL_SUCCESS;
    return reject_handle(step.handle, handle_kind_of<H>(), function, step.name);
  }
};

// The fast path: whether a step passes, without reporting anything. Held
// steps are acquired here, in list order.
template <class H>
[[gnu::always_inline]] inline bool passes(Held<H>& step) noexcept {
  return step.use.try_acquire(step.handle, handle_kind_of<H>());
}
template <class H>
[[gnu::always_inline]] inline bool passes(Live<H>& step) noexcept {
  return is_live(step.handle, handle_kind_of<H>());
}
template <class H>
[[gnu::always_inline]] inline bool passes(Nullable<H>& step) noexcept {
  return step.handle == nullptr || is_live(step.handle, handle_kind_of<H>());
}
[[gnu::always_inline]] inline bool passes(Required& step) noexcept {
  return step.pointer != nullptr;
}

// Step 2: the first handle fault, left to right, with |check| deciding each
// handle; non-handle steps are skipped. HAL_SUCCESS when there is none. A
// check may also end step 2 without a fault by setting |stop|: the rest is
// then the entry point's (the validation layer's answer for a NULL handle,
// which the entry point reports with its own message).
template <class Check, class... Steps>
[[gnu::always_inline]] inline hal_result_t first_handle_fault(const char* function,
                                                              const Check& check, Steps&... steps) {
  hal_result_t result = HAL_SUCCESS;
  bool stop = false;
  [[maybe_unused]] const auto one = [&](auto& step) {
    if constexpr (is_handle_step<std::remove_cv_t<std::remove_reference_t<decltype(step)>>>::value)
      result = check(function, step, stop);
    return result == HAL_SUCCESS && !stop;
  };
  static_cast<void>((one(steps) && ...));
  return result;
}

// Step 3: the first NULL required pointer, left to right.
template <class... Steps>
[[gnu::always_inline]] inline hal_result_t first_null_pointer(const char* function,
                                                              const Steps&... steps) noexcept {
  const char* missing = nullptr;
  [[maybe_unused]] const auto one = [&](const auto& step) noexcept {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(step)>, Required>) {
      if (step.pointer == nullptr) [[unlikely]]
        missing = step.name;
    }
    return missing == nullptr;
  };
  static_cast<void>((one(steps) && ...));
  if (missing == nullptr) [[likely]]
    return HAL_SUCCESS;
  return fail(HAL_ERROR_NULL_POINTER, function, "%s is NULL", missing);
}

}  // namespace preconditions

namespace preconditions {

// The slow path: some step failed the fast path (or HAL is not initialised);
// finds the first fault in SPEC §4.1's order and reports it.
template <class... Steps>
[[gnu::cold, gnu::noinline]] hal_result_t first_fault(const Registry* registry,
                                                      const char* function,
                                                      Steps... steps) noexcept {
  if (registry == nullptr) return not_initialized(function);
  if (hal_result_t result = first_handle_fault(function, HeaderCheck{}, steps...);
      result != HAL_SUCCESS)
    return result;
  return first_null_pointer(function, steps...);
}

}  // namespace preconditions

// SPEC §4.1 steps 1 to 3 for one call (see the top of this file). Steps are
// preconditions::Held, Live, Nullable and Required, listed in parameter order.
// The _in form also gives the call the registry it checked. The fast path is
// a straight line of loads and compares; any failure goes to the cold
// first_fault(), which applies the order.
template <class... Steps>
[[gnu::always_inline]] inline hal_result_t check_preconditions_in(Registry*& registry,
                                                                  const char* function,
                                                                  Steps&&... steps) noexcept {
  registry = active_registry();
  if (registry != nullptr && (preconditions::passes(steps) && ...)) [[likely]]
    return HAL_SUCCESS;
  return preconditions::first_fault(registry, function, steps...);
}

template <class... Steps>
[[gnu::always_inline]] inline hal_result_t check_preconditions(const char* function,
                                                               Steps&&... steps) noexcept {
  Registry* registry = nullptr;
  return check_preconditions_in(registry, function, static_cast<Steps&&>(steps)...);
}

}  // namespace hal::loader
