// A test plugin with asynchronous streams (a worker thread each), host
// functions, stream queries and one kernel, but no events, memset or
// device_synchronize: so the loader's fallbacks run against real asynchrony.
// Two devices, so cross-device checks have something to mismatch.
#include <hal_plugin.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <string_view>
#include <thread>

struct hal_impl_device_s {
  uint32_t index;
};

struct hal_impl_stream_s {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  size_t unfinished = 0;
  bool stopping = false;
  std::thread worker;
};

struct hal_impl_module_s {
  int unused;
};

struct hal_impl_kernel_s {
  int unused;
};

namespace {

const hal_plugin_host_t* mock_host = nullptr;
hal_impl_device_t mock_devices[2] = {{0}, {1}};
hal_impl_module_t mock_module_storage;
hal_impl_kernel_t mock_scale_kernel;
constexpr hal_arg_type_t kScaleSignature[3] = {HAL_ARG_POINTER, HAL_ARG_U32, HAL_ARG_F32};

hal_result_t report(hal_result_t result, const char* message) {
  mock_host->set_error(mock_host->host_context, result, 7, message);
  return result;
}

// For the exit tests (lifetime_test.cpp): set when this plugin's static objects are destroyed,
// so a call the loader makes after that says so on stderr.
bool statics_destroyed = false;
struct StaticsSentinel {
  ~StaticsSentinel() { statics_destroyed = true; }
} statics_sentinel;

void run_worker(hal_impl_stream_t* stream) {
  std::unique_lock lock(stream->mutex);
  for (;;) {
    stream->changed.wait(lock, [&] { return stream->stopping || !stream->queue.empty(); });
    if (stream->queue.empty()) return;
    std::function<void()> job = std::move(stream->queue.front());
    stream->queue.pop_front();
    lock.unlock();
    job();
    lock.lock();
    --stream->unfinished;
    stream->changed.notify_all();
  }
}

hal_result_t enqueue(hal_impl_stream_t* stream, std::function<void()> job) {
  {
    std::lock_guard lock(stream->mutex);
    stream->queue.push_back(std::move(job));
    ++stream->unfinished;
  }
  stream->changed.notify_all();
  return HAL_SUCCESS;
}

hal_result_t mock_device_count(hal_plugin_context_t*, uint32_t* out_count) {
  *out_count = 2;
  return HAL_SUCCESS;
}

hal_result_t mock_device_open(hal_plugin_context_t*, uint32_t index,
                              hal_impl_device_t** out_device) {
  *out_device = &mock_devices[index];
  return HAL_SUCCESS;
}

hal_result_t mock_device_get_properties(hal_impl_device_t* device, hal_device_properties_t* out) {
  std::snprintf(out->name, sizeof(out->name), "HAL mock device %u", device->index);
  std::strcpy(out->vendor, "HAL tests");
  std::strcpy(out->driver_version, "mock 1");
  out->uuid[0] = static_cast<uint8_t>(device->index + 1);
  out->type = HAL_DEVICE_TYPE_ACCELERATOR;
  out->capabilities = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_HOST_CALLBACKS |
                      HAL_DEVICE_CAP_STREAM_QUERY | HAL_DEVICE_CAP_UNIFIED_ADDRESSING |
                      HAL_DEVICE_CAP_HOST_MEMORY | HAL_DEVICE_CAP_PEER_ACCESS |
                      // Claimed without comm entries: the loader must drop it.
                      HAL_DEVICE_CAP_COLLECTIVES;
  out->module_formats =
      (1u << HAL_MODULE_FORMAT_CPU_SHARED_OBJECT) | (1u << HAL_MODULE_FORMAT_OPENCL_C);
  // HAL_TEST_MOCK_DIALECT=1 at hal_init: the device claims HAL dialect modules, and
  // mock_module_load fails every one, so the loader's portable operators decline.
  if (const char* dialect = std::getenv("HAL_TEST_MOCK_DIALECT");
      dialect != nullptr && *dialect == '1') {
    out->module_formats |= 1u << HAL_MODULE_FORMAT_HAL_DIALECT;
  }
  out->compute_units = 4;
  out->total_memory_bytes = 1ull << 30;
  out->max_allocation_bytes = 1ull << 26;
  out->min_alignment_bytes = 128;
  out->max_threads_per_block = 256;
  const uint32_t block[3] = {256, 256, 64};
  const uint32_t grid[3] = {65536, 65536, 65536};
  std::memcpy(out->max_block_dims, block, sizeof(block));
  std::memcpy(out->max_grid_dims, grid, sizeof(grid));
  out->max_shared_memory_bytes = 4096;
  out->subgroup_size = 8;
  return HAL_SUCCESS;
}

hal_result_t mock_mem_alloc(hal_impl_device_t*, hal_memory_kind_t, size_t size, size_t alignment,
                            void** out_ptr) {
  void* ptr = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (ptr == nullptr) return report(HAL_ERROR_OUT_OF_MEMORY, "mock: aligned_alloc failed");
  *out_ptr = ptr;
  return HAL_SUCCESS;
}

hal_result_t mock_mem_free(hal_impl_device_t*, void* ptr) {
  std::free(ptr);
  return HAL_SUCCESS;
}

hal_result_t mock_memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src, size_t size) {
  // HAL_TEST_MOCK_COPY_FAILS=<code>: the copy fails with that code and enqueues nothing, as
  // an enqueue entry does that refuses its call (or, with HAL_ERROR_DEVICE_LOST, that reports
  // its stream lost; SPEC 4.4 "Which plugin results lose a stream").
  if (const char* code = std::getenv("HAL_TEST_MOCK_COPY_FAILS"); code != nullptr && *code) {
    return report(static_cast<hal_result_t>(std::atoi(code)),
                  "mock: the copy fails (HAL_TEST_MOCK_COPY_FAILS)");
  }
  return enqueue(stream, [=] { std::memcpy(dst, src, size); });
}

