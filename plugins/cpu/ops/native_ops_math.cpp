// cpu.native's plans of the PyTorch device's elementwise ops (SPEC §17.6.6,
// §17.6.7), the cheap, memory-bound ones a training step runs on every
// tensor: UNARY_MATH (the ops unary_math_native() names), BINARY_SCALAR
// (float arithmetic and comparisons), WHERE, CLAMP with scalar bounds, FILL,
// and CAT of dense tensors of one dtype (a copy per block).
// Dense tensors only; f32, bf16 and f16 are widened to f32 blocks, computed
// there and narrowed (native_half's conversions, rounding to nearest even).
// Everything else is declined with its reason, and the portable
// implementation serves it.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "native_half.hpp"
#include "native_kernels.hpp"
#include "native_plan.hpp"
#include "ops.hpp"

namespace hal::cpu::ops {
namespace {

constexpr size_t kBlock = 512;  // f32 values per widened block (2 KiB, in L1)

bool float_dtype(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F32 || dtype == HAL_DTYPE_BF16 || dtype == HAL_DTYPE_F16;
}

// Checks that every tensor is dense and (when |floats|) f32, bf16 or f16.
bool dense_tensors(std::initializer_list<std::pair<const char*, const hal_tensor_desc_t*>> list,
                   bool floats, Decline& decline) {
  for (const auto& [name, tensor] : list) {
    if (floats && !float_dtype(tensor->dtype)) {
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

// Elements [begin, end) of x through block(in, out, n) over f32: straight
// from x into out when both are f32, else through a widened block narrowed
// into out.
template <typename Block>
void through_blocks(const void* x, hal_dtype_t x_dtype, void* out, hal_dtype_t out_dtype,
                    size_t begin, size_t end, const Block& block) {
  if (x_dtype == HAL_DTYPE_F32 && out_dtype == HAL_DTYPE_F32) {
    block(static_cast<const float*>(x) + begin, static_cast<float*>(out) + begin, end - begin);
    return;
  }
  float values[kBlock];
  for (size_t first = begin; first < end; first += kBlock) {
    const size_t n = std::min(kBlock, end - first);
    native::to_f32({x, x_dtype}, first, n, values);
    block(values, values, n);
    native::from_f32(values, {out, out_dtype}, first, n);
  }
}

// ---- a scalar in any dtype (HAL_OP_CAST's rules) ----------------------------------------

// |d| as a float rounded to odd (exact truncation, the lowest bit set when
// inexact), so a second rounding to f16 or bf16 rounds |d| once.
float double_to_float_odd(double d) {
  uint64_t bits = std::bit_cast<uint64_t>(d);
  const uint64_t dropped = bits & 0x1fffffffu;
  if (dropped != 0) bits = (bits - dropped) | 0x20000000u;
  return static_cast<float>(std::bit_cast<double>(bits));
}

int64_t saturate(int64_t v, int64_t low, int64_t high) {
  return v < low ? low : (v > high ? high : v);
}

// Truncated toward zero and saturated to i64; NaN gives 0.
int64_t double_to_i64(double d) {
  if (d != d) return 0;
  if (d >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
  if (d <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(d);
}

// The element of |dtype| that a value converts to: from the f64 |d| when
// |from_double|, else from the i64 |i|. |bytes| receives HAL_DTYPE_SIZE(dtype)
// bytes.
void element_bytes(hal_dtype_t dtype, bool from_double, double d, int64_t i, unsigned char* bytes) {
  switch (dtype) {
    case HAL_DTYPE_F64: {
      const double v = from_double ? d : static_cast<double>(i);
      std::memcpy(bytes, &v, 8);
      return;
    }
    case HAL_DTYPE_F32: {
      const float v = from_double ? static_cast<float>(d) : static_cast<float>(i);
      std::memcpy(bytes, &v, 4);
      return;
    }
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16: {
      // Through a float rounded to odd (an i64 past 2^53 goes through f64
      // first, which keeps the sticky bit since 53 > 24 + 2).
      const float odd = double_to_float_odd(from_double ? d : static_cast<double>(i));
      native::from_f32(&odd, {bytes, dtype}, 0, 1);
      return;
    }
    case HAL_DTYPE_BOOL:
      bytes[0] = (from_double ? d != 0.0 : i != 0) ? 1 : 0;
      return;
    default: {
      const int64_t v = from_double ? double_to_i64(d) : i;
      if (dtype == HAL_DTYPE_I64) {
        std::memcpy(bytes, &v, 8);
      } else if (dtype == HAL_DTYPE_I32) {
        const auto w = static_cast<int32_t>(
            saturate(v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
        std::memcpy(bytes, &w, 4);
      } else if (dtype == HAL_DTYPE_I8) {
        const auto w = static_cast<int8_t>(saturate(v, -128, 127));
        std::memcpy(bytes, &w, 1);
      } else {
        bytes[0] = static_cast<unsigned char>(saturate(v, 0, 255));
      }
      return;
    }
  }
}

// Elements [begin, end) of |out| set to the |element|-byte |pattern|.
template <typename T>
void fill_typed(unsigned char* out, const unsigned char* pattern, uint64_t begin, uint64_t end) {
  T value;
  std::memcpy(&value, pattern, sizeof(T));
  std::fill(reinterpret_cast<T*>(out) + begin, reinterpret_cast<T*>(out) + end, value);
}

void fill_pattern(unsigned char* out, const unsigned char* pattern, size_t element, uint64_t begin,
                  uint64_t end) {
  switch (element) {
    case 8:
      fill_typed<uint64_t>(out, pattern, begin, end);
      break;
    case 4:
      fill_typed<uint32_t>(out, pattern, begin, end);
      break;
    case 2:
      fill_typed<uint16_t>(out, pattern, begin, end);
      break;
    default:
      fill_typed<uint8_t>(out, pattern, begin, end);
      break;
  }
}

bool reads_doubles(hal_dtype_t dtype) {
  return float_dtype(dtype) || dtype == HAL_DTYPE_F64;
}

// ---- planners ------------------------------------------------------------------------

std::unique_ptr<OpPlan> plan_unary_math(const hal_op_unary_math_desc_t& desc, Decline& decline) {
  if (!native::unary_math_native(desc.op)) {
    decline.reason =
        "cpu.native computes exp, log, sqrt, rsqrt, reciprocal, tanh, sigmoid, abs, "
        "neg, sign, floor, ceil, round and trunc";
    return nullptr;
  }
  if (!dense_tensors({{"x", &desc.x}, {"out", &desc.out}}, true, decline)) return nullptr;
  const hal_unary_math_t op = desc.op;
  const hal_dtype_t x_dtype = desc.x.dtype, out_dtype = desc.out.dtype;
  const uint64_t count = element_count(desc.x);
  return std::make_unique<NativePlan>(
      2, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
        parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
          through_blocks(operand[0], x_dtype, operand[1], out_dtype, begin, end,
                         [op](const float* in, float* result, size_t n) {
                           native::unary_math_block(op, in, result, n);
                         });
        });
      });
}

std::unique_ptr<OpPlan> plan_binary_scalar(const hal_op_binary_scalar_desc_t& desc,
                                           Decline& decline) {
  const hal_binary_op_t op = desc.op;
  const bool arithmetic = op <= HAL_BINARY_MIN;
  const bool comparison = op >= HAL_BINARY_EQ && op <= HAL_BINARY_GE;
  if ((!arithmetic && !comparison) || !float_dtype(desc.x.dtype)) {
    decline.reason = "cpu.native serves ADD .. MIN and the comparisons of a float x";
    return nullptr;
  }
  if (!dense_tensors({{"x", &desc.x}, {"out", &desc.out}}, false, decline)) return nullptr;
  if (arithmetic && !float_dtype(desc.out.dtype)) {
    decline.reason = "out is none of f32, bf16 and f16";
    return nullptr;
  }
  const hal_tensor_desc_t x = desc.x, out = desc.out;
  const bool scalar_first = desc.scalar_first != 0, scalar_is_float = desc.scalar_is_float != 0;
  const float alpha = desc.alpha;
  const uint64_t count = element_count(desc.x);
  // The scalar as an f32 operand (an i64 one is converted, as the float domain does).
  const auto scalar_of = [scalar_is_float](const hal_op_scalar_t* scalars) {
    return scalar_is_float ? static_cast<float>(scalars[0].f64)
                           : static_cast<float>(scalars[0].i64);
  };
  if (comparison) {
    return std::make_unique<NativePlan>(
        2,
        [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t* scalars) {
          const float s = scalar_of(scalars);
          auto* result = static_cast<uint8_t*>(operand[1]);
          parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
            if (x.dtype == HAL_DTYPE_F32) {
              native::compare_block(op, static_cast<const float*>(operand[0]) + begin, end - begin,
                                    s, scalar_first, result + begin);
              return;
            }
            float values[kBlock];
            for (size_t first = begin; first < end; first += kBlock) {
              const size_t n = std::min(kBlock, static_cast<size_t>(end) - first);
              native::to_f32({operand[0], x.dtype}, first, n, values);
              native::compare_block(op, values, n, s, scalar_first, result + first);
            }
          });
        },
        1);
  }
  // x OP s as a binary op whose other input is one value, read with stride 0.
  native::BinaryLayout layout;
  layout.extent[0] = count == 0 ? 1 : count;
  layout.stride_a[0] = scalar_first ? 0 : 1;
  layout.stride_b[0] = scalar_first ? 1 : 0;
  return std::make_unique<NativePlan>(
      2,
      [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t* scalars) {
        const float s = scalar_of(scalars);
        const native::ConstHalfRef tensor{operand[0], x.dtype};
        const native::ConstHalfRef value{&s, HAL_DTYPE_F32};
        parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
          native::binary_with_f16(op, alpha, scalar_first ? value : tensor,
                                  scalar_first ? tensor : value, layout, {operand[1], out.dtype},
                                  begin, end);
        });
      },
      1);
}

std::unique_ptr<OpPlan> plan_where(const hal_op_where_desc_t& desc, Decline& decline) {
  if (!dense_tensors({{"cond", &desc.cond}, {"out", &desc.out}}, false, decline)) return nullptr;
  if (element_count(desc.cond) != element_count(desc.out)) {
    decline.reason = "cond broadcasts";
    return nullptr;
  }
  const bool a_scalar = desc.a_is_scalar != 0, b_scalar = desc.b_is_scalar != 0;
  const std::pair<const char*, const hal_tensor_desc_t*> values[] = {{"a", &desc.a},
                                                                     {"b", &desc.b}};
  const bool scalar[] = {a_scalar, b_scalar};
  for (int v = 0; v < 2; ++v) {
    if (scalar[v]) continue;
    const auto& [name, tensor] = values[v];
    if (tensor->dtype != desc.out.dtype || !dense(*tensor) ||
        element_count(*tensor) != element_count(desc.out)) {
      decline.reason = std::string(name) + " is not a dense tensor of out's dtype and shape";
      return nullptr;
    }
  }
  const hal_dtype_t dtype = desc.out.dtype;
  const size_t element = HAL_DTYPE_SIZE(dtype);
  const uint64_t count = element_count(desc.out);
  const uint32_t scalar_count = (a_scalar ? 1u : 0u) + (b_scalar ? 1u : 0u);
  return std::make_unique<NativePlan>(
      4,
      [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t* scalars) {
        // The scalars converted once: a's, then b's.
        unsigned char a_bytes[8] = {}, b_bytes[8] = {};
        uint32_t next = 0;
        if (a_scalar) {
          element_bytes(dtype, reads_doubles(dtype), scalars[next].f64, scalars[next].i64, a_bytes);
          ++next;
        }
        if (b_scalar) {
          element_bytes(dtype, reads_doubles(dtype), scalars[next].f64, scalars[next].i64, b_bytes);
        }
        const void* a = a_scalar ? a_bytes : operand[1];
        const void* b = b_scalar ? b_bytes : operand[2];
        const auto* cond = static_cast<const uint8_t*>(operand[0]);
        parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
          native::select_elements(cond, a, a_scalar, b, b_scalar, operand[3], element, begin, end);
        });
      },
      scalar_count);
}

