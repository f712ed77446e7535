// The validation layer: handle lifetime beyond the quarantine, pointer
// arguments of kernels, host ranges of copies, stream and event misuse, and
// the leak report.
#include "layers_support.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#ifdef HAL_SANITIZER_ADDRESS
#include <sanitizer/lsan_interface.h>
#endif

using namespace layers_test;

namespace {

// More than the loader's per-kind quarantine (4096), so the first destroyed
// handle's memory is freed.
constexpr int kPastQuarantine = 4200;

hal_kernel_t load_kernel(hal_device_t device, const char* name, hal_module_t* out_module) {
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
  desc.path = HAL_TEST_CPU_KERNELS_PATH;
  REQUIRE(hal_module_load(device, &desc, out_module) == HAL_SUCCESS);
  hal_kernel_desc_t kernel_desc{};
  kernel_desc.struct_size = sizeof(kernel_desc);
  kernel_desc.name = name;
  hal_kernel_t kernel = nullptr;
  REQUIRE(hal_kernel_get(*out_module, &kernel_desc, &kernel) == HAL_SUCCESS);
  return kernel;
}

hal_launch_config_t one_block() {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;
  return config;
}

// affine_u32(x, n, a, b) with x as given: x[i] = a * x[i] + b for i < n.
hal_result_t launch_affine(hal_kernel_t kernel, void* x, hal_stream_t stream, uint32_t n = 1) {
  const uint32_t a = 2, b = 3;
  const std::array<hal_kernel_arg_t, 4> args = {
      hal_kernel_arg_t{&x, sizeof(x)}, {&n, 4}, {&a, 4}, {&b, 4}};
  const hal_launch_config_t config = one_block();
  return hal_launch_kernel(kernel, &config, 4, args.data(), stream);
}

}  // namespace

TEST_CASE("validation: a handle that left the quarantine is still reported destroyed") {
  Session session("1");
  hal_event_t first = nullptr;
  REQUIRE(hal_event_create(session.device, 0, &first) == HAL_SUCCESS);
  REQUIRE(hal_event_destroy(first) == HAL_SUCCESS);
  for (int i = 0; i < kPastQuarantine; ++i) {
    hal_event_t event = nullptr;
    REQUIRE(hal_event_create(session.device, 0, &event) == HAL_SUCCESS);
    REQUIRE(hal_event_destroy(event) == HAL_SUCCESS);
  }
  // |first|'s memory is freed (or reused by the last event, also destroyed):
  // the layer answers from its own records, without reading it.
  CHECK(hal_event_query(first) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_event_destroy(first) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(contains(last_message(), "was already destroyed"));
}

TEST_CASE("validation: double destroy, foreign handles and wrong kinds") {
  Session session("1");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
  REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_stream_synchronize(stream) == HAL_ERROR_DESTROYED_HANDLE);

  uint64_t not_a_handle[4] = {};
  CHECK(hal_stream_query(reinterpret_cast<hal_stream_t>(not_a_handle)) == HAL_ERROR_INVALID_HANDLE);
  CHECK(contains(last_message(), "by the validation layer's records"));

  hal_event_t event = nullptr;
  REQUIRE(hal_event_create(session.device, 0, &event) == HAL_SUCCESS);
  CHECK(hal_stream_query(reinterpret_cast<hal_stream_t>(event)) == HAL_ERROR_INVALID_HANDLE);
  CHECK(contains(last_message(), "is a event handle, not a stream handle"));
  // A destroy with NULL stays the documented no-op.
  CHECK(hal_stream_destroy(nullptr) == HAL_SUCCESS);
  REQUIRE(hal_event_destroy(event) == HAL_SUCCESS);
}

TEST_CASE("validation: events across devices and events never recorded") {
  Session session("1");
  hal_stream_t stream_b = nullptr;
  hal_event_t event_a = nullptr;
  REQUIRE(hal_stream_create(session.other_device, 0, &stream_b) == HAL_SUCCESS);
  REQUIRE(hal_event_create(session.device, HAL_EVENT_FLAG_TIMING, &event_a) == HAL_SUCCESS);

  // An event of device A recorded on a stream of device B.
  CHECK(hal_event_record(event_a, stream_b) == HAL_ERROR_DEVICE_MISMATCH);

  // Waiting on an event never recorded is legal (it is complete) but a warning.
  StderrCapture capture;
  CHECK(hal_stream_wait_event(stream_b, event_a) == HAL_SUCCESS);
  const std::string warnings = capture.text();
  CHECK(contains(warnings, "hal: validation: warning: hal_stream_wait_event: event"));
  CHECK(contains(warnings, "was never recorded"));

  // Timing needs recorded events: an error, as the header says.
  hal_event_t end_a = nullptr;
  REQUIRE(hal_event_create(session.device, HAL_EVENT_FLAG_TIMING, &end_a) == HAL_SUCCESS);
  float ms = 0;
  CHECK(hal_event_elapsed_ms(event_a, end_a, &ms) == HAL_ERROR_INVALID_STATE);
  CHECK(contains(last_message(), "start"));
  CHECK(contains(last_message(), "was never recorded"));

  REQUIRE(hal_event_destroy(end_a) == HAL_SUCCESS);
  REQUIRE(hal_event_destroy(event_a) == HAL_SUCCESS);
  REQUIRE(hal_stream_destroy(stream_b) == HAL_SUCCESS);
}