hal_result_t mock_stream_create(hal_impl_device_t*, hal_stream_flags_t,
                                hal_impl_stream_t** out_stream) {
  auto* stream = new (std::nothrow) hal_impl_stream_t;
  if (stream == nullptr) return report(HAL_ERROR_OUT_OF_MEMORY, "mock: no memory for a stream");
  stream->worker = std::thread(run_worker, stream);
  *out_stream = stream;
  return HAL_SUCCESS;
}

hal_result_t mock_stream_synchronize(hal_impl_stream_t* stream) {
  if (statics_destroyed) {
    std::fputs("mock: stream_synchronize called after the plugin's static objects were destroyed\n",
               stderr);
  }
  std::unique_lock lock(stream->mutex);
  stream->changed.wait(lock, [&] { return stream->unfinished == 0; });
  // HAL_TEST_MOCK_LOSE_STREAMS=1: every stream reports itself lost, with a detail, and
  // with the code HAL_TEST_MOCK_LOSS_CODE names (a number; HAL_ERROR_DEVICE_LOST when unset):
  // a stream is lost with the code of what failed on it (SPEC 4.4).
  if (const char* lose = std::getenv("HAL_TEST_MOCK_LOSE_STREAMS");
      lose != nullptr && *lose == '1') {
    const char* code = std::getenv("HAL_TEST_MOCK_LOSS_CODE");
    const hal_result_t loss = code != nullptr && *code != '\0'
                                  ? static_cast<hal_result_t>(std::atoi(code))
                                  : HAL_ERROR_DEVICE_LOST;
    return report(loss, "mock: the stream is lost (HAL_TEST_MOCK_LOSE_STREAMS)");
  }
  return HAL_SUCCESS;
}

hal_result_t mock_stream_destroy(hal_impl_stream_t* stream) {
  mock_stream_synchronize(stream);
  {
    std::lock_guard lock(stream->mutex);
    stream->stopping = true;
  }
  stream->changed.notify_all();
  stream->worker.join();
  delete stream;
  return HAL_SUCCESS;
}

hal_result_t mock_stream_query(hal_impl_stream_t* stream) {
  std::lock_guard lock(stream->mutex);
  return stream->unfinished == 0 ? HAL_SUCCESS : HAL_NOT_READY;
}

hal_result_t mock_stream_enqueue_host_fn(hal_impl_stream_t* stream, hal_host_fn_t fn,
                                         void* user_data) {
  return enqueue(stream, [=] { fn(user_data); });
}

