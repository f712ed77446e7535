/* HAL public C API: operators. Plan once for a device, execute many times
 * on its streams.
 *
 * An operator is described by a versioned struct (one per op, each starting
 * with hal_op_header_t) whose tensors are hal_tensor_desc_t: dtype, rank,
 * shape and strides in elements. Pointers are not part of a plan: they are
 * given to hal_op_execute, in the operand order each op's struct states.
 *
 * hal_op_plan_create walks the device's ordered implementation list: the
 * plugin's own (tuned) implementation, then the portable one written in the
 * kernel dialect (devices with HAL_MODULE_FORMAT_HAL_DIALECT and
 * HAL_DEVICE_CAP_KERNELS). The first that accepts the descriptor serves the
 * plan; every one that declined says why (hal_op_plan_get_info). There is no
 * host-side fallback: a device with neither gets HAL_ERROR_UNSUPPORTED.
 * SPEC.md §17 specifies every op, its tolerances and its errors. */
#ifndef HAL_OPS_H_
#define HAL_OPS_H_

#include "hal/dtype.h"
#include "hal/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Tensors
 *===------------------------------------------------------------------===*/

#define HAL_TENSOR_MAX_RANK 8

/* A tensor's layout. Element (i0, ..., i{r-1}) lies at
 * base + sum(i_d * strides[d]) elements from the pointer given at execution.
 * shape[d] >= 0 (a tensor with a 0 is empty); strides[d] >= 0, and 0 repeats
 * one element along d (broadcast, allowed only where an op says so). */
typedef struct hal_tensor_desc {
  hal_dtype_t dtype;
  uint32_t rank; /* 0..HAL_TENSOR_MAX_RANK; rank 0 is one element */
  int64_t shape[HAL_TENSOR_MAX_RANK];
  int64_t strides[HAL_TENSOR_MAX_RANK];
} hal_tensor_desc_t;

/* Fills |tensor| as a dense row-major tensor of |shape| (strides computed;
 * an extent <= 0 steps like 1). Every result is defined:
 * - |shape| may be tensor->shape itself: it is read whole before anything is
 *   written;
 * - at most HAL_TENSOR_MAX_RANK extents are read; a larger |rank| is kept
 *   (hal_op_plan_create refuses it);
 * - a stride the extents would take past INT64_MAX (a shape of 2^63 or more
 *   elements) saturates at INT64_MAX, as do the strides outside it, which
 *   hal_op_plan_create refuses as too large to address. */
static inline void hal_tensor_desc_contiguous(hal_tensor_desc_t* tensor, hal_dtype_t dtype,
                                              uint32_t rank, const int64_t* shape) {
  int64_t extents[HAL_TENSOR_MAX_RANK];
  const uint32_t read = rank < HAL_TENSOR_MAX_RANK ? rank : HAL_TENSOR_MAX_RANK;
  int64_t stride = 1;
  uint32_t d;
  for (d = 0; d < HAL_TENSOR_MAX_RANK; ++d) extents[d] = d < read ? shape[d] : 0;
  tensor->dtype = dtype;
  tensor->rank = rank;
  for (d = HAL_TENSOR_MAX_RANK; d-- > 0;) {
    const int64_t step = extents[d] > 0 ? extents[d] : 1;
    tensor->shape[d] = extents[d];
    tensor->strides[d] = d < read ? stride : 0;
    if (d < read) stride = stride > INT64_MAX / step ? INT64_MAX : stride * step;
  }
}

/*===------------------------------------------------------------------===*
 * Plans
 *===------------------------------------------------------------------===*/

/* A planned operator on one device. Owned by the caller. */
typedef struct hal_op_plan_s* hal_op_plan_t;

/* The operators. Values are stable; new ops are only appended. */
typedef enum hal_op_kind HAL_ENUM_TYPE {
  HAL_OP_MATMUL = 1,
  HAL_OP_BIAS_ACTIVATION_BACKWARD = 2,
  HAL_OP_GROUPED_MATMUL = 3,
  HAL_OP_SOFTMAX = 4,
  HAL_OP_SOFTMAX_BACKWARD = 5,
  HAL_OP_NORM = 6,
  HAL_OP_NORM_BACKWARD = 7,
  HAL_OP_BINARY = 8,
  HAL_OP_UNARY = 9,
  HAL_OP_UNARY_BACKWARD = 10,
  HAL_OP_SWIGLU = 11,
  HAL_OP_SWIGLU_BACKWARD = 12,
  HAL_OP_REDUCE = 13,
  HAL_OP_ROPE = 14,
  HAL_OP_EMBEDDING = 15,
  HAL_OP_EMBEDDING_BACKWARD = 16,
  HAL_OP_CROSS_ENTROPY = 17,
  HAL_OP_ADAMW = 18,
  HAL_OP_CAST = 19,
  HAL_OP_PERMUTE = 20,
  HAL_OP_DROPOUT = 21,
  HAL_OP_ATTENTION = 22,
  HAL_OP_ATTENTION_BACKWARD = 23,
  HAL_OP_TOPK_GATING = 24,
  HAL_OP_CONVOLUTION = 25,
  HAL_OP_CONVOLUTION_BACKWARD_DATA = 26,
  HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS = 27,
  HAL_OP_POOLING = 28,
  HAL_OP_POOLING_BACKWARD = 29,
  HAL_OP_BATCH_NORM = 30,
  HAL_OP_BATCH_NORM_BACKWARD = 31,
  HAL_OP_GROUP_NORM = 32,
  HAL_OP_GROUP_NORM_BACKWARD = 33,
  /* 34 is reserved (the convolutional ops). */
  HAL_OP_UNARY_MATH = 35,
  HAL_OP_BINARY_SCALAR = 36,
  HAL_OP_WHERE = 37,
  HAL_OP_CLAMP = 38,
  HAL_OP_SCAN = 39,
  HAL_OP_GATHER = 40,
  HAL_OP_SCATTER = 41,
  HAL_OP_CAT = 42,
  HAL_OP_FILL = 43,
  /* 45..54: the large-model kernels (issue 38). */
  HAL_OP_PAGED_KV_APPEND = 45,
  HAL_OP_PAGED_ATTENTION = 46,
  /* 47..49 are reserved (paged KV cache). */
  HAL_OP_QUANTIZE = 50,
  HAL_OP_DEQUANTIZE = 51,
  HAL_OP_SCALED_MATMUL = 52,
  HAL_OP_FAKE_QUANTIZE = 53,
  HAL_OP_FAKE_QUANTIZE_BACKWARD = 54,
  HAL_OP_KIND_COUNT = 55, /* one past the last op of this version; not an op */
  HAL_OP_KIND_MAX_ENUM = 0x7fffffff
} hal_op_kind_t;

/* The first member of every op descriptor. */
typedef struct hal_op_header {
  size_t struct_size; /* [in] sizeof the op's descriptor */
  const void* next;   /* [in] extension chain, NULL */
  hal_op_kind_t kind; /* which descriptor this is */
  uint32_t reserved;  /* 0 */
} hal_op_header_t;

typedef enum hal_op_plan_flag_bits HAL_ENUM_TYPE {
  HAL_OP_PLAN_FLAG_NONE = 0,
  /* Bitwise-identical results run to run on the same device (no atomics
   * whose order varies, a fixed reduction order). */
  HAL_OP_PLAN_DETERMINISTIC = 1u << 0,
  HAL_OP_PLAN_FLAG_MAX_ENUM = 0x7fffffff
} hal_op_plan_flag_bits_t;
typedef uint32_t hal_op_plan_flags_t;

#define HAL_OP_IMPLEMENTATION_NAME_BYTES 64
#define HAL_OP_DECLINES_BYTES 2048

/* What a plan is. */
typedef struct hal_op_plan_info {
  size_t struct_size; /* [in] sizeof(hal_op_plan_info_t) */
  const void* next;   /* [in] extension chain, NULL */
  hal_op_kind_t kind;
  uint32_t operand_count; /* pointers hal_op_execute takes */
  uint32_t scalar_count;  /* run-time scalars hal_op_execute takes */
  hal_op_plan_flags_t flags;
  size_t workspace_bytes; /* the caller's workspace each execution needs */
  /* "cpu.onednn", "cpu.native", "portable" ... NUL-terminated. */
  char implementation[HAL_OP_IMPLEMENTATION_NAME_BYTES];
  /* One line per implementation tried before it: "name: reason\n";
   * NUL-terminated, cut at a line end when longer. */
  char declines[HAL_OP_DECLINES_BYTES];
} hal_op_plan_info_t;

/* What one implementation of a device's list did with a descriptor
 * (hal_op_query_implementations). */
typedef enum hal_op_verdict HAL_ENUM_TYPE {
  HAL_OP_VERDICT_ACCEPTS = 0,   /* asked, and it would serve the plan */
  HAL_OP_VERDICT_DECLINES = 1,  /* declined, unasked or asked: reason says why */
  HAL_OP_VERDICT_NOT_ASKED = 2, /* after the one that accepts, or no descriptor given */
  HAL_OP_VERDICT_MAX_ENUM = 0x7fffffff
} hal_op_verdict_t;

#define HAL_OP_MAX_CANDIDATES 8
#define HAL_OP_REASON_BYTES 512

/* One implementation of the list. Not extensible (no struct_size): it is an
 * array element of hal_op_implementations_info_t. */
typedef struct hal_op_candidate {
  char name[HAL_OP_IMPLEMENTATION_NAME_BYTES]; /* "cuda.cudnn", "portable"; NUL-terminated */
  hal_op_verdict_t verdict;
  /* DECLINES: why, NUL-terminated (cut at HAL_OP_REASON_BYTES - 1 bytes);
   * otherwise "". */
  char reason[HAL_OP_REASON_BYTES];
} hal_op_candidate_t;

/* A device's implementation list for one op kind, in the order
 * hal_op_plan_create tries it (SPEC.md §17.3), with what each says. */
