// Each op of a training step, in one run, on every device HAL finds
// (HAL_PLUGINS=cpu,opencl): the implementation the device chooses (the
// plugin's tuned one where it has one) beside the loader's portable one
// (HAL_OPS_IMPLEMENTATIONS=portable, set per plan), with the ratio.
// Usage: ops_compare [repetitions=5]
// Prints one row per device x op: milliseconds per execution (median after
// one warm-up) and which implementation served it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hal.h"

namespace {

struct Buffer {
  void* pointer = nullptr;
  Buffer(hal_device_t device, size_t bytes) {
    if (hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &pointer) != HAL_SUCCESS) {
      std::fprintf(stderr, "hal_mem_alloc: %s\n", hal_error_last_message());
      std::exit(1);
    }
  }
  ~Buffer() { hal_mem_free(pointer); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

hal_tensor_desc_t dense(hal_dtype_t dtype, std::vector<int64_t> shape) {
  hal_tensor_desc_t tensor{};
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return tensor;
}

size_t bytes_of(const hal_tensor_desc_t& tensor) {
  size_t count = 1;
  for (uint32_t d = 0; d < tensor.rank; ++d) count *= static_cast<size_t>(tensor.shape[d]);
  return std::max<size_t>(1, count * HAL_DTYPE_SIZE(tensor.dtype));
}

// One op to time: its descriptor, the tensors of its operands (rank 0 with
// dtype F32 and shape {} for an absent optional operand is marked by
// present = false), and its scalars.
struct Case {
  std::string name;
  std::function<const hal_op_header_t*()> desc;
  std::vector<std::pair<bool, hal_tensor_desc_t>> operands;
  std::vector<hal_op_scalar_t> scalars;
};

struct Result {
  bool ok = false;
  double ms = 0;
  std::string implementation;
  std::string error;
};

Result time_case(hal_device_t device, hal_stream_t stream, const Case& c, bool portable, int reps) {
  Result result;
  if (portable) {
    setenv("HAL_OPS_IMPLEMENTATIONS", "portable", 1);
  } else {
    unsetenv("HAL_OPS_IMPLEMENTATIONS");
  }
  hal_op_plan_t plan = nullptr;
  const hal_result_t planned = hal_op_plan_create(device, c.desc(), 0, &plan);
  unsetenv("HAL_OPS_IMPLEMENTATIONS");
  if (planned != HAL_SUCCESS) {
    result.error = hal_error_last_message();
    return result;
  }
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  hal_op_plan_get_info(plan, &info);
  result.implementation = info.implementation;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<void*> operands;
  for (const auto& [present, tensor] : c.operands) {
    if (!present) {
      operands.push_back(nullptr);
      continue;
    }
    buffers.push_back(std::make_unique<Buffer>(device, bytes_of(tensor)));
    hal_memset_async(buffers.back()->pointer, 0, bytes_of(tensor), stream);
    operands.push_back(buffers.back()->pointer);
  }
  std::unique_ptr<Buffer> workspace;
  if (info.workspace_bytes > 0) workspace = std::make_unique<Buffer>(device, info.workspace_bytes);
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = static_cast<uint32_t>(operands.size());
  args.operands = operands.data();
  args.scalar_count = static_cast<uint32_t>(c.scalars.size());
  args.scalars = c.scalars.data();
  args.workspace = workspace ? workspace->pointer : nullptr;
  args.workspace_bytes = info.workspace_bytes;
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    hal_stream_synchronize(stream);
    const auto start = std::chrono::steady_clock::now();
    if (hal_op_execute(plan, &args, stream) != HAL_SUCCESS ||
        hal_stream_synchronize(stream) != HAL_SUCCESS) {
      result.error = hal_error_last_message();
      hal_op_plan_destroy(plan);
      return result;
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) times.push_back(ms);  // the first run warms caches
  }
  hal_op_plan_destroy(plan);
  std::sort(times.begin(), times.end());
  result.ms = times[times.size() / 2];
  result.ok = true;
  return result;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  {  // matmul 512^3 f32 with bias + gelu
    static hal_op_matmul_desc_t d{};
    d.header.struct_size = sizeof(d);
    d.header.kind = HAL_OP_MATMUL;
    d.flags = HAL_MATMUL_BIAS;
    d.activation = HAL_ACTIVATION_GELU_TANH;
    d.alpha = 1;
    d.a = d.b = d.c = d.d = dense(HAL_DTYPE_F32, {512, 512});
    d.bias = dense(HAL_DTYPE_F32, {512});
    all.push_back(
        {"matmul 512^3 f32 +bias+gelu",
         [] { return &d.header; },
         {{true, d.a}, {true, d.b}, {false, {}}, {true, d.d}, {true, d.bias}, {false, {}}},
         {}});
  }
  {  // layernorm 1024 x 1024
    static hal_op_norm_desc_t d{};
    d.header.struct_size = sizeof(d);
    d.header.kind = HAL_OP_NORM;
    d.norm = HAL_NORM_LAYERNORM;
    d.epsilon = 1e-5f;
    d.has_gamma = d.has_beta = 1;
    d.has_mean = d.has_rstd = 1;
    d.x = d.y = dense(HAL_DTYPE_F32, {1024, 1024});
    d.gamma = d.beta = dense(HAL_DTYPE_F32, {1024});
    d.mean = d.rstd = dense(HAL_DTYPE_F32, {1024});
    all.push_back({"layernorm 1024x1024 f32",
                   [] { return &d.header; },
                   {{true, d.x},
                    {true, d.gamma},
                    {true, d.beta},
                    {true, d.y},
                    {true, d.mean},
                    {true, d.rstd}},
                   {}});
  }
  {  // softmax 1024 x 1024
    static hal_op_softmax_desc_t d{};
    d.header.struct_size = sizeof(d);
    d.header.kind = HAL_OP_SOFTMAX;
    d.x = d.y = dense(HAL_DTYPE_F32, {1024, 1024});
    all.push_back(
        {"softmax 1024x1024 f32", [] { return &d.header; }, {{true, d.x}, {true, d.y}}, {}});
  }
  {  // add 4M
    static hal_op_binary_desc_t d{};
    d.header.struct_size = sizeof(d);
    d.header.kind = HAL_OP_BINARY;
    d.op = HAL_BINARY_ADD;
    d.alpha = 1;
    d.a = d.b = d.out = dense(HAL_DTYPE_F32, {4 << 20});
    all.push_back(
        {"add 4M f32", [] { return &d.header; }, {{true, d.a}, {true, d.b}, {true, d.out}}, {}});
  }
  {  // cross-entropy 512 x 4096 with grad
    static hal_op_cross_entropy_desc_t d{};
    d.header.struct_size = sizeof(d);
    d.header.kind = HAL_OP_CROSS_ENTROPY;
    d.ignore_index = -100;
    d.has_grad = 1;
    d.logits = d.grad_logits = dense(HAL_DTYPE_F32, {512, 4096});
    d.labels = dense(HAL_DTYPE_I32, {512});
    d.loss = dense(HAL_DTYPE_F32, {1});
    hal_op_scalar_t one{};
    one.f64 = 1.0;
    all.push_back(
        {"cross-entropy 512x4096 f32 +grad",
         [] { return &d.header; },
         {{true, d.logits}, {true, d.labels}, {true, d.loss}, {false, {}}, {true, d.grad_logits}},
         {one}});
  }
  {  // attention forward, causal, b1 s512 h4 d64
    static hal_op_attention_desc_t d{};
    d.header.struct_size = sizeof(d);
    d.header.kind = HAL_OP_ATTENTION;
    d.causal = HAL_CAUSAL_BOTTOM_RIGHT;
    d.batch = 1;
    d.q = d.k = d.v = d.out = dense(HAL_DTYPE_F32, {1, 512, 4, 64});
    d.lse = dense(HAL_DTYPE_F32, {1, 4, 512});
    all.push_back({"attention fwd causal s512 h4 d64 f32",
                   [] { return &d.header; },
                   {{true, d.q},
                    {true, d.k},
                    {true, d.v},
                    {true, d.out},
                    {true, d.lse},
                    {false, {}},
                    {false, {}},
                    {false, {}}},
                   {}});
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  if (hal_init(nullptr) != HAL_SUCCESS) {
    std::fprintf(stderr, "hal_init: %s\n", hal_error_last_message());
    return 1;
  }
  uint32_t count = 0;
  hal_device_count(&count);
  std::printf("%-10s %-38s %12s %-14s %12s %-10s %8s\n", "device", "op", "chosen ms",
              "implementation", "portable ms", "", "ratio");
  // One device per plugin is enough (cpu devices share the cores).
  std::vector<std::string> seen;
  for (uint32_t i = 0; i < count; ++i) {
    hal_device_t device = nullptr;
    hal_device_get(i, &device);
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    hal_device_get_properties(device, &properties);
    const std::string plugin = properties.plugin;
    if (std::find(seen.begin(), seen.end(), plugin) != seen.end()) continue;
    seen.push_back(plugin);
    hal_stream_t stream = nullptr;
    hal_stream_create(device, 0, &stream);
    for (const Case& c : cases()) {
      const Result chosen = time_case(device, stream, c, false, reps);
      const Result portable = time_case(device, stream, c, true, reps);
      if (!chosen.ok) {
        std::printf("%-10s %-38s failed: %s\n", plugin.c_str(), c.name.c_str(),
                    chosen.error.c_str());
        continue;
      }
      std::printf("%-10s %-38s %12.3f %-14s %12.3f %-10s %8.2f\n", plugin.c_str(), c.name.c_str(),
                  chosen.ms, chosen.implementation.c_str(), portable.ok ? portable.ms : 0.0,
                  portable.ok ? "portable" : "-", portable.ok ? portable.ms / chosen.ms : 0.0);
    }
    hal_stream_destroy(stream);
  }
  hal_shutdown();
  return 0;
}