std::unique_ptr<OpPlan> plan_clamp(const hal_op_clamp_desc_t& desc, Decline& decline) {
  if (desc.min_kind == HAL_CLAMP_BOUND_TENSOR || desc.max_kind == HAL_CLAMP_BOUND_TENSOR) {
    decline.reason = "cpu.native clamps to scalar bounds only";
    return nullptr;
  }
  if (!dense_tensors({{"x", &desc.x}, {"out", &desc.out}}, true, decline)) return nullptr;
  const bool has_lo = desc.min_kind == HAL_CLAMP_BOUND_SCALAR;
  const bool has_hi = desc.max_kind == HAL_CLAMP_BOUND_SCALAR;
  const hal_dtype_t x_dtype = desc.x.dtype, out_dtype = desc.out.dtype;
  const uint64_t count = element_count(desc.x);
  return std::make_unique<NativePlan>(
      4,
      [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t* scalars) {
        uint32_t next = 0;
        const float lo = has_lo ? static_cast<float>(scalars[next++].f64) : 0.0f;
        const float hi = has_hi ? static_cast<float>(scalars[next].f64) : 0.0f;
        parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
          through_blocks(operand[0], x_dtype, operand[3], out_dtype, begin, end,
                         [&](const float* in, float* result, size_t n) {
                           native::clamp_block(in, result, n, has_lo, lo, has_hi, hi);
                         });
        });
      },
      (has_lo ? 1u : 0u) + (has_hi ? 1u : 0u));
}

