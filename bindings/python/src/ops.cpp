// hal.ops' extension half: tensors (strided views of buffers), op plans made
// from a dict of descriptor fields, and their executions (SPEC.md §16,
// "Operators from Python").
//
// One table per op kind says which Python field fills which member of the
// op's C descriptor and which operand each position of hal_op_execute is, so
// the C header's layout is written once, by the compiler (offsetof), and the
// pure-Python half (hal/ops.py) only names fields. Every operand given to an
// execution is checked against the layout its plan was made for (dtype,
// shape, strides) and against its buffer's extent before HAL sees it: a wrong
// tensor is a ValueError or TypeError with a sentence, never memory outside a
// buffer.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core.hpp"

namespace halpy {
namespace {

// ---- tensors -------------------------------------------------------------------

// A strided view of a Buffer: element i lies at offset + sum(i_d * strides[d])
// elements from the buffer's start. Checked to lie inside the buffer when made.
struct Tensor {
  nb::object buffer;  // a hal.Buffer (kept alive by the view)
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;

  Buffer& buf() const { return nb::cast<Buffer&>(buffer); }
  const DType& dtype() const { return *buf().dtype; }
};

// Dense row-major strides; one past INT64_MAX saturates there, as
// hal_tensor_desc_contiguous does (check_view then refuses the view).
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    const int64_t step = shape[d] > 0 ? shape[d] : 1;
    if (__builtin_mul_overflow(stride, step, &stride)) stride = std::numeric_limits<int64_t>::max();
  }
  return strides;
}

// Dense row-major: the strides of extents above 1 are the contiguous ones
// (an extent of 1 may have any stride; an empty tensor is dense).
bool dense_layout(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) return true;
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::vector<int64_t> int_list(nb::handle value, const char* what) {
  const std::string wrong = std::string(what) + " must be an int or a sequence of ints";
  std::vector<int64_t> out;
  if (PyIndex_Check(value.ptr()) && !PyBool_Check(value.ptr())) {
    out.push_back(nb::cast<int64_t>(value));
    return out;
  }
  nb::object items = nb::steal(PySequence_Fast(value.ptr(), ""));
  if (!items.is_valid()) {
    PyErr_Clear();
    raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, wrong);
  }
  for (nb::handle item : nb::borrow<nb::sequence>(items)) {
    if (PyBool_Check(item.ptr()) || !PyIndex_Check(item.ptr()))
      raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, wrong);
    int64_t v = 0;
    if (!nb::try_cast(item, v))
      raise_hal(HAL_ERROR_INVALID_ARGUMENT, std::string(what) + ": an entry is out of range");
    out.push_back(v);
  }
  return out;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string out = "(";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + (dims.size() == 1 ? ",)" : ")");
}

// The view's checks: rank, signs, and every element inside the buffer.
void check_view(const Buffer& buffer, const std::vector<int64_t>& shape,
                const std::vector<int64_t>& strides, int64_t offset) {
  if (shape.size() > HAL_TENSOR_MAX_RANK)
    raise_hal(HAL_ERROR_INVALID_ARGUMENT, "a tensor has at most " +
                                              std::to_string(HAL_TENSOR_MAX_RANK) +
                                              " dimensions, got " + std::to_string(shape.size()));
  if (strides.size() != shape.size())
    raise_hal(HAL_ERROR_INVALID_ARGUMENT, "strides " + dims_text(strides) + " do not match shape " +
                                              dims_text(shape) + " (one stride per dimension)");
  if (offset < 0) raise_hal(HAL_ERROR_INVALID_ARGUMENT, "a view's offset must be >= 0");
  bool empty = false;
  uint64_t last = static_cast<uint64_t>(offset);
  bool overflow = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || strides[d] < 0)
      raise_hal(HAL_ERROR_INVALID_ARGUMENT, "shape " + dims_text(shape) + " and strides " +
                                                dims_text(strides) + " must be >= 0");
    if (shape[d] == 0) empty = true;
    uint64_t reach = 0;
    if (shape[d] > 0)
      overflow |= __builtin_mul_overflow(static_cast<uint64_t>(shape[d] - 1),
                                         static_cast<uint64_t>(strides[d]), &reach) ||
                  __builtin_add_overflow(last, reach, &last);
  }
  if (!empty && (overflow || last >= buffer.size()))
    raise_hal(HAL_ERROR_INVALID_ARGUMENT,
              "the view (shape " + dims_text(shape) + ", strides " + dims_text(strides) +
                  ", offset " + std::to_string(offset) + ") reaches element " +
                  std::to_string(static_cast<uint64_t>(last)) + " of a buffer of " +
                  std::to_string(buffer.size()) + " elements");
}

Tensor make_view(nb::handle buffer_obj, nb::handle shape, nb::handle strides, int64_t offset) {
  Buffer& buffer = nb::cast<Buffer&>(buffer_obj);
  buffer.get();
  Tensor t;
  t.buffer = nb::borrow(buffer_obj);
  if (shape.is_none()) {
    for (size_t extent : buffer.shape) t.shape.push_back(static_cast<int64_t>(extent));
  } else {
    t.shape = int_list(shape, "shape");
  }
  t.strides = strides.is_none() ? contiguous_strides(t.shape) : int_list(strides, "strides");
  t.offset = offset;
  check_view(buffer, t.shape, t.strides, offset);
  return t;
}

// An operand or layout argument: a Tensor, or a Buffer seen whole and dense.
struct Operand {
  Buffer* buffer = nullptr;
  const DType* dtype = nullptr;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
};

Operand operand_of(nb::handle value, const std::string& what) {
  Operand out;
  if (nb::isinstance<Tensor>(value)) {
    const Tensor& t = nb::cast<const Tensor&>(value);
    out.buffer = &t.buf();
    out.shape = t.shape;
    out.strides = t.strides;
    out.offset = t.offset;
    check_view(*out.buffer, out.shape, out.strides, out.offset);  // the buffer may be closed
  } else if (nb::isinstance<Buffer>(value)) {
    out.buffer = &nb::cast<Buffer&>(value);
    for (size_t extent : out.buffer->shape) out.shape.push_back(static_cast<int64_t>(extent));
    out.strides = contiguous_strides(out.shape);
    if (out.shape.size() > HAL_TENSOR_MAX_RANK)
      raise_hal(HAL_ERROR_INVALID_ARGUMENT, what + ": a tensor has at most 8 dimensions");
  } else {
    raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, what + " must be a hal.Tensor or a hal.Buffer, got " +
                                               nb::cast<std::string>(nb::str(value.type())));
  }
  out.dtype = out.buffer->dtype;
  return out;
}

hal_tensor_desc_t desc_of(const Operand& op) {
  hal_tensor_desc_t desc{};
  desc.dtype = op.dtype->hal;
  desc.rank = static_cast<uint32_t>(op.shape.size());
  for (size_t d = 0; d < op.shape.size(); ++d) {
    desc.shape[d] = op.shape[d];
    desc.strides[d] = op.strides[d];
  }
  return desc;
}

std::string layout_text(const hal_tensor_desc_t& t) {
  std::vector<int64_t> shape(t.shape, t.shape + t.rank), strides(t.strides, t.strides + t.rank);
  return std::string(hal::util::dtype_name(t.dtype)) + " shape " + dims_text(shape) + " strides " +
         dims_text(strides);
}

// ---- descriptor tables ---------------------------------------------------------

enum class FieldType { U32, BIT, I32, I64, F32, ENUM, DTYPE, TENSOR, NUMELS, PERM, TENSORS };

struct Field {
  const char* name;
  FieldType type;
  size_t offset;
  uint32_t bit = 0;  // BIT: the flag in the u32 at offset
  std::span<const hal::util::EnumName> (*table)() noexcept = nullptr;  // ENUM
};

// An operand position of hal_op_execute: its name and, when the descriptor
// states its layout, that tensor member's offset.
// Operands without a descriptor tensor have a dense layout the op implies
// (OpPlan::implied_layout says which).
enum class Implied : uint8_t {
  kNone,
  kOffsets,    // grouped matmul: i32 [groups + 1]
  kCuSeqlens,  // attention, varlen: i32 [batch + 1]
  kSparsity,   // attention: u8 block mask or i32 block indices
  kStatus,     // gather, scatter: i32 [1]
};
struct OperandSlot {
  const char* name;
  std::ptrdiff_t tensor = -1;
  Implied implied = Implied::kNone;
};

