// HAL_OP_PAGED_KV_APPEND and HAL_OP_PAGED_ATTENTION against float64 host
// references written from SPEC.md §17.6.11: a host model of the cache (the
// append writes token t of sequence b at position len_b + t through the
// block table, rotating the key's RoPE slice as HAL_OP_ROPE's definition
// says), and decode attention as a dense, textbook attention over each
// sequence's keys gathered from the cache (full score vectors, no online
// softmax, no chunks). The cases aim at what a vendor could get wrong: block
// tables read off by one block (shuffled, shared and padded tables), the
// last partial block dropped (lengths off the block grid), the split-KV merge
// without its max correction (chunks whose maxima differ by many units),
// MLA's RoPE slice rotated with the wrong frequencies; and device data that
// is out of range: the status word names it and nothing is written.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kPagedDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};

// ---- the host model of a paged cache -----------------------------------------

// A cache in float64, logical row-major [num_blocks, block_size, kv_heads,
// dim] (and dim_v for the values), every value already rounded to |dtype|.
struct HostCache {
  int64_t num_blocks = 0, block_size = 1, kv_heads = 1, dim = 1, dim_v = 1;
  bool values_in_keys = false;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  std::vector<double> k, v;

  double& key(int64_t block, int64_t slot, int64_t g, int64_t d) {
    return k[static_cast<size_t>(((block * block_size + slot) * kv_heads + g) * dim + d)];
  }
  double key(int64_t block, int64_t slot, int64_t g, int64_t d) const {
    return k[static_cast<size_t>(((block * block_size + slot) * kv_heads + g) * dim + d)];
  }
  // MLA: the values are the first dim_v dims of the key row.
  double value(int64_t block, int64_t slot, int64_t g, int64_t d) const {
    if (values_in_keys) return key(block, slot, g, d);
    return v[static_cast<size_t>(((block * block_size + slot) * kv_heads + g) * dim_v + d)];
  }
  double& value_slot(int64_t block, int64_t slot, int64_t g, int64_t d) {
    return v[static_cast<size_t>(((block * block_size + slot) * kv_heads + g) * dim_v + d)];
  }
};

HostCache random_cache(std::mt19937_64& random, int64_t num_blocks, int64_t block_size,
                       int64_t kv_heads, int64_t dim, int64_t dim_v, bool values_in_keys,
                       hal_dtype_t dtype) {
  HostCache cache;
  cache.num_blocks = num_blocks;
  cache.block_size = block_size;
  cache.kv_heads = kv_heads;
  cache.dim = dim;
  cache.dim_v = dim_v;
  cache.values_in_keys = values_in_keys;
  cache.dtype = dtype;
  cache.k = random_values(random, num_blocks * block_size * kv_heads * dim, dtype, -2, 2);
  if (!values_in_keys) {
    cache.v = random_values(random, num_blocks * block_size * kv_heads * dim_v, dtype, -1, 1);
  }
  return cache;
}

// Block tables [batch, max_blocks] row-major: sequence b gets
// ceil(need[b] / block_size) distinct blocks in a shuffled order (so the
// physical order never matches the logical one); entries past them are -1.
// With |shared_prefix| blocks, every sequence starts with the same ones.
std::vector<int64_t> make_tables(std::mt19937_64& random, const std::vector<int64_t>& need,
                                 int64_t block_size, int64_t max_blocks, int64_t num_blocks,
                                 int64_t shared_prefix = 0) {
  std::vector<int64_t> pool(static_cast<size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), random);
  size_t next = 0;
  const auto take = [&] {
    HC_REQUIRE(next < pool.size(), "test bug: the cache has too few blocks for the case");
    return pool[next++];
  };
  std::vector<int64_t> shared;
  for (int64_t i = 0; i < shared_prefix; ++i) shared.push_back(take());
  const int64_t batch = static_cast<int64_t>(need.size());
  std::vector<int64_t> table(static_cast<size_t>(batch * max_blocks), -1);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t blocks = (need[static_cast<size_t>(b)] + block_size - 1) / block_size;
    HC_REQUIRE(blocks <= max_blocks, "test bug: a sequence needs more blocks than its table row");
    for (int64_t i = 0; i < blocks; ++i) {
      table[static_cast<size_t>(b * max_blocks + i)] =
          i < shared_prefix ? shared[static_cast<size_t>(i)] : take();
    }
  }
  return table;
}

std::vector<double> as_doubles(const std::vector<int64_t>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// The cache's device tensors: k_cache and (unless values_in_keys) v_cache,
// dense or with padded rows.
struct DeviceCache {
  hal_tensor_desc_t k_layout{}, v_layout{};
  std::optional<DeviceTensor> k, v;

  DeviceCache(hal_device_t device, const HostCache& cache, int64_t pad = 0) {
    k_layout =
        padded(cache.dtype, {cache.num_blocks, cache.block_size, cache.kv_heads, cache.dim}, pad);
    k.emplace(device, k_layout, cache.k);
    if (!cache.values_in_keys) {
      v_layout = padded(cache.dtype,
                        {cache.num_blocks, cache.block_size, cache.kv_heads, cache.dim_v}, pad);
      v.emplace(device, v_layout, cache.v);
    }
  }
  void* k_data() const { return k->data(); }
  void* v_data() const { return v ? v->data() : nullptr; }
};

// ---- the float64 references --------------------------------------------------

// HAL_OP_ROPE's rotation of one row's slice [offset, offset + rope_dim) at
// position p (pair i: angle p * base^(-2i/rope_dim), (2i, 2i+1) or
// (i, i + rope_dim/2) within the slice).
void rope_row(std::vector<double>& row, int64_t offset, int64_t rope_dim, bool interleaved,
              double base, double p) {
  const int64_t half = rope_dim / 2;
  const std::vector<double> x = row;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = p * std::pow(base, -2.0 * static_cast<double>(i) / rope_dim);
    const int64_t d1 = offset + (interleaved ? 2 * i : i);
    const int64_t d2 = offset + (interleaved ? 2 * i + 1 : i + half);
    row[static_cast<size_t>(d1)] = x[d1] * std::cos(angle) - x[d2] * std::sin(angle);
    row[static_cast<size_t>(d2)] = x[d2] * std::cos(angle) + x[d1] * std::sin(angle);
  }
}

