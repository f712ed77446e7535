// HAL_OP_MATMUL on oneDNN's matmul primitive:
//   d = act(alpha * op(a) @ op(b) + beta * c + bias)
// mapped as
//   - a, b, d: memory descriptors with the tensors' strides; a transpose is
//     the last two dimensions' strides swapped; a batch dimension that a or b
//     broadcasts (extent 1 or stride 0) becomes extent 1, which oneDNN
//     broadcasts;
//   - alpha: the output scale. oneDNN scales the bias with it (it computes
//     alpha * (a @ b + bias)), so with alpha != 1 the bias is a binary-add
//     post-op instead of the primitive's bias argument;
//   - beta * c: a sum post-op, which reads d. When c is not d itself, the
//     execution first copies c into d (c may broadcast);
//   - the activation: an eltwise post-op (relu, gelu_tanh, gelu_erf).
// The primitive is created once, at planning, and every execution reuses it.
// A plain f32 product (no batch, bias or activation; row- or column-major
// matrices) runs on dnnl_sgemm instead, oneDNN's own sgemm, which measures
// faster than the primitive's gemm kernel (sgemm_call).
//
// f16 where oneDNN 2.6 has no kernel (it needs AVX512-FP16) is widened to
// the f32 product (onednn_matmul_f16.cpp). Declined (the portable
// implementation serves them): SAVE_AUX (the pre-activation is not an output
// of one oneDNN primitive), empty tensors (oneDNN 2.6's brgemm planner
// divides by zero on an empty problem on this host), and any dtype
// combination oneDNN refuses even so.
//
// Determinism: for a fixed thread count oneDNN's matmul and sgemm give the
// same bits run to run (their work split, including any split of k, depends
// only on the shape and the thread count, and executions never overlap here).
#include <dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

#include "../device.hpp"
#include "../stream.hpp"
#include "../thread_pool.hpp"
#include "onednn_common.hpp"
#include "onednn_matmul.hpp"
#include "ops.hpp"
#include "thread_malloc_cache.hpp"

namespace hal::cpu::ops {
namespace {

using dnnl::memory;

// Copies c into d element by element over d's shape (c may broadcast with
// stride 0). Same dtype: |element| bytes each.
void copy_strided(const hal_tensor_desc_t& c, const void* c_base, const hal_tensor_desc_t& d,
                  void* d_base, size_t element) {
  const uint32_t rank = d.rank;
  int64_t index[HAL_TENSOR_MAX_RANK] = {};
  const auto* source = static_cast<const unsigned char*>(c_base);
  auto* target = static_cast<unsigned char*>(d_base);
  const int64_t inner = d.shape[rank - 1];
  while (true) {
    int64_t c_offset = 0;
    int64_t d_offset = 0;
    for (uint32_t i = 0; i + 1 < rank; ++i) {
      c_offset += index[i] * c.strides[i];
      d_offset += index[i] * d.strides[i];
    }
    const int64_t c_step = c.strides[rank - 1];
    const int64_t d_step = d.strides[rank - 1];
    for (int64_t j = 0; j < inner; ++j) {
      std::memcpy(target + (d_offset + j * d_step) * static_cast<int64_t>(element),
                  source + (c_offset + j * c_step) * static_cast<int64_t>(element), element);
    }
    // Next index over the outer dimensions (row-major).
    uint32_t dim = rank - 1;
    while (dim > 0) {
      --dim;
      if (++index[dim] < d.shape[dim]) break;
      index[dim] = 0;
      if (dim == 0) return;
    }
    if (rank == 1) return;
  }
}

// One dnnl_sgemm call (row-major, as oneDNN's BLAS-like API takes it):
// d = alpha * op(a) @ op(b) + beta * d.
struct SgemmCall {
  char transa = 'N', transb = 'N';
  dnnl_dim_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;