// NUMBER: a Python int or float that fills both the f64 and the i64 field
// (the ops of issue 33 read the one their dtypes call for).
enum class ScalarType { F64, I64, U64, NUMBER };
struct ScalarSlot {
  const char* name;
  ScalarType type;
};

struct OpSpec {
  hal_op_kind_t kind;
  size_t size;
  std::vector<Field> fields;
  std::vector<OperandSlot> operands;  // empty for ADAMW (per-tensor operands)
  std::vector<ScalarSlot> scalars;
};

#define HALPY_F(S, member, type)                  \
  Field {                                         \
#member, FieldType::type, offsetof(S, member) \
  }
#define HALPY_BIT(S, name, member, bit)            \
  Field {                                          \
    name, FieldType::BIT, offsetof(S, member), bit \
  }
#define HALPY_ENUM(S, member, table)                                    \
  Field {                                                               \
#member, FieldType::ENUM, offsetof(S, member), 0, &hal::util::table \
  }
#define HALPY_T(S, member)                          \
  Field {                                           \
#member, FieldType::TENSOR, offsetof(S, member) \
  }
#define HALPY_O(S, name, member)                           \
  OperandSlot {                                            \
    name, static_cast<std::ptrdiff_t>(offsetof(S, member)) \
  }
#define HALPY_O_RAW(name, implied) \
  OperandSlot {                    \
    name, -1, Implied::implied     \
  }

