// The cpu plugin's native operators ("cpu.native"): the elementwise,
// reduction and normalisation-backward ops a training step spends its time
// in, as vectorised loops (native_kernels*.cpp) split over the plugin's
// thread pool. They serve f32 and bf16 tensors in the common layouts (dense
// row-major; broadcasts over any dimensions of extent 1) and decline the rest
// with a reason, which the loader's portable implementation then serves.
//
// Work is split by the shape alone (fixed chunks, each output element
// reduced in a fixed order by one thread), so every plan is deterministic.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../device.hpp"
#include "../stream.hpp"
#include "native_attention.hpp"
#include "native_half.hpp"
#include "native_kernels.hpp"
#include "native_plan.hpp"
#include "ops.hpp"

namespace hal::cpu::ops {
namespace {

using native::ConstRef;
using native::Ref;
using native::Type;

// ---- descriptors ----------------------------------------------------------------------

bool native_type(hal_dtype_t dtype, Type* out) {
  if (dtype == HAL_DTYPE_F32) {
    *out = Type::kF32;
  } else if (dtype == HAL_DTYPE_BF16) {
    *out = Type::kBf16;
  } else {
    return false;
  }
  return true;
}

// Checks that every tensor is a dense f32/bf16 tensor; says which is not.
bool dense_float_tensors(
    std::initializer_list<std::pair<const char*, const hal_tensor_desc_t*>> list,
    std::vector<Type>& types, Decline& decline) {
  for (const auto& [name, tensor] : list) {
    Type type;
    if (!native_type(tensor->dtype, &type)) {
      decline.reason = std::string(name) + " is neither f32 nor bf16";
      return false;
    }
    if (!dense(*tensor)) {
      decline.reason = std::string(name) + " is not dense row-major";
      return false;
    }
    types.push_back(type);
  }
  return true;
}

// f16 operands go to the f16 paths (native_half.cpp), which take any mix of
// f32, bf16 and f16.
bool any_f16(std::initializer_list<const hal_tensor_desc_t*> list) {
  return std::any_of(list.begin(), list.end(), [](const hal_tensor_desc_t* tensor) {
    return tensor->dtype == HAL_DTYPE_F16;
  });
}

bool half_path_dtype(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F32 || dtype == HAL_DTYPE_BF16 || dtype == HAL_DTYPE_F16;
}

// Checks that every tensor is dense f32, bf16 or f16; says which is not.
bool dense_half_path_tensors(
    std::initializer_list<std::pair<const char*, const hal_tensor_desc_t*>> list,
    Decline& decline) {
  for (const auto& [name, tensor] : list) {
    if (!half_path_dtype(tensor->dtype)) {
      decline.reason = std::string(name) + " is none of f32, bf16 and f16";
      return false;
    }
    if (!dense(*tensor)) {
      decline.reason = std::string(name) + " is not dense row-major";
      return false;
    }
  }
  return true;
}

native::ConstHalfRef const_half_ref(const void* data, const hal_tensor_desc_t& tensor) {
  return {data, tensor.dtype};
}
native::HalfRef half_ref(void* data, const hal_tensor_desc_t& tensor) {
  return {data, tensor.dtype};
}

bool f32_dense(const char* name, const hal_tensor_desc_t& tensor, Decline& decline) {
  if (tensor.dtype != HAL_DTYPE_F32 || !dense(tensor)) {
    decline.reason = std::string(name) + " is not a dense f32 tensor";
    return false;
  }
  return true;
}

constexpr uint64_t kColumnGrain = 64;  // columns per chunk of a column reduction

// ---- planners -------------------------------------------------------------------------

// UNARY with an f16 operand (forward: x, out; backward: x, grad_out in
// desc.out, grad_x).
std::unique_ptr<OpPlan> plan_unary_with_f16(const hal_op_unary_desc_t& desc, bool backward,
                                            Decline& decline) {
  const hal_activation_t act = desc.activation;
  const float alpha = desc.alpha;
  const uint64_t count = element_count(desc.x);
  if (!backward) {
    if (!dense_half_path_tensors({{"x", &desc.x}, {"out", &desc.out}}, decline)) return nullptr;
    const hal_tensor_desc_t x = desc.x, out = desc.out;
    return std::make_unique<NativePlan>(
        2, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
          parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
            native::unary_forward_with_f16(act, alpha, const_half_ref(operand[0], x),
                                           half_ref(operand[1], out), begin, end);
          });
        });
  }
  if (!dense_half_path_tensors({{"x", &desc.x}, {"grad_out", &desc.out}, {"grad_x", &desc.grad_x}},
                               decline))
    return nullptr;
  const hal_tensor_desc_t x = desc.x, grad_out = desc.out, grad_x = desc.grad_x;
  return std::make_unique<NativePlan>(
      3, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
        parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
          native::unary_backward_with_f16(act, alpha, const_half_ref(operand[0], x),
                                          const_half_ref(operand[1], grad_out),
                                          half_ref(operand[2], grad_x), begin, end);
        });
      });
}

std::unique_ptr<OpPlan> plan_unary(const hal_op_unary_desc_t& desc, bool backward,
                                   Decline& decline) {
  const hal_activation_t act = desc.activation;
  if (act == HAL_ACTIVATION_GELU_ERF) {
    decline.reason = "GELU_ERF: no vectorised erf here";
    return nullptr;
  }
  if (any_f16({&desc.x, &desc.out}) || (backward && any_f16({&desc.grad_x}))) {
    return plan_unary_with_f16(desc, backward, decline);
  }
  std::vector<Type> types;
  if (!backward) {
    if (!dense_float_tensors({{"x", &desc.x}, {"out", &desc.out}}, types, decline)) return nullptr;
    const uint64_t count = element_count(desc.x);
    const float alpha = desc.alpha;
    return std::make_unique<NativePlan>(
        2, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
          parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
            native::unary_forward(act, alpha, ConstRef{operand[0], types[0]},
                                  Ref{operand[1], types[1]}, begin, end);
          });
        });
  }
  if (!dense_float_tensors({{"x", &desc.x}, {"grad_out", &desc.out}, {"grad_x", &desc.grad_x}},
                           types, decline))
    return nullptr;
  const uint64_t count = element_count(desc.x);
  const float alpha = desc.alpha;
  return std::make_unique<NativePlan>(3, [=](ThreadPool& pool, void* const* operand,
                                             const hal_op_scalar_t*) {
    parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
      native::unary_backward(act, alpha, ConstRef{operand[0], types[0]},
                             ConstRef{operand[1], types[1]}, Ref{operand[2], types[2]}, begin, end);
    });
  });
}

