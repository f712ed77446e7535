// cpu.native's paged KV cache (SPEC.md §17.6.11): HAL_OP_PAGED_KV_APPEND and
// HAL_OP_PAGED_ATTENTION on the plugin's thread pool.
//
// Both check the device data first (cpu device memory is host memory, so the
// check runs on the stream before anything is written): a bad sequence
// length or block-table entry raises the status word and the execution
// writes nothing else, as the portable kernels do.
//
// Attention is split-KV. One work item per (sequence, chunk of its blocks)
// covering every kv head: with AVX-512 (native_paged_avx512.hpp) it walks
// the chunk a tile of 16 positions at a time and, within a tile, each kv
// head, so a block's rows of all heads are read together, once, straight
// from the cache (widened in registers), with the lines of the next tile
// asked for ahead; elsewhere (or with HAL_CPU_AVX512=0) the portable loops
// below take one kv head after the other, widening each row to f32 first.
// Either way an item holds the scaled query rows of every query head of a
// kv head's group and every new token (group * s_q rows), so each key and
// value row is read once per chunk, not once per query head (the decode step
// is bound by reading the cache). Keys go through an online softmax; a chunk
// leaves (max, sum, unnormalised output) per row, and one item per
// (sequence, head, token) merges the chunks in order, each rescaled by
// exp(its max - the largest). The split count is the descriptor's
// num_splits, or, with 0, chosen per execution from the pool's thread count
// and the longest sequence: results depend on the split count (and on
// whether the AVX-512 loop runs) only, so they are the same run to run for a
// given thread count.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "hal_util/isa_clones.hpp"
#include "native_half.hpp"
#include "native_paged_avx512.hpp"
#include "native_plan.hpp"
#include "ops.hpp"

namespace hal::cpu::ops {

namespace {

using native::ConstHalfRef;
using native::HalfRef;

constexpr int32_t kStatusBlockTable = HAL_OP_STATUS_BLOCK_TABLE;
constexpr int32_t kStatusSeqLens = HAL_OP_STATUS_SEQ_LENS;
// Keys per tile of the online softmax.
constexpr int64_t kTileKeys = 32;
// The automatic split count: at most this many chunks, of at least this many
// keys, and a partial-result workspace of at most this many bytes.
constexpr int64_t kMaxAutoSplits = 64;
constexpr int64_t kMinChunkKeys = 256;
constexpr double kMaxAutoWorkspace = 64.0 * 1024 * 1024;

bool last_dim_contiguous(const hal_tensor_desc_t& tensor) {
  return tensor.shape[tensor.rank - 1] <= 1 || tensor.strides[tensor.rank - 1] == 1;
}

// Raises the status word to |code| (an atomic maximum: executions on other
// streams may raise it too).
void raise_status(void* status, int32_t code) {
  std::atomic_ref<int32_t> word(*static_cast<int32_t*>(status));
  int32_t seen = word.load(std::memory_order_relaxed);
  while (seen < code && !word.compare_exchange_weak(seen, code, std::memory_order_relaxed)) {
  }
}

// The block table and sequence lengths of one execution.
struct Table {
  const int32_t* table;
  int64_t t0, t1;
  const int32_t* lens;
  int64_t l0;
  int64_t block_size, max_blocks, num_blocks;