std::vector<OpSpec> make_specs() {
  std::vector<OpSpec> specs;
  using MM = hal_op_matmul_desc_t;
  specs.push_back({HAL_OP_MATMUL,
                   sizeof(MM),
                   {HALPY_BIT(MM, "transpose_a", flags, HAL_MATMUL_TRANSPOSE_A),
                    HALPY_BIT(MM, "transpose_b", flags, HAL_MATMUL_TRANSPOSE_B),
                    HALPY_BIT(MM, "has_bias", flags, HAL_MATMUL_BIAS),
                    HALPY_BIT(MM, "save_aux", flags, HAL_MATMUL_SAVE_AUX),
                    HALPY_ENUM(MM, activation, activation_table), HALPY_F(MM, alpha, F32),
                    HALPY_F(MM, beta, F32), HALPY_T(MM, a), HALPY_T(MM, b), HALPY_T(MM, c),
                    HALPY_T(MM, d), HALPY_T(MM, bias), HALPY_T(MM, aux)},
                   {HALPY_O(MM, "a", a), HALPY_O(MM, "b", b), HALPY_O(MM, "c", c),
                    HALPY_O(MM, "d", d), HALPY_O(MM, "bias", bias), HALPY_O(MM, "aux", aux)},
                   {}});
  using BAB = hal_op_bias_activation_backward_desc_t;
  specs.push_back(
      {HAL_OP_BIAS_ACTIVATION_BACKWARD,
       sizeof(BAB),
       {HALPY_ENUM(BAB, activation, activation_table), HALPY_F(BAB, compute_bias_grad, U32),
        HALPY_T(BAB, grad_out), HALPY_T(BAB, aux), HALPY_T(BAB, grad_pre), HALPY_T(BAB, grad_bias)},
       {HALPY_O(BAB, "grad_out", grad_out), HALPY_O(BAB, "aux", aux),
        HALPY_O(BAB, "grad_pre", grad_pre), HALPY_O(BAB, "grad_bias", grad_bias)},
       {}});
  using GM = hal_op_grouped_matmul_desc_t;
  specs.push_back({HAL_OP_GROUPED_MATMUL,
                   sizeof(GM),
                   {HALPY_BIT(GM, "transpose_b", flags, HAL_MATMUL_TRANSPOSE_B),
                    HALPY_F(GM, groups, U32), HALPY_T(GM, a), HALPY_T(GM, b), HALPY_T(GM, d)},
                   {HALPY_O(GM, "a", a), HALPY_O(GM, "b", b), HALPY_O_RAW("offsets", kOffsets),
                    HALPY_O(GM, "d", d)},
                   {}});
  using SM = hal_op_softmax_desc_t;
  std::vector<Field> softmax_fields = {HALPY_F(SM, log, U32), HALPY_T(SM, x), HALPY_T(SM, y),
                                       HALPY_T(SM, grad_x)};
  specs.push_back(
      {HAL_OP_SOFTMAX, sizeof(SM), softmax_fields, {HALPY_O(SM, "x", x), HALPY_O(SM, "y", y)}, {}});
  specs.push_back({HAL_OP_SOFTMAX_BACKWARD,
                   sizeof(SM),
                   softmax_fields,
                   {HALPY_O(SM, "y", y), HALPY_O(SM, "grad_y", x), HALPY_O(SM, "grad_x", grad_x)},
                   {}});
  using NM = hal_op_norm_desc_t;
  std::vector<Field> norm_fields = {HALPY_ENUM(NM, norm, norm_kind_table),
                                    HALPY_F(NM, epsilon, F32),
                                    HALPY_F(NM, has_gamma, U32),
                                    HALPY_F(NM, has_beta, U32),
                                    HALPY_F(NM, has_mean, U32),
                                    HALPY_F(NM, has_rstd, U32),
                                    HALPY_F(NM, has_grad_gamma, U32),
                                    HALPY_F(NM, has_grad_beta, U32),
                                    HALPY_T(NM, x),
                                    HALPY_T(NM, gamma),
                                    HALPY_T(NM, beta),
                                    HALPY_T(NM, y),
                                    HALPY_T(NM, mean),
                                    HALPY_T(NM, rstd),
                                    HALPY_T(NM, grad_y),
                                    HALPY_T(NM, grad_x),
                                    HALPY_T(NM, grad_gamma),
                                    HALPY_T(NM, grad_beta)};
  specs.push_back({HAL_OP_NORM,
                   sizeof(NM),
                   norm_fields,
                   {HALPY_O(NM, "x", x), HALPY_O(NM, "gamma", gamma), HALPY_O(NM, "beta", beta),
                    HALPY_O(NM, "y", y), HALPY_O(NM, "mean", mean), HALPY_O(NM, "rstd", rstd)},
                   {}});
  specs.push_back(
      {HAL_OP_NORM_BACKWARD,
       sizeof(NM),
       norm_fields,
       {HALPY_O(NM, "x", x), HALPY_O(NM, "gamma", gamma), HALPY_O(NM, "mean", mean),
        HALPY_O(NM, "rstd", rstd), HALPY_O(NM, "grad_y", grad_y), HALPY_O(NM, "grad_x", grad_x),
        HALPY_O(NM, "grad_gamma", grad_gamma), HALPY_O(NM, "grad_beta", grad_beta)},
       {}});
  using BI = hal_op_binary_desc_t;
  specs.push_back({HAL_OP_BINARY,
                   sizeof(BI),
                   {HALPY_ENUM(BI, op, binary_op_table), HALPY_F(BI, alpha, F32), HALPY_T(BI, a),
                    HALPY_T(BI, b), HALPY_T(BI, out)},
                   {HALPY_O(BI, "a", a), HALPY_O(BI, "b", b), HALPY_O(BI, "out", out)},
                   {}});
  using UN = hal_op_unary_desc_t;
  std::vector<Field> unary_fields = {HALPY_ENUM(UN, activation, activation_table),
                                     HALPY_F(UN, alpha, F32), HALPY_T(UN, x), HALPY_T(UN, out),
                                     HALPY_T(UN, grad_x)};
  specs.push_back(
      {HAL_OP_UNARY, sizeof(UN), unary_fields, {HALPY_O(UN, "x", x), HALPY_O(UN, "out", out)}, {}});
  specs.push_back(
      {HAL_OP_UNARY_BACKWARD,
       sizeof(UN),
       unary_fields,
       {HALPY_O(UN, "x", x), HALPY_O(UN, "grad_out", out), HALPY_O(UN, "grad_x", grad_x)},
       {}});
  using SW = hal_op_swiglu_desc_t;
  std::vector<Field> swiglu_fields = {HALPY_T(SW, x), HALPY_T(SW, out), HALPY_T(SW, grad_x)};
  specs.push_back({HAL_OP_SWIGLU,
                   sizeof(SW),
                   swiglu_fields,
                   {HALPY_O(SW, "x", x), HALPY_O(SW, "out", out)},
                   {}});
  specs.push_back(
      {HAL_OP_SWIGLU_BACKWARD,
       sizeof(SW),
       swiglu_fields,
       {HALPY_O(SW, "x", x), HALPY_O(SW, "grad_out", out), HALPY_O(SW, "grad_x", grad_x)},
       {}});
  using RD = hal_op_reduce_desc_t;
  specs.push_back({HAL_OP_REDUCE,
                   sizeof(RD),
                   {HALPY_ENUM(RD, reduce, reduce_kind_table), HALPY_F(RD, axes_mask, U32),
                    HALPY_T(RD, x), HALPY_T(RD, out)},
                   {HALPY_O(RD, "x", x), HALPY_O(RD, "out", out)},
                   {}});
  using RO = hal_op_rope_desc_t;
  specs.push_back(
      {HAL_OP_ROPE,
       sizeof(RO),
       {HALPY_F(RO, rotary_dim, U32), HALPY_F(RO, interleaved, U32), HALPY_F(RO, inverse, U32),
        HALPY_F(RO, has_positions, U32), HALPY_F(RO, base, F32), HALPY_F(RO, position_offset, I32),
        HALPY_T(RO, x), HALPY_T(RO, positions), HALPY_T(RO, out)},
       {HALPY_O(RO, "x", x), HALPY_O(RO, "positions", positions), HALPY_O(RO, "out", out)},
       {}});
  using EM = hal_op_embedding_desc_t;
  std::vector<Field> embedding_fields = {HALPY_F(EM, accumulate, U32), HALPY_T(EM, ids),
                                         HALPY_T(EM, table), HALPY_T(EM, out)};
  specs.push_back({HAL_OP_EMBEDDING,
                   sizeof(EM),
                   embedding_fields,
                   {HALPY_O(EM, "ids", ids), HALPY_O(EM, "table", table), HALPY_O(EM, "out", out)},
                   {}});
  specs.push_back(
      {HAL_OP_EMBEDDING_BACKWARD,
       sizeof(EM),
       embedding_fields,
       {HALPY_O(EM, "ids", ids), HALPY_O(EM, "grad_out", out), HALPY_O(EM, "grad_table", table)},
       {}});
  using CE = hal_op_cross_entropy_desc_t;
  specs.push_back(
      {HAL_OP_CROSS_ENTROPY,
       sizeof(CE),
       {HALPY_F(CE, ignore_index, I64), HALPY_F(CE, label_smoothing, F32),
        HALPY_F(CE, has_row_losses, U32), HALPY_F(CE, has_grad, U32), HALPY_T(CE, logits),
        HALPY_T(CE, labels), HALPY_T(CE, loss), HALPY_T(CE, row_losses), HALPY_T(CE, grad_logits)},
       {HALPY_O(CE, "logits", logits), HALPY_O(CE, "labels", labels), HALPY_O(CE, "loss", loss),
        HALPY_O(CE, "row_losses", row_losses), HALPY_O(CE, "grad_logits", grad_logits)},
       {{"grad_scale", ScalarType::F64}}});
  using AW = hal_op_adamw_desc_t;
  specs.push_back(
      {HAL_OP_ADAMW,
       sizeof(AW),
       {HALPY_F(AW, has_master, U32), HALPY_F(AW, param_dtype, DTYPE),
        HALPY_F(AW, grad_dtype, DTYPE), HALPY_F(AW, numels, NUMELS), HALPY_F(AW, beta1, F32),
        HALPY_F(AW, beta2, F32), HALPY_F(AW, epsilon, F32), HALPY_F(AW, weight_decay, F32),
        HALPY_F(AW, max_grad_norm, F32), HALPY_F(AW, has_grad_norm, U32)},
       {},
       {{"lr", ScalarType::F64}, {"step", ScalarType::I64}}});
  using CA = hal_op_cast_desc_t;
  std::vector<Field> cast_fields = {HALPY_T(CA, in), HALPY_T(CA, out)};
  specs.push_back(
      {HAL_OP_CAST, sizeof(CA), cast_fields, {HALPY_O(CA, "in", in), HALPY_O(CA, "out", out)}, {}});
  cast_fields.push_back(HALPY_F(CA, perm, PERM));
  specs.push_back({HAL_OP_PERMUTE,
                   sizeof(CA),
                   cast_fields,
                   {HALPY_O(CA, "in", in), HALPY_O(CA, "out", out)},
                   {}});
  using DR = hal_op_dropout_desc_t;
  specs.push_back(
      {HAL_OP_DROPOUT,
       sizeof(DR),
       {HALPY_F(DR, probability, F32), HALPY_F(DR, backward, U32), HALPY_F(DR, has_mask, U32),
        HALPY_T(DR, x), HALPY_T(DR, out), HALPY_T(DR, mask)},
       {HALPY_O(DR, "x", x), HALPY_O(DR, "out", out), HALPY_O(DR, "mask", mask)},
       {{"seed", ScalarType::U64}, {"offset", ScalarType::U64}}});
  using AT = hal_op_attention_desc_t;
  std::vector<Field> attention_fields = {HALPY_ENUM(AT, causal, causal_alignment_table),
                                         HALPY_ENUM(AT, sparsity, attention_sparsity_table),
                                         HALPY_F(AT, scale, F32),
                                         HALPY_F(AT, has_cu_seqlens, U32),
                                         HALPY_F(AT, batch, U32),
                                         HALPY_F(AT, max_seqlen_q, U32),
                                         HALPY_F(AT, max_seqlen_k, U32),
                                         HALPY_F(AT, block_q, U32),
                                         HALPY_F(AT, block_k, U32),
                                         HALPY_F(AT, topk, U32),
                                         HALPY_T(AT, q),
                                         HALPY_T(AT, k),
                                         HALPY_T(AT, v),
                                         HALPY_T(AT, out),
                                         HALPY_T(AT, lse),
                                         HALPY_T(AT, grad_out),
                                         HALPY_T(AT, grad_q),
                                         HALPY_T(AT, grad_k),
                                         HALPY_T(AT, grad_v)};
  std::vector<OperandSlot> attention_operands = {HALPY_O(AT, "q", q),
                                                 HALPY_O(AT, "k", k),
                                                 HALPY_O(AT, "v", v),
                                                 HALPY_O(AT, "out", out),
                                                 HALPY_O(AT, "lse", lse),
                                                 HALPY_O_RAW("cu_seqlens_q", kCuSeqlens),
                                                 HALPY_O_RAW("cu_seqlens_k", kCuSeqlens),
                                                 HALPY_O_RAW("block_sparsity", kSparsity)};
  specs.push_back({HAL_OP_ATTENTION, sizeof(AT), attention_fields, attention_operands, {}});
  attention_operands.push_back(HALPY_O(AT, "grad_out", grad_out));
  attention_operands.push_back(HALPY_O(AT, "grad_q", grad_q));
  attention_operands.push_back(HALPY_O(AT, "grad_k", grad_k));
  attention_operands.push_back(HALPY_O(AT, "grad_v", grad_v));
  specs.push_back(
      {HAL_OP_ATTENTION_BACKWARD, sizeof(AT), attention_fields, attention_operands, {}});
  using TG = hal_op_topk_gating_desc_t;
  specs.push_back({HAL_OP_TOPK_GATING,
                   sizeof(TG),
                   {HALPY_F(TG, k, U32), HALPY_F(TG, renormalize, U32), HALPY_T(TG, logits),
                    HALPY_T(TG, weights), HALPY_T(TG, indices)},
                   {HALPY_O(TG, "logits", logits), HALPY_O(TG, "weights", weights),
                    HALPY_O(TG, "indices", indices)},
                   {}});
  // The ops of the PyTorch device. Their scalars are NUMBERs, chosen per
  // plan from the descriptor (OpPlan::scalar_slots).
  using UM = hal_op_unary_math_desc_t;
  specs.push_back({HAL_OP_UNARY_MATH,
                   sizeof(UM),
                   {HALPY_ENUM(UM, op, unary_math_table), HALPY_T(UM, x), HALPY_T(UM, out)},
                   {HALPY_O(UM, "x", x), HALPY_O(UM, "out", out)},
                   {}});
  using BS = hal_op_binary_scalar_desc_t;
  specs.push_back({HAL_OP_BINARY_SCALAR,
                   sizeof(BS),
                   {HALPY_ENUM(BS, op, binary_op_table), HALPY_F(BS, alpha, F32),
                    HALPY_F(BS, scalar_first, U32), HALPY_F(BS, scalar_is_float, U32),
                    HALPY_T(BS, x), HALPY_T(BS, out)},
                   {HALPY_O(BS, "x", x), HALPY_O(BS, "out", out)},
                   {}});
  using WH = hal_op_where_desc_t;
  specs.push_back({HAL_OP_WHERE,
                   sizeof(WH),
                   {HALPY_F(WH, a_is_scalar, U32), HALPY_F(WH, b_is_scalar, U32), HALPY_T(WH, cond),
                    HALPY_T(WH, a), HALPY_T(WH, b), HALPY_T(WH, out)},
                   {HALPY_O(WH, "cond", cond), HALPY_O(WH, "a", a), HALPY_O(WH, "b", b),
                    HALPY_O(WH, "out", out)},
                   {}});
  using CL = hal_op_clamp_desc_t;
  specs.push_back(
      {HAL_OP_CLAMP,
       sizeof(CL),
       {HALPY_ENUM(CL, min_kind, clamp_bound_table), HALPY_ENUM(CL, max_kind, clamp_bound_table),
        HALPY_T(CL, x), HALPY_T(CL, min), HALPY_T(CL, max), HALPY_T(CL, out)},
       {HALPY_O(CL, "x", x), HALPY_O(CL, "min", min), HALPY_O(CL, "max", max),
        HALPY_O(CL, "out", out)},
       {}});
  using SC = hal_op_scan_desc_t;
  specs.push_back({HAL_OP_SCAN,
                   sizeof(SC),
                   {HALPY_ENUM(SC, scan, scan_kind_table), HALPY_F(SC, axis, U32), HALPY_T(SC, x),
                    HALPY_T(SC, out)},
                   {HALPY_O(SC, "x", x), HALPY_O(SC, "out", out)},
                   {}});
  using GA = hal_op_gather_desc_t;
  specs.push_back({HAL_OP_GATHER,
                   sizeof(GA),
                   {HALPY_F(GA, axis, U32), HALPY_T(GA, x), HALPY_T(GA, index), HALPY_T(GA, out)},
                   {HALPY_O(GA, "x", x), HALPY_O(GA, "index", index), HALPY_O(GA, "out", out),
                    HALPY_O_RAW("status", kStatus)},
                   {}});
  using SA = hal_op_scatter_desc_t;
  specs.push_back({HAL_OP_SCATTER,
                   sizeof(SA),
                   {HALPY_ENUM(SA, mode, scatter_mode_table), HALPY_F(SA, axis, U32),
                    HALPY_T(SA, index), HALPY_T(SA, src), HALPY_T(SA, out)},
                   {HALPY_O(SA, "index", index), HALPY_O(SA, "src", src), HALPY_O(SA, "out", out),
                    HALPY_O_RAW("status", kStatus)},
                   {}});
  using CT = hal_op_cat_desc_t;
  specs.push_back({HAL_OP_CAT,
                   sizeof(CT),
                   {HALPY_F(CT, axis, U32), HALPY_F(CT, inputs, TENSORS), HALPY_T(CT, out)},
                   {},  // inputs[0..n), then out: OpPlan::operand_names
                   {}});
  using FL = hal_op_fill_desc_t;
  specs.push_back({HAL_OP_FILL, sizeof(FL), {HALPY_T(FL, out)}, {HALPY_O(FL, "out", out)}, {}});
  // The low-precision ops (SPEC §17.6): a block is two fields, block_rows and block_cols.
  using QU = hal_op_quantize_desc_t;
  std::vector<Field> quantize_fields = {
      HALPY_F(QU, flags, U32),
      Field{"block_rows", FieldType::U32, offsetof(QU, blocks.rows)},
      Field{"block_cols", FieldType::U32, offsetof(QU, blocks.cols)},
      HALPY_T(QU, x),
      HALPY_T(QU, q),
      HALPY_T(QU, scale)};
  specs.push_back({HAL_OP_QUANTIZE,
                   sizeof(QU),
                   quantize_fields,
                   {HALPY_O(QU, "x", x), HALPY_O(QU, "q", q), HALPY_O(QU, "scale", scale)},
                   {}});
  specs.push_back({HAL_OP_DEQUANTIZE,
                   sizeof(QU),
                   quantize_fields,
                   {HALPY_O(QU, "q", q), HALPY_O(QU, "scale", scale), HALPY_O(QU, "x", x)},
                   {}});
  using SM8 = hal_op_scaled_matmul_desc_t;
  specs.push_back(
      {HAL_OP_SCALED_MATMUL,
       sizeof(SM8),
       {HALPY_F(SM8, groups, U32),
        Field{"a_block_rows", FieldType::U32, offsetof(SM8, a_blocks.rows)},
        Field{"a_block_cols", FieldType::U32, offsetof(SM8, a_blocks.cols)},
        Field{"b_block_rows", FieldType::U32, offsetof(SM8, b_blocks.rows)},
        Field{"b_block_cols", FieldType::U32, offsetof(SM8, b_blocks.cols)}, HALPY_T(SM8, a),
        HALPY_T(SM8, a_scale), HALPY_T(SM8, b), HALPY_T(SM8, b_scale), HALPY_T(SM8, offsets),
        HALPY_T(SM8, d)},
       {HALPY_O(SM8, "a", a), HALPY_O(SM8, "a_scale", a_scale), HALPY_O(SM8, "b", b),
        HALPY_O(SM8, "b_scale", b_scale), HALPY_O(SM8, "offsets", offsets), HALPY_O(SM8, "d", d)},
       {}});
  using FQ = hal_op_fake_quantize_desc_t;
  std::vector<Field> fake_quantize_fields = {
      HALPY_F(FQ, qdtype, DTYPE),
      HALPY_F(FQ, flags, U32),
      Field{"block_rows", FieldType::U32, offsetof(FQ, blocks.rows)},
      Field{"block_cols", FieldType::U32, offsetof(FQ, blocks.cols)},
      HALPY_F(FQ, grad_scale_factor, F32),
      HALPY_T(FQ, x),
      HALPY_T(FQ, scale),
      HALPY_T(FQ, y),
      HALPY_T(FQ, grad_y),
      HALPY_T(FQ, grad_x),
      HALPY_T(FQ, grad_scale)};
  specs.push_back({HAL_OP_FAKE_QUANTIZE,
                   sizeof(FQ),
                   fake_quantize_fields,
                   {HALPY_O(FQ, "x", x), HALPY_O(FQ, "scale", scale), HALPY_O(FQ, "y", y)},
                   {}});
  specs.push_back({HAL_OP_FAKE_QUANTIZE_BACKWARD,
                   sizeof(FQ),
                   fake_quantize_fields,
                   {HALPY_O(FQ, "x", x), HALPY_O(FQ, "scale", scale), HALPY_O(FQ, "grad_y", grad_y),
                    HALPY_O(FQ, "grad_x", grad_x), HALPY_O(FQ, "grad_scale", grad_scale)},
                   {}});
  return specs;
}

