// core.failure: what SPEC.md §4.4 says about asynchronous failure, on every
// object that can observe it. A stream is lost by aborting a communicator
// under a collective queued on it (the one failure a healthy plugin can be
// made to show on purpose: §13.3, "this rank was aborted"); then every
// synchronising call on the stream, the events over the failed work and the
// device report HAL_ERROR_DEVICE_LOST until the stream is destroyed, every
// enqueue is refused and enqueues nothing, releasing still succeeds, and the
// device's other streams are unaffected.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"
#include "kernel_sources.hpp"

namespace halconform {
namespace {

// Failing work needs the plugin's own collectives (queued on the stream,
// aborted there); the gate that keeps it queued needs host callbacks.
constexpr Requirements kLosable{HAL_DEVICE_CAP_COLLECTIVES | HAL_DEVICE_CAP_HOST_CALLBACKS};

// A stream made lost on purpose: a one-rank allreduce queued behind a gate,
// its communicator aborted before the gate opens. |before| is recorded over
// healthy work ahead of the failure, |after| over the failed work.
class LostStream {
 public:
  explicit LostStream(TestContext& ctx)
      : buffer_(ctx.device(), 256), before_(ctx.device()), after_(ctx.device()) {
    hal_device_t device = ctx.device();
    hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
    config.timeout_ms = 60000;
    HC_OK(hal_comm_init_all(1, &device, &config, &comm_));
    HC_OK(hal_stream_create(device, 0, &stream_));
    HC_OK(hal_memset_async(buffer_.get(), 0, buffer_.size(), stream_));
    HC_OK(hal_event_record(before_, stream_));
    HostGate gate;
    gate.enqueue_on(stream_);
    HC_OK(hal_allreduce(buffer_.get(), buffer_.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm_,
                        stream_));
    HC_OK(hal_event_record(after_, stream_));
    HC_OK(hal_comm_abort(comm_));
    comm_ = nullptr;
    gate.open();
    const hal_result_t first = hal_stream_synchronize(stream_);
    HC_REQUIRE(first == HAL_ERROR_DEVICE_LOST,
               strf("hal_stream_synchronize of a stream whose queued hal_allreduce was aborted "
                    "(hal_comm_abort) returned %s, expected HAL_ERROR_DEVICE_LOST (SPEC.md §4.4, "
                    "§13.3)",
                    hal_result_string(first)));
    first_detail_ = hal_error_last_message();
  }
  ~LostStream() {
    if (comm_ != nullptr) hal_comm_abort(comm_);
    if (stream_ != nullptr) hal_stream_destroy(stream_);
  }
  LostStream(const LostStream&) = delete;
  LostStream& operator=(const LostStream&) = delete;

  hal_stream_t stream() const { return stream_; }
  hal_stream_t release() { return std::exchange(stream_, nullptr); }
  hal_event_t before() const { return before_; }
  hal_event_t after() const { return after_; }
  Event& after_event() { return after_; }
  const std::string& first_detail() const { return first_detail_; }
  void* buffer() const { return buffer_.get(); }