struct RopeSpec {
  uint32_t dim = 0, offset = 0;
  bool interleaved = false;
  float base = 10000.0f;
};

// The append on the host model: token t of sequence b to position lens[b] +
// t; k_new and v_new row-major [batch, s_new, kv_heads, dim(_v)].
void reference_append(HostCache& cache, const std::vector<int64_t>& table, int64_t max_blocks,
                      const std::vector<int64_t>& lens, int64_t s_new,
                      const std::vector<double>& k_new, const std::vector<double>& v_new,
                      const RopeSpec& rope) {
  const int64_t batch = static_cast<int64_t>(lens.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < s_new; ++t) {
      const int64_t p = lens[static_cast<size_t>(b)] + t;
      const int64_t block = table[static_cast<size_t>(b * max_blocks + p / cache.block_size)];
      const int64_t slot = p % cache.block_size;
      for (int64_t g = 0; g < cache.kv_heads; ++g) {
        const size_t row = static_cast<size_t>(((b * s_new + t) * cache.kv_heads + g));
        std::vector<double> key(k_new.begin() + static_cast<int64_t>(row) * cache.dim,
                                k_new.begin() + static_cast<int64_t>(row + 1) * cache.dim);
        if (rope.dim > 0) {
          rope_row(key, rope.offset, rope.dim, rope.interleaved, rope.base, static_cast<double>(p));
        }
        for (int64_t d = 0; d < cache.dim; ++d)
          cache.key(block, slot, g, d) = round_to(cache.dtype, key[static_cast<size_t>(d)]);
        if (cache.values_in_keys) continue;
        for (int64_t d = 0; d < cache.dim_v; ++d) {
          cache.value_slot(block, slot, g, d) =
              round_to(cache.dtype, v_new[row * static_cast<size_t>(cache.dim_v) + d]);
        }
      }
    }
  }
}

// Sequence b's keys and values gathered from the cache into dense
// [len, kv_heads, dim(_v)] arrays.
struct Gathered {
  int64_t len = 0;
  std::vector<double> k, v;
};

Gathered gather(const HostCache& cache, const std::vector<int64_t>& table, int64_t max_blocks,
                int64_t b, int64_t len) {
  Gathered g;
  g.len = len;
  for (int64_t j = 0; j < len; ++j) {
    const int64_t block = table[static_cast<size_t>(b * max_blocks + j / cache.block_size)];
    const int64_t slot = j % cache.block_size;
    for (int64_t h = 0; h < cache.kv_heads; ++h) {
      for (int64_t d = 0; d < cache.dim; ++d) g.k.push_back(cache.key(block, slot, h, d));
      for (int64_t d = 0; d < cache.dim_v; ++d) g.v.push_back(cache.value(block, slot, h, d));
    }
  }
  return g;
}

struct AttentionShape {
  int64_t batch = 1, s_q = 1, heads = 1, kv_heads = 1, dim = 1, dim_v = 1;
  bool causal = false;
  double scale = 0;  // 0: 1/sqrt(dim)
};

// Dense attention of sequence b's queries (q row-major [batch, s_q, heads,
// dim]) over its gathered keys: query t at position len - s_q + t sees keys
// j <= it (causal) or all. Writes out [s_q, heads, dim_v] and lse [heads,
// s_q] of sequence b into the row-major outputs.
void dense_attention(const AttentionShape& s, const std::vector<double>& q, int64_t b,
                     const Gathered& keys, std::vector<double>& out, std::vector<double>& lse) {
  const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.dim));
  const int64_t group = s.heads / s.kv_heads;
  for (int64_t t = 0; t < s.s_q; ++t) {
    const int64_t position = keys.len - s.s_q + t;
    const int64_t end = s.causal ? std::min(keys.len, position + 1) : keys.len;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      const size_t out_row = static_cast<size_t>(((b * s.s_q + t) * s.heads + h) * s.dim_v);
      const size_t lse_at = static_cast<size_t>((b * s.heads + h) * s.s_q + t);
      if (end <= 0) {
        for (int64_t d = 0; d < s.dim_v; ++d) out[out_row + d] = 0;
        lse[lse_at] = -kInf;
        continue;
      }
      std::vector<double> scores(static_cast<size_t>(end));
      const size_t q_row = static_cast<size_t>(((b * s.s_q + t) * s.heads + h) * s.dim);
      for (int64_t j = 0; j < end; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < s.dim; ++d)
          dot += q[q_row + d] * keys.k[static_cast<size_t>((j * s.kv_heads + g) * s.dim + d)];
        scores[static_cast<size_t>(j)] = scale * dot;
      }
      const double max = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double x : scores) sum += std::exp(x - max);
      lse[lse_at] = max + std::log(sum);
      for (int64_t d = 0; d < s.dim_v; ++d) {
        double value = 0;
        for (int64_t j = 0; j < end; ++j) {
          value += std::exp(scores[static_cast<size_t>(j)] - max) / sum *
                   keys.v[static_cast<size_t>((j * s.kv_heads + g) * s.dim_v + d)];
        }
        out[out_row + d] = value;
      }
    }
  }
}

// ---- descriptors and runs ----------------------------------------------------

struct AttentionCase {
  AttentionShape shape;
  std::vector<int64_t> lens;  // per sequence, the new queries included
  int64_t block_size = 16, max_blocks = 0, num_blocks = 0, shared_prefix = 0;
  bool values_in_keys = false;
  uint32_t num_splits = 0;
  hal_dtype_t q_dtype = HAL_DTYPE_F32, cache_dtype = HAL_DTYPE_F32, out_dtype = HAL_DTYPE_F32;
  int64_t pad = 0;  // padded rows in q, the caches and out (strided views)
  double q_range = 2;
};

