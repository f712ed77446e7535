// HAL_OP_ATTENTION and HAL_OP_ATTENTION_BACKWARD against a float64 reference
// that forms the whole score matrix of each row and applies the textbook
// softmax (no online rescaling), with the causal and block-sparse masks
// written from their definitions in SPEC.md §17.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>
#include <utility>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kAttentionDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Case {
  hal_dtype_t dtype = HAL_DTYPE_F32;
  int64_t batch = 1;         // sequences
  int64_t s_q = 8, s_k = 8;  // rows per tensor batch (varlen: packed rows)
  int64_t heads = 2, kv_heads = 2, dim = 16;
  hal_causal_alignment_t causal = HAL_CAUSAL_NONE;
  hal_attention_sparsity_t sparsity = HAL_ATTENTION_DENSE;
  uint32_t block_q = 0, block_k = 0, topk = 0;
  float scale = 0.0f;
  bool varlen = false;
  std::vector<int32_t> cu_q, cu_k;  // varlen: as given to the device
  uint32_t max_seqlen_q = 0, max_seqlen_k = 0;
  std::vector<int32_t> sparse;  // block mask bytes or block indices, row-major
  bool strided_q = false;       // q is a [b, h, s, d] buffer seen as [b, s, h, d]

  int64_t tensor_batch() const { return varlen ? 1 : batch; }
  std::string name() const {
    return std::string(dtype_label(dtype)) + " b=" + std::to_string(batch) +
           " s_q=" + std::to_string(s_q) + " s_k=" + std::to_string(s_k) +
           " h=" + std::to_string(heads) + "/" + std::to_string(kv_heads) +
           " d=" + std::to_string(dim) + " causal=" + std::to_string(causal) +
           " sparsity=" + std::to_string(sparsity) + (varlen ? " varlen" : "");
  }
};

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t query_blocks(const Case& c) {
  return ceil_div(c.varlen ? c.max_seqlen_q : c.s_q, c.block_q);
}
int64_t key_blocks(const Case& c) {
  return ceil_div(c.varlen ? c.max_seqlen_k : c.s_k, c.block_k);
}

// One sequence: its tensor batch and first rows and lengths in q and k.
struct Sequence {
  int64_t tensor_batch, start_q, len_q, start_k, len_k;
};

// Cumulative lengths as SPEC.md states untrusted ones are read: each clamped
// to [previous, rows].
std::vector<int64_t> sanitized(const std::vector<int32_t>& cu, int64_t rows) {
  std::vector<int64_t> out(cu.size());
  int64_t previous = 0;
  for (size_t b = 0; b < cu.size(); ++b) {
    previous = std::clamp<int64_t>(cu[b], previous, rows);
    out[b] = previous;
  }
  return out;
}

std::vector<Sequence> sequences(const Case& c) {
  std::vector<Sequence> out;
  if (!c.varlen) {
    for (int64_t b = 0; b < c.batch; ++b) out.push_back({b, 0, c.s_q, 0, c.s_k});
    return out;
  }
  const auto q = sanitized(c.cu_q, c.s_q);
  const auto k = sanitized(c.cu_k, c.s_k);
  for (int64_t b = 0; b < c.batch; ++b) {
    out.push_back({0, q[b], q[b + 1] - q[b], k[b], k[b + 1] - k[b]});
  }
  return out;
}

// Whether query i of sequence b, head h, sees key j (both local indices).
bool sees(const Case& c, int64_t b, int64_t h, const Sequence& s, int64_t i, int64_t j) {
  if (c.causal == HAL_CAUSAL_TOP_LEFT && j > i) return false;
  if (c.causal == HAL_CAUSAL_BOTTOM_RIGHT && j > i + s.len_k - s.len_q) return false;
  if (c.sparsity == HAL_ATTENTION_DENSE) return true;
  const int64_t qb = i / c.block_q, kb = j / c.block_k;
  const int64_t nqb = query_blocks(c), nkb = key_blocks(c);
  if (qb >= nqb || kb >= nkb) return false;
  const int64_t row = (b * c.heads + h) * nqb + qb;
  if (c.sparsity == HAL_ATTENTION_BLOCK_MASK) return c.sparse[row * nkb + kb] != 0;
  for (uint32_t t = 0; t < c.topk; ++t) {
    if (c.sparse[row * c.topk + t] == kb) return true;
  }
  return false;
}