std::unique_ptr<OpPlan> plan_bias_activation_backward(
    const hal_op_bias_activation_backward_desc_t& desc, Decline& decline) {
  const hal_activation_t act = desc.activation;
  if (act == HAL_ACTIVATION_GELU_ERF) {
    decline.reason = "GELU_ERF: no vectorised erf here";
    return nullptr;
  }
  std::vector<Type> types;
  const hal_tensor_desc_t& aux = act == HAL_ACTIVATION_NONE ? desc.grad_out : desc.aux;
  if (!dense_float_tensors(
          {{"grad_out", &desc.grad_out}, {"aux", &aux}, {"grad_pre", &desc.grad_pre}}, types,
          decline))
    return nullptr;
  const bool bias = desc.compute_bias_grad != 0;
  if (bias && !f32_dense("grad_bias", desc.grad_bias, decline)) return nullptr;
  const uint64_t rows = static_cast<uint64_t>(desc.grad_out.shape[0]);
  const uint64_t cols = static_cast<uint64_t>(desc.grad_out.shape[1]);
  return std::make_unique<NativePlan>(
      4, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
        parallel_ranges(pool, cols, kColumnGrain, [&](uint64_t begin, uint64_t end) {
          native::bias_activation_backward(
              act, ConstRef{operand[0], types[0]},
              ConstRef{act == HAL_ACTIVATION_NONE ? operand[0] : operand[1], types[1]},
              Ref{operand[2], types[2]}, bias ? static_cast<float*>(operand[3]) : nullptr, rows,
              cols, begin, end);
        });
      });
}

// How a binary op's inputs are read along out's flat index: any dimension
// of extent 1 broadcasts (leading, middle or trailing: a [rows, 1] row
// scale is the common case). The inputs must be dense; out's dimensions of
// extent 1 are dropped, and neighbours merge while each input either
// broadcasts over both or over neither, so runs are as long as they can be.
bool binary_layout(const hal_op_binary_desc_t& desc, native::BinaryLayout& layout,
                   Decline& decline) {
  const std::pair<const char*, const hal_tensor_desc_t*> inputs[] = {{"a", &desc.a},
                                                                     {"b", &desc.b}};
  uint64_t dense_stride[2][HAL_TENSOR_MAX_RANK];  // each input's own row-major strides
  for (int k = 0; k < 2; ++k) {
    const auto& [name, input] = inputs[k];
    if (!dense(*input)) {
      decline.reason = std::string(name) + " is not dense row-major (a stride-0 broadcast)";
      return false;
    }
    uint64_t stride = 1;
    for (uint32_t d = input->rank; d-- > 0;) {
      dense_stride[k][d] = stride;
      stride *= static_cast<uint64_t>(input->shape[d]);
    }
  }
  layout.rank = 0;
  bool broadcast_before[2] = {};
  for (uint32_t d = 0; d < desc.out.rank; ++d) {
    const auto extent = static_cast<uint64_t>(desc.out.shape[d]);
    if (extent == 1) continue;
    const bool broadcast[2] = {desc.a.shape[d] == 1, desc.b.shape[d] == 1};
    if (layout.rank > 0 && broadcast[0] == broadcast_before[0] &&
        broadcast[1] == broadcast_before[1]) {
      const uint32_t last = layout.rank - 1;  // row-major: the merged stride is the inner one
      layout.extent[last] *= extent;
      layout.stride_a[last] = broadcast[0] ? 0 : dense_stride[0][d];
      layout.stride_b[last] = broadcast[1] ? 0 : dense_stride[1][d];
      continue;
    }
    layout.extent[layout.rank] = extent;
    layout.stride_a[layout.rank] = broadcast[0] ? 0 : dense_stride[0][d];
    layout.stride_b[layout.rank] = broadcast[1] ? 0 : dense_stride[1][d];
    ++layout.rank;
    broadcast_before[0] = broadcast[0];
    broadcast_before[1] = broadcast[1];
  }
  if (layout.rank == 0) layout = native::BinaryLayout{};  // one element
  return true;
}

std::unique_ptr<OpPlan> plan_binary(const hal_op_binary_desc_t& desc, Decline& decline) {
  if (static_cast<uint32_t>(desc.op) > HAL_BINARY_MIN) {
    decline.reason = "cpu.native serves ADD, SUB, MUL, DIV, MAX and MIN";
    return nullptr;
  }
  if (!half_path_dtype(desc.a.dtype) || !half_path_dtype(desc.b.dtype) ||
      !half_path_dtype(desc.out.dtype)) {
    decline.reason = "a dtype other than f32, bf16 and f16";
    return nullptr;
  }
  if (!dense(desc.out)) {
    decline.reason = "out is not dense row-major";
    return nullptr;
  }
  native::BinaryLayout layout;
  if (!binary_layout(desc, layout, decline)) return nullptr;
  const uint64_t count = element_count(desc.out);
  const hal_binary_op_t op = desc.op;
  const float alpha = desc.alpha;
  if (any_f16({&desc.a, &desc.b, &desc.out})) {
    const hal_tensor_desc_t a = desc.a, b = desc.b, out = desc.out;
    return std::make_unique<NativePlan>(
        3, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
          parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
            native::binary_with_f16(op, alpha, const_half_ref(operand[0], a),
                                    const_half_ref(operand[1], b), layout,
                                    half_ref(operand[2], out), begin, end);
          });
        });
  }
  // f32 or bf16 each, from here on.
  Type type_a = Type::kF32, type_b = Type::kF32, type_out = Type::kF32;
  native_type(desc.a.dtype, &type_a);
  native_type(desc.b.dtype, &type_b);
  native_type(desc.out.dtype, &type_out);
  return std::make_unique<NativePlan>(
      3, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
        parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
          native::binary(op, alpha, ConstRef{operand[0], type_a}, ConstRef{operand[1], type_b},
                         layout, Ref{operand[2], type_out}, begin, end);
        });
      });
}

