// core.errors.documented: every result the core functions' comments list
// that a caller can provoke (the coverage report names each one), on every
// function: NULL, foreign and destroyed handles, NULL out-pointers, struct
// sizes, and the device relations of copies, fills and timing.
#include <cstring>
#include <thread>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"
#include "kernel_sources.hpp"

namespace halconform {

HALCONFORM_TEST("core.errors.documented",
                "the documented results of the core calls: every handle NULL, foreign and "
                "destroyed, every out-pointer NULL, every struct too short",
                {}) {
  alignas(64) uint8_t foreign[256];
  std::memset(foreign, 0x5a, sizeof(foreign));
  const auto fake_stream = reinterpret_cast<hal_stream_t>(foreign);
  const auto fake_event = reinterpret_cast<hal_event_t>(foreign);
  const auto fake_device = reinterpret_cast<hal_device_t>(foreign);
  Stream live(ctx.device());
  Buffer buffer(ctx.device(), 256);
  uint8_t host[256] = {};
  // The library's identity and the device list.
  HC_REQUIRE(HAL_VERSION_MAJOR(hal_get_version()) == HAL_ABI_VERSION_MAJOR,
             strf("hal_get_version is %u.x, halconform was built against ABI %u",
                  HAL_VERSION_MAJOR(hal_get_version()), HAL_ABI_VERSION_MAJOR));
  hal_device_t device = nullptr;
  HC_OK(hal_device_get(0, &device));
  HC_EXPECT_RESULT(hal_device_get(0, nullptr), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_device_get_properties(ctx.device(), nullptr), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_plugin_report_count(nullptr), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_plugin_report_get(0, nullptr), HAL_ERROR_NULL_POINTER);
  // The error detail: none yet on a fresh thread; NULL; too short.
  hal_result_t fresh = HAL_SUCCESS;
  std::thread([&fresh] {
    hal_error_detail_t detail{};
    detail.struct_size = sizeof(detail);
    fresh = hal_error_get_detail(&detail);
  }).join();
  HC_REQUIRE(fresh == HAL_ERROR_NOT_FOUND,
             strf("hal_error_get_detail on a thread where no call failed returned %s, expected "
                  "HAL_ERROR_NOT_FOUND",
                  hal_result_string(fresh)));
  HC_EXPECT_RESULT(hal_error_get_detail(nullptr), HAL_ERROR_NULL_POINTER);
  hal_error_detail_t short_detail{};
  short_detail.struct_size = 8;
  HC_EXPECT_RESULT(hal_error_get_detail(&short_detail), HAL_ERROR_INVALID_ARGUMENT);
  // Streams.
  hal_device_t owner = nullptr;
  HC_EXPECT_RESULT(hal_stream_get_device(nullptr, &owner), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_stream_get_device(live, nullptr), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_stream_enqueue_host_fn(
                       fake_stream, [](void*) {}, nullptr),
                   HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_stream_wait_event(nullptr, nullptr), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_memcpy_async(host, buffer.get(), 16, fake_stream), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_memset_async(buffer.get(), 0, 16, nullptr), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_memset_async(buffer.bytes() + 8, 0, SIZE_MAX, live), HAL_ERROR_INVALID_SIZE);
  hal_stream_t gone = nullptr;
  HC_OK(hal_stream_create(ctx.device(), 0, &gone));
  HC_OK(hal_stream_destroy(gone));
  HC_EXPECT_RESULT(hal_stream_get_device(gone, &owner), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_stream_query(gone), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_stream_enqueue_host_fn(
                       gone, [](void*) {}, nullptr),
                   HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_memcpy_async(host, buffer.get(), 16, gone), HAL_ERROR_DESTROYED_HANDLE);
  // Events.
  hal_event_t event = nullptr;
  HC_EXPECT_RESULT(hal_event_create(fake_device, 0, &event), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_event_destroy(fake_event), HAL_ERROR_INVALID_HANDLE);
  Event never(ctx.device());
  HC_OK(hal_stream_wait_event(live, never));  // never recorded: no effect
  float ms = 0;
  HC_EXPECT_RESULT(hal_event_elapsed_ms(nullptr, never, &ms), HAL_ERROR_INVALID_HANDLE);
  hal_event_t dead = nullptr;
  HC_OK(hal_event_create(ctx.device(), 0, &dead));
  HC_OK(hal_event_destroy(dead));
  HC_EXPECT_RESULT(hal_event_synchronize(dead), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_event_elapsed_ms(dead, never, &ms), HAL_ERROR_DESTROYED_HANDLE);
  // Memory.
  void* pointer = nullptr;
  HC_EXPECT_RESULT(hal_mem_alloc(fake_device, HAL_MEMORY_DEVICE, 64, 0, &pointer),
                   HAL_ERROR_INVALID_HANDLE);
  hal_memory_info_t info{};
  info.struct_size = sizeof(info);
  HC_EXPECT_RESULT(hal_mem_get_info(nullptr, &info), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_mem_get_info(buffer.get(), nullptr), HAL_ERROR_NULL_POINTER);
  // Modules.
  HC_EXPECT_RESULT(hal_module_unload(reinterpret_cast<hal_module_t>(foreign)),
                   HAL_ERROR_INVALID_HANDLE);
  // Two devices: relations across them.
  if (ctx.peer_device() != nullptr) {
    Buffer remote(ctx.peer_device(), 256);
    const bool peers = ctx.has(HAL_DEVICE_CAP_PEER_ACCESS) &&
                       (ctx.peer_properties().capabilities & HAL_DEVICE_CAP_PEER_ACCESS) != 0;
    if (peers) {
      HC_OK(hal_memset_async(remote.get(), 0x42, 256, live));  // a peer's memory, this stream
      const std::vector<uint8_t> back = read_back(live, remote.get(), 256);
      HC_REQUIRE(back[0] == 0x42 && back[255] == 0x42,
                 std::string("hal_memset_async of a peer device's memory on this device's "
                             "stream did not land (HAL_DEVICE_CAP_PEER_ACCESS)"));
    } else {
      HC_EXPECT_RESULT(hal_memcpy_async(buffer.get(), remote.get(), 64, live),
                       HAL_ERROR_DEVICE_MISMATCH);
      HC_EXPECT_RESULT(hal_memset_async(remote.get(), 0, 64, live), HAL_ERROR_DEVICE_MISMATCH);
    }
    if (ctx.has(HAL_DEVICE_CAP_EVENT_TIMING) &&
        (ctx.peer_properties().capabilities & HAL_DEVICE_CAP_EVENT_TIMING) != 0) {
      Event here(ctx.device(), HAL_EVENT_FLAG_TIMING),
          there(ctx.peer_device(), HAL_EVENT_FLAG_TIMING);
      Stream peer_stream(ctx.peer_device());
      HC_OK(hal_event_record(here, live));
      HC_OK(hal_event_record(there, peer_stream));
      HC_OK(hal_event_synchronize(here));
      HC_OK(hal_event_synchronize(there));
      HC_EXPECT_RESULT(hal_event_elapsed_ms(here, there, &ms), HAL_ERROR_DEVICE_MISMATCH);
    }
  }
}

HALCONFORM_TEST("core.errors.operators",
                "the documented results of the operator calls that do not depend on an op: "
                "handles, NULL pointers, struct sizes",
                {}) {
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_UNARY;
  desc.activation = HAL_ACTIVATION_NONE;
  desc.alpha = 1.0f;
  const int64_t shape[1] = {64};
  hal_tensor_desc_contiguous(&desc.x, HAL_DTYPE_F32, 1, shape);
  hal_tensor_desc_contiguous(&desc.out, HAL_DTYPE_F32, 1, shape);
  hal_op_plan_t plan = nullptr;
  HC_EXPECT_RESULT(hal_op_plan_create(nullptr, &desc.header, 0, &plan), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_op_plan_destroy(reinterpret_cast<hal_op_plan_t>(ctx.device())),
                   HAL_ERROR_INVALID_HANDLE);
  const hal_result_t planned = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
  if (planned == HAL_ERROR_UNSUPPORTED) {
    ctx.skip(std::string("the device accepts no operator plan (SPEC.md §17.3): ") +
             hal_error_last_message());
  }
  HC_OK(planned);
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  HC_EXPECT_RESULT(hal_op_plan_get_info(plan, nullptr), HAL_ERROR_NULL_POINTER);
  info.struct_size = 8;
  HC_EXPECT_RESULT(hal_op_plan_get_info(plan, &info), HAL_ERROR_INVALID_ARGUMENT);
  Stream stream(ctx.device());
  Buffer x(ctx.device(), 256);
  void* operands[2] = {x.get(), x.get()};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = 2;
  args.operands = operands;
  hal_op_exec_args_t empty{};
  empty.struct_size = sizeof(empty);
  HC_EXPECT_RESULT(hal_op_execute(plan, &empty, stream), HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(hal_op_execute(nullptr, &args, stream), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_op_execute(plan, &args, nullptr), HAL_ERROR_INVALID_HANDLE);
  HC_OK(hal_op_execute(plan, &args, stream));
  HC_OK(hal_stream_synchronize(stream));
  HC_OK(hal_op_plan_destroy(plan));
  HC_EXPECT_RESULT(hal_op_execute(plan, &args, stream), HAL_ERROR_DESTROYED_HANDLE);
}

}  // namespace halconform