  int64_t len(int64_t b) const { return lens[b * l0]; }
  int64_t block(int64_t b, int64_t position) const {
    return table[b * t0 + (position / block_size) * t1];
  }
  // The status code positions [first, end) of sequence b earn: their blocks
  // must exist in the table row and in the cache.
  int32_t check(int64_t b, int64_t first, int64_t end) const {
    const int64_t length = len(b);
    if (length < 0 || end > max_blocks * block_size || first < 0) return kStatusSeqLens;
    for (int64_t block = first / block_size; first < end && block <= (end - 1) / block_size;
         ++block) {
      const int64_t entry = table[b * t0 + block * t1];
      if (entry < 0 || entry >= num_blocks) return kStatusBlockTable;
    }
    return 0;
  }
};

Table bind_table(const hal_tensor_desc_t& table, const hal_tensor_desc_t& lens,
                 const hal_tensor_desc_t& k_cache, void* table_data, void* lens_data) {
  return Table{static_cast<const int32_t*>(table_data),
               table.strides[0],
               table.strides[1],
               static_cast<const int32_t*>(lens_data),
               lens.strides[0],
               k_cache.shape[1],
               table.shape[1],
               k_cache.shape[0]};
}

// ---- HAL_OP_PAGED_KV_APPEND ---------------------------------------------------

std::unique_ptr<OpPlan> plan_append(const hal_op_paged_kv_append_desc_t& desc, Decline& decline) {
  const bool values_in_keys = desc.values_in_keys != 0;
  for (const hal_tensor_desc_t* t : {&desc.k_new, &desc.k_cache}) {
    if (!last_dim_contiguous(*t)) {
      decline.reason = "cpu.native's paged append needs unit-stride head dims";
      return nullptr;
    }
  }
  if (!values_in_keys && (!last_dim_contiguous(desc.v_new) || !last_dim_contiguous(desc.v_cache))) {
    decline.reason = "cpu.native's paged append needs unit-stride head dims";
    return nullptr;
  }
  return std::make_unique<NativePlan>(7, [desc, values_in_keys](ThreadPool& pool,
                                                                void* const* operands,
                                                                const hal_op_scalar_t*) {
    const int64_t batch = desc.k_new.shape[0], s_new = desc.k_new.shape[1];
    const int64_t kv_heads = desc.k_new.shape[2], dim = desc.k_new.shape[3];
    if (batch == 0) return;
    const Table table =
        bind_table(desc.block_table, desc.seq_lens, desc.k_cache, operands[2], operands[3]);
    int32_t status = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = table.len(b);
      status = std::max(status, table.check(b, len, len + s_new));
    }
    if (status != 0) {
      raise_status(operands[6], status);
      return;
    }
    if (s_new == 0) return;
    const int64_t dim_v = values_in_keys ? 0 : desc.v_new.shape[3];
    const int64_t half = desc.rope_dim / 2;
    // One item per kv head: distinct heads are distinct cache elements, and
    // within a head the rows go in (b, t) order (a slot two tokens name gets
    // the later one).
    parallel_items(pool, static_cast<uint64_t>(kv_heads), [&](uint64_t item, uint32_t) {
      const auto h = static_cast<int64_t>(item);
      std::vector<float> row(static_cast<size_t>(std::max(dim, dim_v)));
      std::vector<float> rotated(row.size());
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t t = 0; t < s_new; ++t) {
          const int64_t position = table.len(b) + t;
          const int64_t block = table.block(b, position);
          const int64_t slot = position % table.block_size;
          native::to_f32(ConstHalfRef{operands[0], desc.k_new.dtype},
                         static_cast<size_t>(b * desc.k_new.strides[0] + t * desc.k_new.strides[1] +
                                             h * desc.k_new.strides[2]),
                         static_cast<size_t>(dim), row.data());
          const float* key = row.data();
          if (half > 0) {
            // HAL_OP_ROPE's pairs within [rope_offset, rope_offset + rope_dim),
            // the angle in double as the portable kernel computes it.
            std::copy(row.begin(), row.end(), rotated.begin());
            float* slice = rotated.data() + desc.rope_offset;
            const float* x = row.data() + desc.rope_offset;
            for (int64_t i = 0; i < half; ++i) {
              const int64_t d1 = desc.rope_interleaved ? 2 * i : i;
              const int64_t d2 = desc.rope_interleaved ? 2 * i + 1 : i + half;
              const double inv_freq =
                  std::exp(-(static_cast<double>(2 * i) / static_cast<double>(desc.rope_dim)) *
                           std::log(static_cast<double>(desc.rope_base)));
              const double angle = static_cast<double>(position) * inv_freq;
              const double c = std::cos(angle), s = std::sin(angle);
              const double x1 = x[d1], x2 = x[d2];
              slice[d1] = static_cast<float>(x1 * c - x2 * s);
              slice[d2] = static_cast<float>(x2 * c + x1 * s);
            }
            key = rotated.data();
          }
          native::from_f32(
              key, HalfRef{operands[4], desc.k_cache.dtype},
              static_cast<size_t>(block * desc.k_cache.strides[0] + slot * desc.k_cache.strides[1] +
                                  h * desc.k_cache.strides[2]),
              static_cast<size_t>(dim));
          if (values_in_keys) continue;
          native::to_f32(ConstHalfRef{operands[1], desc.v_new.dtype},
                         static_cast<size_t>(b * desc.v_new.strides[0] + t * desc.v_new.strides[1] +
                                             h * desc.v_new.strides[2]),
                         static_cast<size_t>(dim_v), row.data());
          native::from_f32(
              row.data(), HalfRef{operands[5], desc.v_cache.dtype},
              static_cast<size_t>(block * desc.v_cache.strides[0] + slot * desc.v_cache.strides[1] +
                                  h * desc.v_cache.strides[2]),
              static_cast<size_t>(dim_v));
        }
      }
    });
  });
}