std::unique_ptr<OpPlan> plan_reduce(const hal_op_reduce_desc_t& desc, Decline& decline) {
  if (desc.reduce != HAL_REDUCE_KIND_SUM && desc.reduce != HAL_REDUCE_KIND_MEAN &&
      desc.reduce != HAL_REDUCE_KIND_MAX) {
    decline.reason = "cpu.native reduces SUM, MEAN and MAX";
    return nullptr;
  }
  std::vector<Type> types;
  if (!dense_float_tensors({{"x", &desc.x}, {"out", &desc.out}}, types, decline)) return nullptr;
  const uint32_t rank = desc.x.rank;
  const uint32_t mask = desc.axes_mask;
  const uint32_t reduced = static_cast<uint32_t>(__builtin_popcount(mask));
  if (mask == 0 || mask != (1u << reduced) - 1u) {
    decline.reason = "the reduced axes are not the leading ones (or none)";
    return nullptr;
  }
  uint64_t rows = 1;
  for (uint32_t d = 0; d < reduced; ++d) rows *= static_cast<uint64_t>(desc.x.shape[d]);
  const hal_reduce_kind_t kind = desc.reduce;
  if (reduced < rank || rows == 0) {
    const uint64_t columns = reduced < rank ? element_count(desc.out) : 1;
    return std::make_unique<NativePlan>(
        2, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
          parallel_ranges(pool, columns, kColumnGrain, [&](uint64_t begin, uint64_t end) {
            native::reduce_columns(kind, ConstRef{operand[0], types[0]}, Ref{operand[1], types[1]},
                                   rows, columns, begin, end);
          });
        });
  }
  // Every axis: partial results of fixed chunks, combined in chunk order.
  constexpr uint64_t kChunk = 65536;
  const uint64_t count = rows;
  return std::make_unique<NativePlan>(
      2, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
        const uint64_t chunks = (count + kChunk - 1) / kChunk;
        std::vector<float> partial(chunks);
        const ConstRef x{operand[0], types[0]};
        parallel_ranges(pool, chunks, 1, [&](uint64_t begin, uint64_t end) {
          for (uint64_t c = begin; c < end; ++c) {
            const uint64_t first = c * kChunk, last = std::min(first + kChunk, count);
            partial[c] = kind == HAL_REDUCE_KIND_MAX ? native::max_range(x, first, last)
                                                     : native::sum_range(x, first, last);
          }
        });
        const ConstRef partials{partial.data(), Type::kF32};
        float value = kind == HAL_REDUCE_KIND_MAX ? native::max_range(partials, 0, chunks)
                                                  : native::sum_range(partials, 0, chunks);
        if (kind == HAL_REDUCE_KIND_MEAN) value /= static_cast<float>(count);
        native::convert(ConstRef{&value, Type::kF32}, Ref{operand[1], types[1]}, 1);
      });
}

// Rows and the last extent of a [rows..., n] tensor (rank 0: one row of one).
void rows_and_columns(const hal_tensor_desc_t& tensor, uint64_t* rows, uint64_t* columns) {
  *columns = tensor.rank == 0 ? 1 : static_cast<uint64_t>(tensor.shape[tensor.rank - 1]);
  *rows = 1;
  for (uint32_t d = 0; d + 1 < tensor.rank; ++d) *rows *= static_cast<uint64_t>(tensor.shape[d]);
}

std::unique_ptr<OpPlan> plan_norm(const hal_op_norm_desc_t& desc, Decline& decline) {
  const bool layernorm = desc.norm == HAL_NORM_LAYERNORM;
  std::vector<Type> types;
  if (!dense_float_tensors({{"x", &desc.x}, {"y", &desc.y}}, types, decline)) return nullptr;
  const bool gamma = desc.has_gamma != 0, beta = layernorm && desc.has_beta != 0;
  const bool mean = layernorm && desc.has_mean != 0, rstd = desc.has_rstd != 0;
  if ((gamma && !f32_dense("gamma", desc.gamma, decline)) ||
      (beta && !f32_dense("beta", desc.beta, decline)) ||
      (mean && !f32_dense("mean", desc.mean, decline)) ||
      (rstd && !f32_dense("rstd", desc.rstd, decline)))
    return nullptr;
  uint64_t rows = 0, columns = 0;
  rows_and_columns(desc.x, &rows, &columns);
  const float epsilon = desc.epsilon;
  return std::make_unique<NativePlan>(6, [=](ThreadPool& pool, void* const* operand,
                                             const hal_op_scalar_t*) {
    const uint64_t grain = std::max<uint64_t>(1, kElementGrain / std::max<uint64_t>(columns, 1));
    parallel_ranges(pool, rows, grain, [&](uint64_t begin, uint64_t end) {
      native::norm_rows(layernorm, epsilon, ConstRef{operand[0], types[0]},
                        gamma ? static_cast<const float*>(operand[1]) : nullptr,
                        beta ? static_cast<const float*>(operand[2]) : nullptr,
                        Ref{operand[3], types[1]}, mean ? static_cast<float*>(operand[4]) : nullptr,
                        rstd ? static_cast<float*>(operand[5]) : nullptr, columns, begin, end);
    });
  });
}

std::unique_ptr<OpPlan> plan_softmax(const hal_op_softmax_desc_t& desc, Decline& decline) {
  std::vector<Type> types;
  if (!dense_float_tensors({{"x", &desc.x}, {"y", &desc.y}}, types, decline)) return nullptr;
  uint64_t rows = 0, columns = 0;
  rows_and_columns(desc.x, &rows, &columns);
  const bool log = desc.log != 0;
  // Outputs of 32 MiB and more (beyond the last-level cache of one core
  // complex on the CPUs we measure; sysconf reports the whole socket's) are
  // evicted before anyone reads them: they go around the caches.
  constexpr uint64_t kAroundCachesBytes = uint64_t{32} << 20;
  const bool around_caches = rows * columns * sizeof(float) >= kAroundCachesBytes;
  return std::make_unique<NativePlan>(2, [=](ThreadPool& pool, void* const* operand,
                                             const hal_op_scalar_t*) {
    const uint64_t grain = std::max<uint64_t>(1, kElementGrain / std::max<uint64_t>(columns, 1));
    parallel_ranges(pool, rows, grain, [&](uint64_t begin, uint64_t end) {
      native::softmax_rows(log, ConstRef{operand[0], types[0]}, Ref{operand[1], types[1]}, columns,
                           begin, end, around_caches);
    });
  });
}

std::unique_ptr<OpPlan> plan_softmax_backward(const hal_op_softmax_desc_t& desc, Decline& decline) {
  std::vector<Type> types;  // y, grad_y, grad_x
  if (!dense_float_tensors({{"y", &desc.y}, {"grad_y", &desc.x}, {"grad_x", &desc.grad_x}}, types,
                           decline))
    return nullptr;
  uint64_t rows = 0, columns = 0;
  rows_and_columns(desc.x, &rows, &columns);
  const bool log = desc.log != 0;
  return std::make_unique<NativePlan>(3, [=](ThreadPool& pool, void* const* operand,
                                             const hal_op_scalar_t*) {
    const uint64_t grain = std::max<uint64_t>(1, kElementGrain / std::max<uint64_t>(columns, 1));
    parallel_ranges(pool, rows, grain, [&](uint64_t begin, uint64_t end) {
      native::softmax_backward_rows(log, ConstRef{operand[0], types[0]},
                                    ConstRef{operand[1], types[1]}, Ref{operand[2], types[2]},
                                    columns, begin, end);
    });
  });
}