#undef HALPY_F
#undef HALPY_BIT
#undef HALPY_ENUM
#undef HALPY_T
#undef HALPY_O
#undef HALPY_O_RAW

const OpSpec& spec_named(const std::string& name) {
  static const std::vector<OpSpec> specs = make_specs();
  const auto kind = static_cast<hal_op_kind_t>(value_of(hal::util::op_kind_table(), name, "op"));
  for (const OpSpec& spec : specs)
    if (spec.kind == kind) return spec;
  raise_hal(HAL_ERROR_UNSUPPORTED,
            "hal.ops: op '" + name + "' has no Python binding in this build of the extension");
}

// The largest descriptor, zeroed; the spec's size goes in its header.
union DescStorage {
  hal_op_header_t header;
  hal_op_matmul_desc_t matmul;
  hal_op_bias_activation_backward_desc_t bias_activation_backward;
  hal_op_grouped_matmul_desc_t grouped_matmul;
  hal_op_softmax_desc_t softmax;
  hal_op_norm_desc_t norm;
  hal_op_binary_desc_t binary;
  hal_op_unary_desc_t unary;
  hal_op_swiglu_desc_t swiglu;
  hal_op_reduce_desc_t reduce;
  hal_op_rope_desc_t rope;
  hal_op_embedding_desc_t embedding;
  hal_op_cross_entropy_desc_t cross_entropy;
  hal_op_adamw_desc_t adamw;
  hal_op_cast_desc_t cast;
  hal_op_dropout_desc_t dropout;
  hal_op_attention_desc_t attention;
  hal_op_topk_gating_desc_t topk_gating;
  hal_op_unary_math_desc_t unary_math;
  hal_op_binary_scalar_desc_t binary_scalar;
  hal_op_where_desc_t where;
  hal_op_clamp_desc_t clamp;
  hal_op_scan_desc_t scan;
  hal_op_gather_desc_t gather;
  hal_op_scatter_desc_t scatter;
  hal_op_cat_desc_t cat;
  hal_op_fill_desc_t fill;
};

