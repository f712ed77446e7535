// HAL_OP_MATMUL on cublasLtMatmul:
//   d = act(alpha * op(a) @ op(b) + beta * c + bias)
// HAL's matrices are row-major views with arbitrary strides; cuBLASLt's are
// column-major with one leading dimension. A row-major d is a column-major
// d^T, so the plan computes d^T = op(b)^T op(a)^T (cuBLASLt's A is HAL's b,
// its B HAL's a); a column-major d is taken as it is (d = op(a) op(b)). Each
// input then maps to a column-major layout with CUBLAS_OP_N when its rows
// are adjacent in memory, or with CUBLAS_OP_T when its columns are, whatever
// HAL's TRANSPOSE flag said: a transpose is only a choice of strides.
// The batch dimensions merge into one strided batch (BATCH_COUNT and
// STRIDED_BATCH_OFFSET per layout; a broadcast operand has offset 0).
// Epilogues: BIAS, RELU, RELU_BIAS, GELU, GELU_BIAS, with the bias a dense
// vector over d's columns (cuBLASLt's "rows of D" after the transposition),
// and GELU_AUX, GELU_AUX_BIAS for SAVE_AUX with GELU_TANH (cuBLASLt saves
// GELU's input, which is HAL's pre-activation aux).
// Compute type CUBLAS_COMPUTE_32F, scale type f32: TF32 would round the
// inputs to 10 mantissa bits, far outside the f32 tolerance of SPEC §17.5.
//
// Everything is made at planning: the descriptors, the layouts and the
// algorithms (cublasLtMatmulAlgoGetHeuristic, twice: for operands aligned to
// 16 bytes, and for operands aligned only to their element, since HAL's
// pointers may be any element of an allocation). An execution binds the
// pointers, picks the algorithm by their alignment and calls cublasLtMatmul
// on the stream with the caller's workspace (the plan reports the larger of
// the two algorithms' needs as its workspace).
//
// Declined (the portable implementation serves them), each with its reason:
// SAVE_AUX without GELU_TANH, an aux cuBLASLt cannot lay out (another dtype
// than d, another orientation, a leading dimension or batch stride not a
// multiple of 8), GELU_ERF, empty problems, a d with no unit stride in its last two
// dimensions, an input with neither, a bias with a column-major d or a
// stride other than 1, a c laid out unlike d, c of another dtype than d,
// d of a 16-bit type other than a's, batch dimensions that do not merge into
// one, more than 2^31 - 1 batches, and whatever cuBLASLt's heuristic has no
// algorithm for (its status is the decline's native code).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../device.hpp"
#include "../stream.hpp"
#include "cublaslt.hpp"
#include "hal_util/names.hpp"
#include "ops.hpp"