std::unique_ptr<OpPlan> plan_norm_backward(const hal_op_norm_desc_t& desc, Decline& decline) {
  const bool layernorm = desc.norm == HAL_NORM_LAYERNORM;
  if (!f32_dense("x", desc.x, decline) || !f32_dense("grad_y", desc.grad_y, decline) ||
      !f32_dense("grad_x", desc.grad_x, decline) || !f32_dense("rstd", desc.rstd, decline) ||
      (layernorm && !f32_dense("mean", desc.mean, decline)) ||
      (desc.has_gamma && !f32_dense("gamma", desc.gamma, decline)) ||
      (desc.has_grad_gamma && !f32_dense("grad_gamma", desc.grad_gamma, decline)) ||
      (desc.has_grad_beta && !f32_dense("grad_beta", desc.grad_beta, decline)))
    return nullptr;
  const uint64_t cols = desc.x.rank == 0 ? 1 : static_cast<uint64_t>(desc.x.shape[desc.x.rank - 1]);
  const uint64_t rows = cols == 0 ? 0 : element_count(desc.x) / cols;
  const bool has_gamma = desc.has_gamma != 0;
  const bool grad_gamma = desc.has_grad_gamma != 0, grad_beta = desc.has_grad_beta != 0;
  return std::make_unique<NativePlan>(8, [=](ThreadPool& pool, void* const* operand,
                                             const hal_op_scalar_t*) {
    const auto* x = static_cast<const float*>(operand[0]);
    const auto* gamma = has_gamma ? static_cast<const float*>(operand[1]) : nullptr;
    const auto* mean = layernorm ? static_cast<const float*>(operand[2]) : nullptr;
    const auto* rstd = static_cast<const float*>(operand[3]);
    const auto* dy = static_cast<const float*>(operand[4]);
    auto* dx = static_cast<float*>(operand[5]);
    auto* dgamma = grad_gamma ? static_cast<float*>(operand[6]) : nullptr;
    auto* dbeta = grad_beta ? static_cast<float*>(operand[7]) : nullptr;
    // Column sums first: grad_x may overwrite grad_y.
    if (dgamma != nullptr || dbeta != nullptr) {
      if (rows == 0) {
        for (uint64_t j = 0; j < cols; ++j) {
          if (dgamma) dgamma[j] = 0.0f;
          if (dbeta) dbeta[j] = 0.0f;
        }
      }
      parallel_ranges(pool, rows == 0 ? 0 : cols, kColumnGrain, [&](uint64_t begin, uint64_t end) {
        native::norm_backward_columns(layernorm, x, mean, rstd, dy, dgamma, dbeta, rows, cols,
                                      begin, end);
      });
    }
    const uint64_t row_grain = std::max<uint64_t>(1, kElementGrain / std::max<uint64_t>(cols, 1));
    parallel_ranges(pool, rows, row_grain, [&](uint64_t begin, uint64_t end) {
      native::norm_backward_rows(layernorm, x, gamma, mean, rstd, dy, dx, cols, begin, end);
    });
  });
}

std::unique_ptr<OpPlan> plan_cast(const hal_op_cast_desc_t& desc, Decline& decline) {
  Type type_in, type_out;
  if (!native_type(desc.in.dtype, &type_in) || !native_type(desc.out.dtype, &type_out)) {
    decline.reason = "a dtype other than f32 and bf16";
    return nullptr;
  }
  const uint32_t rank = desc.in.rank;
  if (rank == 0 || desc.in.strides[rank - 1] != 1 || desc.out.strides[rank - 1] != 1) {
    decline.reason = "the last dimension is not contiguous in both tensors";
    return nullptr;
  }
  const hal_tensor_desc_t in = desc.in, result = desc.out;
  const uint64_t inner = static_cast<uint64_t>(in.shape[rank - 1]);
  const uint64_t outer = inner == 0 ? 0 : element_count(in) / inner;
  const size_t in_bytes = type_in == Type::kF32 ? 4 : 2, out_bytes = type_out == Type::kF32 ? 4 : 2;
  return std::make_unique<NativePlan>(
      2, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
        const auto* source = static_cast<const char*>(operand[0]);
        auto* target = static_cast<char*>(operand[1]);
        const uint64_t grain = std::max<uint64_t>(1, kElementGrain / std::max<uint64_t>(inner, 1));
        parallel_ranges(pool, outer, grain, [&](uint64_t begin, uint64_t end) {
          for (uint64_t row = begin; row < end; ++row) {
            // The row's offsets in both tensors, from its index over the outer dimensions.
            int64_t in_offset = 0, out_offset = 0;
            uint64_t rest = row;
            for (uint32_t d = rank - 1; d-- > 0;) {
              const int64_t index = static_cast<int64_t>(rest % static_cast<uint64_t>(in.shape[d]));
              rest /= static_cast<uint64_t>(in.shape[d]);
              in_offset += index * in.strides[d];
              out_offset += index * result.strides[d];
            }
            native::convert(ConstRef{source + in_offset * static_cast<int64_t>(in_bytes), type_in},
                            Ref{target + out_offset * static_cast<int64_t>(out_bytes), type_out},
                            inner);
          }
        });
      });
}

// A [batch, seq, heads, dim] operand as the attention loops read it; false
// when its head dimension is not contiguous or its type not f32/bf16.
bool heads_view(const char* name, const hal_tensor_desc_t& tensor, native::HeadsView* view,
                Decline& decline) {
  if (!native_type(tensor.dtype, &view->type)) {
    decline.reason = std::string(name) + " is neither f32 nor bf16";
    return false;
  }
  if (tensor.shape[3] > 1 && tensor.strides[3] != 1) {
    decline.reason = std::string(name) + "'s head dimension is not contiguous";
    return false;
  }
  view->data = nullptr;
  for (int d = 0; d < 3; ++d) view->stride[d] = tensor.strides[d];
  return true;
}

