// The paged KV cache (SPEC.md §17.6.11) on the first device of HAL_PLUGINS,
// as a serving step uses it: new keys and values appended through shuffled
// block tables (RoPE on the way in), then decode attention over the cache,
// against float64 dense attention over each sequence's keys gathered from a
// host model of the cache; GQA and speculative tokens, MLA's latent cache,
// split-KV counts agreeing with each other and run to run; device data out of
// range raising the status word with nothing written; planning errors naming
// the operand. Registered per implementation list (tests/ops/CMakeLists.txt):
// the cpu plugin's own (cpu.native), the portable one on the cpu plugin, and
// the portable one on opencl (PoCL).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../cpu/float16_bits.hpp"
#include "hal.h"
#include "op_session.hpp"

namespace {

using op_test::Session;

hal_tensor_desc_t dense(hal_dtype_t dtype, std::vector<int64_t> shape) {
  hal_tensor_desc_t tensor{};
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return tensor;
}

size_t element_bytes(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F32 || dtype == HAL_DTYPE_I32 ? 4 : 2;
}

// |value| rounded to |dtype| (round to nearest even), as a double.
double round_to(hal_dtype_t dtype, double value) {
  const auto f = static_cast<float>(value);
  if (dtype == HAL_DTYPE_F16) return hal::test::from_f16(hal::test::to_f16(f));
  if (dtype == HAL_DTYPE_BF16) {
    uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
    float rounded = 0;
    std::memcpy(&rounded, &bits, 4);
    return rounded;
  }
  return f;
}

std::vector<unsigned char> encode(hal_dtype_t dtype, const std::vector<double>& values) {
  std::vector<unsigned char> bytes(values.size() * element_bytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const auto f = static_cast<float>(round_to(dtype, values[i]));
    if (dtype == HAL_DTYPE_F32) {
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    } else if (dtype == HAL_DTYPE_F16) {
      const uint16_t h = hal::test::to_f16(f);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    } else {
      uint32_t bits = 0;
      std::memcpy(&bits, &f, 4);
      const auto top = static_cast<uint16_t>(bits >> 16);  // exact: already rounded
      std::memcpy(bytes.data() + 2 * i, &top, 2);
    }
  }
  return bytes;
}

std::vector<double> decode(hal_dtype_t dtype, const std::vector<unsigned char>& bytes) {
  std::vector<double> values(bytes.size() / element_bytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == HAL_DTYPE_F32) {
      float f = 0;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      values[i] = f;
    } else if (dtype == HAL_DTYPE_F16) {
      uint16_t h = 0;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      values[i] = hal::test::from_f16(h);
    } else {
      uint16_t top = 0;
      std::memcpy(&top, bytes.data() + 2 * i, 2);
      const uint32_t bits = uint32_t{top} << 16;
      float f = 0;
      std::memcpy(&f, &bits, 4);
      values[i] = f;
    }
  }
  return values;
}

