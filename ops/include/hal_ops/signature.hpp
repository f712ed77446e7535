// What an op's descriptor means, once checked: its operands in execution
// order (name, direction, tensor, whether used, which operand an output may
// be exactly) and its run-time scalars. Each op's describe function is the
// one place its descriptor rules are written; the loader checks every
// execution against the signature, so no implementation repeats the checks.
#pragma once

#include <hal/ops.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hal::ops {

enum class Role { kInput, kOutput, kInOut };

struct OperandSpec {
  const char* name = "";
  Role role = Role::kInput;
  hal_tensor_desc_t tensor{};
  bool used = true;    // false: must be NULL at execution
  int may_alias = -1;  // an output that may be exactly this other operand
};

enum class ScalarType { kF64, kU64, kI64 };

struct ScalarSpec {
  const char* name = "";
  ScalarType type = ScalarType::kF64;
};

struct OpSignature {
  std::vector<OperandSpec> operands;
  std::vector<ScalarSpec> scalars;
  // Checks the run-time scalars of one execution (NULL: none to check): an
  // empty string, or the sentence naming the scalar and its rule
  // (definitions/scalars.hpp). It may hold what it needs of the descriptor;
  // held by pointer, so a plan handle stays standard-layout.
  std::shared_ptr<const std::function<std::string(const hal_op_scalar_t* scalars)>> check_scalars;
  // A short description for HAL_OPS_VERBOSE ("m=64 n=32 k=16 gelu").
  std::string summary;
};

// Sets |signature|'s run-time scalar check.
template <class Check>
void set_scalar_check(OpSignature& signature, Check check) {
  signature.check_scalars =
      std::make_shared<const std::function<std::string(const hal_op_scalar_t*)>>(std::move(check));
}

// Adds a used tensor operand and returns its index.
int add_operand(OpSignature& signature, const char* name, Role role,
                const hal_tensor_desc_t& tensor, int may_alias = -1);
// Adds an operand the descriptor leaves unused (NULL at execution).
int add_unused(OpSignature& signature, const char* name);
// A 1-D dense tensor of |count| elements (AdamW's per-tensor operands).
hal_tensor_desc_t vector_tensor(hal_dtype_t dtype, int64_t count);

// The size of the v1 descriptor struct of |kind| (0: not an op).
size_t descriptor_size(hal_op_kind_t kind);

// Checks |desc| (at least descriptor_size(kind) bytes, the caller checked)
// against its op's rules and describes it. HAL_SUCCESS, or
// HAL_ERROR_INVALID_ARGUMENT with |message| naming the field and the rule.
hal_result_t describe(const hal_op_header_t* desc, OpSignature* out_signature,
                      std::string* message);

}  // namespace hal::ops
