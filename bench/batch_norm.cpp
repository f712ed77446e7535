// HAL_OP_BATCH_NORM (training: batch statistics, saved statistics and the
// running update) and HAL_OP_BATCH_NORM_BACKWARD (training: grad_x,
// grad_scale, grad_shift) at ResNet-18's batch-norm shapes, NCHW f32, on the
// cpu plugin: milliseconds per execution (median of the repetitions after a
// warm-up; --best: the fastest), one line per shape and op:
// "hal <batch> <shape> <op> <ms> <implementation>". Its peer is PyTorch CPU's
// native_batch_norm(_backward) (bench/python/batch_norm_torch.py), joined by
// bench/batch_norm_peers.sh, which also runs an earlier plugin (oneDNN's
// kernels) through HAL_PLUGIN_PATH when asked.
// Usage: batch_norm [--batch 16] [--reps 10] [--best]
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

struct Shape {
  const char* name;
  int64_t c, hw;
};

// Every batch norm of ResNet-18 at a 224x224 input is one of these.
const Shape kShapes[] = {{"c64_112", 64, 112},
                         {"c64_56", 64, 56},
                         {"c128_28", 128, 28},
                         {"c256_14", 256, 14},
                         {"c512_7", 512, 7}};

struct Options {
  int64_t batch = 16;
  int reps = 10;
  bool best = false;
};

void* alloc_filled(hal_device_t device, hal_stream_t stream, size_t count, float value) {
  void* data = nullptr;
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, count * sizeof(float), 0, &data));
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = value * static_cast<float>(1 + i % 7);
  CHECK_HAL(hal_memcpy_async(data, host.data(), count * sizeof(float), stream));
  CHECK_HAL(hal_stream_synchronize(stream));
  return data;
}

// Milliseconds per execution of the forward and the backward for |s|.
void run_shape(hal_device_t device, hal_stream_t stream, const Options& o, const Shape& s) {
  const int64_t shape[4] = {o.batch, s.c, s.hw, s.hw};
  const int64_t vshape[1] = {s.c};
  hal_op_batch_norm_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.layout = HAL_CHANNELS_FIRST;
  desc.epsilon = 1e-5f;
  hal_tensor_desc_t act{}, vec{};
  hal_tensor_desc_contiguous(&act, HAL_DTYPE_F32, 4, shape);
  hal_tensor_desc_contiguous(&vec, HAL_DTYPE_F32, 1, vshape);
  desc.x = desc.y = desc.grad_y = desc.grad_x = act;
  desc.scale = desc.shift = desc.running_mean = desc.running_var = vec;
  desc.saved_mean = desc.saved_rstd = desc.grad_scale = desc.grad_shift = vec;
  const size_t count = static_cast<size_t>(o.batch * s.c * s.hw * s.hw);
  const size_t channels = static_cast<size_t>(s.c);
  void* x = alloc_filled(device, stream, count, 0.25f);
  void* y = alloc_filled(device, stream, count, 0.0f);
  void* gy = alloc_filled(device, stream, count, 0.125f);
  void* gx = alloc_filled(device, stream, count, 0.0f);
  void* scale = alloc_filled(device, stream, channels, 1.0f);
  void* shift = alloc_filled(device, stream, channels, 0.0f);
  void* run_mean = alloc_filled(device, stream, channels, 0.0f);
  void* run_var = alloc_filled(device, stream, channels, 1.0f);
  void* mean = alloc_filled(device, stream, channels, 0.0f);
  void* rstd = alloc_filled(device, stream, channels, 1.0f);
  void* grad_scale = alloc_filled(device, stream, channels, 0.0f);
  void* grad_shift = alloc_filled(device, stream, channels, 0.0f);
  for (bool backward : {false, true}) {
    desc.header.kind = backward ? HAL_OP_BATCH_NORM_BACKWARD : HAL_OP_BATCH_NORM;
    desc.flags = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SCALE |
                 (backward ? HAL_BATCH_NORM_GRAD_SCALE | HAL_BATCH_NORM_GRAD_SHIFT
                           : HAL_BATCH_NORM_SHIFT | HAL_BATCH_NORM_UPDATE_RUNNING |
                                 HAL_BATCH_NORM_SAVE_STATS);
    hal_op_plan_t plan = nullptr;
    CHECK_HAL(hal_op_plan_create(device, &desc.header, 0, &plan));
    hal_op_plan_info_t info{};
    info.struct_size = sizeof(info);
    CHECK_HAL(hal_op_plan_get_info(plan, &info));
    void* workspace = nullptr;
    if (info.workspace_bytes > 0) {
      CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, info.workspace_bytes, 0, &workspace));
    }
    std::vector<void*> operands =
        backward ? std::vector<void*>{x,       gy,      scale, mean,       rstd,      nullptr,
                                      nullptr, nullptr, gx,    grad_scale, grad_shift}
                 : std::vector<void*>{x, scale, shift, run_mean, run_var, y, mean, rstd};
    const hal_op_scalar_t momentum{0.1, 0, 0};
    hal_op_exec_args_t args{};
    args.struct_size = sizeof(args);
    args.operand_count = static_cast<uint32_t>(operands.size());
    args.operands = operands.data();
    args.scalar_count = backward ? 0 : 1;
    args.scalars = &momentum;
    args.workspace = workspace;
    args.workspace_bytes = info.workspace_bytes;
    std::vector<double> samples;
    for (int rep = 0; rep <= o.reps; ++rep) {
      const double start = bench::now_s();
      CHECK_HAL(hal_op_execute(plan, &args, stream));
      CHECK_HAL(hal_stream_synchronize(stream));
      if (rep > 0) samples.push_back((bench::now_s() - start) * 1e3);
    }
    const bench::Stats stats = bench::summarize(samples);
    std::printf("hal %lld %s %s %.4f %s\n", static_cast<long long>(o.batch), s.name,
                backward ? "backward" : "forward", o.best ? stats.min : stats.median,
                info.implementation);
    std::fflush(stdout);
    if (workspace != nullptr) hal_mem_free(workspace);
    hal_op_plan_destroy(plan);
  }
  for (void* p :
       {x, y, gy, gx, scale, shift, run_mean, run_var, mean, rstd, grad_scale, grad_shift}) {
    hal_mem_free(p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--batch" && i + 1 < argc) {
      o.batch = std::atoll(argv[++i]);
    } else if (arg == "--reps" && i + 1 < argc) {
      o.reps = std::atoi(argv[++i]);
    } else if (arg == "--best") {
      o.best = true;
    } else {
      std::fprintf(stderr, "usage: batch_norm [--batch N] [--reps R] [--best]\n");
      return 2;
    }
  }
  CHECK_HAL(hal_init(nullptr));
  hal_device_t device = nullptr;
  CHECK_HAL(hal_device_get(0, &device));
  hal_stream_t stream = nullptr;
  CHECK_HAL(hal_stream_create(device, 0, &stream));
  std::printf("# batch %lld, NCHW f32, %s ms of %d after a warm-up\n",
              static_cast<long long>(o.batch), o.best ? "fastest" : "median", o.reps);
  for (const Shape& s : kShapes) run_shape(device, stream, o, s);
  hal_stream_destroy(stream);
  hal_shutdown();
  return 0;
}