std::vector<unsigned char> encode_i32(const std::vector<int32_t>& values) {
  std::vector<unsigned char> bytes(values.size() * 4);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<double> random_values(std::mt19937_64& random, size_t count, double range) {
  std::uniform_real_distribution<double> dist(-range, range);
  std::vector<double> values(count);
  for (double& v : values) v = dist(random);
  return values;
}

// A paged cache: the host model (values rounded to |dtype|) and its device copy.
struct Cache {
  int64_t num_blocks, block_size, kv_heads, dim, dim_v;
  bool values_in_keys;
  hal_dtype_t dtype;
  std::vector<double> k, v;
  void* k_data = nullptr;
  void* v_data = nullptr;

  hal_tensor_desc_t k_layout() const {
    return dense(dtype, {num_blocks, block_size, kv_heads, dim});
  }
  hal_tensor_desc_t v_layout() const {
    return values_in_keys ? hal_tensor_desc_t{}
                          : dense(dtype, {num_blocks, block_size, kv_heads, dim_v});
  }
  double key(int64_t block, int64_t slot, int64_t g, int64_t d) const {
    return k[static_cast<size_t>(((block * block_size + slot) * kv_heads + g) * dim + d)];
  }
  double value(int64_t block, int64_t slot, int64_t g, int64_t d) const {
    if (values_in_keys) return key(block, slot, g, d);
    return v[static_cast<size_t>(((block * block_size + slot) * kv_heads + g) * dim_v + d)];
  }
  void upload(Session& session) {
    k_data = session.upload(encode(dtype, k));
    if (!values_in_keys) v_data = session.upload(encode(dtype, v));
  }
};

Cache random_cache(std::mt19937_64& random, Session& session, int64_t num_blocks,
                   int64_t block_size, int64_t kv_heads, int64_t dim, int64_t dim_v,
                   bool values_in_keys, hal_dtype_t dtype) {
  Cache cache{num_blocks, block_size, kv_heads, dim, dim_v, values_in_keys, dtype, {}, {}};
  cache.k = random_values(random, static_cast<size_t>(num_blocks * block_size * kv_heads * dim), 1);
  for (double& x : cache.k) x = round_to(dtype, x);
  if (!values_in_keys) {
    cache.v =
        random_values(random, static_cast<size_t>(num_blocks * block_size * kv_heads * dim_v), 1);
    for (double& x : cache.v) x = round_to(dtype, x);
  }
  cache.upload(session);
  return cache;
}

// Block tables [batch, max_blocks]: sequence b gets ceil(need[b] /
// block_size) distinct blocks in shuffled order, then -1 padding.
std::vector<int32_t> make_tables(std::mt19937_64& random, const std::vector<int64_t>& need,
                                 int64_t block_size, int64_t max_blocks, int64_t num_blocks) {
  std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), random);
  std::vector<int32_t> table(need.size() * static_cast<size_t>(max_blocks), -1);
  size_t next = 0;
  for (size_t b = 0; b < need.size(); ++b) {
    const int64_t blocks = (need[b] + block_size - 1) / block_size;
    REQUIRE(blocks <= max_blocks);
    for (int64_t i = 0; i < blocks; ++i) {
      REQUIRE(next < pool.size());
      table[b * static_cast<size_t>(max_blocks) + static_cast<size_t>(i)] = pool[next++];
    }
  }
  return table;
}

struct Attention {
  int64_t batch, s_q, heads, kv_heads, dim, dim_v;
  bool causal;
  double scale;
};

// Dense float64 attention of sequence b over its keys gathered from the
// cache: out [batch, s_q, heads, dim_v] and lse [batch, heads, s_q].
void reference_attention(const Attention& a, const Cache& cache, const std::vector<int32_t>& table,
                         int64_t max_blocks, const std::vector<double>& q, int64_t b, int64_t len,
                         std::vector<double>& out, std::vector<double>& lse) {
  const int64_t group = a.heads / a.kv_heads;
  for (int64_t h = 0; h < a.heads; ++h) {
    for (int64_t t = 0; t < a.s_q; ++t) {
      const int64_t end = a.causal ? std::min(len, len - a.s_q + t + 1) : len;
      std::vector<double> scores;
      for (int64_t j = 0; j < end; ++j) {
        const int64_t block = table[static_cast<size_t>(b * max_blocks + j / cache.block_size)];
        double s = 0;
        for (int64_t d = 0; d < a.dim; ++d) {
          s += q[static_cast<size_t>(((b * a.s_q + t) * a.heads + h) * a.dim + d)] *
               cache.key(block, j % cache.block_size, h / group, d);
        }
        scores.push_back(s * a.scale);
      }
      const size_t o = static_cast<size_t>(((b * a.s_q + t) * a.heads + h) * a.dim_v);
      const size_t l = static_cast<size_t>((b * a.heads + h) * a.s_q + t);
      if (scores.empty()) {
        for (int64_t d = 0; d < a.dim_v; ++d) out[o + d] = 0;
        lse[l] = -std::numeric_limits<double>::infinity();
        continue;
      }
      const double m = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double s : scores) sum += std::exp(s - m);
      lse[l] = m + std::log(sum);
      for (int64_t d = 0; d < a.dim_v; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < end; ++j) {
          const int64_t block = table[static_cast<size_t>(b * max_blocks + j / cache.block_size)];
          acc += std::exp(scores[static_cast<size_t>(j)] - m) *
                 cache.value(block, j % cache.block_size, h / group, d);
        }
        out[o + d] = acc / sum;
      }
    }
  }
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                  double rtol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_inf = std::isinf(want[i]) && got[i] == want[i];
    if (!both_inf && !(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      if (bad++ == 0) first = i;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements off; first at " << first
            << ": got " << (bad ? got[first] : 0.0) << ", want " << (bad ? want[first] : 0.0));
  CHECK(bad == 0);
}