std::unique_ptr<OpPlan> plan_adamw(const hal_op_adamw_desc_t& desc, Decline& decline) {
  Type param_type, grad_type;
  if (!native_type(desc.param_dtype, &param_type) || !native_type(desc.grad_dtype, &grad_type)) {
    decline.reason = "param or grad is neither f32 nor bf16";
    return nullptr;
  }
  // Work items: fixed chunks of each tensor, so the norm's order depends on
  // the sizes alone.
  struct Chunk {
    uint32_t tensor;
    uint64_t begin, end;
  };
  constexpr uint64_t kChunk = 32768;
  std::vector<Chunk> chunks;
  for (uint32_t t = 0; t < desc.tensor_count; ++t) {
    const uint64_t n = static_cast<uint64_t>(desc.numels[t]);
    for (uint64_t begin = 0; begin < n; begin += kChunk) {
      chunks.push_back({t, begin, std::min(begin + kChunk, n)});
    }
  }
  const bool has_master = desc.has_master != 0, has_grad_norm = desc.has_grad_norm != 0;
  const bool clip = desc.max_grad_norm > 0.0f;
  const float beta1 = desc.beta1, beta2 = desc.beta2, epsilon = desc.epsilon;
  const float weight_decay = desc.weight_decay, max_grad_norm = desc.max_grad_norm;
  const uint32_t operands = 1 + 5 * desc.tensor_count;
  auto body = [=, chunks = std::move(chunks)](ThreadPool& pool, void* const* operand,
                                              const hal_op_scalar_t* scalar) {
    auto tensor = [&](const Chunk& chunk, uint32_t which) {
      return operand[1 + 5 * chunk.tensor + which];
    };
    native::AdamwStep step{};
    step.clip = 1.0f;
    if (clip || has_grad_norm) {
      std::vector<double> partial(chunks.size());
      parallel_items(pool, chunks.size(), [&](uint64_t k, uint32_t) {
        partial[k] = native::sum_squares(ConstRef{tensor(chunks[k], 1), grad_type}, chunks[k].begin,
                                         chunks[k].end);
      });
      double sum = 0.0;
      for (double p : partial) sum += p;
      const float norm = static_cast<float>(std::sqrt(sum));
      if (has_grad_norm) *static_cast<float*>(operand[0]) = norm;
      if (clip) step.clip = std::min(1.0f, max_grad_norm / (norm + 1e-6f));
    }
    const double t = static_cast<double>(scalar[1].i64);
    step.beta1 = beta1;
    step.beta2 = beta2;
    step.epsilon = epsilon;
    step.weight_decay = weight_decay;
    step.lr = static_cast<float>(scalar[0].f64);
    step.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
    step.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t));
    parallel_items(pool, chunks.size(), [&](uint64_t k, uint32_t) {
      const Chunk& chunk = chunks[k];
      native::adamw_update(step, ConstRef{tensor(chunk, 1), grad_type},
                           static_cast<float*>(tensor(chunk, 2)),
                           static_cast<float*>(tensor(chunk, 3)),
                           has_master ? static_cast<float*>(tensor(chunk, 4)) : nullptr,
                           Ref{tensor(chunk, 0), param_type}, chunk.begin, chunk.end);
    });
  };
  return std::make_unique<NativePlan>(operands, std::move(body), 2);
}

size_t type_bytes(Type type) {
  return type == Type::kF32 ? 4 : 2;
}
ConstRef const_row_of(const void* base, Type type, uint64_t row, uint64_t width) {
  return ConstRef{static_cast<const char*>(base) + row * width * type_bytes(type), type};
}
Ref row_of(void* base, Type type, uint64_t row, uint64_t width) {
  return Ref{static_cast<char*>(base) + row * width * type_bytes(type), type};
}

bool dense_labels(const char* name, const hal_tensor_desc_t& tensor, Decline& decline) {
  if ((tensor.dtype != HAL_DTYPE_I32 && tensor.dtype != HAL_DTYPE_I64) || !dense(tensor)) {
    decline.reason = std::string(name) + " is not a dense i32 or i64 tensor";
    return false;
  }
  return true;
}

std::unique_ptr<OpPlan> plan_cross_entropy(const hal_op_cross_entropy_desc_t& desc,
                                           Decline& decline) {
  const bool grad = desc.has_grad != 0, row_losses = desc.has_row_losses != 0;
  std::vector<Type> types;
  if (!dense_float_tensors({{"logits", &desc.logits}}, types, decline) ||
      (grad && !dense_float_tensors({{"grad_logits", &desc.grad_logits}}, types, decline)) ||
      !dense_labels("labels", desc.labels, decline) ||
      (row_losses && !f32_dense("row_losses", desc.row_losses, decline)))
    return nullptr;
  const uint64_t rows = static_cast<uint64_t>(desc.logits.shape[0]);
  const uint64_t classes = static_cast<uint64_t>(desc.logits.shape[1]);
  const bool labels_i64 = desc.labels.dtype == HAL_DTYPE_I64;
  const int64_t ignore_index = desc.ignore_index;
  const float smoothing = desc.label_smoothing;
  return std::make_unique<NativePlan>(
      5,
      [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t* scalar) {
        std::vector<float> loss(rows), lse(rows);
        std::vector<native::LabelState> state(rows);
        const uint64_t grain =
            std::max<uint64_t>(1, kElementGrain / std::max<uint64_t>(classes, 1));
        parallel_ranges(pool, rows, grain, [&](uint64_t begin, uint64_t end) {
          native::cross_entropy_rows(ConstRef{operand[0], types[0]}, operand[1], labels_i64,
                                     ignore_index, smoothing, classes, loss.data(), lse.data(),
                                     state.data(), begin, end);
        });
        // The mean over the counted rows, summed in row order (fixed: deterministic) in f64:
        // an f32 sum's error grows with the rows (7.6e-7 relative over 1024).
        uint64_t counted = 0;
        double total = 0.0;
        for (uint64_t r = 0; r < rows; ++r) {
          if (state[r] == native::LabelState::kIgnored) continue;
          ++counted;
          total += loss[r];
        }
        *static_cast<float*>(operand[2]) =
            counted > 0 ? static_cast<float>(total / static_cast<double>(counted)) : 0.0f;
        if (row_losses) std::copy(loss.begin(), loss.end(), static_cast<float*>(operand[3]));
        if (!grad) return;
        const float scale =
            counted > 0 ? static_cast<float>(scalar[0].f64) / static_cast<float>(counted) : 0.0f;
        parallel_ranges(pool, rows, grain, [&](uint64_t begin, uint64_t end) {
          native::cross_entropy_grad_rows(ConstRef{operand[0], types[0]}, operand[1], labels_i64,
                                          smoothing, classes, lse.data(), state.data(), scale,
                                          Ref{operand[4], types[1]}, begin, end);
        });
      },
      1);
}

// sum[0, width) += row (f32 or bf16, widened exactly) in the vectorised
// binary kernel: alpha 1 keeps every bit of sum + row, so the sums are the
// scalar loop's.
void add_row(ConstRef row, float* sum, uint64_t width) {
  if (width == 0) return;  // the layout's extents must not be 0
  native::BinaryLayout layout;
  layout.extent[0] = width;
  native::binary(HAL_BINARY_ADD, 1.0f, ConstRef{sum, Type::kF32}, row, layout, Ref{sum, Type::kF32},
                 0, width);
}