 private:
  Buffer buffer_;
  Event before_, after_;
  hal_comm_t comm_ = nullptr;
  hal_stream_t stream_ = nullptr;
  std::string first_detail_;
};

// |call| on the lost stream must return HAL_ERROR_DEVICE_LOST.
void expect_lost(hal_result_t result, const char* call) {
  HC_REQUIRE(result == HAL_ERROR_DEVICE_LOST,
             strf("%s on a lost stream returned %s, expected HAL_ERROR_DEVICE_LOST: the loss is "
                  "sticky until the stream is destroyed (SPEC.md §4.4)",
                  call, hal_result_string(result)));
}

}  // namespace

HALCONFORM_TEST("core.failure.lost_stream",
                "a lost stream stays lost: every synchronising call and every enqueue returns "
                "HAL_ERROR_DEVICE_LOST, and nothing is enqueued",
                kLosable) {
  LostStream lost(ctx);
  HC_REQUIRE(lost.first_detail().find("hal_stream_synchronize") == 0,
             "the detail of the loss does not name the call: " + lost.first_detail());
  // Sticky: over time, and after other work of the device ran.
  Stream healthy(ctx.device());
  Buffer target(ctx.device(), 4096);
  const int rounds = ctx.by_tier(3, 10, 30);
  for (int i = 0; i < rounds; ++i) {
    expect_lost(hal_stream_synchronize(lost.stream()), "hal_stream_synchronize");
    expect_lost(hal_stream_query(lost.stream()), "hal_stream_query");
    HC_OK(hal_memset_async(target.get(), static_cast<uint8_t>(i), target.size(), healthy));
    HC_OK(hal_stream_synchronize(healthy));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Every enqueue is refused and enqueues nothing.
  std::vector<uint8_t> host(4096, 0x77);
  HC_OK(hal_memset_async(target.get(), 0x11, target.size(), healthy));
  HC_OK(hal_stream_synchronize(healthy));
  expect_lost(hal_memcpy_async(host.data(), target.get(), host.size(), lost.stream()),
              "hal_memcpy_async");
  expect_lost(hal_memset_async(target.get(), 0x22, target.size(), lost.stream()),
              "hal_memset_async");
  std::atomic<bool> ran{false};
  expect_lost(hal_stream_enqueue_host_fn(lost.stream(), set_flag, &ran),
              "hal_stream_enqueue_host_fn");
  Event other(ctx.device());
  HC_OK(hal_event_record(other, healthy));
  expect_lost(hal_stream_wait_event(lost.stream(), other), "hal_stream_wait_event");
  // The event keeps its earlier capture: healthy work, complete.
  expect_lost(hal_event_record(lost.before(), lost.stream()), "hal_event_record");
  HC_EXPECT_RESULT(hal_event_query(lost.before()), HAL_SUCCESS);
  hal_device_t device = ctx.device();
  hal_comm_t comm = nullptr;
  HC_OK(hal_comm_init_all(1, &device, nullptr, &comm));
  expect_lost(hal_allreduce(lost.buffer(), lost.buffer(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm,
                            lost.stream()),
              "hal_allreduce");
  HC_OK(hal_comm_destroy(comm));
  std::string launched = "no kernel source";
  for (const KernelSource& source : kernel_sources(ctx)) {
    SourceModule module(ctx.device(), source);
    if (module.load_result() != HAL_SUCCESS) continue;
    hal_launch_config_t config{};
    config.struct_size = sizeof(config);
    config.grid[0] = config.grid[1] = config.grid[2] = 1;
    config.block[0] = config.block[1] = config.block[2] = 1;
    expect_lost(hal_launch_kernel(module.kernel("empty"), &config, 0, nullptr, lost.stream()),
                "hal_launch_kernel");
    launched = source.name;
    break;
  }
  // An operator execution, where the device plans one.
  hal_op_unary_desc_t unary{};
  unary.header.struct_size = sizeof(unary);
  unary.header.kind = HAL_OP_UNARY;
  unary.alpha = 1.0f;
  const int64_t shape[1] = {64};
  hal_tensor_desc_contiguous(&unary.x, HAL_DTYPE_F32, 1, shape);
  hal_tensor_desc_contiguous(&unary.out, HAL_DTYPE_F32, 1, shape);
  hal_op_plan_t plan = nullptr;
  if (hal_op_plan_create(ctx.device(), &unary.header, 0, &plan) == HAL_SUCCESS) {
    void* operands[2] = {target.get(), target.get()};
    hal_op_exec_args_t args{};
    args.struct_size = sizeof(args);
    args.operand_count = 2;
    args.operands = operands;
    const hal_result_t executed = hal_op_execute(plan, &args, lost.stream());
    HC_OK(hal_op_plan_destroy(plan));
    expect_lost(executed, "hal_op_execute");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  expect_lost(hal_device_synchronize(ctx.device()), "hal_device_synchronize of its device");
  HC_REQUIRE(!ran.load(), std::string("hal_stream_enqueue_host_fn on a lost stream returned "
                                      "HAL_ERROR_DEVICE_LOST but the host function ran"));
  const std::vector<uint8_t> back = read_back(healthy, target.get(), target.size());
  HC_REQUIRE(back[0] == 0x11 && back.back() == 0x11,
             strf("hal_memset_async on a lost stream returned HAL_ERROR_DEVICE_LOST but the "
                  "fill landed (byte 0 is 0x%02x, expected the earlier 0x11)",
                  back[0]));
  HC_REQUIRE(host[0] == 0x77 && host.back() == 0x77,
             std::string("hal_memcpy_async on a lost stream returned HAL_ERROR_DEVICE_LOST but "
                         "the copy landed"));
  ctx.note("the launch was tried with " + launched);
}

HALCONFORM_TEST("core.failure.events",
                "events over failed work report HAL_ERROR_DEVICE_LOST; events over earlier work "
                "stay complete; a wait on failed work ends without failing the waiter",
                kLosable) {
  LostStream lost(ctx);
  expect_lost(hal_event_query(lost.after()), "hal_event_query of an event over the failed work");
  expect_lost(hal_event_synchronize(lost.after()),
              "hal_event_synchronize of an event over the failed work");
  HC_EXPECT_RESULT(hal_event_query(lost.before()), HAL_SUCCESS);
  HC_EXPECT_RESULT(hal_event_synchronize(lost.before()), HAL_SUCCESS);
  // A healthy stream waiting on the failed work is released and not failed.
  std::atomic<bool> ran{false};  // outlives the stream that sets it
  Stream waiter(ctx.device());
  HC_OK(hal_stream_wait_event(waiter, lost.after()));
  HC_OK(hal_stream_enqueue_host_fn(waiter, set_flag, &ran));
  const hal_result_t waited = hal_stream_synchronize(waiter);
  HC_REQUIRE(waited == HAL_SUCCESS && ran.load(),
             strf("a healthy stream waiting on an event over failed work: its synchronize "
                  "returned %s and its later work %s; the failure belongs to the recording "
                  "stream (SPEC.md §4.4)",
                  hal_result_string(waited), ran.load() ? "ran" : "did not run"));
  HC_OK(hal_event_destroy(lost.after_event().release()));
}

HALCONFORM_TEST("core.failure.elapsed_over_failed_work",
                "hal_event_elapsed_ms over an event that captured failed work is "
                "HAL_ERROR_INVALID_STATE (SPEC.md §11.5)",
                {HAL_DEVICE_CAP_COLLECTIVES | HAL_DEVICE_CAP_HOST_CALLBACKS |
                 HAL_DEVICE_CAP_EVENT_TIMING}) {
  hal_device_t device = ctx.device();
  hal_comm_t comm = nullptr;
  HC_OK(hal_comm_init_all(1, &device, nullptr, &comm));
  Stream stream(ctx.device());
  Buffer buffer(ctx.device(), 64);
  Event start(ctx.device(), HAL_EVENT_FLAG_TIMING), end(ctx.device(), HAL_EVENT_FLAG_TIMING);
  HC_OK(hal_event_record(start, stream));
  HostGate gate;
  gate.enqueue_on(stream);
  HC_OK(hal_allreduce(buffer.get(), buffer.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream));
  HC_OK(hal_event_record(end, stream));
  HC_OK(hal_comm_abort(comm));
  gate.open();
  expect_lost(hal_event_synchronize(end), "hal_event_synchronize of an event over failed work");
  float ms = -1;
  const hal_result_t elapsed = hal_event_elapsed_ms(start, end, &ms);
  HC_REQUIRE(elapsed == HAL_ERROR_INVALID_STATE,
             strf("hal_event_elapsed_ms over an event that captured failed work returned %s "
                  "(%.3f ms), expected HAL_ERROR_INVALID_STATE: there is no time between failed "
                  "work",
                  hal_result_string(elapsed), ms));
}

HALCONFORM_TEST("core.failure.device",
                "hal_device_synchronize reports a lost stream while it exists; the device's "
                "other streams work; releasing succeeds; after the destroy the device is clean",
                kLosable) {
  LostStream lost(ctx);
  const hal_result_t device_result = hal_device_synchronize(ctx.device());
  HC_REQUIRE(device_result == HAL_ERROR_DEVICE_LOST,
             strf("hal_device_synchronize with a lost stream on the device returned %s, expected "
                  "HAL_ERROR_DEVICE_LOST while the stream exists (SPEC.md §4.4)",
                  hal_result_string(device_result)));
  // The other streams run their work and their calls succeed.
  Stream healthy(ctx.device());
  Buffer buffer(ctx.device(), 8192);
  HC_OK(hal_memset_async(buffer.get(), 0x3d, buffer.size(), healthy));
  const std::vector<uint8_t> back = read_back(healthy, buffer.get(), buffer.size());
  HC_REQUIRE(back[0] == 0x3d && back.back() == 0x3d,
             std::string("a healthy stream of a device with a lost stream did not run its fill"));
  // Releasing goes on: every release succeeds, never HAL_ERROR_DEVICE_LOST.
  void* allocation = nullptr;
  HC_OK(hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, 128, 0, &allocation));
  HC_EXPECT_RESULT(hal_mem_free(allocation), HAL_SUCCESS);
  for (const KernelSource& source : kernel_sources(ctx)) {
    SourceModule module(ctx.device(), source);
    if (module.load_result() != HAL_SUCCESS) continue;
    HC_EXPECT_RESULT(hal_module_unload(module.release()), HAL_SUCCESS);
    break;
  }
  HC_EXPECT_RESULT(hal_event_destroy(lost.after_event().release()), HAL_SUCCESS);
  HC_EXPECT_RESULT(hal_stream_destroy(lost.release()), HAL_SUCCESS);
  HC_EXPECT_RESULT(hal_device_synchronize(ctx.device()), HAL_SUCCESS);
}

}  // namespace halconform