struct AttentionRun {
  std::vector<double> out, lse;
  std::vector<unsigned char> out_bytes, lse_bytes;
  int32_t status = 0;
};

hal_op_paged_attention_desc_t attention_desc(const Attention& a, const Cache& cache,
                                             int64_t max_blocks, uint32_t splits) {
  hal_op_paged_attention_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_PAGED_ATTENTION;
  desc.causal = a.causal ? 1 : 0;
  desc.values_in_keys = cache.values_in_keys ? 1 : 0;
  desc.scale = static_cast<float>(a.scale);
  desc.num_splits = splits;
  desc.q = dense(HAL_DTYPE_F32, {a.batch, a.s_q, a.heads, a.dim});
  desc.k_cache = cache.k_layout();
  desc.v_cache = cache.v_layout();
  desc.block_table = dense(HAL_DTYPE_I32, {a.batch, max_blocks});
  desc.seq_lens = dense(HAL_DTYPE_I32, {a.batch});
  desc.out = dense(HAL_DTYPE_F32, {a.batch, a.s_q, a.heads, a.dim_v});
  desc.lse = dense(HAL_DTYPE_F32, {a.batch, a.heads, a.s_q});
  return desc;
}

AttentionRun attend(Session& session, const Attention& a, const Cache& cache,
                    const std::vector<int32_t>& table, int64_t max_blocks,
                    const std::vector<int32_t>& lens, const std::vector<double>& q,
                    uint32_t splits) {
  const hal_op_paged_attention_desc_t desc = attention_desc(a, cache, max_blocks, splits);
  const size_t out_count = static_cast<size_t>(a.batch * a.s_q * a.heads * a.dim_v);
  const size_t lse_count = static_cast<size_t>(a.batch * a.heads * a.s_q);
  // out and lse start as a pattern, so "nothing written" is visible.
  const std::vector<double> pattern_out(out_count, 7.0), pattern_lse(lse_count, 7.0);
  void* q_data = session.upload(encode(HAL_DTYPE_F32, q));
  void* table_data = session.upload(encode_i32(table));
  void* lens_data = session.upload(encode_i32(lens));
  void* out = session.upload(encode(HAL_DTYPE_F32, pattern_out));
  void* lse = session.upload(encode(HAL_DTYPE_F32, pattern_lse));
  void* status = session.upload(encode_i32({0}));
  session.run(&desc.header,
              {q_data, cache.k_data, cache.v_data, table_data, lens_data, out, lse, status});
  AttentionRun run;
  run.out_bytes = session.download_bytes(out, out_count * 4);
  run.lse_bytes = session.download_bytes(lse, lse_count * 4);
  run.out = decode(HAL_DTYPE_F32, run.out_bytes);
  run.lse = decode(HAL_DTYPE_F32, run.lse_bytes);
  const auto word = session.download_bytes(status, 4);
  std::memcpy(&run.status, word.data(), 4);
  return run;
}