typedef struct hal_op_implementations_info {
  size_t struct_size; /* [in] sizeof(hal_op_implementations_info_t) */
  const void* next;   /* [in] extension chain, NULL */
  hal_op_kind_t kind;
  uint32_t count; /* entries of candidates, at most HAL_OP_MAX_CANDIDATES */
  hal_op_candidate_t candidates[HAL_OP_MAX_CANDIDATES];
} hal_op_implementations_info_t;

/* A run-time scalar of an execution (AdamW's learning rate, a dropout seed):
 * the op reads the one field of the scalar's type its descriptor states. An
 * f64 scalar is checked as the f32 the op computes with (SPEC.md §17.1): one
 * that is infinite in f32 (1e300) or nonzero below FLT_MIN there is refused. */
typedef struct hal_op_scalar {
  double f64;
  int64_t i64;
  uint64_t u64;
} hal_op_scalar_t;

/* What one execution works on. */
typedef struct hal_op_exec_args {
  size_t struct_size;     /* [in] sizeof(hal_op_exec_args_t) */
  const void* next;       /* [in] extension chain, NULL */
  uint32_t operand_count; /* must equal the plan's */
  uint32_t scalar_count;  /* must equal the plan's */
  void* const* operands;  /* [range(0,operand_count)] in the op's order; NULL = absent optional */
  const hal_op_scalar_t* scalars; /* [range(0,scalar_count)] */
  void* workspace;                /* [optional] device memory of workspace_bytes or more */
  size_t workspace_bytes;
} hal_op_exec_args_t;

/*===------------------------------------------------------------------===*
 * Op descriptors. Operands are listed in execution order. An optional
 * operand is used when its descriptor's flag says so (then it must be given)
 * and must be NULL otherwise. Unless an op says so, an output overlaps no
 * other operand; where it says "may be x", only exactly x (same pointer and
 * layout). Accumulation is f32 for f16 and bf16 tensors.
 *===------------------------------------------------------------------===*/

typedef enum hal_activation HAL_ENUM_TYPE {
  HAL_ACTIVATION_NONE = 0,
  HAL_ACTIVATION_RELU = 1,
  HAL_ACTIVATION_GELU_TANH = 2, /* 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) */
  HAL_ACTIVATION_GELU_ERF = 3,  /* 0.5x(1 + erf(x / sqrt(2))) */
  HAL_ACTIVATION_SILU = 4,      /* x * sigmoid(x) */
  HAL_ACTIVATION_COUNT = 5,
  HAL_ACTIVATION_MAX_ENUM = 0x7fffffff
} hal_activation_t;

typedef enum hal_matmul_flag_bits HAL_ENUM_TYPE {
  HAL_MATMUL_TRANSPOSE_A = 1u << 0, /* use A^T: a is [..., k, m] */
  HAL_MATMUL_TRANSPOSE_B = 1u << 1, /* use B^T: b is [..., n, k] */
  HAL_MATMUL_BIAS = 1u << 2,        /* add bias[n] before the activation */
  HAL_MATMUL_SAVE_AUX = 1u << 3,    /* write the pre-activation to aux */
  HAL_MATMUL_FLAG_MAX_ENUM = 0x7fffffff
} hal_matmul_flag_bits_t;

/* HAL_OP_MATMUL: d = act(alpha * op(a) @ op(b) + beta * c + bias); aux = the
 * value act was applied to. a: [batch..., m, k] (or [..., k, m] transposed),
 * b: [batch..., k, n] (or [..., n, k]), c and d: [batch..., m, n]; batch
 * dimensions (rank - 2 of them, the same rank for all) broadcast with stride
 * 0 in a, b and c. Strided views allowed for every operand.
 * Operands (hal_matmul_operand_t): 0 a, 1 b, 2 c (read when beta != 0; may
 * be d itself, exactly), 3 d, 4 bias [n] (with HAL_MATMUL_BIAS), 5 aux (with
 * SAVE_AUX; d's shape). Dtypes: a and b the same of f32, f16, bf16; c, d,
 * bias, aux each any of the three. */
/* The index of each HAL_OP_MATMUL operand in hal_op_exec_args_t.operands:
 * the one statement of their order, for callers, plugins and the loader. */
typedef enum hal_matmul_operand HAL_ENUM_TYPE {
  HAL_MATMUL_OPERAND_A = 0,
  HAL_MATMUL_OPERAND_B = 1,
  HAL_MATMUL_OPERAND_C = 2,
  HAL_MATMUL_OPERAND_D = 3,
  HAL_MATMUL_OPERAND_BIAS = 4,
  HAL_MATMUL_OPERAND_AUX = 5,
  HAL_MATMUL_OPERAND_COUNT = 6,
  HAL_MATMUL_OPERAND_MAX_ENUM = 0x7fffffff
} hal_matmul_operand_t;

typedef struct hal_op_matmul_desc {
  hal_op_header_t header;      /* kind = HAL_OP_MATMUL */
  uint32_t flags;              /* hal_matmul_flag_bits_t */
  hal_activation_t activation; /* NONE, RELU, GELU_TANH or GELU_ERF */
  float alpha;
  float beta;
  hal_tensor_desc_t a, b, c, d, bias, aux; /* c, bias, aux: ignored when unused */
} hal_op_matmul_desc_t;

/* HAL_OP_BIAS_ACTIVATION_BACKWARD: grad_pre = grad_out * act'(aux) (or
 * grad_out itself for NONE), and with compute_bias_grad the bias gradient
 * grad_bias[n] = sum over rows of grad_pre (f32 accumulation, rows in order:
 * deterministic). grad_out, aux, grad_pre: [rows, n]; activation NONE, RELU,
 * GELU_TANH or GELU_ERF.
 * Operands: 0 grad_out, 1 aux (unused with NONE), 2 grad_pre (may be
 * grad_out), 3 grad_bias [n] (with compute_bias_grad). */
typedef struct hal_op_bias_activation_backward_desc {
  hal_op_header_t header;
  hal_activation_t activation;
  uint32_t compute_bias_grad; /* 0 or 1 */
  hal_tensor_desc_t grad_out, aux, grad_pre, grad_bias;
} hal_op_bias_activation_backward_desc_t;

/* HAL_OP_GROUPED_MATMUL (MoE): for each group g, rows offsets[g] ..
 * offsets[g+1]-1 of a ([rows, k]) times b[g] ([groups, k, n], or
 * [groups, n, k] transposed) give the same rows of d ([rows, n]).
 * offsets: i32 [groups + 1] in device memory, non-decreasing, offsets[0] = 0,
 * offsets[groups] <= rows (rows past it are left as they are). Other values
 * are clamped to [0, rows] and a decreasing pair is an empty group; a row in
 * several groups' ranges gets the last one's product; nothing outside the
 * tensors is ever read or written.
 * Operands: 0 a, 1 b, 2 offsets, 3 d. */
typedef struct hal_op_grouped_matmul_desc {
  hal_op_header_t header;
  uint32_t flags; /* HAL_MATMUL_TRANSPOSE_B only */
  uint32_t groups;
  hal_tensor_desc_t a, b, d;
} hal_op_grouped_matmul_desc_t;

/* HAL_OP_SOFTMAX over the last dimension n: y = softmax(x) or, with log,
 * log_softmax(x), computed with the row's maximum subtracted. x, y: [..., n]
 * (rank >= 1) same shape, any float dtypes, any strides. A row whose
 * elements are all -inf gives NaN (as frameworks do). Operands: 0 x, 1 y
 * (may be x).
 * HAL_OP_SOFTMAX_BACKWARD: grad_x from y (the forward output) and grad_y:
 * softmax: grad_x = y * (grad_y - sum(grad_y * y)); log-softmax:
 * grad_x = grad_y - exp(y) * sum(grad_y) (sums over the row).
 * Operands: 0 y, 1 grad_y, 2 grad_x (may be grad_y). */
typedef struct hal_op_softmax_desc {
  hal_op_header_t header;
  uint32_t log; /* 0: softmax, 1: log-softmax */
  uint32_t reserved;
  hal_tensor_desc_t x, y;   /* backward: x is grad_y's and y the forward y's layout; grad_x as x */
  hal_tensor_desc_t grad_x; /* backward only */
} hal_op_softmax_desc_t;

typedef enum hal_norm_kind HAL_ENUM_TYPE {
  HAL_NORM_LAYERNORM = 0, /* (x - mean) * rstd * gamma + beta */
  HAL_NORM_RMSNORM = 1,   /* x * rstd * gamma, rstd = 1/sqrt(mean(x^2) + eps) */
  HAL_NORM_KIND_MAX_ENUM = 0x7fffffff
} hal_norm_kind_t;

/* HAL_OP_NORM over the last dimension n of x ([rows..., n], rank >= 1; rows
 * = the product of the leading dimensions, 1 for rank 1): layernorm
 * y = (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + epsilon) (var
 * the biased variance, two-pass in f32); rmsnorm y = x * rstd * gamma, rstd
 * = 1/sqrt(mean(x^2) + epsilon). gamma and beta: [n], any float dtype and
 * stride; absent means 1 and 0. n = 0 gives mean and rstd NaN.
 * Operands: 0 x, 1 gamma [n] (optional: has_gamma), 2 beta [n] (layernorm,
 * has_beta), 3 y (may be x), 4 mean (f32 [rows], layernorm, has_mean),
 * 5 rstd (f32 [rows], has_rstd).
 * HAL_OP_NORM_BACKWARD: 0 x, 1 gamma (has_gamma), 2 mean (layernorm), 3 rstd
 * (both required as the forward saved them), 4 grad_y, 5 grad_x (may be
 * grad_y), 6 grad_gamma ([n], f32 or x's dtype, has_grad_gamma: needs
 * has_gamma), 7 grad_beta ([n], has_grad_beta: needs layernorm and
 * has_beta). grad_gamma and grad_beta are column sums over the rows in row
 * order (deterministic always); rows = 0 gives zeros. */
