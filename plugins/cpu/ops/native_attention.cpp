#include "native_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "native_math.hpp"

namespace hal::cpu::ops::native {
namespace {

// Keys per block: a block's transposed keys (dim x kBlockKeys floats) and its
// values stay in L1/L2 while every query row of a work item passes over them.
constexpr int64_t kBlockKeys = kAttentionBlockKeys;
// Query rows per backward step: each key's grad_k and grad_v row takes the
// step's rows as one register-blocked sum.
constexpr int64_t kStepRows = 16;
// Query rows whose scores (and, forward, outputs) are computed together, so
// that each load of a key or value row serves all of them.
constexpr int64_t kRowGroup = 4;
static_assert(kAttentionRowsPerItem % kRowGroup == 0 && kStepRows % kRowGroup == 0);
// Lanes of the partial sums; a multiple of every vector width we build for.
constexpr int64_t kLanes = 16;

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// ---- the hot loops, one clone per ISA ------------------------------------------------

// scores[c] = sum over d of x[d] * keys_t[d * kBlockKeys + c], for the whole
// block (columns past the block's keys are zero in keys_t).
HAL_ISA_CLONES void block_scores(const float* x, const float* keys_t, int64_t dim, float* scores) {
  float sum[kBlockKeys] = {};
  for (int64_t d = 0; d < dim; ++d) {
    const float xd = x[d];
    const float* column = keys_t + d * kBlockKeys;
    for (int64_t c = 0; c < kBlockKeys; ++c) sum[c] += xd * column[c];
  }
  for (int64_t c = 0; c < kBlockKeys; ++c) scores[c] = sum[c];
}

// block_scores for kRowGroup rows of x (row stride dim) at once: each
// column load of keys_t serves every row.
HAL_ISA_CLONES void block_scores_group(const float* x, const float* keys_t, int64_t dim,
                                       float* scores) {
  float sum[kRowGroup][kBlockKeys] = {};
  for (int64_t d = 0; d < dim; ++d) {
    const float* column = keys_t + d * kBlockKeys;
    for (int64_t r = 0; r < kRowGroup; ++r) {
      const float xd = x[r * dim + d];
      for (int64_t c = 0; c < kBlockKeys; ++c) sum[r][c] += xd * column[c];
    }
  }
  for (int64_t r = 0; r < kRowGroup; ++r) {
    for (int64_t c = 0; c < kBlockKeys; ++c) scores[r * kBlockKeys + c] = sum[r][c];
  }
}

// add_weighted_rows for kRowGroup accumulator rows (acc row stride dim,
// weights row stride weight_stride, rows row stride row_stride) at once: each load of rows serves
// every accumulator. kGroupChunks lane chunks per pass make kRowGroup x kGroupChunks independent
// chains, enough to cover the FMA latency (4 chains, one chunk, ran at half the FMA rate); each
// element is still one chain over c in order, so the result does not depend on the blocking.
HAL_ISA_CLONES void add_weighted_rows_group(const float* weights, int64_t weight_stride,
                                            const float* rows, int64_t row_stride, int64_t count,
                                            int64_t dim, float* acc) {
  using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));
  constexpr int64_t kGroupChunks = 2;
  int64_t d0 = 0;
  for (; d0 + kGroupChunks * kLanes <= dim; d0 += kGroupChunks * kLanes) {
    Lanes sum[kRowGroup][kGroupChunks];
    for (int64_t r = 0; r < kRowGroup; ++r) {
      for (int64_t j = 0; j < kGroupChunks; ++j)
        std::memcpy(&sum[r][j], acc + r * dim + d0 + j * kLanes, sizeof sum[r][j]);
    }
    for (int64_t c = 0; c < count; ++c) {
      Lanes row[kGroupChunks];
      for (int64_t j = 0; j < kGroupChunks; ++j)
        std::memcpy(&row[j], rows + c * row_stride + d0 + j * kLanes, sizeof row[j]);
      for (int64_t r = 0; r < kRowGroup; ++r) {
        const float w = weights[r * weight_stride + c];
        for (int64_t j = 0; j < kGroupChunks; ++j) sum[r][j] += w * row[j];
      }
    }
    for (int64_t r = 0; r < kRowGroup; ++r) {
      for (int64_t j = 0; j < kGroupChunks; ++j)
        std::memcpy(acc + r * dim + d0 + j * kLanes, &sum[r][j], sizeof sum[r][j]);
    }
  }
  for (; d0 + kLanes <= dim; d0 += kLanes) {
    Lanes sum[kRowGroup];
    for (int64_t r = 0; r < kRowGroup; ++r) std::memcpy(&sum[r], acc + r * dim + d0, sizeof sum[r]);
    for (int64_t c = 0; c < count; ++c) {
      Lanes row;
      std::memcpy(&row, rows + c * row_stride + d0, sizeof row);
      for (int64_t r = 0; r < kRowGroup; ++r) sum[r] += weights[r * weight_stride + c] * row;
    }
    for (int64_t r = 0; r < kRowGroup; ++r) std::memcpy(acc + r * dim + d0, &sum[r], sizeof sum[r]);
  }
  for (; d0 < dim; ++d0) {
    for (int64_t r = 0; r < kRowGroup; ++r) {
      float sum = acc[r * dim + d0];
      for (int64_t c = 0; c < count; ++c)
        sum += weights[r * weight_stride + c] * rows[c * row_stride + d0];
      acc[r * dim + d0] = sum;
    }
  }
}