// ---- HAL_OP_PAGED_ATTENTION ---------------------------------------------------

struct AttentionShape {
  int64_t batch, s_q, heads, kv_heads, group, dim, dim_v, block_size;
  int64_t rows;  // per item: group * s_q
  float scale;
  bool causal;
};

// One worker's scratch: the item's query rows, accumulators and a tile.
// Kept per thread across executions and grown only (a fresh page costs more
// than a short decode step's reads): the pool's workers and the caller
// persist, so the steady state allocates nothing.
struct Scratch {
  std::vector<float> q, acc, max, sum, keys, keys_t, values, scores;
  // The AVX-512 path's: weights per row and key, corrections, visible keys
  // per row, and the tile's row addresses.
  std::vector<float> weights, correction;
  std::vector<int64_t> visible;
  std::vector<const void*> key_rows, value_rows;

  void fit(const AttentionShape& s) {
    const auto grow = [](auto& v, int64_t n) {
      if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    };
    // Every kv head's rows (the AVX-512 path holds them all).
    const int64_t all_rows = s.kv_heads * s.rows;
    grow(q, all_rows * s.dim);
    grow(acc, std::max(all_rows, int64_t{1}) * s.dim_v);
    grow(max, all_rows);
    grow(sum, all_rows);
    grow(keys, kTileKeys * s.dim);
    grow(keys_t, kTileKeys * s.dim);
    grow(values, kTileKeys * std::max(s.dim, s.dim_v));
    grow(scores, kTileKeys);
    grow(weights, s.rows * native::kDecodeTileKeys);
    grow(correction, s.rows);
    grow(visible, s.rows);
    grow(key_rows, native::kDecodeTileKeys);
    grow(value_rows, native::kDecodeTileKeys);
  }
};

// The calling thread's scratch, fitted to |s|.
Scratch& scratch_for(const AttentionShape& s) {
  thread_local Scratch scratch;
  scratch.fit(s);
  return scratch;
}

// The hot loops, one clone per ISA (AVX-512, AVX2, baseline). Each sum runs
// over its terms in one fixed order, so the result depends neither on the
// thread nor on the clone.

// scores[k] = q . key k for the tile's kTileKeys keys, from the keys
// transposed (keys_t[d * kTileKeys + k]): the sums lie along the keys, in
// vector registers, and each column of keys_t is one load.
HAL_ISA_CLONES void tile_scores(const float* q, const float* keys_t, int64_t dim, float* scores) {
  float sum[kTileKeys] = {};
  for (int64_t d = 0; d < dim; ++d) {
    const float qd = q[d];
    const float* column = keys_t + d * kTileKeys;
    for (int64_t k = 0; k < kTileKeys; ++k) sum[k] += qd * column[k];
  }
  for (int64_t k = 0; k < kTileKeys; ++k) scores[k] = sum[k];
}