std::string case_label(const AttentionCase& c) {
  std::string lens;
  for (int64_t len : c.lens) lens += (lens.empty() ? "" : ",") + std::to_string(len);
  return strf(
      "paged attention b=%lld s_q=%lld h=%lld kv_h=%lld d=%lld d_v=%lld bs=%lld "
      "lens=(%s) splits=%u%s%s q %s cache %s out %s",
      static_cast<long long>(c.shape.batch), static_cast<long long>(c.shape.s_q),
      static_cast<long long>(c.shape.heads), static_cast<long long>(c.shape.kv_heads),
      static_cast<long long>(c.shape.dim), static_cast<long long>(c.shape.dim_v),
      static_cast<long long>(c.block_size), lens.c_str(), c.num_splits,
      c.shape.causal ? " causal" : "", c.values_in_keys ? " values_in_keys" : "",
      dtype_label(c.q_dtype), dtype_label(c.cache_dtype), dtype_label(c.out_dtype));
}

hal_op_paged_attention_desc_t attention_desc(const AttentionCase& c,
                                             const hal_tensor_desc_t& k_layout,
                                             const hal_tensor_desc_t& v_layout) {
  const AttentionShape& s = c.shape;
  hal_op_paged_attention_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_PAGED_ATTENTION;
  desc.causal = s.causal ? 1 : 0;
  desc.values_in_keys = c.values_in_keys ? 1 : 0;
  desc.scale = static_cast<float>(s.scale);
  desc.num_splits = c.num_splits;
  desc.q = padded(c.q_dtype, {s.batch, s.s_q, s.heads, s.dim}, c.pad);
  desc.k_cache = k_layout;
  if (!c.values_in_keys) desc.v_cache = v_layout;
  desc.block_table = dense(HAL_DTYPE_I32, {s.batch, c.max_blocks});
  desc.seq_lens = dense(HAL_DTYPE_I32, {s.batch});
  desc.out = padded(c.out_dtype, {s.batch, s.s_q, s.heads, s.dim_v}, c.pad);
  desc.lse = dense(HAL_DTYPE_F32, {s.batch, s.heads, s.s_q});
  return desc;
}

struct AttentionResult {
  std::vector<double> out, lse;
  int64_t status = 0;
};

// The device tensors of one attention execution, filled.
struct AttentionRun {
  Plan plan;
  std::optional<DeviceTensor> q, table, lens, out, lse, status;
  std::optional<DeviceCache> cache;

  AttentionRun(TestContext& ctx, const AttentionCase& c, const HostCache& host,
               const std::vector<double>& q_values, const std::vector<int64_t>& tables,
               const std::vector<int64_t>& lens_values, hal_op_plan_flags_t flags = 0) {
    cache.emplace(ctx.device(), host, c.pad);
    hal_op_paged_attention_desc_t desc = attention_desc(c, cache->k_layout, cache->v_layout);
    plan_or_skip(ctx, &desc.header, plan, flags);
    q.emplace(ctx.device(), desc.q, q_values);
    table.emplace(ctx.device(), desc.block_table, as_doubles(tables));
    lens.emplace(ctx.device(), desc.seq_lens, as_doubles(lens_values));
    // out and lse start as random values: an execution that writes nothing leaves them.
    out.emplace(ctx.device(), desc.out,
                random_values(ctx.random(), numel(desc.out), desc.out.dtype, 5, 6));
    lse.emplace(ctx.device(), desc.lse,
                random_values(ctx.random(), numel(desc.lse), HAL_DTYPE_F32, 5, 6));
    status.emplace(ctx.device(), dense(HAL_DTYPE_I32, {1}), std::vector<double>{0});
  }
  std::vector<void*> operands() const {
    return {q->data(),    cache->k_data(), cache->v_data(), table->data(),
            lens->data(), out->data(),     lse->data(),     status->data()};
  }
  AttentionResult result(const std::string& what) const {
    out->check_untouched(what + " out");
    lse->check_untouched(what + " lse");
    cache->k->check_untouched(what + " k_cache");
    return {out->download(), lse->download(), status->download_integers()[0]};
  }
};

// Runs |c| on fresh random data and checks out and lse against the dense
// reference over the gathered cache.
void check_attention(TestContext& ctx, const AttentionCase& c) {
  const AttentionShape& s = c.shape;
  HC_REQUIRE(static_cast<int64_t>(c.lens.size()) == s.batch, "test bug: lens per sequence");
  const HostCache host = random_cache(ctx.random(), c.num_blocks, c.block_size, s.kv_heads, s.dim,
                                      s.dim_v, c.values_in_keys, c.cache_dtype);
  const std::vector<int64_t> tables =
      make_tables(ctx.random(), c.lens, c.block_size, c.max_blocks, c.num_blocks, c.shared_prefix);
  const auto q = random_values(ctx.random(), s.batch * s.s_q * s.heads * s.dim, c.q_dtype,
                               -c.q_range, c.q_range);
  const std::string what = case_label(c);
  AttentionRun run(ctx, c, host, q, tables, c.lens);
  execute(ctx, run.plan, run.operands());
  const AttentionResult got = run.result(what);
  HC_REQUIRE(got.status == 0, what + ": the status word was raised (" + std::to_string(got.status) +
                                  ") with every entry in range");

  std::vector<double> out(static_cast<size_t>(s.batch * s.s_q * s.heads * s.dim_v));
  std::vector<double> lse(static_cast<size_t>(s.batch * s.heads * s.s_q));
  int64_t longest = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = c.lens[static_cast<size_t>(b)];
    longest = std::max(longest, len);
    dense_attention(s, q, b, gather(host, tables, c.max_blocks, b, len), out, lse);
  }
  const double terms = static_cast<double>(longest + s.dim);
  expect_close(got.lse, lse, tolerance_for(HAL_DTYPE_F32, terms), what + ": lse");
  expect_close(got.out, out, tolerance_for(c.out_dtype, terms), what + ": out");
}

