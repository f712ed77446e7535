// The cuda plugin beside the raw CUDA Driver API on the same GPU, interleaved
// in every repetition:
//
//   copy    device-to-device copy bandwidth, timed on the device by events around the
//           copy (hal_event_elapsed_ms vs cuEventElapsedTime): hal_memcpy_async vs
//           cuMemcpyDtoDAsync (GB/s, higher is better); and the same wall-clock timed
//           with the synchronize, where HAL's per-call host cost shows
//   launch  one-argument empty-kernel latency: hal_launch_kernel +
//           hal_stream_synchronize vs cuLaunchKernel + cuStreamSynchronize,
//           per launch and pipelined (us, lower is better)
//
// The raw side opens libcuda.so.1 the way the plugin does (dlopen, then
// cuGetProcAddress_v2 for every entry point), so the difference is HAL's.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

// An empty kernel of one u32 parameter; PTX 7.5 for sm_75 JIT-compiles for
// every later GPU.
constexpr char kEmptyPtx[] = R"(
.version 7.5
.target sm_75
.address_size 64
.visible .entry hal_bench_empty(.param .u32 n)
{
	ret;
}
)";

struct Raw {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&::cuCtxSetCurrent) set_current = nullptr;
  decltype(&::cuMemAlloc) alloc = nullptr;
  decltype(&::cuMemFree) free = nullptr;
  decltype(&::cuMemcpyDtoDAsync) copy = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamSynchronize) stream_sync = nullptr;
  decltype(&::cuModuleLoadData) load = nullptr;
  decltype(&::cuModuleGetFunction) function = nullptr;
  decltype(&::cuLaunchKernel) launch = nullptr;
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventSynchronize) event_sync = nullptr;
  decltype(&::cuEventElapsedTime) elapsed = nullptr;
  CUstream stream = nullptr;
  CUevent before = nullptr, after = nullptr;
  CUfunction empty = nullptr;

  bool open(std::string& why) {
    // The driver the plugin was pointed at (the stand-in in a dry run).
    const char* path = std::getenv("HAL_CUDA_DRIVER_PATH");
    void* library =
        dlopen(path != nullptr && path[0] != '\0' ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      why = dlerror();
      return false;
    }
    auto get_proc =
        reinterpret_cast<decltype(&::cuGetProcAddress)>(dlsym(library, "cuGetProcAddress_v2"));
    if (get_proc == nullptr) {
      why = "no cuGetProcAddress_v2";
      return false;
    }
    bool ok = true;
    auto resolve = [&](const char* name, auto& slot) {
      void* pointer = nullptr;
      CUdriverProcAddressQueryResult status{};
      if (get_proc(name, &pointer, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
              CUDA_SUCCESS ||
          pointer == nullptr) {
        why = std::string("cannot resolve ") + name;
        ok = false;
      }
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(pointer);
    };
    resolve("cuInit", init);
    resolve("cuDeviceGet", device_get);
    resolve("cuDevicePrimaryCtxRetain", retain);
    resolve("cuCtxSetCurrent", set_current);
    resolve("cuMemAlloc", alloc);
    resolve("cuMemFree", free);
    resolve("cuMemcpyDtoDAsync", copy);
    resolve("cuStreamCreate", stream_create);
    resolve("cuStreamSynchronize", stream_sync);
    resolve("cuModuleLoadData", load);
    resolve("cuModuleGetFunction", function);
    resolve("cuLaunchKernel", launch);
    resolve("cuEventCreate", event_create);
    resolve("cuEventRecord", event_record);
    resolve("cuEventSynchronize", event_sync);
    resolve("cuEventElapsedTime", elapsed);
    if (!ok) return false;
    CUdevice device = 0;
    CUcontext context = nullptr;
    CUmodule module = nullptr;
    if (init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS ||
        retain(&context, device) != CUDA_SUCCESS || set_current(context) != CUDA_SUCCESS ||
        stream_create(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        event_create(&before, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        event_create(&after, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        load(&module, kEmptyPtx) != CUDA_SUCCESS ||
        function(&empty, module, "hal_bench_empty") != CUDA_SUCCESS) {
      why = "CUDA setup on device 0 failed";
      return false;
    }
    return true;
  }
};

bool check(hal_result_t result, const char* what) {
  if (result == HAL_SUCCESS) return true;
  std::fprintf(stderr, "error: %s: %s: %s\n", what, hal_result_string(result),
               hal_error_last_message());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  if (args.flag("--help")) {
    std::printf(
        "usage: cuda_peer [--reps N] [--bytes N] [--launches N]\n"
        "HAL's cuda plugin vs the raw CUDA Driver API on GPU 0: D2D copy bandwidth and\n"
        "empty-kernel launch latency, median [min-max] over the repetitions.\n");
    return 0;
  }
  const int reps = static_cast<int>(args.integer("--reps", 9));
  const size_t bytes = static_cast<size_t>(args.integer("--bytes", 256 << 20));
  const int launches = static_cast<int>(args.integer("--launches", 2000));
  args.finish();

  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  options.plugins = "cuda";
  if (!check(hal_init(&options), "hal_init")) return 1;
  uint32_t count = 0;
  hal_device_count(&count);
  if (count == 0) {
    std::fprintf(stderr, "error: the cuda plugin has no device (see halinfo)\n");
    return 1;
  }
  hal_device_t device = nullptr;
  hal_stream_t stream = nullptr;
  void* src = nullptr;
  void* dst = nullptr;
  hal_module_t module = nullptr;
  hal_kernel_t kernel = nullptr;
  hal_device_get(0, &device);
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_PTX;
  desc.data = kEmptyPtx;
  desc.size = sizeof(kEmptyPtx) - 1;
  const hal_arg_type_t types[] = {HAL_ARG_U32};
  hal_kernel_desc_t kernel_desc{};
  kernel_desc.struct_size = sizeof(kernel_desc);
  kernel_desc.name = "hal_bench_empty";
  kernel_desc.arg_types = types;
  kernel_desc.arg_count = 1;
  if (!check(hal_stream_create(device, 0, &stream), "hal_stream_create") ||
      !check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &src), "hal_mem_alloc") ||
      !check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &dst), "hal_mem_alloc") ||
      !check(hal_module_load(device, &desc, &module), "hal_module_load") ||
      !check(hal_kernel_get(module, &kernel_desc, &kernel), "hal_kernel_get")) {
    return 1;
  }
  hal_event_t before = nullptr, after = nullptr;
  if (!check(hal_event_create(device, HAL_EVENT_FLAG_TIMING, &before), "hal_event_create") ||
      !check(hal_event_create(device, HAL_EVENT_FLAG_TIMING, &after), "hal_event_create")) {
    return 1;
  }
  Raw raw;
  std::string why;
  if (!raw.open(why)) {
    std::fprintf(stderr, "error: the raw driver side: %s\n", why.c_str());
    return 1;
  }
  CUdeviceptr raw_src = 0, raw_dst = 0;
  if (raw.alloc(&raw_src, bytes) != CUDA_SUCCESS || raw.alloc(&raw_dst, bytes) != CUDA_SUCCESS) {
    std::fprintf(stderr, "error: cuMemAlloc of %zu bytes failed\n", bytes);
    return 1;
  }
  uint32_t n = 1;
  const hal_kernel_arg_t hal_args[] = {{&n, sizeof(n)}};
  void* raw_args[] = {&n};
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;

  std::vector<double> hal_copy, raw_copy, hal_copy_wall, raw_copy_wall, hal_sync, raw_sync,
      hal_pipe, raw_pipe;
  for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms up
    // Device time: events on the copy's own stream, around the copy alone.
    hal_event_record(before, stream);
    hal_memcpy_async(dst, src, bytes, stream);
    hal_event_record(after, stream);
    hal_event_synchronize(after);
    float hal_copy_ms = 0;
    if (!check(hal_event_elapsed_ms(before, after, &hal_copy_ms), "hal_event_elapsed_ms")) {
      return 1;
    }
    raw.event_record(raw.before, raw.stream);
    raw.copy(raw_dst, raw_src, bytes, raw.stream);
    raw.event_record(raw.after, raw.stream);
    raw.event_sync(raw.after);
    float raw_copy_ms = 0;
    if (raw.elapsed(&raw_copy_ms, raw.before, raw.after) != CUDA_SUCCESS) {
      std::fprintf(stderr, "error: cuEventElapsedTime failed\n");
      return 1;
    }
    // Wall time of copy + synchronize: what a caller waits.
    double t = bench::now_s();
    hal_memcpy_async(dst, src, bytes, stream);
    hal_stream_synchronize(stream);
    const double hal_copy_s = bench::now_s() - t;
    t = bench::now_s();
    raw.copy(raw_dst, raw_src, bytes, raw.stream);
    raw.stream_sync(raw.stream);
    const double raw_copy_s = bench::now_s() - t;
    t = bench::now_s();
    for (int i = 0; i < launches; ++i) {
      hal_launch_kernel(kernel, &config, 1, hal_args, stream);
      hal_stream_synchronize(stream);
    }
    const double hal_sync_s = bench::now_s() - t;
    t = bench::now_s();
    for (int i = 0; i < launches; ++i) {
      raw.launch(raw.empty, 1, 1, 1, 1, 1, 1, 0, raw.stream, raw_args, nullptr);
      raw.stream_sync(raw.stream);
    }
    const double raw_sync_s = bench::now_s() - t;
    t = bench::now_s();
    for (int i = 0; i < launches; ++i) hal_launch_kernel(kernel, &config, 1, hal_args, stream);
    hal_stream_synchronize(stream);
    const double hal_pipe_s = bench::now_s() - t;
    t = bench::now_s();
    for (int i = 0; i < launches; ++i) {
      raw.launch(raw.empty, 1, 1, 1, 1, 1, 1, 0, raw.stream, raw_args, nullptr);
    }
    raw.stream_sync(raw.stream);
    const double raw_pipe_s = bench::now_s() - t;
    if (rep < 0) continue;
    // A stand-in driver's events may read 0 ms: no rate then, rather than infinity.
    if (hal_copy_ms > 0) hal_copy.push_back(bytes / (hal_copy_ms * 1e-3) / 1e9);
    if (raw_copy_ms > 0) raw_copy.push_back(bytes / (raw_copy_ms * 1e-3) / 1e9);
    hal_copy_wall.push_back(bytes / hal_copy_s / 1e9);
    raw_copy_wall.push_back(bytes / raw_copy_s / 1e9);
    hal_sync.push_back(hal_sync_s / launches * 1e6);
    raw_sync.push_back(raw_sync_s / launches * 1e6);
    hal_pipe.push_back(hal_pipe_s / launches * 1e6);
    raw_pipe.push_back(raw_pipe_s / launches * 1e6);
  }
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  hal_device_get_properties(device, &properties);
  std::printf("cuda_peer on %s: %zu-byte copies, %d launches per sample, %d repetitions\n\n",
              properties.name, bytes, launches, reps);
  bench::Table table({"measure", "HAL cuda plugin", "raw driver API", "HAL / raw"});
  auto row = [&](const char* name, const std::vector<double>& h, const std::vector<double>& r) {
    const bench::Stats hs = bench::summarize(h), rs = bench::summarize(r);
    table.row({name, bench::fmt_stats(hs), bench::fmt_stats(rs),
               bench::fmt(rs.median > 0 ? hs.median / rs.median : 0, 3)});
  };
  row("D2D copy, events (GB/s)", hal_copy, raw_copy);
  row("D2D copy + sync, wall (GB/s)", hal_copy_wall, raw_copy_wall);
  row("launch + sync (us)", hal_sync, raw_sync);
  row("launch pipelined (us)", hal_pipe, raw_pipe);
  table.print();
  std::printf("\ndeclared peak memory bandwidth: %.1f GB/s (a D2D copy moves 2x the bytes)\n",
              properties.peak_memory_bandwidth / 1e9);
  raw.free(raw_src);
  raw.free(raw_dst);
  hal_mem_free(src);
  hal_mem_free(dst);
  hal_event_destroy(before);
  hal_event_destroy(after);
  hal_module_unload(module);
  hal_stream_destroy(stream);
  hal_shutdown();
  return 0;
}
