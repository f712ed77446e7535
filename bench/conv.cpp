// HAL_OP_CONVOLUTION and its two backwards at ResNet-50 layer shapes, on
// every device HAL finds (HAL_PLUGINS=cpu,opencl): the implementation the
// device chooses (cpu.onednn on the cpu plugin) beside the loader's portable
// one (HAL_OPS_IMPLEMENTATIONS=portable, set per plan), milliseconds per
// execution (median of the repetitions after one warm-up) and GFLOP/s.
// Usage: conv [--batch 8] [--reps 3] [--layout nchw|nhwc] [--dtype f32|bf16]
//             [--shapes all|small] [--portable-only] [--no-portable]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// One convolution of ResNet-50: input channels, spatial size, output
// channels, kernel, stride.
struct Shape {
  const char* name;
  int64_t c, hw, k, r, stride;
};

const Shape kShapes[] = {
    {"conv1 7x7/2 3->64 @224", 3, 224, 64, 7, 2},  {"res2 1x1 256->64 @56", 256, 56, 64, 1, 1},
    {"res2 3x3 64->64 @56", 64, 56, 64, 3, 1},     {"res3 3x3 128->128 @28", 128, 28, 128, 3, 1},
    {"res4 3x3 256->256 @14", 256, 14, 256, 3, 1}, {"res5 1x1 512->2048 @7", 512, 7, 2048, 1, 1},
};

struct Options {
  int64_t batch = 8;
  int reps = 3;
  bool nhwc = false;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  bool small = false;
  bool portable = true;
  bool tuned = true;
};

hal_tensor_desc_t activation(const Options& o, int64_t n, int64_t c, int64_t hw) {
  const int64_t shape[4] = {n, c, hw, hw};
  hal_tensor_desc_t t{};
  hal_tensor_desc_contiguous(&t, o.dtype, 4, shape);
  if (o.nhwc) {  // channels-first dimensions, channels-last memory (PyTorch's channels_last)
    t.strides[1] = 1;
    t.strides[3] = c;
    t.strides[2] = c * hw;
    t.strides[0] = c * hw * hw;
  }
  return t;
}

size_t bytes_of(const hal_tensor_desc_t& t) {
  size_t n = t.dtype == HAL_DTYPE_F32 ? 4 : 2;
  for (uint32_t d = 0; d < t.rank; ++d) n *= static_cast<size_t>(t.shape[d]);
  return n;
}

const char* kind_label(hal_op_kind_t kind) {
  return kind == HAL_OP_CONVOLUTION                 ? "forward"
         : kind == HAL_OP_CONVOLUTION_BACKWARD_DATA ? "bwd-data"
                                                    : "bwd-weights";
}

