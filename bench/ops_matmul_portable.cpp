// GFLOP/s of HAL_OP_MATMUL (the portable dialect kernels unless a plugin
// serves the op itself: the implementation is printed) for square f32 and
// bf16 problems on every device HAL finds (HAL_PLUGINS=cpu,opencl for those).
// Usage: ops_matmul_portable [size=512] [repetitions=5] [kernels=default|both]
// kernels=both times each problem with the portable matmul's two kernels in
// turn, same process, interleaved (HAL_OPS_PORTABLE_MATMUL=blocked, then
// =tiled: the register-blocked and the group-shared tiled kernel).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hal.h"

namespace {

#define CHECK_HAL(call)                                                  \
  do {                                                                   \
    if (hal_result_t r_ = (call); r_ != HAL_SUCCESS) {                   \
      std::fprintf(stderr, "%s: %s\n", #call, hal_error_last_message()); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

struct Variant {
  const char* label;
  hal_dtype_t dtype;
  uint32_t flags;
};

// Median GFLOP/s of |reps| timed executions (after one warm-up) of an
// n x n x n matmul.
void run(hal_device_t device, hal_stream_t stream, const Variant& variant, int64_t n, int reps,
         const char* kernel) {
  hal_op_matmul_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_MATMUL;
  desc.flags = variant.flags;
  desc.activation = HAL_ACTIVATION_NONE;
  desc.alpha = 1.0f;
  const int64_t shape[2] = {n, n};
  hal_tensor_desc_contiguous(&desc.a, variant.dtype, 2, shape);
  hal_tensor_desc_contiguous(&desc.b, variant.dtype, 2, shape);
  hal_tensor_desc_contiguous(&desc.d, HAL_DTYPE_F32, 2, shape);
  hal_op_plan_t plan = nullptr;
  if (hal_op_plan_create(device, &desc.header, 0, &plan) != HAL_SUCCESS) {
    std::printf("%-10s %-8s %-6s not planned: %s\n", variant.label, kernel,
                variant.dtype == HAL_DTYPE_F32 ? "f32" : "bf16", hal_error_last_message());
    return;
  }
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  CHECK_HAL(hal_op_plan_get_info(plan, &info));
  const size_t element = variant.dtype == HAL_DTYPE_F32 ? 4 : 2;
  void *a = nullptr, *b = nullptr, *d = nullptr;
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * n * element, 0, &a));
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * n * element, 0, &b));
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * n * 4, 0, &d));
  CHECK_HAL(hal_memset_async(a, 0x3c, n * n * element, stream));  // small finite values
  CHECK_HAL(hal_memset_async(b, 0x3c, n * n * element, stream));
  void* operands[6] = {a, b, nullptr, d, nullptr, nullptr};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = 6;
  args.operands = operands;
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {
    const double start = bench::now_s();
    CHECK_HAL(hal_op_execute(plan, &args, stream));
    CHECK_HAL(hal_stream_synchronize(stream));
    const double seconds = bench::now_s() - start;
    if (r > 0) rates.push_back(2.0 * n * n * n / seconds / 1e9);  // r = 0 warms up
  }
  const bench::Stats stats = bench::summarize(rates);
  std::printf("%-40s %-10s %-8s %-6s %9.2f  [%.2f-%.2f]\n", info.implementation, variant.label,
              kernel, variant.dtype == HAL_DTYPE_F32 ? "f32" : "bf16", stats.median, stats.min,
              stats.max);
  hal_mem_free(a);
  hal_mem_free(b);
  hal_mem_free(d);
  hal_op_plan_destroy(plan);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 512;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::string kernels = argc > 3 ? argv[3] : "default";
  if (n <= 0 || reps <= 0 || (kernels != "default" && kernels != "both")) {
    std::fprintf(stderr,
                 "usage: ops_matmul_portable [size > 0] [repetitions > 0] [default|both]\n");
    return 2;
  }
  // The plugins of the build tree (HAL_PLUGINS narrows the list).
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  CHECK_HAL(hal_init(&options));
  bench::print_machine_line();
  uint32_t count = 0;
  CHECK_HAL(hal_device_count(&count));
  const Variant variants[] = {{"a@b", HAL_DTYPE_F32, 0},
                              {"a@b^T", HAL_DTYPE_F32, HAL_MATMUL_TRANSPOSE_B},
                              {"a^T@b", HAL_DTYPE_F32, HAL_MATMUL_TRANSPOSE_A},
                              {"a@b", HAL_DTYPE_BF16, 0}};
  std::printf("\n== HAL_OP_MATMUL %lldx%lldx%lld, GFLOP/s median [min-max] of %d\n",
              static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n),
              reps);
  for (uint32_t i = 0; i < count; ++i) {
    hal_device_t device = nullptr;
    CHECK_HAL(hal_device_get(i, &device));
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    CHECK_HAL(hal_device_get_properties(device, &properties));
    std::printf("-- %s (%s)\n", properties.name, properties.plugin);
    hal_stream_t stream = nullptr;
    CHECK_HAL(hal_stream_create(device, 0, &stream));
    for (const Variant& variant : variants) {
      if (kernels == "default") {
        run(device, stream, variant, n, reps, "default");
        continue;
      }
      for (const char* kernel : {"blocked", "tiled"}) {
        setenv("HAL_OPS_PORTABLE_MATMUL", kernel, 1);  // read at each plan's creation
        run(device, stream, variant, n, reps, kernel);
      }
    }
    hal_stream_destroy(stream);
  }
  hal_shutdown();
  return 0;
}