// An attention case over |lens| with enough blocks for every sequence.
AttentionCase attention_case(AttentionShape shape, std::vector<int64_t> lens, int64_t block_size,
                             hal_dtype_t dtype = HAL_DTYPE_F32) {
  AttentionCase c;
  c.shape = shape;
  c.lens = std::move(lens);
  c.block_size = block_size;
  int64_t blocks = 0;
  for (int64_t len : c.lens) {
    const int64_t need = (len + block_size - 1) / block_size;
    c.max_blocks = std::max(c.max_blocks, need);
    blocks += need;
  }
  c.max_blocks += 1;          // a padded entry (-1) past every sequence's blocks
  c.num_blocks = blocks + 3;  // blocks no sequence uses
  c.q_dtype = c.cache_dtype = c.out_dtype = dtype;
  return c;
}

// ---- append ------------------------------------------------------------------

struct AppendCase {
  int64_t batch = 1, s_new = 1, kv_heads = 1, dim = 1, dim_v = 1;
  std::vector<int64_t> lens;  // before the append
  int64_t block_size = 16, max_blocks = 0, num_blocks = 0;
  bool values_in_keys = false;
  RopeSpec rope;
  hal_dtype_t new_dtype = HAL_DTYPE_F32, cache_dtype = HAL_DTYPE_F32;
  int64_t pad = 0;  // k_new as a view into wider rows (a fused qkv projection)
};

std::string case_label(const AppendCase& c) {
  std::string lens;
  for (int64_t len : c.lens) lens += (lens.empty() ? "" : ",") + std::to_string(len);
  return strf(
      "paged kv append b=%lld s_new=%lld kv_h=%lld d=%lld d_v=%lld bs=%lld lens=(%s)%s "
      "rope=%u@%u%s new %s cache %s",
      static_cast<long long>(c.batch), static_cast<long long>(c.s_new),
      static_cast<long long>(c.kv_heads), static_cast<long long>(c.dim),
      static_cast<long long>(c.dim_v), static_cast<long long>(c.block_size), lens.c_str(),
      c.values_in_keys ? " values_in_keys" : "", c.rope.dim, c.rope.offset,
      c.rope.interleaved ? " interleaved" : "", dtype_label(c.new_dtype),
      dtype_label(c.cache_dtype));
}

AppendCase append_case(int64_t s_new, int64_t kv_heads, int64_t dim, int64_t dim_v,
                       std::vector<int64_t> lens, int64_t block_size) {
  AppendCase c;
  c.batch = static_cast<int64_t>(lens.size());
  c.s_new = s_new;
  c.kv_heads = kv_heads;
  c.dim = dim;
  c.dim_v = dim_v;
  c.lens = std::move(lens);
  c.block_size = block_size;
  int64_t blocks = 0;
  for (int64_t len : c.lens) {
    const int64_t need = (len + s_new + block_size - 1) / block_size;
    c.max_blocks = std::max(c.max_blocks, need);
    blocks += need;
  }
  c.max_blocks += 1;
  c.num_blocks = blocks + 2;
  return c;
}

hal_op_paged_kv_append_desc_t append_desc(const AppendCase& c, const hal_tensor_desc_t& k_layout,
                                          const hal_tensor_desc_t& v_layout) {
  hal_op_paged_kv_append_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_PAGED_KV_APPEND;
  desc.values_in_keys = c.values_in_keys ? 1 : 0;
  desc.rope_dim = c.rope.dim;
  desc.rope_offset = c.rope.offset;
  desc.rope_interleaved = c.rope.interleaved ? 1 : 0;
  desc.rope_base = c.rope.base;
  desc.k_new = padded(c.new_dtype, {c.batch, c.s_new, c.kv_heads, c.dim}, c.pad);
  if (!c.values_in_keys)
    desc.v_new = padded(c.new_dtype, {c.batch, c.s_new, c.kv_heads, c.dim_v}, c.pad);
  desc.block_table = dense(HAL_DTYPE_I32, {c.batch, c.max_blocks});
  desc.seq_lens = dense(HAL_DTYPE_I32, {c.batch});
  desc.k_cache = k_layout;
  if (!c.values_in_keys) desc.v_cache = v_layout;
  return desc;
}

struct AppendRun {
  Plan plan;
  std::optional<DeviceTensor> k_new, v_new, table, lens, status;
  std::optional<DeviceCache> cache;

  AppendRun(TestContext& ctx, const AppendCase& c, const HostCache& host,
            const std::vector<double>& k_values, const std::vector<double>& v_values,
            const std::vector<int64_t>& tables, const std::vector<int64_t>& lens_values) {
    cache.emplace(ctx.device(), host);
    hal_op_paged_kv_append_desc_t desc = append_desc(c, cache->k_layout, cache->v_layout);
    plan_or_skip(ctx, &desc.header, plan);
    k_new.emplace(ctx.device(), desc.k_new, k_values);
    if (!c.values_in_keys) v_new.emplace(ctx.device(), desc.v_new, v_values);
    table.emplace(ctx.device(), desc.block_table, as_doubles(tables));
    lens.emplace(ctx.device(), desc.seq_lens, as_doubles(lens_values));
    status.emplace(ctx.device(), dense(HAL_DTYPE_I32, {1}), std::vector<double>{0});
  }
  std::vector<void*> operands() const {
    return {k_new->data(),   v_new ? v_new->data() : nullptr,
            table->data(),   lens->data(),
            cache->k_data(), cache->v_data(),
            status->data()};
  }
};

