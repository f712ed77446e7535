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

}  // namespace

HAL_ISA_CLONES void binary(hal_binary_op_t op, float alpha, ConstRef a, ConstRef b,
                           const BinaryLayout& layout, Ref result, size_t begin, size_t end) {
  with_type(a.type, [&]<typename TA>() {
    with_type(b.type, [&]<typename TB>() {
      with_type(result.type, [&]<typename O>() {
        const auto* pa = in<TA>(a);
        const auto* pb = in<TB>(b);
        auto* po = out<O>(result);
        const uint32_t inner = layout.rank - 1;
        const bool a_runs = layout.stride_a[inner] != 0, b_runs = layout.stride_b[inner] != 0;
        auto run = [&](auto op_constant) {
          constexpr hal_binary_op_t kOp = decltype(op_constant)::value;
          for_each_binary_run(
              layout, begin, end, [&](size_t at_a, size_t at_b, size_t i, size_t n) {
                const auto* ra = pa + at_a;
                const auto* rb = pb + at_b;
                auto* ro = po + i;
                if (a_runs && b_runs) {
                  for (size_t k = 0; k < n; ++k)
                    ro[k] = O::store(alpha * apply(kOp, TA::load(ra[k]), TB::load(rb[k])));
                } else if (a_runs) {  // b one value along the run: a row scale, say
                  const float vb = TB::load(rb[0]);
                  for (size_t k = 0; k < n; ++k)
                    ro[k] = O::store(alpha * apply(kOp, TA::load(ra[k]), vb));
                } else if (b_runs) {
                  const float va = TA::load(ra[0]);
                  for (size_t k = 0; k < n; ++k)
                    ro[k] = O::store(alpha * apply(kOp, va, TB::load(rb[k])));
                } else {
                  const auto value = O::store(alpha * apply(kOp, TA::load(ra[0]), TB::load(rb[0])));
                  for (size_t k = 0; k < n; ++k) ro[k] = value;
                }
              });
        };
        switch (op) {
          case HAL_BINARY_ADD:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_ADD>{});
            break;
          case HAL_BINARY_SUB:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_SUB>{});
            break;
          case HAL_BINARY_MUL:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_MUL>{});
            break;
          case HAL_BINARY_DIV:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_DIV>{});
            break;
          case HAL_BINARY_MAX:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_MAX>{});
            break;
          default:
            run(std::integral_constant<hal_binary_op_t, HAL_BINARY_MIN>{});
            break;
        }
      });
    });
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
