// The portable HAL_OP_ATTENTION's two sets of kernels (ops/portable/kernels/
// attention.hal) through the public API on whatever device the environment
// selects (the cpu plugin with HAL_OPS_IMPLEMENTATIONS=portable, or PoCL):
// attention_{forward,grad_q,grad_kv}_tiled (group-shared memory, the GPUs')
// and the barrier-free row kernels (the CPUs'), chosen with
// HAL_OPS_PORTABLE_ATTENTION. Forward, and backward from that forward, against
// a float64 reference built from SPEC.md §17.6.5's rules (the full score row,
// textbook softmax; the gradients from its formulas), on
// shapes that cross the 16-row and 16-key tiles' edges: odd sequence
// lengths, s_q above and below s_k, both causal alignments, grouped-query
// heads, head dims of 17 (a partial 16-wide chunk) up to 256 (all sixteen
// chunks), a strided q, bf16 inputs and an f16 out.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "op_session.hpp"

namespace {

struct AttentionShape {
  int64_t batch, s_q, s_k, heads, kv_heads, dim;
  hal_causal_alignment_t causal;
  hal_dtype_t in_dtype;   // q, k, v
  hal_dtype_t out_dtype;  // out
  bool q_head_major;      // q stored [batch, heads, s_q, d] (a strided view)
};

// |v| rounded to |dtype| (f32 unchanged; bf16 and f16 to nearest even).
float round_attention_value(hal_dtype_t dtype, float v) {
  if (dtype == HAL_DTYPE_BF16) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
    std::memcpy(&v, &bits, 4);
  }
  return v;
}

// bf16 storage of f32 values already rounded to bf16.
std::vector<uint16_t> bf16_words(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &values[i], 4);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
  return out;
}

// An IEEE half's value (normal, subnormal, zero; inputs here are finite).
float half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const float sign = (h & 0x8000) != 0 ? -1.0f : 1.0f;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}

struct AttentionResult {
  std::vector<float> out;  // [batch, s_q, heads, d] as f32
  std::vector<float> lse;  // [batch, heads, s_q]
};

struct BackwardResult {
  std::vector<float> dq, dk, dv;  // f32, q's and k's shapes (contiguous)
};

