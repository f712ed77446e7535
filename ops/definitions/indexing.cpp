// SCAN, GATHER, SCATTER, CAT, FILL: the ops that move elements by index
// (or make them from one).
#include "definitions.hpp"

#include <string>

namespace hal::ops::definitions {

namespace {

std::string axis_problem(uint32_t axis, const hal_tensor_desc_t& tensor, const char* name) {
  if (axis < tensor.rank) return {};
  return "desc->axis " + std::to_string(axis) + " is not an axis of " + name + " " +
         describe_tensor(tensor);
}

// The status word of GATHER and SCATTER: i32 [1], dense.
hal_tensor_desc_t status_tensor() {
  return vector_tensor(HAL_DTYPE_I32, 1);
}

hal_result_t describe_scan(const hal_op_scan_desc_t& desc, OpSignature* out, std::string* message) {
  if (static_cast<uint32_t>(desc.scan) >= HAL_SCAN_KIND_COUNT) {
    *message = "desc->scan " + std::to_string(desc.scan) + " is not a hal_scan_kind_t";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_tensor("x", desc.x, kFloatDtypes | kIntegerDtypes | kBoolDtype, 1,
                          HAL_TENSOR_MAX_RANK),
             message) ||
      reject(axis_problem(desc.axis, desc.x, "x"), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const DtypeSet out_dtypes = is_float_dtype(desc.x.dtype) ? kFloatDtypes : kIntegerDtypes;
  if (reject(check_output("out", desc.out, out_dtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape("out", desc.out, "x", desc.x), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int x = add_operand(*out, "x", Role::kInput, desc.x);
  add_operand(*out, "out", Role::kOutput, desc.out, x);
  return HAL_SUCCESS;
}

hal_result_t describe_gather(const hal_op_gather_desc_t& desc, OpSignature* out,
                             std::string* message) {
  if (desc.reserved != 0) {
    *message = "desc->reserved must be 0";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_output("out", desc.out, kAllDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
      reject(axis_problem(desc.axis, desc.out, "out"), message) ||
      reject(check_tensor("x", desc.x, dtype_bit(desc.out.dtype), desc.out.rank, desc.out.rank),
             message) ||
      reject(check_tensor("index", desc.index, kIndexDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape("index", desc.index, "out", desc.out), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  for (uint32_t d = 0; d < desc.out.rank; ++d) {
    if (d != desc.axis && desc.x.shape[d] < desc.out.shape[d]) {
      *message = "x " + describe_tensor(desc.x) + " dimension " + std::to_string(d) +
                 " is smaller than out's " + describe_tensor(desc.out) + " (only the axis may be)";
      return HAL_ERROR_INVALID_ARGUMENT;
    }
  }
  add_operand(*out, "x", Role::kInput, desc.x);
  add_operand(*out, "index", Role::kInput, desc.index);
  add_operand(*out, "out", Role::kOutput, desc.out);
  add_operand(*out, "status", Role::kInOut, status_tensor());
  return HAL_SUCCESS;
}

hal_result_t describe_scatter(const hal_op_scatter_desc_t& desc, OpSignature* out,
                              std::string* message) {
  if (static_cast<uint32_t>(desc.mode) >= HAL_SCATTER_MODE_COUNT) {
    *message = "desc->mode " + std::to_string(desc.mode) + " is not a hal_scatter_mode_t";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const DtypeSet out_dtypes = desc.mode == HAL_SCATTER_ADD ? kAllDtypes & ~kBoolDtype : kAllDtypes;
  if (reject(check_output("out", desc.out, out_dtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
      reject(axis_problem(desc.axis, desc.out, "out"), message) ||
      reject(check_tensor("src", desc.src, dtype_bit(desc.out.dtype), desc.out.rank, desc.out.rank),
             message) ||
      reject(check_tensor("index", desc.index, kIndexDtypes, desc.out.rank, desc.out.rank),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  for (uint32_t d = 0; d < desc.out.rank; ++d) {
    if (desc.index.shape[d] > desc.src.shape[d] ||
        (d != desc.axis && desc.index.shape[d] > desc.out.shape[d])) {
      *message = "index " + describe_tensor(desc.index) + " dimension " + std::to_string(d) +
                 " must be at most src's " + describe_tensor(desc.src) +
                 (d != desc.axis ? " and out's " + describe_tensor(desc.out) : std::string());
      return HAL_ERROR_INVALID_ARGUMENT;
    }
  }
  add_operand(*out, "index", Role::kInput, desc.index);
  add_operand(*out, "src", Role::kInput, desc.src);
  add_operand(*out, "out", Role::kInOut, desc.out);
  add_operand(*out, "status", Role::kInOut, status_tensor());
  return HAL_SUCCESS;
}

hal_result_t describe_cat(const hal_op_cat_desc_t& desc, OpSignature* out, std::string* message) {
  // The loader checked input_count and copied inputs into the plan.
  if (reject(check_output("out", desc.out, kAllDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
      reject(axis_problem(desc.axis, desc.out, "out"), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  int64_t along = 0;
  for (uint32_t t = 0; t < desc.input_count; ++t) {
    const hal_tensor_desc_t& input = desc.inputs[t];
    const std::string name = "inputs[" + std::to_string(t) + "]";
    if (reject(check_tensor(name.c_str(), input, kAllDtypes, desc.out.rank, desc.out.rank),
               message))
      return HAL_ERROR_INVALID_ARGUMENT;
    for (uint32_t d = 0; d < desc.out.rank; ++d) {
      if (d != desc.axis && input.shape[d] != desc.out.shape[d]) {
        *message = name + " " + describe_tensor(input) + " dimension " + std::to_string(d) +
                   " must be out's " + describe_tensor(desc.out) + " (only the axis differs)";
        return HAL_ERROR_INVALID_ARGUMENT;
      }
    }
    along += input.shape[desc.axis];
    add_operand(*out, "input", Role::kInput, input);
  }
  if (along != desc.out.shape[desc.axis]) {
    *message = "out " + describe_tensor(desc.out) + " has " +
               std::to_string(desc.out.shape[desc.axis]) + " along axis " +
               std::to_string(desc.axis) + "; the inputs add up to " + std::to_string(along);
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  add_operand(*out, "out", Role::kOutput, desc.out);
  return HAL_SUCCESS;
}

hal_result_t describe_fill(const hal_op_fill_desc_t& desc, OpSignature* out, std::string* message) {
  if (reject(check_output("out", desc.out, kAllDtypes, 0, HAL_TENSOR_MAX_RANK), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  add_operand(*out, "out", Role::kOutput, desc.out);
  const ScalarType type = is_float_dtype(desc.out.dtype) || desc.out.dtype == HAL_DTYPE_F64
                              ? ScalarType::kF64
                              : ScalarType::kI64;
  out->scalars.push_back({"start", type});
  out->scalars.push_back({"step", type});
  const hal_dtype_t target = desc.out.dtype;
  const int64_t count = element_count(desc.out);
  set_scalar_check(*out, [type, target, count](const hal_op_scalar_t* scalars) {
    return check_fill_scalars(scalars, type, target, count);
  });
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_indexing_family(const hal_op_header_t* desc, OpSignature* out,
                                      std::string* message) {
  switch (desc->kind) {
    case HAL_OP_SCAN:
      return describe_scan(*reinterpret_cast<const hal_op_scan_desc_t*>(desc), out, message);
    case HAL_OP_GATHER:
      return describe_gather(*reinterpret_cast<const hal_op_gather_desc_t*>(desc), out, message);
    case HAL_OP_SCATTER:
      return describe_scatter(*reinterpret_cast<const hal_op_scatter_desc_t*>(desc), out, message);
    case HAL_OP_CAT:
      return describe_cat(*reinterpret_cast<const hal_op_cat_desc_t*>(desc), out, message);
    case HAL_OP_FILL:
      return describe_fill(*reinterpret_cast<const hal_op_fill_desc_t*>(desc), out, message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
