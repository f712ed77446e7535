// The kernel dialect's costs, HAL beside PoCL in the same run:
//
//   compile   module load of a dialect source, cold (empty cache) and cached,
//             on the cpu plugin (system C++ compiler + HAL's cache) and the
//             opencl plugin (PoCL's compiler + PoCL's cache)
//   launch    an empty dialect kernel: launch + synchronize, and pipelined,
//             on cpu, on opencl, and through PoCL's own OpenCL API
//   matmul    the tiled-matmul dialect kernels (16x16 tiles in shared memory,
//             two barriers in the k loop): 'matmul', one output per
//             work-item, and 'matmul4', four outputs of a row per work-item
//             (16x64 per block), at 512^3 and 1024^3 (--sizes, multiples of
//             64), GFLOP/s on cpu and on opencl (PoCL) and their ratio, with
//             the shape the cpu plugin gave each kernel (parallel regions or
//             coroutines) and the host's FMA peak it is measured against
//
// Medians [min-max] over --reps repetitions. --peak GFLOPS (the host's FMA
// peak for the plugin's threads; not measured here) adds the share of it.
// Not a test: nothing asserts.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hal_dialect/dialect.hpp"

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

namespace {

// The tiled-matmul kernels (bench/kernels/tiled_matmul.hal, shared with the
// dialect tests) and an empty kernel for the launch rows.
const std::string& bench_source() {
  static const std::string source = [] {
    std::ifstream file(HAL_BENCH_TILED_MATMUL_HAL);
    std::stringstream text;
    text << file.rdbuf();
    if (!file || text.str().empty()) {
      std::fprintf(stderr, "error: cannot read %s\n", HAL_BENCH_TILED_MATMUL_HAL);
      std::exit(2);
    }
    return "kernel void empty(global int* p) { }\n" + text.str();
  }();
  return source;
}

// The two tiled matmuls: name, and the columns of C one block covers.
struct MatmulKernel {
  const char* name;
  int block_columns;
};
constexpr MatmulKernel kMatmuls[] = {{"matmul", 16}, {"matmul4", 64}};

#define CHECK_HAL(call)                                                  \
  do {                                                                   \
    if (hal_result_t r_ = (call); r_ != HAL_SUCCESS) {                   \
      std::fprintf(stderr, "%s: %s\n", #call, hal_error_last_message()); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

hal_module_t load(hal_device_t device, const std::string& source) {
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
  desc.data = source.c_str();
  desc.size = source.size();
  hal_module_t module = nullptr;
  CHECK_HAL(hal_module_load(device, &desc, &module));
  return module;
}

hal_kernel_t get(hal_module_t module, const char* name) {
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = name;
  hal_kernel_t kernel = nullptr;
  CHECK_HAL(hal_kernel_get(module, &desc, &kernel));
  return kernel;
}

hal_launch_config_t shape(uint32_t g0, uint32_t g1, uint32_t b0, uint32_t b1) {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = g0, config.grid[1] = g1, config.grid[2] = 1;
  config.block[0] = b0, config.block[1] = b1, config.block[2] = 1;
  return config;
}

struct Device {
  std::string plugin;
  hal_device_t device = nullptr;
  hal_stream_t stream = nullptr;
  hal_module_t module = nullptr;
};

// Launch latency of |kernel| (one pointer argument) in microseconds.
double launch_us(Device& d, hal_kernel_t kernel, int launches, bool sync_each) {
  void* buffer = nullptr;
  CHECK_HAL(hal_mem_alloc(d.device, HAL_MEMORY_DEVICE, 64, 0, &buffer));
  const hal_kernel_arg_t args[] = {{&buffer, sizeof(buffer)}};
  const hal_launch_config_t one = shape(1, 1, 1, 1);
  const double start = bench::now_s();
  for (int i = 0; i < launches; ++i) {
    CHECK_HAL(hal_launch_kernel(kernel, &one, 1, args, d.stream));
    if (sync_each) CHECK_HAL(hal_stream_synchronize(d.stream));
  }
  CHECK_HAL(hal_stream_synchronize(d.stream));
  const double elapsed = bench::now_s() - start;
  hal_mem_free(buffer);
  return elapsed / launches * 1e6;
}

double matmul_gflops(Device& d, const MatmulKernel& which, int n) {
  const size_t bytes = size_t(n) * n * sizeof(float);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK_HAL(hal_mem_alloc(d.device, HAL_MEMORY_DEVICE, bytes, 0, &a));
  CHECK_HAL(hal_mem_alloc(d.device, HAL_MEMORY_DEVICE, bytes, 0, &b));
  CHECK_HAL(hal_mem_alloc(d.device, HAL_MEMORY_DEVICE, bytes, 0, &c));
  CHECK_HAL(hal_memset_async(a, 0x3c, bytes, d.stream));
  CHECK_HAL(hal_memset_async(b, 0x3c, bytes, d.stream));
  hal_kernel_t kernel = get(d.module, which.name);
  const hal_kernel_arg_t args[] = {{&a, sizeof(a)}, {&b, sizeof(b)}, {&c, sizeof(c)}, {&n, 4}};
  const hal_launch_config_t config = shape(n / which.block_columns, n / 16, 16, 16);
  CHECK_HAL(hal_stream_synchronize(d.stream));
  const double start = bench::now_s();
  CHECK_HAL(hal_launch_kernel(kernel, &config, 4, args, d.stream));
  CHECK_HAL(hal_stream_synchronize(d.stream));
  const double elapsed = bench::now_s() - start;
  hal_mem_free(a), hal_mem_free(b), hal_mem_free(c);
  return 2.0 * n * n * n / elapsed / 1e9;
}

// PoCL's own API: an empty kernel with one SVM argument, global size 1.
struct Pocl {
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  void* buffer = nullptr;
  bool ok = false;
  Pocl() {
    cl_platform_id platform;
    cl_device_id device;
    if (clGetPlatformIDs(1, &platform, nullptr) != CL_SUCCESS ||
        clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, nullptr) != CL_SUCCESS)
      return;
    cl_int status;
    context = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &status);
    queue = clCreateCommandQueueWithProperties(context, device, nullptr, &status);
    const char* text = "__kernel void empty(__global int* p) {}";
    program = clCreateProgramWithSource(context, 1, &text, nullptr, &status);
    clBuildProgram(program, 1, &device, "-cl-std=CL1.2", nullptr, nullptr);
    kernel = clCreateKernel(program, "empty", &status);
    buffer = clSVMAlloc(context, CL_MEM_READ_WRITE, 64, 0);
    ok = status == CL_SUCCESS;
  }
  ~Pocl() {
    if (buffer != nullptr) clSVMFree(context, buffer);
    if (kernel != nullptr) clReleaseKernel(kernel);
    if (program != nullptr) clReleaseProgram(program);
    if (queue != nullptr) clReleaseCommandQueue(queue);
    if (context != nullptr) clReleaseContext(context);
  }
  double launch_us(int launches, bool sync_each) {
    const size_t one = 1;
    const double start = bench::now_s();
    for (int i = 0; i < launches; ++i) {
      clSetKernelArgSVMPointer(kernel, 0, buffer);
      clEnqueueNDRangeKernel(queue, kernel, 1, nullptr, &one, &one, 0, nullptr, nullptr);
      if (sync_each) clFinish(queue);
    }
    clFinish(queue);
    return (bench::now_s() - start) / launches * 1e6;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::vector<int> sizes = {512, 1024};
  double peak_gflops = 0;  // the host's FMA peak for the threads used, when known
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string option = argv[i];
    if (option == "--reps") reps = std::atoi(argv[i + 1]);
    if (option == "--n" || option == "--sizes") {
      sizes.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string item; std::getline(list, item, ',');) {
        // A multiple of 64: matmul4's blocks are 64 columns wide.
        if (std::atoi(item.c_str()) >= 64) sizes.push_back(std::atoi(item.c_str()) / 64 * 64);
      }
    }
    if (option == "--peak") peak_gflops = std::atof(argv[i + 1]);
  }
  // A fresh cache per run, so "cold" is cold for both compilers.
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("hal-bench-dialect-" + std::to_string(getpid()));
  setenv("HAL_CACHE_DIR", (cache / "hal").c_str(), 1);
  setenv("POCL_CACHE_DIR", (cache / "pocl").c_str(), 1);
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  options.plugins = "cpu,opencl";
  setenv("HAL_CPU_DEVICES", "1", 1);
  CHECK_HAL(hal_init(&options));
  bench::print_machine_line();
  std::vector<Device> devices;
  uint32_t count = 0;
  CHECK_HAL(hal_device_count(&count));
  for (uint32_t i = 0; i < count; ++i) {
    Device d;
    CHECK_HAL(hal_device_get(i, &d.device));
    hal_device_properties_t p{};
    p.struct_size = sizeof(p);
    CHECK_HAL(hal_device_get_properties(d.device, &p));
    d.plugin = p.plugin;
    CHECK_HAL(hal_stream_create(d.device, 0, &d.stream));
    devices.push_back(d);
  }

  std::printf("\n== compile: hal_module_load of a 3-kernel dialect source, ms\n");
  for (Device& d : devices) {
    std::vector<double> cold, cached;
    for (int r = 0; r < reps; ++r) {
      // A new #define makes a new source: a cache miss on both plugins
      // (comments would not: the front end drops them before hashing).
      const std::string source = bench_source() + "#define BENCH_REPETITION_" + std::to_string(r) +
                                 "_" + std::to_string(getpid()) + " 1\n";
      double start = bench::now_s();
      hal_module_t module = load(d.device, source);
      cold.push_back((bench::now_s() - start) * 1e3);
      start = bench::now_s();
      hal_module_t again = load(d.device, source);
      cached.push_back((bench::now_s() - start) * 1e3);
      hal_module_unload(again);
      if (r + 1 < reps) {
        hal_module_unload(module);
      } else {
        d.module = module;
      }
    }
    std::printf("  %-7s cold %s   cached %s\n", d.plugin.c_str(),
                bench::fmt_stats(bench::summarize(cold)).c_str(),
                bench::fmt_stats(bench::summarize(cached), 3).c_str());
  }

  std::printf("\n== launch latency of an empty dialect kernel, us per launch\n");
  Pocl pocl;
  std::vector<std::vector<double>> sync(devices.size() + 1), piped(devices.size() + 1);
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < devices.size(); ++i) {
      hal_kernel_t empty = get(devices[i].module, "empty");
      sync[i].push_back(launch_us(devices[i], empty, 2000, true));
      piped[i].push_back(launch_us(devices[i], empty, 10000, false));
    }
    if (pocl.ok) {
      sync.back().push_back(pocl.launch_us(2000, true));
      piped.back().push_back(pocl.launch_us(10000, false));
    }
  }
  for (size_t i = 0; i <= devices.size(); ++i) {
    if (sync[i].empty()) continue;
    const std::string name = i < devices.size() ? "hal " + devices[i].plugin : "PoCL API";
    std::printf("  %-11s launch+sync %s   pipelined %s\n", name.c_str(),
                bench::fmt_stats(bench::summarize(sync[i])).c_str(),
                bench::fmt_stats(bench::summarize(piped[i])).c_str());
  }

  hal::dialect::TranslatedModule translated;
  hal::dialect::Diagnostic diagnostic;
  const bool translated_ok =
      hal::dialect::translate(bench_source(), hal::dialect::Backend::kCpp, translated, diagnostic);
  for (const MatmulKernel& which : kMatmuls) {
    if (translated_ok) {
      const hal::dialect::KernelRecord* record = translated.find(which.name);
      std::printf("\n== tiled-matmul dialect kernel '%s' on the cpu plugin: %s (%s)\n", which.name,
                  std::string(hal::dialect::cpu_shape_name(record->cpu_shape)).c_str(),
                  record->cpu_shape_note.c_str());
    }
    for (const int n : sizes) {
      std::printf("\n== tiled-matmul dialect kernel '%s', %d^3, GFLOP/s\n", which.name, n);
      std::map<std::string, double> medians;
      const bench::NoiseMeter noise;
      for (Device& d : devices) {
        std::vector<double> rates;
        matmul_gflops(d, which, n);  // warm up
        for (int r = 0; r < reps; ++r) rates.push_back(matmul_gflops(d, which, n));
        const bench::Stats stats = bench::summarize(rates);
        medians[d.plugin] = stats.median;
        std::printf("  %-7s %s", d.plugin.c_str(), bench::fmt_stats(stats).c_str());
        if (peak_gflops > 0) {
          const double share = stats.median / peak_gflops;
          std::printf("   %.1f%% of the %.0f GFLOP/s peak", 100.0 * share, peak_gflops);
          if (d.plugin == "cpu")
            std::printf(" (goal >= 25%%: %s)", share >= 0.25 ? "met" : "missed");
        }
        std::printf("\n");
      }
      if (medians.count("cpu") != 0 && medians.count("opencl") != 0 && medians["opencl"] > 0) {
        const double ratio = medians["cpu"] / medians["opencl"];
        std::printf("  cpu / opencl (PoCL): %.1fx (goal >= 20x: %s)\n", ratio,
                    ratio >= 20 ? "met" : "missed");
      }
      std::printf("# noise: %.2f vCPUs busy with other processes\n", noise.other_vcpus());
    }
  }
  for (Device& d : devices) {
    hal_module_unload(d.module);
    hal_stream_destroy(d.stream);
  }
  hal_shutdown();
  std::error_code ignored;
  std::filesystem::remove_all(cache, ignored);
  return 0;
}
