// performance.compute and performance.launch: FMA throughput of a kernel
// against peak_fp32_flops, and the latency of launching an empty kernel.
#include <chrono>

#include "context.hpp"
#include "hal_objects.hpp"
#include "thresholds.hpp"

namespace halconform {
namespace {

constexpr Requirements kCpuKernels{HAL_DEVICE_CAP_KERNELS,
                                   1u << HAL_MODULE_FORMAT_CPU_SHARED_OBJECT, 1};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

HALCONFORM_TEST("performance.compute.fma_throughput",
                "FP32 FMA throughput of a kernel against the declared peak_fp32_flops",
                kCpuKernels) {
  Module module(ctx.device(), ctx.kernels_path());
  Stream stream(ctx.device());
  hal_kernel_t kernel = module.kernel("fma_throughput");
  // Enough blocks to fill every compute unit several times over.
  const uint32_t blocks = ctx.properties().compute_units * 4;
  Buffer sums(ctx.device(), blocks * sizeof(float)), lanes(ctx.device(), sizeof(uint32_t));
  void* sums_ptr = sums.get();
  void* lanes_ptr = lanes.get();
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = blocks;
  config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;
  auto run = [&](uint32_t iterations) {
    const hal_kernel_arg_t args[] = {{&sums_ptr, 8}, {&lanes_ptr, 8}, {&iterations, 4}};
    const auto start = std::chrono::steady_clock::now();
    HC_OK(hal_launch_kernel(kernel, &config, 3, args, stream));
    HC_OK(hal_stream_synchronize(stream));
    return seconds_since(start);
  };
  // Calibrate so the measured launch takes ~0.3 s.
  uint32_t iterations = 1000;
  double seconds = run(iterations);
  while (seconds < 0.03 && iterations < (1u << 28)) seconds = run(iterations *= 4);
  iterations = static_cast<uint32_t>(
      std::min<double>(1u << 30, iterations * std::max(1.0, 0.3 / std::max(seconds, 1e-6))));
  const CpuShare share;
  seconds = run(iterations);
  const double got = share.of(ctx.properties());
  uint32_t fmas_per_iteration = 0;
  HC_OK(hal_memcpy_async(&fmas_per_iteration, lanes.get(), 4, stream));
  HC_OK(hal_stream_synchronize(stream));
  HC_REQUIRE(fmas_per_iteration > 0, "the kernel did not report its width");
  const double flops = 2.0 * blocks * static_cast<double>(iterations) * fmas_per_iteration;
  const double achieved = flops / seconds;
  const double declared = ctx.properties().peak_fp32_flops;
  ctx.record_metric("fp32_fma_flops", achieved, "FLOP/s", declared > 0 ? declared : NAN);
  ctx.note(strf("%u blocks x %u iterations x %u FMAs in %.3f s", blocks, iterations,
                fmas_per_iteration, seconds));
  check_against_declared("fp32_fma_flops", achieved, declared, true, got);
}

HALCONFORM_TEST("performance.launch.latency",
                "enqueue cost and round trip of an empty kernel launch", kCpuKernels) {
  Module module(ctx.device(), ctx.kernels_path());
  Stream stream(ctx.device());
  hal_kernel_t kernel = module.kernel("empty");
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;
  HC_OK(hal_launch_kernel(kernel, &config, 0, nullptr, stream));
  HC_OK(hal_stream_synchronize(stream));
  constexpr int kEnqueues = 2000, kRoundTrips = 200;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kEnqueues; ++i) HC_OK(hal_launch_kernel(kernel, &config, 0, nullptr, stream));
  const double enqueue_s = seconds_since(start) / kEnqueues;
  HC_OK(hal_stream_synchronize(stream));
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRoundTrips; ++i) {
    HC_OK(hal_launch_kernel(kernel, &config, 0, nullptr, stream));
    HC_OK(hal_stream_synchronize(stream));
  }
  const double round_trip_s = seconds_since(start) / kRoundTrips;
  ctx.record_metric("launch_enqueue_latency", enqueue_s * 1e6, "us");
  ctx.record_metric("launch_round_trip_latency", round_trip_s * 1e6, "us");
  HC_REQUIRE(round_trip_s < kMaxLaunchRoundTripSeconds,
             strf("an empty launch round trip takes %.1f ms", round_trip_s * 1e3));
}

}  // namespace halconform