  double work() const {
    return static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
};

// m * n * k above which an sgemm call refills the thread's malloc cache (the
// fill costs ~2-3 us, measured: 0.02% of a 1024^3 call on one core).
constexpr double kFillCacheFromWork = 512.0 * 512.0 * 512.0;

// m * n * k from which an sgemm is split over the plugin's thread pool
// (below it one thread does it: ~10 us of work, where handing half to a
// second thread gains little), and the granule of a split: rows of d in
// multiples of 16, columns in multiples of 64 (whole vectors and oneDNN's
// own column blocks).
constexpr double kSplitFromWork = 128.0 * 128.0 * 128.0;
constexpr int64_t kRowGranule = 16;
constexpr int64_t kColumnGranule = 64;

// The pieces an sgemm is split into: d's rows (or columns) in |pieces|
// ranges of |step|, the last one shorter.
struct SgemmSplit {
  bool by_rows = true;
  int64_t step = 0;
  uint64_t pieces = 1;
};

SgemmSplit split_sgemm(const SgemmCall& call, uint64_t threads) {
  SgemmSplit split;
  split.by_rows = call.m >= call.n;
  const int64_t extent = split.by_rows ? call.m : call.n;
  const int64_t granule = split.by_rows ? kRowGranule : kColumnGranule;
  if (threads < 2 || call.work() < kSplitFromWork || extent < 2 * granule) {
    split.step = extent;
    return split;
  }
  const int64_t share =
      (extent + static_cast<int64_t>(threads) - 1) / static_cast<int64_t>(threads);
  split.step = (share + granule - 1) / granule * granule;
  split.pieces = static_cast<uint64_t>((extent + split.step - 1) / split.step);
  return split;
}

// One piece of a split sgemm: its rows (columns) of op(a) (op(b)) and d.
void run_sgemm_piece(const SgemmCall& call, const SgemmSplit& split, uint64_t piece, const float* a,
                     const float* b, float* d) {
  SgemmCall part = call;
  const int64_t first = static_cast<int64_t>(piece) * split.step;
  if (split.by_rows) {
    part.m = std::min<int64_t>(split.step, call.m - first);
    a += call.transa == 'N' ? first * call.lda : first;
    d += first * call.ldc;
  } else {
    part.n = std::min<int64_t>(split.step, call.n - first);
    b += call.transb == 'N' ? first : first * call.ldb;
    d += first;
  }
  // dnnl_sgemm allocates and frees a packing buffer on this thread on every
  // call; with this thread's malloc cache full, the buffer comes back with
  // its pages resident (thread_malloc_cache.hpp). Up to 512^3 the buffers
  // are small (74 KB at 256^3 and 512^3) and were measured to take no page
  // faults anyway.
  if (part.work() > kFillCacheFromWork) fill_thread_malloc_cache();
  SingleThreadedOnednn single_threaded;
  const dnnl_status_t status =
      dnnl_sgemm(part.transa, part.transb, part.m, part.n, part.k, part.alpha, a, part.lda, b,
                 part.ldb, part.beta, d, part.ldc);
  if (status != dnnl_success) throw dnnl::error(status, "dnnl_sgemm failed");
}

// Runs |call| on the plugin's thread pool (the calling thread takes part),
// each piece a single-threaded dnnl_sgemm: no OpenMP team, so nothing is
// handed to another thread and no team's idle workers hold a core. The
// pieces follow the thread count only (the pool's threads, capped by
// OMP_NUM_THREADS, oneDNN's own setting), so a fixed count gives the same
// bits run to run, whichever thread computes a piece. Measured against
// dnnl_sgemm on its own 2-thread team, 2 cores: within 2% at 256^3, 512^3
// and 4096x4096x1024.
void run_sgemm(const SgemmCall& call, ThreadPool& pool, const float* a, const float* b, float* d) {
  const uint64_t threads = std::min<uint64_t>(
      pool.workers() + 1u, static_cast<uint64_t>(std::max(1, onednn_team_threads())));
  const SgemmSplit split = split_sgemm(call, threads);
  if (split.pieces == 1) {
    run_sgemm_piece(call, split, 0, a, b, d);
    return;
  }
  struct Job {
    const SgemmCall& call;
    const SgemmSplit& split;
    const float* a;
    const float* b;
    float* d;
    std::atomic<bool> failed{false};
    dnnl_status_t status = dnnl_success;  // the first failure's, written once
  } job{call, split, a, b, d};
  const auto run = [](void* context, uint64_t begin, uint64_t end, uint32_t) {
    Job& job = *static_cast<Job*>(context);
    for (uint64_t piece = begin; piece < end; ++piece) {
      try {
        run_sgemm_piece(job.call, job.split, piece, job.a, job.b, job.d);
      } catch (const dnnl::error& error) {
        if (!job.failed.exchange(true)) job.status = error.status;
      } catch (...) {  // nothing else is thrown there; none may leave a pool task
        if (!job.failed.exchange(true)) job.status = dnnl_runtime_error;
      }
    }
  };
  pool.parallel_for(split.pieces, 1, ParallelTask{run, &job});
  if (job.failed.load()) throw dnnl::error(job.status, "dnnl_sgemm failed");
}

struct MatmulState final : MatmulProduct {
  // Plain f32 products run on dnnl_sgemm, the rest on the primitive.
  std::optional<SgemmCall> sgemm;
  bool short_call = false;  // work <= kShortCallWork
  dnnl::matmul primitive;
  size_t scratchpad = 0;  // the primitive's, in the workspace (with_user_scratchpad)
  memory::desc a, b, d, bias;
  bool has_bias = false;
  bool bias_as_post_op = false;  // alpha != 1: bias is a binary-add post-op
  int bias_post_op_index = 0;
  bool reads_c = false;  // beta != 0
  hal_tensor_desc_t c_tensor{};
  hal_tensor_desc_t d_tensor{};
  size_t element_bytes = 0;
  // A bias with a stride other than 1 is packed per execution: oneDNN's
  // fused bias reads its operand densely whatever its descriptor says.
  int64_t bias_stride = 1;
  int64_t bias_count = 0;
  size_t bias_element_bytes = 0;