// Runs |a| over a random cache and checks it against the reference; returns
// the run (for bitwise comparisons).
AttentionRun check_attention(Session& session, std::mt19937_64& random, const Attention& a,
                             const std::vector<int64_t>& lens, int64_t block_size,
                             hal_dtype_t dtype, bool values_in_keys, uint32_t splits) {
  int64_t max_blocks = 1, blocks = 0, longest = 0;
  for (int64_t len : lens) {
    max_blocks = std::max(max_blocks, (len + block_size - 1) / block_size + 1);
    blocks += (len + block_size - 1) / block_size;
    longest = std::max(longest, len);
  }
  const Cache cache = random_cache(random, session, blocks + 2, block_size, a.kv_heads, a.dim,
                                   a.dim_v, values_in_keys, dtype);
  const auto table = make_tables(random, lens, block_size, max_blocks, cache.num_blocks);
  const auto q = random_values(random, static_cast<size_t>(a.batch * a.s_q * a.heads * a.dim), 1);
  std::vector<int32_t> lens32(lens.begin(), lens.end());
  AttentionRun run = attend(session, a, cache, table, max_blocks, lens32, q, splits);
  CHECK(run.status == 0);
  std::vector<double> out(run.out.size()), lse(run.lse.size());
  for (int64_t b = 0; b < a.batch; ++b) {
    reference_attention(a, cache, table, max_blocks, q, b, lens[static_cast<size_t>(b)], out, lse);
  }
  // f32 outputs accumulated over (longest + dim) terms (SPEC.md §17.5).
  const double atol = 1e-5 * std::sqrt(static_cast<double>(longest + a.dim));
  const std::string what = "splits " + std::to_string(splits);
  expect_close(run.out, out, atol, 1e-5, what + " out");
  expect_close(run.lse, lse, atol, 1e-5, what + " lse");
  return run;
}

}  // namespace

TEST_CASE("paged attention with GQA matches dense attention over the gathered cache",
          "[ops][paged]") {
  Session session;
  std::mt19937_64 random(38);
  const Attention a{4, 1, 8, 2, 64, 64, false, 0.125};
  // Lengths off the block grid (the last partial block counts), one of 0.
  const std::vector<int64_t> lens{1, 17, 100, 0};
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    for (uint32_t splits : {1u, 3u, 0u}) {
      INFO("cache dtype " << dtype << " splits " << splits);
      check_attention(session, random, a, lens, 16, dtype, false, splits);
    }
  }
}

TEST_CASE("speculative tokens are causal among themselves, bottom-right aligned", "[ops][paged]") {
  Session session;
  std::mt19937_64 random(39);
  const Attention a{3, 4, 4, 1, 32, 16, true, 0.2};
  // A sequence shorter than s_q: its first queries see no key (out 0, lse -inf).
  check_attention(session, random, a, {2, 40, 33}, 8, HAL_DTYPE_F32, false, 2);
  check_attention(session, random, a, {5, 64, 9}, 8, HAL_DTYPE_BF16, false, 0);
}

TEST_CASE("MLA: a 576-wide latent cache, values its first 512 dims, 16 heads on one",
          "[ops][paged]") {
  Session session;
  std::mt19937_64 random(40);
  const Attention a{2, 2, 16, 1, 576, 512, true, 1.0 / std::sqrt(192.0)};
  check_attention(session, random, a, {130, 7}, 64, HAL_DTYPE_BF16, true, 3);
}

TEST_CASE("split-KV over one long sequence: every split count agrees, run to run bit for bit",
          "[ops][paged]") {
  Session session;
  const Attention a{1, 1, 4, 1, 64, 64, false, 0.5};  // large scores: chunk maxima far apart
  std::vector<unsigned char> first;
  for (uint32_t splits : {1u, 5u, 0u, 0u}) {
    std::mt19937_64 random(41);  // the same data for every run
    const AttentionRun run =
        check_attention(session, random, a, {3000}, 32, HAL_DTYPE_F32, false, splits);
    if (splits == 0) {
      if (first.empty()) {
        first = run.out_bytes;
      } else {
        CHECK(run.out_bytes == first);  // the implementation's own split, twice
      }
    }
  }
}