std::unique_ptr<OpPlan> plan_embedding(const hal_op_embedding_desc_t& desc, bool backward,
                                       Decline& decline) {
  std::vector<Type> types;  // table (or grad_table), out (or grad_out)
  if (!dense_labels("ids", desc.ids, decline) ||
      !dense_float_tensors({{backward ? "grad_table" : "table", &desc.table},
                            {backward ? "grad_out" : "out", &desc.out}},
                           types, decline))
    return nullptr;
  const uint64_t ids = element_count(desc.ids);
  const uint64_t vocab = static_cast<uint64_t>(desc.table.shape[0]);
  const uint64_t width = static_cast<uint64_t>(desc.table.shape[1]);
  const bool ids_i64 = desc.ids.dtype == HAL_DTYPE_I64;
  if (!backward) {
    return std::make_unique<NativePlan>(3, [=](ThreadPool& pool, void* const* operand,
                                               const hal_op_scalar_t*) {
      const uint64_t grain = std::max<uint64_t>(1, kElementGrain / std::max<uint64_t>(width, 1));
      parallel_ranges(pool, ids, grain, [&](uint64_t begin, uint64_t end) {
        for (uint64_t i = begin; i < end; ++i) {
          const int64_t id = native::index_at(operand[0], ids_i64, i);
          Ref out = row_of(operand[2], types[1], i, width);
          if (id < 0 || static_cast<uint64_t>(id) >= vocab) {
            std::memset(out.data, 0, width * type_bytes(out.type));  // +0 in f32 and bf16
          } else {
            native::convert(const_row_of(operand[1], types[0], static_cast<uint64_t>(id), width),
                            out, width);
          }
        }
      });
    });
  }
  const bool accumulate = desc.accumulate != 0;
  return std::make_unique<NativePlan>(
      3, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
        // A stable counting sort of the rows by id (SPEC's order: each id's rows
        // in increasing index), then one sum per vocabulary row: no atomics.
        std::vector<uint64_t> starts(vocab + 1, 0), sorted;
        for (uint64_t i = 0; i < ids; ++i) {
          const int64_t id = native::index_at(operand[0], ids_i64, i);
          if (id >= 0 && static_cast<uint64_t>(id) < vocab) ++starts[static_cast<uint64_t>(id) + 1];
        }
        for (uint64_t v = 0; v < vocab; ++v) starts[v + 1] += starts[v];
        sorted.resize(starts[vocab]);
        std::vector<uint64_t> cursor(starts.begin(), starts.end() - 1);
        for (uint64_t i = 0; i < ids; ++i) {
          // ids are device data read twice: a value changed in between must not
          // write past its bucket.
          const int64_t id = native::index_at(operand[0], ids_i64, i);
          if (id >= 0 && static_cast<uint64_t>(id) < vocab &&
              cursor[static_cast<uint64_t>(id)] < starts[static_cast<uint64_t>(id) + 1])
            sorted[cursor[static_cast<uint64_t>(id)]++] = i;
        }
        const uint64_t grain = std::max<uint64_t>(1, kElementGrain / std::max<uint64_t>(width, 1));
        const uint64_t chunks = (vocab + grain - 1) / grain;
        // Scratch per worker, allocated here: an item never allocates.
        std::vector<float> scratch((pool.workers() + 1) * width);
        parallel_items(pool, chunks, [&](uint64_t chunk, uint32_t worker) {
          float* sum = scratch.data() + worker * width;
          const uint64_t begin = chunk * grain, end = std::min(vocab, begin + grain);
          for (uint64_t v = begin; v < end; ++v) {
            Ref target = row_of(operand[2], types[0], v, width);
            if (starts[v] == starts[v + 1]) {
              if (!accumulate) std::memset(target.data, 0, width * type_bytes(target.type));
              continue;
            }
            std::fill(sum, sum + width, 0.0f);
            for (uint64_t k = starts[v]; k < starts[v + 1]; ++k)
              add_row(const_row_of(operand[1], types[1], sorted[k], width), sum, width);
            if (accumulate) add_row(ConstRef{target.data, target.type}, sum, width);
            native::convert(ConstRef{sum, Type::kF32}, target, width);
          }
        });
      });
}

// |planned| with the execution's operands (ops.h's attention operand order).
native::Attention bind_attention(const native::Attention& planned, void* const* operand,
                                 bool backward) {
  native::Attention a = planned;
  a.q.data = operand[0];
  a.k.data = operand[1];
  a.v.data = operand[2];
  a.out.data = operand[3];
  a.lse.data = static_cast<float*>(operand[4]);
  if (backward) {
    a.grad_out.data = operand[8];
    a.grad_q.data = operand[9];
    a.grad_k.data = operand[10];
    a.grad_v.data = operand[11];
  }
  return a;
}

// Varlen: cu_seqlens (device data, untrusted) read clamped as SPEC §17.6
// says: cu'[0] = clamp(cu[0], 0, rows), cu'[b] = clamp(cu[b], cu'[b-1], rows).
std::vector<int64_t> sequence_starts(const void* cu_seqlens, int64_t batch, int64_t rows) {
  const auto* cu = static_cast<const int32_t*>(cu_seqlens);
  std::vector<int64_t> starts(static_cast<size_t>(batch + 1));
  int64_t previous = 0;
  for (int64_t b = 0; b <= batch; ++b) {
    previous = std::clamp<int64_t>(cu[b], previous, rows);
    starts[static_cast<size_t>(b)] = previous;
  }
  return starts;
}

int64_t longest(const std::vector<int64_t>& starts) {
  int64_t most = 0;
  for (size_t b = 0; b + 1 < starts.size(); ++b) most = std::max(most, starts[b + 1] - starts[b]);
  return most;
}