typedef struct hal_op_norm_desc {
  hal_op_header_t header;
  hal_norm_kind_t norm;
  float epsilon; /* forward: finite and >= FLT_MIN (not 0, not subnormal); backward: unused */
  uint32_t has_gamma;
  uint32_t has_beta;
  uint32_t has_mean;       /* forward only: write mean (layernorm) */
  uint32_t has_rstd;       /* forward only: write rstd */
  uint32_t has_grad_gamma; /* backward only */
  uint32_t has_grad_beta;  /* backward only */
  hal_tensor_desc_t x, gamma, beta, y, mean, rstd;
  hal_tensor_desc_t grad_y, grad_x, grad_gamma, grad_beta; /* backward only */
} hal_op_norm_desc_t;

typedef enum hal_binary_op HAL_ENUM_TYPE {
  HAL_BINARY_ADD = 0,
  HAL_BINARY_SUB = 1,
  HAL_BINARY_MUL = 2,
  HAL_BINARY_DIV = 3,
  HAL_BINARY_MAX = 4,
  HAL_BINARY_MIN = 5,
  HAL_BINARY_POW = 6,           /* a^b (C pow) */
  HAL_BINARY_FMOD = 7,          /* a - trunc(a/b) b: a's sign (C fmod, torch.fmod) */
  HAL_BINARY_REMAINDER = 8,     /* a - floor(a/b) b: b's sign (Python %, torch.remainder) */
  HAL_BINARY_FLOOR_DIVIDE = 9,  /* floor(a/b) (Python //) */
  HAL_BINARY_TRUNC_DIVIDE = 10, /* trunc(a/b) */
  HAL_BINARY_ATAN2 = 11,        /* atan2(a, b) */
  HAL_BINARY_EQ = 12,           /* comparisons: out BOOL; NaN compares unequal */
  HAL_BINARY_NE = 13,
  HAL_BINARY_LT = 14,
  HAL_BINARY_LE = 15,
  HAL_BINARY_GT = 16,
  HAL_BINARY_GE = 17,
  HAL_BINARY_LOGICAL_AND = 18, /* nonzero (NaN included) is true; out BOOL */
  HAL_BINARY_LOGICAL_OR = 19,
  HAL_BINARY_LOGICAL_XOR = 20,
  HAL_BINARY_BITWISE_AND = 21, /* integer and BOOL operands only */
  HAL_BINARY_BITWISE_OR = 22,
  HAL_BINARY_BITWISE_XOR = 23,
  HAL_BINARY_OP_COUNT = 24,
  HAL_BINARY_OP_MAX_ENUM = 0x7fffffff
} hal_binary_op_t;

/* HAL_OP_BINARY: out = alpha * (a OP b), broadcasting a and b (stride 0)
 * to out's shape; all three of out's rank, each dimension of a and b out's
 * or 1. MAX and MIN propagate NaN. Operands: 0 a, 1 b, 2 out (may be a
 * exactly when a has out's layout, else b exactly when b has it).
 * Domains (SPEC.md §17.6.6): with a float out (f32, f16, bf16) the op is
 * computed in f32 from a and b of any dtype but f64; with an integer out
 * (i32, i64, i8, u8) a and b are integers or BOOL, computed in i64 modulo
 * 2^64 and stored modulo out's width (DIV and ATAN2 need a float out;
 * integer division or remainder by 0 gives 0). Comparisons and LOGICAL_*
 * write a BOOL out (compared in f32 when a or b is a float, else in i64);
 * BITWISE_* take integer or BOOL operands and an integer or BOOL out.
 * alpha scales float-domain arithmetic and must be 1 otherwise. */
typedef struct hal_op_binary_desc {
  hal_op_header_t header;
  hal_binary_op_t op;
  float alpha;
  hal_tensor_desc_t a, b, out;
} hal_op_binary_desc_t;

/* HAL_OP_UNARY: out = act(alpha * x) (NONE: scaling only).
 * HAL_OP_UNARY_BACKWARD: grad_x = grad_out * alpha * act'(alpha * x).
 * Operands forward: 0 x, 1 out (may be x). Backward: 0 x, 1 grad_out,
 * 2 grad_x (may be grad_out). */
typedef struct hal_op_unary_desc {
  hal_op_header_t header;
  hal_activation_t activation;
  float alpha;
  hal_tensor_desc_t x, out; /* backward: out is grad_out's layout */
  hal_tensor_desc_t grad_x; /* backward only */
} hal_op_unary_desc_t;

/* HAL_OP_SWIGLU: x [..., 2n] holds (gate, up) halves; out [..., n] =
 * silu(gate) * up. Operands: 0 x, 1 out.
 * HAL_OP_SWIGLU_BACKWARD: 0 x, 1 grad_out, 2 grad_x ([..., 2n]). */
typedef struct hal_op_swiglu_desc {
  hal_op_header_t header;
  hal_tensor_desc_t x, out; /* backward: out is grad_out's layout */
  hal_tensor_desc_t grad_x; /* backward only */
} hal_op_swiglu_desc_t;

typedef enum hal_reduce_kind HAL_ENUM_TYPE {
  HAL_REDUCE_KIND_SUM = 0,
  HAL_REDUCE_KIND_MEAN = 1,
  HAL_REDUCE_KIND_MAX = 2,
  HAL_REDUCE_KIND_MIN = 3,
  HAL_REDUCE_KIND_PROD = 4,
  HAL_REDUCE_KIND_ARGMAX = 5, /* out i64: the first index of the largest (a NaN is largest) */
  HAL_REDUCE_KIND_ARGMIN = 6, /* out i64: the first index of the smallest (a NaN is smallest) */
  HAL_REDUCE_KIND_NORM2 = 7,  /* sqrt(sum x^2) */
  HAL_REDUCE_KIND_COUNT = 8,
  HAL_REDUCE_KIND_MAX_ENUM = 0x7fffffff
} hal_reduce_kind_t;

/* HAL_OP_REDUCE over the axes set in axes_mask (bit d = axis d): out has x's
 * rank with 1 in every reduced axis. Reducing an empty axis: sum 0, mean
 * NaN, max -inf, min +inf, prod 1, norm2 0 (ARGMAX and ARGMIN refuse it).
 * MAX, MIN and PROD propagate NaN. ARGMAX/ARGMIN index the reduced axes'
 * elements in row-major order. x float: out float (ARGMAX/ARGMIN: i64).
 * x integer or BOOL: SUM and PROD into an integer out (i64 modulo 2^64,
 * stored modulo out's width), MAX and MIN into x's dtype (on BOOL: any, all),
 * ARGMAX and ARGMIN into i64; MEAN and NORM2 need a float x.
 * Operands: 0 x, 1 out. */
typedef struct hal_op_reduce_desc {
  hal_op_header_t header;
  hal_reduce_kind_t reduce;
  uint32_t axes_mask;
  hal_tensor_desc_t x, out;
} hal_op_reduce_desc_t;

/* HAL_OP_ROPE: rotary embedding of x [batch, seq, heads, dim] into out (may
 * be x). Pair (x1, x2) at position p and frequency index i rotates by angle
 * p * base^(-2i/rotary_dim): pairs are (2i, 2i+1) when interleaved, else
 * (i, i + rotary_dim/2). Dimensions past rotary_dim are copied. positions:
 * i32 [batch, seq] (optional: has_positions; else p = position_offset + s).
 * inverse rotates by -angle (the backward pass).
 * Operands: 0 x, 1 positions, 2 out. */
typedef struct hal_op_rope_desc {
  hal_op_header_t header;
  uint32_t rotary_dim; /* even, <= dim */
  uint32_t interleaved;
  uint32_t inverse;
  uint32_t has_positions;
  float base; /* 10000 in most models; finite and >= FLT_MIN */
  int32_t position_offset;
  hal_tensor_desc_t x, positions, out;
} hal_op_rope_desc_t;

/* HAL_OP_EMBEDDING: out[i, :] = table[ids[i], :]. ids: i32 or i64 [n...],
 * table [vocab, dim], out [n..., dim]. An id outside [0, vocab) gives a zero
 * row (and no gradient).
 * Operands: 0 ids, 1 table, 2 out.
 * HAL_OP_EMBEDDING_BACKWARD: grad_table (f32 or table dtype, [vocab, dim])
 * = (accumulate ? grad_table : 0) + sum over i with ids[i] = v of
 * grad_out[i, :], summed in index order (deterministic always).
 * Operands: 0 ids, 1 grad_out, 2 grad_table. */
typedef struct hal_op_embedding_desc {
  hal_op_header_t header;
  uint32_t accumulate; /* backward only */
  uint32_t reserved;
  hal_tensor_desc_t ids, table, out; /* backward: table = grad_table, out = grad_out */
} hal_op_embedding_desc_t;

/* HAL_OP_CROSS_ENTROPY from logits [rows, classes] and labels (i32 or i64
 * [rows]), with label smoothing s: loss_r = -(1-s) log p[label] - (s/C)
 * sum_c log p[c]; rows whose label is ignore_index contribute 0 and a zero
 * gradient. loss (f32 [1]) = mean over the counted rows (0 when none).
 * grad_logits (optional, logits' layout) = d loss / d logits * grad_scale,
 * grad_scale the execution's scalar 0 (f64; 1.0 for plain training).
 * row_losses (optional, f32 [rows]).
 * Operands: 0 logits, 1 labels, 2 loss, 3 row_losses, 4 grad_logits (may be
 * logits). Scalars: 0 grad_scale. */
typedef struct hal_op_cross_entropy_desc {
  hal_op_header_t header;
  int64_t ignore_index;  /* -100 in most frameworks */
  float label_smoothing; /* 0 <= s < 1 */
  uint32_t has_row_losses;
  uint32_t has_grad;
  uint32_t reserved;
  hal_tensor_desc_t logits, labels, loss, row_losses, grad_logits;
} hal_op_cross_entropy_desc_t;