struct Tensors {
  std::vector<double> q, k, v, out, lse, dout, dq, dk, dv;
};

// Row-major [tb, s, h, d] index.
int64_t at(int64_t rows, int64_t heads, int64_t dim, int64_t tb, int64_t t, int64_t h, int64_t d) {
  return ((tb * rows + t) * heads + h) * dim + d;
}

// The float64 reference: out, lse, and with |dout| the gradients from the
// textbook softmax Jacobian dS = P o (dP - rowsum(P o dP)).
void attention_reference(const Case& c, Tensors& x, bool backward) {
  const int64_t tb_count = c.tensor_batch(), H = c.heads, D = c.dim, group = c.heads / c.kv_heads;
  const double scale = c.scale != 0.0f ? c.scale : 1.0 / std::sqrt(static_cast<double>(D));
  x.out.assign(tb_count * c.s_q * H * D, 0.0);
  x.lse.assign(tb_count * H * c.s_q, kNegInf);
  if (backward) {
    x.dq.assign(x.q.size(), 0.0);
    x.dk.assign(x.k.size(), 0.0);
    x.dv.assign(x.v.size(), 0.0);
  }
  const auto seqs = sequences(c);
  for (int64_t b = 0; b < static_cast<int64_t>(seqs.size()); ++b) {
    const Sequence& s = seqs[b];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < s.len_q; ++i) {
        const int64_t tq = s.start_q + i;
        std::vector<int64_t> keys;
        std::vector<double> score;
        for (int64_t j = 0; j < s.len_k; ++j) {
          if (!sees(c, b, h, s, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += x.q[at(c.s_q, H, D, s.tensor_batch, tq, h, d)] *
                   x.k[at(c.s_k, c.kv_heads, D, s.tensor_batch, s.start_k + j, g, d)];
          }
          keys.push_back(j);
          score.push_back(dot * scale);
        }
        if (keys.empty()) continue;  // out 0, lse -inf
        double total = 0;
        for (double e : score) total += std::exp(e);
        std::vector<double> p(keys.size());
        for (size_t n = 0; n < keys.size(); ++n) p[n] = std::exp(score[n]) / total;
        x.lse[(s.tensor_batch * H + h) * c.s_q + tq] = std::log(total);
        for (size_t n = 0; n < keys.size(); ++n) {
          for (int64_t d = 0; d < D; ++d) {
            x.out[at(c.s_q, H, D, s.tensor_batch, tq, h, d)] +=
                p[n] * x.v[at(c.s_k, c.kv_heads, D, s.tensor_batch, s.start_k + keys[n], g, d)];
          }
        }
        if (!backward) continue;
        std::vector<double> dp(keys.size(), 0.0);
        double weighted = 0;
        for (size_t n = 0; n < keys.size(); ++n) {
          for (int64_t d = 0; d < D; ++d) {
            dp[n] += x.dout[at(c.s_q, H, D, s.tensor_batch, tq, h, d)] *
                     x.v[at(c.s_k, c.kv_heads, D, s.tensor_batch, s.start_k + keys[n], g, d)];
          }
          weighted += p[n] * dp[n];
        }
        for (size_t n = 0; n < keys.size(); ++n) {
          const double ds = p[n] * (dp[n] - weighted);
          for (int64_t d = 0; d < D; ++d) {
            const int64_t qi = at(c.s_q, H, D, s.tensor_batch, tq, h, d);
            const int64_t ki = at(c.s_k, c.kv_heads, D, s.tensor_batch, s.start_k + keys[n], g, d);
            x.dq[qi] += scale * ds * x.k[ki];
            x.dk[ki] += scale * ds * x.q[qi];
            x.dv[ki] += p[n] * x.dout[qi];
          }
        }
      }
    }
  }
}