// acc = acc * correction + sum over k of p[k] * values[k] (n floats of rows
// |stride| floats apart), 16 columns at a time held in registers across the
// keys.
HAL_ISA_CLONES void rescale_and_add(float* acc, float correction, const float* p,
                                    const float* values, int64_t stride, int64_t count, int64_t n) {
  constexpr int64_t kColumns = 16;
  int64_t d0 = 0;
  for (; d0 + kColumns <= n; d0 += kColumns) {
    float a[kColumns];
    for (int64_t j = 0; j < kColumns; ++j) a[j] = acc[d0 + j] * correction;
    for (int64_t k = 0; k < count; ++k) {
      const float weight = p[k];
      const float* v = values + k * stride + d0;
      for (int64_t j = 0; j < kColumns; ++j) a[j] += weight * v[j];
    }
    for (int64_t j = 0; j < kColumns; ++j) acc[d0 + j] = a[j];
  }
  for (int64_t d = d0; d < n; ++d) {
    float a = acc[d] * correction;
    for (int64_t k = 0; k < count; ++k) a += p[k] * values[k * stride + d];
    acc[d] = a;
  }
}

// Positions [first, second) of sequence b that chunk |chunk| of |splits|
// covers: whole blocks, the last chunk's up to the length.
std::pair<int64_t, int64_t> chunk_positions(const AttentionShape& s, const Table& table, int64_t b,
                                            int64_t chunk, int64_t splits) {
  const int64_t len = table.len(b);
  const int64_t blocks = (len + s.block_size - 1) / s.block_size;
  const int64_t per_chunk = (blocks + splits - 1) / splits;
  return {std::min(len, chunk * per_chunk * s.block_size),
          std::min(len, (chunk + 1) * per_chunk * s.block_size)};
}

// Query row r (of s.rows) of kv head g of sequence b, scaled, into |q|.
void load_query(const AttentionShape& s, const hal_op_paged_attention_desc_t& desc,
                void* const* operands, int64_t b, int64_t g, int64_t r, float* q) {
  const int64_t h = g * s.group + r / s.s_q, t = r % s.s_q;
  native::to_f32(
      ConstHalfRef{operands[0], desc.q.dtype},
      static_cast<size_t>(b * desc.q.strides[0] + t * desc.q.strides[1] + h * desc.q.strides[2]),
      static_cast<size_t>(s.dim), q);
  for (int64_t d = 0; d < s.dim; ++d) q[d] *= s.scale;
}