/* HAL_OP_ADAMW over tensor_count dense tensors in one call. Tensor t has
 * numels[t] elements; its param is param_dtype (f32, f16 or bf16), grad
 * grad_dtype, m and v f32, master (f32, when has_master) the weights the
 * step updates (param then receives them rounded). With max_grad_norm > 0
 * every grad is scaled by min(1, max_grad_norm / (norm + 1e-6)), norm the
 * L2 norm over all grads (written to operand 0 as f32 [1] with
 * has_grad_norm, which computes it even without clipping).
 * Step: g' = g*clip; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 * w -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + weight_decay w).
 * Operands: 0 grad_norm (optional: has_grad_norm), then per tensor 5: param,
 * grad, m, v, master (NULL without has_master). Scalars: 0 lr (f64), 1 step
 * t (i64 >= 1); lr >= 0, 0 or a finite normal f32 once rounded. Workspace:
 * f32 partial sums for the norm. */
typedef struct hal_op_adamw_desc {
  hal_op_header_t header;
  uint32_t tensor_count; /* 1..4096 */
  uint32_t has_master;
  hal_dtype_t param_dtype;
  hal_dtype_t grad_dtype;
  const int64_t* numels; /* [range(0,tensor_count)] copied at planning */
  /* beta1, beta2 in [0, 1); epsilon finite and >= FLT_MIN; weight_decay
   * finite and >= 0; max_grad_norm finite */
  float beta1, beta2, epsilon, weight_decay, max_grad_norm;
  uint32_t has_grad_norm; /* 0 or 1 */
} hal_op_adamw_desc_t;

/* HAL_OP_CAST: out = in converted to out's dtype (round to nearest even;
 * float to integer truncates toward zero, saturating; NaN to 0; integer to
 * integer saturates), same shape,
 * any strides (in may broadcast). Operands: 0 in, 1 out.
 * HAL_OP_PERMUTE: out[i_perm...] = in: out.shape[d] = in.shape[perm[d]],
 * with a cast when the dtypes differ. Operands: 0 in, 1 out. */
typedef struct hal_op_cast_desc {
  hal_op_header_t header;
  uint32_t perm[HAL_TENSOR_MAX_RANK]; /* HAL_OP_PERMUTE only */
  hal_tensor_desc_t in, out;
} hal_op_cast_desc_t;

/* HAL_OP_DROPOUT: out = keep ? x / (1 - p) : 0, keep decided for element i
 * (row-major index in x) by Philox-4x32-10 with key = seed (low 32 bits,
 * high 32 bits) and counter = (offset + i/4) mod 2^64 in words 0 (low) and
 * 1 (high), words 2 and 3 zero: keep when the (i%4)-th output word / 2^32
 * >= p.
 * backward regenerates the same mask: grad_x = keep ? grad_out / (1-p) : 0
 * (x is then grad_out's layout). Operands: 0 x, 1 out (may be x), 2 mask (u8
 * [x's shape], optional: has_mask). Scalars: 0 seed (u64), 1 offset (u64). */
typedef struct hal_op_dropout_desc {
  hal_op_header_t header;
  float probability; /* 0 <= p < 1 */
  uint32_t backward;
  uint32_t has_mask;
  uint32_t reserved;
  hal_tensor_desc_t x, out, mask;
} hal_op_dropout_desc_t;

typedef enum hal_causal_alignment HAL_ENUM_TYPE {
  HAL_CAUSAL_NONE = 0,
  /* query i sees keys j <= i (aligned at the first row: TileLang's) */
  HAL_CAUSAL_TOP_LEFT = 1,
  /* query i sees keys j <= i + s_k - s_q (aligned at the last row:
   * FlashAttention's); a query that sees no key gets output 0, lse -inf */
  HAL_CAUSAL_BOTTOM_RIGHT = 2,
  HAL_CAUSAL_MAX_ENUM = 0x7fffffff
} hal_causal_alignment_t;

typedef enum hal_attention_sparsity HAL_ENUM_TYPE {
  HAL_ATTENTION_DENSE = 0,
  /* u8 block_mask [batch, heads, ceil(s_q/block_q), ceil(s_k/block_k)]:
   * nonzero = the block is computed */
  HAL_ATTENTION_BLOCK_MASK = 1,
  /* i32 block_indices [batch, heads, ceil(s_q/block_q), topk]: the key blocks
   * each query block sees; -1 = none; a repeated index counts once */
  HAL_ATTENTION_BLOCK_INDICES = 2,
  HAL_ATTENTION_SPARSITY_MAX_ENUM = 0x7fffffff
} hal_attention_sparsity_t;

/* HAL_OP_ATTENTION on the FlashAttention contract: q [batch, s_q, heads, d],
 * k and v [batch, s_k, kv_heads, d] (heads a multiple of kv_heads: query head
 * h uses kv head h / (heads / kv_heads)); out like q; lse f32 [batch, heads,
 * s_q], the natural-log (base e) log-sum-exp of the scaled scores (-inf for
 * a row that sees no key). Varlen (has_cu_seqlens): batch sequences packed
 * along s (q [1, total_q, heads, d]), cu_seqlens_q/k i32 [batch + 1] in device
 * memory; the causal alignment applies per sequence; an empty sequence is
 * allowed. Causal and sparse masks combine (a key is seen when both allow).
 * cu_seqlens and the block sparsity tensor are dense, their shapes implied by
 * the fields (in varlen, s_q and s_k of the block shapes are max_seqlen_q and
 * max_seqlen_k). Device data is read clamped: entry b of cu_seqlens as
 * clamp(cu[b], entry b-1, rows) (entry 0 from 0); q rows outside every
 * sequence get out 0, lse -inf and grad 0; a block outside the sparsity
 * tensor is not computed. Strided views allowed for every tensor.
 * Operands: 0 q, 1 k, 2 v, 3 out, 4 lse, 5 cu_seqlens_q, 6 cu_seqlens_k,
 * 7 block_mask or block_indices.
 * HAL_OP_ATTENTION_BACKWARD: 0 q, 1 k, 2 v, 3 out, 4 lse, 5 cu_seqlens_q,
 * 6 cu_seqlens_k, 7 block sparsity, 8 grad_out, 9 grad_q, 10 grad_k,
 * 11 grad_v (grad_k, grad_v with k's layout). Workspace per the plan. */
typedef struct hal_op_attention_desc {
  hal_op_header_t header;
  hal_causal_alignment_t causal;
  hal_attention_sparsity_t sparsity;
  float scale; /* softmax scale, finite; 0 means 1/sqrt(d) */
  uint32_t has_cu_seqlens;
  uint32_t batch;                      /* sequences when varlen; else q.shape[0] */
  uint32_t max_seqlen_q, max_seqlen_k; /* varlen only: bounds on the lengths */
  uint32_t block_q, block_k;           /* sparse only */
  uint32_t topk;                       /* BLOCK_INDICES only */
  hal_tensor_desc_t q, k, v, out, lse;
  hal_tensor_desc_t grad_out, grad_q, grad_k, grad_v; /* backward only */
} hal_op_attention_desc_t;

/* ---- Ops of the PyTorch device (issue 33). Their integer dtypes are i32,
 * i64, i8, u8; BOOL is its own class. Float-domain math is f32 (f16 and bf16
 * widened, the result rounded once). Integer arithmetic wraps modulo the
 * width; conversions (a value of one dtype stored to another) follow
 * HAL_OP_CAST (round to nearest even, saturating, NaN to 0; to BOOL: x != 0).
 * "Broadcasting" means HAL_OP_BINARY's rule: out's rank, each dimension
 * out's or 1 (or a stride 0). A run-time scalar of such an op is read from
 * its f64 field when the op computes in floats, else from its i64 field. */

typedef enum hal_unary_math HAL_ENUM_TYPE {
  /* float x and out only */
  HAL_UNARY_MATH_EXP = 0,
  HAL_UNARY_MATH_EXP2 = 1,
  HAL_UNARY_MATH_EXPM1 = 2,
  HAL_UNARY_MATH_LOG = 3,
  HAL_UNARY_MATH_LOG2 = 4,
  HAL_UNARY_MATH_LOG10 = 5,
  HAL_UNARY_MATH_LOG1P = 6,
  HAL_UNARY_MATH_SQRT = 7,
  HAL_UNARY_MATH_RSQRT = 8,
  HAL_UNARY_MATH_RECIPROCAL = 9,
  HAL_UNARY_MATH_SIN = 10,
  HAL_UNARY_MATH_COS = 11,
  HAL_UNARY_MATH_TAN = 12,
  HAL_UNARY_MATH_TANH = 13,
  HAL_UNARY_MATH_ATAN = 14,
  HAL_UNARY_MATH_SIGMOID = 15,
  HAL_UNARY_MATH_ERF = 16,
  HAL_UNARY_MATH_ERFINV = 17,
  /* float, or an integer x with out of x's dtype */
  HAL_UNARY_MATH_ABS = 18,
  HAL_UNARY_MATH_NEG = 19,
  HAL_UNARY_MATH_SIGN = 20, /* -1, 0 or 1; NaN gives 0 (torch.sign) */
  HAL_UNARY_MATH_FLOOR = 21,
  HAL_UNARY_MATH_CEIL = 22,
  HAL_UNARY_MATH_ROUND = 23, /* to nearest, ties to even (torch.round) */
  HAL_UNARY_MATH_TRUNC = 24,
  /* any x; out BOOL */
  HAL_UNARY_MATH_LOGICAL_NOT = 25,
  HAL_UNARY_MATH_ISNAN = 26,
  HAL_UNARY_MATH_ISINF = 27,
  HAL_UNARY_MATH_ISFINITE = 28,
  /* integer or BOOL x, out of x's dtype (on BOOL: logical not) */
  HAL_UNARY_MATH_BITWISE_NOT = 29,
  HAL_UNARY_MATH_COUNT = 30,
  HAL_UNARY_MATH_MAX_ENUM = 0x7fffffff
} hal_unary_math_t;

/* HAL_OP_UNARY_MATH: out = op(x), same shape, any strides; the dtypes per
 * op as the enum groups them (float ones may mix). Operands: 0 x, 1 out
 * (may be x exactly). */