// The shapes the tuned decode loops split work by (cpu.native's AVX-512
// path: tiles of 16 positions, query rows in blocks of 8/4/2/1 for the
// values and 4/2/1 for the scores, keys four at a time, head dims in
// vectors of 16 and 32 with masked tails; items per chunk of blocks):
// lengths over many blocks and off every grid, blocks that tiles straddle,
// split-KV on, several query tokens, each cache dtype.
TEST_CASE("decode over many blocks: odd lengths, group sizes, head dims and block sizes",
          "[ops][paged]") {
  Session session;
  std::mt19937_64 random(43);
  struct Case {
    Attention a;
    std::vector<int64_t> lens;
    int64_t block_size;
    uint32_t splits;
  };
  const Case cases[] = {
      // 13 query rows per kv head (8 + 4 + 1), dims 40 and 24 (masked
      // tails), blocks of 7 (tiles straddle blocks), the split chosen.
      {{2, 1, 26, 2, 40, 24, false, 0.15}, {1001, 333}, 7, 0},
      // Three causal query tokens, 2 heads a group (6 rows: 4 + 2), d 128,
      // four splits, one sequence shorter than a tile.
      {{2, 3, 6, 3, 128, 128, true, 0.09}, {2049, 13}, 16, 4},
      // One row per kv head, dim 17, dim_v 48 (a half-used second vector),
      // a length one past a tile, three splits of a single sequence.
      {{1, 1, 2, 2, 17, 48, false, 0.3}, {4097}, 32, 3},
  };
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    for (const Case& c : cases) {
      INFO("cache dtype " << dtype << " heads " << c.a.heads << " dim " << c.a.dim);
      check_attention(session, random, c.a, c.lens, c.block_size, dtype, false, c.splits);
    }
  }
  // MLA with two causal tokens on f16 and f32 latent caches, 16 heads on one.
  const Attention mla{1, 2, 16, 1, 576, 512, true, 1.0 / std::sqrt(192.0)};
  check_attention(session, random, mla, {777}, 64, HAL_DTYPE_F16, true, 0);
  check_attention(session, random, mla, {300}, 64, HAL_DTYPE_F32, true, 2);
}

