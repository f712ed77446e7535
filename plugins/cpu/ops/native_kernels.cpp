// The elementwise family of the native loops: BINARY over broadcast layouts,
// and conversions between element types.
#include "native_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "native_kernels_shared.hpp"

namespace hal::cpu::ops::native {
namespace {

inline float apply(hal_binary_op_t op, float a, float b) {
  switch (op) {
    case HAL_BINARY_ADD:
      return a + b;
    case HAL_BINARY_SUB:
      return a - b;
    case HAL_BINARY_MUL:
      return a * b;
    case HAL_BINARY_DIV:
      return a / b;
    case HAL_BINARY_MAX:
      return nan_max(a, b);
    default:
      return nan_min(a, b);
  }
}

// The loops of one (TA, TB, O) over |layout|'s runs, |kOp| a constant so
// that each run shape vectorises.
template <typename TA, typename TB, typename O, hal_binary_op_t kOp>
inline void binary_runs(float alpha, ConstRef a, ConstRef b, const BinaryLayout& layout, Ref result,
                        size_t begin, size_t end) {
  const auto* pa = in<TA>(a);
  const auto* pb = in<TB>(b);
  auto* po = out<O>(result);
  const uint32_t inner = layout.rank - 1;
  const bool a_runs = layout.stride_a[inner] != 0, b_runs = layout.stride_b[inner] != 0;
  for_each_binary_run(layout, begin, end, [&](size_t at_a, size_t at_b, size_t i, size_t n) {
    const auto* ra = pa + at_a;
    const auto* rb = pb + at_b;
    auto* ro = po + i;
    if (a_runs && b_runs) {
      for (size_t k = 0; k < n; ++k)
        ro[k] = O::store(alpha * apply(kOp, TA::load(ra[k]), TB::load(rb[k])));
    } else if (a_runs) {  // b one value along the run: a row scale, say
      const float vb = TB::load(rb[0]);
      for (size_t k = 0; k < n; ++k) ro[k] = O::store(alpha * apply(kOp, TA::load(ra[k]), vb));
    } else if (b_runs) {
      const float va = TA::load(ra[0]);
      for (size_t k = 0; k < n; ++k) ro[k] = O::store(alpha * apply(kOp, va, TB::load(rb[k])));
    } else {
      const auto value = O::store(alpha * apply(kOp, TA::load(ra[0]), TB::load(rb[0])));
      for (size_t k = 0; k < n; ++k) ro[k] = value;
    }
  });
}

// Calls run(std::integral_constant<hal_binary_op_t, op>{}).
template <typename Run>
inline void with_op(hal_binary_op_t op, Run&& run) {
  switch (op) {
    case HAL_BINARY_ADD:
      return run(std::integral_constant<hal_binary_op_t, HAL_BINARY_ADD>{});
    case HAL_BINARY_SUB:
      return run(std::integral_constant<hal_binary_op_t, HAL_BINARY_SUB>{});
    case HAL_BINARY_MUL:
      return run(std::integral_constant<hal_binary_op_t, HAL_BINARY_MUL>{});
    case HAL_BINARY_DIV:
      return run(std::integral_constant<hal_binary_op_t, HAL_BINARY_DIV>{});
    case HAL_BINARY_MAX:
      return run(std::integral_constant<hal_binary_op_t, HAL_BINARY_MAX>{});
    default:
      return run(std::integral_constant<hal_binary_op_t, HAL_BINARY_MIN>{});
  }
}

// |count| elements of |ref| from |at| on, as f32 (one value repeated when
// the operand does not run along the inner dimension).
inline void load_block(ConstRef ref, size_t at, bool runs, size_t count, float* into) {
  with_type(ref.type, [&]<typename E>() {
    const auto* p = in<E>(ref) + at;
    if (runs) {
      for (size_t k = 0; k < count; ++k) into[k] = E::load(p[k]);
    } else {
      const float value = E::load(p[0]);
      for (size_t k = 0; k < count; ++k) into[k] = value;
    }
  });
}

}  // namespace

// Each type of a, b and out is f32 or bf16. The same type throughout (the
// common case: an f32 or a bf16 model) runs loops made for it; a mix (an
// f32 bias on bf16 activations) goes through f32 blocks, with the same
// rounding (each value is loaded to f32, computed in f32 and stored once).
// Specialising all 8 mixes made this file a 140 s compile at -O3.
HAL_ISA_CLONES void binary(hal_binary_op_t op, float alpha, ConstRef a, ConstRef b,
                           const BinaryLayout& layout, Ref result, size_t begin, size_t end) {
  if (a.type == b.type && b.type == result.type) {
    with_type(a.type, [&]<typename T>() {
      with_op(op, [&](auto op_constant) {
        binary_runs<T, T, T, decltype(op_constant)::value>(alpha, a, b, layout, result, begin, end);
      });
    });
    return;
  }
  const uint32_t inner = layout.rank - 1;
  const bool a_runs = layout.stride_a[inner] != 0, b_runs = layout.stride_b[inner] != 0;
  constexpr size_t kBlock = 256;
  float va[kBlock], vb[kBlock], vo[kBlock];
  for_each_binary_run(layout, begin, end, [&](size_t at_a, size_t at_b, size_t i, size_t n) {
    for (size_t k0 = 0; k0 < n; k0 += kBlock) {
      const size_t m = std::min(kBlock, n - k0);
      load_block(a, at_a + (a_runs ? k0 : 0), a_runs, m, va);
      load_block(b, at_b + (b_runs ? k0 : 0), b_runs, m, vb);
      with_op(op, [&](auto op_constant) {
        constexpr hal_binary_op_t kOp = decltype(op_constant)::value;
        for (size_t k = 0; k < m; ++k) vo[k] = alpha * apply(kOp, va[k], vb[k]);
      });
      with_type(result.type, [&]<typename O>() {
        auto* po = out<O>(result) + i + k0;
        for (size_t k = 0; k < m; ++k) po[k] = O::store(vo[k]);
      });
    }
  });
}

HAL_ISA_CLONES void convert(ConstRef source, Ref target, size_t count) {
  if (source.type == target.type) {
    std::memcpy(target.data, source.data, count * (source.type == Type::kF32 ? 4 : 2));
    return;
  }
  with_type(source.type, [&]<typename I>() {
    with_type(target.type, [&]<typename O>() {
      const auto* pi = in<I>(source);
      auto* po = out<O>(target);
      for (size_t i = 0; i < count; ++i) po[i] = O::store(I::load(pi[i]));
    });
  });
}

}  // namespace hal::cpu::ops::native
