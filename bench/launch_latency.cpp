// Empty-kernel launch latency: HAL's cpu plugin against PoCL (OpenCL on the
// CPU), in the same run, interleaved.
//
//   hal  sync      hal_launch_kernel + hal_stream_synchronize, each launch
//   hal  pipelined N launches, then one hal_stream_synchronize; time / N
//   pocl sync      clEnqueueNDRangeKernel + clFinish, each launch
//   pocl pipelined N enqueues, then one clFinish; time / N
//
// Grid 1x1x1, block 1x1x1 (OpenCL: global size 1), an in-order queue/stream.
#include <array>
#include <string>
#include <vector>

#include "bench_common.h"

#if HAL_BENCH_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif

#ifndef HAL_BENCH_EMPTY_KERNEL_PATH
#define HAL_BENCH_EMPTY_KERNEL_PATH ""
#endif

namespace {

constexpr double kGoalSyncUs = 5.0;
constexpr double kGoalPipelinedUs = 1.0;

void usage() {
  std::printf(
      "usage: launch_latency [options]\n"
      "\n"
      "Empty-kernel launch latency of HAL's cpu plugin against PoCL (OpenCL on the CPU),\n"
      "measured in the same run with the variants interleaved in every repetition.\n"
      "\n"
      "  --reps N         repetitions; each gives one sample per variant (default 9)\n"
      "  --sync N         launches per sample with a synchronize after each (default 2000)\n"
      "  --pipelined N    launches per sample followed by one synchronize (default 10000)\n"
      "  --plugins LIST   hal_init_options_t.plugins (default \"cpu\")\n"
      "  --module PATH    the empty-kernel module (default: the one built with the bench,\n"
      "                   %s)\n"
      "  --no-opencl      skip the PoCL peer\n"
      "  --json           print the results as JSON instead of the table\n"
      "  --help           this text\n"
      "\n"
      "Reported: microseconds per launch, median [min-max] over the repetitions.\n"
      "Goals: launch+sync <= %.0f us, pipelined <= %.0f us per launch.\n",
      HAL_BENCH_EMPTY_KERNEL_PATH, kGoalSyncUs, kGoalPipelinedUs);
}

// ---- HAL ------------------------------------------------------------------

struct HalSide {
  hal_device_t device = nullptr;
  hal_stream_t stream = nullptr;
  hal_module_t module = nullptr;
  hal_kernel_t kernel = nullptr;
  hal_launch_config_t config{};
  std::string device_name;

  void open(const std::string& plugins, const std::string& module_path) {
    hal_device_properties_t props{};
    device = bench::hal_open_device(plugins, "cpu", HAL_DEVICE_CAP_KERNELS, &props);
    device_name = props.name;
    BENCH_HAL_CHECK(hal_stream_create(device, 0, &stream));
    hal_module_desc_t mdesc{};
    mdesc.struct_size = sizeof mdesc;
    mdesc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
    mdesc.path = module_path.c_str();
    BENCH_HAL_CHECK(hal_module_load(device, &mdesc, &module));
    hal_kernel_desc_t kdesc{};
    kdesc.struct_size = sizeof kdesc;
    kdesc.name = "empty";
    BENCH_HAL_CHECK(hal_kernel_get(module, &kdesc, &kernel));
    config.struct_size = sizeof config;
    config.grid[0] = config.grid[1] = config.grid[2] = 1;
    config.block[0] = config.block[1] = config.block[2] = 1;
  }

  // Microseconds per launch.
  double run_sync(long long n) const {
    const double t0 = bench::now_s();
    for (long long i = 0; i < n; ++i) {
      BENCH_HAL_CHECK(hal_launch_kernel(kernel, &config, 0, nullptr, stream));
      BENCH_HAL_CHECK(hal_stream_synchronize(stream));
    }
    return (bench::now_s() - t0) * 1e6 / static_cast<double>(n);
  }
  double run_pipelined(long long n) const {
    const double t0 = bench::now_s();
    for (long long i = 0; i < n; ++i)
      BENCH_HAL_CHECK(hal_launch_kernel(kernel, &config, 0, nullptr, stream));
    BENCH_HAL_CHECK(hal_stream_synchronize(stream));
    return (bench::now_s() - t0) * 1e6 / static_cast<double>(n);
  }