hal_op_attention_desc_t make_desc(const Case& c, bool backward) {
  hal_op_attention_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = backward ? HAL_OP_ATTENTION_BACKWARD : HAL_OP_ATTENTION;
  desc.causal = c.causal;
  desc.sparsity = c.sparsity;
  desc.scale = c.scale;
  desc.has_cu_seqlens = c.varlen ? 1 : 0;
  desc.batch = static_cast<uint32_t>(c.batch);
  desc.max_seqlen_q = c.max_seqlen_q;
  desc.max_seqlen_k = c.max_seqlen_k;
  desc.block_q = c.block_q;
  desc.block_k = c.block_k;
  desc.topk = c.topk;
  const int64_t tb = c.tensor_batch();
  desc.q = c.strided_q ? transposed(dense(c.dtype, {tb, c.heads, c.s_q, c.dim}), 1, 2)
                       : dense(c.dtype, {tb, c.s_q, c.heads, c.dim});
  desc.k = dense(c.dtype, {tb, c.s_k, c.kv_heads, c.dim});
  desc.v = desc.k;
  desc.out = dense(c.dtype, {tb, c.s_q, c.heads, c.dim});
  desc.lse = dense(HAL_DTYPE_F32, {tb, c.heads, c.s_q});
  desc.grad_out = desc.out;
  desc.grad_q = desc.out;
  desc.grad_k = desc.k;
  desc.grad_v = desc.k;
  return desc;
}

std::vector<double> to_doubles(const std::vector<int32_t>& values) {
  return std::vector<double>(values.begin(), values.end());
}

hal_tensor_desc_t sparse_layout(const Case& c) {
  const int64_t inner = c.sparsity == HAL_ATTENTION_BLOCK_INDICES ? int64_t{c.topk} : key_blocks(c);
  return dense(c.sparsity == HAL_ATTENTION_BLOCK_INDICES ? HAL_DTYPE_I32 : HAL_DTYPE_U8,
               {c.batch, c.heads, query_blocks(c), inner});
}

// The index operands (cu_seqlens, sparsity) of a case on the device.
struct IndexOperands {
  std::unique_ptr<DeviceTensor> cu_q, cu_k, sparse;
  IndexOperands(TestContext& ctx, const Case& c) {
    if (c.varlen) {
      const int64_t n = c.batch + 1;
      cu_q = std::make_unique<DeviceTensor>(ctx.device(), dense(HAL_DTYPE_I32, {n}),
                                            to_doubles(c.cu_q));
      cu_k = std::make_unique<DeviceTensor>(ctx.device(), dense(HAL_DTYPE_I32, {n}),
                                            to_doubles(c.cu_k));
    }
    if (c.sparsity != HAL_ATTENTION_DENSE) {
      sparse = std::make_unique<DeviceTensor>(ctx.device(), sparse_layout(c), to_doubles(c.sparse));
    }
  }
  void* cu_q_data() const { return cu_q ? cu_q->data() : nullptr; }
  void* cu_k_data() const { return cu_k ? cu_k->data() : nullptr; }
  void* sparse_data() const { return sparse ? sparse->data() : nullptr; }
};

Tensors random_inputs(TestContext& ctx, const Case& c) {
  Tensors x;
  const int64_t tb = c.tensor_batch();
  x.q = random_values(ctx.random(), tb * c.s_q * c.heads * c.dim, c.dtype, -2, 2);
  x.k = random_values(ctx.random(), tb * c.s_k * c.kv_heads * c.dim, c.dtype, -2, 2);
  x.v = random_values(ctx.random(), tb * c.s_k * c.kv_heads * c.dim, c.dtype, -1, 1);
  x.dout = random_values(ctx.random(), tb * c.s_q * c.heads * c.dim, c.dtype, -1, 1);
  return x;
}

std::vector<double> rounded(hal_dtype_t dtype, std::vector<double> values) {
  for (double& v : values) v = round_to(dtype, v);
  return values;
}

// Runs the forward on the device: out and lse.
void device_forward(TestContext& ctx, const Case& c, const Tensors& x, Tensors& got,
                    hal_op_plan_flags_t flags = 0) {
  const hal_op_attention_desc_t desc = make_desc(c, false);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, flags);
  DeviceTensor q(ctx.device(), desc.q, x.q), k(ctx.device(), desc.k, x.k),
      v(ctx.device(), desc.v, x.v), out(ctx.device(), desc.out), lse(ctx.device(), desc.lse);
  IndexOperands index(ctx, c);
  execute(ctx, plan,
          {q.data(), k.data(), v.data(), out.data(), lse.data(), index.cu_q_data(),
           index.cu_k_data(), index.sparse_data()});
  got.out = out.download();
  got.lse = lse.download();
  out.check_untouched("out " + c.name());
  lse.check_untouched("lse " + c.name());
}