namespace hal::cuda::ops {
namespace {

// The alignment the fast algorithm is chosen for (cuBLASLt's vectorised
// kernels load 16 bytes at a time).
constexpr size_t kFastAlignment = 16;

// A logical [rows, cols] matrix of an operand, with its element strides.
struct Matrix {
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 0;  // between rows i, i+1; columns j, j+1
};

// The transposed logical matrix (same memory).
Matrix transposed(const Matrix& m) {
  return {m.cols, m.rows, m.col_stride, m.row_stride};
}

// The last two dimensions of |t| as a matrix, swapped when |transpose|.
Matrix matrix_of(const hal_tensor_desc_t& t, bool transpose) {
  const uint32_t r = t.rank;
  const Matrix m{t.shape[r - 2], t.shape[r - 1], t.strides[r - 2], t.strides[r - 1]};
  return transpose ? transposed(m) : m;
}

// How cuBLASLt stores a logical matrix: a column-major layout (rows, cols,
// ld) read with |op|.
struct Layout {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  cublasOperation_t op = CUBLAS_OP_N;
};

// The column-major layout of |m| read as it is (CUBLAS_OP_N: adjacent rows
// in memory), when it has one. An extent of 1 has no stride to speak of.
bool as_column_major(const Matrix& m, Layout* out) {
  if (m.row_stride != 1 && m.rows != 1) return false;
  const int64_t ld = m.cols == 1 ? m.rows : m.col_stride;
  if (ld < m.rows) return false;  // columns overlap: not one leading dimension
  *out = {static_cast<uint64_t>(m.rows), static_cast<uint64_t>(m.cols), ld, CUBLAS_OP_N};
  return true;
}

// The layout of an input: as it is, or as the column-major storage of its
// transpose read with CUBLAS_OP_T.
bool as_input(const Matrix& m, Layout* out) {
  if (as_column_major(m, out)) return true;
  if (!as_column_major(transposed(m), out)) return false;
  out->op = CUBLAS_OP_T;
  return true;
}

std::string strides_text(const Matrix& m) {
  // snprintf, not string concatenation: GCC 12's -Wrestrict misfires on the
  // latter at -O3.
  char text[128];
  std::snprintf(text, sizeof(text), "[%lld, %lld] with strides (%lld, %lld)",
                static_cast<long long>(m.rows), static_cast<long long>(m.cols),
                static_cast<long long>(m.row_stride), static_cast<long long>(m.col_stride));
  return text;
}

bool cuda_type(hal_dtype_t dtype, cudaDataType_t* out) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      *out = CUDA_R_32F;
      return true;
    case HAL_DTYPE_F16:
      *out = CUDA_R_16F;
      return true;
    case HAL_DTYPE_BF16:
      *out = CUDA_R_16BF;
      return true;
    default:
      return false;
  }
}

// The one strided batch the batch dimensions of the used operands merge
// into: dimensions of extent 1 drop out, and neighbours p, q merge when
// every operand steps through q densely within p (strides[p] ==
// strides[q] * shape[q]; broadcast operands, 0 and 0, merge too).
struct Batch {
  int64_t count = 1;
  std::vector<int64_t> strides;  // per operand, in elements
};

bool merge_batch(const std::vector<const hal_tensor_desc_t*>& operands, const hal_tensor_desc_t& d,
                 Batch* out) {
  const uint32_t batch_rank = d.rank - 2;
  int64_t kept = -1;  // the innermost dimension kept so far (all merge into it)
  out->count = 1;
  out->strides.assign(operands.size(), 0);
  for (uint32_t dim = batch_rank; dim-- > 0;) {
    const int64_t extent = d.shape[dim];
    if (extent == 1) continue;
    if (kept < 0) {
      kept = dim;
      for (size_t i = 0; i < operands.size(); ++i) out->strides[i] = operands[i]->strides[dim];
      out->count = extent;
      continue;
    }
    // |dim| is outside the merged block of out->count batches.
    for (size_t i = 0; i < operands.size(); ++i) {
      if (operands[i]->strides[dim] != out->strides[i] * out->count) return false;
    }
    out->count *= extent;
  }
  return true;
}

// What a plan owns of cuBLASLt, destroyed through the library that made it.
struct MatmulState {
  std::shared_ptr<const CublasLt> lt;
  cublasLtHandle_t handle = nullptr;  // the device's (DeviceBlas), outlives the plan's executions
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t fast{}, any{};
  bool has_fast = false, has_any = false;
  size_t workspace = 0;
  bool swap = true;      // d^T = op(b)^T op(a)^T: cuBLASLt's A is HAL's b
  bool reads_c = false;  // beta != 0
  bool has_bias = false;
  bool has_aux = false;
  float alpha = 1.0f, beta = 0.0f;
  // The bias and aux pointers are attributes of the shared descriptor: an
  // execution sets them and calls cublasLtMatmul under this lock, so
  // concurrent executions of one plan (on different streams) never see each
  // other's.
  mutable std::mutex pointer_mutex;

  ~MatmulState() {
    const CublasLtApi& api = lt->api();
    for (cublasLtMatrixLayout_t layout : {a, b, c, d}) {
      if (layout != nullptr) api.cublasLtMatrixLayoutDestroy(layout);
    }
    if (desc != nullptr) api.cublasLtMatmulDescDestroy(desc);
  }
};