hal_result_t mock_module_load(hal_impl_device_t*, const hal_module_desc_t* desc,
                              hal_impl_module_t** out_module) {
  if (desc->format == HAL_MODULE_FORMAT_HAL_DIALECT) {
    return report(HAL_ERROR_INVALID_MODULE, "mock: no dialect compiler (HAL_TEST_MOCK_DIALECT)");
  }
  if (desc->data != nullptr && std::memcmp(desc->data, "broken", 6) == 0) {
    return report(HAL_ERROR_INVALID_MODULE, "mock: the image says it is broken");
  }
  // A plugin bug: a code outside hal_result_t (enum_range_test.cpp).
  const std::string_view image =
      desc->data != nullptr ? std::string_view(static_cast<const char*>(desc->data), desc->size)
                            : std::string_view();
  if (image == "bogus") return static_cast<hal_result_t>(-7);
  if (image == "reported bogus") {
    return report(static_cast<hal_result_t>(4242), "mock: a code of its own");
  }
  *out_module = &mock_module_storage;
  return HAL_SUCCESS;
}

hal_result_t mock_module_unload(hal_impl_module_t*) {
  return HAL_SUCCESS;
}

hal_result_t mock_kernel_get(hal_impl_module_t*, const hal_kernel_desc_t* desc,
                             hal_impl_kernel_t** out_kernel, hal_kernel_info_t* out_info) {
  if (std::strcmp(desc->name, "scale") != 0) {
    return report(HAL_ERROR_NOT_FOUND, "mock: the module has only the kernel 'scale'");
  }
  if (desc->arg_types != nullptr &&
      (desc->arg_count != 3 ||
       std::memcmp(desc->arg_types, kScaleSignature, sizeof(kScaleSignature)) != 0)) {
    return report(HAL_ERROR_ARGUMENT_MISMATCH, "mock: 'scale' takes (ptr, u32, f32)");
  }
  out_info->name = "scale";
  out_info->arg_count = 3;
  std::memcpy(out_info->arg_types, kScaleSignature, sizeof(kScaleSignature));
  out_info->max_threads_per_block = 128;
  *out_kernel = &mock_scale_kernel;
  return HAL_SUCCESS;
}

// scale(float* x, uint32_t n, float factor): x[i] *= factor for every i < n.
hal_result_t mock_launch_kernel(hal_impl_stream_t* stream, hal_impl_kernel_t*,
                                const hal_launch_config_t*, uint32_t,
                                const hal_kernel_arg_t* args) {
  float* x = nullptr;
  uint32_t n = 0;
  float factor = 0;
  std::memcpy(&x, args[0].value, sizeof(x));
  std::memcpy(&n, args[1].value, sizeof(n));
  std::memcpy(&factor, args[2].value, sizeof(factor));
  return enqueue(stream, [=] {
    for (uint32_t i = 0; i < n; ++i) x[i] *= factor;
  });
}

// Operators: only an f32 unary scale (activation NONE) of dense tensors, so
// the loader's plugin path and the precedence of the op entries are testable.
struct MockOpPlan {
  float alpha;
  int64_t count;
};

// Names the implementation before planning: mock.scale for HAL_OP_UNARY,
// none of its own for the other kinds (the loader then never asks).
const char* mock_op_implementation(hal_impl_device_t*, hal_op_kind_t kind) {
  if (std::getenv("HAL_TEST_MOCK_TRACE_PLANS") != nullptr) {
    std::fprintf(stderr, "mock: op_implementation kind %d\n", static_cast<int>(kind));
  }
  return kind == HAL_OP_UNARY ? "mock.scale" : nullptr;
}