// Runs the backward on the device from the reference's out and lse (rounded
// as the forward would store them): dq, dk, dv.
void device_backward(TestContext& ctx, const Case& c, const Tensors& x, Tensors& got,
                     hal_op_plan_flags_t flags = 0) {
  const hal_op_attention_desc_t desc = make_desc(c, true);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, flags);
  DeviceTensor q(ctx.device(), desc.q, x.q), k(ctx.device(), desc.k, x.k),
      v(ctx.device(), desc.v, x.v), out(ctx.device(), desc.out, rounded(c.dtype, x.out)),
      lse(ctx.device(), desc.lse, x.lse), dout(ctx.device(), desc.grad_out, x.dout),
      dq(ctx.device(), desc.grad_q), dk(ctx.device(), desc.grad_k), dv(ctx.device(), desc.grad_v);
  IndexOperands index(ctx, c);
  execute(ctx, plan,
          {q.data(), k.data(), v.data(), out.data(), lse.data(), index.cu_q_data(),
           index.cu_k_data(), index.sparse_data(), dout.data(), dq.data(), dk.data(), dv.data()});
  got.dq = dq.download();
  got.dk = dk.download();
  got.dv = dv.download();
  dq.check_untouched("grad_q " + c.name());
  dk.check_untouched("grad_k " + c.name());
  dv.check_untouched("grad_v " + c.name());
}

// Forward against the reference; with |backward| also the gradients.
void check_case(TestContext& ctx, const Case& c, bool backward = false) {
  Tensors x = random_inputs(ctx, c);
  attention_reference(c, x, backward);
  Tensors got;
  device_forward(ctx, c, x, got);
  // out is a convex combination of v rows, lse a log of s_k terms: errors
  // grow with the keys summed and the head dim of each score.
  const double terms = static_cast<double>(c.s_k + c.dim);
  expect_close(got.out, x.out, tolerance_for(c.dtype, terms), "out " + c.name());
  expect_close(got.lse, x.lse, tolerance_for(HAL_DTYPE_F32, terms), "lse " + c.name());
  if (!backward) return;
  device_backward(ctx, c, x, got);
  // The backward sums s_q (or s_k) products of d-term dots; out is rounded
  // to the dtype before delta = rowsum(dout * out).
  const double grad_terms = static_cast<double>((c.s_q + c.s_k) * 4 + c.dim);
  expect_close(got.dq, x.dq, tolerance_for(c.dtype, grad_terms), "grad_q " + c.name());
  expect_close(got.dk, x.dk, tolerance_for(c.dtype, grad_terms), "grad_k " + c.name());
  expect_close(got.dv, x.dv, tolerance_for(c.dtype, grad_terms), "grad_v " + c.name());
}

// A block mask with about 60% of the blocks on.
std::vector<int32_t> random_mask(TestContext& ctx, const Case& c) {
  const auto bits =
      random_ints(ctx.random(), c.batch * c.heads * query_blocks(c) * key_blocks(c), 0, 10);
  std::vector<int32_t> mask(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) mask[i] = bits[i] < 6 ? 1 : 0;
  return mask;
}

// Block indices in [-1, nkb + 1]: -1 and out-of-range entries mean none,
// and repeats are likely with few key blocks.
std::vector<int32_t> random_indices(TestContext& ctx, const Case& c) {
  const auto values = random_ints(ctx.random(), c.batch * c.heads * query_blocks(c) * c.topk, -1,
                                  key_blocks(c) + 2);
  return std::vector<int32_t>(values.begin(), values.end());
}

Case varlen_case(hal_dtype_t dtype, hal_causal_alignment_t causal) {
  Case c;
  c.dtype = dtype;
  c.varlen = true;
  c.batch = 4;
  // Lengths q: 5, 0, 17, 9 (+3 rows past the last sequence); k: 7, 3, 17, 0.
  c.cu_q = {0, 5, 5, 22, 31};
  c.cu_k = {0, 7, 10, 27, 27};
  c.s_q = 34;
  c.s_k = 27;
  c.max_seqlen_q = 17;
  c.max_seqlen_k = 17;
  c.heads = 4;
  c.kv_heads = 2;
  c.dim = 16;
  c.causal = causal;
  return c;
}

}  // namespace