// acc[0, dim) += sum over c < count of weights[c] * rows[c * row_stride + 0,
// dim), in an order fixed by count and dim.
HAL_ISA_CLONES void add_weighted_rows(const float* weights, const float* rows, int64_t row_stride,
                                      int64_t count, int64_t dim, float* acc) {
  // kLanes columns at a time held in registers (a GCC vector: one zmm, two
  // ymm or four xmm, by the clone) across the whole sum.
  using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));
  int64_t d0 = 0;
  for (; d0 + kLanes <= dim; d0 += kLanes) {
    // Four independent chains (c mod 4), so the FMAs overlap their latency.
    Lanes sum[4] = {};
    std::memcpy(&sum[0], acc + d0, sizeof sum[0]);
    int64_t c = 0;
    for (; c + 4 <= count; c += 4) {
      for (int64_t k = 0; k < 4; ++k) {
        Lanes row;
        std::memcpy(&row, rows + (c + k) * row_stride + d0, sizeof row);
        sum[k] += weights[c + k] * row;
      }
    }
    for (; c < count; ++c) {
      Lanes row;
      std::memcpy(&row, rows + c * row_stride + d0, sizeof row);
      sum[0] += weights[c] * row;
    }
    const Lanes total = (sum[0] + sum[1]) + (sum[2] + sum[3]);
    std::memcpy(acc + d0, &total, sizeof total);
  }
  for (; d0 < dim; ++d0) {
    float sum = acc[d0];
    for (int64_t c = 0; c < count; ++c) sum += weights[c] * rows[c * row_stride + d0];
    acc[d0] = sum;
  }
}

