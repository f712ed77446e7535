// The hook every intercepted public entry point is written with:
//
//   hal_result_t hal_memcpy_async(void* dst, const void* src, size_t size, hal_stream_t stream) {
//     return layers::call<layers::MemcpyAsync, memcpy_async>(HAL_CALLER, dst, src, size, stream);
//   }
//
// where memcpy_async is the entry's own body. With no layer on, call() is one
// relaxed load, one branch predicted taken, and the body. With a layer on,
// the body runs between the layers' checks and records in call_layered().
#pragma once

#include "layers/api_calls.hpp"
#include "layers/layers.hpp"
#include "layers/tracing.hpp"
#include "layers/validation.hpp"

#include <hal/result.h>

// The application's return address into the public entry: where the leak
// report says an object was created.
#define HAL_CALLER __builtin_return_address(0)

namespace hal::loader::layers {

template <class Api, auto Body, class... Args>
[[gnu::noinline]] hal_result_t call_layered(const void* caller, Args... args) noexcept {
  const uint32_t on = active();
  const uint64_t begin_ns = (on & kTracing) != 0 ? tracing::now_ns() : 0;
  hal_result_t result = HAL_SUCCESS;
  if ((on & kValidation) != 0) result = validation::before(Api{}, args...);
  if (result == HAL_SUCCESS) {
    result = Body(args...);
    if ((on & kValidation) != 0) validation::after(Api{}, result, caller, args...);
  }
  if ((on & kTracing) != 0) tracing::trace_call<Api>(begin_ns, result, args...);
  return result;
}

template <class Api, auto Body, class... Args>
inline hal_result_t call(const void* caller, Args... args) noexcept {
  if (active() == 0) [[likely]]
    return Body(args...);
  return call_layered<Api, Body>(caller, args...);
}

}  // namespace hal::loader::layers