// Chunk |chunk| of |splits| of sequence b for every kv head at once with
// AVX-512 (native_paged_avx512.hpp): tiles of native::kDecodeTileKeys
// positions, and within a tile each kv head's rows. A block's rows of all
// heads lie together, so the cache is read in whole blocks (a work item per
// kv head read 256 of every 2048 bytes: the prefetchers fetched the lines
// between, and each row cost a TLB miss). Leaves scratch.max/sum/acc, kv
// head g's rows at g * s.rows.
void attend_chunk_avx512(const AttentionShape& s, const hal_op_paged_attention_desc_t& desc,
                         void* const* operands, const Table& table, int64_t b, int64_t chunk,
                         int64_t splits, Scratch& scratch) {
  const int64_t len = table.len(b);
  const auto [begin, stop] = chunk_positions(s, table, b, chunk, splits);
  const bool mla = desc.values_in_keys != 0;
  const hal_tensor_desc_t& v_layout = mla ? desc.k_cache : desc.v_cache;
  const auto* k_base = static_cast<const char*>(operands[1]);
  const auto* v_base = static_cast<const char*>(mla ? operands[1] : operands[2]);
  const int64_t k_bytes = desc.k_cache.dtype == HAL_DTYPE_F32 ? 4 : 2;
  const int64_t v_bytes = v_layout.dtype == HAL_DTYPE_F32 ? 4 : 2;
  const int64_t all_rows = s.kv_heads * s.rows;
  for (int64_t g = 0; g < s.kv_heads; ++g) {
    for (int64_t r = 0; r < s.rows; ++r) {
      load_query(s, desc, operands, b, g, r, scratch.q.data() + (g * s.rows + r) * s.dim);
    }
  }
  std::fill_n(scratch.acc.begin(), all_rows * s.dim_v, 0.0f);
  std::fill_n(scratch.max.begin(), all_rows, -std::numeric_limits<float>::infinity());
  std::fill_n(scratch.sum.begin(), all_rows, 0.0f);
  const auto key_row = [&](int64_t block, int64_t slot, int64_t g) {
    return k_base + (block * desc.k_cache.strides[0] + slot * desc.k_cache.strides[1] +
                     g * desc.k_cache.strides[2]) *
                        k_bytes;
  };
  const auto value_row = [&](int64_t block, int64_t slot, int64_t g) {
    return v_base +
           (block * v_layout.strides[0] + slot * v_layout.strides[1] + g * v_layout.strides[2]) *
               v_bytes;
  };
  // The blocks of a shuffled table are far apart, where the hardware
  // prefetchers do not follow them: before kv head g of a tile is folded,
  // the lines of its rows in the next tile are asked for, a tile's worth of
  // computation ahead (without this, decode waited on memory latency; the
  // requests are spread over the heads, as a whole tile's at once
  // overflowed the outstanding misses the core tracks).
  // |stop| by an init-capture: clang 14 cannot capture a structured binding.
  const auto prefetch = [&, stop = stop](int64_t tile, int64_t g) {
    const int64_t n = std::min(native::kDecodeTileKeys, stop - tile);
    const void* rows[native::kDecodeTileKeys];
    for (int64_t k = 0; k < n; ++k) {
      rows[k] = key_row(table.block(b, tile + k), (tile + k) % s.block_size, g);
    }
    native::paged_decode_prefetch(rows, n, s.dim * k_bytes);
    if (mla) return;
    for (int64_t k = 0; k < n; ++k) {
      rows[k] = value_row(table.block(b, tile + k), (tile + k) % s.block_size, g);
    }
    native::paged_decode_prefetch(rows, n, s.dim_v * v_bytes);
  };
  // (One tile ahead; two or three measured the same.)
  const int64_t ahead = native::kDecodeTileKeys;
  for (int64_t g = 0; g < s.kv_heads && begin < stop; ++g) prefetch(begin, g);
  int64_t blocks[native::kDecodeTileKeys];
  for (int64_t tile = begin; tile < stop; tile += native::kDecodeTileKeys) {
    const int64_t n = std::min(native::kDecodeTileKeys, stop - tile);
    for (int64_t k = 0; k < n; ++k) blocks[k] = table.block(b, tile + k);
    for (int64_t r = 0; r < s.rows; ++r) {
      // Keys [0, row_end) are visible: causal is bottom-right aligned.
      const int64_t row_end = s.causal ? std::min(len, len - s.s_q + r % s.s_q + 1) : len;
      scratch.visible[static_cast<size_t>(r)] = std::clamp<int64_t>(row_end - tile, 0, n);
    }
    for (int64_t g = 0; g < s.kv_heads; ++g) {
      if (tile + ahead < stop) prefetch(tile + ahead, g);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t slot = (tile + k) % s.block_size;
        scratch.key_rows[static_cast<size_t>(k)] = key_row(blocks[k], slot, g);
        scratch.value_rows[static_cast<size_t>(k)] = value_row(blocks[k], slot, g);
      }
      const int64_t first_row = g * s.rows;
      const native::DecodeRows rows{scratch.q.data() + first_row * s.dim,
                                    scratch.acc.data() + first_row * s.dim_v,
                                    scratch.max.data() + first_row,
                                    scratch.sum.data() + first_row,
                                    scratch.weights.data(),
                                    scratch.correction.data(),
                                    s.rows,
                                    s.dim,
                                    s.dim_v,
                                    desc.k_cache.dtype};
      native::paged_decode_tile_avx512(
          rows, native::DecodeTile{scratch.key_rows.data(), scratch.value_rows.data(), n,
                                   scratch.visible.data()});
    }
  }
}