class MatmulPlan final : public OpPlan {
 public:
  MatmulPlan(Device& device, std::unique_ptr<MatmulState> state)
      : device_(device), state_(std::move(state)) {}

  // The loader checked the operand count and every operand (SPEC.md §10.4a).
  hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const override {
    const plugin::ErrorReporter& report = device_.report();
    const MatmulState& s = *state_;
    void* const* operands = args.operands;
    const void* a = operands[HAL_MATMUL_OPERAND_A];
    const void* b = operands[HAL_MATMUL_OPERAND_B];
    void* d = operands[HAL_MATMUL_OPERAND_D];
    const void* c = s.reads_c ? operands[HAL_MATMUL_OPERAND_C] : d;  // beta = 0: C is not read
    const void* bias = s.has_bias ? operands[HAL_MATMUL_OPERAND_BIAS] : nullptr;
    void* aux = s.has_aux ? operands[HAL_MATMUL_OPERAND_AUX] : nullptr;
    auto aligned = [](const void* p) {
      return reinterpret_cast<uintptr_t>(p) % kFastAlignment == 0;
    };
    const bool fast = s.has_fast && aligned(a) && aligned(b) && aligned(c) && aligned(d) &&
                      (bias == nullptr || aligned(bias)) && (aux == nullptr || aligned(aux));
    if (!fast && !s.has_any) {
      return report.fail(HAL_ERROR_UNSUPPORTED, 0,
                         "op_execute: cuBLASLt offered no algorithm for operands that are not "
                         "%zu-byte aligned, and these are not",
                         kFastAlignment);
    }
    const ContextScope bound = device_.bind();
    if (!bound.ok()) {
      return device_.fail(bound.result(), "op_execute: cuCtxSetCurrent");
    }
    const CublasLtApi& api = s.lt->api();
    std::lock_guard lock(s.pointer_mutex);
    if (s.has_bias) {
      if (const cublasStatus_t status = api.cublasLtMatmulDescSetAttribute(
              s.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
          status != CUBLAS_STATUS_SUCCESS) {
        return fail(status, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
      }
    }
    if (s.has_aux) {
      if (const cublasStatus_t status = api.cublasLtMatmulDescSetAttribute(
              s.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux));
          status != CUBLAS_STATUS_SUCCESS) {
        return fail(status, "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
      }
    }
    const float alpha = s.alpha;  // host scalars: read by cublasLtMatmul before it returns
    const float beta = s.beta;
    const void* first = s.swap ? b : a;
    const void* second = s.swap ? a : b;
    const cublasStatus_t status =
        api.cublasLtMatmul(s.handle, s.desc, &alpha, first, s.a, second, s.b, &beta, c, s.c, d, s.d,
                           fast ? &s.fast : &s.any, args.workspace,
                           args.workspace != nullptr ? args.workspace_bytes : 0, stream.get());
    return status == CUBLAS_STATUS_SUCCESS ? HAL_SUCCESS : fail(status, "cublasLtMatmul");
  }

 private:
  hal_result_t fail(cublasStatus_t status, const char* call) const {
    return device_.report().fail(result_of(status), static_cast<int64_t>(status),
                                 "op_execute: %s failed: %s", call,
                                 state_->lt->status_text(status).c_str());
  }

  Device& device_;
  std::unique_ptr<MatmulState> state_;
};

}  // namespace

Planned plan_matmul(Device& device, const hal_op_matmul_desc_t& desc, hal_op_plan_flags_t) {
  const uint32_t flags = desc.flags;
  const bool has_aux = (flags & HAL_MATMUL_SAVE_AUX) != 0;
  if (has_aux && desc.activation != HAL_ACTIVATION_GELU_TANH) {
    return decline(
        "SAVE_AUX without GELU_TANH: cuBLASLt's RELU_AUX saves a bit mask, not the "
        "pre-activation, and only GELU_AUX saves the pre-activation");
  }
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const bool has_bias = (flags & HAL_MATMUL_BIAS) != 0;
  switch (desc.activation) {
    case HAL_ACTIVATION_NONE:
      epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      break;
    case HAL_ACTIVATION_RELU:
      epilogue = has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
      break;
    case HAL_ACTIVATION_GELU_TANH:
      if (has_aux) {
        epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      } else {
        epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      }
      break;
    case HAL_ACTIVATION_GELU_ERF:
      return decline("GELU_ERF: cuBLASLt's GELU epilogue is the tanh approximation");
    default:
      return decline("activation " + std::to_string(static_cast<int>(desc.activation)) +
                     " has no cuBLASLt epilogue");
  }

  const hal_tensor_desc_t& a = desc.a;
  const hal_tensor_desc_t& b = desc.b;
  const hal_tensor_desc_t& c = desc.c;
  const hal_tensor_desc_t& d = desc.d;
  const uint32_t rank = d.rank;
  const bool reads_c = desc.beta != 0.0f;  // NaN included, as HAL reads c then
  const Matrix am = matrix_of(a, (flags & HAL_MATMUL_TRANSPOSE_A) != 0);  // [m, k]
  const Matrix bm = matrix_of(b, (flags & HAL_MATMUL_TRANSPOSE_B) != 0);  // [k, n]
  const Matrix dm = matrix_of(d, false);                                  // [m, n]
  const int64_t m = dm.rows, n = dm.cols, k = am.cols;
  int64_t batch_elements = 1;
  for (uint32_t i = 0; i + 2 < rank; ++i) batch_elements *= d.shape[i];
  if (m == 0 || n == 0 || k == 0 || batch_elements == 0) {
    return decline(
        "empty problems (m, n, k or a batch extent 0) are left to the portable "
        "implementation");
  }

  cudaDataType_t ab_type{}, d_type{}, bias_type{};
  if (!cuda_type(a.dtype, &ab_type) || !cuda_type(d.dtype, &d_type)) {
    return decline(std::string("dtypes a=") + hal::util::dtype_name(a.dtype) +
                   " d=" + hal::util::dtype_name(d.dtype) + " have no cuBLASLt type");
  }
  // cublasLtMatmul with CUBLAS_COMPUTE_32F: A/B f32 -> C/D f32; A/B f16 or
  // bf16 -> C/D of the same type or f32.
  if (d.dtype != a.dtype && d.dtype != HAL_DTYPE_F32) {
    return decline(std::string("d=") + hal::util::dtype_name(d.dtype) +
                   " from a=" + hal::util::dtype_name(a.dtype) +
                   ": cuBLASLt's output is the inputs' type or f32");
  }
  if (reads_c && c.dtype != d.dtype) {
    return decline(std::string("c=") + hal::util::dtype_name(c.dtype) +
                   " with d=" + hal::util::dtype_name(d.dtype) + ": cuBLASLt reads c as d's type");
  }

  // The orientation is d's: cuBLASLt writes D column-major and never
  // transposed.
  Layout d_layout;
  bool swap = true;
  if (as_column_major(transposed(dm), &d_layout)) {
    swap = true;  // row-major d: d^T is column-major [n, m]
  } else if (as_column_major(dm, &d_layout)) {
    swap = false;
  } else {
    return decline("d " + strides_text(dm) +
                   " has no unit stride in its last two dimensions (cuBLASLt writes a "
                   "column-major matrix)");
  }
  if (has_bias) {
    if (!swap) {
      return decline(
          "a bias with a column-major d: cuBLASLt adds its bias along D's rows, "
          "which are d's columns only when d is row-major");
    }
    if (desc.bias.strides[0] != 1 && desc.bias.shape[0] > 1) {
      return decline("a bias with stride " + std::to_string(desc.bias.strides[0]) +
                     ": cuBLASLt reads a dense bias vector");
    }
    if (!cuda_type(desc.bias.dtype, &bias_type)) return decline("the bias dtype has no CUDA type");
  }
  // cuBLASLt's operands in the chosen orientation.
  const Matrix first = swap ? transposed(bm) : am;   // [n, k] or [m, k]
  const Matrix second = swap ? transposed(am) : bm;  // [k, m] or [k, n]
  Layout first_layout, second_layout, c_layout = d_layout;
  if (!as_input(first, &first_layout)) {
    return decline(std::string(swap ? "b " : "a ") + strides_text(swap ? bm : am) +
                   " has no unit stride in its last two dimensions");
  }
  if (!as_input(second, &second_layout)) {
    return decline(std::string(swap ? "a " : "b ") + strides_text(swap ? am : bm) +
                   " has no unit stride in its last two dimensions");
  }
  if (reads_c) {
    const Matrix cm = matrix_of(c, false);
    if (!as_column_major(swap ? transposed(cm) : cm, &c_layout)) {
      return decline("c " + strides_text(cm) + " is not laid out as d " + strides_text(dm) +
                     " (cuBLASLt reads C untransposed, in D's orientation)");
    }
  }

  // aux: GELU's input, written in D's type, orientation and a leading
  // dimension cuBLASLt requires to be a multiple of 8 (cublasLt.h,
  // EPILOGUE_AUX_LD).
  const hal_tensor_desc_t& aux = desc.aux;
  Layout aux_layout;
  if (has_aux) {
    const Matrix xm = matrix_of(aux, false);
    if (aux.dtype != d.dtype) {
      return decline(std::string("aux=") + hal::util::dtype_name(aux.dtype) + " with d=" +
                     hal::util::dtype_name(d.dtype) + ": cuBLASLt writes aux in d's type");
    }
    if (!as_column_major(swap ? transposed(xm) : xm, &aux_layout)) {
      return decline("aux " + strides_text(xm) + " is not laid out as d " + strides_text(dm) +
                     " (cuBLASLt writes aux in D's orientation)");
    }
    if (aux_layout.ld % 8 != 0) {
      return decline("aux's leading dimension " + std::to_string(aux_layout.ld) +
                     " is not a multiple of 8, which cuBLASLt's GELU_AUX requires");
    }
  }

  std::vector<const hal_tensor_desc_t*> batched = {&a, &b, &d};
  if (reads_c) batched.push_back(&c);
  const size_t aux_index = batched.size();
  if (has_aux) batched.push_back(&aux);
  Batch batch;
  if (rank > 2 && !merge_batch(batched, d, &batch)) {
    return decline(
        "the batch dimensions do not merge into one strided batch (cuBLASLt takes "
        "one batch count and one batch stride per matrix)");
  }
  if (batch.count > INT32_MAX) {
    return decline(std::to_string(batch.count) + " batches: cuBLASLt counts them in 32 bits");
  }
  const int64_t a_batch_stride = batch.strides.empty() ? 0 : batch.strides[0];
  const int64_t b_batch_stride = batch.strides.empty() ? 0 : batch.strides[1];
  const int64_t d_batch_stride = batch.strides.empty() ? 0 : batch.strides[2];
  const int64_t aux_batch_stride = has_aux && !batch.strides.empty() ? batch.strides[aux_index] : 0;
  if (has_aux && batch.count > 1 && aux_batch_stride % 8 != 0) {
    return decline("aux's batch stride " + std::to_string(aux_batch_stride) +
                   " is not a multiple of 8, which cuBLASLt's GELU_AUX requires");
  }
  const int64_t c_batch_stride =
      reads_c && batch.strides.size() > 3 ? batch.strides[3] : d_batch_stride;

  // The library and the device's handle: opened here, at the first matmul
  // plan, never at plugin load.
  std::shared_ptr<const CublasLt> lt;
  std::string why;
  cublasStatus_t handle_status = CUBLAS_STATUS_SUCCESS;
  cublasLtHandle_t handle = device.blas().handle(device, &lt, why, &handle_status);
  if (handle == nullptr) return decline(why, handle_status);
  // The heuristic reads the current device's properties through the CUDA
  // runtime inside cuBLASLt: this thread must have the device's context.
  const ContextScope bound = device.bind();
  if (!bound.ok()) {
    return Planned{
        device.fail(bound.result(), "op_plan_create: cuCtxSetCurrent"), nullptr, 0, {}, 0};
  }
  const CublasLtApi& api = lt->api();

  auto state = std::make_unique<MatmulState>();
  state->lt = lt;
  state->handle = handle;
  state->swap = swap;
  state->reads_c = reads_c;
  state->has_bias = has_bias;
  state->has_aux = has_aux;
  state->alpha = desc.alpha;
  state->beta = desc.beta;

  // Each cuBLASLt call at planning: a failure declines with its status (the
  // portable implementation can still serve the plan), except running out
  // of host memory.
  std::string failed;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  auto check = [&](cublasStatus_t result, const char* what) {
    if (status == CUBLAS_STATUS_SUCCESS && result != CUBLAS_STATUS_SUCCESS) {
      status = result;
      failed = std::string(what) + " failed: " + lt->status_text(result);
    }
    return status == CUBLAS_STATUS_SUCCESS;
  };
  auto set_desc = [&](cublasLtMatmulDescAttributes_t attribute, const void* value, size_t size,
                      const char* what) {
    if (status == CUBLAS_STATUS_SUCCESS) {
      check(api.cublasLtMatmulDescSetAttribute(state->desc, attribute, value, size), what);
    }
  };
  check(api.cublasLtMatmulDescCreate(&state->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  const int32_t transa = first_layout.op;
  const int32_t transb = second_layout.op;
  const uint32_t epilogue_value = epilogue;
  set_desc(CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa), "TRANSA");
  set_desc(CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb), "TRANSB");
  set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue_value, sizeof(epilogue_value), "EPILOGUE");
  if (has_bias) {
    const int32_t type = bias_type;
    set_desc(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type), "BIAS_DATA_TYPE");
  }
  if (has_aux) {
    set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_layout.ld, sizeof(aux_layout.ld),
             "EPILOGUE_AUX_LD");
    if (batch.count > 1) {
      set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_batch_stride,
               sizeof(aux_batch_stride), "EPILOGUE_AUX_BATCH_STRIDE");
    }
  }
  auto make_layout = [&](cublasLtMatrixLayout_t* out, cudaDataType_t type, const Layout& layout,
                         int64_t batch_stride, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS) return;
    if (!check(api.cublasLtMatrixLayoutCreate(out, type, layout.rows, layout.cols, layout.ld),
               what)) {
      return;
    }
    if (batch.count == 1) return;
    const int32_t count = static_cast<int32_t>(batch.count);
    check(api.cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                               sizeof(count)),
          what);
    check(api.cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &batch_stride, sizeof(batch_stride)),
          what);
  };
  make_layout(&state->a, ab_type, first_layout, swap ? b_batch_stride : a_batch_stride,
              "cublasLtMatrixLayoutCreate(A)");
  make_layout(&state->b, ab_type, second_layout, swap ? a_batch_stride : b_batch_stride,
              "cublasLtMatrixLayoutCreate(B)");
  make_layout(&state->c, d_type, c_layout, c_batch_stride, "cublasLtMatrixLayoutCreate(C)");
  make_layout(&state->d, d_type, d_layout, d_batch_stride, "cublasLtMatrixLayoutCreate(D)");

  // The algorithms. The workspace cap follows NVIDIA's advice for cuBLAS
  // (32 MiB from Hopper on, 4 MiB before); the plan asks the caller for
  // what the chosen algorithms really need, often nothing.
  const size_t cap = device.cc_major() >= 9 ? size_t{32} << 20 : size_t{4} << 20;
  const size_t ab_size = HAL_DTYPE_SIZE(a.dtype);
  const size_t d_size = HAL_DTYPE_SIZE(d.dtype);
  const size_t bias_size = has_bias ? HAL_DTYPE_SIZE(desc.bias.dtype) : 0;
  auto choose = [&](bool fast_alignment, cublasLtMatmulAlgo_t* out_algo, size_t* out_workspace,
                    cublasStatus_t* out_status) {
    if (status != CUBLAS_STATUS_SUCCESS) return false;
    const uint32_t ab_align = fast_alignment ? kFastAlignment : static_cast<uint32_t>(ab_size);
    const uint32_t d_align = fast_alignment ? kFastAlignment : static_cast<uint32_t>(d_size);
    if (has_bias) {
      // The heuristic reads the bias pointer's value only for its alignment
      // (cublasLt.h, BIAS_POINTER); execution sets the real one.
      const void* hint =
          reinterpret_cast<const void*>(fast_alignment ? uintptr_t{kFastAlignment} : bias_size);
      set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &hint, sizeof(hint), "BIAS_POINTER");
    }
    if (has_aux) {  // the same for the aux pointer
      const void* hint =
          reinterpret_cast<const void*>(fast_alignment ? uintptr_t{kFastAlignment} : d_size);
      set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &hint, sizeof(hint),
               "EPILOGUE_AUX_POINTER");
    }
    cublasLtMatmulPreference_t preference = nullptr;
    if (!check(api.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate")) {
      return false;
    }
    struct PreferenceOwner {
      const CublasLtApi& api;
      cublasLtMatmulPreference_t preference;
      ~PreferenceOwner() { api.cublasLtMatmulPreferenceDestroy(preference); }
    } owner{api, preference};
    auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                        size_t size) {
      check(api.cublasLtMatmulPreferenceSetAttribute(preference, attribute, value, size),
            "cublasLtMatmulPreferenceSetAttribute");
    };
    const uint64_t workspace_cap = cap;
    set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_cap, sizeof(workspace_cap));
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ab_align, sizeof(ab_align));
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab_align, sizeof(ab_align));
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &d_align, sizeof(d_align));
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d_align, sizeof(d_align));
    if (status != CUBLAS_STATUS_SUCCESS) return false;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t heuristic =
        api.cublasLtMatmulAlgoGetHeuristic(handle, state->desc, state->a, state->b, state->c,
                                           state->d, preference, 1, &result, &found);
    *out_status = heuristic;
    if (heuristic != CUBLAS_STATUS_SUCCESS || found < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
      if (heuristic == CUBLAS_STATUS_SUCCESS) {
        *out_status = found < 1 ? CUBLAS_STATUS_NOT_SUPPORTED : result.state;
      }
      return false;
    }
    *out_algo = result.algo;
    *out_workspace = result.workspaceSize;
    return true;
  };
  size_t fast_workspace = 0, any_workspace = 0;
  cublasStatus_t fast_status = CUBLAS_STATUS_SUCCESS, any_status = CUBLAS_STATUS_SUCCESS;
  state->has_fast = choose(true, &state->fast, &fast_workspace, &fast_status);
  state->has_any = choose(false, &state->any, &any_workspace, &any_status);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    return Planned{
        device.report().fail(HAL_ERROR_OUT_OF_MEMORY, status, "op_plan_create: %s", failed.c_str()),
        nullptr,
        0,
        {},
        0};
  }
  if (status != CUBLAS_STATUS_SUCCESS) return decline(failed, status);
  if (!state->has_fast && !state->has_any) {
    const std::string types = std::string("a/b=") + hal::util::dtype_name(a.dtype) +
                              " d=" + hal::util::dtype_name(d.dtype);
    return decline("cublasLtMatmulAlgoGetHeuristic has no algorithm for " + types + " m=" +
                       std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                       " batch=" + std::to_string(batch.count) + ": " + lt->status_text(any_status),
                   any_status);
  }
  state->workspace =
      std::max(state->has_fast ? fast_workspace : 0, state->has_any ? any_workspace : 0);
  Planned planned;
  planned.result = HAL_SUCCESS;
  planned.workspace_bytes = state->workspace;
  planned.plan = std::make_unique<MatmulPlan>(device, std::move(state));
  return planned;
}

}  // namespace hal::cuda::ops