  // Launches the module's "count" kernel |n| times on a zeroed counter and
  // returns what it counted (|n| when every launch ran exactly once).
  uint64_t count_launches(uint64_t n) const {
    hal_kernel_desc_t kdesc{};
    kdesc.struct_size = sizeof kdesc;
    kdesc.name = "count";
    hal_kernel_t counter_kernel = nullptr;
    BENCH_HAL_CHECK(hal_kernel_get(module, &kdesc, &counter_kernel));
    void* counter = nullptr;
    BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, sizeof(uint64_t), 0, &counter));
    BENCH_HAL_CHECK(hal_memset_async(counter, 0, sizeof(uint64_t), stream));
    const hal_kernel_arg_t arg{&counter, sizeof counter};
    for (uint64_t i = 0; i < n; ++i)
      BENCH_HAL_CHECK(hal_launch_kernel(counter_kernel, &config, 1, &arg, stream));
    uint64_t result = 0;
    BENCH_HAL_CHECK(hal_memcpy_async(&result, counter, sizeof result, stream));
    BENCH_HAL_CHECK(hal_stream_synchronize(stream));
    BENCH_HAL_CHECK(hal_mem_free(counter));
    return result;
  }

  void close() {
    BENCH_HAL_CHECK(hal_stream_synchronize(stream));
    BENCH_HAL_CHECK(hal_module_unload(module));
    BENCH_HAL_CHECK(hal_stream_destroy(stream));
    BENCH_HAL_CHECK(hal_shutdown());
  }
};

// ---- PoCL (any OpenCL device; a CPU device is preferred) --------------------

#if HAL_BENCH_HAVE_OPENCL
#define CL_TRY(expr)                                                      \
  do {                                                                    \
    const cl_int cl_e_ = (expr);                                          \
    if (cl_e_ != CL_SUCCESS) {                                            \
      reason = std::string(#expr) + " returned " + std::to_string(cl_e_); \
      return false;                                                       \
    }                                                                     \
  } while (0)

#define CL_CHECK(expr)                                                                   \
  do {                                                                                   \
    const cl_int cl_e_ = (expr);                                                         \
    if (cl_e_ != CL_SUCCESS) {                                                           \
      std::fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #expr, cl_e_); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

struct OclSide {
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  std::string device_name;
  std::string reason;  // why it is unavailable

  bool open() {
    cl_uint np = 0;
    CL_TRY(clGetPlatformIDs(0, nullptr, &np));
    if (np == 0) {
      reason = "no OpenCL platform (is pocl-opencl-icd installed?)";
      return false;
    }
    std::vector<cl_platform_id> platforms(np);
    CL_TRY(clGetPlatformIDs(np, platforms.data(), nullptr));
    cl_device_id device = nullptr;
    for (cl_device_type type :
         {cl_device_type{CL_DEVICE_TYPE_CPU}, cl_device_type{CL_DEVICE_TYPE_ALL}}) {
      for (cl_platform_id p : platforms) {
        if (clGetDeviceIDs(p, type, 1, &device, nullptr) == CL_SUCCESS && device) break;
        device = nullptr;
      }
      if (device) break;
    }
    if (!device) {
      reason = "no OpenCL device";
      return false;
    }
    char name[256] = {0};
    CL_TRY(clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name - 1, name, nullptr));
    device_name = name;
    cl_int err = CL_SUCCESS;
    context = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &err);
    CL_TRY(err);
    queue = clCreateCommandQueue(context, device, 0, &err);  // in order, no profiling
    CL_TRY(err);
    const char* source = "__kernel void empty(void) {}\n";
    program = clCreateProgramWithSource(context, 1, &source, nullptr, &err);
    CL_TRY(err);
    if (clBuildProgram(program, 1, &device, "", nullptr, nullptr) != CL_SUCCESS) {
      char log[4096] = {0};
      clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, nullptr);
      reason = std::string("clBuildProgram failed: ") + log;
      return false;
    }
    kernel = clCreateKernel(program, "empty", &err);
    CL_TRY(err);
    return true;
  }

  double run_sync(long long n) const {
    const size_t global = 1;
    const double t0 = bench::now_s();
    for (long long i = 0; i < n; ++i) {
      CL_CHECK(
          clEnqueueNDRangeKernel(queue, kernel, 1, nullptr, &global, nullptr, 0, nullptr, nullptr));
      CL_CHECK(clFinish(queue));
    }
    return (bench::now_s() - t0) * 1e6 / static_cast<double>(n);
  }
  double run_pipelined(long long n) const {
    const size_t global = 1;
    const double t0 = bench::now_s();
    for (long long i = 0; i < n; ++i)
      CL_CHECK(
          clEnqueueNDRangeKernel(queue, kernel, 1, nullptr, &global, nullptr, 0, nullptr, nullptr));
    CL_CHECK(clFinish(queue));
    return (bench::now_s() - t0) * 1e6 / static_cast<double>(n);
  }

  void close() {
    if (kernel) clReleaseKernel(kernel);
    if (program) clReleaseProgram(program);
    if (queue) clReleaseCommandQueue(queue);
    if (context) clReleaseContext(context);
  }
};
#endif

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  if (args.flag("--help") || args.flag("-h")) {
    usage();
    return 0;
  }
  const long long reps = args.integer("--reps", 9);
  const long long n_sync = args.integer("--sync", 2000);
  const long long n_pipe = args.integer("--pipelined", 10000);
  const std::string plugins = args.str("--plugins", "cpu");
  const std::string module_path = args.str("--module", HAL_BENCH_EMPTY_KERNEL_PATH);
  const bool want_opencl = !args.flag("--no-opencl");
  const bool json = args.flag("--json");
  args.finish();
  if (module_path.empty()) {
    std::fprintf(stderr, "error: no kernel module; pass --module PATH\n");
    return 2;
  }

  bench::NoiseMeter noise;
  HalSide hal;
  hal.open(plugins, module_path);

  bool have_ocl = false;
  std::string ocl_reason = "built without OpenCL (find_package(OpenCL) failed)";
  std::string ocl_device;