HALCONFORM_TEST("operators.attention.forward", "dense attention, every dtype, d = 16/64/80", {}) {
  for (hal_dtype_t dtype : kAttentionDtypes) {
    for (int64_t dim : {16, 64, 80}) {
      Case c;
      c.dtype = dtype;
      c.batch = 2;
      c.s_q = 19;
      c.s_k = 23;
      c.dim = dim;
      check_case(ctx, c);
    }
  }
  Case widest;  // the largest head dim the portable kernels keep per row
  widest.s_q = 5;
  widest.s_k = 7;
  widest.dim = 256;
  check_case(ctx, widest, true);
  Case scaled;  // an explicit scale and a strided q view
  scaled.s_q = 9;
  scaled.s_k = 31;
  scaled.scale = 0.3f;
  scaled.strided_q = true;
  check_case(ctx, scaled);
}

HALCONFORM_TEST(
    "operators.attention.causal",
    "top-left and bottom-right with s_q < s_k, s_q > s_k (rows seeing nothing) and equal", {}) {
  for (hal_causal_alignment_t causal : {HAL_CAUSAL_TOP_LEFT, HAL_CAUSAL_BOTTOM_RIGHT}) {
    for (auto [s_q, s_k] : {std::pair<int64_t, int64_t>{13, 29}, {29, 13}, {17, 17}}) {
      for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16}) {
        Case c;
        c.dtype = dtype;
        c.batch = 2;
        c.s_q = s_q;
        c.s_k = s_k;
        c.causal = causal;
        c.dim = 16;
        check_case(ctx, c);
      }
    }
  }
}

HALCONFORM_TEST("operators.attention.gqa", "heads 4 over kv_heads 2 and 1", {}) {
  for (int64_t kv_heads : {2, 1}) {
    for (hal_causal_alignment_t causal : {HAL_CAUSAL_NONE, HAL_CAUSAL_BOTTOM_RIGHT}) {
      Case c;
      c.batch = 2;
      c.s_q = 11;
      c.s_k = 21;
      c.heads = 4;
      c.kv_heads = kv_heads;
      c.dim = 64;
      c.causal = causal;
      check_case(ctx, c, true);
    }
  }
}

HALCONFORM_TEST("operators.attention.varlen",
                "packed sequences of different lengths, an empty one, rows past the last", {}) {
  for (hal_causal_alignment_t causal :
       {HAL_CAUSAL_NONE, HAL_CAUSAL_TOP_LEFT, HAL_CAUSAL_BOTTOM_RIGHT}) {
    for (hal_dtype_t dtype : kAttentionDtypes) check_case(ctx, varlen_case(dtype, causal), true);
  }
}

HALCONFORM_TEST("operators.attention.varlen_untrusted",
                "cu_seqlens out of range or decreasing read clamped, nothing outside the tensors",
                {}) {
  Case c = varlen_case(HAL_DTYPE_F32, HAL_CAUSAL_BOTTOM_RIGHT);
  c.cu_q = {-5, 12, 3, 1000, 20};
  c.cu_k = {2, 1, 40, -7, 2147483647};
  check_case(ctx, c, true);
}