  void run(ThreadPool& pool, void* a_ptr, void* b_ptr, const void* c_ptr, void* d_ptr,
           void* bias_ptr, void* workspace) const override {
    if (reads_c && c_ptr != d_ptr) copy_strided(c_tensor, c_ptr, d_tensor, d_ptr, element_bytes);
    if (sgemm) {
      run_onednn_call(OnednnPlacement::kCaller, [&] {
        run_sgemm(*sgemm, pool, static_cast<const float*>(a_ptr), static_cast<const float*>(b_ptr),
                  static_cast<float*>(d_ptr));
      });
      return;
    }
    run_onednn_call(
        short_call ? OnednnPlacement::kShortOnOnednnThread : OnednnPlacement::kOnednnThread,
        [&] { execute_primitive(a_ptr, b_ptr, d_ptr, bias_ptr, workspace); });
  }
  size_t workspace_bytes() const override {
    return scratchpad == 0 ? 0 : scratchpad + kWorkspaceAlignment - 1;
  }

 private:
  // On the oneDNN thread (onednn_common.hpp).
  void execute_primitive(void* a_ptr, void* b_ptr, void* d_ptr, void* bias_ptr,
                         void* workspace) const {
    const dnnl::engine& engine = onednn_engine();
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(a, engine, a_ptr)},
        {DNNL_ARG_WEIGHTS, memory(b, engine, b_ptr)},
        {DNNL_ARG_DST, memory(d, engine, d_ptr)},
    };
    std::vector<unsigned char> packed_bias;
    if (has_bias && bias_stride != 1) {
      packed_bias.resize(static_cast<size_t>(bias_count) * bias_element_bytes);
      const auto* source = static_cast<const unsigned char*>(bias_ptr);
      for (int64_t j = 0; j < bias_count; ++j) {
        std::memcpy(packed_bias.data() + j * bias_element_bytes,
                    source + j * bias_stride * static_cast<int64_t>(bias_element_bytes),
                    bias_element_bytes);
      }
      bias_ptr = packed_bias.data();
    }
    if (has_bias) {
      const int key = bias_as_post_op
                          ? (DNNL_ARG_ATTR_MULTIPLE_POST_OP(bias_post_op_index) | DNNL_ARG_SRC_1)
                          : DNNL_ARG_BIAS;
      args.emplace(key, memory(bias, engine, bias_ptr));
    }
    dnnl::stream& stream = onednn_stream();
    execute_with_scratchpad(primitive, stream, std::move(args),
                            scratchpad == 0 ? nullptr : aligned_workspace(workspace));
    stream.wait();
  }
};

// One execution in stream order.
class MatmulTask final : public StreamTask {
 public:
  MatmulTask(std::shared_ptr<const MatmulProduct> product, ThreadPool& pool,
             const hal_op_exec_args_t& args)
      : product_(std::move(product)), pool_(pool), workspace_(args.workspace) {
    for (uint32_t i = 0; i < HAL_MATMUL_OPERAND_COUNT; ++i) operands_[i] = args.operands[i];
  }
  void run() override {
    product_->run(pool_, operands_[HAL_MATMUL_OPERAND_A], operands_[HAL_MATMUL_OPERAND_B],
                  operands_[HAL_MATMUL_OPERAND_C], operands_[HAL_MATMUL_OPERAND_D],
                  operands_[HAL_MATMUL_OPERAND_BIAS], workspace_);
  }