std::unique_ptr<OpPlan> plan_attention(const hal_op_attention_desc_t& desc, bool backward,
                                       Decline& decline) {
  if (desc.sparsity != HAL_ATTENTION_DENSE && desc.block_k % native::kAttentionBlockKeys != 0) {
    decline.reason =
        "block-sparse attention with block_k not a multiple of 64 (the packed key "
        "block) is left to the portable implementation";
    return nullptr;
  }
  native::Attention attention{};
  if (!heads_view("q", desc.q, &attention.q, decline) ||
      !heads_view("k", desc.k, &attention.k, decline) ||
      !heads_view("v", desc.v, &attention.v, decline) ||
      !heads_view("out", desc.out, &attention.out, decline))
    return nullptr;
  if (backward && (!heads_view("grad_out", desc.grad_out, &attention.grad_out, decline) ||
                   !heads_view("grad_q", desc.grad_q, &attention.grad_q, decline) ||
                   !heads_view("grad_k", desc.grad_k, &attention.grad_k, decline) ||
                   !heads_view("grad_v", desc.grad_v, &attention.grad_v, decline)))
    return nullptr;
  const bool varlen = desc.has_cu_seqlens != 0;
  for (int d = 0; d < 3; ++d) attention.lse.stride[d] = desc.lse.strides[d];
  // Varlen: batch counts sequences, s_q and s_k are the packed row counts.
  attention.batch = varlen ? int64_t{desc.batch} : desc.q.shape[0];
  attention.s_q = desc.q.shape[1];
  attention.s_k = desc.k.shape[1];
  attention.heads = desc.q.shape[2];
  attention.kv_heads = desc.k.shape[2];
  attention.dim = desc.q.shape[3];
  attention.scale =
      desc.scale != 0.0f ? desc.scale : 1.0f / std::sqrt(static_cast<float>(attention.dim));
  attention.causal = desc.causal;
  const hal_attention_sparsity_t sparsity = desc.sparsity;
  const int64_t topk = desc.topk;
  if (sparsity != HAL_ATTENTION_DENSE) {
    native::BlockVisibility& blocks = attention.blocks;
    blocks.block_q = desc.block_q;
    blocks.block_k = desc.block_k;
    const int64_t s_q = varlen ? int64_t{desc.max_seqlen_q} : attention.s_q;
    const int64_t s_k = varlen ? int64_t{desc.max_seqlen_k} : attention.s_k;
    blocks.q_blocks = (s_q + blocks.block_q - 1) / blocks.block_q;
    blocks.k_blocks = (s_k + blocks.block_k - 1) / blocks.block_k;
    // Block indices become a byte mask per execution: bounded, so a huge
    // sparse problem is declined rather than failing the stream.
    constexpr int64_t kMaxExpandedMask = int64_t{64} << 20;
    const double expanded =
        static_cast<double>(attention.batch) * static_cast<double>(attention.heads) *
        static_cast<double>(blocks.q_blocks) * static_cast<double>(blocks.k_blocks);
    if (sparsity == HAL_ATTENTION_BLOCK_INDICES &&
        expanded > static_cast<double>(kMaxExpandedMask)) {
      decline.reason =
          "block indices would expand to a mask of more than 64 MiB (batch x heads x query "
          "blocks x key blocks); left to the portable implementation";
      return nullptr;
    }
  }
  // The execution's block visibility: the mask operand itself, or the block
  // indices expanded into |expanded| (per execution: the indices are device
  // data, read when the execution runs).
  const auto bind_blocks = [sparsity, topk](native::Attention& a, void* const* operand,
                                            std::vector<uint8_t>& expanded) {
    if (sparsity == HAL_ATTENTION_BLOCK_MASK) {
      a.blocks.mask = static_cast<const uint8_t*>(operand[7]);
    } else if (sparsity == HAL_ATTENTION_BLOCK_INDICES) {
      const int64_t rows = a.batch * a.heads * a.blocks.q_blocks;
      expanded.assign(static_cast<size_t>(rows * a.blocks.k_blocks), 0);
      const auto* indices = static_cast<const int32_t*>(operand[7]);
      for (int64_t row = 0; row < rows; ++row) {
        for (int64_t t = 0; t < topk; ++t) {
          const int32_t index = indices[row * topk + t];  // -1, or outside: not computed
          if (index >= 0 && index < a.blocks.k_blocks)
            expanded[static_cast<size_t>(row * a.blocks.k_blocks + index)] = 1;
        }
      }
      a.blocks.mask = expanded.data();
    }
  };
  // The sequences an execution works on: one per batch entry, or (varlen)
  // the clamped cu_seqlens ranges of the packed rows.
  struct Sequences {
    std::vector<int64_t> q, k;  // varlen: starts, batch + 1 each
    int64_t longest_q = 0;
  };
  const auto sequences_of = [varlen](const native::Attention& a, void* const* operand) {
    Sequences seqs;
    if (varlen) {
      seqs.q = sequence_starts(operand[5], a.batch, a.s_q);
      seqs.k = sequence_starts(operand[6], a.batch, a.s_k);
      seqs.longest_q = longest(seqs.q);
    } else {
      seqs.longest_q = a.s_q;
    }
    return seqs;
  };
  // Sequence |b| as the loops see it: itself (batch index b) or a view.
  const auto sequence = [varlen](const native::Attention& a, const Sequences& seqs, int64_t b,
                                 int64_t* index) {
    if (!varlen) {
      *index = b;
      return a;
    }
    *index = 0;
    const size_t at = static_cast<size_t>(b);
    return native::sequence_view(a, b, seqs.q[at], seqs.q[at + 1] - seqs.q[at], seqs.k[at],
                                 seqs.k[at + 1] - seqs.k[at]);
  };
  if (!backward) {
    return std::make_unique<NativePlan>(
        8, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
          native::Attention a = bind_attention(attention, operand, false);
          std::vector<uint8_t> expanded;
          bind_blocks(a, operand, expanded);
          const Sequences seqs = sequences_of(a, operand);
          if (varlen) {  // rows outside every sequence: out 0, lse -inf
            native::clear_query_rows(a, false, 0, seqs.q.front());
            native::clear_query_rows(a, false, seqs.q.back(), a.s_q);
          }
          // Scratch per worker, allocated here (a failure is the execution's
          // error) rather than in the items.
          std::vector<native::AttentionScratch> scratch(pool.workers() + 1);
          for (native::AttentionScratch& s : scratch) native::prepare_forward(a, s);
          // Items: (sequence, head, block of query rows), the blocks of a
          // head adjacent so that threads share its keys in cache.
          const int64_t blocks =
              (seqs.longest_q + native::kAttentionRowsPerItem - 1) / native::kAttentionRowsPerItem;
          const uint64_t items = static_cast<uint64_t>(a.batch * a.heads * blocks);
          parallel_items(pool, items, [&](uint64_t item, uint32_t worker) {
            const int64_t block = static_cast<int64_t>(item) % blocks;
            const int64_t head = static_cast<int64_t>(item) / blocks % a.heads;
            int64_t b = static_cast<int64_t>(item) / blocks / a.heads;
            const native::Attention one = sequence(a, seqs, b, &b);
            const int64_t first = block * native::kAttentionRowsPerItem;
            if (first >= one.s_q) return;  // past a shorter sequence's rows
            native::attention_forward(one, b, head, first,
                                      std::min(one.s_q, first + native::kAttentionRowsPerItem),
                                      scratch[worker]);
          });
        });
  }
  // Backward: one work item per query head. With grouped-query heads each
  // item writes its head's share of grad_k and grad_v into the workspace,
  // f32 [key row][head][dim] for each of the two, and a second pass adds a kv
  // head's shares in head order: so a kv head's gradients take as many
  // threads as it has query heads, and still no sum crosses threads.
  const int64_t group = attention.heads / attention.kv_heads;
  const int64_t key_rows = desc.k.shape[0] * desc.k.shape[1];  // varlen: the packed rows
  const double partial_floats = group > 1 ? 2.0 * static_cast<double>(key_rows) *
                                                static_cast<double>(attention.heads) *
                                                static_cast<double>(attention.dim)
                                          : 0.0;
  constexpr double kMaxPartialFloats = static_cast<double>(int64_t{1} << 40);
  if (partial_floats > kMaxPartialFloats) {
    decline.reason =
        "grouped-query backward would need more than 4 TiB of workspace for its per-head "
        "grad_k and grad_v; left to the portable implementation";
    return nullptr;
  }
  const int64_t partial_stride = attention.heads * attention.dim;  // floats per key row
  const size_t workspace_bytes =
      group > 1 ? static_cast<size_t>(partial_floats) * sizeof(float) + kWorkspaceAlignment - 1 : 0;
  return std::make_unique<NativePlan>(
      12, workspace_bytes,
      [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*, void* workspace) {
        native::Attention a = bind_attention(attention, operand, true);
        std::vector<uint8_t> expanded;
        bind_blocks(a, operand, expanded);
        const Sequences seqs = sequences_of(a, operand);
        if (varlen) {  // rows outside every sequence: zero gradients
          native::clear_query_rows(a, true, 0, seqs.q.front());
          native::clear_query_rows(a, true, seqs.q.back(), a.s_q);
          native::clear_key_rows(a, 0, seqs.k.front());
          native::clear_key_rows(a, seqs.k.back(), a.s_k);
        }
        native::Attention widest = a;  // scratch for the longest sequence
        widest.s_q = seqs.longest_q;
        std::vector<native::AttentionScratch> scratch(pool.workers() + 1);
        for (native::AttentionScratch& s : scratch) native::prepare_backward(widest, s);
        // Query head |head| of sequence |sequence_index|'s partials (none
        // without grouped-query heads): their key row 0 is the sequence's first.
        auto* partial_k = group > 1 ? static_cast<float*>(aligned_workspace(workspace)) : nullptr;
        float* partial_v = group > 1 ? partial_k + key_rows * partial_stride : nullptr;
        const auto partials_of = [&](int64_t sequence_index, int64_t head) {
          native::KvPartials partials;
          if (group == 1) return partials;
          const int64_t first_row =
              varlen ? seqs.k[static_cast<size_t>(sequence_index)] : sequence_index * a.s_k;
          const int64_t offset = first_row * partial_stride + head * a.dim;
          partials.grad_k = partial_k + offset;
          partials.grad_v = partial_v + offset;
          partials.row_stride = partial_stride;
          return partials;
        };
        parallel_items(pool, static_cast<uint64_t>(a.batch * a.heads),
                       [&](uint64_t item, uint32_t worker) {
                         const int64_t head = static_cast<int64_t>(item) % a.heads;
                         const int64_t sequence_index = static_cast<int64_t>(item) / a.heads;
                         int64_t b = sequence_index;
                         const native::Attention one = sequence(a, seqs, sequence_index, &b);
                         native::attention_backward(one, b, head, partials_of(sequence_index, head),
                                                    scratch[worker]);
                       });
        if (group == 1) return;
        // The kv heads' sums, kReduceRows key rows an item.
        constexpr int64_t kReduceRows = 256;
        const int64_t longest_k = varlen ? longest(seqs.k) : a.s_k;
        const int64_t chunks = (longest_k + kReduceRows - 1) / kReduceRows;
        parallel_items(
            pool, static_cast<uint64_t>(a.batch * a.kv_heads * chunks),
            [&](uint64_t item, uint32_t worker) {
              const int64_t chunk = static_cast<int64_t>(item) % chunks;
              const int64_t kv_head = static_cast<int64_t>(item) / chunks % a.kv_heads;
              const int64_t sequence_index = static_cast<int64_t>(item) / chunks / a.kv_heads;
              int64_t b = sequence_index;
              const native::Attention one = sequence(a, seqs, sequence_index, &b);
              const int64_t begin = chunk * kReduceRows;
              if (begin >= one.s_k) return;  // past a shorter sequence's keys
              native::reduce_grouped_kv(
                  one, b, kv_head, begin, std::min(one.s_k, begin + kReduceRows),
                  partials_of(sequence_index, kv_head * group), scratch[worker].row.data());
            });
      });
}

}  // namespace