TEST_CASE("validation: kernel pointer arguments must be HAL memory the device reaches") {
  Session session("1");
  hal_module_t module = nullptr;
  hal_kernel_t kernel = load_kernel(session.device, "affine_u32", &module);
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
  uint32_t* device_memory = nullptr;
  REQUIRE(hal_mem_alloc(session.device, HAL_MEMORY_DEVICE, 64, 0,
                        reinterpret_cast<void**>(&device_memory)) == HAL_SUCCESS);

  SECTION("an allocation of the kernel's device is accepted, as is NULL") {
    CHECK(launch_affine(kernel, device_memory + 3, stream) == HAL_SUCCESS);
    CHECK(launch_affine(kernel, nullptr, stream, 0) == HAL_SUCCESS);
  }
  SECTION("host memory is an error naming the argument") {
    std::vector<uint32_t> host(16);
    CHECK(launch_affine(kernel, host.data(), stream) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last_message(), "args[0] of kernel 'affine_u32'"));
    CHECK(contains(last_message(), "not inside any live HAL allocation"));
  }
  SECTION("one past the end of an allocation is out of bounds") {
    CHECK(launch_affine(kernel, device_memory + 16, stream) == HAL_ERROR_OUT_OF_BOUNDS);
    CHECK(contains(last_message(), "args[0]"));
    CHECK(contains(last_message(), "one past the end of the 64-byte allocation"));
  }
  SECTION("a freed allocation is no longer HAL memory") {
    uint32_t* freed = nullptr;
    REQUIRE(hal_mem_alloc(session.device, HAL_MEMORY_DEVICE, 64, 0,
                          reinterpret_cast<void**>(&freed)) == HAL_SUCCESS);
    REQUIRE(hal_mem_free(freed) == HAL_SUCCESS);
    const hal_result_t result = launch_affine(kernel, freed, stream);
    // Not a live allocation; when the block sat right after |device_memory|
    // it reads as one past that allocation's end.
    CHECK((result == HAL_ERROR_INVALID_ARGUMENT || result == HAL_ERROR_OUT_OF_BOUNDS));
  }
  SECTION("a peer's HOST allocation is reachable with peer access and unified addressing") {
    void* peer_host = nullptr;
    REQUIRE(hal_mem_alloc(session.other_device, HAL_MEMORY_HOST, 64, 0, &peer_host) == HAL_SUCCESS);
    CHECK(launch_affine(kernel, peer_host, stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    REQUIRE(hal_mem_free(peer_host) == HAL_SUCCESS);
  }
  REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
  REQUIRE(hal_mem_free(device_memory) == HAL_SUCCESS);
  REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
  // The module took its kernel with it.
  CHECK(launch_affine(kernel, nullptr, stream) == HAL_ERROR_DESTROYED_HANDLE);
}

TEST_CASE("validation: host ranges of copies may not run into allocations") {
  Session session("1");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
  uint8_t* memory = nullptr;
  REQUIRE(hal_mem_alloc(session.device, HAL_MEMORY_DEVICE, 4096, 0,
                        reinterpret_cast<void**>(&memory)) == HAL_SUCCESS);
  std::vector<uint8_t> host(4096);

  // Starting exactly at the end of an allocation: an overrun at offset size.
  CHECK(hal_memcpy_async(memory + 4096, host.data(), 16, stream) == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK(contains(last_message(), "dst: 16 bytes at offset 4096 overrun a 4096-byte allocation"));
  // A range in no allocation that runs into one.
  CHECK(hal_memset_async(memory - 8, 0, 16, stream) == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK(contains(last_message(), "runs into the allocation"));
  // Plain host memory stays a legal copy source.
  CHECK(hal_memcpy_async(memory, host.data(), 4096, stream) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
  REQUIRE(hal_mem_free(memory) == HAL_SUCCESS);
  REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("validation: destroying a stream with work pending warns, then waits") {
  Session session("1");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
  std::atomic<bool> open{false};
  const hal_host_fn_t gate = [](void* data) {
    auto* flag = static_cast<std::atomic<bool>*>(data);
    while (!flag->load()) std::this_thread::yield();
  };
  REQUIRE(hal_stream_enqueue_host_fn(stream, gate, &open) == HAL_SUCCESS);
  StderrCapture capture;
  // Opens the gate once the warning is out, so the destroy can finish.
  std::thread opener([&] {
    while (!contains(capture.peek(), "still has work pending")) std::this_thread::yield();
    open = true;
  });
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  opener.join();
  CHECK(contains(capture.text(), "hal: validation: warning: hal_stream_destroy: stream"));
  CHECK(open.load());
}

TEST_CASE("validation: the leak report names objects, bytes and where each was created") {
  StderrCapture capture;
  {
    Session session("1");
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
    void* memory = nullptr;
    REQUIRE(hal_mem_alloc(session.other_device, HAL_MEMORY_DEVICE, 4096, 0, &memory) ==
            HAL_SUCCESS);
    hal_event_t freed_event = nullptr;
    REQUIRE(hal_event_create(session.device, 0, &freed_event) == HAL_SUCCESS);
    REQUIRE(hal_event_destroy(freed_event) == HAL_SUCCESS);
    session.shutdown();
  }
  const std::string report = capture.text();
  CHECK(contains(report, "hal: validation: leak report: 1 object and 1 allocation (4096 bytes)"));
  CHECK(contains(report, "  stream 0x"));
  CHECK(contains(report, "on device 0, created at "));
  CHECK(contains(report, "allocation 0x"));
  CHECK(contains(report, "of 4096 bytes (HAL_MEMORY_DEVICE) on device 1"));
  // The creation site is this test binary, as module+offset.
  CHECK(contains(report, "layers_tests+0x"));
  CHECK_FALSE(contains(report, "event"));
}

TEST_CASE("validation: HAL_VALIDATION_BACKTRACE=1 adds the creation stack") {
  setenv("HAL_VALIDATION_BACKTRACE", "1", 1);
  StderrCapture capture;
  {
    Session session("1");
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
    session.shutdown();
  }
  unsetenv("HAL_VALIDATION_BACKTRACE");
  const std::string report = capture.text();
  CHECK(contains(report, "leak report: 1 object and 0 allocations (0 bytes)"));
  CHECK(contains(report, "      at "));
}

TEST_CASE("validation off: HAL_VALIDATION=0 leaves only the loader's own checks") {
  StderrCapture capture;
  {
    Session session("0");
    uint64_t not_a_handle[4] = {};
    CHECK(hal_stream_query(reinterpret_cast<hal_stream_t>(not_a_handle)) ==
          HAL_ERROR_INVALID_HANDLE);
    CHECK_FALSE(contains(last_message(), "validation layer"));
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
    session.shutdown();  // leaks the stream: no report without validation
  }
  CHECK_FALSE(contains(capture.text(), "leak report"));
}

TEST_CASE("validation: collective buffers follow the host-range rules of copies") {
  Session session("1");
  hal_comm_t comm = nullptr;
  REQUIRE(hal_comm_init_all(1, &session.device, nullptr, &comm) == HAL_SUCCESS);
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
  uint8_t* memory = nullptr;
  REQUIRE(hal_mem_alloc(session.device, HAL_MEMORY_DEVICE, 4096, 0,
                        reinterpret_cast<void**>(&memory)) == HAL_SUCCESS);
  // 4 floats starting at the allocation's end, and 4 running into it.
  CHECK(hal_allreduce(memory, memory + 4096, 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream) ==
        HAL_ERROR_OUT_OF_BOUNDS);
  CHECK(contains(last_message(), "recvbuf: 16 bytes at offset 4096 overrun a 4096-byte"));
  CHECK(hal_send(memory - 8, 4, HAL_DTYPE_F32, 0, comm, stream) == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK(contains(last_message(), "hal_send"));
  CHECK(contains(last_message(), "sendbuf: the host range"));
  // In bounds, it runs.
  CHECK(hal_allreduce(memory, memory, 1024, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream) ==
        HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
  REQUIRE(hal_comm_destroy(comm) == HAL_SUCCESS);
  CHECK(hal_comm_rank(comm, nullptr) == HAL_ERROR_DESTROYED_HANDLE);
  REQUIRE(hal_mem_free(memory) == HAL_SUCCESS);
  REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("validation: a leaked communicator is in the leak report") {
  StderrCapture capture;
  {
    Session session("1");
    hal_device_t devices[2] = {session.device, session.other_device};
    hal_comm_t comms[2] = {};
    {
#ifdef HAL_SANITIZER_ADDRESS
      // hal_shutdown reports a leaked communicator but does not free it.
      const __lsan::ScopedDisabler leak_on_purpose;
#endif
      REQUIRE(hal_comm_init_all(2, devices, nullptr, comms) == HAL_SUCCESS);
    }
    REQUIRE(hal_comm_destroy(comms[0]) == HAL_SUCCESS);
    session.shutdown();
  }
  const std::string report = capture.text();
  CHECK(contains(report, "hal: validation: leak report: 1 object and 0 allocations"));
  CHECK(contains(report, "  communicator 0x"));
  CHECK(contains(report, "on device 1, created at "));
  CHECK(contains(report, "layers_tests+0x"));
}