 private:
  std::shared_ptr<const MatmulProduct> product_;
  ThreadPool& pool_;
  void* operands_[HAL_MATMUL_OPERAND_COUNT] = {};
  void* workspace_;
};

class MatmulPlan final : public OpPlan {
 public:
  explicit MatmulPlan(std::shared_ptr<const MatmulProduct> product)
      : product_(std::move(product)) {}
  // The loader checked the operand count and every operand (SPEC.md §10.4a).
  hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const override {
    return stream.enqueue(
        TaskCommand{std::make_unique<MatmulTask>(product_, stream.device().plugin().pool(), args)});
  }
  size_t workspace_bytes() const override { return product_->workspace_bytes(); }

 private:
  std::shared_ptr<const MatmulProduct> product_;
};

bool is_empty(const hal_tensor_desc_t& tensor) {
  for (uint32_t d = 0; d < tensor.rank; ++d) {
    if (tensor.shape[d] == 0) return true;
  }
  return false;
}

// The batch extent oneDNN sees for a or b in dimension |dim|: 1 where the
// operand broadcasts (extent 1 or stride 0), else the extent, which must be
// d's. False when neither.
bool batch_extent(const hal_tensor_desc_t& tensor, const hal_tensor_desc_t& d, uint32_t dim,
                  memory::dim* out) {
  if (tensor.shape[dim] == 1 || tensor.strides[dim] == 0) {
    *out = 1;
    return true;
  }
  *out = tensor.shape[dim];
  return tensor.shape[dim] == d.shape[dim];
}

// The logical [batch..., rows, cols] view of |tensor|, the last two
// dimensions swapped when |transposed|.
void matrix_view(const hal_tensor_desc_t& tensor, bool transposed, const memory::dims& batch,
                 memory::dims* dims, memory::dims* strides) {
  const uint32_t rank = tensor.rank;
  dims->assign(batch.begin(), batch.end());
  strides->clear();
  for (uint32_t i = 0; i + 2 < rank; ++i) strides->push_back(tensor.strides[i]);
  const uint32_t row = transposed ? rank - 1 : rank - 2;
  const uint32_t col = transposed ? rank - 2 : rank - 1;
  dims->push_back(tensor.shape[row]);
  dims->push_back(tensor.shape[col]);
  strides->push_back(tensor.strides[row]);
  strides->push_back(tensor.strides[col]);
}

// A rows x cols matrix with these element strides as dnnl_sgemm takes it:
// 'N' with its leading dimension when rows are dense (row-major), 'T' when
// columns are (column-major, the transposed storage); nothing otherwise. An
// extent of 1 leaves its stride free, and the leading dimension is then the
// smallest dnnl_sgemm accepts.
std::optional<std::pair<char, dnnl_dim_t>> blas_layout(int64_t rows, int64_t cols,
                                                       int64_t row_stride, int64_t col_stride) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols)) {
    return std::pair<char, dnnl_dim_t>{'N', rows == 1 ? cols : row_stride};
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows)) {
    return std::pair<char, dnnl_dim_t>{'T', cols == 1 ? rows : col_stride};
  }
  return std::nullopt;
}