// Runs |c| on a randomly filled cache and checks the whole cache (written
// slots rotated and rounded; every other slot as it was) afterwards.
void check_append(TestContext& ctx, const AppendCase& c) {
  HostCache host = random_cache(ctx.random(), c.num_blocks, c.block_size, c.kv_heads, c.dim,
                                c.dim_v, c.values_in_keys, c.cache_dtype);
  std::vector<int64_t> need;
  for (int64_t len : c.lens) need.push_back(len + c.s_new);
  const std::vector<int64_t> tables =
      make_tables(ctx.random(), need, c.block_size, c.max_blocks, c.num_blocks);
  const auto k_new =
      random_values(ctx.random(), c.batch * c.s_new * c.kv_heads * c.dim, c.new_dtype, -2, 2);
  const auto v_new =
      c.values_in_keys
          ? std::vector<double>{}
          : random_values(ctx.random(), c.batch * c.s_new * c.kv_heads * c.dim_v, c.new_dtype);
  const std::string what = case_label(c);
  AppendRun run(ctx, c, host, k_new, v_new, tables, c.lens);
  execute(ctx, run.plan, run.operands());
  HC_REQUIRE(run.status->download_integers()[0] == 0,
             what + ": the status word was raised with every entry in range");
  run.cache->k->check_untouched(what + " k_cache");
  const std::vector<double> got_k = run.cache->k->download();
  const std::vector<double> got_v =
      c.values_in_keys ? std::vector<double>{} : run.cache->v->download();
  reference_append(host, tables, c.max_blocks, c.lens, c.s_new, k_new, v_new, c.rope);
  // Copies are exact; a rotated value is rounded once more (double to f32 to
  // the cache's dtype, as HAL_OP_ROPE's tests allow).
  expect_close(got_k, host.k, tolerance_for(c.cache_dtype, 2), what + ": k_cache");
  if (!c.values_in_keys)
    expect_close(got_v, host.v, tolerance_for(c.cache_dtype), what + ": v_cache");
}

}  // namespace

// ---- HAL_OP_PAGED_KV_APPEND ----------------------------------------------------

HALCONFORM_TEST("operators.paged_kv_append.layouts_and_dtypes",
                "new tokens land at len + t through shuffled block tables, across block "
                "boundaries; other slots untouched; every dtype pair; strided k_new",
                {}) {
  for (hal_dtype_t cache_dtype : kPagedDtypes) {
    AppendCase c = append_case(1, 2, 16, 8, {0, 15, 16, 33}, 16);
    c.cache_dtype = cache_dtype;
    check_append(ctx, c);
    AppendCase several = append_case(5, 3, 12, 12, {3, 0, 9}, 4);
    several.cache_dtype = cache_dtype;
    several.new_dtype = HAL_DTYPE_F32;
    several.pad = 7;
    check_append(ctx, several);
  }
  AppendCase narrowing = append_case(2, 1, 8, 8, {5, 6}, 3);
  narrowing.new_dtype = HAL_DTYPE_BF16;
  narrowing.cache_dtype = HAL_DTYPE_F16;
  check_append(ctx, narrowing);
  check_append(ctx, append_case(3, 2, 4, 4, {0}, 1));  // one token per block
}

HALCONFORM_TEST("operators.paged_kv_append.rope",
                "keys rotated on the way in as HAL_OP_ROPE rotates them (half-split and "
                "interleaved, whole and partial rotary dims), at positions len + t",
                {}) {
  for (hal_dtype_t dtype : kPagedDtypes) {
    AppendCase c = append_case(3, 2, 16, 16, {0, 40, 1000}, 8);
    c.cache_dtype = dtype;
    c.rope = {16, 0, false, 10000.0f};
    check_append(ctx, c);
    c.rope = {8, 4, true, 500.0f};
    check_append(ctx, c);
  }
}

HALCONFORM_TEST("operators.paged_kv_append.mla_rope",
                "MLA's latent cache: rows of 512 latent dims copied and a 64-wide RoPE part "
                "rotated with base^(-2i/64), no value cache",
                {}) {
  AppendCase c = append_case(2, 1, 576, 512, {0, 63, 200}, 64);
  c.values_in_keys = true;
  c.rope = {64, 512, false, 10000.0f};
  c.cache_dtype = HAL_DTYPE_BF16;
  check_append(ctx, c);
  c.cache_dtype = HAL_DTYPE_F32;
  c.rope.interleaved = true;  // DeepSeek's checkpoints pair dims (2i, 2i+1)
  check_append(ctx, c);
}

HALCONFORM_TEST("operators.paged_kv_append.empty", "no sequences, or no new tokens", {}) {
  check_append(ctx, append_case(0, 2, 8, 8, {3, 4}, 4));
  AppendCase none = append_case(1, 2, 8, 8, {}, 4);
  none.num_blocks = 2;
  check_append(ctx, none);
}

// ---- HAL_OP_PAGED_ATTENTION ----------------------------------------------------

HALCONFORM_TEST("operators.paged_attention.gqa",
                "grouped-query decode over variable lengths, one and several queries per "
                "sequence (causal and not), every dtype, strided views",
                {}) {
  for (hal_dtype_t dtype : kPagedDtypes) {
    AttentionShape shape{4, 1, 8, 2, 64, 64, false, 0};
    check_attention(ctx, attention_case(shape, {1, 37, 128, 75}, 16, dtype));
    shape.s_q = 3;
    shape.causal = true;
    check_attention(ctx, attention_case(shape, {3, 40, 17, 90}, 16, dtype));
  }
  AttentionShape mixed{2, 2, 6, 3, 32, 48, true, 0.3};
  AttentionCase c = attention_case(mixed, {50, 9}, 8);
  c.q_dtype = HAL_DTYPE_BF16;
  c.cache_dtype = HAL_DTYPE_F16;
  c.out_dtype = HAL_DTYPE_F32;
  c.pad = 5;
  check_attention(ctx, c);
  AttentionShape mha{2, 1, 4, 4, 16, 16, false, 0};
  check_attention(ctx, attention_case(mha, {20, 33}, 5));
}

