// HAL_OP_MATMUL with f16 tensors on a CPU where oneDNN has no f16 matmul
// (oneDNN 2.6's need AVX512-FP16, which no AMD Zen and few Intel CPUs have):
// the operands are widened to f32 into the caller's workspace, the f32
// product runs on oneDNN (dnnl_sgemm or the primitive, with the same
// alpha, beta, bias and activation), and d is rounded back to its dtype.
// f16 to f32 is exact, so this is the f32 product of the same values,
// rounded once at the end; the portable implementation also multiplies f16
// in f32. The conversions cost O(m*k + k*n + m*n) against the product's
// O(m*n*k).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "../thread_pool.hpp"
#include "native_half.hpp"
#include "onednn_matmul.hpp"

namespace hal::cpu::ops {
namespace {

using native::ConstHalfRef;
using native::HalfRef;

// Elements per chunk of a conversion split over the pool.
constexpr uint64_t kConvertGrain = 16384;

// Each f32 tensor in the workspace starts on a cache line.
size_t aligned(size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

int64_t dense_elements(const hal_tensor_desc_t& tensor) {
  int64_t count = 1;
  for (uint32_t i = 0; i < tensor.rank; ++i) count *= tensor.shape[i];
  return count;
}

hal_tensor_desc_t dense_f32(const hal_tensor_desc_t& like) {
  hal_tensor_desc_t tensor = like;
  tensor.dtype = HAL_DTYPE_F32;
  int64_t stride = 1;
  for (uint32_t i = like.rank; i-- > 0;) {
    tensor.strides[i] = stride;
    stride *= like.shape[i];
  }
  return tensor;
}

// One tensor's copy between its own storage (any strides and dtype) and a
// dense f32 tensor of |dense|'s shape in the workspace. A dimension the
// stored tensor has as extent 1 against a larger dense extent (c
// broadcasting over d) is read at index 0.
struct Conversion {
  hal_tensor_desc_t stored{};
  hal_tensor_desc_t dense{};
  size_t offset = 0;  // bytes into the workspace
};

// The stored element offset of the dense tensor's row |row| (all but the
// last dimension, row-major).
int64_t stored_offset(const Conversion& conversion, int64_t row) {
  const uint32_t rank = conversion.dense.rank;
  int64_t offset = 0;
  for (uint32_t i = rank - 1; i-- > 0;) {
    const int64_t extent = conversion.dense.shape[i];
    const int64_t index = row % extent;
    row /= extent;
    if (conversion.stored.shape[i] != 1) offset += index * conversion.stored.strides[i];
  }
  return offset;
}

// Runs |body(row_begin, row_end)| over the dense tensor's rows on the pool.
template <typename Body>
void over_rows(ThreadPool& pool, const Conversion& conversion, const Body& body) {
  const uint32_t rank = conversion.dense.rank;
  const int64_t columns = conversion.dense.shape[rank - 1];
  const int64_t rows = dense_elements(conversion.dense) / std::max<int64_t>(columns, 1);
  const uint64_t grain =
      std::max<uint64_t>(1, kConvertGrain / static_cast<uint64_t>(std::max<int64_t>(columns, 1)));
  const uint64_t chunks = (static_cast<uint64_t>(rows) + grain - 1) / grain;
  struct Context {
    const Body* body;
    uint64_t rows, grain;
  } context{&body, static_cast<uint64_t>(rows), grain};
  pool.parallel_for(
      chunks, 1,
      ParallelTask{[](void* data, uint64_t begin, uint64_t end, uint32_t) {
                     const auto* c = static_cast<const Context*>(data);
                     for (uint64_t k = begin; k < end; ++k) {
                       (*c->body)(static_cast<int64_t>(k * c->grain),
                                  static_cast<int64_t>(std::min((k + 1) * c->grain, c->rows)));
                     }
                   },
                   &context});
}

// The stored tensor at |stored| widened into the dense f32 tensor at |dense|.
void widen(ThreadPool& pool, const Conversion& conversion, const void* stored, float* dense) {
  const uint32_t rank = conversion.dense.rank;
  const int64_t columns = conversion.dense.shape[rank - 1];
  const bool broadcast_columns = conversion.stored.shape[rank - 1] == 1 && columns > 1;
  const int64_t step = broadcast_columns ? 0 : conversion.stored.strides[rank - 1];
  const ConstHalfRef from{stored, conversion.stored.dtype};
  over_rows(pool, conversion, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t at = stored_offset(conversion, row);
      float* to = dense + row * columns;
      if (step == 1) {
        native::to_f32(from, static_cast<size_t>(at), static_cast<size_t>(columns), to);
      } else {
        for (int64_t j = 0; j < columns; ++j)
          native::to_f32(from, static_cast<size_t>(at + j * step), 1, to + j);
      }
    }
  });
}

// The dense f32 tensor at |dense| rounded into the stored tensor at |stored|
// (an output: no dimension broadcasts).
void narrow(ThreadPool& pool, const Conversion& conversion, const float* dense, void* stored) {
  const uint32_t rank = conversion.dense.rank;
  const int64_t columns = conversion.dense.shape[rank - 1];
  const int64_t step = conversion.stored.strides[rank - 1];
  const HalfRef to{stored, conversion.stored.dtype};
  over_rows(pool, conversion, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t at = stored_offset(conversion, row);
      const float* from = dense + row * columns;
      if (step == 1 || columns == 1) {
        native::from_f32(from, to, static_cast<size_t>(at), static_cast<size_t>(columns));
      } else {
        for (int64_t j = 0; j < columns; ++j)
          native::from_f32(from + j, to, static_cast<size_t>(at + j * step), 1);
      }
    }
  });
}

