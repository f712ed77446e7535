// Planted low-precision faults of the fault plugin (fault_plugin.cpp): bugs
// a vendor's fp8/int8 kernels could ship, each of which the operators
// profile's operators.lowp.* tests must catch. The faulty op is served here
// (in place of cpu.native's or the portable implementation): a host function in stream order
// computes it with the one planted mistake; everything else is passed to the real plugin.
#include "fault_lowp.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "fault_op_plan.hpp"

namespace fault_lowp {
namespace {

const hal_plugin_table_v1_t* g_real = nullptr;
LowpFault g_fault = LowpFault::kScalePerColumn;
constexpr const char* kServedName = "fault.lowp";

using fault_op_plan::WrappedPlan;

struct Job {
  const WrappedPlan* plan;
  std::vector<void*> operands;
};

bool dense(const hal_tensor_desc_t& t) {
  int64_t stride = 1;
  for (uint32_t d = t.rank; d-- > 0;) {
    if (t.shape[d] != 1 && t.strides[d] != stride) return false;
    stride *= t.shape[d];
  }
  return true;
}

int64_t count(const hal_tensor_desc_t& t) {
  int64_t n = 1;
  for (uint32_t d = 0; d < t.rank; ++d) n *= t.shape[d];
  return n;
}

// e4m3 decoded with the fault: the NaN code as the number it would be.
float e4m3_as_number(uint8_t code) {
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int e = (code & 0x7f) >> 3, man = code & 7;
  if (e == 0) return sign * std::ldexp(static_cast<float>(man), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(man) / 8.0f, e - 7);
}

float fp8_value(uint8_t code, hal_dtype_t dtype) {
  if (dtype == HAL_DTYPE_F8_E4M3) {
    if ((code & 0x7f) == 0x7f) return NAN;
    return e4m3_as_number(code);
  }
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int e = (code & 0x7f) >> 2, man = code & 3;
  if (e == 31) return man == 0 ? sign * INFINITY : NAN;
  if (e == 0) return sign * std::ldexp(static_cast<float>(man), -16);
  return sign * std::ldexp(1.0f + static_cast<float>(man) / 4.0f, e - 15);
}

float quantized_value(const void* base, int64_t i, hal_dtype_t dtype) {
  const uint8_t byte = static_cast<const uint8_t*>(base)[i];
  if (dtype == HAL_DTYPE_I8) return static_cast<float>(static_cast<int8_t>(byte));
  return fp8_value(byte, dtype);
}

void run(void* data) {
  std::unique_ptr<Job> job(static_cast<Job*>(data));
  const hal_op_kind_t kind = job->plan->kind();
  if (kind == HAL_OP_CAST) {  // e4m3 -> f32 with the NaN code as a number
    const auto& desc = job->plan->as<hal_op_cast_desc_t>();
    const auto* in = static_cast<const uint8_t*>(job->operands[0]);
    auto* out = static_cast<float*>(job->operands[1]);
    for (int64_t i = 0; i < count(desc.in); ++i) out[i] = e4m3_as_number(in[i]);
  } else if (kind == HAL_OP_SCALED_MATMUL) {  // a's scale taken at d's column
    const auto& desc = job->plan->as<hal_op_scaled_matmul_desc_t>();
    const int64_t m = desc.a.shape[0], k = desc.a.shape[1], n = desc.d.shape[1];
    const int64_t a_br = desc.a_blocks.rows == 0 ? m : desc.a_blocks.rows;
    const int64_t a_bc = desc.a_blocks.cols == 0 ? k : desc.a_blocks.cols;
    const int64_t b_br = desc.b_blocks.rows == 0 ? n : desc.b_blocks.rows;
    const int64_t b_bc = desc.b_blocks.cols == 0 ? k : desc.b_blocks.cols;
    const int64_t a_scale_rows = m / a_br;
    const auto* as = static_cast<const float*>(job->operands[1]);
    const auto* bs = static_cast<const float*>(job->operands[3]);
    auto* d = static_cast<float*>(job->operands[5]);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) {
          const float sa = as[((j / a_br) % a_scale_rows) * (k / a_bc) + kk / a_bc];  // the fault
          const float sb = bs[(j / b_br) * (k / b_bc) + kk / b_bc];
          acc += quantized_value(job->operands[0], r * k + kk, desc.a.dtype) * sa *
                 quantized_value(job->operands[2], j * k + kk, desc.b.dtype) * sb;
        }
        d[r * n + j] = acc;
      }
  } else if (kind == HAL_OP_FAKE_QUANTIZE_BACKWARD && g_fault == LowpFault::kClipRoundedIgnored) {
    // The straight-through mask on v (LSQ's) where CLIP_ROUNDED asks for the rounded value:
    // wrong only in the half quantum beyond each end of the range.
    const auto& desc = job->plan->as<hal_op_fake_quantize_desc_t>();
    const auto* x = static_cast<const float*>(job->operands[0]);
    const auto* scale = static_cast<const float*>(job->operands[1]);
    const auto* gy = static_cast<const float*>(job->operands[2]);
    auto* gx = static_cast<float*>(job->operands[3]);
    const int64_t rows = desc.x.shape[0], cols = desc.x.shape[1];
    const int64_t br = desc.blocks.rows == 0 ? rows : desc.blocks.rows;
    const int64_t bc = desc.blocks.cols == 0 ? cols : desc.blocks.cols;
    const int64_t sc = bc == 0 ? 1 : cols / bc;
    for (int64_t i = 0; i < rows * cols; ++i) {
      const int64_t r = i / cols, c = i % cols;
      const float s = scale[(r / br) * sc + c / bc];
      const float v =
          (desc.flags & HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE) != 0 ? x[i] * (1.0f / s) : x[i] / s;
      gx[i] = v >= -128.0f && v <= 127.0f ? gy[i] : 0.0f;
    }
    if (job->operands[4] != nullptr)
      std::memset(job->operands[4], 0, static_cast<size_t>(count(desc.scale)) * sizeof(float));
  } else if (kind == HAL_OP_FAKE_QUANTIZE_BACKWARD) {  // the gradient passed everywhere
    const auto& desc = job->plan->as<hal_op_fake_quantize_desc_t>();
    std::memcpy(job->operands[3], job->operands[2],
                static_cast<size_t>(count(desc.x)) * sizeof(float));
    if (job->operands[4] != nullptr)
      std::memset(job->operands[4], 0, static_cast<size_t>(count(desc.scale)) * sizeof(float));
  } else if (kind == HAL_OP_DEQUANTIZE) {  // every row's scale from the first row block
    const auto& desc = job->plan->as<hal_op_quantize_desc_t>();
    const auto* scale = static_cast<const float*>(job->operands[1]);
    auto* x = static_cast<float*>(job->operands[2]);
    const int64_t n = count(desc.q), cols = desc.q.shape[desc.q.rank - 1];
    const int64_t bc = desc.blocks.cols == 0 ? cols : desc.blocks.cols;
    for (int64_t i = 0; i < n; ++i) {
      const float s = scale[(i % cols / bc) * desc.scale.strides[1]];  // the fault: row block 0
      x[i] = quantized_value(job->operands[0], i, desc.q.dtype) * s;
    }
  } else if (kind == HAL_OP_QUANTIZE) {  // i8 ties rounded away from zero
    const auto& desc = job->plan->as<hal_op_quantize_desc_t>();
    const auto* x = static_cast<const float*>(job->operands[0]);
    auto* q = static_cast<int8_t*>(job->operands[1]);
    auto* scale = static_cast<float*>(job->operands[2]);
    const int64_t n = count(desc.x);
    const int64_t cols = desc.x.shape[desc.x.rank - 1], rows = cols == 0 ? 0 : n / cols;
    const int64_t br = desc.blocks.rows == 0 ? rows : desc.blocks.rows;
    const int64_t bc = desc.blocks.cols == 0 ? cols : desc.blocks.cols;
    const int64_t sc = bc == 0 ? 1 : cols / bc;
    if ((desc.flags & HAL_QUANTIZE_GIVEN_SCALE) == 0) {
      const int64_t sr = br == 0 ? 1 : rows / br;
      for (int64_t b = 0; b < sr * sc; ++b) {
        float amax = 0.0f;
        for (int64_t r = (b / sc) * br; r < (b / sc + 1) * br; ++r)
          for (int64_t c = (b % sc) * bc; c < (b % sc + 1) * bc; ++c)
            amax = std::max(amax, std::fabs(x[r * cols + c]));
        scale[b] = amax == 0.0f ? 1.0f : amax / 127.0f;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = i / cols, c = i % cols;
      const float v = x[i] / scale[(r / br) * sc + c / bc];
      q[i] = static_cast<int8_t>(
          std::isnan(v) ? 0.0f : std::min(127.0f, std::max(-128.0f, std::round(v))));
    }
  }
}

// Whether |desc| is the op (and the simple shape) the fault serves here.
bool served(const hal_op_header_t* desc) {
  switch (g_fault) {
    case LowpFault::kE4m3NanAsNumber: {
      if (desc->kind != HAL_OP_CAST) return false;
      const auto& cast = *reinterpret_cast<const hal_op_cast_desc_t*>(desc);
      return cast.in.dtype == HAL_DTYPE_F8_E4M3 && cast.out.dtype == HAL_DTYPE_F32 &&
             dense(cast.in) && dense(cast.out);
    }
    case LowpFault::kScalePerColumn: {
      if (desc->kind != HAL_OP_SCALED_MATMUL) return false;
      const auto& mm = *reinterpret_cast<const hal_op_scaled_matmul_desc_t*>(desc);
      return mm.groups == 0 && mm.d.dtype == HAL_DTYPE_F32 && dense(mm.a) && dense(mm.b) &&
             dense(mm.a_scale) && dense(mm.b_scale) && dense(mm.d);
    }
    case LowpFault::kSteOutsideRange: {
      if (desc->kind != HAL_OP_FAKE_QUANTIZE_BACKWARD) return false;
      const auto& fq = *reinterpret_cast<const hal_op_fake_quantize_desc_t*>(desc);
      return fq.grad_y.dtype == HAL_DTYPE_F32 && fq.grad_x.dtype == HAL_DTYPE_F32 &&
             dense(fq.grad_y) && dense(fq.grad_x) && dense(fq.scale);
    }
    case LowpFault::kClipRoundedIgnored: {
      if (desc->kind != HAL_OP_FAKE_QUANTIZE_BACKWARD) return false;
      const auto& fq = *reinterpret_cast<const hal_op_fake_quantize_desc_t*>(desc);
      return (fq.flags & HAL_FAKE_QUANTIZE_CLIP_ROUNDED) != 0 && fq.x.dtype == HAL_DTYPE_F32 &&
             fq.grad_y.dtype == HAL_DTYPE_F32 && fq.grad_x.dtype == HAL_DTYPE_F32 &&
             fq.x.rank == 2 && dense(fq.x) && dense(fq.grad_y) && dense(fq.grad_x) &&
             dense(fq.scale);
    }
    case LowpFault::kDequantizeRowBlocksIgnored: {
      if (desc->kind != HAL_OP_DEQUANTIZE) return false;
      const auto& qd = *reinterpret_cast<const hal_op_quantize_desc_t*>(desc);
      return qd.x.dtype == HAL_DTYPE_F32 && dense(qd.q) && dense(qd.x);
    }
    case LowpFault::kQuantizeHalfAway: {
      if (desc->kind != HAL_OP_QUANTIZE) return false;
      const auto& qd = *reinterpret_cast<const hal_op_quantize_desc_t*>(desc);
      return qd.x.dtype == HAL_DTYPE_F32 && qd.q.dtype == HAL_DTYPE_I8 && dense(qd.x) &&
             dense(qd.q) && dense(qd.scale);
    }
  }
  return false;
}

hal_op_kind_t served_kind() {
  switch (g_fault) {
    case LowpFault::kE4m3NanAsNumber:
      return HAL_OP_CAST;
    case LowpFault::kScalePerColumn:
      return HAL_OP_SCALED_MATMUL;
    case LowpFault::kSteOutsideRange:
    case LowpFault::kClipRoundedIgnored:
      return HAL_OP_FAKE_QUANTIZE_BACKWARD;
    case LowpFault::kQuantizeHalfAway:
      return HAL_OP_QUANTIZE;
    case LowpFault::kDequantizeRowBlocksIgnored:
      return HAL_OP_DEQUANTIZE;
  }
  return HAL_OP_MATMUL;
}

hal_result_t op_plan_create(hal_impl_device_t* device, const hal_op_header_t* desc,
                            hal_op_plan_flags_t flags, hal_impl_op_plan_t** out_plan,
                            size_t* out_workspace_bytes, const char** out_implementation) {
  auto plan = std::make_unique<WrappedPlan>(desc);
  if (served(desc)) {
    return fault_op_plan::serve_here(std::move(plan), kServedName, out_plan, out_workspace_bytes,
                                     out_implementation);
  }
  return fault_op_plan::plan_with_real(g_real, std::move(plan), device, desc, flags, out_plan,
                                       out_workspace_bytes, out_implementation);
}

hal_result_t op_plan_destroy(hal_impl_op_plan_t* handle) {
  return fault_op_plan::destroy(g_real, handle);
}

hal_result_t op_execute(hal_impl_op_plan_t* handle, hal_impl_stream_t* stream,
                        const hal_op_exec_args_t* args) {
  const auto* plan = reinterpret_cast<const WrappedPlan*>(handle);
  if (plan->real != nullptr) return g_real->op_execute(plan->real, stream, args);
  return fault_op_plan::enqueue_host(
      g_real, stream, run,
      std::make_unique<Job>(
          Job{plan, std::vector<void*>(args->operands, args->operands + args->operand_count)}));
}

// The faulty op's plans are asked here first, under the fault's name.
const char* op_implementation(hal_impl_device_t* device, hal_op_kind_t kind) {
  if (kind == served_kind()) return kServedName;
  return fault_op_plan::real_implementation(g_real, device, kind);
}

}  // namespace

void plant(hal_plugin_table_v1_t& table, const hal_plugin_table_v1_t* real, LowpFault fault) {
  g_real = real;
  g_fault = fault;
  table.op_plan_create = op_plan_create;
  table.op_plan_destroy = op_plan_destroy;
  table.op_execute = op_execute;
  table.op_implementation = op_implementation;
}

}  // namespace fault_lowp