HALCONFORM_TEST("operators.paged_attention.block_table",
                "keys found through the table: shuffled blocks, a prefix shared by every "
                "sequence, -1 padding past each sequence, a strided table",
                {}) {
  AttentionShape shape{3, 1, 4, 2, 32, 32, false, 0};
  AttentionCase c = attention_case(shape, {64, 96, 40}, 16);
  check_attention(ctx, c);
  c.shared_prefix = 2;
  check_attention(ctx, c);
  AttentionShape tiny_blocks{2, 2, 2, 1, 8, 8, true, 0};
  check_attention(ctx, attention_case(tiny_blocks, {9, 4}, 1));
}

HALCONFORM_TEST("operators.paged_attention.partial_blocks",
                "lengths off the block grid: the last block's keys count, up to the length", {}) {
  AttentionShape shape{5, 1, 4, 1, 32, 32, false, 0};
  check_attention(ctx, attention_case(shape, {1, 15, 17, 31, 50}, 16));
  shape.s_q = 2;
  shape.causal = true;
  check_attention(ctx, attention_case(shape, {2, 33, 18, 47, 63}, 16));
}

HALCONFORM_TEST("operators.paged_attention.split_kv",
                "long sequences cut into chunks merged by their lse: explicit split counts "
                "and the implementation's, chunk maxima many units apart",
                {}) {
  AttentionShape shape{2, 1, 4, 2, 64, 64, false, 1.0};  // scores of tens: maxima differ a lot
  for (uint32_t splits : {0u, 1u, 2u, 3u, 7u, 64u}) {
    AttentionCase c = attention_case(shape, {1500, 333}, 32);
    c.num_splits = splits;
    check_attention(ctx, c);
  }
  AttentionShape causal{1, 4, 8, 2, 32, 32, true, 0.5};
  AttentionCase c = attention_case(causal, {2049}, 16);
  c.num_splits = 5;
  check_attention(ctx, c);
}

HALCONFORM_TEST("operators.paged_attention.mla",
                "FlashMLA's dense decode: 576-wide latent keys (512 + 64 RoPE), values the "
                "first 512 dims, many query heads on one latent head, explicit scale",
                {}) {
  AttentionShape shape{2, 1, 16, 1, 576, 512, false, 1.0 / std::sqrt(192.0)};
  AttentionCase c = attention_case(shape, {300, 65}, 64, HAL_DTYPE_BF16);
  c.values_in_keys = true;
  c.out_dtype = HAL_DTYPE_F32;
  check_attention(ctx, c);
  shape.s_q = 2;
  shape.causal = true;
  AttentionCase speculative = attention_case(shape, {130, 2}, 64, HAL_DTYPE_BF16);
  speculative.values_in_keys = true;
  speculative.num_splits = 3;
  check_attention(ctx, speculative);
}

HALCONFORM_TEST("operators.paged_attention.empty",
                "a sequence of length 0 and queries before a sequence's start see no key "
                "(out 0, lse -inf); no sequences",
                {}) {
  AttentionShape shape{3, 3, 2, 1, 8, 8, true, 0};
  check_attention(ctx, attention_case(shape, {0, 1, 2}, 4));
  shape.causal = false;
  check_attention(ctx, attention_case(shape, {0, 5, 1}, 4));
  AttentionShape none{0, 1, 2, 1, 8, 8, false, 0};
  AttentionCase c = attention_case(none, {}, 4);
  check_attention(ctx, c);
}

