// Planted operator faults of the fault plugin (fault_plugin.cpp): the bugs
// a vendor's convolution, pooling or batch norm could ship, each of which
// the operators profile must catch with a message naming the op and the
// shape (and the paged KV cache's four: a block table read off by one
// block, the last partial block dropped, the split-KV merge without its max
// correction, RoPE with the whole head's frequencies). They wrap the real cpu
// plugin's operator entries: a changed
// descriptor passed on, host functions around the real execution in stream
// order (cpu device memory is host memory), or (max pooling) an
// implementation of the fault plugin's own.
#include "fault_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "fault_op_plan.hpp"

namespace fault_ops {
namespace {

const hal_plugin_table_v1_t* g_real = nullptr;
OpFault g_fault = OpFault::kConvPaddingSwapped;

using fault_op_plan::enqueue_host;
using fault_op_plan::WrappedPlan;

// A tensor of the convolutional ops as [N, C, D, H, W] (a filter [O, I, KD,
// KH, KW]): extents and element strides, outer spatial dimensions of 1.
struct View {
  int64_t shape[5] = {1, 1, 1, 1, 1};
  int64_t strides[5] = {0, 0, 0, 0, 0};
};

View view_of(const hal_tensor_desc_t& tensor, hal_channel_layout_t layout, uint32_t spatial) {
  View v;
  const auto put = [&](int c, uint32_t d) {
    v.shape[c] = tensor.shape[d];
    v.strides[c] = tensor.strides[d];
  };
  put(0, 0);
  put(1, layout == HAL_CHANNELS_LAST ? spatial + 1 : 1);
  for (uint32_t s = 0; s < spatial; ++s) {
    put(2 + 3 - static_cast<int>(spatial) + static_cast<int>(s),
        layout == HAL_CHANNELS_LAST ? 1 + s : 2 + s);
  }
  return v;
}

size_t element_bytes(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F32 || dtype == HAL_DTYPE_I32 ? 4 : dtype == HAL_DTYPE_I64 ? 8 : 2;
}

// ---- a filter used back to front along W (correlation mistaken for convolution)

struct Flip {
  unsigned char* filter;
  View w;
  size_t bytes;
};

void flip_filter(void* data) {
  const auto* flip = static_cast<const Flip*>(data);
  const View& w = flip->w;
  for (int64_t o = 0; o < w.shape[0]; ++o)
    for (int64_t i = 0; i < w.shape[1]; ++i)
      for (int64_t d = 0; d < w.shape[2]; ++d)
        for (int64_t h = 0; h < w.shape[3]; ++h)
          for (int64_t a = 0, b = w.shape[4] - 1; a < b; ++a, --b) {
            const int64_t row =
                o * w.strides[0] + i * w.strides[1] + d * w.strides[2] + h * w.strides[3];
            unsigned char* p = flip->filter + (row + a * w.strides[4]) * flip->bytes;
            unsigned char* q = flip->filter + (row + b * w.strides[4]) * flip->bytes;
            std::swap_ranges(p, p + flip->bytes, q);
          }
}

void flip_and_free(void* data) {
  flip_filter(data);
  delete static_cast<Flip*>(data);
}

// ---- batch norm normalising with the unbiased variance ---------------------

struct Unbias {
  const WrappedPlan* plan;
  void* shift;
  void* y;
  void* saved_rstd;
};

// y = shift + (y - shift) * sqrt((m - 1) / m): what 1/sqrt(var m/(m-1)) gives
// in place of 1/sqrt(var) (epsilon aside); f32 tensors without relu only.
void unbias(void* data) {
  std::unique_ptr<Unbias> job(static_cast<Unbias*>(data));
  const auto& desc = job->plan->as<hal_op_batch_norm_desc_t>();
  if (desc.y.dtype != HAL_DTYPE_F32 || (desc.flags & HAL_BATCH_NORM_RELU) != 0) return;
  const uint32_t rank = desc.y.rank;
  const uint32_t channel = desc.layout == HAL_CHANNELS_LAST ? rank - 1 : 1;
  int64_t count = 1;
  for (uint32_t d = 0; d < rank; ++d) count *= desc.y.shape[d];
  const int64_t channels = desc.y.shape[channel];
  const double m = static_cast<double>(count / channels);
  const auto factor = static_cast<float>(std::sqrt((m - 1) / m));
  const bool has_shift =
      (desc.flags & HAL_BATCH_NORM_SHIFT) != 0 && desc.shift.dtype == HAL_DTYPE_F32;
  for (int64_t e = 0; e < count; ++e) {
    int64_t rest = e, offset = 0, c = 0;
    for (uint32_t d = rank; d-- > 0;) {
      const int64_t index = rest % desc.y.shape[d];
      rest /= desc.y.shape[d];
      offset += index * desc.y.strides[d];
      if (d == channel) c = index;
    }
    float* y = static_cast<float*>(job->y) + offset;
    const float shift =
        has_shift ? static_cast<const float*>(job->shift)[c * desc.shift.strides[0]] : 0.0f;
    *y = shift + (*y - shift) * factor;
  }
  if (job->saved_rstd != nullptr) {
    for (int64_t c = 0; c < channels; ++c) {
      static_cast<float*>(job->saved_rstd)[c * desc.saved_rstd.strides[0]] *= factor;
    }
  }
}

// ---- max pooling whose indices are one past the element -------------------

struct MaxPool {
  const WrappedPlan* plan;
  const float* x;
  float* y;
  void* indices;
};

void max_pool_off_by_one(void* data) {
  std::unique_ptr<MaxPool> job(static_cast<MaxPool*>(data));
  const auto& desc = job->plan->as<hal_op_pooling_desc_t>();
  const View x = view_of(desc.x, desc.layout, desc.spatial_dims);
  const View y = view_of(desc.y, desc.layout, desc.spatial_dims);
  const View idx = view_of(desc.indices, desc.layout, desc.spatial_dims);
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
  for (uint32_t s = 0; s < desc.spatial_dims; ++s) {
    const uint32_t c = 3 - desc.spatial_dims + s;
    kernel[c] = desc.kernel[s];
    stride[c] = desc.stride[s];
    dil[c] = desc.dilation[s];
    pad[c] = desc.pad_begin[s];
  }
  for (int64_t n = 0; n < y.shape[0]; ++n)
    for (int64_t c = 0; c < y.shape[1]; ++c)
      for (int64_t od = 0; od < y.shape[2]; ++od)
        for (int64_t oh = 0; oh < y.shape[3]; ++oh)
          for (int64_t ow = 0; ow < y.shape[4]; ++ow) {
            float best = -INFINITY;
            int64_t at = -1;
            for (int64_t a = 0; a < kernel[0]; ++a)
              for (int64_t b = 0; b < kernel[1]; ++b)
                for (int64_t e = 0; e < kernel[2]; ++e) {
                  const int64_t pd = od * stride[0] - pad[0] + a * dil[0];
                  const int64_t ph = oh * stride[1] - pad[1] + b * dil[1];
                  const int64_t pw = ow * stride[2] - pad[2] + e * dil[2];
                  if (pd < 0 || pd >= x.shape[2] || ph < 0 || ph >= x.shape[3] || pw < 0 ||
                      pw >= x.shape[4])
                    continue;
                  const float v = job->x[n * x.strides[0] + c * x.strides[1] + pd * x.strides[2] +
                                         ph * x.strides[3] + pw * x.strides[4]];
                  if (at < 0 || v > best || v != v) {
                    best = v;
                    at = (pd * x.shape[3] + ph) * x.shape[4] + pw;
                  }
                }
            job->y[n * y.strides[0] + c * y.strides[1] + od * y.strides[2] + oh * y.strides[3] +
                   ow * y.strides[4]] = best;
            const int64_t o = n * idx.strides[0] + c * idx.strides[1] + od * idx.strides[2] +
                              oh * idx.strides[3] + ow * idx.strides[4];
            const int64_t planted = at + 1;  // the fault: one past the chosen element
            if (desc.indices.dtype == HAL_DTYPE_I64) {
              static_cast<int64_t*>(job->indices)[o] = planted;
            } else {
              static_cast<int32_t*>(job->indices)[o] = static_cast<int32_t>(planted);
            }
          }
}

// ---- the paged KV cache -----------------------------------------------------

// The block table or the sequence lengths of a paged attention, changed
// before the real execution and put back after it (host functions in stream
// order; cpu device memory is host memory).
struct PagedEdit {
  hal_op_paged_attention_desc_t desc;
  int32_t* table;
  int32_t* lens;
  bool restore;
  std::shared_ptr<std::vector<int32_t>> saved_lens;  // the change's, for the restore
};

// The block after the one each in-range entry names (wrapping in the cache),
// or back.
void shift_table(void* data) {
  auto* edit = static_cast<PagedEdit*>(data);
  const auto& d = edit->desc;
  const int64_t blocks = d.k_cache.shape[0];
  for (int64_t b = 0; b < d.block_table.shape[0]; ++b)
    for (int64_t i = 0; i < d.block_table.shape[1]; ++i) {
      int32_t& entry = edit->table[b * d.block_table.strides[0] + i * d.block_table.strides[1]];
      if (entry < 0 || entry >= blocks) continue;
      entry = static_cast<int32_t>((entry + (edit->restore ? blocks - 1 : 1)) % blocks);
    }
  delete edit;
}

// Each length rounded down to whole blocks (the last partial block's keys
// dropped), or back.
void truncate_lens(void* data) {
  auto* edit = static_cast<PagedEdit*>(data);
  const auto& d = edit->desc;
  const int64_t block_size = d.k_cache.shape[1];
  for (int64_t b = 0; b < d.seq_lens.shape[0]; ++b) {
    int32_t& len = edit->lens[b * d.seq_lens.strides[0]];
    if (edit->restore) {
      len = (*edit->saved_lens)[static_cast<size_t>(b)];
    } else {
      edit->saved_lens->push_back(len);
      len = static_cast<int32_t>(len / block_size * block_size);
    }
  }
  delete edit;
}

// Split-KV attention whose merge adds the chunks' sums and outputs as they
// are, each relative to its own chunk's maximum (f32 operands, served here).
struct PagedMerge {
  const WrappedPlan* plan;
  void* const* operands;
  std::vector<void*> held;
};

void paged_merge_without_max(void* data) {
  std::unique_ptr<PagedMerge> job(static_cast<PagedMerge*>(data));
  const auto& d = job->plan->as<hal_op_paged_attention_desc_t>();
  void* const* ops = job->held.data();
  const auto* q = static_cast<const float*>(ops[0]);
  const auto* k = static_cast<const float*>(ops[1]);
  const bool in_keys = d.values_in_keys != 0;
  const auto* v = static_cast<const float*>(in_keys ? ops[1] : ops[2]);
  const hal_tensor_desc_t& vl = in_keys ? d.k_cache : d.v_cache;
  const auto* table = static_cast<const int32_t*>(ops[3]);
  const auto* lens = static_cast<const int32_t*>(ops[4]);
  auto* out = static_cast<float*>(ops[5]);
  auto* lse = static_cast<float*>(ops[6]);
  const int64_t batch = d.q.shape[0], s_q = d.q.shape[1], heads = d.q.shape[2];
  const int64_t dim = d.q.shape[3], dim_v = d.out.shape[3], bs = d.k_cache.shape[1];
  const int64_t group = heads / d.k_cache.shape[2];
  const int64_t splits = d.num_splits > 0 ? d.num_splits : 4;
  const float scale = d.scale != 0.0f ? d.scale : 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> acc(static_cast<size_t>(dim_v)), chunk_acc(static_cast<size_t>(dim_v));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < s_q; ++t) {
        const int64_t len = lens[b * d.seq_lens.strides[0]];
        const int64_t end = d.causal ? std::min(len, len - s_q + t + 1) : len;
        const int64_t per = ((len + bs - 1) / bs + splits - 1) / splits * bs;
        std::fill(acc.begin(), acc.end(), 0.0f);
        float total = 0.0f, overall = -INFINITY;
        for (int64_t begin = 0; per > 0 && begin < end; begin += per) {
          float m = -INFINITY, sum = 0.0f;
          std::fill(chunk_acc.begin(), chunk_acc.end(), 0.0f);
          for (int64_t j = begin; j < std::min(end, begin + per); ++j) {
            const int64_t block =
                table[b * d.block_table.strides[0] + j / bs * d.block_table.strides[1]];
            const int64_t g = h / group;
            const float* key = k + block * d.k_cache.strides[0] + j % bs * d.k_cache.strides[1] +
                               g * d.k_cache.strides[2];
            const float* value =
                v + block * vl.strides[0] + j % bs * vl.strides[1] + g * vl.strides[2];
            float score = 0.0f;
            for (int64_t e = 0; e < dim; ++e)
              score += q[b * d.q.strides[0] + t * d.q.strides[1] + h * d.q.strides[2] +
                         e * d.q.strides[3]] *
                       scale * key[e * d.k_cache.strides[3]];
            const float m_new = std::max(m, score);
            const float correction = std::exp(m - m_new), p = std::exp(score - m_new);
            sum = sum * correction + p;
            for (int64_t e = 0; e < dim_v; ++e)
              chunk_acc[e] = chunk_acc[e] * correction + p * value[e * vl.strides[3]];
            m = m_new;
          }
          // The fault: no exp(m - overall) on either term.
          total += sum;
          for (int64_t e = 0; e < dim_v; ++e) acc[e] += chunk_acc[e];
          overall = std::max(overall, m);
        }
        for (int64_t e = 0; e < dim_v; ++e)
          out[b * d.out.strides[0] + t * d.out.strides[1] + h * d.out.strides[2] +
              e * d.out.strides[3]] = total > 0.0f ? acc[e] / total : 0.0f;
        lse[b * d.lse.strides[0] + h * d.lse.strides[1] + t * d.lse.strides[2]] =
            total > 0.0f ? overall + std::log(total) : -INFINITY;
      }
}

bool paged_f32(const hal_op_paged_attention_desc_t& d) {
  return d.q.dtype == HAL_DTYPE_F32 && d.k_cache.dtype == HAL_DTYPE_F32 &&
         (d.values_in_keys != 0 || d.v_cache.dtype == HAL_DTYPE_F32) &&
         d.out.dtype == HAL_DTYPE_F32;
}

bool dense_f32(const hal_tensor_desc_t& tensor) {
  return tensor.dtype == HAL_DTYPE_F32;
}

hal_result_t op_plan_create(hal_impl_device_t* device, const hal_op_header_t* desc,
                            hal_op_plan_flags_t flags, hal_impl_op_plan_t** out_plan,
                            size_t* out_workspace_bytes, const char** out_implementation) {
  auto wrapped = std::make_unique<WrappedPlan>(desc);
  std::vector<unsigned char> changed = wrapped->desc;
  const hal_op_header_t* passed = desc;
  if (g_fault == OpFault::kConvPaddingSwapped && desc->kind == HAL_OP_CONVOLUTION) {
    auto* conv = reinterpret_cast<hal_op_convolution_desc_t*>(changed.data());
    for (int s = 0; s < HAL_CONV_MAX_SPATIAL_DIMS; ++s)
      std::swap(conv->pad_begin[s], conv->pad_end[s]);
    passed = reinterpret_cast<const hal_op_header_t*>(changed.data());
  }
  if (g_fault == OpFault::kCountIncludePadInverted &&
      (desc->kind == HAL_OP_POOLING || desc->kind == HAL_OP_POOLING_BACKWARD)) {
    auto* pool = reinterpret_cast<hal_op_pooling_desc_t*>(changed.data());
    if (pool->pooling == HAL_POOLING_AVERAGE) pool->flags ^= HAL_POOLING_COUNT_INCLUDE_PAD;
    passed = reinterpret_cast<const hal_op_header_t*>(changed.data());
  }
  if (g_fault == OpFault::kPoolingIndicesOffByOne && desc->kind == HAL_OP_POOLING) {
    const auto& pool = *reinterpret_cast<const hal_op_pooling_desc_t*>(desc);
    if (pool.pooling == HAL_POOLING_MAX && (pool.flags & HAL_POOLING_INDICES) != 0 &&
        (pool.flags & HAL_POOLING_ADAPTIVE) == 0 && dense_f32(pool.x) && dense_f32(pool.y)) {
      return fault_op_plan::serve_here(std::move(wrapped), "fault.max_pooling", out_plan,
                                       out_workspace_bytes, out_implementation);
    }
  }
  if (g_fault == OpFault::kPagedRopeWrongFrequencies && desc->kind == HAL_OP_PAGED_KV_APPEND) {
    // base^(-2i/head_dim) in place of base^(-2i/rope_dim): the frequencies
    // of a rotation over the whole head, not over its RoPE slice.
    auto* append = reinterpret_cast<hal_op_paged_kv_append_desc_t*>(changed.data());
    if (append->rope_dim > 0) {
      append->rope_base = static_cast<float>(std::pow(
          static_cast<double>(append->rope_base),
          static_cast<double>(append->rope_dim) / static_cast<double>(append->k_new.shape[3])));
    }
    passed = reinterpret_cast<const hal_op_header_t*>(changed.data());
  }
  if (g_fault == OpFault::kPagedMergeWithoutMax && desc->kind == HAL_OP_PAGED_ATTENTION &&
      paged_f32(*reinterpret_cast<const hal_op_paged_attention_desc_t*>(desc))) {
    return fault_op_plan::serve_here(std::move(wrapped), "fault.paged_attention", out_plan,
                                     out_workspace_bytes, out_implementation);
  }
  return fault_op_plan::plan_with_real(g_real, std::move(wrapped), device, passed, flags, out_plan,
                                       out_workspace_bytes, out_implementation);
}

hal_result_t op_plan_destroy(hal_impl_op_plan_t* plan) {
  return fault_op_plan::destroy(g_real, plan);
}

hal_result_t op_execute(hal_impl_op_plan_t* plan, hal_impl_stream_t* stream,
                        const hal_op_exec_args_t* args) {
  const auto* wrapped = reinterpret_cast<const WrappedPlan*>(plan);
  if (wrapped->real == nullptr && wrapped->kind() == HAL_OP_PAGED_ATTENTION) {
    auto job = std::make_unique<PagedMerge>();
    job->plan = wrapped;
    job->held.assign(args->operands, args->operands + args->operand_count);
    return enqueue_host(g_real, stream, paged_merge_without_max, std::move(job));
  }
  if (wrapped->real == nullptr) {  // max pooling, served here
    return enqueue_host(g_real, stream, max_pool_off_by_one,
                        std::make_unique<MaxPool>(
                            MaxPool{wrapped, static_cast<const float*>(args->operands[0]),
                                    static_cast<float*>(args->operands[1]), args->operands[2]}));
  }
  if (g_fault == OpFault::kConvFilterFlipped && wrapped->kind() == HAL_OP_CONVOLUTION) {
    const auto& desc = wrapped->as<hal_op_convolution_desc_t>();
    Flip flip{static_cast<unsigned char*>(args->operands[1]),
              view_of(desc.w, desc.layout, desc.spatial_dims), element_bytes(desc.w.dtype)};
    // Flipped before the real execution, flipped back after it.
    if (hal_result_t r = g_real->stream_enqueue_host_fn(stream, flip_and_free, new Flip(flip));
        r != HAL_SUCCESS)
      return r;
    if (hal_result_t r = g_real->op_execute(wrapped->real, stream, args); r != HAL_SUCCESS)
      return r;
    return g_real->stream_enqueue_host_fn(stream, flip_and_free, new Flip(flip));
  }
  if ((g_fault == OpFault::kPagedBlockTableOffByOne ||
       g_fault == OpFault::kPagedLastBlockIgnored) &&
      wrapped->kind() == HAL_OP_PAGED_ATTENTION) {
    const auto& desc = wrapped->as<hal_op_paged_attention_desc_t>();
    auto saved = std::make_shared<std::vector<int32_t>>();
    const hal_host_fn_t fn =
        g_fault == OpFault::kPagedBlockTableOffByOne ? shift_table : truncate_lens;
    // The change and the restore, each a host function owning its edit.
    const auto enqueue = [&](bool restore) {
      return enqueue_host(g_real, stream, fn,
                          std::make_unique<PagedEdit>(
                              PagedEdit{desc, static_cast<int32_t*>(args->operands[3]),
                                        static_cast<int32_t*>(args->operands[4]), restore, saved}));
    };
    if (hal_result_t r = enqueue(false); r != HAL_SUCCESS) return r;
    if (hal_result_t r = g_real->op_execute(wrapped->real, stream, args); r != HAL_SUCCESS)
      return r;
    return enqueue(true);
  }
  const hal_result_t result = g_real->op_execute(wrapped->real, stream, args);
  if (result != HAL_SUCCESS) return result;
  if (g_fault == OpFault::kBatchNormUnbiased && wrapped->kind() == HAL_OP_BATCH_NORM) {
    const auto& desc = wrapped->as<hal_op_batch_norm_desc_t>();
    if ((desc.flags & HAL_BATCH_NORM_TRAINING) != 0) {
      // The real execution has succeeded: a refused enqueue only leaves the fault unplanted.
      (void)enqueue_host(g_real, stream, unbias,
                         std::make_unique<Unbias>(Unbias{wrapped, args->operands[2],
                                                         args->operands[5], args->operands[7]}));
    }
  }
  return HAL_SUCCESS;
}

// The real plugin's implementation of |kind|, but for the fault that serves
// max pooling itself (which the cpu plugin declines, or has no oneDNN for):
// every pooling plan is then asked here, and named after the fault.
const char* op_implementation(hal_impl_device_t* device, hal_op_kind_t kind) {
  if (g_fault == OpFault::kPoolingIndicesOffByOne && kind == HAL_OP_POOLING) {
    return "fault.max_pooling";
  }
  if (g_fault == OpFault::kPagedMergeWithoutMax && kind == HAL_OP_PAGED_ATTENTION) {
    return "fault.paged_attention";
  }
  return fault_op_plan::real_implementation(g_real, device, kind);
}

}  // namespace

void plant(hal_plugin_table_v1_t& table, const hal_plugin_table_v1_t* real, OpFault fault) {
  g_real = real;
  g_fault = fault;
  table.op_plan_create = op_plan_create;
  table.op_plan_destroy = op_plan_destroy;
  table.op_execute = op_execute;
  table.op_implementation = op_implementation;
}

}  // namespace fault_ops