std::unique_ptr<OpPlan> plan_native(const hal_op_header_t& header, hal_op_plan_flags_t,
                                    Decline& decline) {
  switch (header.kind) {
    case HAL_OP_UNARY:
    case HAL_OP_UNARY_BACKWARD:
      return plan_unary(reinterpret_cast<const hal_op_unary_desc_t&>(header),
                        header.kind == HAL_OP_UNARY_BACKWARD, decline);
    case HAL_OP_BIAS_ACTIVATION_BACKWARD:
      return plan_bias_activation_backward(
          reinterpret_cast<const hal_op_bias_activation_backward_desc_t&>(header), decline);
    case HAL_OP_BINARY:
      return plan_binary(reinterpret_cast<const hal_op_binary_desc_t&>(header), decline);
    case HAL_OP_REDUCE:
      return plan_reduce(reinterpret_cast<const hal_op_reduce_desc_t&>(header), decline);
    case HAL_OP_NORM:
      return plan_norm(reinterpret_cast<const hal_op_norm_desc_t&>(header), decline);
    case HAL_OP_SOFTMAX:
      return plan_softmax(reinterpret_cast<const hal_op_softmax_desc_t&>(header), decline);
    case HAL_OP_SOFTMAX_BACKWARD:
      return plan_softmax_backward(reinterpret_cast<const hal_op_softmax_desc_t&>(header), decline);
    case HAL_OP_NORM_BACKWARD:
      return plan_norm_backward(reinterpret_cast<const hal_op_norm_desc_t&>(header), decline);
    case HAL_OP_CROSS_ENTROPY:
      return plan_cross_entropy(reinterpret_cast<const hal_op_cross_entropy_desc_t&>(header),
                                decline);
    case HAL_OP_EMBEDDING:
    case HAL_OP_EMBEDDING_BACKWARD:
      return plan_embedding(reinterpret_cast<const hal_op_embedding_desc_t&>(header),
                            header.kind == HAL_OP_EMBEDDING_BACKWARD, decline);
    case HAL_OP_CAST:
      return plan_cast(reinterpret_cast<const hal_op_cast_desc_t&>(header), decline);
    case HAL_OP_ADAMW:
      return plan_adamw(reinterpret_cast<const hal_op_adamw_desc_t&>(header), decline);
    case HAL_OP_ATTENTION:
    case HAL_OP_ATTENTION_BACKWARD:
      return plan_attention(reinterpret_cast<const hal_op_attention_desc_t&>(header),
                            header.kind == HAL_OP_ATTENTION_BACKWARD, decline);
    case HAL_OP_UNARY_MATH:
    case HAL_OP_BINARY_SCALAR:
    case HAL_OP_WHERE:
    case HAL_OP_CLAMP:
    case HAL_OP_FILL:
    case HAL_OP_CAT:
      return plan_native_math(header, decline);
    case HAL_OP_PAGED_KV_APPEND:
    case HAL_OP_PAGED_ATTENTION:
      return plan_paged(header, decline);
    case HAL_OP_QUANTIZE:
    case HAL_OP_DEQUANTIZE:
    case HAL_OP_SCALED_MATMUL:
      return plan_native_lowp(header, decline);
    default:
      decline.reason =
          "cpu.native serves unary, bias-activation backward, binary, reduce, softmax and "
          "norm and their backward, cast, AdamW, attention, cross-entropy, embedding, and "
          "unary math, binary with a scalar, where, clamp, fill and cat, the paged KV cache, and "
          "the scaled matmul, quantize and dequantize";
      return nullptr;
  }
}

}  // namespace hal::cpu::ops