// Chunk |chunk| of |splits| of sequence b, kv head g: the keys of its whole
// blocks through an online softmax for every row (hh, t) of the group
// (row r = hh * s_q + t). Leaves scratch.max/sum/acc.
void attend_chunk(const AttentionShape& s, const hal_op_paged_attention_desc_t& desc,
                  void* const* operands, const Table& table, int64_t b, int64_t g, int64_t chunk,
                  int64_t splits, Scratch& scratch) {
  const int64_t len = table.len(b);
  const auto [begin, stop] = chunk_positions(s, table, b, chunk, splits);
  const void* v_data = desc.values_in_keys != 0 ? operands[1] : operands[2];
  const hal_tensor_desc_t& v_layout = desc.values_in_keys != 0 ? desc.k_cache : desc.v_cache;
  for (int64_t r = 0; r < s.rows; ++r) {
    load_query(s, desc, operands, b, g, r, scratch.q.data() + r * s.dim);
  }
  std::fill_n(scratch.acc.begin(), s.rows * s.dim_v, 0.0f);
  std::fill_n(scratch.max.begin(), s.rows, -std::numeric_limits<float>::infinity());
  std::fill_n(scratch.sum.begin(), s.rows, 0.0f);
  const float* values = desc.values_in_keys != 0 ? scratch.keys.data() : scratch.values.data();
  const int64_t value_stride = desc.values_in_keys != 0 ? s.dim : s.dim_v;
  for (int64_t tile = begin; tile < stop; tile += kTileKeys) {
    const int64_t n = std::min(kTileKeys, stop - tile);
    if (n < kTileKeys) {  // columns past the keys: finite, never used
      for (int64_t d = 0; d < s.dim; ++d) {
        std::fill_n(scratch.keys_t.data() + d * kTileKeys + n, kTileKeys - n, 0.0f);
      }
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t position = tile + k;
      const int64_t block = table.block(b, position);
      const int64_t slot = position % s.block_size;
      native::to_f32(
          ConstHalfRef{operands[1], desc.k_cache.dtype},
          static_cast<size_t>(block * desc.k_cache.strides[0] + slot * desc.k_cache.strides[1] +
                              g * desc.k_cache.strides[2]),
          static_cast<size_t>(s.dim), scratch.keys.data() + k * s.dim);
      for (int64_t d = 0; d < s.dim; ++d) {
        scratch.keys_t[d * kTileKeys + k] = scratch.keys[k * s.dim + d];
      }
      if (desc.values_in_keys != 0) continue;  // MLA: the values are the keys' first dims
      native::to_f32(ConstHalfRef{v_data, v_layout.dtype},
                     static_cast<size_t>(block * v_layout.strides[0] + slot * v_layout.strides[1] +
                                         g * v_layout.strides[2]),
                     static_cast<size_t>(s.dim_v), scratch.values.data() + k * s.dim_v);
    }
    for (int64_t r = 0; r < s.rows; ++r) {
      const int64_t t = r % s.s_q;
      // Keys [0, row_end) are visible: causal is bottom-right aligned.
      const int64_t row_end = s.causal ? std::min(len, len - s.s_q + t + 1) : len;
      const int64_t visible = std::clamp<int64_t>(row_end - tile, 0, n);
      if (visible == 0) continue;
      const float* q = scratch.q.data() + r * s.dim;
      tile_scores(q, scratch.keys_t.data(), s.dim, scratch.scores.data());
      float tile_max = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < visible; ++k) tile_max = std::max(tile_max, scratch.scores[k]);
      float& running_max = scratch.max[r];
      const float new_max = std::max(running_max, tile_max);
      const float correction = std::exp(running_max - new_max);  // exp(-inf) = 0 at first
      float tile_sum = 0.0f;
      for (int64_t k = 0; k < visible; ++k) {
        scratch.scores[k] = std::exp(scratch.scores[k] - new_max);
        tile_sum += scratch.scores[k];
      }
      rescale_and_add(scratch.acc.data() + r * s.dim_v, correction, scratch.scores.data(), values,
                      value_stride, visible, s.dim_v);
      scratch.sum[r] = scratch.sum[r] * correction + tile_sum;
      running_max = new_max;
    }
  }
}

void store_row(const AttentionShape& s, const hal_op_paged_attention_desc_t& desc,
               void* const* operands, int64_t b, int64_t h, int64_t t, const float* acc, float max,
               float sum, float* row) {
  const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t d = 0; d < s.dim_v; ++d) row[d] = acc[d] * inverse;
  native::from_f32(row, HalfRef{operands[5], desc.out.dtype},
                   static_cast<size_t>(b * desc.out.strides[0] + t * desc.out.strides[1] +
                                       h * desc.out.strides[2]),
                   static_cast<size_t>(s.dim_v));
  static_cast<float*>(
      operands[6])[b * desc.lse.strides[0] + h * desc.lse.strides[1] + t * desc.lse.strides[2]] =
      sum > 0.0f ? max + std::log(sum) : -std::numeric_limits<float>::infinity();
}