class AttentionCase {
 public:
  AttentionCase(op_test::Session& session, const AttentionShape& shape, uint32_t seed)
      : session_(session), shape_(shape) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const auto fill = [&](int64_t count) {
      std::vector<float> values(static_cast<size_t>(count));
      for (float& x : values) x = round_attention_value(shape.in_dtype, 2.0f * uniform(rng));
      return values;
    };
    q_ = fill(shape.batch * shape.s_q * shape.heads * shape.dim);  // [b, s, h, d] logically
    k_ = fill(shape.batch * shape.s_k * shape.kv_heads * shape.dim);
    v_ = fill(shape.batch * shape.s_k * shape.kv_heads * shape.dim);
    grad_out_.resize(q_.size());
    for (float& x : grad_out_) x = uniform(rng);
  }

  // The forward descriptor (scale 0: 1/sqrt(d)), and q as stored.
  hal_op_attention_desc_t forward_desc(std::vector<float>* q_stored) const {
    const AttentionShape& s = shape_;
    hal_op_attention_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_ATTENTION;
    desc.causal = s.causal;
    desc.sparsity = HAL_ATTENTION_DENSE;
    desc.scale = 0.0f;  // 1/sqrt(d)
    desc.batch = static_cast<uint32_t>(s.batch);
    const int64_t q_shape[4] = {s.batch, s.s_q, s.heads, s.dim};
    const int64_t k_shape[4] = {s.batch, s.s_k, s.kv_heads, s.dim};
    const int64_t lse_shape[3] = {s.batch, s.heads, s.s_q};
    hal_tensor_desc_contiguous(&desc.q, s.in_dtype, 4, q_shape);
    *q_stored = q_;
    if (s.q_head_major) {
      // The same logical q, stored [batch, heads, s_q, d].
      desc.q.strides[0] = s.heads * s.s_q * s.dim;
      desc.q.strides[1] = s.dim;
      desc.q.strides[2] = s.s_q * s.dim;
      desc.q.strides[3] = 1;
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t i = 0; i < s.s_q; ++i)
          for (int64_t h = 0; h < s.heads; ++h)
            for (int64_t d = 0; d < s.dim; ++d)
              (*q_stored)[static_cast<size_t>(((b * s.heads + h) * s.s_q + i) * s.dim + d)] =
                  q_[static_cast<size_t>(((b * s.s_q + i) * s.heads + h) * s.dim + d)];
    }
    hal_tensor_desc_contiguous(&desc.k, s.in_dtype, 4, k_shape);
    hal_tensor_desc_contiguous(&desc.v, s.in_dtype, 4, k_shape);
    hal_tensor_desc_contiguous(&desc.out, s.out_dtype, 4, q_shape);
    hal_tensor_desc_contiguous(&desc.lse, HAL_DTYPE_F32, 3, lse_shape);
    return desc;
  }

  void* upload(const std::vector<float>& values) {
    if (shape_.in_dtype == HAL_DTYPE_BF16) return session_.upload(bf16_words(values));
    return session_.upload(values);
  }

  // Runs the plan the portable implementation makes with |kernel| as
  // HAL_OPS_PORTABLE_ATTENTION.
  AttentionResult run(const char* kernel) {
    const AttentionShape& s = shape_;
    std::vector<float> q_stored;
    const hal_op_attention_desc_t desc = forward_desc(&q_stored);
    const size_t out_count = q_.size();
    const size_t lse_count = static_cast<size_t>(s.batch * s.heads * s.s_q);
    const size_t out_bytes = out_count * (s.out_dtype == HAL_DTYPE_F32 ? 4 : 2);
    void* out = session_.upload(std::vector<unsigned char>(out_bytes, 0x7f));
    float* lse = session_.alloc<float>(lse_count, -7.0f);
    REQUIRE(setenv("HAL_OPS_PORTABLE_ATTENTION", kernel, 1) == 0);
    session_.run(&desc.header,
                 {upload(q_stored), upload(k_), upload(v_), out, lse, nullptr, nullptr, nullptr});
    unsetenv("HAL_OPS_PORTABLE_ATTENTION");
    AttentionResult result;
    bool intact = false;
    std::vector<unsigned char> out_bytes_back =
        session_.download(static_cast<const unsigned char*>(out), out_bytes, &intact);
    CHECK(intact);  // nothing written past out
    result.out.resize(out_count);
    for (size_t e = 0; e < out_count; ++e) {
      if (s.out_dtype == HAL_DTYPE_F32) {
        std::memcpy(&result.out[e], &out_bytes_back[4 * e], 4);
      } else {
        uint16_t h = 0;
        std::memcpy(&h, &out_bytes_back[2 * e], 2);
        result.out[e] = half_value(h);
      }
    }
    result.lse = session_.download(lse, lse_count, &intact);
    CHECK(intact);
    return result;
  }

  // The backward plan with |kernel| as HAL_OPS_PORTABLE_ATTENTION, from the
  // forward's |forward| (f32 out): grad_q, grad_k, grad_v (f32).
  BackwardResult run_backward(const char* kernel, const AttentionResult& forward) {
    std::vector<float> q_stored;
    hal_op_attention_desc_t desc = forward_desc(&q_stored);
    desc.header.kind = HAL_OP_ATTENTION_BACKWARD;
    desc.grad_out = desc.out;
    desc.grad_out.dtype = HAL_DTYPE_F32;
    desc.grad_q = desc.grad_out;
    desc.grad_k = desc.k;
    desc.grad_k.dtype = HAL_DTYPE_F32;
    desc.grad_v = desc.grad_k;
    BackwardResult result;
    float* dq = session_.alloc<float>(q_.size(), -7.0f);
    float* dk = session_.alloc<float>(k_.size(), -7.0f);
    float* dv = session_.alloc<float>(v_.size(), -7.0f);
    REQUIRE(setenv("HAL_OPS_PORTABLE_ATTENTION", kernel, 1) == 0);
    session_.run(&desc.header, {upload(q_stored), upload(k_), upload(v_),
                                session_.upload(forward.out), session_.upload(forward.lse), nullptr,
                                nullptr, nullptr, session_.upload(grad_out_), dq, dk, dv});
    unsetenv("HAL_OPS_PORTABLE_ATTENTION");
    bool intact = false;
    result.dq = session_.download(dq, q_.size(), &intact);
    CHECK(intact);
    result.dk = session_.download(dk, k_.size(), &intact);
    CHECK(intact);
    result.dv = session_.download(dv, v_.size(), &intact);
    CHECK(intact);
    return result;
  }

  // Query row i of (b, h) scored in float64 against keys 0..end-1 of kv head g, times |scale|,
  // into |scores|; returns the largest (-inf for no key). Both references start from it.
  double scaled_scores(int64_t b, int64_t h, int64_t g, int64_t i, int64_t end, double scale,
                       std::vector<double>& scores) const {
    double top = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < end; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < shape_.dim; ++d) {
        dot += static_cast<double>(q_[at_q(b, i, h, d)]) * k_[at_k(b, j, g, d)];
      }
      scores[static_cast<size_t>(j)] = dot * scale;
      top = std::max(top, dot * scale);
    }
    return top;
  }

  // The float64 gradients (SPEC.md §17.6.5's formulas, D_i from |out| as the
  // kernels take it); counts the elements of |result| outside the tolerance.
  size_t backward_mismatches(const BackwardResult& result, const std::vector<float>& out) const {
    const AttentionShape& s = shape_;
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.dim));
    const int64_t group = s.heads / s.kv_heads;
    const double tolerance = 4e-6 * std::sqrt(static_cast<double>(4 * (s.s_q + s.s_k) * s.dim));
    std::vector<double> dq(q_.size(), 0.0), dk(k_.size(), 0.0), dv(v_.size(), 0.0);
    std::vector<double> prob(static_cast<size_t>(s.s_k));
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t g = h / group;
        for (int64_t i = 0; i < s.s_q; ++i) {
          const int64_t end = key_end(i);
          if (end == 0) continue;
          const double top = scaled_scores(b, h, g, i, end, scale, prob);
          double total = 0.0;
          for (int64_t j = 0; j < end; ++j) {
            prob[static_cast<size_t>(j)] = std::exp(prob[static_cast<size_t>(j)] - top);
            total += prob[static_cast<size_t>(j)];
          }
          double delta = 0.0;
          for (int64_t d = 0; d < s.dim; ++d) {
            delta += static_cast<double>(grad_out_[at_q(b, i, h, d)]) * out[at_q(b, i, h, d)];
          }
          for (int64_t j = 0; j < end; ++j) {
            const double p = prob[static_cast<size_t>(j)] / total;
            double dp = 0.0;
            for (int64_t d = 0; d < s.dim; ++d) {
              dp += static_cast<double>(grad_out_[at_q(b, i, h, d)]) * v_[at_k(b, j, g, d)];
            }
            const double ds = p * (dp - delta);
            for (int64_t d = 0; d < s.dim; ++d) {
              dq[at_q(b, i, h, d)] += scale * ds * k_[at_k(b, j, g, d)];
              dk[at_k(b, j, g, d)] += scale * ds * q_[at_q(b, i, h, d)];
              dv[at_k(b, j, g, d)] += p * grad_out_[at_q(b, i, h, d)];
            }
          }
        }
      }
    }
    size_t bad = 0;
    const auto count = [&](const std::vector<float>& got, const std::vector<double>& want) {
      for (size_t e = 0; e < want.size(); ++e) {
        if (!(std::fabs(got[e] - want[e]) <= tolerance * (1.0 + std::fabs(want[e])))) ++bad;
      }
    };
    count(result.dq, dq);
    count(result.dk, dk);
    count(result.dv, dv);
    return bad;
  }

  // The float64 reference (SPEC.md §17.6.5): every key of the row scored,
  // the causal rule applied, then the textbook softmax; counts the elements
  // of |result| outside the tolerance.
  size_t mismatches(const AttentionResult& result) const {
    const AttentionShape& s = shape_;
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.dim));
    const int64_t group = s.heads / s.kv_heads;
    // f32 accumulation over s_k * d terms of magnitude <= 4; the f16 out
    // adds its rounding (2^-11 relative).
    const double tolerance = 2e-6 * std::sqrt(static_cast<double>(s.s_k * s.dim)) + 1e-6;
    const double out_rounding = s.out_dtype == HAL_DTYPE_F16 ? 1.0 / 1024.0 : 0.0;
    size_t bad = 0;
    std::vector<double> scores(static_cast<size_t>(s.s_k));
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t g = h / group;
        for (int64_t i = 0; i < s.s_q; ++i) {
          const int64_t end = key_end(i);
          const double top = scaled_scores(b, h, g, i, end, scale, scores);
          double total = 0.0;
          for (int64_t j = 0; j < end; ++j) total += std::exp(scores[static_cast<size_t>(j)] - top);
          const double want_lse =
              end == 0 ? -std::numeric_limits<double>::infinity() : top + std::log(total);
          const float got_lse = result.lse[static_cast<size_t>((b * s.heads + h) * s.s_q + i)];
          if (end == 0 ? !(std::isinf(got_lse) && got_lse < 0)
                       : !(std::fabs(got_lse - want_lse) <= tolerance * (1 + std::fabs(want_lse))))
            ++bad;
          for (int64_t d = 0; d < s.dim; ++d) {
            double want = 0.0;
            for (int64_t j = 0; j < end; ++j) {
              want += std::exp(scores[static_cast<size_t>(j)] - top) / total * v_[at_k(b, j, g, d)];
            }
            const double got = result.out[at_q(b, i, h, d)];
            if (!(std::fabs(got - want) <= tolerance + out_rounding * std::fabs(want))) ++bad;
          }
        }
      }
    }
    return bad;
  }

 private:
  // One past the last key row i sees (SPEC.md §17.6.5's causal rules).
  int64_t key_end(int64_t i) const {
    int64_t end = shape_.s_k;
    if (shape_.causal == HAL_CAUSAL_TOP_LEFT) end = std::min(end, i + 1);
    if (shape_.causal == HAL_CAUSAL_BOTTOM_RIGHT)
      end = std::min(end, i + 1 + shape_.s_k - shape_.s_q);
    return std::max<int64_t>(end, 0);
  }
  size_t at_q(int64_t b, int64_t i, int64_t h, int64_t d) const {
    return static_cast<size_t>(((b * shape_.s_q + i) * shape_.heads + h) * shape_.dim + d);
  }
  size_t at_k(int64_t b, int64_t j, int64_t g, int64_t d) const {
    return static_cast<size_t>(((b * shape_.s_k + j) * shape_.kv_heads + g) * shape_.dim + d);
  }

  op_test::Session& session_;
  AttentionShape shape_;
  std::vector<float> q_, k_, v_, grad_out_;
};

