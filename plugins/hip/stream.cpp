// Streams of the hip plugin: non-blocking hipStream_t, and host functions
// through hipLaunchHostFunc (or a stream callback where HIP lacks it).
#include "stream.hpp"

#include <memory>

#include "device.hpp"
#include "event.hpp"

namespace hal::hip {
namespace {

// What hipStreamAddCallback hands its callback back: the HAL function and its
// argument. Owned by the runtime's callback from a successful enqueue on.
struct HostCall {
  hal_host_fn_t fn;
  void* user_data;
};

void run_host_call(hipStream_t /*stream*/, hipError_t /*status*/, void* data) {
  // Runs even when earlier work failed (status): the HAL contract runs fn
  // once per enqueue, and the failure surfaces at the next synchronise.
  const std::unique_ptr<HostCall> call(static_cast<HostCall*>(data));
  call->fn(call->user_data);
}

}  // namespace

hal_result_t Stream::create(Device& device, hal_stream_flags_t, Stream*& out_stream) {
  hipStream_t created = nullptr;
  const hal_result_t result =
      device.run("stream_create: hipStreamCreateWithFlags", [&](const RuntimeApi& hip) {
        return hip.hipStreamCreateWithFlags(&created, hipStreamNonBlocking);
      });
  if (result != HAL_SUCCESS) return result;
  std::unique_ptr<Stream> owned;
  try {
    owned = std::make_unique<Stream>(device, created);
  } catch (...) {
    // Out of host memory before the Stream owned it: give the stream back.
    (void)device.api().hipStreamDestroy(created);
    throw;
  }
  out_stream = device.add_stream(std::move(owned));
  return HAL_SUCCESS;
}

// Teardown has no caller to report to: a failure here (a lost device) is
// dropped, and the handle is gone either way.
Stream::~Stream() {
  if (device().bind() == hipSuccess) {
    (void)device().api().hipStreamSynchronize(stream_);
    (void)device().api().hipStreamDestroy(stream_);
  }
}

hal_result_t Stream::synchronize() {
  return device().wait("stream_synchronize: hipStreamSynchronize", false,
                       [&](const RuntimeApi& hip) { return hip.hipStreamSynchronize(stream_); });
}

hal_result_t Stream::query() {
  return device().wait("stream_query: hipStreamQuery", true,
                       [&](const RuntimeApi& hip) { return hip.hipStreamQuery(stream_); });
}

hal_result_t Stream::wait(Event& awaited) {
  // HIP events work across the devices of one process.
  return device().run("stream_wait_event: hipStreamWaitEvent", [&](const RuntimeApi& hip) {
    return hip.hipStreamWaitEvent(stream_, awaited.get(), 0);
  });
}

hal_result_t Stream::enqueue_host_fn(hal_host_fn_t fn, void* user_data) {
  if (device().api().hipLaunchHostFunc != nullptr) {
    // hal_host_fn_t and hipHostFn_t are both void (*)(void*).
    return device().run("stream_enqueue_host_fn: hipLaunchHostFunc", [&](const RuntimeApi& hip) {
      return hip.hipLaunchHostFunc(stream_, fn, user_data);
    });
  }
  // HIP 5.2 exports no hipLaunchHostFunc: a stream callback, which also
  // holds back the stream's later work until it returns.
  auto call = std::make_unique<HostCall>(HostCall{fn, user_data});
  const hal_result_t result =
      device().run("stream_enqueue_host_fn: hipStreamAddCallback", [&](const RuntimeApi& hip) {
        return hip.hipStreamAddCallback(stream_, run_host_call, call.get(), 0);
      });
  if (result == HAL_SUCCESS) (void)call.release();  // run_host_call frees it
  return result;
}

}  // namespace hal::hip
