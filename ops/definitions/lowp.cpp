// QUANTIZE, DEQUANTIZE, SCALED_MATMUL, FAKE_QUANTIZE(_BACKWARD): the low
// precision ops (SPEC.md §17.7). Every rule on quantization blocks and scale
// shapes is written once here, in check_scale.
#include "definitions.hpp"
#include "hal_ops/lowp.hpp"
#include "hal_util/names.hpp"

#include <algorithm>
#include <string>

namespace hal::ops::definitions {

namespace {

constexpr DtypeSet kQuantizedDtypes = dtype_bit(HAL_DTYPE_I8) | kFp8Dtypes;
constexpr int64_t kMaxInt8Chunk = 131071;

std::string text(int64_t value) {
  return std::to_string(value);
}

// |scale| holds one f32 per block of |blocks| over |tensor| (seen as [rows,
// cols]); |batch| > 0 prepends a leading dimension of that extent (the
// grouped matmul's experts). |tensor_name| and |blocks_name| name the
// operand and the descriptor field in the message.
std::string check_scale(const char* scale_name, const hal_tensor_desc_t& scale,
                        const char* tensor_name, int64_t rows, int64_t cols,
                        const char* blocks_name, const hal_quant_blocks_t& blocks, int64_t batch) {
  const QuantGrid grid = quant_grid(rows, cols, blocks);
  if (blocks.rows != 0 && rows % blocks.rows != 0) {
    return std::string(blocks_name) + ".rows = " + text(blocks.rows) + " does not divide " +
           tensor_name + "'s " + text(rows) + " rows";
  }
  if (blocks.cols != 0 && cols % blocks.cols != 0) {
    return std::string(blocks_name) + ".cols = " + text(blocks.cols) + " does not divide " +
           tensor_name + "'s " + text(cols) + " columns (its last dimension)";
  }
  const uint32_t rank = batch > 0 ? 3 : 2;
  if (std::string problem = check_tensor(scale_name, scale, kF32Only, rank, rank); !problem.empty())
    return problem;
  const int64_t want[3] = {batch, grid.block_rows_count, grid.block_cols_count};
  const int64_t* expected = batch > 0 ? want : want + 1;
  for (uint32_t d = 0; d < rank; ++d) {
    if (scale.shape[d] != expected[d]) {
      std::string shape = "[";
      for (uint32_t e = 0; e < rank; ++e) shape += (e ? ", " : "") + text(expected[e]);
      return std::string(scale_name) + " " + describe_tensor(scale) + " must have shape " + shape +
             "]: one scale per " + text(grid.block_rows) + "x" + text(grid.block_cols) +
             " block of " + tensor_name + " (" + blocks_name + ")";
    }
  }
  return {};
}

// The [rows, cols] matrix view of a rank >= 1 tensor.
void matrix_extents(const hal_tensor_desc_t& tensor, int64_t* rows, int64_t* cols) {
  *cols = tensor.shape[tensor.rank - 1];
  *rows = 1;
  for (uint32_t d = 0; d + 1 < tensor.rank; ++d) *rows *= tensor.shape[d];
}

hal_result_t describe_quantize(const hal_op_quantize_desc_t& desc, bool dequantize,
                               OpSignature* out, std::string* message) {
  const uint32_t known = dequantize ? 0u : static_cast<uint32_t>(HAL_QUANTIZE_GIVEN_SCALE);
  if ((desc.flags & ~known) != 0) {
    *message = "desc->flags " + hex_text(desc.flags) + " has bits " +
               (dequantize ? "HAL_OP_DEQUANTIZE does not take (it takes none)"
                           : "other than HAL_QUANTIZE_GIVEN_SCALE");
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (desc.reserved != 0) {
    *message = "desc->reserved must be 0";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const auto check_x = dequantize ? check_output : check_tensor;
  const auto check_q = dequantize ? check_tensor : check_output;
  if (reject(check_x("x", desc.x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_q("q", desc.q, kQuantizedDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape("q", desc.q, "x", desc.x), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  int64_t rows = 0, cols = 0;
  matrix_extents(desc.q, &rows, &cols);
  if (reject(check_scale("scale", desc.scale, "q", rows, cols, "desc->blocks", desc.blocks, 0),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const bool scale_out = !dequantize && (desc.flags & HAL_QUANTIZE_GIVEN_SCALE) == 0;
  if (scale_out && reject(check_output("scale", desc.scale, kF32Only, 2, 2), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (dequantize) {
    add_operand(*out, "q", Role::kInput, desc.q);
    add_operand(*out, "scale", Role::kInput, desc.scale);
    add_operand(*out, "x", Role::kOutput, desc.x);
  } else {
    add_operand(*out, "x", Role::kInput, desc.x);
    add_operand(*out, "q", Role::kOutput, desc.q);
    add_operand(*out, "scale", scale_out ? Role::kOutput : Role::kInput, desc.scale);
  }
  out->summary = std::string(hal::util::dtype_name(desc.q.dtype)) + " rows=" + text(rows) +
                 " cols=" + text(cols) + " blocks=" + text(desc.blocks.rows) + "x" +
                 text(desc.blocks.cols);
  return HAL_SUCCESS;
}

hal_result_t describe_scaled_matmul(const hal_op_scaled_matmul_desc_t& desc, OpSignature* out,
                                    std::string* message) {
  if (desc.reserved != 0) {
    *message = "desc->reserved must be 0";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const bool grouped = desc.groups > 0;
  const uint32_t b_rank = grouped ? 3 : 2;
  if (reject(check_tensor("a", desc.a, kQuantizedDtypes, 2, 2), message) ||
      reject(check_tensor("b", desc.b, kQuantizedDtypes, b_rank, b_rank), message) ||
      reject(check_output("d", desc.d, kFloatDtypes, 2, 2), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const bool a_int8 = desc.a.dtype == HAL_DTYPE_I8;
  const bool b_int8 = desc.b.dtype == HAL_DTYPE_I8;
  if (a_int8 != b_int8) {
    *message = std::string("a is ") + hal::util::dtype_name(desc.a.dtype) + " and b is " +
               hal::util::dtype_name(desc.b.dtype) +
               ": both operands are i8, or both 8-bit floats (e4m3 and e5m2 may mix)";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const int64_t m = desc.a.shape[0];
  const int64_t k = desc.a.shape[1];
  const int64_t n = desc.b.shape[b_rank - 2];
  if (desc.b.shape[b_rank - 1] != k) {
    *message = "b " + describe_tensor(desc.b) + " must have k = " + text(k) +
               " (a's last dimension) as its last dimension: b is [" + (grouped ? "groups, " : "") +
               "n, k]";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (grouped && desc.b.shape[0] != static_cast<int64_t>(desc.groups)) {
    *message = "b " + describe_tensor(desc.b) + " must have desc->groups = " + text(desc.groups) +
               " experts as its first dimension";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_shape("d", desc.d, {m, n}), message) ||
      reject(check_scale("a_scale", desc.a_scale, "a", m, k, "desc->a_blocks", desc.a_blocks, 0),
             message) ||
      reject(check_scale("b_scale", desc.b_scale, "b", n, k, "desc->b_blocks", desc.b_blocks,
                         grouped ? desc.groups : 0),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int64_t a_chunk = desc.a_blocks.cols == 0 ? k : desc.a_blocks.cols;
  const int64_t b_chunk = desc.b_blocks.cols == 0 ? k : desc.b_blocks.cols;
  if (k > 0 && (a_chunk % b_chunk != 0 && b_chunk % a_chunk != 0)) {
    *message = "desc->a_blocks.cols (" + text(a_chunk) + ") and desc->b_blocks.cols (" +
               text(b_chunk) + "): the larger k block must be a multiple of the smaller";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  // 128 x 128 x 131071 < 2^31: an int8 chunk's i32 sum cannot overflow.
  if (a_int8 && std::min(a_chunk, b_chunk) > kMaxInt8Chunk) {
    *message =
        "the k chunk (the smaller of desc->a_blocks.cols and desc->b_blocks.cols, 0 = k) "
        "is " +
        text(std::min(a_chunk, b_chunk)) + "; int8 operands take at most " + text(kMaxInt8Chunk) +
        " so its i32 sum cannot overflow";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  add_operand(*out, "a", Role::kInput, desc.a);
  add_operand(*out, "a_scale", Role::kInput, desc.a_scale);
  add_operand(*out, "b", Role::kInput, desc.b);
  add_operand(*out, "b_scale", Role::kInput, desc.b_scale);
  if (grouped) {
    const int64_t count = static_cast<int64_t>(desc.groups) + 1;
    if (reject(check_tensor("offsets", desc.offsets, kI32Only, 1, 1), message) ||
        reject(check_shape("offsets", desc.offsets, {count}), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    add_operand(*out, "offsets", Role::kInput, desc.offsets);
  } else {
    add_unused(*out, "offsets");
  }
  add_operand(*out, "d", Role::kOutput, desc.d);
  out->summary = std::string(hal::util::dtype_name(desc.a.dtype)) + "x" +
                 hal::util::dtype_name(desc.b.dtype) + " m=" + text(m) + " n=" + text(n) +
                 " k=" + text(k) + (grouped ? " groups=" + text(desc.groups) : std::string());
  return HAL_SUCCESS;
}

hal_result_t describe_fake_quantize(const hal_op_fake_quantize_desc_t& desc, bool backward,
                                    OpSignature* out, std::string* message) {
  if ((kQuantizedDtypes & dtype_bit(desc.qdtype)) == 0) {
    *message = "desc->qdtype " + text(desc.qdtype) + " is not a quantized dtype: it takes " +
               describe_dtypes(kQuantizedDtypes);
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const uint32_t known = backward ? static_cast<uint32_t>(HAL_FAKE_QUANTIZE_GRAD_SCALE |
                                                          HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE |
                                                          HAL_FAKE_QUANTIZE_CLIP_ROUNDED)
                                  : static_cast<uint32_t>(HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE);
  if ((desc.flags & ~known) != 0) {
    *message = "desc->flags " + hex_text(desc.flags) + " has bits " +
               (backward ? "other than HAL_FAKE_QUANTIZE_GRAD_SCALE, RECIPROCAL_SCALE and "
                           "CLIP_ROUNDED"
                         : "HAL_OP_FAKE_QUANTIZE does not take (it takes RECIPROCAL_SCALE only)");
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if ((desc.flags & HAL_FAKE_QUANTIZE_CLIP_ROUNDED) != 0 && desc.qdtype != HAL_DTYPE_I8) {
    *message =
        "desc->flags has HAL_FAKE_QUANTIZE_CLIP_ROUNDED, which takes qdtype I8 only, "
        "with qdtype " +
        std::string(hal::util::dtype_name(desc.qdtype));
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (desc.reserved != 0) {
    *message = "desc->reserved must be 0";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const bool grad_scale = (desc.flags & HAL_FAKE_QUANTIZE_GRAD_SCALE) != 0;
  if (grad_scale &&
      reject(check_finite_scalar("desc->grad_scale_factor", desc.grad_scale_factor), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (reject(check_tensor("x", desc.x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  int64_t rows = 0, cols = 0;
  matrix_extents(desc.x, &rows, &cols);
  if (reject(check_scale("scale", desc.scale, "x", rows, cols, "desc->blocks", desc.blocks, 0),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int x = add_operand(*out, "x", Role::kInput, desc.x);
  add_operand(*out, "scale", Role::kInput, desc.scale);
  if (!backward) {
    if (reject(check_output("y", desc.y, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_same_shape("y", desc.y, "x", desc.x), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    add_operand(*out, "y", Role::kOutput, desc.y, x);
  } else {
    if (reject(check_tensor("grad_y", desc.grad_y, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_y", desc.grad_y, "x", desc.x), message) ||
        reject(check_output("grad_x", desc.grad_x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_x", desc.grad_x, "x", desc.x), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    const int grad_y = add_operand(*out, "grad_y", Role::kInput, desc.grad_y);
    add_operand(*out, "grad_x", Role::kOutput, desc.grad_x, grad_y);
    if (grad_scale) {
      if (reject(check_output("grad_scale", desc.grad_scale, kF32Only, 2, 2), message) ||
          reject(check_same_shape("grad_scale", desc.grad_scale, "scale", desc.scale), message))
        return HAL_ERROR_INVALID_ARGUMENT;
      add_operand(*out, "grad_scale", Role::kOutput, desc.grad_scale);
    } else {
      add_unused(*out, "grad_scale");
    }
  }
  out->summary = std::string(hal::util::dtype_name(desc.qdtype)) + " rows=" + text(rows) +
                 " cols=" + text(cols) + " blocks=" + text(desc.blocks.rows) + "x" +
                 text(desc.blocks.cols);
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_lowp_family(const hal_op_header_t* desc, OpSignature* out,
                                  std::string* message) {
  switch (desc->kind) {
    case HAL_OP_QUANTIZE:
    case HAL_OP_DEQUANTIZE:
      return describe_quantize(*reinterpret_cast<const hal_op_quantize_desc_t*>(desc),
                               desc->kind == HAL_OP_DEQUANTIZE, out, message);
    case HAL_OP_SCALED_MATMUL:
      return describe_scaled_matmul(*reinterpret_cast<const hal_op_scaled_matmul_desc_t*>(desc),
                                    out, message);
    case HAL_OP_FAKE_QUANTIZE:
    case HAL_OP_FAKE_QUANTIZE_BACKWARD:
      return describe_fake_quantize(*reinterpret_cast<const hal_op_fake_quantize_desc_t*>(desc),
                                    desc->kind == HAL_OP_FAKE_QUANTIZE_BACKWARD, out, message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