const AttentionShape kAttentionShapes[] = {
    // GQA 4 over 2, lengths past one tile and not a multiple of it.
    {2, 37, 45, 4, 2, 64, HAL_CAUSAL_NONE, HAL_DTYPE_F32, HAL_DTYPE_F32, false},
    // Top-left causal, s_q > s_k, head dim 80 (five chunks), a strided q.
    {1, 50, 33, 2, 1, 80, HAL_CAUSAL_TOP_LEFT, HAL_DTYPE_F32, HAL_DTYPE_F32, true},
    // Bottom-right with s_q < s_k; head dim 17 (a partial second chunk).
    {1, 19, 40, 3, 3, 17, HAL_CAUSAL_BOTTOM_RIGHT, HAL_DTYPE_F32, HAL_DTYPE_F32, false},
    // Bottom-right with s_q > s_k: the first 21 rows see no key (out 0,
    // lse -inf); the largest head dim (all sixteen chunks).
    {1, 40, 19, 2, 1, 256, HAL_CAUSAL_BOTTOM_RIGHT, HAL_DTYPE_F32, HAL_DTYPE_F32, false},
    // bf16 inputs, an f16 out, one query row, GQA 3 over 1.
    {2, 1, 23, 3, 1, 32, HAL_CAUSAL_NONE, HAL_DTYPE_BF16, HAL_DTYPE_F16, false},
};

}  // namespace