// The split count of an execution: the descriptor's, or enough chunks that
// every worker has four items, of at least kMinChunkKeys keys of the longest
// sequence, at most |cap|.
int64_t splits_of(const hal_op_paged_attention_desc_t& desc, const AttentionShape& s,
                  const Table& table, uint32_t threads, int64_t cap) {
  if (desc.num_splits > 0) return desc.num_splits;
  int64_t longest = 0;
  for (int64_t b = 0; b < s.batch; ++b) longest = std::max(longest, table.len(b));
  // Items are (sequence, chunk), every kv head in one: four per thread, so
  // a machine shared with other work still balances.
  const int64_t wanted = (4 * static_cast<int64_t>(threads) + s.batch - 1) / s.batch;
  const int64_t blocks = (longest + s.block_size - 1) / s.block_size;
  const int64_t chunk_blocks = std::max<int64_t>(1, kMinChunkKeys / s.block_size);
  return std::clamp<int64_t>(std::min(wanted, blocks / chunk_blocks), 1, cap);
}

std::unique_ptr<OpPlan> plan_attention_paged(const hal_op_paged_attention_desc_t& desc,
                                             Decline& decline) {
  const bool values_in_keys = desc.values_in_keys != 0;
  if (!last_dim_contiguous(desc.q) || !last_dim_contiguous(desc.k_cache) ||
      !last_dim_contiguous(desc.out) || (!values_in_keys && !last_dim_contiguous(desc.v_cache))) {
    decline.reason = "cpu.native's paged attention needs unit-stride head dims";
    return nullptr;
  }
  AttentionShape s{};
  s.batch = desc.q.shape[0];
  s.s_q = desc.q.shape[1];
  s.heads = desc.q.shape[2];
  s.kv_heads = desc.k_cache.shape[2];
  s.group = s.heads / s.kv_heads;
  s.dim = desc.q.shape[3];
  s.dim_v = desc.out.shape[3];
  s.block_size = desc.k_cache.shape[1];
  s.rows = s.group * s.s_q;
  s.scale = desc.scale != 0.0f ? desc.scale
                               : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.dim)));
  s.causal = desc.causal != 0;
  // Partial results per split: (max, sum, dim_v outputs) per query row.
  const double per_split = static_cast<double>(s.batch) * static_cast<double>(s.heads) *
                           static_cast<double>(s.s_q) * static_cast<double>(s.dim_v + 2) * 4.0;
  int64_t cap = desc.num_splits > 0 ? int64_t{desc.num_splits} : kMaxAutoSplits;
  if (desc.num_splits == 0) {
    cap = std::min<int64_t>(cap, std::max<int64_t>(1, desc.block_table.shape[1]));
    while (cap > 1 && per_split * static_cast<double>(cap) > kMaxAutoWorkspace) cap /= 2;
  }
  if (cap > 1 && per_split * static_cast<double>(cap) > static_cast<double>(int64_t{1} << 40)) {
    decline.reason = "the split-KV partial results would need more than 1 TiB of workspace";
    return nullptr;
  }
  const size_t workspace =
      cap > 1 ? static_cast<size_t>(per_split) * static_cast<size_t>(cap) + kWorkspaceAlignment : 0;
  return std::make_unique<NativePlan>(
      8, workspace,
      [desc, s, cap](ThreadPool& pool, void* const* operands, const hal_op_scalar_t*,
                     void* workspace) {
        if (s.batch == 0) return;
        const Table table =
            bind_table(desc.block_table, desc.seq_lens, desc.k_cache, operands[3], operands[4]);
        int32_t status = 0;
        for (int64_t b = 0; b < s.batch; ++b) {
          status = std::max(status, table.check(b, 0, table.len(b)));
        }
        if (status != 0) {
          raise_status(operands[7], status);
          return;
        }
        if (s.rows == 0 || s.dim_v == 0) return;
        const int64_t splits = splits_of(desc, s, table, pool.workers() + 1, cap);
        auto* partial =
            static_cast<float*>(workspace != nullptr ? aligned_workspace(workspace) : nullptr);
        const int64_t slot_floats = s.dim_v + 2;
        // Partial row r of (b, g, chunk): ((b * kv_heads + g) * splits +
        // chunk) * rows + r. One item per (b, chunk), every kv head.
        const bool avx512 = native::paged_decode_avx512_available();
        parallel_items(pool, static_cast<uint64_t>(s.batch * splits), [&](uint64_t item, uint32_t) {
          const auto index = static_cast<int64_t>(item);
          const int64_t chunk = index % splits;
          const int64_t b = index / splits;
          Scratch& mine = scratch_for(s);
          // Kv head g's rows, from the scratch rows at |first_row|.
          const auto finish = [&](int64_t g, int64_t first_row) {
            for (int64_t r = 0; r < s.rows; ++r) {
              const float* acc = mine.acc.data() + (first_row + r) * s.dim_v;
              const float max = mine.max[first_row + r], sum = mine.sum[first_row + r];
              if (splits == 1) {
                store_row(s, desc, operands, b, g * s.group + r / s.s_q, r % s.s_q, acc, max, sum,
                          mine.values.data());
                continue;
              }
              float* slot =
                  partial + (((b * s.kv_heads + g) * splits + chunk) * s.rows + r) * slot_floats;
              slot[0] = max;
              slot[1] = sum;
              std::copy(acc, acc + s.dim_v, slot + 2);
            }
          };
          if (avx512) {
            attend_chunk_avx512(s, desc, operands, table, b, chunk, splits, mine);
            for (int64_t g = 0; g < s.kv_heads; ++g) finish(g, g * s.rows);
            return;
          }
          for (int64_t g = 0; g < s.kv_heads; ++g) {
            attend_chunk(s, desc, operands, table, b, g, chunk, splits, mine);
            finish(g, 0);
          }
        });
        if (splits == 1) return;
        // The merge: one item per (b, h, t), chunks in order.
        parallel_items(
            pool, static_cast<uint64_t>(s.batch * s.heads * s.s_q), [&](uint64_t item, uint32_t) {
              const auto index = static_cast<int64_t>(item);
              const int64_t t = index % s.s_q;
              const int64_t h = (index / s.s_q) % s.heads;
              const int64_t b = index / s.s_q / s.heads;
              const int64_t g = h / s.group;
              const int64_t r = (h % s.group) * s.s_q + t;
              const auto slot = [&](int64_t chunk) {
                return partial +
                       (((b * s.kv_heads + g) * splits + chunk) * s.rows + r) * slot_floats;
              };
              float overall = -std::numeric_limits<float>::infinity();
              for (int64_t c = 0; c < splits; ++c) {
                if (slot(c)[1] > 0.0f) overall = std::max(overall, slot(c)[0]);
              }
              Scratch& mine = scratch_for(s);
              float* acc = mine.acc.data();
              std::fill(acc, acc + s.dim_v, 0.0f);
              float total = 0.0f;
              for (int64_t c = 0; c < splits; ++c) {
                const float* part = slot(c);
                if (part[1] <= 0.0f) continue;
                const float factor = std::exp(part[0] - overall);
                total += part[1] * factor;
                for (int64_t d = 0; d < s.dim_v; ++d) acc[d] += part[2 + d] * factor;
              }
              store_row(s, desc, operands, b, h, t, acc, overall, total, mine.values.data());
            });
      });
}

}  // namespace

std::unique_ptr<OpPlan> plan_paged(const hal_op_header_t& header, Decline& decline) {
  if (header.kind == HAL_OP_PAGED_KV_APPEND) {
    return plan_append(reinterpret_cast<const hal_op_paged_kv_append_desc_t&>(header), decline);
  }
  return plan_attention_paged(reinterpret_cast<const hal_op_paged_attention_desc_t&>(header),
                              decline);
}

}  // namespace hal::cpu::ops