// Median milliseconds of one execution of |kind| for |shape|; the
// implementation that served it in |implementation|; < 0 when not planned.
double time_conv(hal_device_t device, hal_stream_t stream, const Options& o, const Shape& s,
                 hal_op_kind_t kind, bool portable, std::string* implementation) {
  const int64_t pad = s.r / 2;
  const int64_t out = (s.hw + 2 * pad - s.r) / s.stride + 1;
  hal_op_convolution_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.layout = HAL_CHANNELS_FIRST;
  desc.spatial_dims = 2;
  desc.groups = 1;
  for (int d = 0; d < 2; ++d) {
    desc.stride[d] = s.stride;
    desc.dilation[d] = 1;
    desc.pad_begin[d] = desc.pad_end[d] = pad;
  }
  desc.x = activation(o, o.batch, s.c, s.hw);
  desc.y = activation(o, o.batch, s.k, out);
  const int64_t wshape[4] = {s.k, s.c, s.r, s.r};
  hal_tensor_desc_contiguous(&desc.w, o.dtype, 4, wshape);
  if (o.nhwc) {
    desc.w.strides[1] = 1;
    desc.w.strides[3] = s.c;
    desc.w.strides[2] = s.c * s.r;
    desc.w.strides[0] = s.c * s.r * s.r;
  }
  if (portable) setenv("HAL_OPS_IMPLEMENTATIONS", "portable", 1);
  hal_op_plan_t plan = nullptr;
  const hal_result_t planned = hal_op_plan_create(device, &desc.header, 0, &plan);
  if (portable) unsetenv("HAL_OPS_IMPLEMENTATIONS");
  if (planned != HAL_SUCCESS) {
    *implementation = std::string("not planned: ") + hal_error_last_message();
    return -1;
  }
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  CHECK_HAL(hal_op_plan_get_info(plan, &info));
  *implementation = info.implementation;
  void *x = nullptr, *w = nullptr, *y = nullptr, *workspace = nullptr;
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes_of(desc.x), 0, &x));
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes_of(desc.w), 0, &w));
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes_of(desc.y), 0, &y));
  if (info.workspace_bytes > 0) {
    CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, info.workspace_bytes, 0, &workspace));
  }
  CHECK_HAL(hal_memset_async(x, 0x3c, bytes_of(desc.x), stream));  // small finite values
  CHECK_HAL(hal_memset_async(w, 0x3c, bytes_of(desc.w), stream));
  CHECK_HAL(hal_memset_async(y, 0x3c, bytes_of(desc.y), stream));
  std::vector<void*> operands =
      kind == HAL_OP_CONVOLUTION                 ? std::vector<void*>{x, w, nullptr, nullptr, y}
      : kind == HAL_OP_CONVOLUTION_BACKWARD_DATA ? std::vector<void*>{y, w, x}
                                                 : std::vector<void*>{x, y, w, nullptr};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = static_cast<uint32_t>(operands.size());
  args.operands = operands.data();
  args.workspace = workspace;
  args.workspace_bytes = info.workspace_bytes;
  std::vector<double> samples;
  for (int rep = 0; rep <= o.reps; ++rep) {
    const double start = bench::now_s();
    CHECK_HAL(hal_op_execute(plan, &args, stream));
    CHECK_HAL(hal_stream_synchronize(stream));
    if (rep > 0) samples.push_back((bench::now_s() - start) * 1e3);
  }
  hal_mem_free(x);
  hal_mem_free(w);
  hal_mem_free(y);
  if (workspace != nullptr) hal_mem_free(workspace);
  hal_op_plan_destroy(plan);
  return bench::summarize(samples).median;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--batch") {
      o.batch = std::atoll(next().c_str());
    } else if (arg == "--reps") {
      o.reps = std::atoi(next().c_str());
    } else if (arg == "--layout") {
      o.nhwc = next() == "nhwc";
    } else if (arg == "--dtype") {
      o.dtype = next() == "bf16" ? HAL_DTYPE_BF16 : HAL_DTYPE_F32;
    } else if (arg == "--shapes") {
      o.small = next() == "small";
    } else if (arg == "--portable-only") {
      o.tuned = false;
    } else if (arg == "--no-portable") {
      o.portable = false;
    } else {
      std::fprintf(stderr,
                   "usage: conv [--batch N] [--reps R] [--layout nchw|nhwc] [--dtype f32|bf16] "
                   "[--shapes all|small] [--portable-only] [--no-portable]\n");
      return 2;
    }
  }
  CHECK_HAL(hal_init(nullptr));
  bench::print_machine_line();
  uint32_t devices = 0;
  CHECK_HAL(hal_device_count(&devices));
  std::printf("batch %lld, %s, %s, median of %d after a warm-up\n", static_cast<long long>(o.batch),
              o.nhwc ? "NHWC memory" : "NCHW memory", o.dtype == HAL_DTYPE_F32 ? "f32" : "bf16",
              o.reps);
  std::printf("%-8s %-26s %-12s %-11s %10s %8s   %-11s %10s %8s  %s\n", "device", "shape", "op",
              "chosen", "ms", "GFLOP/s", "portable", "ms", "GFLOP/s", "chosen/portable");
  for (uint32_t index = 0; index < devices; ++index) {
    hal_device_t device = nullptr;
    CHECK_HAL(hal_device_get(index, &device));
    hal_device_properties_t props{};
    props.struct_size = sizeof(props);
    CHECK_HAL(hal_device_get_properties(device, &props));
    hal_stream_t stream = nullptr;
    CHECK_HAL(hal_stream_create(device, 0, &stream));
    for (const Shape& s : kShapes) {
      if (o.small && s.c * s.hw * s.hw > 256 * 56 * 56 / 2) continue;
      const int64_t out = (s.hw + 2 * (s.r / 2) - s.r) / s.stride + 1;
      const double flops = 2.0 * static_cast<double>(o.batch * s.k * out * out * s.c * s.r * s.r);
      for (hal_op_kind_t kind : {HAL_OP_CONVOLUTION, HAL_OP_CONVOLUTION_BACKWARD_DATA,
                                 HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS}) {
        std::string chosen = "-", portable = "-";
        const double t_chosen =
            o.tuned ? time_conv(device, stream, o, s, kind, false, &chosen) : -1;
        const double t_portable =
            o.portable ? time_conv(device, stream, o, s, kind, true, &portable) : -1;
        const auto gflops = [&](double ms) { return ms > 0 ? flops / ms / 1e6 : 0.0; };
        std::printf(
            "%-8s %-26s %-12s %-11.11s %10.2f %8.1f   %-11.11s %10.2f %8.1f  %s\n", props.plugin,
            s.name, kind_label(kind), chosen.c_str(), t_chosen, gflops(t_chosen), portable.c_str(),
            t_portable, gflops(t_portable),
            t_chosen > 0 && t_portable > 0 ? bench::fmt(t_portable / t_chosen, 1).c_str() : "-");
        std::fflush(stdout);
      }
    }
    hal_stream_destroy(stream);
  }
  hal_shutdown();
  return 0;
}