HALCONFORM_TEST("operators.paged.append_then_attend",
                "a decode step: append the new tokens (RoPE on the way in) then attend over "
                "the cache, against the reference of both",
                {}) {
  // GQA with a half-split rotation of the whole key.
  const int64_t kv_heads = 2, heads = 4, dim = 32, s_new = 2;
  AppendCase a = append_case(s_new, kv_heads, dim, dim, {30, 5}, 8);
  a.rope = {dim, 0, false, 10000.0f};
  a.cache_dtype = HAL_DTYPE_BF16;
  HostCache host = random_cache(ctx.random(), a.num_blocks, a.block_size, kv_heads, dim, dim, false,
                                a.cache_dtype);
  std::vector<int64_t> need;
  for (int64_t len : a.lens) need.push_back(len + s_new);
  const auto tables = make_tables(ctx.random(), need, a.block_size, a.max_blocks, a.num_blocks);
  const auto k_new = random_values(ctx.random(), 2 * s_new * kv_heads * dim, HAL_DTYPE_F32, -2, 2);
  const auto v_new = random_values(ctx.random(), 2 * s_new * kv_heads * dim, HAL_DTYPE_F32);
  AppendRun append(ctx, a, host, k_new, v_new, tables, a.lens);
  execute(ctx, append.plan, append.operands());
  reference_append(host, tables, a.max_blocks, a.lens, s_new, k_new, v_new, a.rope);

  AttentionCase c;
  c.shape = {2, s_new, heads, kv_heads, dim, dim, true, 0};
  c.lens = need;
  c.block_size = a.block_size;
  c.max_blocks = a.max_blocks;
  c.num_blocks = a.num_blocks;
  c.cache_dtype = a.cache_dtype;
  hal_op_paged_attention_desc_t desc =
      attention_desc(c, append.cache->k_layout, append.cache->v_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto q = random_values(ctx.random(), numel(desc.q), HAL_DTYPE_F32, -2, 2);
  DeviceTensor dq(ctx.device(), desc.q, q), dlens(ctx.device(), desc.seq_lens, as_doubles(need)),
      dout(ctx.device(), desc.out), dlse(ctx.device(), desc.lse),
      dstatus(ctx.device(), dense(HAL_DTYPE_I32, {1}), {0});
  execute(ctx, plan,
          {dq.data(), append.cache->k_data(), append.cache->v_data(), append.table->data(),
           dlens.data(), dout.data(), dlse.data(), dstatus.data()});
  std::vector<double> out(static_cast<size_t>(numel(desc.out))),
      lse(static_cast<size_t>(numel(desc.lse)));
  for (int64_t b = 0; b < 2; ++b) {
    dense_attention(c.shape, q, b, gather(host, tables, c.max_blocks, b, need[b]), out, lse);
  }
  const double terms = 32 + dim;
  expect_close(dlse.download(), lse, tolerance_for(HAL_DTYPE_F32, terms),
               "append then attend: lse");
  expect_close(dout.download(), out, tolerance_for(HAL_DTYPE_F32, terms),
               "append then attend: out");
  HC_REQUIRE(dstatus.download_integers()[0] == 0 && append.status->download_integers()[0] == 0,
             "append then attend: the status word was raised with every entry in range");
}

HALCONFORM_TEST("operators.paged.bad_device_data",
                "a block-table entry outside the cache and a sequence longer than its blocks "
                "raise the status word with the code naming the operand, and nothing is written",
                {}) {
  AttentionShape shape{3, 1, 4, 2, 16, 16, false, 0};
  AttentionCase c = attention_case(shape, {20, 33, 7}, 8);
  const HostCache host =
      random_cache(ctx.random(), c.num_blocks, c.block_size, 2, 16, 16, false, HAL_DTYPE_F32);
  const auto tables = make_tables(ctx.random(), c.lens, c.block_size, c.max_blocks, c.num_blocks);
  const auto q = random_values(ctx.random(), 3 * 4 * 16, HAL_DTYPE_F32, -2, 2);
  struct Bad {
    const char* what;
    std::vector<int64_t> tables, lens;
    int64_t status;
  };
  std::vector<Bad> bad;
  {
    auto t = tables;
    t[static_cast<size_t>(1 * c.max_blocks + 4)] =
        c.num_blocks;  // seq 1's last block: past the cache
    bad.push_back({"a block-table entry = num_blocks", t, c.lens, HAL_OP_STATUS_BLOCK_TABLE});
    t = tables;
    t[static_cast<size_t>(0)] = -1;
    bad.push_back({"a block-table entry = -1", t, c.lens, HAL_OP_STATUS_BLOCK_TABLE});
    auto l = c.lens;
    l[2] = static_cast<int64_t>(c.max_blocks * c.block_size + 1);
    bad.push_back({"a sequence longer than its blocks", tables, l, HAL_OP_STATUS_SEQ_LENS});
    l = c.lens;
    l[0] = -3;
    bad.push_back({"a negative sequence length", tables, l, HAL_OP_STATUS_SEQ_LENS});
  }
  for (const Bad& b : bad) {
    const std::string what = std::string("paged attention with ") + b.what;
    AttentionRun run(ctx, c, host, q, b.tables, b.lens);
    const std::vector<double> out_before = run.out->download(), lse_before = run.lse->download();
    execute(ctx, run.plan, run.operands());
    const AttentionResult got = run.result(what);
    HC_REQUIRE(got.status == b.status, what + ": status " + std::to_string(got.status) +
                                           ", expected " + std::to_string(b.status));
    expect_identical(got.out, out_before, what + ": out was written");
    expect_identical(got.lse, lse_before, what + ": lse was written");
    // A later clean execution leaves the raised status raised.
    run.table->upload_integers(tables);
    run.lens->upload_integers(c.lens);
    execute(ctx, run.plan, run.operands());
    HC_REQUIRE(run.status->download_integers()[0] == b.status,
               what + ": a clean execution changed the raised status");
  }
  // Entries past a sequence's blocks are never read: padding them with garbage is fine.
  {
    auto t = tables;
    for (int64_t b = 0; b < 3; ++b)
      t[static_cast<size_t>(b * c.max_blocks + c.max_blocks - 1)] = 1 << 30;
    AttentionRun run(ctx, c, host, q, t, c.lens);
    execute(ctx, run.plan, run.operands());
    HC_REQUIRE(run.status->download_integers()[0] == 0,
               "paged attention: an unused block-table entry out of range raised the status");
  }

  // The append: nothing of the cache moves when one sequence's entry is bad.
  AppendCase a = append_case(2, 2, 8, 8, {3, 14}, 4);
  HostCache cache =
      random_cache(ctx.random(), a.num_blocks, a.block_size, 2, 8, 8, false, HAL_DTYPE_F32);
  std::vector<int64_t> need = {5, 16};
  const auto append_tables = make_tables(ctx.random(), need, 4, a.max_blocks, a.num_blocks);
  const auto k_new = random_values(ctx.random(), 2 * 2 * 2 * 8, HAL_DTYPE_F32);
  struct BadAppend {
    const char* what;
    std::vector<int64_t> tables, lens;
    int64_t status;
  };
  std::vector<BadAppend> bad_appends;
  {
    auto t = append_tables;
    t[static_cast<size_t>(1 * a.max_blocks + 3)] = a.num_blocks + 7;  // seq 1 writes block 3
    bad_appends.push_back(
        {"a block-table entry past the cache", t, a.lens, HAL_OP_STATUS_BLOCK_TABLE});
    auto l = a.lens;
    l[0] = static_cast<int64_t>(a.max_blocks * a.block_size - 1);  // len + 2 past the capacity
    bad_appends.push_back(
        {"a sequence growing past its blocks", append_tables, l, HAL_OP_STATUS_SEQ_LENS});
  }
  for (const BadAppend& b : bad_appends) {
    const std::string what = std::string("paged kv append with ") + b.what;
    AppendRun run(ctx, a, cache, k_new, k_new, b.tables, b.lens);
    execute(ctx, run.plan, run.operands());
    HC_REQUIRE(run.status->download_integers()[0] == b.status,
               what + ": status " + std::to_string(run.status->download_integers()[0]) +
                   ", expected " + std::to_string(b.status));
    expect_identical(run.cache->k->download(), cache.k, what + ": k_cache was written");
    expect_identical(run.cache->v->download(), cache.v, what + ": v_cache was written");
  }
}

HALCONFORM_TEST("operators.paged_attention.deterministic",
                "a HAL_OP_PLAN_DETERMINISTIC plan gives identical bits twice", {}) {
  AttentionShape shape{2, 2, 8, 2, 64, 64, true, 0};
  AttentionCase c = attention_case(shape, {700, 1200}, 16, HAL_DTYPE_BF16);
  const HostCache host =
      random_cache(ctx.random(), c.num_blocks, c.block_size, 2, 64, 64, false, HAL_DTYPE_BF16);
  const auto tables = make_tables(ctx.random(), c.lens, c.block_size, c.max_blocks, c.num_blocks);
  const auto q = random_values(ctx.random(), 2 * 2 * 8 * 64, HAL_DTYPE_BF16, -2, 2);
  AttentionRun run(ctx, c, host, q, tables, c.lens, HAL_OP_PLAN_DETERMINISTIC);
  execute(ctx, run.plan, run.operands());
  const AttentionResult first = run.result("deterministic paged attention");
  execute(ctx, run.plan, run.operands());
  const AttentionResult second = run.result("deterministic paged attention");
  expect_identical(first.out, second.out, "paged attention out, two runs");
  expect_identical(first.lse, second.lse, "paged attention lse, two runs");
}

HALCONFORM_TEST("operators.paged.errors", "each descriptor rule is refused", {}) {
  AttentionShape shape{2, 1, 6, 2, 16, 16, false, 0};
  AttentionCase c = attention_case(shape, {5, 9}, 4);
  const hal_tensor_desc_t k_layout = dense(HAL_DTYPE_F32, {c.num_blocks, 4, 2, 16});
  const hal_tensor_desc_t v_layout = k_layout;
  const hal_op_paged_attention_desc_t good = attention_desc(c, k_layout, v_layout);
  hal_op_plan_t plan = nullptr;
  const auto refused = [&](hal_op_paged_attention_desc_t desc, const char* field) {
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
    HC_REQUIRE(result == HAL_ERROR_INVALID_ARGUMENT, std::string("paged attention with a bad ") +
                                                         field + ": " + hal_result_string(result) +
                                                         " (" + hal_error_last_message() + ")");
    const std::string message = hal_error_last_message();
    HC_REQUIRE(message.find(field) != std::string::npos,
               std::string("the error for a bad ") + field + " does not name it: " + message);
  };
  auto d = good;
  d.q.shape[2] = 5;  // heads not a multiple of kv_heads
  d.out.shape[2] = 5;
  d.lse.shape[1] = 5;
  refused(d, "q.shape[2]");
  d = good;
  d.k_cache.shape[2] = 4;
  refused(d, "q.shape[2]");  // 6 heads over 4 kv heads
  d = good;
  d.v_cache.shape[1] = 5;
  refused(d, "v_cache");
  d = good;
  d.block_table.shape[0] = 3;
  refused(d, "block_table");
  d = good;
  d.block_table.dtype = HAL_DTYPE_I64;
  refused(d, "block_table");
  d = good;
  d.seq_lens.shape[0] = 1;
  refused(d, "seq_lens");
  d = good;
  d.lse.shape[2] = 2;
  refused(d, "lse");
  d = good;
  d.out.shape[3] = 8;  // v_cache's head dim is 16
  refused(d, "v_cache");
  d = good;
  d.values_in_keys = 1;
  d.v_cache = hal_tensor_desc_t{};
  d.out = dense(HAL_DTYPE_F32, {2, 1, 6, 17});  // more value dims than a key row has
  refused(d, "values_in_keys");
  d = good;
  d.num_splits = 5000;
  refused(d, "num_splits");
  d = good;
  d.causal = 2;
  refused(d, "causal");
  d = good;
  d.scale = std::numeric_limits<float>::infinity();
  refused(d, "scale");
  d = good;
  d.k_cache.shape[1] = 0;
  d.v_cache.shape[1] = 0;
  refused(d, "block_size");

  AppendCase a = append_case(1, 2, 16, 16, {5, 9}, 4);
  const hal_op_paged_kv_append_desc_t good_append = append_desc(a, k_layout, v_layout);
  const auto refused_append = [&](hal_op_paged_kv_append_desc_t desc, const char* field) {
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
    HC_REQUIRE(result == HAL_ERROR_INVALID_ARGUMENT, std::string("paged kv append with a bad ") +
                                                         field + ": " + hal_result_string(result) +
                                                         " (" + hal_error_last_message() + ")");
    const std::string message = hal_error_last_message();
    HC_REQUIRE(message.find(field) != std::string::npos,
               std::string("the error for a bad ") + field + " does not name it: " + message);
  };
  auto e = good_append;
  e.k_cache.shape[2] = 3;
  refused_append(e, "k_cache");
  e = good_append;
  e.v_new.shape[1] = 2;
  refused_append(e, "v_new");
  e = good_append;
  e.rope_dim = 7;
  e.rope_base = 10000.0f;
  refused_append(e, "rope_dim");
  e = good_append;
  e.rope_dim = 8;
  e.rope_offset = 12;
  e.rope_base = 10000.0f;
  refused_append(e, "rope_offset");
  e = good_append;
  e.rope_dim = 8;
  e.rope_base = 0.0f;
  refused_append(e, "rope_base");
  e = good_append;
  e.k_cache.strides[0] = 0;  // a cache reaching one slot twice
  refused_append(e, "k_cache");
  e = good_append;
  e.reserved = 1;
  refused_append(e, "reserved");

  // At execution: the status word is required and overlaps nothing.
  Plan ok;
  plan_or_skip(ctx, &good_append.header, ok);
  DeviceTensor k_new(ctx.device(), good_append.k_new), v_new(ctx.device(), good_append.v_new),
      table(ctx.device(), good_append.block_table), lens(ctx.device(), good_append.seq_lens),
      k_cache(ctx.device(), k_layout), v_cache(ctx.device(), v_layout);
  HC_EXPECT_RESULT(try_execute(ctx, ok,
                               {k_new.data(), v_new.data(), table.data(), lens.data(),
                                k_cache.data(), v_cache.data(), nullptr}),
                   HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(try_execute(ctx, ok,
                               {k_new.data(), v_new.data(), table.data(), lens.data(),
                                k_cache.data(), v_cache.data(), lens.data()}),
                   HAL_ERROR_INVALID_ARGUMENT);
}