// A Python float (an f64) for an op's f32 field. HAL checks each scalar as
// the f32 it computes with (SPEC.md §17.2), so the value a caller wrote must
// survive the narrowing done here: a finite one past f32's range (it would
// arrive as inf) or a nonzero one below FLT_MIN (it would arrive as 0 or a
// subnormal) is refused naming the field. NaN and inf go on to HAL, whose
// message names the descriptor's rule.
float narrow_to_f32(double value, const std::string& field) {
  if (!std::isfinite(value)) return static_cast<float>(value);
  // From halfway between FLT_MAX and 2^128 on a double rounds to inf (and
  // converting it to float is undefined in C++).
  constexpr double kOverflow = 0x1.ffffffp+127;
  const std::string is =
      "field '" + field + "' is " + nb::cast<std::string>(nb::repr(nb::float_(value)));
  if (std::fabs(value) >= kOverflow)
    raise_hal(HAL_ERROR_INVALID_ARGUMENT,
              is + ", which overflows f32 (the op computes in f32): at most 3.4028235e+38 in "
                   "magnitude");
  const float narrowed = static_cast<float>(value);
  if (value != 0.0 && std::fabs(narrowed) < std::numeric_limits<float>::min())
    raise_hal(HAL_ERROR_INVALID_ARGUMENT,
              is + ", which f32 cannot hold (the op computes in f32): 0 or at least "
                   "1.1754944e-38 in magnitude");
  return narrowed;
}

template <typename T>
T number(nb::handle value, const std::string& field) {
  if constexpr (std::is_floating_point_v<T>) {
    if (PyBool_Check(value.ptr()) || (!PyFloat_Check(value.ptr()) && !PyIndex_Check(value.ptr()) &&
                                      !nb::hasattr(value, "__float__")))
      raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, "field '" + field + "' must be a number");
    const double v = python_float(value);
    if constexpr (std::is_same_v<T, float>) {
      return narrow_to_f32(v, field);
    } else {
      return v;
    }
  } else {
    if (!PyIndex_Check(value.ptr()))
      raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, "field '" + field + "' must be an int or a bool");
    const std::optional<T> out = python_integer<T>(value);
    if (!out)
      raise_hal(
          HAL_ERROR_INVALID_ARGUMENT,
          "field '" + field + "': " + nb::cast<std::string>(nb::repr(value)) + " is out of range");
    return *out;
  }
}

// ---- plans ---------------------------------------------------------------------

struct OpPlan : Resource {
  Device device;
  const OpSpec* spec = nullptr;
  DescStorage desc{};
  std::vector<int64_t> numels;            // ADAMW: the descriptor points here
  std::vector<hal_tensor_desc_t> inputs;  // CAT: the descriptor points here
  std::vector<ScalarSlot> scalar_slots;   // the execution's scalars, in order
  hal_op_plan_t handle = nullptr;
  hal_op_plan_info_t info{};
  // One workspace per stream, made on first use: executions on different
  // streams may overlap, so they never share one. The last few streams'
  // only: an older one's is freed (hal_mem_free waits for its work).
  static constexpr size_t kWorkspaceStreams = 4;
  std::vector<std::pair<hal_stream_t, nb::object>> workspaces;