#if HAL_BENCH_HAVE_OPENCL
  OclSide ocl;
  if (want_opencl) {
    have_ocl = ocl.open();
    if (!have_ocl) {
      ocl_reason = ocl.reason;
      ocl.close();
    }
    ocl_device = ocl.device_name;
  } else {
    ocl_reason = "--no-opencl";
  }
#else
  (void)want_opencl;
#endif
  if (!have_ocl) std::fprintf(stderr, "note: PoCL peer skipped: %s\n", ocl_reason.c_str());

  // The variants, run in a rotating order within each repetition.
  struct Variant {
    std::string name;
    std::function<double(long long)> run;
    long long n;
    double goal;
    std::vector<double> samples;
  };
  std::vector<Variant> variants;
  variants.push_back(
      {"hal launch+sync", [&](long long n) { return hal.run_sync(n); }, n_sync, kGoalSyncUs, {}});
  variants.push_back({"hal pipelined",
                      [&](long long n) { return hal.run_pipelined(n); },
                      n_pipe,
                      kGoalPipelinedUs,
                      {}});
#if HAL_BENCH_HAVE_OPENCL
  if (have_ocl) {
    variants.push_back(
        {"pocl launch+finish", [&](long long n) { return ocl.run_sync(n); }, n_sync, 0, {}});
    variants.push_back(
        {"pocl pipelined", [&](long long n) { return ocl.run_pipelined(n); }, n_pipe, 0, {}});
  }
#endif

  // Warm-up: threads started, code paged in, caches warm.
  for (auto& v : variants) v.run(std::max(1LL, v.n / 10));

  for (long long r = 0; r < reps; ++r) {
    for (size_t k = 0; k < variants.size(); ++k) {
      Variant& v = variants[(k + static_cast<size_t>(r)) % variants.size()];
      v.samples.push_back(v.run(v.n));
    }
  }
  const double other = noise.other_vcpus();

  // After the timing: do launches run? A counting kernel of the same module.
  constexpr uint64_t kCheckLaunches = 1000;
  const uint64_t counted = hal.count_launches(kCheckLaunches);
  const std::string launch_check =
      std::string(counted == kCheckLaunches ? "ok (" : "WRONG (") + std::to_string(kCheckLaunches) +
      " launches of the module's counting kernel counted " + std::to_string(counted) + ")";
  if (counted != kCheckLaunches)
    std::fprintf(stderr, "warning: HAL launches misbehave: %s\n", launch_check.c_str());

  std::vector<bench::Stats> stats;
  for (const auto& v : variants) stats.push_back(bench::summarize(v.samples));

  if (json) {
    bench::Json j("launch_latency");
    j.note("hal_device", hal.device_name);
    j.note("launch_check", launch_check);
    j.note("opencl_device", have_ocl ? ocl_device : std::string());
    j.note("opencl_skipped", have_ocl ? std::string() : ocl_reason);
    j.note_number("reps", static_cast<double>(reps));
    j.note_number("noise_other_vcpus", other);
    for (size_t i = 0; i < variants.size(); ++i) j.result(variants[i].name, "us/launch", stats[i]);
    j.print();
  } else {
    bench::print_machine_line();
    std::printf("# hal device: %s\n", hal.device_name.c_str());
    std::printf("# hal launches verified: %s\n", launch_check.c_str());
    if (have_ocl)
      std::printf("# opencl device: %s\n", ocl_device.c_str());
    else
      std::printf("# opencl peer skipped: %s\n", ocl_reason.c_str());
    std::printf("# empty kernel, grid 1x1x1, block 1x1x1; %lld reps, interleaved\n", reps);
    bench::Table t({"variant", "launches/sample", "us/launch median [min-max]", "goal"});
    for (size_t i = 0; i < variants.size(); ++i) {
      const auto& v = variants[i];
      std::string goal = "-";
      if (v.goal > 0)
        goal = "<= " + bench::fmt(v.goal, 0) + " us (" +
               (stats[i].median <= v.goal ? "met" : "missed") + ")";
      t.row({v.name, std::to_string(v.n), bench::fmt_stats(stats[i], 3), goal});
    }
    t.print();
    if (have_ocl) {
      std::printf("# ratio pocl/hal (higher = HAL faster): launch+sync %.2fx, pipelined %.2fx\n",
                  stats[2].median / stats[0].median, stats[3].median / stats[1].median);
    }
    std::printf("# noise: other processes used %.2f vCPU during the run\n", other);
  }

#if HAL_BENCH_HAVE_OPENCL
  if (have_ocl) ocl.close();
#endif
  hal.close();
  return 0;
}
