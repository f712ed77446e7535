// The describe function of each op family (one file per family in this
// folder): checks a descriptor of one of its kinds and fills the signature.
#pragma once

#include "hal_ops/signature.hpp"
#include "hal_ops/tensor.hpp"
#include "scalars.hpp"

#include <string>

namespace hal::ops::definitions {

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

// Sets |message| to |problem| and returns HAL_ERROR_INVALID_ARGUMENT when
// |problem| is not empty: `if (reject(check_tensor(...), message)) return ...`.
inline bool reject(std::string problem, std::string* message) {
  if (problem.empty()) return false;
  *message = std::move(problem);
  return true;
}

}  // namespace hal::ops::definitions