typedef struct hal_op_unary_math_desc {
  hal_op_header_t header;
  hal_unary_math_t op;
  uint32_t reserved; /* 0 */
  hal_tensor_desc_t x, out;
} hal_op_unary_math_desc_t;

/* HAL_OP_BINARY_SCALAR: out = alpha * (x OP s), or alpha * (s OP x) with
 * scalar_first, s the execution's scalar 0 (its f64 field when
 * scalar_is_float, else its i64 field). Ops, dtypes and domains as
 * HAL_OP_BINARY's with s as the other operand: a float s is a float
 * operand (converted to f32), an integer s an i64 one. Operands: 0 x,
 * 1 out (may be x exactly). Scalars: 0 s. */
typedef struct hal_op_binary_scalar_desc {
  hal_op_header_t header;
  hal_binary_op_t op;
  float alpha;
  uint32_t scalar_first;    /* 0 or 1 */
  uint32_t scalar_is_float; /* 0 or 1 */
  hal_tensor_desc_t x, out;
} hal_op_binary_scalar_desc_t;

/* HAL_OP_WHERE: out = cond ? a : b. cond BOOL or U8 (nonzero is true), a
 * and b any dtype (converted to out's), each broadcasting to out's shape;
 * or a (b) is a run-time scalar with a_is_scalar (b_is_scalar), read as the
 * f64 field for a float or f64 out, else the i64 field, and converted to
 * out's dtype. out any dtype. Operands: 0 cond, 1 a (NULL when a scalar),
 * 2 b (NULL when a scalar), 3 out (may be a exactly, else b exactly).
 * Scalars: a's (with a_is_scalar), then b's (with b_is_scalar). */
typedef struct hal_op_where_desc {
  hal_op_header_t header;
  uint32_t a_is_scalar;              /* 0 or 1 */
  uint32_t b_is_scalar;              /* 0 or 1 */
  hal_tensor_desc_t cond, a, b, out; /* a, b: ignored when a scalar */
} hal_op_where_desc_t;

typedef enum hal_clamp_bound HAL_ENUM_TYPE {
  HAL_CLAMP_BOUND_NONE = 0,
  HAL_CLAMP_BOUND_TENSOR = 1, /* a tensor broadcasting to x's shape */
  HAL_CLAMP_BOUND_SCALAR = 2, /* a run-time scalar */
  HAL_CLAMP_BOUND_COUNT = 3,
  HAL_CLAMP_BOUND_MAX_ENUM = 0x7fffffff
} hal_clamp_bound_t;

/* HAL_OP_CLAMP: out = min(max(x, lo), hi) with each bound absent, a tensor
 * or a run-time scalar; lo > hi gives hi (torch.clamp); NaN in x or in a
 * bound gives NaN. x and out float (any mix, f32 math) with float tensor
 * bounds, or x, out and tensor bounds of integer dtypes (out x's dtype;
 * bounds converted to i64). Operands: 0 x, 1 min (a tensor bound), 2 max
 * (a tensor bound), 3 out (may be x exactly). Scalars: min's, then max's,
 * for each scalar bound. */
typedef struct hal_op_clamp_desc {
  hal_op_header_t header;
  hal_clamp_bound_t min_kind;
  hal_clamp_bound_t max_kind;
  hal_tensor_desc_t x, min, max, out; /* min, max: ignored unless TENSOR */
} hal_op_clamp_desc_t;

typedef enum hal_scan_kind HAL_ENUM_TYPE {
  HAL_SCAN_SUM = 0,  /* cumsum */
  HAL_SCAN_PROD = 1, /* cumprod */
  HAL_SCAN_KIND_COUNT = 2,
  HAL_SCAN_KIND_MAX_ENUM = 0x7fffffff
} hal_scan_kind_t;

/* HAL_OP_SCAN: the inclusive scan of x along axis: out[..., i, ...] =
 * x[..., 0, ...] OP ... OP x[..., i, ...], in index order (deterministic
 * always). x float with a float out (f32 accumulation; sums compensated),
 * or x integer or BOOL with an integer out (i64 modulo 2^64, stored modulo
 * out's width). Same shape, rank >= 1, any strides. Operands: 0 x, 1 out
 * (may be x exactly). */
typedef struct hal_op_scan_desc {
  hal_op_header_t header;
  hal_scan_kind_t scan;
  uint32_t axis; /* < x.rank */
  hal_tensor_desc_t x, out;
} hal_op_scan_desc_t;

/* HAL_OP_GATHER (torch.gather): out[p] = x[p with p[axis] replaced by
 * index[p]] for every index p of out's shape. x has out's rank and
 * x.shape[d] >= out.shape[d] for d != axis; index (i32 or i64) has out's
 * shape, any strides (index_select is a 1-D index viewed with stride 0 in
 * every dimension but axis); x and out of one dtype, any. An index outside
 * [0, x.shape[axis]) reads nothing: out[p] = 0 and status is raised.
 * Operands: 0 x, 1 index, 2 out, 3 status.
 *
 * status (gather and scatter): i32 [1], dense, required. An execution that
 * meets an out-of-range index sets status[0] to 1; nothing ever clears it,
 * so one zeroed word can collect the errors of many executions. */
typedef struct hal_op_gather_desc {
  hal_op_header_t header;
  uint32_t axis;
  uint32_t reserved; /* 0 */
  hal_tensor_desc_t x, index, out;
} hal_op_gather_desc_t;

typedef enum hal_scatter_mode HAL_ENUM_TYPE {
  HAL_SCATTER_REPLACE = 0, /* out[...] = src[p]: the last p in row-major order wins */
  HAL_SCATTER_ADD = 1,     /* out[...] += src[p], in row-major order of p */
  HAL_SCATTER_MODE_COUNT = 2,
  HAL_SCATTER_MODE_MAX_ENUM = 0x7fffffff
} hal_scatter_mode_t;

/* HAL_OP_SCATTER (torch's scatter_, scatter_add_; index_copy_ and
 * index_add_ with a 1-D index viewed with stride 0): for every index p of
 * index's shape, in row-major order, out[p with p[axis] replaced by
 * index[p]] is replaced by (REPLACE) or added src[p] (ADD, each sum rounded
 * to out's dtype). Deterministic always. out is updated in place. index
 * (i32 or i64), src and out have one rank; index.shape[d] <=
 * src.shape[d], and <= out.shape[d] for d != axis; src and out of one
 * dtype (ADD: not BOOL). An index outside [0, out.shape[axis]) writes
 * nothing and raises status (HAL_OP_GATHER). Operands: 0 index, 1 src,
 * 2 out (read and written), 3 status. */
typedef struct hal_op_scatter_desc {
  hal_op_header_t header;
  hal_scatter_mode_t mode;
  uint32_t axis;
  hal_tensor_desc_t index, src, out;
} hal_op_scatter_desc_t;

#define HAL_CAT_MAX_INPUTS 4096

/* HAL_OP_CAT: out = the inputs joined along axis in order (input t fills
 * out's indices from the sum of the earlier inputs' extents along axis).
 * Every input has out's rank and out's extents but along axis (where 0 is
 * allowed); any dtypes (converted to out's), any strides. Operands:
 * 0 .. input_count-1 the inputs, input_count out. */
typedef struct hal_op_cat_desc {
  hal_op_header_t header;
  uint32_t axis;
  uint32_t input_count;            /* 1..HAL_CAT_MAX_INPUTS */
  const hal_tensor_desc_t* inputs; /* [range(0,input_count)] copied at planning */
  hal_tensor_desc_t out;
} hal_op_cat_desc_t;

/* HAL_OP_FILL: out[i] = start + i * step, i the row-major index of each
 * element (step 0: every element is start; a rank-1 out: arange). A float
 * or f64 out is computed in f64 and rounded once; an integer out in i64
 * (modulo 2^64) and converted; BOOL gets value != 0. Any dtype, any
 * strides. Operands: 0 out. Scalars: 0 start, 1 step. */
typedef struct hal_op_fill_desc {
  hal_op_header_t header;
  hal_tensor_desc_t out;
} hal_op_fill_desc_t;

/* ---- The paged KV cache (issue 38; SPEC.md §17.6.11). A cache holds
 * num_blocks blocks of block_size token slots each:
 *   k_cache [num_blocks, block_size, kv_heads, head_dim],
 *   v_cache [num_blocks, block_size, kv_heads, head_dim_v] (any strides),
 * or, with values_in_keys (MLA's latent cache, FlashMLA's layout), k_cache
 * alone, whose rows' first head_dim_v elements are the values. Sequence b's
 * token at position p (from 0) lives in slot p % block_size of block
 * block_table[b, p / block_size]; block_table is i32 [batch,
 * max_blocks_per_seq] and seq_lens i32 [batch] (any strides), both device
 * data. Entries past a sequence's last block are never read (pad them with
 * anything, -1 say); blocks may be shared between sequences (a common
 * prefix).
 *
 * Device data is checked at execution, before anything is written: a
 * sequence length outside [0, max_blocks_per_seq * block_size] (for the
 * append: the length after it), or a block-table entry a sequence uses
 * outside [0, num_blocks), raises the status word (the required last
 * operand, i32 [1], GATHER's rule: an atomic maximum, never cleared) to the
 * hal_op_status_t naming the operand, and the execution writes nothing else
 * at all: no cache slot, no out, no lse. */

/* What a status word holds: the largest code any execution raised it to. */
typedef enum hal_op_status HAL_ENUM_TYPE {
  HAL_OP_STATUS_OK = 0,
  HAL_OP_STATUS_INDEX_OUT_OF_RANGE = 1, /* GATHER, SCATTER: an index outside its axis */
  HAL_OP_STATUS_BLOCK_TABLE = 2,        /* paged KV: a block_table entry outside the cache */
  HAL_OP_STATUS_SEQ_LENS = 3,           /* paged KV: a seq_lens entry outside its blocks */
  HAL_OP_STATUS_MAX_ENUM = 0x7fffffff
} hal_op_status_t;

