// Portable paged KV cache: kernels/paged.hal (a validation pass, then the
// append or the split-KV attention and its merge; see the kernel file).
#include "launch.hpp"
#include "portable_constants.hpp"
#include "registry.hpp"

#include "hal_ops/tensor.hpp"

#include <algorithm>
#include <cmath>

namespace hal::ops::portable {

namespace {

constexpr const char* kPagedSource = "paged";
// Private arrays of the attention kernels.
constexpr int64_t kPagedMaxHeadDim = constants::PG_MAX_HEAD_DIM;
constexpr int64_t kPagedMaxHeadDimV = constants::PG_MAX_HEAD_DIM_V;
// The automatic split count: about this many work-items per compute unit,
// chunks of at least this many keys, at most this many chunks, and a
// workspace of partial results of at most this many bytes.
constexpr int64_t kItemsPerUnit = 32;
constexpr int64_t kMinChunkKeys = 256;
constexpr int64_t kMaxAutoSplits = 64;
constexpr double kMaxAutoWorkspace = 64.0 * 1024 * 1024;
// The flag word the validation pass raises, padded so the partial results
// after it stay 16-byte aligned.
constexpr size_t kFlagBytes = 16;

size_t align_up(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// The workspace's first 16-byte aligned address (the caller's may start
// anywhere in its allocation; the plan asks 15 bytes more).
char* aligned(void* workspace) {
  const auto address = reinterpret_cast<uintptr_t>(workspace);
  return reinterpret_cast<char*>(align_up(address, 16));
}

// Zeroes the flag and runs the validation pass; |s_new| > 0 or |append|
// for the append's rule.
hal_result_t validate(const ExecContext& context, hal_kernel_t kernel, char* flag,
                      const void* block_table, const hal_tensor_desc_t& table_layout,
                      const void* seq_lens, const hal_tensor_desc_t& lens_layout, bool append,
                      int64_t s_new, const hal_tensor_desc_t& k_cache) {
  if (hal_result_t r = hal_memset_async(flag, 0, sizeof(int32_t), context.stream); r != HAL_SUCCESS)
    return r;
  const int64_t batch = table_layout.shape[0];
  KernelArgs args;
  args.pointer(block_table).i64(table_layout.strides[0]).i64(table_layout.strides[1]);
  args.pointer(seq_lens).i64(lens_layout.strides[0]).i64(batch).i32(append ? 1 : 0).i64(s_new);
  args.i64(k_cache.shape[1]).i64(table_layout.shape[1]).i64(k_cache.shape[0]);
  args.pointer(context.operands[append ? 6 : 7]).pointer(flag);
  return args.launch(kernel, context.stream, linear_config(batch, 64));
}

// ---- HAL_OP_PAGED_KV_APPEND ------------------------------------------------

class AppendPlan final : public PlannedOp {
 public:
  AppendPlan(const hal_op_paged_kv_append_desc_t& desc, hal_kernel_t validate, hal_kernel_t append)
      : desc_(desc), validate_(validate), append_(append) {}

  size_t workspace_bytes() const override { return kFlagBytes + 15; }

  hal_result_t execute(const ExecContext& context) const override {
    void* const* ops = context.operands;
    const int64_t batch = desc_.k_new.shape[0];
    if (batch == 0) return HAL_SUCCESS;
    char* flag = aligned(context.workspace);
    const int64_t s_new = desc_.k_new.shape[1];
    if (hal_result_t r = validate(context, validate_, flag, ops[2], desc_.block_table, ops[3],
                                  desc_.seq_lens, true, s_new, desc_.k_cache);
        r != HAL_SUCCESS)
      return r;
    if (hal_result_t r = launch(context, ops[0], desc_.k_new, ops[4], desc_.k_cache, desc_.rope_dim,
                                desc_.rope_offset, flag);
        r != HAL_SUCCESS)
      return r;
    if (desc_.values_in_keys != 0) return HAL_SUCCESS;
    return launch(context, ops[1], desc_.v_new, ops[5], desc_.v_cache, 0, 0, flag);
  }

 private:
  hal_result_t launch(const ExecContext& context, const void* src,
                      const hal_tensor_desc_t& src_layout, void* cache,
                      const hal_tensor_desc_t& cache_layout, uint32_t rope_dim,
                      uint32_t rope_offset, const char* flag) const {
    const int64_t count = element_count(src_layout);
    if (count == 0) return HAL_SUCCESS;
    void* const* ops = context.operands;
    KernelArgs args;
    view_args(args, src, src_layout);
    view_args(args, cache, cache_layout);
    args.pointer(ops[2]).i64(desc_.block_table.strides[0]).i64(desc_.block_table.strides[1]);
    args.pointer(ops[3]).i64(desc_.seq_lens.strides[0]);
    args.i64(src_layout.shape[1]).i64(src_layout.shape[2]).i64(src_layout.shape[3]);
    args.i64(cache_layout.shape[1]).i32(static_cast<int32_t>(rope_dim));
    args.i32(static_cast<int32_t>(rope_offset)).i32(static_cast<int32_t>(desc_.rope_interleaved));
    args.f32(desc_.rope_base).pointer(flag).i64(count);
    return args.launch(append_, context.stream, linear_config(count));
  }

  hal_op_paged_kv_append_desc_t desc_;
  hal_kernel_t validate_;
  hal_kernel_t append_;
};

// ---- HAL_OP_PAGED_ATTENTION ------------------------------------------------

class PagedAttentionPlan final : public PlannedOp {
 public:
  PagedAttentionPlan(const hal_op_paged_attention_desc_t& desc, int64_t splits,
                     hal_kernel_t validate, hal_kernel_t chunk, hal_kernel_t merge)
      : desc_(desc), splits_(splits), validate_(validate), chunk_(chunk), merge_(merge) {
    // MLA: the values are the first head_dim_v dims of each key row.
    v_layout_ = desc.values_in_keys != 0 ? desc.k_cache : desc.v_cache;
    rows_ = desc.q.shape[0] * desc.q.shape[2] * desc.q.shape[1];
    partial_bytes_ = splits > 1 ? static_cast<size_t>(rows_ * splits) *
                                      static_cast<size_t>(desc.out.shape[3] + 2) * sizeof(float)
                                : 0;
    scale_ = desc.scale != 0.0f
                 ? desc.scale
                 : static_cast<float>(1.0 / std::sqrt(static_cast<double>(desc.q.shape[3])));
  }

  size_t workspace_bytes() const override { return kFlagBytes + partial_bytes_ + 15; }

  hal_result_t execute(const ExecContext& context) const override {
    void* const* ops = context.operands;
    const int64_t batch = desc_.q.shape[0];
    if (batch == 0) return HAL_SUCCESS;
    char* flag = aligned(context.workspace);
    if (hal_result_t r = validate(context, validate_, flag, ops[3], desc_.block_table, ops[4],
                                  desc_.seq_lens, false, 0, desc_.k_cache);
        r != HAL_SUCCESS)
      return r;
    if (rows_ == 0) return HAL_SUCCESS;
    const void* v = desc_.values_in_keys != 0 ? ops[1] : ops[2];
    char* partial = flag + kFlagBytes;
    const int64_t count = rows_ * splits_;
    KernelArgs args;
    view_args(args, ops[0], desc_.q);
    view_args(args, ops[1], desc_.k_cache);
    view_args(args, v, v_layout_);
    args.pointer(ops[3]).i64(desc_.block_table.strides[0]).i64(desc_.block_table.strides[1]);
    args.pointer(ops[4]).i64(desc_.seq_lens.strides[0]);
    view_args(args, ops[5], desc_.out);
    add_lse(args, ops[6]);
    args.pointer(splits_ > 1 ? partial : flag);
    args.i64(desc_.q.shape[1]).i64(desc_.q.shape[2]).i64(desc_.k_cache.shape[2]);
    args.i32(static_cast<int32_t>(desc_.q.shape[3])).i32(static_cast<int32_t>(desc_.out.shape[3]));
    args.i64(desc_.k_cache.shape[1]).f32(scale_).i32(static_cast<int32_t>(desc_.causal));
    args.i64(splits_).pointer(flag).i64(count);
    if (hal_result_t r = args.launch(chunk_, context.stream, linear_config(count, 64));
        r != HAL_SUCCESS)
      return r;
    if (splits_ == 1) return HAL_SUCCESS;
    KernelArgs merge;
    merge.pointer(partial);
    view_args(merge, ops[5], desc_.out);
    add_lse(merge, ops[6]);
    merge.i64(desc_.q.shape[1]).i64(desc_.q.shape[2]).i32(static_cast<int32_t>(desc_.out.shape[3]));
    merge.i64(splits_).pointer(flag).i64(rows_);
    return merge.launch(merge_, context.stream, linear_config(rows_, 64));
  }

 private:
  void add_lse(KernelArgs& args, void* lse) const {
    args.pointer(lse);
    for (int d = 0; d < 3; ++d) args.i64(desc_.lse.strides[d]);
  }

  hal_op_paged_attention_desc_t desc_;
  hal_tensor_desc_t v_layout_{};
  int64_t splits_;
  int64_t rows_ = 0;
  size_t partial_bytes_ = 0;
  float scale_ = 1.0f;
  hal_kernel_t validate_, chunk_, merge_;
};

// The split count of an attention plan: the descriptor's, or enough chunks
// to give the device's compute units work (whole blocks of at least
// kMinChunkKeys keys, a bounded workspace).
int64_t choose_splits(const hal_op_paged_attention_desc_t& desc, const PlanRequest& request) {
  if (desc.num_splits > 0) return desc.num_splits;
  const int64_t rows = desc.q.shape[0] * desc.q.shape[2] * desc.q.shape[1];
  const int64_t block_size = desc.k_cache.shape[1];
  const int64_t max_blocks = desc.block_table.shape[1];
  const int64_t units = std::max<int64_t>(1, request.properties->compute_units);
  const int64_t wanted =
      (units * kItemsPerUnit + std::max<int64_t>(rows, 1) - 1) / std::max<int64_t>(rows, 1);
  const int64_t blocks_per_chunk = std::max<int64_t>(1, kMinChunkKeys / block_size);
  int64_t splits = std::clamp<int64_t>(wanted, 1, kMaxAutoSplits);
  splits = std::min(splits, std::max<int64_t>(1, max_blocks / blocks_per_chunk));
  const double per_split =
      static_cast<double>(rows) * static_cast<double>(desc.out.shape[3] + 2) * sizeof(float);
  while (splits > 1 && per_split * static_cast<double>(splits) > kMaxAutoWorkspace) splits /= 2;
  return splits;
}

class Paged final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    hal_kernel_t validate = portable_kernel(request, kPagedSource, "paged_validate", decline);
    if (validate == nullptr) return nullptr;
    if (request.desc->kind == HAL_OP_PAGED_KV_APPEND) {
      const auto& desc = *reinterpret_cast<const hal_op_paged_kv_append_desc_t*>(request.desc);
      hal_kernel_t append = portable_kernel(request, kPagedSource, "paged_append", decline);
      if (append == nullptr) return nullptr;
      return std::make_unique<AppendPlan>(desc, validate, append);
    }
    const auto& desc = *reinterpret_cast<const hal_op_paged_attention_desc_t*>(request.desc);
    if (desc.q.shape[3] > kPagedMaxHeadDim || desc.out.shape[3] > kPagedMaxHeadDimV) {
      *decline = "head dims " + std::to_string(desc.q.shape[3]) + "/" +
                 std::to_string(desc.out.shape[3]) + " exceed " + std::to_string(kPagedMaxHeadDim) +
                 "/" + std::to_string(kPagedMaxHeadDimV) +
                 ", the most the portable kernels keep per row";
      return nullptr;
    }
    const int64_t splits = choose_splits(desc, request);
    const double partial = static_cast<double>(desc.q.shape[0]) * desc.q.shape[1] *
                           desc.q.shape[2] * static_cast<double>(splits) *
                           static_cast<double>(desc.out.shape[3] + 2) * sizeof(float);
    if (partial > static_cast<double>(int64_t{1} << 40)) {
      *decline = "the split-KV partial results would need more than 1 TiB of workspace";
      return nullptr;
    }
    hal_kernel_t chunk = portable_kernel(request, kPagedSource, "paged_attention_chunk", decline);
    hal_kernel_t merge =
        chunk == nullptr ? nullptr
                         : portable_kernel(request, kPagedSource, "paged_attention_merge", decline);
    if (merge == nullptr) return nullptr;
    return std::make_unique<PagedAttentionPlan>(desc, splits, validate, chunk, merge);
  }
};

}  // namespace

void add_paged(ImplementationTable& table) {
  static const Paged paged;
  table[HAL_OP_PAGED_KV_APPEND].push_back(&paged);
  table[HAL_OP_PAGED_ATTENTION].push_back(&paged);
}

}  // namespace hal::ops::portable
