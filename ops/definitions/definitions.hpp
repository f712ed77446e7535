// The describe function of each op family (one file per family in this
// folder): checks a descriptor of one of its kinds and fills the signature.
#pragma once

#include "hal_ops/signature.hpp"
#include "hal_ops/tensor.hpp"
#include "scalars.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace hal::ops::definitions {

// Refuses a descriptor: |message| says which rule |text| broke.
inline hal_result_t invalid(std::string* message, std::string text) {
  *message = std::move(text);
  return HAL_ERROR_INVALID_ARGUMENT;
}

// Bound on the scalar parameters (sizes, strides, padding, dilation), so every
// product the rules and kernels form stays far inside int64.
inline constexpr int64_t kMaxParameter = INT32_MAX;

using DescribeFn = hal_result_t (*)(const hal_op_header_t* desc, OpSignature* out,
                                    std::string* message);

// matmul.cpp: MATMUL, BIAS_ACTIVATION_BACKWARD, GROUPED_MATMUL
hal_result_t describe_matmul_family(const hal_op_header_t*, OpSignature*, std::string*);
// normalization.cpp: SOFTMAX(_BACKWARD), NORM(_BACKWARD)
hal_result_t describe_normalization_family(const hal_op_header_t*, OpSignature*, std::string*);
// elementwise.cpp: BINARY, UNARY(_BACKWARD), SWIGLU(_BACKWARD), REDUCE, CAST,
// PERMUTE, DROPOUT
hal_result_t describe_elementwise_family(const hal_op_header_t*, OpSignature*, std::string*);
// training.cpp: ROPE, EMBEDDING(_BACKWARD), CROSS_ENTROPY, ADAMW, TOPK_GATING
hal_result_t describe_training_family(const hal_op_header_t*, OpSignature*, std::string*);
// attention.cpp: ATTENTION(_BACKWARD)
hal_result_t describe_attention_family(const hal_op_header_t*, OpSignature*, std::string*);
// math.cpp: UNARY_MATH, BINARY_SCALAR, WHERE, CLAMP
hal_result_t describe_math_family(const hal_op_header_t*, OpSignature*, std::string*);
// indexing.cpp: SCAN, GATHER, SCATTER, CAT, FILL
hal_result_t describe_indexing_family(const hal_op_header_t*, OpSignature*, std::string*);
// paged.cpp: PAGED_KV_APPEND, PAGED_ATTENTION
hal_result_t describe_paged_family(const hal_op_header_t*, OpSignature*, std::string*);

// What a binary op computes (math.cpp): arithmetic (a float or an integer
// domain, by out's dtype), comparisons and logical ops (a bool out), bitwise
// ops (integers and bool).
enum class BinaryClass { kArithmetic, kComparison, kLogical, kBitwise };
BinaryClass binary_class(hal_binary_op_t op);
// The dtype rule of HAL_OP_BINARY and HAL_OP_BINARY_SCALAR (SPEC.md §17.6.6):
// empty when |op| may combine inputs of dtypes |a| and |b| (already checked
// to be f32, f16, bf16, an integer or bool) into |out| with |alpha|, else the
// broken rule naming the operands.
std::string check_binary_dtypes(hal_binary_op_t op, float alpha, const char* a_name, hal_dtype_t a,
                                const char* b_name, hal_dtype_t b, hal_dtype_t out);

// convolution.cpp: CONVOLUTION, CONVOLUTION_BACKWARD_DATA, CONVOLUTION_BACKWARD_WEIGHTS
hal_result_t describe_convolution_family(const hal_op_header_t*, OpSignature*, std::string*);
// pooling.cpp: POOLING(_BACKWARD)
hal_result_t describe_pooling_family(const hal_op_header_t*, OpSignature*, std::string*);
// channel_norm.cpp: BATCH_NORM(_BACKWARD), GROUP_NORM(_BACKWARD)
hal_result_t describe_channel_norm_family(const hal_op_header_t*, OpSignature*, std::string*);

// lowp.cpp: QUANTIZE, DEQUANTIZE, SCALED_MATMUL, FAKE_QUANTIZE(_BACKWARD)
hal_result_t describe_lowp_family(const hal_op_header_t*, OpSignature*, std::string*);

// "0x1c": a flags word for messages.
inline std::string hex_text(uint32_t value) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  do {
    text.insert(text.begin(), kDigits[value & 15u]);
    value >>= 4;
  } while (value != 0);
  return "0x" + text;
}

// Sets |message| to |problem| and returns HAL_ERROR_INVALID_ARGUMENT when
// |problem| is not empty: `if (reject(check_tensor(...), message)) return ...`.
inline bool reject(std::string problem, std::string* message) {
  if (problem.empty()) return false;
  *message = std::move(problem);
  return true;
}

}  // namespace hal::ops::definitions