hal_result_t mock_op_plan_create(hal_impl_device_t*, const hal_op_header_t* desc,
                                 hal_op_plan_flags_t, hal_impl_op_plan_t** out_plan,
                                 size_t* out_workspace_bytes, const char** out_implementation) {
  // Each call announced on stderr when asked, so a test counts them: the
  // loader must not ask an implementation it has filtered out.
  if (std::getenv("HAL_TEST_MOCK_TRACE_PLANS") != nullptr) {
    std::fprintf(stderr, "mock: op_plan_create kind %d\n", static_cast<int>(desc->kind));
  }
  if (desc->kind != HAL_OP_UNARY) {
    return report(HAL_ERROR_UNSUPPORTED, "mock: only HAL_OP_UNARY is implemented");
  }
  const auto* unary = reinterpret_cast<const hal_op_unary_desc_t*>(desc);
  if (unary->activation != HAL_ACTIVATION_NONE || unary->x.dtype != HAL_DTYPE_F32 ||
      unary->out.dtype != HAL_DTYPE_F32) {
    return report(HAL_ERROR_UNSUPPORTED, "mock: only an f32 scale (activation NONE)");
  }
  int64_t count = 1;
  int64_t stride = 1;
  for (uint32_t d = unary->x.rank; d-- > 0;) {
    if (unary->x.strides[d] != stride || unary->out.strides[d] != stride) {
      return report(HAL_ERROR_UNSUPPORTED, "mock: only dense tensors");
    }
    stride *= unary->x.shape[d];
    count *= unary->x.shape[d];
  }
  *out_plan = reinterpret_cast<hal_impl_op_plan_t*>(new MockOpPlan{unary->alpha, count});
  *out_workspace_bytes = 0;
  *out_implementation = "mock.scale";
  return HAL_SUCCESS;
}

hal_result_t mock_op_plan_destroy(hal_impl_op_plan_t* plan) {
  delete reinterpret_cast<MockOpPlan*>(plan);
  return HAL_SUCCESS;
}

hal_result_t mock_op_execute(hal_impl_op_plan_t* plan, hal_impl_stream_t* stream,
                             const hal_op_exec_args_t* args) {
  const MockOpPlan op = *reinterpret_cast<MockOpPlan*>(plan);
  const auto* x = static_cast<const float*>(args->operands[0]);
  auto* out = static_cast<float*>(args->operands[1]);
  return enqueue(stream, [=] {
    for (int64_t i = 0; i < op.count; ++i) out[i] = op.alpha * x[i];
  });
}

const hal_plugin_table_v1_t mock_table = [] {
  hal_plugin_table_v1_t table{};
  table.struct_size = sizeof(table);
  table.device_count = mock_device_count;
  table.device_open = mock_device_open;
  table.device_get_properties = mock_device_get_properties;
  table.mem_alloc = mock_mem_alloc;
  table.mem_free = mock_mem_free;
  table.memcpy_async = mock_memcpy_async;
  table.stream_create = mock_stream_create;
  table.stream_destroy = mock_stream_destroy;
  table.stream_synchronize = mock_stream_synchronize;
  table.stream_query = mock_stream_query;
  table.stream_enqueue_host_fn = mock_stream_enqueue_host_fn;
  table.module_load = mock_module_load;
  table.module_unload = mock_module_unload;
  table.kernel_get = mock_kernel_get;
  table.launch_kernel = mock_launch_kernel;
  table.op_plan_create = mock_op_plan_create;
  table.op_plan_destroy = mock_op_plan_destroy;
  table.op_execute = mock_op_execute;
  table.op_implementation = mock_op_implementation;
  return table;
}();

}  // namespace

extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                           hal_plugin_v1_t* out_plugin) {
  if (HAL_VERSION_MAJOR(host->abi_version) != HAL_ABI_VERSION_MAJOR) return HAL_ERROR_ABI_MISMATCH;
  mock_host = host;
  out_plugin->abi_version = HAL_ABI_VERSION;
  // HAL_TEST_MOCK_ABI_MINOR=m: the mock declares ABI 1.m, as a plugin built
  // against an older minor does (SPEC §2).
  if (const char* minor = std::getenv("HAL_TEST_MOCK_ABI_MINOR"); minor != nullptr) {
    out_plugin->abi_version = HAL_MAKE_VERSION(
        HAL_ABI_VERSION_MAJOR, static_cast<uint32_t>(std::strtoul(minor, nullptr, 10)), 0);
  }
  out_plugin->name = "mock";
  out_plugin->version = "1.0";
  out_plugin->vendor = "HAL tests";
  out_plugin->build_id = "mock";
  out_plugin->table = &mock_table;
  return HAL_SUCCESS;
}