// One key block of the forward for one query row: scores[0, count)
// (already scaled) enter the running max and sum; they become the block's
// probabilities relative to the new max, zero on [count, width); the row's
// output accumulator is rescaled to the new max (the caller adds P.V).
HAL_ISA_CLONES void online_softmax_step(float* scores, int64_t count, int64_t width, int64_t dim,
                                        float* running_max, float* running_sum, float* acc) {
  float lane_max[kLanes];
  for (int64_t t = 0; t < kLanes; ++t) lane_max[t] = kMinusInfinity;
  int64_t m = 0;
  for (; m + kLanes <= count; m += kLanes) {
    for (int64_t t = 0; t < kLanes; ++t) {
      lane_max[t] = scores[m + t] > lane_max[t] ? scores[m + t] : lane_max[t];
    }
  }
  float block_max = kMinusInfinity;
  for (int64_t t = 0; t < kLanes; ++t)
    block_max = lane_max[t] > block_max ? lane_max[t] : block_max;
  for (; m < count; ++m) block_max = scores[m] > block_max ? scores[m] : block_max;
  const float new_max = block_max > *running_max ? block_max : *running_max;
  // The first block (running max -inf) has nothing to rescale.
  const float correction =
      *running_max == kMinusInfinity ? 0.0f : exp_clamped(*running_max - new_max);
  float lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= count; c += kLanes) {
    for (int64_t t = 0; t < kLanes; ++t) {
      scores[c + t] = exp_clamped(scores[c + t] - new_max);
      lanes[t] += scores[c + t];
    }
  }
  float block_sum = 0.0f;
  for (int64_t t = 0; t < kLanes; ++t) block_sum += lanes[t];
  for (; c < count; ++c) {
    scores[c] = exp_clamped(scores[c] - new_max);
    block_sum += scores[c];
  }
  for (; c < width; ++c) scores[c] = 0.0f;
  *running_sum = *running_sum * correction + block_sum;
  *running_max = new_max;
  // The max rarely moves after the first blocks; x * 1 is x, so skipping
  // the pass over the row changes no bit.
  if (correction != 1.0f) {
    for (int64_t d = 0; d < dim; ++d) acc[d] *= correction;
  }
}

// One key block of the backward for one query row: probs[c] = exp(scale *
// probs[c] - lse) from the raw scores, grad_scores[c] = scale * probs[c] *
// (grad_probs[c] - delta) from dO.V, for c < count; both zero on [count,
// kBlockKeys), the keys the row does not see.
HAL_ISA_CLONES void backward_step(float* probs, float* grad_probs, int64_t count, float scale,
                                  float lse, float delta) {
  for (int64_t c = 0; c < count; ++c) {
    probs[c] = exp_clamped(scale * probs[c] - lse);
    grad_probs[c] = scale * probs[c] * (grad_probs[c] - delta);
  }
  for (int64_t c = count; c < kBlockKeys; ++c) probs[c] = grad_probs[c] = 0.0f;
}

HAL_ISA_CLONES float dot(const float* a, const float* b, int64_t count) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int64_t t = 0; t < kLanes; ++t) lanes[t] += a[i + t] * b[i + t];
  }
  float sum = 0.0f;
  for (int64_t t = 0; t < kLanes; ++t) sum += lanes[t];
  for (; i < count; ++i) sum += a[i] * b[i];
  return sum;
}

// ---- operand access -------------------------------------------------------------------

size_t element_bytes(Type type) {
  return type == Type::kF32 ? 4 : 2;
}

const void* row_address(const HeadsView& view, int64_t b, int64_t s, int64_t h) {
  const int64_t offset = b * view.stride[0] + s * view.stride[1] + h * view.stride[2];
  return static_cast<const char*>(view.data) +
         offset * static_cast<int64_t>(element_bytes(view.type));
}

void load_row(const HeadsView& view, int64_t b, int64_t s, int64_t h, int64_t dim, float* out) {
  convert(ConstRef{row_address(view, b, s, h), view.type}, Ref{out, Type::kF32},
          static_cast<size_t>(dim));
}

void store_row(const HeadsView& view, int64_t b, int64_t s, int64_t h, int64_t dim,
               const float* row) {
  convert(ConstRef{row, Type::kF32}, Ref{const_cast<void*>(row_address(view, b, s, h)), view.type},
          static_cast<size_t>(dim));
}

float& lse_at(const LseView& view, int64_t b, int64_t h, int64_t i) {
  return view.data[b * view.stride[0] + h * view.stride[1] + i * view.stride[2]];
}

// Keys [0, n) that query row i sees.
int64_t visible_keys(const Attention& a, int64_t i) {
  switch (a.causal) {
    case HAL_CAUSAL_TOP_LEFT:
      return std::min(a.s_k, i + 1);
    case HAL_CAUSAL_BOTTOM_RIGHT:
      return std::clamp<int64_t>(i + 1 + a.s_k - a.s_q, 0, a.s_k);
    default:
      return a.s_k;
  }
}