HALCONFORM_TEST("operators.attention.block_mask", "u8 block mask, alone and with causal", {}) {
  for (hal_causal_alignment_t causal : {HAL_CAUSAL_NONE, HAL_CAUSAL_BOTTOM_RIGHT}) {
    for (hal_dtype_t dtype : kAttentionDtypes) {
      Case c;
      c.dtype = dtype;
      c.batch = 2;
      c.s_q = 37;
      c.s_k = 45;
      c.heads = 2;
      c.kv_heads = 1;
      c.dim = 16;
      c.causal = causal;
      c.sparsity = HAL_ATTENTION_BLOCK_MASK;
      c.block_q = 8;
      c.block_k = 16;
      c.sparse = random_mask(ctx, c);
      check_case(ctx, c, dtype == HAL_DTYPE_F32);
    }
  }
  // Key blocks of 64 and more: the blocks tuned implementations (FlashAttention's, the cpu
  // plugin's packed 64-key blocks) compute natively.
  Case wide;
  wide.dtype = HAL_DTYPE_F32;
  wide.batch = 1;
  wide.s_q = 100;
  wide.s_k = 150;
  wide.heads = 2;
  wide.kv_heads = 1;
  wide.dim = 16;
  wide.causal = HAL_CAUSAL_BOTTOM_RIGHT;
  wide.sparsity = HAL_ATTENTION_BLOCK_MASK;
  wide.block_q = 32;
  wide.block_k = 64;
  wide.sparse = random_mask(ctx, wide);
  check_case(ctx, wide, true);
  Case v = varlen_case(HAL_DTYPE_F32, HAL_CAUSAL_TOP_LEFT);
  v.sparsity = HAL_ATTENTION_BLOCK_MASK;
  v.block_q = 4;
  v.block_k = 5;
  v.max_seqlen_q = 12;  // below the longest sequence: its last rows see nothing
  v.sparse = random_mask(ctx, v);
  check_case(ctx, v, true);
}

HALCONFORM_TEST("operators.attention.block_indices",
                "top-k key blocks with -1, repeats and out-of-range indices", {}) {
  for (hal_dtype_t dtype : kAttentionDtypes) {
    Case c;
    c.dtype = dtype;
    c.batch = 2;
    c.s_q = 33;
    c.s_k = 50;
    c.heads = 2;
    c.kv_heads = 2;
    c.dim = 16;
    c.causal = dtype == HAL_DTYPE_F16 ? HAL_CAUSAL_TOP_LEFT : HAL_CAUSAL_NONE;
    c.sparsity = HAL_ATTENTION_BLOCK_INDICES;
    c.block_q = 16;
    c.block_k = 8;
    c.topk = 5;
    c.sparse = random_indices(ctx, c);
    c.sparse[0] = 2;  // a repeat for sure
    c.sparse[1] = 2;
    check_case(ctx, c, dtype != HAL_DTYPE_F16);
  }
  Case wide;  // key blocks of 128: two packed 64-key blocks each
  wide.dtype = HAL_DTYPE_F32;
  wide.batch = 1;
  wide.s_q = 90;
  wide.s_k = 300;
  wide.heads = 2;
  wide.kv_heads = 2;
  wide.dim = 16;
  wide.causal = HAL_CAUSAL_NONE;
  wide.sparsity = HAL_ATTENTION_BLOCK_INDICES;
  wide.block_q = 30;
  wide.block_k = 128;
  wide.topk = 2;
  wide.sparse = random_indices(ctx, wide);
  check_case(ctx, wide, true);
}

HALCONFORM_TEST("operators.attention.backward", "gradients vs the float64 analytic gradient", {}) {
  for (hal_dtype_t dtype : kAttentionDtypes) {
    for (hal_causal_alignment_t causal :
         {HAL_CAUSAL_NONE, HAL_CAUSAL_TOP_LEFT, HAL_CAUSAL_BOTTOM_RIGHT}) {
      Case c;
      c.dtype = dtype;
      c.batch = 2;
      c.s_q = causal == HAL_CAUSAL_TOP_LEFT ? 23 : 14;
      c.s_k = causal == HAL_CAUSAL_TOP_LEFT ? 14 : 23;
      c.heads = 2;
      c.dim = dtype == HAL_DTYPE_F32 ? 80 : 32;
      c.causal = causal;
      c.strided_q = causal == HAL_CAUSAL_NONE;
      check_case(ctx, c, true);
    }
  }
}