/* HAL_OP_PAGED_KV_APPEND: new token t of sequence b goes to position
 * seq_lens[b] + t (seq_lens: the lengths before the append; the caller
 * advances them): k_new[b, t] to k_cache and v_new[b, t] to v_cache, each
 * converted to the cache's dtype (round to nearest even). With rope_dim > 0
 * the key's dims [rope_offset, rope_offset + rope_dim) are rotated on the way
 * in as HAL_OP_ROPE rotates a row of rotary_dim = rope_dim at that position
 * (pair i: angle p * rope_base^(-2i/rope_dim), interleaved or half-split
 * within the slice); other dims are copied. MLA: head_dim 576, rope_offset
 * 512, rope_dim 64, values_in_keys. k_new [batch, s_new, kv_heads, head_dim],
 * v_new [batch, s_new, kv_heads, head_dim_v], any float dtypes and strides.
 * A slot two new tokens name (blocks shared by two sequences) gets one of
 * their values. Operands: 0 k_new, 1 v_new (NULL with values_in_keys),
 * 2 block_table, 3 seq_lens, 4 k_cache, 5 v_cache (NULL with
 * values_in_keys), 6 status. Caches are updated in place (in-out). */
typedef struct hal_op_paged_kv_append_desc {
  hal_op_header_t header;    /* kind = HAL_OP_PAGED_KV_APPEND */
  uint32_t values_in_keys;   /* 0 or 1 */
  uint32_t rope_dim;         /* 0: no rotation; else even, rope_offset + rope_dim <= head_dim */
  uint32_t rope_offset;      /* 0 when rope_dim is 0 */
  uint32_t rope_interleaved; /* 0 or 1 */
  float rope_base;           /* > 0 and finite with rope_dim (10000 in most models) */
  uint32_t reserved;         /* 0 */
  hal_tensor_desc_t k_new, v_new, block_table, seq_lens, k_cache, v_cache;
} hal_op_paged_kv_append_desc_t;

/* HAL_OP_PAGED_ATTENTION: decode attention over a paged cache (FlashMLA's
 * and FlashAttention's with_kvcache contract). Sequence b has len_b =
 * seq_lens[b] keys (its s_q new tokens included: append first); query t of
 * q [batch, s_q, heads, head_dim] sits at position len_b - s_q + t and, with
 * causal, sees keys j <= that position (bottom-right: causal among the new
 * tokens, speculative decoding), else all len_b keys. Query head h uses kv
 * head h / (heads / kv_heads) (GQA; MLA: kv_heads 1, head_dim 576,
 * values_in_keys, head_dim_v 512). Scores are scale * q.k (scale 0 means
 * 1/sqrt(head_dim)); out [batch, s_q, heads, head_dim_v] is the softmax-
 * weighted sum of the values, lse f32 [batch, heads, s_q] the natural-log
 * log-sum-exp of the scaled scores; a query that sees no key gets out 0 and
 * lse -inf. f32 accumulation whatever the dtypes.
 * Split-KV: each sequence's keys are cut at block boundaries into chunks
 * computed in parallel and merged by their lse. num_splits = N > 0: at most
 * N chunks of ceil(blocks_b / N) blocks each, whatever the device, so the
 * result depends on N, not on the thread count; 0: the implementation
 * chooses (the cpu plugin from the lengths and its thread count).
 * Operands: 0 q, 1 k_cache, 2 v_cache (NULL with values_in_keys),
 * 3 block_table, 4 seq_lens, 5 out, 6 lse, 7 status. Workspace per the plan. */
typedef struct hal_op_paged_attention_desc {
  hal_op_header_t header;  /* kind = HAL_OP_PAGED_ATTENTION */
  uint32_t causal;         /* 0 or 1 */
  uint32_t values_in_keys; /* 0 or 1 */
  float scale;             /* finite; 0 selects 1/sqrt(head_dim) */
  uint32_t num_splits;     /* 0: the implementation's choice; else 1..4096 */
  hal_tensor_desc_t q, k_cache, v_cache, block_table, seq_lens, out, lse;
} hal_op_paged_attention_desc_t;

/* HAL_OP_TOPK_GATING: for each token (row of logits [tokens, experts]) the
 * k largest experts (ties: lower index first), indices i32 [tokens, k] in
 * descending order, weights f32 [tokens, k]: softmax over all experts taken
 * at the chosen ones, renormalised to sum 1 when renormalize.
 * Operands: 0 logits, 1 weights, 2 indices. */
typedef struct hal_op_topk_gating_desc {
  hal_op_header_t header;
  uint32_t k;
  uint32_t renormalize;
  hal_tensor_desc_t logits, weights, indices;
} hal_op_topk_gating_desc_t;

/*===------------------------------------------------------------------===*
 * Convolutional networks: convolution, pooling, batch and group norm.
 * Activations are [N, C, spatial...] or [N, spatial..., C] as the layout
 * says (the dimension order of the descriptors; strides are free, so a
 * channels-last tensor may also be described channels-first with NHWC
 * strides, as PyTorch does). 1, 2 or 3 spatial dimensions; per-dimension
 * parameters use their first spatial_dims entries, outer first (D, H, W).
 *===------------------------------------------------------------------===*/

#define HAL_CONV_MAX_SPATIAL_DIMS 3

typedef enum hal_channel_layout HAL_ENUM_TYPE {
  /* [N, C, spatial...]: NCW, NCHW, NCDHW; a filter [C_out, C_in/groups, k...] */
  HAL_CHANNELS_FIRST = 0,
  /* [N, spatial..., C]: NWC, NHWC, NDHWC; a filter [C_out, k..., C_in/groups] */
  HAL_CHANNELS_LAST = 1,
  HAL_CHANNELS_COUNT = 2,
  HAL_CHANNELS_MAX_ENUM = 0x7fffffff
} hal_channel_layout_t;

typedef enum hal_conv_flag_bits HAL_ENUM_TYPE {
  HAL_CONV_BIAS = 1u << 0,       /* forward: add bias; backward weights: write grad_bias */
  HAL_CONV_RESIDUAL = 1u << 1,   /* forward: add residual (y's shape) before the activation */
  HAL_CONV_TRANSPOSED = 1u << 2, /* the transposed convolution of the same geometry */
  HAL_CONV_FLAG_MAX_ENUM = 0x7fffffff
} hal_conv_flag_bits_t;

/* HAL_OP_CONVOLUTION, _BACKWARD_DATA, _BACKWARD_WEIGHTS. The convolution
 * from an input of spatial size i to an output of size o, per spatial
 * dimension with kernel k (the filter's extent), stride s >= 1, dilation
 * d >= 1, padding pad_begin and pad_end >= 0 (zeros, each side its own):
 *   o = floor((i + pad_begin + pad_end - d(k - 1) - 1) / s) + 1 >= 1
 *   out[n, co, o] = sum over ci of co's group and taps t of
 *                   in[n, ci, o*s - pad_begin + t*d] * w[co, ci % (C_in/groups), t]
 * (in read as 0 outside [0, i)). C_in and C_out divisible by groups;
 * w is [C_out, C_in/groups, k...] (channels-last: [C_out, k..., C_in/groups]).
 * Without HAL_CONV_TRANSPOSED x is the input and y the output of that
 * convolution. With it, the op is the transposed convolution (PyTorch's
 * conv_transpose, w [C_in, C_out/groups, k...]): its forward is the
 * convolution's backward-data with x in grad_y's place, so y has the size
 * i and x the size o above (output_padding < stride is a y larger within
 * the floor). Per kind (x, w, y are the desc fields; in the backward kinds
 * they describe the gradients' layouts):
 *  - CONVOLUTION: y = act(conv(x, w) + bias[C_out] + residual).
 *    Operands: 0 x, 1 w, 2 bias (HAL_CONV_BIAS), 3 residual (HAL_CONV_RESIDUAL;
 *    may be y), 4 y.
 *  - CONVOLUTION_BACKWARD_DATA: grad_x (x's layout) from grad_y (y's).
 *    Operands: 0 grad_y, 1 w, 2 grad_x.
 *  - CONVOLUTION_BACKWARD_WEIGHTS: grad_w (w's layout) and, with
 *    HAL_CONV_BIAS, grad_bias[C_out] (bias's layout) = grad_y summed over
 *    N and space. Operands: 0 x, 1 grad_y, 2 grad_w, 3 grad_bias.
 * Dtypes f32, f16, bf16: x and w alike in the forward (grad_y and w in
 * backward data, x and grad_y in backward weights); outputs, bias and
 * residual each any of the three; f32 accumulation. Any strides. The
 * activation is the forward's (any hal_activation_t; NONE in backward).
 * Workspace per the plan. */
typedef struct hal_op_convolution_desc {
  hal_op_header_t header;
  hal_channel_layout_t layout;
  uint32_t spatial_dims; /* 1, 2 or 3 */
  uint32_t flags;        /* hal_conv_flag_bits_t */
  uint32_t groups;       /* >= 1; groups = C_in = C_out is depthwise */
  hal_activation_t activation;
  uint32_t reserved; /* 0 */
  int64_t stride[HAL_CONV_MAX_SPATIAL_DIMS];
  int64_t dilation[HAL_CONV_MAX_SPATIAL_DIMS];
  int64_t pad_begin[HAL_CONV_MAX_SPATIAL_DIMS];
  int64_t pad_end[HAL_CONV_MAX_SPATIAL_DIMS];
  hal_tensor_desc_t x, w, y, bias, residual; /* bias, residual: ignored when unused */
} hal_op_convolution_desc_t;

typedef enum hal_pooling_kind HAL_ENUM_TYPE {
  HAL_POOLING_MAX = 0,
  HAL_POOLING_AVERAGE = 1,
  HAL_POOLING_KIND_COUNT = 2,
  HAL_POOLING_KIND_MAX_ENUM = 0x7fffffff
} hal_pooling_kind_t;