// The dnnl_sgemm call for an f32 product without batches, bias or activation
// whose matrices dnnl_sgemm can address; nothing otherwise. Measured on this
// project's Zen 5 hosts (bench/sgemm): dnnl_sgemm is 10-15% faster than the
// matmul primitive's gemm kernel at 1024^3 on one thread and up to 1.6x at
// 256^3 on two, and never slower.
std::optional<SgemmCall> sgemm_call(const hal_op_matmul_desc_t& desc) {
  const hal_tensor_desc_t& a = desc.a;
  const hal_tensor_desc_t& b = desc.b;
  const hal_tensor_desc_t& d = desc.d;
  if (a.dtype != HAL_DTYPE_F32 || b.dtype != HAL_DTYPE_F32 || d.dtype != HAL_DTYPE_F32 ||
      (desc.flags & HAL_MATMUL_BIAS) != 0 || desc.activation != HAL_ACTIVATION_NONE) {
    return std::nullopt;
  }
  const uint32_t rank = d.rank;
  for (uint32_t i = 0; i + 2 < rank; ++i) {
    if (d.shape[i] != 1) return std::nullopt;  // batches stay on the primitive
  }
  // op(a) is m x k and op(b) k x n: a transpose swaps the last two strides.
  const bool ta = (desc.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
  const bool tb = (desc.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
  const int64_t m = d.shape[rank - 2], n = d.shape[rank - 1];
  const int64_t k = ta ? a.shape[rank - 2] : a.shape[rank - 1];
  const auto a_layout =
      blas_layout(m, k, a.strides[ta ? rank - 1 : rank - 2], a.strides[ta ? rank - 2 : rank - 1]);
  const auto b_layout =
      blas_layout(k, n, b.strides[tb ? rank - 1 : rank - 2], b.strides[tb ? rank - 2 : rank - 1]);
  const auto d_layout = blas_layout(m, n, d.strides[rank - 2], d.strides[rank - 1]);
  if (!a_layout || !b_layout || !d_layout || d_layout->first != 'N') return std::nullopt;
  SgemmCall call;
  call.transa = a_layout->first;
  call.lda = a_layout->second;
  call.transb = b_layout->first;
  call.ldb = b_layout->second;
  call.ldc = d_layout->second;
  call.m = m;
  call.n = n;
  call.k = k;
  call.alpha = desc.alpha;
  call.beta = desc.beta;
  return call;
}

}  // namespace

std::shared_ptr<const MatmulProduct> plan_onednn_product(const hal_op_matmul_desc_t& desc,
                                                         Decline& decline) {
  const uint32_t flags = desc.flags;
  if ((flags & HAL_MATMUL_SAVE_AUX) != 0) {
    decline.reason = "SAVE_AUX (the pre-activation as a second output) is not one oneDNN primitive";
    return nullptr;
  }
  const hal_tensor_desc_t& a = desc.a;
  const hal_tensor_desc_t& b = desc.b;
  const hal_tensor_desc_t& d = desc.d;
  const uint32_t rank = d.rank;
  if (rank < 2 || a.rank != rank || b.rank != rank || rank > DNNL_MAX_NDIMS) {
    decline.reason = "ranks other than 2.." + std::to_string(HAL_TENSOR_MAX_RANK) +
                     " alike for a, b and d are not served";
    return nullptr;
  }
  const bool has_bias = (flags & HAL_MATMUL_BIAS) != 0;
  const bool reads_c = desc.beta != 0.0f;
  if (is_empty(a) || is_empty(b) || is_empty(d)) {
    decline.reason = "empty tensors are left to the portable implementation";
    return nullptr;
  }
  const auto a_type = onednn_dtype(a.dtype);
  const auto b_type = onednn_dtype(b.dtype);
  const auto d_type = onednn_dtype(d.dtype);
  if (!a_type || !b_type || !d_type) {
    decline.reason = std::string("dtypes a=") + dtype_text(a.dtype) + " b=" + dtype_text(b.dtype) +
                     " d=" + dtype_text(d.dtype) + " are not floating types oneDNN takes";
    return nullptr;
  }
  for (uint32_t i = 0; i < rank; ++i) {
    if (d.strides[i] == 0 && d.shape[i] > 1) {
      decline.reason = "d broadcasts (stride 0), which an output cannot";
      return nullptr;
    }
  }
  // Batch dimensions: a and b broadcast into d's.
  memory::dims a_batch, b_batch, d_batch;
  for (uint32_t i = 0; i + 2 < rank; ++i) {
    memory::dim a_extent = 0, b_extent = 0;
    if (!batch_extent(a, d, i, &a_extent) || !batch_extent(b, d, i, &b_extent)) {
      decline.reason = "a batch extent of a or b is neither 1 nor d's";
      return nullptr;
    }
    if (a_extent == 1 && b_extent == 1 && d.shape[i] != 1) {
      decline.reason = "a and b both broadcast batch dimension " + std::to_string(i) +
                       ", which oneDNN's matmul does not express";
      return nullptr;
    }
    a_batch.push_back(a_extent);
    b_batch.push_back(b_extent);
    d_batch.push_back(d.shape[i]);
  }

  auto state = std::make_shared<MatmulState>();
  if (reads_c && desc.c.dtype != d.dtype) {
    decline.reason = "c's dtype differs from d's (the sum post-op accumulates into d)";
    return nullptr;
  }
  if (reads_c) {
    state->reads_c = true;
    state->c_tensor = desc.c;
    state->d_tensor = d;
    state->element_bytes = HAL_DTYPE_SIZE(d.dtype);
  }
  double work = static_cast<double>(d.shape[rank - 2]) * static_cast<double>(d.shape[rank - 1]) *
                static_cast<double>((desc.flags & HAL_MATMUL_TRANSPOSE_A) != 0 ? a.shape[rank - 2]
                                                                               : a.shape[rank - 1]);
  for (uint32_t i = 0; i + 2 < rank; ++i) work *= static_cast<double>(d.shape[i]);
  state->short_call = work <= kShortCallWork;
  state->sgemm = sgemm_call(desc);
  if (state->sgemm) return state;

  memory::dims dims, strides;
  matrix_view(a, (flags & HAL_MATMUL_TRANSPOSE_A) != 0, a_batch, &dims, &strides);
  state->a = strided_desc(dims, strides, *a_type);
  matrix_view(b, (flags & HAL_MATMUL_TRANSPOSE_B) != 0, b_batch, &dims, &strides);
  state->b = strided_desc(dims, strides, *b_type);
  matrix_view(d, false, d_batch, &dims, &strides);
  state->d = strided_desc(dims, strides, *d_type);

  dnnl::primitive_attr attr;
  dnnl::post_ops post_ops;
  if (desc.alpha != 1.0f) attr.set_output_scales(0, {desc.alpha});
  if (reads_c) post_ops.append_sum(desc.beta);
  if (has_bias) {
    const auto bias_type = onednn_dtype(desc.bias.dtype);
    if (!bias_type || desc.bias.rank != 1) {
      decline.reason = std::string("a bias of dtype ") + dtype_text(desc.bias.dtype) +
                       " or of rank other than 1 is not served";
      return nullptr;
    }
    memory::dims bias_dims(rank, 1);
    memory::dims bias_strides(rank, 1);
    bias_dims[rank - 1] = desc.bias.shape[0];
    state->bias_stride = desc.bias.strides[0];
    state->bias_count = desc.bias.shape[0];
    state->bias_element_bytes = HAL_DTYPE_SIZE(desc.bias.dtype);
    state->bias = strided_desc(bias_dims, bias_strides, *bias_type);
    state->has_bias = true;
    if (desc.alpha != 1.0f) {
      state->bias_as_post_op = true;
      state->bias_post_op_index = post_ops.len();
      post_ops.append_binary(dnnl::algorithm::binary_add, state->bias);
    }
  }
  switch (desc.activation) {
    case HAL_ACTIVATION_NONE:
      break;
    case HAL_ACTIVATION_RELU:
      post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      break;
    case HAL_ACTIVATION_GELU_TANH:
      post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
      break;
    case HAL_ACTIVATION_GELU_ERF:
      post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
      break;
    default:
      decline.reason = "activation " + std::to_string(desc.activation) + " is not served";
      return nullptr;
  }
  attr.set_post_ops(post_ops);
  attr = with_user_scratchpad(attr);

  try {
    const dnnl::matmul::desc op =
        state->has_bias && !state->bias_as_post_op
            ? dnnl::matmul::desc(state->a, state->b, state->bias, state->d)
            : dnnl::matmul::desc(state->a, state->b, state->d);
    const bool all_f32 =
        a.dtype == HAL_DTYPE_F32 && b.dtype == HAL_DTYPE_F32 && d.dtype == HAL_DTYPE_F32;
    run_onednn_call(OnednnPlacement::kOnednnThread, [&] {
      dnnl::matmul::primitive_desc pd(op, attr, onednn_engine());
      // For f32, oneDNN 2.6's gemm-based matmul (its sgemm kernels) is as
      // fast as the brgemm one it lists first up to 1024^3 and ~15% faster
      // from 2048^3 on this host (bench/sgemm): take it when it is offered.
      if (all_f32) {
        dnnl::matmul::primitive_desc candidate(op, attr, onednn_engine());
        do {
          if (std::string(candidate.impl_info_str()).rfind("gemm:", 0) == 0) {
            pd = candidate;
            break;
          }
        } while (candidate.next_impl());
      }
      state->primitive = dnnl::matmul(pd);
      state->scratchpad = scratchpad_bytes(state->primitive);
    });
  } catch (const dnnl::error& error) {
    if (error.status != dnnl_unimplemented) throw;
    decline.reason = std::string("oneDNN ") + std::to_string(dnnl_version()->major) + "." +
                     std::to_string(dnnl_version()->minor) +
                     " has no matmul for a=" + dtype_text(a.dtype) + " b=" + dtype_text(b.dtype) +
                     " d=" + dtype_text(d.dtype) +
                     (has_bias ? std::string(" bias=") + dtype_text(desc.bias.dtype) : "") +
                     " with these layouts and post-ops on this CPU";
    if (a.dtype == HAL_DTYPE_F16 || b.dtype == HAL_DTYPE_F16 || d.dtype == HAL_DTYPE_F16) {
      decline.reason += " (its f16 kernels need AVX512-FP16)";
    }
    return nullptr;
  }
  return state;
}

std::unique_ptr<OpPlan> plan_matmul(const hal_op_matmul_desc_t& desc, hal_op_plan_flags_t,
                                    Decline& decline) {
  if (auto product = plan_onednn_product(desc, decline)) {
    return std::make_unique<MatmulPlan>(std::move(product));
  }
  const bool has_f16 = desc.a.dtype == HAL_DTYPE_F16 || desc.b.dtype == HAL_DTYPE_F16 ||
                       desc.d.dtype == HAL_DTYPE_F16 ||
                       (desc.beta != 0.0f && desc.c.dtype == HAL_DTYPE_F16) ||
                       ((desc.flags & HAL_MATMUL_BIAS) != 0 && desc.bias.dtype == HAL_DTYPE_F16);
  if (!has_f16) return nullptr;
  Decline widened;
  if (auto product = plan_widened_product(desc, widened)) {
    return std::make_unique<MatmulPlan>(std::move(product));
  }
  decline.reason += "; widened to f32: " + widened.reason;
  return nullptr;
}

}  // namespace hal::cpu::ops