  OpPlan(const Device& dev, const std::string& kind, nb::dict fields, bool deterministic)
      : device(dev), spec(&spec_named(kind)) {
    std::memset(&desc, 0, sizeof desc);
    desc.header.struct_size = spec->size;
    desc.header.kind = spec->kind;
    auto* base = reinterpret_cast<unsigned char*>(&desc);
    for (auto [key, value] : fields) {
      if (!nb::isinstance<nb::str>(key))
        raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, "op fields are named by strings");
      const std::string name = nb::cast<std::string>(key);
      const Field* field = nullptr;
      for (const Field& f : spec->fields)
        if (name == f.name) field = &f;
      if (!field) {
        std::string known;
        for (const Field& f : spec->fields)
          known += std::string(known.empty() ? "" : ", ") + f.name;
        raise_hal(HAL_ERROR_ARGUMENT_MISMATCH,
                  "op '" + kind + "' has no field '" + name + "' (fields: " + known + ")");
      }
      if (value.is_none()) continue;  // left zero: absent
      unsigned char* at = base + field->offset;
      switch (field->type) {
        case FieldType::U32: {
          uint32_t v =
              PyBool_Check(value.ptr()) ? (value.ptr() == Py_True) : number<uint32_t>(value, name);
          std::memcpy(at, &v, sizeof v);
          break;
        }
        case FieldType::BIT: {
          if (!PyBool_Check(value.ptr()) && !PyIndex_Check(value.ptr()))
            raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, "field '" + name + "' must be a bool");
          uint32_t flags;
          std::memcpy(&flags, at, sizeof flags);
          if (PyObject_IsTrue(value.ptr())) flags |= field->bit;
          std::memcpy(at, &flags, sizeof flags);
          break;
        }
        case FieldType::I32: {
          int32_t v = number<int32_t>(value, name);
          std::memcpy(at, &v, sizeof v);
          break;
        }
        case FieldType::I64: {
          int64_t v = number<int64_t>(value, name);
          std::memcpy(at, &v, sizeof v);
          break;
        }
        case FieldType::F32: {
          float v = number<float>(value, name);
          std::memcpy(at, &v, sizeof v);
          break;
        }
        case FieldType::ENUM: {
          if (!nb::isinstance<nb::str>(value))
            raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, "field '" + name + "' must be a name (str)");
          uint32_t v = value_of(field->table(), nb::cast<std::string>(value), name.c_str());
          std::memcpy(at, &v, sizeof v);
          break;
        }
        case FieldType::DTYPE: {
          hal_dtype_t v = dtype_of(value).hal;
          std::memcpy(at, &v, sizeof v);
          break;
        }
        case FieldType::TENSOR: {
          hal_tensor_desc_t t = desc_of(operand_of(value, "field '" + name + "'"));
          std::memcpy(at, &t, sizeof t);
          break;
        }
        case FieldType::NUMELS: {
          numels = int_list(value, name.c_str());
          const int64_t* p = numels.data();
          std::memcpy(at, &p, sizeof p);
          // tensor_count sits with numels: ADAMW is the one op with NUMELS.
          uint32_t count = static_cast<uint32_t>(
              std::min<size_t>(numels.size(), std::numeric_limits<uint32_t>::max()));
          std::memcpy(base + offsetof(hal_op_adamw_desc_t, tensor_count), &count, sizeof count);
          break;
        }
        case FieldType::TENSORS: {
          // CAT's inputs: a sequence of tensors; input_count sits before them.
          nb::object items = nb::steal(PySequence_Fast(value.ptr(), ""));
          if (!items.is_valid()) {
            PyErr_Clear();
            raise_hal(HAL_ERROR_ARGUMENT_MISMATCH,
                      "field '" + name + "' must be a sequence of hal.Tensor or hal.Buffer");
          }
          inputs.clear();
          for (nb::handle item : nb::borrow<nb::sequence>(items))
            inputs.push_back(desc_of(operand_of(item, "field '" + name + "'")));
          const hal_tensor_desc_t* p = inputs.data();
          std::memcpy(at, &p, sizeof p);
          uint32_t count = static_cast<uint32_t>(
              std::min<size_t>(inputs.size(), std::numeric_limits<uint32_t>::max()));
          std::memcpy(base + offsetof(hal_op_cat_desc_t, input_count), &count, sizeof count);
          break;
        }
        case FieldType::PERM: {
          std::vector<int64_t> perm = int_list(value, name.c_str());
          if (perm.size() > HAL_TENSOR_MAX_RANK)
            raise_hal(HAL_ERROR_INVALID_ARGUMENT, "perm has at most 8 entries");
          uint32_t out[HAL_TENSOR_MAX_RANK] = {};
          for (size_t i = 0; i < perm.size(); ++i) {
            if (perm[i] < 0 || perm[i] >= HAL_TENSOR_MAX_RANK)
              raise_hal(HAL_ERROR_INVALID_ARGUMENT, "perm entries must be in [0, 8)");
            out[i] = static_cast<uint32_t>(perm[i]);
          }
          std::memcpy(at, out, sizeof out);
          break;
        }
      }
    }
    scalar_slots = spec->scalars;
    switch (spec->kind) {
      case HAL_OP_BINARY_SCALAR:
        scalar_slots = {{"s", ScalarType::NUMBER}};
        break;
      case HAL_OP_WHERE:
        if (desc.where.a_is_scalar) scalar_slots.push_back({"a", ScalarType::NUMBER});
        if (desc.where.b_is_scalar) scalar_slots.push_back({"b", ScalarType::NUMBER});
        break;
      case HAL_OP_CLAMP:
        if (desc.clamp.min_kind == HAL_CLAMP_BOUND_SCALAR)
          scalar_slots.push_back({"min", ScalarType::NUMBER});
        if (desc.clamp.max_kind == HAL_CLAMP_BOUND_SCALAR)
          scalar_slots.push_back({"max", ScalarType::NUMBER});
        break;
      case HAL_OP_FILL:
        scalar_slots = {{"start", ScalarType::NUMBER}, {"step", ScalarType::NUMBER}};
        break;
      default:
        break;
    }
    hal_device_t d = device.get();
    hal_result_t result;
    {
      InUse use({this});
      nb::gil_scoped_release unlocked;
      result = hal_op_plan_create(d, &desc.header, deterministic ? HAL_OP_PLAN_DETERMINISTIC : 0,
                                  &handle);
    }
    check(result);
    info.struct_size = sizeof info;
    try {
      check(hal_op_plan_get_info(handle, &info));
    } catch (...) {  // the destructor does not run for a throwing constructor
      hal_op_plan_destroy(handle);
      handle = nullptr;
      throw;
    }
  }
  ~OpPlan() override { release(); }
  void release() noexcept override {
    if (!handle) return;
    hal_op_plan_t plan = handle;
    handle = nullptr;
    // The workspaces are Buffers of their own: hal.shutdown releases them in
    // its walk, and dropping them here would unregister them under it.
    give_back_handle([plan] { hal_op_plan_destroy(plan); });
  }
  bool alive() const noexcept override { return handle != nullptr; }
  hal_op_plan_t get() const {
    if (!handle)
      raise_hal(HAL_ERROR_DESTROYED_HANDLE, "the op plan was closed (or hal.shutdown ran)");
    device.get();
    return handle;
  }

  std::string kind_name() const { return hal::util::op_kind_name(spec->kind); }

  std::vector<std::string> operand_names() const {
    std::vector<std::string> names;
    if (spec->kind == HAL_OP_CAT) {
      for (size_t t = 0; t < inputs.size(); ++t)
        names.push_back("inputs[" + std::to_string(t) + "]");
      names.emplace_back("out");
      return names;
    }
    if (spec->kind == HAL_OP_ADAMW) {
      names.emplace_back("grad_norm");
      for (size_t t = 0; t < numels.size(); ++t)
        for (const char* n : {"param", "grad", "m", "v", "master"})
          names.push_back(std::string(n) + "[" + std::to_string(t) + "]");
      return names;
    }
    for (const OperandSlot& slot : spec->operands) names.emplace_back(slot.name);
    return names;
  }

  // The layout of an operand the descriptor implies (hal/ops.h states each):
  // whether the descriptor uses it, its dtype, its shape and the rule.
  struct ImpliedLayout {
    bool used = true;
    hal_dtype_t dtype = HAL_DTYPE_I32;
    std::vector<int64_t> shape;
    const char* rule = "";
  };
  ImpliedLayout implied_layout(Implied implied) const {
    const auto ceil_div = [](int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; };
    const hal_op_attention_desc_t& at = desc.attention;
    ImpliedLayout layout;
    switch (implied) {
      case Implied::kOffsets:
        layout.shape = {int64_t{desc.grouped_matmul.groups} + 1};
        layout.rule = "groups + 1 offsets";
        break;
      case Implied::kCuSeqlens:
        layout.used = at.has_cu_seqlens != 0;
        layout.shape = {int64_t{at.batch} + 1};
        layout.rule = "batch + 1 offsets";
        break;
      case Implied::kSparsity: {
        layout.used = at.sparsity != HAL_ATTENTION_DENSE;
        const bool varlen = at.has_cu_seqlens != 0;
        const int64_t s_q = varlen ? at.max_seqlen_q : at.q.shape[1];
        const int64_t s_k = varlen ? at.max_seqlen_k : at.k.shape[1];
        if (at.sparsity == HAL_ATTENTION_BLOCK_INDICES) {
          layout.shape = {at.batch, at.q.shape[2], ceil_div(s_q, at.block_q), at.topk};
          layout.rule = "[batch, heads, ceil(s_q / block_q), topk]";
        } else {
          layout.dtype = HAL_DTYPE_U8;
          layout.shape = {at.batch, at.q.shape[2], ceil_div(s_q, at.block_q),
                          ceil_div(s_k, at.block_k)};
          layout.rule = "[batch, heads, ceil(s_q / block_q), ceil(s_k / block_k)]";
        }
        break;
      }
      case Implied::kStatus:
        layout.shape = {1};
        layout.rule = "one status word";
        break;
      case Implied::kNone:
        break;
    }
    return layout;
  }

  // Checks operand |i| (given, not None) against what the plan was made for.
  void check_operand(size_t i, const std::string& name, const Operand& op) const {
    const std::string where = kind_name() + " operand " + std::to_string(i) + " '" + name + "'";
    if (!(op.buffer->device == device))
      raise_hal(HAL_ERROR_DEVICE_MISMATCH,
                where + " is on device " + std::to_string(op.buffer->device.index) +
                    ", the plan on device " + std::to_string(device.index));
    if (spec->kind == HAL_OP_ADAMW) {
      // Dense tensors of numels[t] elements: param, grad, then f32 m, v, master.
      if (i == 0) {
        if (op.dtype->hal != HAL_DTYPE_F32)
          raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, where + " must be float32");
        return;
      }
      const size_t t = (i - 1) / 5, role = (i - 1) % 5;
      const hal_dtype_t want = role == 0   ? desc.adamw.param_dtype
                               : role == 1 ? desc.adamw.grad_dtype
                                           : HAL_DTYPE_F32;
      if (op.dtype->hal != want)
        raise_hal(
            HAL_ERROR_ARGUMENT_MISMATCH,
            where + " is " + op.dtype->name + ", the plan needs " + hal::util::dtype_name(want));
      if (!dense_layout(op.shape, op.strides))
        raise_hal(HAL_ERROR_INVALID_ARGUMENT, where + " must be dense (contiguous)");
      int64_t count = 1;
      for (int64_t e : op.shape) count *= e;
      if (count != numels[t])
        raise_hal(HAL_ERROR_INVALID_ARGUMENT,
                  where + " has " + std::to_string(count) + " elements, the plan's tensor " +
                      std::to_string(t) + " " + std::to_string(numels[t]));
      return;
    }
    if (spec->kind == HAL_OP_CAT) {
      const hal_tensor_desc_t& planned = i < inputs.size() ? inputs[i] : desc.cat.out;
      const hal_tensor_desc_t given = desc_of(op);
      bool same = planned.dtype == given.dtype && planned.rank == given.rank;
      for (uint32_t d = 0; same && d < given.rank; ++d)
        same = planned.shape[d] == given.shape[d] && planned.strides[d] == given.strides[d];
      if (!same)
        raise_hal(HAL_ERROR_INVALID_ARGUMENT, where + " is " + layout_text(given) +
                                                  "; the plan was made for " +
                                                  layout_text(planned));
      return;
    }
    const OperandSlot& slot = spec->operands[i];
    if (slot.tensor < 0) {
      // A dense layout the op implies. HAL reads the whole of it from the
      // pointer and can check only that it lies in the allocation: a view
      // of fewer elements (of a larger buffer) would be read past its end,
      // one of another shape reinterpreted. Its shape must be the implied one.
      const ImpliedLayout layout = implied_layout(slot.implied);
      if (!layout.used) return;  // HAL refuses an operand its descriptor does not use
      if (op.dtype->hal != layout.dtype)
        raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, where + " is " + op.dtype->name + ", the op reads " +
                                                   hal::util::dtype_name(layout.dtype));
      if (op.shape != layout.shape)
        raise_hal(HAL_ERROR_INVALID_ARGUMENT, where + " has shape " + dims_text(op.shape) +
                                                  "; the plan reads " + dims_text(layout.shape) +
                                                  " (" + layout.rule + ")");
      if (!dense_layout(op.shape, op.strides))
        raise_hal(HAL_ERROR_INVALID_ARGUMENT, where + " must be dense (contiguous)");
      return;
    }
    hal_tensor_desc_t planned;
    std::memcpy(&planned, reinterpret_cast<const unsigned char*>(&desc) + slot.tensor,
                sizeof planned);
    const hal_tensor_desc_t given = desc_of(op);
    bool same = planned.dtype == given.dtype && planned.rank == given.rank;
    for (uint32_t d = 0; same && d < given.rank; ++d)
      same = planned.shape[d] == given.shape[d] && planned.strides[d] == given.strides[d];
    if (!same)
      raise_hal(HAL_ERROR_INVALID_ARGUMENT, where + " is " + layout_text(given) +
                                                "; the plan was made for " + layout_text(planned));
  }

  // The workspace of |stream|, made on first use. Buffers that leave the list
  // go to |dropped|, which the caller lets go after its execution: freeing
  // one releases the GIL (hal_mem_free waits for the device), which must not
  // happen while the list is being changed.
  nb::object workspace_for(hal_stream_t stream, std::vector<nb::object>& dropped) {
    for (auto& [owner, buffer] : workspaces)
      if (owner == stream) return buffer;
    nb::object buffer = nb::cast(
        new Buffer(device, {info.workspace_bytes}, dtype_named("uint8"), HAL_MEMORY_DEVICE),
        nb::rv_policy::take_ownership);
    // The allocation released the GIL: another thread may have made one meanwhile.
    for (auto& [owner, existing] : workspaces) {
      if (owner == stream) {
        dropped.push_back(std::move(buffer));
        return existing;
      }
    }
    if (workspaces.size() >= kWorkspaceStreams) {
      dropped.push_back(std::move(workspaces.front().second));
      workspaces.erase(workspaces.begin());
    }
    workspaces.emplace_back(stream, buffer);
    return buffer;
  }

  // Python code (a sequence's __getitem__, a scalar's __float__, another
  // thread while an allocation releases the GIL) runs only before the
  // operands' pointers are taken; from then on the buffers are pinned (InUse)
  // until hal_op_execute has returned.
  void execute(nb::sequence operands, nb::sequence scalars, nb::handle workspace, Stream* stream) {
    get();                            // a closed plan raises before anything runs
    std::vector<nb::object> dropped;  // workspaces let go after the call (declared first)
    const nb::tuple items(operands);  // our own references for the whole call
    const size_t n = nb::len(items);
    const std::vector<std::string> names = operand_names();
    if (n != info.operand_count || names.size() != n)
      raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, kind_name() + " takes " +
                                                 std::to_string(info.operand_count) +
                                                 " operands, got " + std::to_string(n));
    const nb::tuple scalar_items(scalars);
    const size_t s = nb::len(scalar_items);
    if (s != info.scalar_count || s != scalar_slots.size())
      raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, kind_name() + " takes " +
                                                 std::to_string(info.scalar_count) +
                                                 " scalars, got " + std::to_string(s));
    std::vector<hal_op_scalar_t> values(s);
    for (size_t i = 0; i < s; ++i) {
      const ScalarSlot& slot = scalar_slots[i];
      switch (slot.type) {
        case ScalarType::NUMBER: {
          nb::handle item = scalar_items[i];
          if (PyBool_Check(item.ptr()) || PyIndex_Check(item.ptr())) {
            values[i].i64 = number<int64_t>(item, slot.name);
            values[i].f64 = python_float(item);
          } else {
            values[i].f64 = number<double>(item, slot.name);
            // The integer field of a float: truncated (integer dtypes take
            // integers; PyTorch converts a float scalar the same way).
            const double f = values[i].f64;
            values[i].i64 = std::isfinite(f) && std::fabs(f) < 9.2e18 ? static_cast<int64_t>(f) : 0;
          }
          break;
        }
        case ScalarType::F64:
          values[i].f64 = number<double>(scalar_items[i], slot.name);
          break;
        case ScalarType::I64:
          values[i].i64 = number<int64_t>(scalar_items[i], slot.name);
          break;
        case ScalarType::U64:
          values[i].u64 = number<uint64_t>(scalar_items[i], slot.name);
          break;
      }
    }
    Stream& st = stream_or_default(stream, device);
    nb::object ws_object;  // held for the call: a later eviction cannot free it under us
    if (info.workspace_bytes) {
      if (!workspace.is_none()) {
        if (!nb::isinstance<Buffer>(workspace))
          raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, "workspace must be a hal.Buffer");
        if (!(nb::cast<Buffer&>(workspace).device == device))
          raise_hal(HAL_ERROR_DEVICE_MISMATCH, "the workspace is on another device");
        ws_object = nb::borrow(workspace);
      } else {
        ws_object = workspace_for(st.get(), dropped);  // may release the GIL (allocation)
      }
    }
    std::vector<void*> pointers(n, nullptr);
    std::vector<Resource*> used{this, &st};
    for (size_t i = 0; i < n; ++i) {
      nb::handle value = items[i];
      if (value.is_none()) continue;
      Operand op = operand_of(value, kind_name() + " operand '" + names[i] + "'");
      check_operand(i, names[i], op);
      pointers[i] = static_cast<unsigned char*>(op.buffer->get()) +
                    static_cast<size_t>(op.offset) * op.dtype->size;
      used.push_back(op.buffer);
    }
    // No Python code runs from here on: the handles read now are the call's.
    hal_op_plan_t plan = get();
    hal_stream_t h = st.get();
    hal_op_exec_args_t args{};
    args.struct_size = sizeof args;
    args.operand_count = static_cast<uint32_t>(n);
    args.scalar_count = static_cast<uint32_t>(s);
    args.operands = pointers.data();
    args.scalars = values.data();
    if (ws_object.is_valid()) {
      Buffer& ws = nb::cast<Buffer&>(ws_object);
      args.workspace = ws.get();
      args.workspace_bytes = ws.nbytes;
      used.push_back(&ws);
    }
    hal_result_t result;
    {
      InUse use(std::move(used));
      nb::gil_scoped_release unlocked;
      result = hal_op_execute(plan, &args, h);
    }
    check(result);
  }
};