std::unique_ptr<OpPlan> plan_fill(const hal_op_fill_desc_t& desc, Decline& decline) {
  if (!dense_tensors({{"out", &desc.out}}, false, decline)) return nullptr;
  const hal_dtype_t dtype = desc.out.dtype;
  const size_t element = HAL_DTYPE_SIZE(dtype);
  const bool doubles = reads_doubles(dtype);
  const uint64_t count = element_count(desc.out);
  return std::make_unique<NativePlan>(
      1,
      [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t* scalars) {
        const hal_op_scalar_t start = scalars[0], step = scalars[1];
        auto* out = static_cast<unsigned char*>(operand[0]);
        const bool constant = doubles ? step.f64 == 0.0 : step.i64 == 0;
        unsigned char pattern[8] = {};
        element_bytes(dtype, doubles, start.f64, start.i64, pattern);
        parallel_ranges(pool, count, kElementGrain, [&](uint64_t begin, uint64_t end) {
          if (constant) {
            fill_pattern(out, pattern, element, begin, end);
            return;
          }
          for (uint64_t i = begin; i < end; ++i) {
            // start + i * step: one fma in f64, or i64 modulo 2^64 (SPEC §17.6.7).
            const double d = std::fma(static_cast<double>(i), step.f64, start.f64);
            const auto v = static_cast<int64_t>(static_cast<uint64_t>(start.i64) +
                                                i * static_cast<uint64_t>(step.i64));
            element_bytes(dtype, doubles, d, v, out + i * element);
          }
        });
      },
      2);
}