HALCONFORM_TEST("operators.attention.finite_differences",
                "tiny cases: device and reference gradients vs central differences", {}) {
  for (auto [s_q, s_k, causal] :
       {std::tuple<int64_t, int64_t, hal_causal_alignment_t>{3, 5, HAL_CAUSAL_BOTTOM_RIGHT},
        {4, 4, HAL_CAUSAL_NONE},
        {5, 3, HAL_CAUSAL_TOP_LEFT}}) {
    Case c;
    c.s_q = s_q;
    c.s_k = s_k;
    c.heads = 2;
    c.kv_heads = 1;
    c.dim = 4;
    c.causal = causal;
    Tensors x = random_inputs(ctx, c);
    attention_reference(c, x, true);
    // L = sum(dout * out): d L / d input by central differences of the
    // float64 forward.
    const auto loss = [&](const Tensors& t) {
      Tensors copy = t;
      attention_reference(c, copy, false);
      double total = 0;
      for (size_t i = 0; i < copy.out.size(); ++i) total += copy.out[i] * t.dout[i];
      return total;
    };
    const double h = 1e-6;
    const auto numeric = [&](std::vector<double> Tensors::*member) {
      std::vector<double> grad((x.*member).size());
      for (size_t i = 0; i < grad.size(); ++i) {
        Tensors plus = x, minus = x;
        (plus.*member)[i] += h;
        (minus.*member)[i] -= h;
        grad[i] = (loss(plus) - loss(minus)) / (2 * h);
      }
      return grad;
    };
    const auto fd_q = numeric(&Tensors::q), fd_k = numeric(&Tensors::k),
               fd_v = numeric(&Tensors::v);
    const Tolerance fd_tolerance{1e-6, 1e-6};
    expect_close(x.dq, fd_q, fd_tolerance, "reference grad_q vs differences " + c.name());
    expect_close(x.dk, fd_k, fd_tolerance, "reference grad_k vs differences " + c.name());
    expect_close(x.dv, fd_v, fd_tolerance, "reference grad_v vs differences " + c.name());
    Tensors got;
    device_backward(ctx, c, x, got);
    const Tolerance device_tolerance = tolerance_for(HAL_DTYPE_F32, 16);
    expect_close(got.dq, fd_q, device_tolerance, "grad_q vs differences " + c.name());
    expect_close(got.dk, fd_k, device_tolerance, "grad_k vs differences " + c.name());
    expect_close(got.dv, fd_v, device_tolerance, "grad_v vs differences " + c.name());
  }
}

HALCONFORM_TEST("operators.attention.deterministic",
                "HAL_OP_PLAN_DETERMINISTIC: forward and backward bit for bit, run twice", {}) {
  Case c = varlen_case(HAL_DTYPE_BF16, HAL_CAUSAL_BOTTOM_RIGHT);
  c.kv_heads = 1;
  Tensors x = random_inputs(ctx, c);
  attention_reference(c, x, false);
  Tensors first, second;
  device_forward(ctx, c, x, first, HAL_OP_PLAN_DETERMINISTIC);
  device_forward(ctx, c, x, second, HAL_OP_PLAN_DETERMINISTIC);
  expect_identical(first.out, second.out, "out twice");
  expect_identical(first.lse, second.lse, "lse twice");
  device_backward(ctx, c, x, first, HAL_OP_PLAN_DETERMINISTIC);
  device_backward(ctx, c, x, second, HAL_OP_PLAN_DETERMINISTIC);
  expect_identical(first.dq, second.dq, "grad_q twice");
  expect_identical(first.dk, second.dk, "grad_k twice");
  expect_identical(first.dv, second.dv, "grad_v twice");
}

HALCONFORM_TEST("operators.attention.empty", "no keys, no queries, an empty varlen batch", {}) {
  Case no_keys;
  no_keys.s_q = 5;
  no_keys.s_k = 0;
  check_case(ctx, no_keys, true);  // out 0, lse -inf, grad_q 0
  Case no_queries;
  no_queries.s_q = 0;
  no_queries.s_k = 6;
  check_case(ctx, no_queries, true);  // grad_k and grad_v 0
  Case none = varlen_case(HAL_DTYPE_F32, HAL_CAUSAL_NONE);
  none.batch = 0;
  none.cu_q = {0};
  none.cu_k = {0};
  check_case(ctx, none, true);  // every row outside a sequence
}

