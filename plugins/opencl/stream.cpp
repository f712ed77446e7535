// Streams of the opencl plugin: in-order command queues, and host functions
// run in stream order on a thread of the stream (HostThread).
#include "stream.hpp"

#include <memory>

#include "device.hpp"
#include "event.hpp"

namespace hal::opencl {
namespace {

// A host function waiting to run: the queue's next command waits on |gate|
// until it did.
struct HostCall {
  HostThread* thread;
  hal_host_fn_t fn;
  void* user_data;
  ClEvent gate;    // a user event
  ClEvent marker;  // the marker whose completion runs fn
};

void CL_CALLBACK run_host_call(cl_event, cl_int status, void* context) {
  std::shared_ptr<HostCall> call(static_cast<HostCall*>(context));
  // A failed marker (negative status) means earlier work failed; the gate
  // then fails too, so later work does not run on a broken stream.
  if (status != CL_COMPLETE) {
    clSetUserEventStatus(call->gate.get(), -1);
    return;
  }
  // Off this thread (see HostThread); the gate opens once fn returned.
  call->thread->post([call] {
    call->fn(call->user_data);
    clSetUserEventStatus(call->gate.get(), CL_COMPLETE);
  });
}

}  // namespace

hal_result_t Stream::fail(const char* what, cl_int status) const {
  return device().report().fail(result_of(status) == HAL_ERROR_OUT_OF_MEMORY
                                    ? HAL_ERROR_OUT_OF_MEMORY
                                    : HAL_ERROR_DEVICE_LOST,
                                status, "%s: %s", what, cl_error_text(status).c_str());
}

HostThread::~HostThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HostThread::post(std::function<void()> work) {
  std::lock_guard lock(mutex_);
  work_.push_back(std::move(work));
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  wake_.notify_one();
}

void HostThread::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !work_.empty(); });
    if (work_.empty()) return;  // stopping, and nothing left
    std::function<void()> work = std::move(work_.front());
    work_.pop_front();
    lock.unlock();
    work();
    lock.lock();
  }
}

hal_result_t Stream::create(Device& device, hal_stream_flags_t, Stream*& out_stream) {
  // In order (the default), with profiling for event timing.
  const cl_queue_properties properties[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  cl_int status = CL_SUCCESS;
  ClQueue queue(
      clCreateCommandQueueWithProperties(device.context(), device.id(), properties, &status));
  if (status != CL_SUCCESS) {
    return device.report().fail(
        result_of(status) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL,
        status, "stream_create: clCreateCommandQueueWithProperties: %s",
        cl_error_text(status).c_str());
  }
  out_stream = device.add_stream(std::make_unique<Stream>(device, std::move(queue)));
  return HAL_SUCCESS;
}

Stream::~Stream() {
  clFinish(queue());
}

hal_result_t Stream::synchronize() {
  const cl_int status = clFinish(queue());
  return status == CL_SUCCESS ? HAL_SUCCESS : fail("clFinish", status);
}

hal_result_t Stream::query() {
  const ClEvent newest(last());
  if (!newest) return HAL_SUCCESS;  // nothing enqueued yet
  clFlush(queue());                 // so the work progresses without a blocking call
  cl_int execution = CL_QUEUED;
  const cl_int status = clGetEventInfo(newest.get(), CL_EVENT_COMMAND_EXECUTION_STATUS,
                                       sizeof(execution), &execution, nullptr);
  if (status != CL_SUCCESS) return fail("clGetEventInfo", status);
  if (execution < 0) return fail("stream_query: earlier work failed", execution);
  return execution == CL_COMPLETE ? HAL_SUCCESS : HAL_NOT_READY;
}

hal_result_t Stream::wait(Event& event) {
  const ClEvent marker(event.marker());
  if (!marker) return HAL_SUCCESS;  // never recorded: complete
  cl_event wait_list[] = {marker.get()};
  cl_event done = nullptr;
  const cl_int status = clEnqueueBarrierWithWaitList(queue(), 1, wait_list, &done);
  if (status != CL_SUCCESS) return fail("clEnqueueBarrierWithWaitList", status);
  track(done);
  return HAL_SUCCESS;
}

hal_result_t Stream::enqueue_host_fn(hal_host_fn_t fn, void* user_data) {
  // marker -> (callback runs fn, then opens the gate) ; barrier(gate) -> later work.
  auto call = std::make_unique<HostCall>();
  call->thread = &host_thread();
  call->fn = fn;
  call->user_data = user_data;
  cl_int status = CL_SUCCESS;
  call->gate.reset(clCreateUserEvent(device().context(), &status));
  if (status != CL_SUCCESS) return fail("clCreateUserEvent", status);
  cl_event raw = nullptr;
  status = clEnqueueMarkerWithWaitList(queue(), 0, nullptr, &raw);
  if (status != CL_SUCCESS) return fail("clEnqueueMarkerWithWaitList", status);
  call->marker.reset(raw);
  cl_event gate[] = {call->gate.get()};
  cl_event done = nullptr;
  status = clEnqueueBarrierWithWaitList(queue(), 1, gate, &done);
  if (status != CL_SUCCESS) {
    clSetUserEventStatus(call->gate.get(), -1);
    return fail("clEnqueueBarrierWithWaitList", status);
  }
  track(done);
  HostCall* pending = call.get();
  status = clSetEventCallback(pending->marker.get(), CL_COMPLETE, run_host_call, pending);
  if (status != CL_SUCCESS) {
    clSetUserEventStatus(call->gate.get(), -1);
    return fail("clSetEventCallback", status);
  }
  call.release();  // run_host_call owns it now
  clFlush(queue());
  return HAL_SUCCESS;
}

}  // namespace hal::opencl