// CAT of dense inputs of out's dtype into a dense out: for each index of the
// dimensions before the axis, each input's contiguous block lands contiguous
// in out (a torch.cat of contiguous tensors), one memcpy per block.
std::unique_ptr<OpPlan> plan_cat(const hal_op_cat_desc_t& desc, Decline& decline) {
  if (!dense_tensors({{"out", &desc.out}}, false, decline)) return nullptr;
  const size_t element = HAL_DTYPE_SIZE(desc.out.dtype);
  uint64_t outer = 1, inner = 1;
  for (uint32_t d = 0; d < desc.axis; ++d) outer *= static_cast<uint64_t>(desc.out.shape[d]);
  for (uint32_t d = desc.axis + 1; d < desc.out.rank; ++d) {
    inner *= static_cast<uint64_t>(desc.out.shape[d]);
  }
  // Per input: its block (extent along the axis x inner) and where it starts in out's row.
  std::vector<std::pair<uint64_t, uint64_t>> blocks;  // (block elements, offset in the row)
  uint64_t row = 0;
  for (uint32_t t = 0; t < desc.input_count; ++t) {
    const hal_tensor_desc_t& input = desc.inputs[t];
    if (input.dtype != desc.out.dtype || !dense(input)) {
      decline.reason = "input " + std::to_string(t) + " is not dense of out's dtype";
      return nullptr;
    }
    const uint64_t block = static_cast<uint64_t>(input.shape[desc.axis]) * inner;
    blocks.emplace_back(block, row);
    row += block;
  }
  const uint32_t inputs = desc.input_count;
  return std::make_unique<NativePlan>(
      inputs + 1, [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t*) {
        auto* out = static_cast<unsigned char*>(operand[inputs]);
        // Items: (outer index, input); each copies one block.
        parallel_ranges(pool, outer * inputs, 64, [&](uint64_t begin, uint64_t end) {
          for (uint64_t item = begin; item < end; ++item) {
            const uint64_t o = item / inputs;
            const uint32_t t = static_cast<uint32_t>(item % inputs);
            const auto [block, offset] = blocks[t];
            if (block == 0) continue;
            const auto* from = static_cast<const unsigned char*>(operand[t]) + o * block * element;
            std::memcpy(out + (o * row + offset) * element, from, block * element);
          }
        });
      });
}

}  // namespace

std::unique_ptr<OpPlan> plan_native_math(const hal_op_header_t& header, Decline& decline) {
  switch (header.kind) {
    case HAL_OP_UNARY_MATH:
      return plan_unary_math(reinterpret_cast<const hal_op_unary_math_desc_t&>(header), decline);
    case HAL_OP_BINARY_SCALAR:
      return plan_binary_scalar(reinterpret_cast<const hal_op_binary_scalar_desc_t&>(header),
                                decline);
    case HAL_OP_WHERE:
      return plan_where(reinterpret_cast<const hal_op_where_desc_t&>(header), decline);
    case HAL_OP_CLAMP:
      return plan_clamp(reinterpret_cast<const hal_op_clamp_desc_t&>(header), decline);
    case HAL_OP_FILL:
      return plan_fill(reinterpret_cast<const hal_op_fill_desc_t&>(header), decline);
    case HAL_OP_CAT:
      return plan_cat(reinterpret_cast<const hal_op_cat_desc_t&>(header), decline);
    default:
      decline.reason = "not one of the PyTorch device's elementwise ops";
      return nullptr;
  }
}

}  // namespace hal::cpu::ops