struct WidenedMatmul final : MatmulProduct {
  std::shared_ptr<const MatmulProduct> product;  // the f32 product
  Conversion a, b, d, bias;
  bool reads_c = false, has_bias = false;
  hal_tensor_desc_t c{};      // as stored, with beta != 0
  size_t bytes = 0;           // the workspace
  size_t product_offset = 0;  // the f32 product's own workspace

  void run(ThreadPool& pool, void* a_stored, void* b_stored, const void* c_stored, void* d_stored,
           void* bias_stored, void* workspace) const override {
    auto* base = static_cast<unsigned char*>(aligned_workspace(workspace));
    auto* a32 = reinterpret_cast<float*>(base + a.offset);
    auto* b32 = reinterpret_cast<float*>(base + b.offset);
    auto* d32 = reinterpret_cast<float*>(base + d.offset);
    auto* bias32 = has_bias ? reinterpret_cast<float*>(base + bias.offset) : nullptr;
    widen(pool, a, a_stored, a32);
    widen(pool, b, b_stored, b32);
    // beta * c accumulates into d: c (which may broadcast) widened into d's place.
    if (reads_c) widen(pool, Conversion{c, d.dense, d.offset}, c_stored, d32);
    if (has_bias) widen(pool, bias, bias_stored, bias32);
    product->run(pool, a32, b32, d32, d32, bias32, base + product_offset);
    narrow(pool, d, d32, d_stored);
  }
  size_t workspace_bytes() const override { return bytes; }
};

}  // namespace

std::shared_ptr<const MatmulProduct> plan_widened_product(const hal_op_matmul_desc_t& desc,
                                                          Decline& decline) {
  const uint32_t rank = desc.d.rank;
  if (rank < 2 || desc.a.rank != rank || desc.b.rank != rank || rank > HAL_TENSOR_MAX_RANK) {
    decline.reason = "ranks other than 2.." + std::to_string(HAL_TENSOR_MAX_RANK) +
                     " alike for a, b and d are not served";
    return nullptr;
  }
  auto matmul = std::make_shared<WidenedMatmul>();
  hal_op_matmul_desc_t inner = desc;
  // a and b dense in f32, their logical shapes kept (so the flags mean the
  // same), a batch dimension they broadcast with stride 0 kept as extent 1.
  size_t offset = 0;
  const auto place = [&](Conversion& conversion, const hal_tensor_desc_t& stored,
                         const hal_tensor_desc_t& dense) {
    conversion.stored = stored;
    conversion.dense = dense;
    conversion.offset = offset;
    offset += aligned(static_cast<size_t>(dense_elements(dense)) * sizeof(float));
  };
  for (const bool is_a : {true, false}) {
    const hal_tensor_desc_t& stored = is_a ? desc.a : desc.b;
    hal_tensor_desc_t dense = stored;
    for (uint32_t i = 0; i + 2 < rank; ++i) {
      if (stored.strides[i] == 0) dense.shape[i] = 1;
    }
    dense = dense_f32(dense);
    place(is_a ? matmul->a : matmul->b, stored, dense);
    (is_a ? inner.a : inner.b) = dense;
  }
  inner.d = dense_f32(desc.d);
  place(matmul->d, desc.d, inner.d);
  matmul->reads_c = desc.beta != 0.0f;
  if (matmul->reads_c) {
    if (desc.c.rank != rank) {
      decline.reason = "c of another rank than d is not served";
      return nullptr;
    }
    matmul->c = desc.c;
    inner.c = inner.d;  // c is widened into d's place, where beta * c accumulates
  }
  matmul->has_bias = (desc.flags & HAL_MATMUL_BIAS) != 0;
  if (matmul->has_bias) {
    inner.bias = dense_f32(desc.bias);
    place(matmul->bias, desc.bias, inner.bias);
  }
  matmul->product = plan_onednn_product(inner, decline);
  if (!matmul->product) return nullptr;
  matmul->product_offset = offset;
  matmul->bytes = offset + matmul->product->workspace_bytes() + kWorkspaceAlignment - 1;
  return matmul;
}

}  // namespace hal::cpu::ops
