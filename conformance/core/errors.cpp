// core.errors: handle validation, destroyed handles, struct sizes, the error
// detail and result strings: the documented error paths of hal.h.
#include <cstring>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"
#include "kernel_sources.hpp"

namespace halconform {

HALCONFORM_TEST("core.errors.invalid_handles",
                "NULL and foreign handles are INVALID_HANDLE on every object", {}) {
  alignas(64) uint8_t foreign[256] = {};
  std::memset(foreign, 0x5a, sizeof(foreign));
  auto* fake_stream = reinterpret_cast<hal_stream_t>(foreign);
  auto* fake_event = reinterpret_cast<hal_event_t>(foreign);
  auto* fake_device = reinterpret_cast<hal_device_t>(foreign);
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  for (hal_stream_t stream : {static_cast<hal_stream_t>(nullptr), fake_stream}) {
    HC_EXPECT_RESULT(hal_stream_synchronize(stream), HAL_ERROR_INVALID_HANDLE);
    HC_EXPECT_RESULT(hal_stream_query(stream), HAL_ERROR_INVALID_HANDLE);
  }
  HC_EXPECT_RESULT(hal_stream_destroy(fake_stream), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_event_query(fake_event), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_event_synchronize(nullptr), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_device_get_properties(fake_device, &properties), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_device_synchronize(nullptr), HAL_ERROR_INVALID_HANDLE);
  hal_stream_t out = nullptr;
  HC_EXPECT_RESULT(hal_stream_create(fake_device, 0, &out), HAL_ERROR_INVALID_HANDLE);
  Stream stream(ctx.device());
  Event event(ctx.device());
  // An event passed as a stream is a handle of the wrong kind.
  HC_EXPECT_RESULT(hal_stream_synchronize(reinterpret_cast<hal_stream_t>(event.get())),
                   HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_event_record(event, nullptr), HAL_ERROR_INVALID_HANDLE);
  hal_device_t device = nullptr;
  uint32_t count = 0;
  HC_OK(hal_device_count(&count));
  HC_EXPECT_RESULT(hal_device_get(count, &device), HAL_ERROR_NOT_FOUND);
  HC_EXPECT_RESULT(hal_device_count(nullptr), HAL_ERROR_NULL_POINTER);
}

HALCONFORM_TEST("core.errors.destroyed_handles",
                "destroy returns SUCCESS once; a second destroy and any use are DESTROYED_HANDLE",
                {}) {
  hal_stream_t stream = nullptr;
  HC_OK(hal_stream_create(ctx.device(), 0, &stream));
  HC_OK(hal_stream_destroy(stream));
  HC_EXPECT_RESULT(hal_stream_destroy(stream), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_stream_synchronize(stream), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_memset_async(nullptr, 0, 0, stream), HAL_ERROR_DESTROYED_HANDLE);
  hal_event_t event = nullptr;
  HC_OK(hal_event_create(ctx.device(), 0, &event));
  HC_OK(hal_event_destroy(event));
  HC_EXPECT_RESULT(hal_event_destroy(event), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_event_query(event), HAL_ERROR_DESTROYED_HANDLE);
  Stream live(ctx.device());
  HC_EXPECT_RESULT(hal_event_record(event, live), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_stream_wait_event(live, event), HAL_ERROR_DESTROYED_HANDLE);
  std::vector<KernelSource> sources = kernel_sources(ctx);
  if (!sources.empty()) {
    SourceModule loaded(ctx.device(), sources.front());
    if (loaded.load_result() == HAL_SUCCESS) {
      const hal_kernel_t kernel = loaded.kernel("empty");
      hal_module_t raw = loaded.release();
      HC_OK(hal_module_unload(raw));
      HC_EXPECT_RESULT(hal_module_unload(raw), HAL_ERROR_DESTROYED_HANDLE);
      hal_kernel_info_t info{};
      info.struct_size = sizeof(info);
      HC_EXPECT_RESULT(hal_kernel_get_info(kernel, &info), HAL_ERROR_DESTROYED_HANDLE);
      hal_launch_config_t config{};
      config.struct_size = sizeof(config);
      config.grid[0] = config.grid[1] = config.grid[2] = 1;
      config.block[0] = config.block[1] = config.block[2] = 1;
      HC_EXPECT_RESULT(hal_launch_kernel(kernel, &config, 0, nullptr, live),
                       HAL_ERROR_DESTROYED_HANDLE);
      hal_kernel_desc_t desc{};
      desc.struct_size = sizeof(desc);
      desc.name = "empty";
      hal_kernel_t again = nullptr;
      HC_EXPECT_RESULT(hal_kernel_get(raw, &desc, &again), HAL_ERROR_DESTROYED_HANDLE);
    }
  }
}

HALCONFORM_TEST("core.errors.struct_sizes",
                "short output structs are INVALID_ARGUMENT; longer ones work and keep struct_size",
                {}) {
  struct Longer {
    hal_device_properties_t properties;
    uint8_t tail[64];
  } longer;
  std::memset(&longer, 0xff, sizeof(longer));
  longer.properties.struct_size = sizeof(longer);
  longer.properties.next = nullptr;
  HC_OK(hal_device_get_properties(ctx.device(), &longer.properties));
  // The tail past the v1.0 struct is not checked: SPEC.md §1 says zero-filled,
  // the loader (and its tests) keep the caller's bytes; see the report.
  HC_REQUIRE(longer.properties.struct_size == sizeof(longer), "the library wrote struct_size");
  hal_device_properties_t shorter{};
  shorter.struct_size = offsetof(hal_device_properties_t, peak_fp32_flops);
  HC_EXPECT_RESULT(hal_device_get_properties(ctx.device(), &shorter), HAL_ERROR_INVALID_ARGUMENT);
  hal_plugin_report_t report{};
  report.struct_size = 16;
  HC_EXPECT_RESULT(hal_plugin_report_get(0, &report), HAL_ERROR_INVALID_ARGUMENT);
}

HALCONFORM_TEST("core.errors.detail",
                "a failing call records its result, function and a message that names it", {}) {
  void* pointer = nullptr;
  HC_EXPECT_RESULT(hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, 0, 0, &pointer),
                   HAL_ERROR_INVALID_SIZE);
  hal_error_detail_t detail{};
  detail.struct_size = sizeof(detail);
  HC_OK(hal_error_get_detail(&detail));
  HC_REQUIRE(detail.result == HAL_ERROR_INVALID_SIZE,
             strf("the detail records %s", hal_result_string(detail.result)));
  HC_REQUIRE(detail.function != nullptr && std::strcmp(detail.function, "hal_mem_alloc") == 0,
             "the detail names another function");
  HC_REQUIRE(
      std::strncmp(hal_error_last_message(), "hal_mem_alloc: ", 15) == 0,
      std::string("the message does not start with the function: ") + hal_error_last_message());
  // Success does not clear the detail.
  Stream stream(ctx.device());
  HC_REQUIRE(std::strncmp(hal_error_last_message(), "hal_mem_alloc: ", 15) == 0,
             "a successful call cleared the detail");
  for (int code = HAL_SUCCESS; code <= HAL_ERROR_INTERNAL; ++code) {
    const char* name = hal_result_string(static_cast<hal_result_t>(code));
    HC_REQUIRE(name != nullptr && std::strncmp(name, "HAL_", 4) == 0,
               strf("hal_result_string(%d) is not a HAL_ name", code));
  }
  HC_REQUIRE(
      std::strcmp(hal_result_string(static_cast<hal_result_t>(999)), "HAL_RESULT_UNKNOWN") == 0,
      "an unknown result is not HAL_RESULT_UNKNOWN");
}

}  // namespace halconform