TEST_CASE("the tiled and row portable attentions give the float64 result, forward and backward") {
  op_test::Session session;
  uint32_t seed = 1;
  for (const AttentionShape& shape : kAttentionShapes) {
    INFO("batch " << shape.batch << " s_q " << shape.s_q << " s_k " << shape.s_k << " heads "
                  << shape.heads << "/" << shape.kv_heads << " d " << shape.dim << " causal "
                  << shape.causal << " in " << shape.in_dtype << " out " << shape.out_dtype);
    AttentionCase attention(session, shape, seed++);
    for (const char* kernel : {"tiled", "rows"}) {
      INFO("kernel " << kernel);
      const AttentionResult forward = attention.run(kernel);
      CHECK(attention.mismatches(forward) == 0);
      // Backward (attention_grad_q_tiled or attention_grad_q; grad_k and
      // grad_v by attention_grad_kv in both) from this forward's out and lse.
      if (shape.out_dtype == HAL_DTYPE_F32) {
        CHECK(attention.backward_mismatches(attention.run_backward(kernel, forward), forward.out) ==
              0);
      }
    }
  }
}

TEST_CASE("HAL_OPS_PORTABLE_ATTENTION with another value declines the portable plan") {
  op_test::Session session;
  hal_op_attention_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_ATTENTION;
  desc.batch = 1;
  const int64_t shape[4] = {1, 4, 1, 8};
  const int64_t lse_shape[3] = {1, 1, 4};
  hal_tensor_desc_contiguous(&desc.q, HAL_DTYPE_F32, 4, shape);
  hal_tensor_desc_contiguous(&desc.k, HAL_DTYPE_F32, 4, shape);
  hal_tensor_desc_contiguous(&desc.v, HAL_DTYPE_F32, 4, shape);
  hal_tensor_desc_contiguous(&desc.out, HAL_DTYPE_F32, 4, shape);
  hal_tensor_desc_contiguous(&desc.lse, HAL_DTYPE_F32, 3, lse_shape);
  REQUIRE(setenv("HAL_OPS_PORTABLE_ATTENTION", "blocked", 1) == 0);
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = session.try_plan(&desc.header, &plan);
  const std::string message = hal_error_last_message();
  unsetenv("HAL_OPS_PORTABLE_ATTENTION");
  INFO(message);
  CHECK(result != HAL_SUCCESS);
  CHECK(message.find("HAL_OPS_PORTABLE_ATTENTION is 'blocked'") != std::string::npos);
  if (result == HAL_SUCCESS) hal_op_plan_destroy(plan);
}
