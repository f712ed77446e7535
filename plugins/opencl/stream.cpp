#include "stream.hpp"

#include <memory>

#include "device.hpp"

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

hal_result_t enqueue_failed(const Stream& stream, const char* what, cl_int status) {
  return stream.device().report().fail(result_of(status) == HAL_ERROR_OUT_OF_MEMORY
                                           ? HAL_ERROR_OUT_OF_MEMORY
                                           : HAL_ERROR_DEVICE_LOST,
                                       status, "%s: %s", what, cl_error_text(status).c_str());
}

}  // namespace

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

hal_result_t memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src, size_t size) {
  Stream& self = *to_stream(stream);
  // clEnqueueSVMMemcpy takes SVM and host pointers alike.
  cl_event done = nullptr;
  const cl_int status =
      clEnqueueSVMMemcpy(self.queue(), CL_FALSE, dst, src, size, 0, nullptr, &done);
  if (status != CL_SUCCESS) return enqueue_failed(self, "clEnqueueSVMMemcpy", status);
  self.track(done);
  return HAL_SUCCESS;
}

hal_result_t memset_async(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size) {
  Stream& self = *to_stream(stream);
  cl_event done = nullptr;
  const cl_int status = clEnqueueSVMMemFill(self.queue(), dst, &value, 1, size, 0, nullptr, &done);
  if (status != CL_SUCCESS) return enqueue_failed(self, "clEnqueueSVMMemFill", status);
  self.track(done);
  return HAL_SUCCESS;
}

hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t,
                           hal_impl_stream_t** out_stream) {
  Device& owner = *to_device(device);
  return plugin::guarded(owner.report(), "stream_create", [&] {
    // In order (the default), with profiling for event timing.
    const cl_queue_properties properties[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    cl_int status = CL_SUCCESS;
    ClQueue queue(
        clCreateCommandQueueWithProperties(owner.context(), owner.id(), properties, &status));
    if (status != CL_SUCCESS) {
      return owner.report().fail(result_of(status) == HAL_ERROR_OUT_OF_MEMORY
                                     ? HAL_ERROR_OUT_OF_MEMORY
                                     : HAL_ERROR_INTERNAL,
                                 status, "stream_create: clCreateCommandQueueWithProperties: %s",
                                 cl_error_text(status).c_str());
    }
    Stream* stream = owner.add_stream(std::make_unique<Stream>(owner, std::move(queue)));
    *out_stream = reinterpret_cast<hal_impl_stream_t*>(stream);
    return HAL_SUCCESS;
  });
}

hal_result_t stream_destroy(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "stream_destroy", [&] {
    owner.remove_stream(&self);  // finishes its work first
    return HAL_SUCCESS;
  });
}

hal_result_t stream_synchronize(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  const cl_int status = clFinish(self.queue());
  return status == CL_SUCCESS ? HAL_SUCCESS : enqueue_failed(self, "clFinish", status);
}

hal_result_t stream_query(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  const ClEvent last(self.last());
  if (!last) return HAL_SUCCESS;  // nothing enqueued yet
  clFlush(self.queue());          // so the work progresses without a blocking call
  cl_int execution = CL_QUEUED;
  const cl_int status = clGetEventInfo(last.get(), CL_EVENT_COMMAND_EXECUTION_STATUS,
                                       sizeof(execution), &execution, nullptr);
  if (status != CL_SUCCESS) return enqueue_failed(self, "clGetEventInfo", status);
  if (execution < 0) return enqueue_failed(self, "stream_query: earlier work failed", execution);
  return execution == CL_COMPLETE ? HAL_SUCCESS : HAL_NOT_READY;
}

hal_result_t stream_wait_event(hal_impl_stream_t* stream, hal_impl_event_t* event) {
  Stream& self = *to_stream(stream);
  const ClEvent marker(to_event(event)->marker());
  if (!marker) return HAL_SUCCESS;  // never recorded: complete
  cl_event wait_list[] = {marker.get()};
  cl_event done = nullptr;
  const cl_int status = clEnqueueBarrierWithWaitList(self.queue(), 1, wait_list, &done);
  if (status != CL_SUCCESS) return enqueue_failed(self, "clEnqueueBarrierWithWaitList", status);
  self.track(done);
  return HAL_SUCCESS;
}

hal_result_t stream_enqueue_host_fn(hal_impl_stream_t* stream, hal_host_fn_t fn, void* user_data) {
  Stream& self = *to_stream(stream);
  const plugin::ErrorReporter& report = self.device().report();
  return plugin::guarded(report, "stream_enqueue_host_fn", [&] {
    // marker -> (callback runs fn, then opens the gate) ; barrier(gate) -> later work.
    auto call = std::make_unique<HostCall>();
    call->thread = &self.host_thread();
    call->fn = fn;
    call->user_data = user_data;
    cl_int status = CL_SUCCESS;
    call->gate.reset(clCreateUserEvent(self.device().context(), &status));
    if (status != CL_SUCCESS) return enqueue_failed(self, "clCreateUserEvent", status);
    cl_event raw = nullptr;
    status = clEnqueueMarkerWithWaitList(self.queue(), 0, nullptr, &raw);
    if (status != CL_SUCCESS) return enqueue_failed(self, "clEnqueueMarkerWithWaitList", status);
    call->marker.reset(raw);
    cl_event gate[] = {call->gate.get()};
    cl_event done = nullptr;
    status = clEnqueueBarrierWithWaitList(self.queue(), 1, gate, &done);
    if (status != CL_SUCCESS) {
      clSetUserEventStatus(call->gate.get(), -1);
      return enqueue_failed(self, "clEnqueueBarrierWithWaitList", status);
    }
    self.track(done);
    HostCall* pending = call.get();
    status = clSetEventCallback(pending->marker.get(), CL_COMPLETE, run_host_call, pending);
    if (status != CL_SUCCESS) {
      clSetUserEventStatus(call->gate.get(), -1);
      return enqueue_failed(self, "clSetEventCallback", status);
    }
    call.release();  // run_host_call owns it now
    clFlush(self.queue());
    return HAL_SUCCESS;
  });
}

}  // namespace hal::opencl