typedef enum hal_pooling_flag_bits HAL_ENUM_TYPE {
  HAL_POOLING_INDICES = 1u << 0,           /* max: the forward writes, the backward reads them */
  HAL_POOLING_COUNT_INCLUDE_PAD = 1u << 1, /* average: padding counts in the divisor */
  HAL_POOLING_CEIL_MODE = 1u << 2,         /* the output size rounded up (PyTorch's ceil_mode) */
  HAL_POOLING_ADAPTIVE = 1u << 3,          /* windows from the sizes alone (below) */
  HAL_POOLING_FLAG_MAX_ENUM = 0x7fffffff
} hal_pooling_flag_bits_t;

/* HAL_OP_POOLING, HAL_OP_POOLING_BACKWARD over the spatial dimensions of
 * x [N, C, i...] into y [N, C, o...] (or channels-last). Output o's window
 * per dimension: positions o*stride - pad_begin + t*dilation, t in
 * [0, kernel); o = floor((i + pad_begin + pad_end - eff) / stride) + 1 with
 * eff = dilation (kernel - 1) + 1 (CEIL_MODE: rounded up, less one when the
 * last window would start at or past i + pad_begin); pad_begin, pad_end <=
 * eff / 2. ADAPTIVE: window o is [floor(o i / O), ceil((o + 1) i / O)) and
 * kernel, stride, dilation, padding are ignored. MAX takes the first
 * largest element in the window's row-major order (a NaN counts as larger
 * than any number, the last NaN wins; a window with no element of x gives
 * -inf and index -1); indices (i32 or i64, y's shape) hold its flat
 * row-major position in its (n, c) plane of x (h * W + w in 2-D: PyTorch's).
 * AVERAGE (dilation 1) divides the window's sum of x by divisor_override
 * when > 0, else by the count of its positions inside x (COUNT_INCLUDE_PAD:
 * inside [-pad_begin, i + pad_end)).
 * Backward: grad_x[p] = sum over the windows that contain p of grad_y[o] /
 * divisor (AVERAGE) or of grad_y[o] where indices[o] names p (MAX).
 * Operands: forward 0 x, 1 y, 2 indices (INDICES); backward 0 grad_y (y's
 * layout), 1 indices (MAX: required), 2 grad_x (x's layout). */
typedef struct hal_op_pooling_desc {
  hal_op_header_t header;
  hal_pooling_kind_t pooling;
  hal_channel_layout_t layout;
  uint32_t spatial_dims; /* 1, 2 or 3 */
  uint32_t flags;        /* hal_pooling_flag_bits_t */
  int64_t kernel[HAL_CONV_MAX_SPATIAL_DIMS];
  int64_t stride[HAL_CONV_MAX_SPATIAL_DIMS];
  int64_t dilation[HAL_CONV_MAX_SPATIAL_DIMS];
  int64_t pad_begin[HAL_CONV_MAX_SPATIAL_DIMS];
  int64_t pad_end[HAL_CONV_MAX_SPATIAL_DIMS];
  int64_t divisor_override;        /* average only: 0 = none */
  hal_tensor_desc_t x, y, indices; /* backward: grad_x's, grad_y's layouts */
} hal_op_pooling_desc_t;

typedef enum hal_batch_norm_flag_bits HAL_ENUM_TYPE {
  HAL_BATCH_NORM_TRAINING = 1u << 0,       /* batch statistics (else the running ones) */
  HAL_BATCH_NORM_SCALE = 1u << 1,          /* scale[C] given (else 1) */
  HAL_BATCH_NORM_SHIFT = 1u << 2,          /* shift[C] given (else 0) */
  HAL_BATCH_NORM_UPDATE_RUNNING = 1u << 3, /* forward training: update the running stats */
  HAL_BATCH_NORM_SAVE_STATS = 1u << 4,     /* forward training: write saved_mean, saved_rstd */
  HAL_BATCH_NORM_RELU = 1u << 5,           /* y = relu(...); the backward reads y */
  HAL_BATCH_NORM_GRAD_SCALE = 1u << 6,     /* backward: write grad_scale */
  HAL_BATCH_NORM_GRAD_SHIFT = 1u << 7,     /* backward: write grad_shift */
  HAL_BATCH_NORM_FLAG_MAX_ENUM = 0x7fffffff
} hal_batch_norm_flag_bits_t;

/* HAL_OP_BATCH_NORM per channel c over the m = N x spatial values of x
 * ([N, C, ...] or [N, ..., C], rank >= 2): y = (x - mean) * rstd * scale
 * + shift, rstd = 1/sqrt(var + epsilon). TRAINING: mean and var (biased,
 * two-pass in f32) of the batch; saved_mean, saved_rstd (f32 [C]) get them;
 * UPDATE_RUNNING: running_mean = (1 - momentum) running_mean + momentum
 * mean, running_var likewise with the unbiased var * m / (m - 1) (m >= 2),
 * momentum the execution's scalar 0 (f64, in [0, 1]). Without TRAINING
 * mean and var are running_mean, running_var.
 * Operands: 0 x, 1 scale, 2 shift, 3 running_mean, 4 running_var (read
 * without TRAINING, read and written with UPDATE_RUNNING), 5 y (may be x),
 * 6 saved_mean, 7 saved_rstd. Scalars: 0 momentum (UPDATE_RUNNING only).
 * HAL_OP_BATCH_NORM_BACKWARD with g = grad_y (RELU: 0 where y <= 0) and
 * xhat = (x - mean) * rstd: grad_shift = sum g, grad_scale = sum g xhat;
 * TRAINING (mean, rstd the saved ones): grad_x = scale rstd (g -
 * grad_shift/m - xhat grad_scale/m); else (the running ones): grad_x =
 * g scale rstd. Operands: 0 x, 1 grad_y, 2 scale, 3 saved_mean,
 * 4 saved_rstd (TRAINING), 5 running_mean, 6 running_var (else), 7 y
 * (RELU), 8 grad_x (may be grad_y), 9 grad_scale, 10 grad_shift.
 * Dtypes: x, y, grad_* any float; scale, shift, running stats any float,
 * [C]; saved stats f32 [C]. Sums in a fixed order (deterministic). */
typedef struct hal_op_batch_norm_desc {
  hal_op_header_t header;
  hal_channel_layout_t layout;
  uint32_t flags; /* hal_batch_norm_flag_bits_t */
  float epsilon;  /* finite, >= FLT_MIN; a TRAINING backward (saved rstd): >= 0 */
  uint32_t reserved;
  hal_tensor_desc_t x, y, scale, shift, running_mean, running_var, saved_mean, saved_rstd;
  hal_tensor_desc_t grad_y, grad_x, grad_scale, grad_shift; /* backward only */
} hal_op_batch_norm_desc_t;

typedef enum hal_group_norm_flag_bits HAL_ENUM_TYPE {
  HAL_GROUP_NORM_SCALE = 1u << 0,      /* scale[C] given (else 1) */
  HAL_GROUP_NORM_SHIFT = 1u << 1,      /* shift[C] given (else 0) */
  HAL_GROUP_NORM_SAVE_STATS = 1u << 2, /* forward: write mean and rstd */
  HAL_GROUP_NORM_GRAD_SCALE = 1u << 3, /* backward: write grad_scale */
  HAL_GROUP_NORM_GRAD_SHIFT = 1u << 4, /* backward: write grad_shift */
  HAL_GROUP_NORM_FLAG_MAX_ENUM = 0x7fffffff
} hal_group_norm_flag_bits_t;

/* HAL_OP_GROUP_NORM: per (n, group), over its C/groups channels and all
 * spatial positions: mean, var (biased, two-pass in f32), rstd =
 * 1/sqrt(var + epsilon), y = (x - mean) * rstd * scale[c] + shift[c].
 * mean, rstd: f32 [N, groups]. Operands: 0 x, 1 scale, 2 shift, 3 y (may be
 * x), 4 mean, 5 rstd (SAVE_STATS).
 * HAL_OP_GROUP_NORM_BACKWARD with g = grad_y * scale, xhat as above, sums
 * over a group's elements: grad_x = rstd (g - mean(g) - xhat mean(g xhat));
 * grad_scale[c] = sum over N and space of grad_y xhat, grad_shift[c] of
 * grad_y. Operands: 0 x, 1 grad_y, 2 scale, 3 mean, 4 rstd, 5 grad_x (may be
 * grad_y), 6 grad_scale, 7 grad_shift. */
typedef struct hal_op_group_norm_desc {
  hal_op_header_t header;
  hal_channel_layout_t layout;
  uint32_t groups; /* >= 1, divides C */
  uint32_t flags;  /* hal_group_norm_flag_bits_t */
  float epsilon;   /* forward: finite, >= FLT_MIN; backward (saved rstd): >= 0 */
  hal_tensor_desc_t x, y, scale, shift, mean, rstd;
  hal_tensor_desc_t grad_y, grad_x, grad_scale, grad_shift; /* backward only */
} hal_op_group_norm_desc_t;

/*===------------------------------------------------------------------===*
 * Low precision (SPEC.md §17.7): int8 and the OCP 8-bit floats as quantized
 * storage with f32 scales, the scaled (DeepGEMM-style block-scaled) matmul,
 * and fake quantization for quantization-aware training.
 *
 * A quantized tensor q stands for q * scale. q is seen as a matrix [rows,
 * cols] (cols = its last dimension, rows = the product of the others) cut
 * into blocks of hal_quant_blocks_t's rows x cols elements, one f32 scale
 * per block: scale is f32 [rows / blocks.rows, cols / blocks.cols] (rank 2,
 * any strides). A block extent of 0 means the whole dimension; a nonzero one
 * must divide it. Per tensor: {0, 0} (scale [1, 1]); per row (per output
 * channel of a weight [n, k]): {1, 0}; per column: {0, 1}; DeepGEMM's
 * activations: {1, 128}; its weights: {128, 128}.
 * Quantizing rounds v = x / scale (an IEEE f32 division) to the quantized
 * type with round to nearest even, saturating: I8 to [-128, 127], F8_E4M3
 * to +-448, F8_E5M2 to +-57344 (never to an infinity; HAL_OP_CAST differs
 * for E5M2, §17.6.3); NaN gives 0 in I8 and NaN in the 8-bit floats.
 *===------------------------------------------------------------------===*/