// The first query row that sees key j (s_q when none does).
int64_t first_row_seeing(const Attention& a, int64_t j) {
  switch (a.causal) {
    case HAL_CAUSAL_TOP_LEFT:
      return std::min(a.s_q, j);
    case HAL_CAUSAL_BOTTOM_RIGHT:
      return std::clamp<int64_t>(j - (a.s_k - a.s_q), 0, a.s_q);
    default:
      return 0;
  }
}

// Packs keys [first, first + count) of |view| as dim x kBlockKeys columns
// (transposed), the columns past |count| zero; |row| is scratch for one row.
void pack_transposed(const HeadsView& view, int64_t b, int64_t h, int64_t first, int64_t count,
                     int64_t dim, float* row, float* out) {
  for (int64_t c = 0; c < count; ++c) {
    const float* source = row;
    if (view.type == Type::kF32) {
      source = static_cast<const float*>(row_address(view, b, first + c, h));  // read in place
    } else {
      load_row(view, b, first + c, h, dim, row);
    }
    for (int64_t d = 0; d < dim; ++d) out[d * kBlockKeys + c] = source[d];
  }
  if (count < kBlockKeys) {
    for (int64_t d = 0; d < dim; ++d)
      std::fill_n(out + d * kBlockKeys + count, kBlockKeys - count, 0.0f);
  }
}

// The f32 rows [first, first + count) of |view| in place (row stride
// *out_stride), or else converted into |scratch| (row stride dim).
const float* rows_as_f32(const HeadsView& view, int64_t b, int64_t h, int64_t first, int64_t count,
                         int64_t dim, float* scratch, int64_t* out_stride) {
  if (view.type == Type::kF32) {
    *out_stride = view.stride[1];
    return static_cast<const float*>(row_address(view, b, first, h));
  }
  for (int64_t c = 0; c < count; ++c) load_row(view, b, first + c, h, dim, scratch + c * dim);
  *out_stride = dim;
  return scratch;
}

}  // namespace

void prepare_forward(const Attention& a, AttentionScratch& s) {
  const size_t dim = static_cast<size_t>(a.dim), rows = kAttentionRowsPerItem;
  s.rows.resize(rows * dim);
  s.acc.resize(rows * dim);
  s.max.resize(rows);
  s.sum.resize(rows);
  s.keys_t.resize(dim * kBlockKeys);
  s.values.resize(kBlockKeys * dim);
  s.scores.resize(kRowGroup * kBlockKeys);
  s.row.resize(dim);
}

void prepare_backward(const Attention& a, AttentionScratch& s) {
  const size_t dim = static_cast<size_t>(a.dim);
  const size_t rows_total = static_cast<size_t>(a.s_q);  // one query head's
  s.rows.resize(rows_total * dim);
  s.grad_rows.resize(rows_total * dim);
  s.grad_q.resize(rows_total * dim);
  s.delta.resize(rows_total);
  s.lse.resize(rows_total);
  s.keys_t.resize(dim * kBlockKeys);
  s.values_t.resize(dim * kBlockKeys);
  s.keys.resize(kBlockKeys * dim);
  s.grad_k.resize(kBlockKeys * dim);
  s.grad_v.resize(kBlockKeys * dim);
  s.scores.resize(kStepRows * kBlockKeys);
  s.grad_scores.resize(kStepRows * kBlockKeys);
  s.probs_t.resize(kBlockKeys * kStepRows);
  s.grad_scores_t.resize(kBlockKeys * kStepRows);
  s.row.resize(dim);
}