HALCONFORM_TEST("operators.attention.errors", "descriptor rules", {}) {
  Case base;
  base.heads = 4;
  base.kv_heads = 2;
  const auto expect_invalid = [&](const hal_op_attention_desc_t& desc, const char* what) {
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
    HC_REQUIRE(
        result == HAL_ERROR_INVALID_ARGUMENT,
        std::string(what) + ": expected HAL_ERROR_INVALID_ARGUMENT, got " + std::to_string(result));
    HC_REQUIRE(plan == nullptr, std::string(what) + ": a refused plan was written");
  };
  for (bool backward : {false, true}) {
    hal_op_attention_desc_t desc = make_desc(base, backward);
    desc.v = desc.k = dense(HAL_DTYPE_F32, {1, 8, 2, 8});
    expect_invalid(desc, "head dims differ");
    desc = make_desc(base, backward);
    desc.v = dense(HAL_DTYPE_F32, {1, 8, 2, 8});
    expect_invalid(desc, "v's head dim differs");
    desc = make_desc(base, backward);
    desc.k = desc.v = dense(HAL_DTYPE_F32, {1, 8, 3, 16});
    expect_invalid(desc, "heads not a multiple of kv_heads");
    desc = make_desc(base, backward);
    desc.causal = static_cast<hal_causal_alignment_t>(3);
    expect_invalid(desc, "bad causal enum");
    desc = make_desc(base, backward);
    desc.sparsity = static_cast<hal_attention_sparsity_t>(7);
    expect_invalid(desc, "bad sparsity enum");
    desc = make_desc(base, backward);
    desc.lse = dense(HAL_DTYPE_F32, {1, 8, 4});
    expect_invalid(desc, "lse shape [b, s, h] instead of [b, h, s]");
    desc.lse = dense(HAL_DTYPE_F16, {1, 4, 8});
    expect_invalid(desc, "lse f16");
    desc = make_desc(base, backward);
    desc.sparsity = HAL_ATTENTION_BLOCK_INDICES;
    desc.block_q = desc.block_k = 4;
    desc.topk = 0;
    expect_invalid(desc, "topk 0 with block indices");
    desc.topk = 2;
    desc.block_q = 0;
    expect_invalid(desc, "block_q 0");
    desc.block_q = 4;
    desc.block_k = 0;
    desc.sparsity = HAL_ATTENTION_BLOCK_MASK;
    expect_invalid(desc, "block_k 0");
    desc = make_desc(base, backward);
    desc.scale = std::numeric_limits<float>::quiet_NaN();
    expect_invalid(desc, "scale NaN");
    desc = make_desc(base, backward);
    desc.batch = 3;
    expect_invalid(desc, "batch differs from q.shape[0]");
    desc = make_desc(base, backward);
    desc.has_cu_seqlens = 1;
    desc.q = desc.out = desc.grad_out = desc.grad_q = dense(HAL_DTYPE_F32, {2, 8, 4, 16});
    desc.k = desc.v = desc.grad_k = desc.grad_v = dense(HAL_DTYPE_F32, {2, 8, 2, 16});
    desc.lse = dense(HAL_DTYPE_F32, {2, 4, 8});
    expect_invalid(desc, "varlen with q.shape[0] = 2");
    desc = make_desc(base, backward);
    desc.q = dense(HAL_DTYPE_F32, {1, 8, 4});
    expect_invalid(desc, "q rank 3");
    desc = make_desc(base, backward);
    desc.out = dense(HAL_DTYPE_F32, {1, 7, 4, 16});
    expect_invalid(desc, "out shape");
    if (backward) {
      desc = make_desc(base, backward);
      desc.grad_k = dense(HAL_DTYPE_F32, {1, 8, 4, 16});
      expect_invalid(desc, "grad_k shape");
      desc = make_desc(base, backward);
      desc.grad_q = dense(HAL_DTYPE_I32, {1, 8, 4, 16});
      expect_invalid(desc, "grad_q dtype");
    } else {
      desc = make_desc(base, backward);
      desc.out.strides[1] = 0;
      expect_invalid(desc, "out reaching one element twice");
    }
  }
  // A head dim past what an implementation keeps per row is declined, not
  // an error of the descriptor.
  Case wide;
  wide.dim = 300;
  const hal_op_attention_desc_t desc = make_desc(wide, false);
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
  HC_REQUIRE(result == HAL_SUCCESS || result == HAL_ERROR_UNSUPPORTED,
             "d = 300: expected success or HAL_ERROR_UNSUPPORTED, got " + std::to_string(result));
  hal_op_plan_destroy(plan);
}