TEST_CASE(
    "append writes new tokens at their positions, RoPE as HAL_OP_ROPE, then attention "
    "sees them",
    "[ops][paged]") {
  Session session;
  std::mt19937_64 random(42);
  const int64_t batch = 2, s_new = 3, kv_heads = 2, dim = 16, block_size = 4;
  const std::vector<int64_t> before{5, 0};
  const int64_t max_blocks = 4;
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16}) {
    for (bool interleaved : {false, true}) {
      INFO("cache dtype " << dtype << " interleaved " << interleaved);
      Cache cache = random_cache(random, session, 10, block_size, kv_heads, dim, dim, false, dtype);
      std::vector<int64_t> after{before[0] + s_new, before[1] + s_new};
      const auto table = make_tables(random, after, block_size, max_blocks, cache.num_blocks);
      const auto k_new =
          random_values(random, static_cast<size_t>(batch * s_new * kv_heads * dim), 1);
      const auto v_new = random_values(random, k_new.size(), 1);
      hal_op_paged_kv_append_desc_t desc{};
      desc.header.struct_size = sizeof desc;
      desc.header.kind = HAL_OP_PAGED_KV_APPEND;
      desc.rope_dim = 8;  // a slice of the head: dims [4, 12)
      desc.rope_offset = 4;
      desc.rope_interleaved = interleaved ? 1 : 0;
      desc.rope_base = 10000.0f;
      desc.k_new = dense(HAL_DTYPE_F32, {batch, s_new, kv_heads, dim});
      desc.v_new = desc.k_new;
      desc.block_table = dense(HAL_DTYPE_I32, {batch, max_blocks});
      desc.seq_lens = dense(HAL_DTYPE_I32, {batch});
      desc.k_cache = cache.k_layout();
      desc.v_cache = cache.v_layout();
      void* status = session.upload(encode_i32({0}));
      session.run(&desc.header,
                  {session.upload(encode(HAL_DTYPE_F32, k_new)),
                   session.upload(encode(HAL_DTYPE_F32, v_new)), session.upload(encode_i32(table)),
                   session.upload(encode_i32({5, 0})), cache.k_data, cache.v_data, status});
      // The host model: rotate pair i of the slice at angle p * base^(-2i/8).
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t t = 0; t < s_new; ++t) {
          const int64_t p = before[static_cast<size_t>(b)] + t;
          const int64_t block = table[static_cast<size_t>(b * max_blocks + p / block_size)];
          for (int64_t g = 0; g < kv_heads; ++g) {
            const size_t row = static_cast<size_t>(((b * s_new + t) * kv_heads + g) * dim);
            std::vector<double> key(k_new.begin() + static_cast<std::ptrdiff_t>(row),
                                    k_new.begin() + static_cast<std::ptrdiff_t>(row + dim));
            const std::vector<double> x = key;
            for (int64_t i = 0; i < 4; ++i) {
              const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * i / 8.0);
              const int64_t d1 = 4 + (interleaved ? 2 * i : i);
              const int64_t d2 = 4 + (interleaved ? 2 * i + 1 : i + 4);
              key[d1] = x[d1] * std::cos(angle) - x[d2] * std::sin(angle);
              key[d2] = x[d2] * std::cos(angle) + x[d1] * std::sin(angle);
            }
            const size_t slot =
                static_cast<size_t>(((block * block_size + p % block_size) * kv_heads + g) * dim);
            for (int64_t d = 0; d < dim; ++d) {
              cache.k[slot + d] = round_to(dtype, key[d]);
              cache.v[slot + d] = round_to(dtype, v_new[row + d]);
            }
          }
        }
      }
      const auto got_k = decode(
          dtype, session.download_bytes(cache.k_data, cache.k.size() * element_bytes(dtype)));
      const auto got_v = decode(
          dtype, session.download_bytes(cache.v_data, cache.v.size() * element_bytes(dtype)));
      // One more rounding than a copy for a rotated value (f64 -> f32 -> dtype).
      const double tol = dtype == HAL_DTYPE_F32 ? 1e-6 : 8e-3;
      expect_close(got_k, cache.k, tol, tol, "k_cache");
      expect_close(got_v, cache.v, 0, 0, "v_cache");
      int32_t word = 0;
      std::memcpy(&word, session.download_bytes(status, 4).data(), 4);
      CHECK(word == 0);
      // Attention over the appended cache sees the new keys.
      const Attention a{batch, s_new, 4, kv_heads, dim, dim, true, 0.25};
      const auto q = random_values(random, static_cast<size_t>(batch * s_new * 4 * dim), 1);
      const std::vector<int32_t> lens{static_cast<int32_t>(after[0]),
                                      static_cast<int32_t>(after[1])};
      const AttentionRun run = attend(session, a, cache, table, max_blocks, lens, q, 0);
      std::vector<double> out(run.out.size()), lse(run.lse.size());
      for (int64_t b = 0; b < batch; ++b) {
        reference_attention(a, cache, table, max_blocks, q, b, after[static_cast<size_t>(b)], out,
                            lse);
      }
      expect_close(run.out, out, 1e-4, 1e-5, "out after append");
      expect_close(run.lse, lse, 1e-4, 1e-5, "lse after append");
    }
  }
}