void attention_forward(const Attention& a, int64_t b, int64_t head, int64_t row_begin,
                       int64_t row_end, AttentionScratch& scratch) {
  const int64_t dim = a.dim, rows = row_end - row_begin;
  const int64_t kv_head = head / (a.heads / a.kv_heads);
  const int64_t seq = a.sequence < 0 ? b : a.sequence;  // the sparsity tensor's index
  AttentionScratch& s = scratch;
  std::fill_n(s.acc.begin(), rows * dim, 0.0f);
  std::fill_n(s.max.begin(), rows, kMinusInfinity);
  std::fill_n(s.sum.begin(), rows, 0.0f);
  // The rows past |rows| of the last group: zero queries, never read back.
  std::fill(s.rows.begin() + rows * dim, s.rows.end(), 0.0f);
  // Queries pre-scaled, so scores come out scaled.
  for (int64_t r = 0; r < rows; ++r) {
    float* q = s.rows.data() + r * dim;
    load_row(a.q, b, row_begin + r, head, dim, q);
    for (int64_t d = 0; d < dim; ++d) q[d] *= a.scale;
  }
  const int64_t key_end = rows > 0 ? visible_keys(a, row_end - 1) : 0;  // monotone in the row
  for (int64_t first = 0; first < key_end; first += kBlockKeys) {
    if (!a.blocks.any_sees(seq, a.heads, head, row_begin, row_end, first)) continue;
    const int64_t count = std::min(kBlockKeys, key_end - first);
    pack_transposed(a.k, b, kv_head, first, count, dim, s.row.data(), s.keys_t.data());
    int64_t values_stride = dim;
    const float* values =
        rows_as_f32(a.v, b, kv_head, first, count, dim, s.values.data(), &values_stride);
    for (int64_t group = 0; group < rows; group += kRowGroup) {
      int64_t seen[kRowGroup], widest = 0, narrowest = count;
      for (int64_t k = 0; k < kRowGroup; ++k) {
        const int64_t r = group + k;
        seen[k] = r < rows && a.blocks.sees(seq, a.heads, head, row_begin + r, first)
                      ? std::clamp<int64_t>(visible_keys(a, row_begin + r) - first, 0, count)
                      : 0;
        widest = std::max(widest, seen[k]);
        if (group + k < rows) narrowest = std::min(narrowest, seen[k]);
      }
      if (widest == 0) continue;
      float* scores = s.scores.data();
      block_scores_group(s.rows.data() + group * dim, s.keys_t.data(), dim, scores);
      for (int64_t k = 0; k < kRowGroup; ++k) {
        float* row_scores = scores + k * kBlockKeys;
        if (seen[k] == 0) {
          std::fill_n(row_scores, widest, 0.0f);
        } else {
          online_softmax_step(row_scores, seen[k], widest, dim, &s.max[group + k],
                              &s.sum[group + k], s.acc.data() + (group + k) * dim);
        }
      }
      if (narrowest == widest) {
        add_weighted_rows_group(scores, kBlockKeys, values, values_stride, widest, dim,
                                s.acc.data() + group * dim);
      } else {
        // Rows that see fewer keys (a causal diagonal, a sparse block
        // edge) sum over their own: a weight of 0 times a value they do not
        // see (inf or NaN in a masked block) would still reach them.
        for (int64_t k = 0; k < kRowGroup && group + k < rows; ++k) {
          if (seen[k] > 0)
            add_weighted_rows(scores + k * kBlockKeys, values, values_stride, seen[k], dim,
                              s.acc.data() + (group + k) * dim);
        }
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* acc = s.acc.data() + r * dim;
    const float sum = s.sum[r];
    // A row that saw no key: output 0, lse -inf.
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t d = 0; d < dim; ++d) acc[d] *= inverse;
    store_row(a.out, b, row_begin + r, head, dim, acc);
    lse_at(a.lse, b, head, row_begin + r) = sum > 0.0f ? s.max[r] + std::log(sum) : kMinusInfinity;
  }
}

void attention_backward(const Attention& a, int64_t b, int64_t head, const KvPartials& partials,
                        AttentionScratch& scratch) {
  const int64_t dim = a.dim, s_q = a.s_q;
  const int64_t kv_head = head / (a.heads / a.kv_heads);
  const int64_t seq = a.sequence < 0 ? b : a.sequence;  // the sparsity tensor's index
  AttentionScratch& s = scratch;
  // The head's queries and output gradients, packed once (f32 rows).
  std::fill_n(s.grad_q.begin(), s_q * dim, 0.0f);
  for (int64_t i = 0; i < s_q; ++i) {
    float* q = s.rows.data() + i * dim;
    float* grad_out = s.grad_rows.data() + i * dim;
    load_row(a.q, b, i, head, dim, q);
    load_row(a.grad_out, b, i, head, dim, grad_out);
    load_row(a.out, b, i, head, dim, s.row.data());
    s.delta[static_cast<size_t>(i)] =
        dot(s.row.data(), grad_out, dim);  // the softmax backward's row term
    s.lse[static_cast<size_t>(i)] = lse_at(a.lse, b, head, i);
  }
  // A key's grad_k and grad_v rows: into the operands, or this head's partials.
  const auto store_key = [&](int64_t key, const float* grad_k, const float* grad_v) {
    if (partials.grad_k == nullptr) {
      store_row(a.grad_k, b, key, kv_head, dim, grad_k);
      store_row(a.grad_v, b, key, kv_head, dim, grad_v);
    } else {
      std::memcpy(partials.grad_k + key * partials.row_stride, grad_k,
                  static_cast<size_t>(dim) * sizeof(float));
      std::memcpy(partials.grad_v + key * partials.row_stride, grad_v,
                  static_cast<size_t>(dim) * sizeof(float));
    }
  };
  for (int64_t first = 0; first < a.s_k; first += kBlockKeys) {
    const int64_t count = std::min(kBlockKeys, a.s_k - first);
    const int64_t first_row = first_row_seeing(a, first);
    if (!a.blocks.any_sees(seq, a.heads, head, first_row, s_q, first)) {
      // This head's share of grad_k and grad_v of keys none of its rows sees: zero.
      std::fill_n(s.row.begin(), dim, 0.0f);
      for (int64_t c = 0; c < count; ++c) store_key(first + c, s.row.data(), s.row.data());
      continue;
    }
    pack_transposed(a.k, b, kv_head, first, count, dim, s.row.data(), s.keys_t.data());
    pack_transposed(a.v, b, kv_head, first, count, dim, s.row.data(), s.values_t.data());
    int64_t keys_stride = dim;
    const float* keys =
        rows_as_f32(a.k, b, kv_head, first, count, dim, s.keys.data(), &keys_stride);
    std::fill(s.grad_k.begin(), s.grad_k.end(), 0.0f);
    std::fill(s.grad_v.begin(), s.grad_v.end(), 0.0f);
    for (int64_t step = first_row; step < s_q; step += kStepRows) {
      const int64_t rows = std::min(kStepRows, s_q - step);
      if (!a.blocks.any_sees(seq, a.heads, head, step, step + rows, first)) continue;
      const size_t base = static_cast<size_t>(step);
      const float* q = s.rows.data() + base * static_cast<size_t>(dim);
      const float* grad_out = s.grad_rows.data() + base * static_cast<size_t>(dim);
      // Probabilities and score gradients of the step's rows (zero where a
      // row does not see a key), then transposed for the per-key sums.
      for (int64_t group = 0; group < rows; group += kRowGroup) {
        if (group + kRowGroup <= rows) {
          block_scores_group(q + group * dim, s.keys_t.data(), dim,
                             s.scores.data() + group * kBlockKeys);
          block_scores_group(grad_out + group * dim, s.values_t.data(), dim,
                             s.grad_scores.data() + group * kBlockKeys);
        } else {
          for (int64_t r = group; r < rows; ++r) {
            block_scores(q + r * dim, s.keys_t.data(), dim, s.scores.data() + r * kBlockKeys);
            block_scores(grad_out + r * dim, s.values_t.data(), dim,
                         s.grad_scores.data() + r * kBlockKeys);
          }
        }
      }
      int64_t seen_by[kStepRows];  // keys [0, seen_by[r]) of the block row r sees
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t seen = a.blocks.sees(seq, a.heads, head, step + r, first)
                                 ? std::clamp<int64_t>(visible_keys(a, step + r) - first, 0, count)
                                 : 0;
        seen_by[r] = seen;
        float* probs = s.scores.data() + r * kBlockKeys;
        float* grad_scores = s.grad_scores.data() + r * kBlockKeys;
        backward_step(probs, grad_scores, seen, a.scale, s.lse[base + static_cast<size_t>(r)],
                      s.delta[base + static_cast<size_t>(r)]);
        for (int64_t c = 0; c < count; ++c) {
          s.probs_t[static_cast<size_t>(c * kStepRows + r)] = probs[c];
          s.grad_scores_t[static_cast<size_t>(c * kStepRows + r)] = grad_scores[c];
        }
      }
      // grad_q: kRowGroup rows that see the same keys at once; a row that
      // sees fewer sums over its own only (a weight of 0 times a key it
      // does not see, inf or NaN, must not reach it).
      for (int64_t r = 0; r < rows;) {
        float* grad_q = s.grad_q.data() + (base + static_cast<size_t>(r)) * dim;
        if (r + kRowGroup <= rows &&
            std::all_of(seen_by + r, seen_by + r + kRowGroup,
                        [&](int64_t seen) { return seen == seen_by[r]; })) {
          if (seen_by[r] > 0) {
            add_weighted_rows_group(s.grad_scores.data() + r * kBlockKeys, kBlockKeys, keys,
                                    keys_stride, seen_by[r], dim, grad_q);
          }
          r += kRowGroup;
          continue;
        }
        if (seen_by[r] > 0) {
          add_weighted_rows(s.grad_scores.data() + r * kBlockKeys, keys, keys_stride, seen_by[r],
                            dim, grad_q);
        }
        ++r;
      }
      // Key c sums over the rows that see it only: a weight of 0 times a
      // row that does not (inf or NaN in a masked query row) must not
      // reach its gradients. Causal rows that see c are a suffix of the
      // step; a sparse block edge may split it, then row by row.
      // The rows seeing key c: [lo, rows) when they are a suffix.
      const auto seeing_suffix = [&](int64_t c, int64_t* out_lo) {
        int64_t lo = 0;
        while (lo < rows && seen_by[lo] <= c) ++lo;
        bool suffix = true;
        for (int64_t r = lo; r < rows && suffix; ++r) suffix = seen_by[r] > c;
        *out_lo = lo;
        return suffix;
      };
      for (int64_t c = 0; c < count;) {
        int64_t lo = 0;
        const bool suffix = seeing_suffix(c, &lo);
        const size_t at = static_cast<size_t>(c * kStepRows);
        // kRowGroup keys that the same rows see at once (the step's keys
        // off a causal diagonal): each row of dO and Q serves all four.
        if (suffix && lo < rows && c + kRowGroup <= count) {
          bool same = true;
          for (int64_t k = 1; k < kRowGroup && same; ++k) {
            int64_t lo_k = 0;
            same = seeing_suffix(c + k, &lo_k) && lo_k == lo;
          }
          if (same) {
            add_weighted_rows_group(s.probs_t.data() + at + lo, kStepRows, grad_out + lo * dim, dim,
                                    rows - lo, dim, s.grad_v.data() + c * dim);
            add_weighted_rows_group(s.grad_scores_t.data() + at + lo, kStepRows, q + lo * dim, dim,
                                    rows - lo, dim, s.grad_k.data() + c * dim);
            c += kRowGroup;
            continue;
          }
        }
        const int64_t key = c++;
        if (suffix) {
          if (lo == rows) continue;
          add_weighted_rows(s.probs_t.data() + at + lo, grad_out + lo * dim, dim, rows - lo, dim,
                            s.grad_v.data() + key * dim);
          add_weighted_rows(s.grad_scores_t.data() + at + lo, q + lo * dim, dim, rows - lo, dim,
                            s.grad_k.data() + key * dim);
          continue;
        }
        for (int64_t r = lo; r < rows; ++r) {
          if (seen_by[r] <= key) continue;
          add_weighted_rows(s.probs_t.data() + at + r, grad_out + r * dim, dim, 1, dim,
                            s.grad_v.data() + key * dim);
          add_weighted_rows(s.grad_scores_t.data() + at + r, q + r * dim, dim, 1, dim,
                            s.grad_k.data() + key * dim);
        }
      }
    }
    for (int64_t c = 0; c < count; ++c) {
      store_key(first + c, s.grad_k.data() + c * dim, s.grad_v.data() + c * dim);
    }
  }
  for (int64_t i = 0; i < s_q; ++i) {
    store_row(a.grad_q, b, i, head, dim, s.grad_q.data() + static_cast<size_t>(i) * dim);
  }
}

