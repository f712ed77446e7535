// The loops of the cpu plugin's native operators (native_ops.cpp): plain
// functions over ranges of rows or columns, written so the compiler
// vectorises them, each built for AVX-512, AVX2 and baseline x86-64 and
// chosen at load time by what the CPU has (GCC target_clones). No libm call
// sits in a loop: exp is a Cephes-style polynomial (about 1 ulp), so GELU
// and SiLU vectorise.
//
// Element types: the operators' f32 and bf16 (bf16 rounds to nearest even,
// NaN stays NaN, as SPEC §17.6 casts do). Every loop's summation order
// depends on the shape only, so results are the same run to run.
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_KERNELS_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_KERNELS_HPP_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hal/ops.h"

namespace hal::cpu::ops::native {

enum class Type : uint8_t { kF32, kBf16 };

// Element i of an index operand (labels, token ids): i32 or i64.
inline int64_t index_at(const void* indices, bool indices_i64, size_t i) {
  return indices_i64 ? static_cast<const int64_t*>(indices)[i]
                     : static_cast<const int32_t*>(indices)[i];
}

// One operand's storage: a base pointer and its element type.
struct Ref {
  void* data;
  Type type;
};
struct ConstRef {
  const void* data;
  Type type;
};

// out[i] = act(alpha * x[i]), i in [begin, end).
void unary_forward(hal_activation_t activation, float alpha, ConstRef x, Ref out, size_t begin,
                   size_t end);
// grad_x[i] = grad_out[i] * alpha * act'(alpha * x[i]).
void unary_backward(hal_activation_t activation, float alpha, ConstRef x, ConstRef grad_out,
                    Ref grad_x, size_t begin, size_t end);

// Columns [col_begin, col_end) of [rows, cols] row-major tensors:
// grad_pre = grad_out * act'(aux) (NONE: grad_out), and, when grad_bias is
// not null, grad_bias[j] = sum over rows in order of grad_pre (f32).
void bias_activation_backward(hal_activation_t activation, ConstRef grad_out, ConstRef aux,
                              Ref grad_pre, float* grad_bias, size_t rows, size_t cols,
                              size_t col_begin, size_t col_end);

// How a binary op reads its dense inputs along out's flat index: out's shape
// as |rank| dimensions (at least 1; adjacent ones merged where neither input
// changes between broadcasting and not), and each input's element stride in
// each (0 where it broadcasts, so the innermost stride is 0 or 1).
struct BinaryLayout {
  uint32_t rank = 1;
  uint64_t extent[HAL_TENSOR_MAX_RANK] = {1};
  uint64_t stride_a[HAL_TENSOR_MAX_RANK] = {1};
  uint64_t stride_b[HAL_TENSOR_MAX_RANK] = {1};
};

// Calls run(at_a, at_b, i, n) for each run of out's indices [i, i + n) in
// [begin, end) along |layout|'s innermost dimension, in order: a's element
// at_a and b's at_b start the run; each input is read contiguously along it
// where its innermost stride is 1, as one value where it is 0.
template <typename Run>
inline void for_each_binary_run(const BinaryLayout& layout, size_t begin, size_t end, Run&& run) {
  const uint32_t inner = layout.rank - 1;
  // out's index of |begin|, dimension by dimension.
  uint64_t index[HAL_TENSOR_MAX_RANK];
  uint64_t rest = begin;
  for (uint32_t d = layout.rank; d-- > 0;) {
    index[d] = rest % layout.extent[d];
    rest /= layout.extent[d];
  }
  size_t i = begin;
  while (i < end) {
    uint64_t at_a = 0, at_b = 0;
    for (uint32_t d = 0; d < layout.rank; ++d) {
      at_a += index[d] * layout.stride_a[d];
      at_b += index[d] * layout.stride_b[d];
    }
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(layout.extent[inner] - index[inner], end - i));
    run(static_cast<size_t>(at_a), static_cast<size_t>(at_b), i, n);
    i += n;
    index[inner] += n;
    for (uint32_t d = inner; d > 0 && index[d] == layout.extent[d]; --d) {
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

// out[i] = alpha * (a[at_a(i)] OP b[at_b(i)]), i in [begin, end), with at_a
// and at_b |layout|'s: runs along the innermost dimension, each input read
// contiguously or as one value per run.
void binary(hal_binary_op_t op, float alpha, ConstRef a, ConstRef b, const BinaryLayout& layout,
            Ref out, size_t begin, size_t end);

// ---- the PyTorch device's elementwise ops (native_kernels_math.cpp) ----
// Whether unary_math_block computes |op| (the rest is the portable
// implementation's).
bool unary_math_native(hal_unary_math_t op);
// out[i] = op(in[i]) over f32 (in may be out), as SPEC §17.6.6 defines op.
void unary_math_block(hal_unary_math_t op, const float* in, float* out, size_t n);
// out[i] = min(max(in[i], lo), hi) for the bounds given (in may be out);
// NaN propagates.
void clamp_block(const float* in, float* out, size_t n, bool has_lo, float lo, bool has_hi,
                 float hi);
// out[i] = v[i] OP s (s OP v[i] with scalar_first) as 0 or 1; OP EQ .. GE.
void compare_block(hal_binary_op_t op, const float* v, size_t n, float s, bool scalar_first,
                   uint8_t* out);
// out[i] = cond[i] ? a[i] : b[i], i in [begin, end), elements of
// |element_size| bytes (1, 2, 4, 8) copied as they are; a scalar operand is
// its element 0.
void select_elements(const uint8_t* cond, const void* a, bool a_scalar, const void* b,
                     bool b_scalar, void* out, size_t element_size, size_t begin, size_t end);

// Columns [col_begin, col_end) of x [rows, cols]: out[j] = the reduction of
// x[0..rows, j] in row order (SUM and MEAN compensated: Kahan; MAX
// propagates NaN).
void reduce_columns(hal_reduce_kind_t reduce, ConstRef x, Ref out, size_t rows, size_t cols,
                    size_t col_begin, size_t col_end);
// The Kahan sum of x[begin, end) in a fixed order (64 lanes, then the lanes
// and the tail in order), for reductions to one value done in chunks.
float sum_range(ConstRef x, size_t begin, size_t end);
// MAX of x[begin, end), NaN if any is NaN; -inf for an empty range.
float max_range(ConstRef x, size_t begin, size_t end);

// Layernorm (with_mean) or RMSNorm backward, gamma and beta gradients of
// columns [col_begin, col_end): column sums over all rows in row order.
void norm_backward_columns(bool with_mean, const float* x, const float* mean, const float* rstd,
                           const float* grad_y, float* grad_gamma, float* grad_beta, size_t rows,
                           size_t cols, size_t col_begin, size_t col_end);
// grad_x of rows [row_begin, row_end) (grad_x may be grad_y).
void norm_backward_rows(bool with_mean, const float* x, const float* gamma, const float* mean,
                        const float* rstd, const float* grad_y, float* grad_x, size_t cols,
                        size_t row_begin, size_t row_end);

// Layernorm (|layernorm|) or RMSNorm of rows [row_begin, row_end) of x
// [rows, n] into y: the statistics in f32 (layernorm two-pass), mean and rstd
// written when not null, gamma and beta (f32, not null) applied.
void norm_rows(bool layernorm, float epsilon, ConstRef x, const float* gamma, const float* beta,
               Ref y, float* mean, float* rstd, size_t n, size_t row_begin, size_t row_end);

// Softmax or log-softmax (|log|) of rows [row_begin, row_end) of x [rows, n]
// into y (may be x), the row's maximum subtracted; a row of -inf is NaN.
// |around_caches|: y is far larger than the caches, so f32 softmax may write
// it with streaming stores (ordered before the call returns).
void softmax_rows(bool log, ConstRef x, Ref y, size_t n, size_t row_begin, size_t row_end,
                  bool around_caches);

// The backward of softmax_rows from its output y and grad_y, rows [row_begin,
// row_end): softmax grad_x = y * (grad_y - sum(grad_y * y)), log-softmax
// grad_x = grad_y - exp(y) * sum(grad_y). grad_x may be grad_y.
void softmax_backward_rows(bool log, ConstRef y, ConstRef grad_y, Ref grad_x, size_t n,
                           size_t row_begin, size_t row_end);

// The sum of g^2 over grad[begin, end): f32 in 64 lanes, the lanes and the
// tail added in order in f64.
double sum_squares(ConstRef grad, size_t begin, size_t end);

// AdamW's per-step constants (HAL_OP_ADAMW; clip 1 without clipping).
struct AdamwStep {
  float beta1, beta2, epsilon, weight_decay, lr, bias_correction1, bias_correction2, clip;
};
// One AdamW step of elements [begin, end): m, v (and master when not null)
// f32, param and grad f32 or bf16.
void adamw_update(const AdamwStep& step, ConstRef grad, float* m, float* v, float* master,
                  Ref param, size_t begin, size_t end);

// out[0..count) = in[0..count) converted (f32 or bf16 each).
void convert(ConstRef in, Ref out, size_t count);

// A row of cross-entropy as the gradient pass needs it (HAL_OP_CROSS_ENTROPY).
enum class LabelState : uint8_t {
  kIgnored,  // label == ignore_index: not counted, zero gradient
  kValid,    // counted, gradient p - target
  kInvalid,  // a label outside [0, classes): counted, loss NaN, zero gradient
};
// Rows [row_begin, row_end) of logits [rows, classes]: the row's loss (0 when
// ignored, NaN when invalid), its log-sum-exp and state. labels: i32, or i64
// when |labels_i64|. Sums over the classes in a fixed order.
void cross_entropy_rows(ConstRef logits, const void* labels, bool labels_i64, int64_t ignore_index,
                        float smoothing, size_t classes, float* row_loss, float* lse,
                        LabelState* state, size_t row_begin, size_t row_end);
// grad[r, c] = scale * (exp(x - lse) - (1 - s)[c == y] - s / classes) for
// valid rows, 0 for the others (grad may be logits).
void cross_entropy_grad_rows(ConstRef logits, const void* labels, bool labels_i64, float smoothing,
                             size_t classes, const float* lse, const LabelState* state, float scale,
                             Ref grad, size_t row_begin, size_t row_end);

}  // namespace hal::cpu::ops::native

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_KERNELS_HPP_