TEST_CASE("device data out of range raises the status word naming it and writes nothing",
          "[ops][paged]") {
  Session session;
  std::mt19937_64 random(43);
  const Attention a{2, 1, 2, 1, 8, 8, false, 0.3};
  const int64_t block_size = 4, max_blocks = 3;
  const Cache cache = random_cache(random, session, 6, block_size, 1, 8, 8, false, HAL_DTYPE_F32);
  const auto q = random_values(random, 2 * 2 * 8, 1);
  struct Bad {
    const char* what;
    std::vector<int32_t> table, lens;
    int32_t code;
  };
  const Bad cases[] = {
      // The second sequence's third block (it uses it: length 9) names block 6 of 6.
      {"block table entry past the cache", {0, 1, -1, 2, 3, 6}, {5, 9}, HAL_OP_STATUS_BLOCK_TABLE},
      {"negative block table entry", {-2, 1, -1, 2, 3, 4}, {5, 9}, HAL_OP_STATUS_BLOCK_TABLE},
      // 13 tokens cannot live in 3 blocks of 4.
      {"sequence longer than its blocks", {0, 1, 5, 2, 3, 4}, {5, 13}, HAL_OP_STATUS_SEQ_LENS},
      {"negative sequence length", {0, 1, 5, 2, 3, 4}, {-1, 9}, HAL_OP_STATUS_SEQ_LENS},
  };
  for (const Bad& bad : cases) {
    INFO(bad.what);
    const AttentionRun run = attend(session, a, cache, bad.table, max_blocks, bad.lens, q, 2);
    CHECK(run.status == bad.code);
    for (double x : run.out) REQUIRE(x == 7.0);  // nothing written
    for (double x : run.lse) REQUIRE(x == 7.0);
  }
  // The append: a bad entry among the blocks it writes leaves the whole cache as it was.
  hal_op_paged_kv_append_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_PAGED_KV_APPEND;
  desc.k_new = dense(HAL_DTYPE_F32, {2, 2, 1, 8});
  desc.v_new = desc.k_new;
  desc.block_table = dense(HAL_DTYPE_I32, {2, max_blocks});
  desc.seq_lens = dense(HAL_DTYPE_I32, {2});
  desc.k_cache = cache.k_layout();
  desc.v_cache = cache.v_layout();
  const auto before_k = session.download_bytes(cache.k_data, cache.k.size() * 4);
  const auto before_v = session.download_bytes(cache.v_data, cache.v.size() * 4);
  const std::vector<double> rows(32, 0.5);
  for (const Bad& bad : {Bad{"append into a block past the cache",
                             {0, 1, -1, 2, 7, 4},
                             {3, 3},
                             HAL_OP_STATUS_BLOCK_TABLE},
                         Bad{"append past the sequence's blocks",
                             {0, 1, 5, 2, 3, 4},
                             {3, 11},
                             HAL_OP_STATUS_SEQ_LENS}}) {
    INFO(bad.what);
    void* status = session.upload(encode_i32({0}));
    session.run(&desc.header,
                {session.upload(encode(HAL_DTYPE_F32, rows)),
                 session.upload(encode(HAL_DTYPE_F32, rows)), session.upload(encode_i32(bad.table)),
                 session.upload(encode_i32(bad.lens)), cache.k_data, cache.v_data, status});
    int32_t word = 0;
    std::memcpy(&word, session.download_bytes(status, 4).data(), 4);
    CHECK(word == bad.code);
    CHECK(session.download_bytes(cache.k_data, before_k.size()) == before_k);
    CHECK(session.download_bytes(cache.v_data, before_v.size()) == before_v);
  }
}

TEST_CASE("planning refuses a wrong head grouping and a mismatched cache, naming them",
          "[ops][paged]") {
  Session session;
  Cache cache{4, 8, 3, 16, 16, false, HAL_DTYPE_F32, {}, {}};
  const Attention a{1, 1, 4, 3, 16, 16, false, 0};  // 4 query heads on 3 kv heads
  hal_op_paged_attention_desc_t desc = attention_desc(a, cache, 2, 0);
  hal_op_plan_t plan = nullptr;
  CHECK(session.try_plan(&desc.header, &plan) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(hal_error_last_message(), Catch::Contains("kv_heads"));
  desc = attention_desc(Attention{1, 1, 6, 3, 16, 16, false, 0}, cache, 2, 0);
  desc.v_cache.shape[0] = 5;  // v_cache with other blocks than k_cache
  CHECK(session.try_plan(&desc.header, &plan) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(hal_error_last_message(), Catch::Contains("v_cache"));
  desc = attention_desc(Attention{1, 1, 6, 3, 16, 16, false, 0}, cache, 2, 0);
  desc.block_table.dtype = HAL_DTYPE_I64;
  CHECK(session.try_plan(&desc.header, &plan) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(hal_error_last_message(), Catch::Contains("block_table"));
}