void reduce_grouped_kv(const Attention& a, int64_t b, int64_t kv_head, int64_t row_begin,
                       int64_t row_end, const KvPartials& first_head, float* row) {
  const int64_t dim = a.dim, group = a.heads / a.kv_heads;
  // Head kv_head * group + g's partial row j lies g * dim floats past head
  // kv_head * group's.
  for (const bool values : {false, true}) {
    const float* partial = values ? first_head.grad_v : first_head.grad_k;
    const HeadsView& out = values ? a.grad_v : a.grad_k;
    for (int64_t j = row_begin; j < row_end; ++j) {
      const float* head_rows = partial + j * first_head.row_stride;
      std::memcpy(row, head_rows, static_cast<size_t>(dim) * sizeof(float));
      for (int64_t g = 1; g < group; ++g) {
        const float* add = head_rows + g * dim;
        for (int64_t d = 0; d < dim; ++d) row[d] += add[d];
      }
      store_row(out, b, j, kv_head, dim, row);
    }
  }
}

namespace {
HeadsView shifted(HeadsView view, int64_t rows) {
  view.data = static_cast<char*>(view.data) +
              rows * view.stride[1] * static_cast<int64_t>(element_bytes(view.type));
  return view;
}
}  // namespace

Attention sequence_view(const Attention& a, int64_t sequence, int64_t q_begin, int64_t q_len,
                        int64_t k_begin, int64_t k_len) {
  Attention view = a;
  view.batch = 1;
  view.sequence = sequence;
  view.s_q = q_len;
  view.s_k = k_len;
  for (HeadsView* q_rows : {&view.q, &view.out, &view.grad_out, &view.grad_q}) {
    if (q_rows->data != nullptr) *q_rows = shifted(*q_rows, q_begin);
  }
  for (HeadsView* k_rows : {&view.k, &view.v, &view.grad_k, &view.grad_v}) {
    if (k_rows->data != nullptr) *k_rows = shifted(*k_rows, k_begin);
  }
  view.lse.data += q_begin * a.lse.stride[2];
  return view;
}

void clear_query_rows(const Attention& a, bool backward, int64_t row_begin, int64_t row_end) {
  const std::vector<float> zeros(static_cast<size_t>(a.dim), 0.0f);
  for (int64_t i = row_begin; i < row_end; ++i) {
    for (int64_t h = 0; h < a.heads; ++h) {
      if (backward) {
        store_row(a.grad_q, 0, i, h, a.dim, zeros.data());
      } else {
        store_row(a.out, 0, i, h, a.dim, zeros.data());
        lse_at(a.lse, 0, h, i) = kMinusInfinity;
      }
    }
  }
}

void clear_key_rows(const Attention& a, int64_t row_begin, int64_t row_end) {
  const std::vector<float> zeros(static_cast<size_t>(a.dim), 0.0f);
  for (int64_t j = row_begin; j < row_end; ++j) {
    for (int64_t h = 0; h < a.kv_heads; ++h) {
      store_row(a.grad_k, 0, j, h, a.dim, zeros.data());
      store_row(a.grad_v, 0, j, h, a.dim, zeros.data());
    }
  }
}

}  // namespace hal::cpu::ops::native