std::vector<std::string> split_lines(const char* text) {
  std::vector<std::string> lines;
  std::string line;
  for (const char* p = text; *p; ++p) {
    if (*p == '\n') {
      if (!line.empty()) lines.push_back(line);
      line.clear();
    } else {
      line += *p;
    }
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

nb::object tensor_to_numpy(const Tensor& t) {
  Buffer& b = t.buf();
  check_view(b, t.shape, t.strides, t.offset);
  nb::object whole = t.buffer.attr("to_numpy")().attr("reshape")(-1);
  nb::object np = nb::module_::import_("numpy");
  nb::object tricks = nb::module_::import_("numpy.lib.stride_tricks");
  std::vector<int64_t> byte_strides;
  for (int64_t s : t.strides) byte_strides.push_back(s * static_cast<int64_t>(b.dtype->size));
  nb::object start = whole[nb::slice(nb::int_(t.offset), nb::none(), nb::none())];
  nb::object view = tricks.attr("as_strided")(start, nb::tuple(nb::cast(t.shape)),
                                              nb::tuple(nb::cast(byte_strides)));
  return np.attr("array")(view);
}

}  // namespace

void bind_ops(nb::module_& m) {
  nb::class_<Tensor>(m, "Tensor")
      .def(
          "__init__",
          [](Tensor* self, nb::handle buffer, nb::handle shape, nb::handle strides,
             int64_t offset) {
            if (!nb::isinstance<Buffer>(buffer))
              raise_hal(HAL_ERROR_ARGUMENT_MISMATCH, "hal.Tensor views a hal.Buffer");
            new (self) Tensor(make_view(buffer, shape, strides, offset));
          },
          "buffer"_a, "shape"_a = nb::none(), "strides"_a = nb::none(), "offset"_a = 0,
          nb::sig("def __init__(self, buffer: Buffer, shape: int | Sequence[int] | None = None, "
                  "strides: Sequence[int] | None = None, offset: int = 0) -> None"),
          "A strided view of a Buffer: shape, strides and offset in elements (dense row-major "
          "strides when None). Every element must lie inside the buffer.")
      .def_ro("buffer", &Tensor::buffer, nb::sig("def buffer(self) -> Buffer"))
      .def_prop_ro("shape", [](const Tensor& t) { return nb::tuple(nb::cast(t.shape)); })
      .def_prop_ro("strides", [](const Tensor& t) { return nb::tuple(nb::cast(t.strides)); })
      .def_ro("offset", &Tensor::offset)
      .def_prop_ro("dtype", [](const Tensor& t) { return t.dtype().name; })
      .def_prop_ro("device", [](const Tensor& t) { return t.buf().device; })
      .def_prop_ro(
          "is_contiguous", [](const Tensor& t) { return t.strides == contiguous_strides(t.shape); },
          "True when the strides are dense row-major.")
      .def("to_numpy", &tensor_to_numpy,
           nb::sig("def to_numpy(self) -> numpy.typing.NDArray[typing.Any]"),
           "A new numpy array with a copy of the viewed elements (synchronous).")
      .def(
          "__dlpack__",
          [](const Tensor& t, nb::object stream, nb::object max_version, nb::object dl_device,
             nb::object copy) {
            Buffer& b = t.buf();
            check_view(b, t.shape, t.strides, t.offset);
            auto* data = static_cast<unsigned char*>(b.get()) +
                         static_cast<size_t>(t.offset) * b.dtype->size;
            const std::vector<size_t> shape(t.shape.begin(), t.shape.end());
            return export_dlpack(t.buffer, data, shape, t.strides.data(), std::move(stream),
                                 std::move(max_version), std::move(dl_device), std::move(copy));
          },
          nb::kw_only(), "stream"_a = nb::none(), "max_version"_a = nb::none(),
          "dl_device"_a = nb::none(), "copy"_a = nb::none(),
          nb::sig("def __dlpack__(self, *, stream: Stream | int | None = None, "
                  "max_version: tuple[int, int] | None = None, "
                  "dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> "
                  "typing_extensions.CapsuleType"),
          "A DLPack capsule over the view (kDLCPU, strided; read-only when the buffer is); "
          "the device is synchronised first.")
      .def(
          "__dlpack_device__",
          [](const Tensor& t) {
            Buffer& b = t.buf();
            b.get();
            if (!b.host_visible())
              raise_hal(HAL_ERROR_UNSUPPORTED, "__dlpack_device__: the buffer is not host-visible");
            return std::make_tuple(1, 0);  // kDLCPU, device 0
          },
          nb::sig("def __dlpack_device__(self) -> tuple[int, int]"))
      .def(
          "__array__",
          [](nb::handle self, nb::object dtype, nb::object copy) {
            const Tensor& t = nb::cast<const Tensor&>(self);
            return numpy_array_of(self, t.buf(), dtype, copy, [&] { return tensor_to_numpy(t); });
          },
          "dtype"_a = nb::none(), nb::kw_only(), "copy"_a = nb::none(),
          nb::sig("def __array__(self, dtype: object = None, *, copy: bool | None = None) -> "
                  "numpy.typing.NDArray[typing.Any]"),
          "numpy.asarray(view): a strided view of host-visible memory, else a copy.")
      .def("__repr__", [](const Tensor& t) {
        return "<hal.Tensor " + dims_text(t.shape) + " " + t.dtype().name + " strides " +
               dims_text(t.strides) + " offset " + std::to_string(t.offset) + " of " +
               nb::cast<std::string>(nb::repr(t.buffer)) + ">";
      });

  nb::class_<OpPlan>(m, "OpPlan")
      .def(nb::init<const Device&, const std::string&, nb::dict, bool>(), "device"_a, "op"_a,
           "fields"_a, "deterministic"_a = false,
           "Plans op (a name from hal.ops.OPS) on the device from its descriptor's fields "
           "(tensor fields take a Tensor or a Buffer for their layout; absent ones None). "
           "Raises UnsupportedError with every implementation's reason when none accepts it.")
      .def_ro("device", &OpPlan::device)
      .def_prop_ro("op", &OpPlan::kind_name)
      .def_prop_ro("implementation",
                   [](const OpPlan& p) {
                     p.get();
                     return std::string(p.info.implementation);
                   })
      .def_prop_ro(
          "declines", [](const OpPlan& p) { return split_lines(p.info.declines); },
          "'name: reason' for each implementation tried before the one serving the plan.")
      .def_prop_ro("operands", &OpPlan::operand_names, "The operand names, in execution order.")
      .def_prop_ro("scalars",
                   [](const OpPlan& p) {
                     std::vector<std::string> names;
                     for (const ScalarSlot& s : p.spec->scalars) names.emplace_back(s.name);
                     return names;
                   })
      .def_prop_ro("workspace_bytes", [](const OpPlan& p) { return p.info.workspace_bytes; })
      .def_prop_ro("closed", [](const OpPlan& p) { return !p.alive(); })
      .def("execute", &OpPlan::execute, "operands"_a, "scalars"_a = nb::tuple(), nb::kw_only(),
           "workspace"_a = nb::none(), "stream"_a = nb::none(),
           nb::sig("def execute(self, operands: Sequence[Tensor | Buffer | None], "
                   "scalars: Sequence[float | int] = (), *, workspace: Buffer | None = None, "
                   "stream: Stream | None = None) -> None"),
           "Enqueues one execution on the stream (the device's default stream when None). "
           "Operands in the plan's order (None = absent), each checked against the layout the "
           "plan was made for. A workspace the plan needs is made per stream when not given.")
      .def("close",
           [](OpPlan& p) {
             close_resource(p, "OpPlan");
             p.workspaces.clear();
           })
      .def("__repr__", [](const OpPlan& p) {
        return "<hal.OpPlan " + p.kind_name() + " on device " + std::to_string(p.device.index) +
               (p.alive() ? " by " + std::string(p.info.implementation) : " (closed)") + ">";
      });

  m.def(
      "op_names",
      [] {
        std::vector<std::string> names;
        for (const auto& e : hal::util::op_kind_table()) names.emplace_back(e.short_name);
        return names;
      },
      "Every op of HAL's operators API, by its short name.");
}

}  // namespace halpy