typedef struct hal_quant_blocks {
  uint32_t rows; /* 0: one block spans every row */
  uint32_t cols; /* 0: one block spans every column */
} hal_quant_blocks_t;

typedef enum hal_quantize_flag_bits HAL_ENUM_TYPE {
  /* HAL_OP_QUANTIZE reads the scales from scale (static scaling) instead
   * of computing and writing them. */
  HAL_QUANTIZE_GIVEN_SCALE = 1u << 0,
  HAL_QUANTIZE_FLAG_MAX_ENUM = 0x7fffffff
} hal_quantize_flag_bits_t;

/* HAL_OP_QUANTIZE: x (f32, f16, bf16) to q (I8, F8_E4M3 or F8_E5M2, x's
 * shape, rank >= 1). Without GIVEN_SCALE each block's scale is amax / qmax
 * (amax = the largest |x| of the block, qmax = 127, 448 or 57344; a block
 * whose amax is 0 gets scale 1; a NaN in the block makes its scale NaN) and
 * is written to scale. Operands: 0 x, 1 q, 2 scale (output; an input with
 * GIVEN_SCALE).
 * HAL_OP_DEQUANTIZE: x = q * scale, in f32, rounded once to x's dtype (f32,
 * f16, bf16); flags must be 0. Operands: 0 q, 1 scale, 2 x. */
typedef struct hal_op_quantize_desc {
  hal_op_header_t header;
  uint32_t flags; /* hal_quantize_flag_bits_t */
  hal_quant_blocks_t blocks;
  uint32_t reserved; /* 0 */
  hal_tensor_desc_t x, q, scale;
} hal_op_quantize_desc_t;

/* HAL_OP_SCALED_MATMUL: d[m, j] = sum over k of A(m, k) B(j, k), with A = a
 * * a_scale and B = b * b_scale dequantized blockwise (the NT layout of
 * DeepGEMM: both operands K-major). a [m, k] and b [n, k] (groups = 0), or
 * b [groups, n, k] and b_scale [groups, n / b_blocks.rows, k /
 * b_blocks.cols] with rows offsets[g] .. offsets[g+1]-1 of a and d taken
 * by expert g (groups >= 1: the MoE form, offsets as HAL_OP_GROUPED_MATMUL
 * reads them: i32 [groups + 1], clamped, rows outside every segment left as
 * they are). a and b both I8, or each F8_E4M3 or F8_E5M2; d f32, bf16 or
 * f16 [m, n]; any strides. k is summed in chunks of the smaller of the two
 * scales' column blocks (the larger must be a multiple of it): within a
 * chunk exactly (int8 products in i32, 8-bit float products in f32), then
 * acc += chunk * a_scale * b_scale in f32, chunks in order (deterministic).
 * Operands: 0 a, 1 a_scale, 2 b, 3 b_scale, 4 offsets (groups >= 1), 5 d. */
typedef struct hal_op_scaled_matmul_desc {
  hal_op_header_t header;
  uint32_t groups; /* 0: one matmul; >= 1: the grouped (MoE) form */
  uint32_t reserved;
  hal_quant_blocks_t a_blocks, b_blocks; /* b_blocks over b's [n, k] */
  hal_tensor_desc_t a, a_scale, b, b_scale, offsets, d;
} hal_op_scaled_matmul_desc_t;

typedef enum hal_fake_quantize_flag_bits HAL_ENUM_TYPE {
  /* HAL_OP_FAKE_QUANTIZE_BACKWARD writes grad_scale (a learned scale). */
  HAL_FAKE_QUANTIZE_GRAD_SCALE = 1u << 0,
  /* Both directions: v = x * r with r = 1 / s rounded to f32, instead of
   * x / s (PyTorch's fake_quantize kernels multiply by the reciprocal; the
   * two differ by one quantum where x / s lies within an ulp of a rounding
   * boundary). */
  HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE = 1u << 1,
  /* Backward, qdtype I8 only: an element is inside when its rounded value
   * lies in [lo, hi] (-128.5 <= v < 127.5, ties to even), PyTorch's mask,
   * instead of lo <= v <= hi (LSQ's). */
  HAL_FAKE_QUANTIZE_CLIP_ROUNDED = 1u << 2,
  HAL_FAKE_QUANTIZE_FLAG_MAX_ENUM = 0x7fffffff
} hal_fake_quantize_flag_bits_t;

/* HAL_OP_FAKE_QUANTIZE (quantization-aware training): y = Q(x / s) * s for
 * each element, s its block's scale (scale f32, > 0 expected, learned or
 * fixed), Q the rounding of a quantize to qdtype above (I8: an integer in
 * [-128, 127]; F8: an 8-bit float, saturating). x and y f32, f16 or bf16,
 * the same shape. Operands: 0 x, 1 scale, 2 y (may be x).
 * HAL_OP_FAKE_QUANTIZE_BACKWARD, with v = x / s and [lo, hi] = [-128, 127]
 * (I8) or [-qmax, qmax] (F8): the straight-through estimator grad_x =
 * grad_y where lo <= v <= hi, else 0 (NaN v: 0); with GRAD_SCALE, LSQ's
 * scale gradient grad_scale = grad_scale_factor * the sum over the block of
 * grad_y * (Q(v) - v inside, lo below, hi above; 0 for NaN v), summed in
 * f32, the block's elements in row-major order (deterministic). Operands: 0 x,
 * 1 scale, 2 grad_y, 3 grad_x (may be grad_y), 4 grad_scale (f32, scale's
 * shape; GRAD_SCALE). */
typedef struct hal_op_fake_quantize_desc {
  hal_op_header_t header;
  hal_dtype_t qdtype; /* HAL_DTYPE_I8, F8_E4M3 or F8_E5M2 */
  uint32_t flags;     /* hal_fake_quantize_flag_bits_t: forward RECIPROCAL_SCALE only */
  hal_quant_blocks_t blocks;
  float grad_scale_factor;       /* backward with GRAD_SCALE: finite (LSQ's g = 1/sqrt(n qmax)) */
  uint32_t reserved;             /* 0 */
  hal_tensor_desc_t x, scale, y; /* y: forward only */
  hal_tensor_desc_t grad_y, grad_x, grad_scale; /* backward only */
} hal_op_fake_quantize_desc_t;

/*===------------------------------------------------------------------===*
 * Functions
 *===------------------------------------------------------------------===*/

/* Plans the op |desc| describes on |device|. Thread-safe.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_INVALID_HANDLE,
 * HAL_ERROR_NULL_POINTER (desc, out_plan), HAL_ERROR_INVALID_ARGUMENT (an
 * unknown kind or flag, a struct_size smaller than the op's v1 struct, a
 * descriptor breaking its op's rules, float fields checked as the f32 the op
 * computes with: the message names the field and the rule),
 * HAL_ERROR_UNSUPPORTED (every implementation declined: the message
 * lists each with its reason), HAL_ERROR_OUT_OF_MEMORY. */
HAL_API hal_result_t hal_op_plan_create(hal_device_t device, const hal_op_header_t* desc,
                                        hal_op_plan_flags_t flags, hal_op_plan_t* out_plan);

/* Describes |plan|. Thread-safe.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_INVALID_HANDLE,
 * HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_NULL_POINTER,
 * HAL_ERROR_INVALID_ARGUMENT (struct_size too small). */
HAL_API hal_result_t hal_op_plan_get_info(hal_op_plan_t plan, hal_op_plan_info_t* out_info);

/* Lists |device|'s implementations of |kind| in the order hal_op_plan_create
 * tries them. With |desc| (of that kind), each is asked in turn, exactly as
 * hal_op_plan_create(device, desc, flags) would ask it, until one accepts
 * (it is not kept: nothing is planned); those after it are not asked. With
 * |desc| NULL none is asked: only the declines known before planning (a
 * plugin with no implementation of its own for |kind|, HAL_OPS_IMPLEMENTATIONS)
 * are given. Thread-safe; may compile kernels as hal_op_plan_create does.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_INVALID_HANDLE,
 * HAL_ERROR_NULL_POINTER (out_info), HAL_ERROR_INVALID_ARGUMENT (an unknown
 * kind or flag, desc->kind not |kind|, struct_size too small, a descriptor
 * breaking its op's rules), HAL_ERROR_OUT_OF_MEMORY, an implementation's
 * failure while planning (as hal_op_plan_create). A list that declines
 * everything is not an error; nothing is written on a failure. */
HAL_API hal_result_t hal_op_query_implementations(hal_device_t device, hal_op_kind_t kind,
                                                  const hal_op_header_t* desc,
                                                  hal_op_plan_flags_t flags,
                                                  hal_op_implementations_info_t* out_info);

/* Enqueues one execution of |plan| on |stream|, which must be on the plan's
 * device. Every operand lies inside a HAL allocation reachable by the device
 * over the whole extent its tensor describes; nothing is written when a
 * check fails. Thread-safe; executions of one plan may run concurrently.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_INVALID_HANDLE,
 * HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_NULL_POINTER (args; a required
 * operand), HAL_ERROR_INVALID_ARGUMENT (counts, an optional operand given
 * that the plan does not use, a forbidden overlap, an operand outside its
 * allocation, too little workspace, a run-time scalar breaking its op's rule
 * in f32), HAL_ERROR_DEVICE_MISMATCH (stream or an
 * operand on another device), HAL_ERROR_DEVICE_LOST. */
HAL_API hal_result_t hal_op_execute(hal_op_plan_t plan, const hal_op_exec_args_t* args,
                                    hal_stream_t stream);

/* Destroys |plan|; executions already enqueued complete.
 * hal_op_plan_destroy(NULL) is a no-op.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_INVALID_HANDLE,
 * HAL_ERROR_DESTROYED_HANDLE. */
HAL_API hal_result_t hal_op_plan_destroy(hal_op_plan_t plan);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_OPS_H_ */
