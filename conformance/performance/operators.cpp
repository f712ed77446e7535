// performance.operators: compute measured with the device's own operators
// (hal/ops.h, whichever implementation the device chooses: a plugin's tuned
// one where it has one), against the declared peak_fp32_flops.
#include <algorithm>
#include <chrono>
#include <vector>
#include <string>

#include "context.hpp"
#include "hal_objects.hpp"
#include "thresholds.hpp"

namespace halconform {
namespace {

// The median of 5 timed executions of |plan| (each synchronised) after one
// warm-up.
double median_execution_seconds(hal_op_plan_t plan, const hal_op_exec_args_t& args,
                                hal_stream_t stream) {
  std::vector<double> seconds;
  for (int r = 0; r < 6; ++r) {
    HC_OK(hal_stream_synchronize(stream));
    const auto start = std::chrono::steady_clock::now();
    HC_OK(hal_op_execute(plan, &args, stream));
    HC_OK(hal_stream_synchronize(stream));
    if (r > 0) {
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

struct MatmulFigure {
  double flops_per_second = 0;
  std::string implementation;
};

// Median of 5 timed f32/bf16 n^3 matmuls after one warm-up; skips the test
// when no implementation of the device accepts the plan.
MatmulFigure time_matmul(TestContext& ctx, hal_dtype_t dtype, int64_t n) {
  hal_op_matmul_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_MATMUL;
  desc.activation = HAL_ACTIVATION_NONE;
  desc.alpha = 1.0f;
  const int64_t shape[2] = {n, n};
  hal_tensor_desc_contiguous(&desc.a, dtype, 2, shape);
  hal_tensor_desc_contiguous(&desc.b, dtype, 2, shape);
  hal_tensor_desc_contiguous(&desc.d, HAL_DTYPE_F32, 2, shape);
  desc.c = desc.d;
  hal_op_plan_t plan = nullptr;
  if (hal_op_plan_create(ctx.device(), &desc.header, 0, &plan) != HAL_SUCCESS) {
    ctx.skip(std::string("no matmul on this device: ") + hal_error_last_message());
  }
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  HC_OK(hal_op_plan_get_info(plan, &info));
  const size_t in_bytes = static_cast<size_t>(n * n) * HAL_DTYPE_SIZE(dtype);
  Buffer a(ctx.device(), in_bytes), b(ctx.device(), in_bytes),
      d(ctx.device(), static_cast<size_t>(n * n) * 4);
  Stream stream(ctx.device());
  HC_OK(hal_memset_async(a.get(), 0, in_bytes, stream));
  HC_OK(hal_memset_async(b.get(), 0, in_bytes, stream));
  void* operands[6] = {a.get(), b.get(), nullptr, d.get(), nullptr, nullptr};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = 6;
  args.operands = operands;
  const double median = median_execution_seconds(plan, args, stream);
  HC_OK(hal_op_plan_destroy(plan));
  return {2.0 * static_cast<double>(n) * n * n / median, info.implementation};
}

// Median of 5 timed causal f32 attention forwards (batch 1, 8 heads, 2048
// keys, head dim 64) after one warm-up: FLOP/s counting the causal half of
// QK^T and PV. Skips the test when no implementation accepts the plan.
MatmulFigure time_attention(TestContext& ctx) {
  constexpr int64_t kSeq = 2048, kHeads = 8, kDim = 64;
  hal_op_attention_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_ATTENTION;
  desc.causal = HAL_CAUSAL_TOP_LEFT;
  desc.sparsity = HAL_ATTENTION_DENSE;
  desc.batch = 1;
  const int64_t shape[4] = {1, kSeq, kHeads, kDim};
  const int64_t lse_shape[3] = {1, kHeads, kSeq};
  hal_tensor_desc_contiguous(&desc.q, HAL_DTYPE_F32, 4, shape);
  desc.k = desc.v = desc.out = desc.q;
  hal_tensor_desc_contiguous(&desc.lse, HAL_DTYPE_F32, 3, lse_shape);
  hal_op_plan_t plan = nullptr;
  if (hal_op_plan_create(ctx.device(), &desc.header, 0, &plan) != HAL_SUCCESS) {
    ctx.skip(std::string("no attention on this device: ") + hal_error_last_message());
  }
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  HC_OK(hal_op_plan_get_info(plan, &info));
  const size_t bytes = static_cast<size_t>(kSeq * kHeads * kDim) * 4;
  Buffer q(ctx.device(), bytes), k(ctx.device(), bytes), v(ctx.device(), bytes),
      out(ctx.device(), bytes), lse(ctx.device(), static_cast<size_t>(kHeads * kSeq) * 4);
  Buffer workspace(ctx.device(), std::max<size_t>(info.workspace_bytes, 1));
  Stream stream(ctx.device());
  for (Buffer* input : {&q, &k, &v}) HC_OK(hal_memset_async(input->get(), 0, bytes, stream));
  void* operands[8] = {q.get(), k.get(), v.get(), out.get(), lse.get(), nullptr, nullptr, nullptr};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = 8;
  args.operands = operands;
  args.workspace = info.workspace_bytes > 0 ? workspace.get() : nullptr;
  args.workspace_bytes = info.workspace_bytes;
  const double median = median_execution_seconds(plan, args, stream);
  HC_OK(hal_op_plan_destroy(plan));
  const double flops = 4.0 * static_cast<double>(kHeads * kDim) * kSeq * kSeq / 2.0;
  return {flops / median, info.implementation};
}

}  // namespace

HALCONFORM_TEST("performance.operators.attention_forward",
                "causal f32 attention forward (8 heads, 2048 keys, head dim 64) through the "
                "device's chosen implementation, against the declared peak_fp32_flops",
                {}) {
  const MatmulFigure figure = time_attention(ctx);
  const double declared = ctx.properties().peak_fp32_flops;
  ctx.record_metric("attention_forward_flops", figure.flops_per_second, "FLOP/s",
                    declared > 0 ? declared : NAN);
  ctx.note("implementation " + figure.implementation);
}

HALCONFORM_TEST("performance.operators.matmul_f32",
                "f32 matmul (1024^3) through the device's chosen implementation, against the "
                "declared peak_fp32_flops",
                {}) {
  const CpuShare share;
  const MatmulFigure figure = time_matmul(ctx, HAL_DTYPE_F32, 1024);
  const double got = share.of(ctx.properties());
  const double declared = ctx.properties().peak_fp32_flops;
  ctx.record_metric("matmul_f32_flops", figure.flops_per_second, "FLOP/s",
                    declared > 0 ? declared : NAN);
  ctx.note("implementation " + figure.implementation);
  // Only the floor: a tuned library may run on more cores than a virtual
  // device's share, and at a boost clock above the one the peak declares.
  // The floor scales with the cores the process got (CpuShare): load is no defect.
  if (declared > 0 && figure.flops_per_second < kBelowDeclaredLimit * got * declared) {
    fail(
        strf("matmul_f32_flops: achieved %.4g is below %.0f%% of the declared %.4g (scaled to "
             "the %.0f%% of its compute units the process ran on)",
             figure.flops_per_second, 100 * kBelowDeclaredLimit, declared, 100 * got));
  }
}

HALCONFORM_TEST("performance.operators.matmul_bf16",
                "bf16 matmul (1024^3, f32 output) through the device's chosen implementation", {}) {
  const MatmulFigure figure = time_matmul(ctx, HAL_DTYPE_BF16, 1024);
  const double declared = ctx.properties().peak_fp32_flops;
  ctx.record_metric("matmul_bf16_flops", figure.flops_per_second, "FLOP/s",
                    declared > 0 ? declared : NAN);
  ctx.note("implementation " + figure.implementation +
           " (bf16 peak not declared: the f32 peak "
           "is shown for scale)");
}

}  // namespace halconform
