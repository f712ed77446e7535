// MoE dispatch and combine (hal/moe.h) against a host reference that routes
// and sums the tokens directly: seeded top-k indices (uneven, with experts
// that receive nothing and ranks with no tokens), seeded tokens, weights and
// expert rows, and one thread per rank this process drives (a routing is
// made by every rank together and blocks). Shared by the tests, the MPI
// worker and halconform's collectives profile.
#pragma once

#include "harness.hpp"

#include <thread>

namespace coll_test {

struct MoeCase {
  uint32_t num_experts;
  uint32_t top_k;
  size_t hidden;
  hal_dtype_t dtype;
  uint64_t seed;
  std::string label() const {
    std::ostringstream out;
    out << "moe experts=" << num_experts << " top_k=" << top_k << " hidden=" << hidden
        << " dtype=" << dtype << " seed=" << seed;
    return out.str();
  }
};

// One rank's inputs, the same on every process for a seed.
struct MoeInputs {
  size_t tokens;
  std::vector<int32_t> indices;  // [tokens, top_k], distinct per token
  std::vector<double> values;    // [tokens, hidden]
  std::vector<double> weights;   // [tokens, top_k]
};

// Rank |rank|'s inputs: the last rank of 2 or more has no tokens; experts
// 1 (mod 3) are never chosen, so some experts (and with few experts, some
// ranks) receive nothing; the others are drawn with a skew toward low ids.
inline MoeInputs moe_inputs(const MoeCase& c, uint32_t rank, uint32_t ranks) {
  std::mt19937_64 random(c.seed * 7919 + rank);
  MoeInputs in;
  in.tokens = (ranks > 1 && rank == ranks - 1) ? 0 : 3 + (random() % 29);
  std::vector<int32_t> chosen_from;
  for (uint32_t e = 0; e < c.num_experts; ++e)
    if (e % 3 != 1) chosen_from.push_back(static_cast<int32_t>(e));
  for (size_t t = 0; t < in.tokens; ++t) {
    std::vector<int32_t> pool = chosen_from;
    for (uint32_t j = 0; j < c.top_k; ++j) {
      // Skewed: the square of a uniform draw favours the front of the pool.
      const double u = std::uniform_real_distribution<double>(0, 1)(random);
      const size_t at = std::min(pool.size() - 1, static_cast<size_t>(u * u * pool.size()));
      in.indices.push_back(pool[at]);
      pool.erase(pool.begin() + static_cast<ptrdiff_t>(at));
    }
  }
  std::uniform_int_distribution<int> small(-8, 8), quarter(0, 8);
  for (size_t i = 0; i < in.tokens * c.hidden; ++i) in.values.push_back(small(random));
  for (size_t i = 0; i < in.tokens * c.top_k; ++i) in.weights.push_back(quarter(random) / 4.0);
  return in;
}

// The rows the experts return on rank |rank|, as many as it receives.
inline std::vector<double> moe_expert_rows(const MoeCase& c, uint32_t rank, size_t rows) {
  std::mt19937_64 random(c.seed * 104729 + rank);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<double> out(rows * c.hidden);
  for (double& v : out) v = small(random);
  return out;
}

// Rank |rank|'s received rows, by the spec's words: per local expert, per
// source rank, that rank's (token, slot) pairs in order.
struct MoeReceived {
  struct Row {
    uint32_t from;
    size_t pair;  // token * top_k + slot on |from|
  };
  std::vector<Row> rows;
  std::vector<size_t> expert_counts;
};

inline MoeReceived moe_received(const MoeCase& c, const std::vector<MoeInputs>& all,
                                uint32_t rank) {
  const uint32_t ranks = static_cast<uint32_t>(all.size());
  const uint32_t local = c.num_experts / ranks;
  MoeReceived received;
  for (uint32_t l = 0; l < local; ++l) {
    const int32_t expert = static_cast<int32_t>(rank * local + l);
    size_t count = 0;
    for (uint32_t from = 0; from < ranks; ++from) {
      for (size_t p = 0; p < all[from].indices.size(); ++p) {
        if (all[from].indices[p] != expert) continue;
        received.rows.push_back({from, p});
        ++count;
      }
    }
    received.expert_counts.push_back(count);
  }
  return received;
}

// What dispatch leaves on rank |rank|: its received rows, each the source
// token times its pair's weight (1 unweighted).
inline std::vector<double> moe_dispatch_expected(const MoeCase& c,
                                                 const std::vector<MoeInputs>& all, uint32_t rank,
                                                 bool weighted) {
  const MoeReceived received = moe_received(c, all, rank);
  std::vector<double> out;
  for (const MoeReceived::Row& row : received.rows) {
    const MoeInputs& source = all[row.from];
    const double w = weighted ? source.weights[row.pair] : 1.0;
    for (size_t h = 0; h < c.hidden; ++h)
      out.push_back(w * source.values[(row.pair / c.top_k) * c.hidden + h]);
  }
  return out;
}

// What combine leaves on rank |rank| from every rank's expert rows
// (moe_expert_rows): per token, the sum over its pairs of the row its
// expert returned times the pair's weight (1 unweighted).
inline std::vector<double> moe_combine_expected(const MoeCase& c, const std::vector<MoeInputs>& all,
                                                uint32_t rank, bool weighted) {
  const MoeInputs& in = all[rank];
  std::vector<double> expect(in.values.size(), 0.0);
  for (uint32_t owner = 0; owner < all.size(); ++owner) {
    const MoeReceived there = moe_received(c, all, owner);
    const std::vector<double> y = moe_expert_rows(c, owner, there.rows.size());
    for (size_t i = 0; i < there.rows.size(); ++i) {
      if (there.rows[i].from != rank) continue;
      const size_t pair = there.rows[i].pair;
      const double w = weighted ? in.weights[pair] : 1.0;
      for (size_t h = 0; h < c.hidden; ++h)
        expect[(pair / c.top_k) * c.hidden + h] += w * y[i * c.hidden + h];
    }
  }
  return expect;
}

inline bool moe_close(hal_dtype_t dtype, double got, double want) {
  const double tolerance = dtype == HAL_DTYPE_BF16  ? 1.0 / 128
                           : dtype == HAL_DTYPE_F16 ? 1.0 / 1024
                                                    : 1e-6;
  return std::fabs(got - want) <= tolerance * (1 + std::fabs(want));
}

namespace moe_detail {

inline std::string failure(uint32_t rank, const char* step, hal_result_t r) {
  return "rank " + std::to_string(rank) + " " + step + ": " + hal_result_string(r) + " " +
         hal_error_last_message();
}

inline hal_result_t upload(const Rank& rank, hal_dtype_t dtype, const std::vector<double>& values,
                           const Buffer& to) {
  if (values.empty()) return HAL_SUCCESS;
  std::vector<uint8_t> host(values.size() * elem_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) store(dtype, host.data(), i, values[i]);
  if (hal_result_t r = hal_memcpy_async(to.get(), host.data(), host.size(), rank.stream);
      r != HAL_SUCCESS)
    return r;
  return hal_stream_synchronize(rank.stream);
}

inline std::vector<double> download(const Rank& rank, hal_dtype_t dtype, const Buffer& from,
                                    size_t count, hal_result_t& result) {
  std::vector<uint8_t> host(count * elem_size(dtype));
  result = HAL_SUCCESS;
  if (count != 0) {
    result = hal_memcpy_async(host.data(), from.get(), host.size(), rank.stream);
    if (result == HAL_SUCCESS) result = hal_stream_synchronize(rank.stream);
  }
  std::vector<double> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = load(dtype, host.data(), i);
  return out;
}

// One rank of the case; "" or the first difference.
inline std::string run_rank(const MoeCase& c, const Rank& rank, const std::vector<MoeInputs>& all) {
  const MoeInputs& in = all[rank.rank];
  const size_t elem = elem_size(c.dtype);
  const MoeReceived want = moe_received(c, all, rank.rank);
  const size_t received = want.rows.size();
  Buffer indices(rank.device, in.indices.size() * sizeof(int32_t));
  Buffer tokens(rank.device, in.values.size() * elem),
      weights(rank.device, in.weights.size() * elem);
  Buffer recv(rank.device, received * c.hidden * elem),
      experts(rank.device, received * c.hidden * elem);
  Buffer out(rank.device, in.values.size() * elem);
  if (!in.indices.empty()) {
    hal_memcpy_async(indices.get(), in.indices.data(), in.indices.size() * sizeof(int32_t),
                     rank.stream);
  }
  if (hal_result_t r = upload(rank, c.dtype, in.values, tokens); r != HAL_SUCCESS)
    return failure(rank.rank, "staging the tokens", r);
  if (hal_result_t r = upload(rank, c.dtype, in.weights, weights); r != HAL_SUCCESS)
    return failure(rank.rank, "staging the weights", r);
  const std::vector<double> expert_rows = moe_expert_rows(c, rank.rank, received);
  if (hal_result_t r = upload(rank, c.dtype, expert_rows, experts); r != HAL_SUCCESS)
    return failure(rank.rank, "staging the expert rows", r);

  hal_moe_routing_desc_t desc = HAL_MOE_ROUTING_DESC_INIT;
  desc.num_experts = c.num_experts;
  desc.top_k = c.top_k;
  desc.num_tokens = in.tokens;
  desc.recv_capacity = received;  // exactly enough
  hal_moe_routing_t routing = nullptr;
  if (hal_result_t r = hal_moe_routing_create(
          rank.comm, &desc, static_cast<const int32_t*>(indices.get()), rank.stream, &routing);
      r != HAL_SUCCESS)
    return failure(rank.rank, "hal_moe_routing_create", r);
  struct Destroy {
    hal_moe_routing_t routing;
    ~Destroy() { hal_moe_routing_destroy(routing); }
  } destroy{routing};
  const std::string where = "rank " + std::to_string(rank.rank) + " ";

  hal_moe_routing_info_t info{};
  info.struct_size = sizeof(info);
  if (hal_result_t r = hal_moe_routing_get_info(routing, &info); r != HAL_SUCCESS)
    return failure(rank.rank, "get_info", r);
  const uint32_t local = c.num_experts / static_cast<uint32_t>(all.size());
  if (info.num_local_experts != local || info.first_local_expert != rank.rank * local ||
      info.num_send_rows != in.indices.size() || info.num_recv_rows != received) {
    return where + "routing info: " + std::to_string(info.num_recv_rows) + " rows received, want " +
           std::to_string(received);
  }
  std::vector<size_t> counts(local);
  if (hal_result_t r = hal_moe_routing_get_expert_counts(routing, local, counts.data());
      r != HAL_SUCCESS)
    return failure(rank.rank, "get_expert_counts", r);
  if (counts != want.expert_counts) return where + "expert counts differ from the reference";
  std::vector<int32_t> offsets(local + 1);
  hal_memcpy_async(offsets.data(), info.expert_offsets, offsets.size() * sizeof(int32_t),
                   rank.stream);
  hal_stream_synchronize(rank.stream);
  size_t at = 0;
  for (uint32_t l = 0; l <= local; ++l) {
    if (offsets[l] != static_cast<int32_t>(at)) return where + "expert offsets differ";
    if (l < local) at += counts[l];
  }

  // Dispatch, unweighted then weighted; the expert's view of each row.
  for (const bool weighted : {false, true}) {
    if (hal_result_t r = hal_moe_dispatch(routing, tokens.get(), weighted ? weights.get() : nullptr,
                                          c.hidden, c.dtype, recv.get(), rank.stream);
        r != HAL_SUCCESS)
      return failure(rank.rank, "hal_moe_dispatch", r);
    hal_result_t r = HAL_SUCCESS;
    const std::vector<double> got = download(rank, c.dtype, recv, received * c.hidden, r);
    if (r != HAL_SUCCESS) return failure(rank.rank, "dispatch", r);
    const std::vector<double> expect = moe_dispatch_expected(c, all, rank.rank, weighted);
    for (size_t e = 0; e < expect.size(); ++e) {
      if (!moe_close(c.dtype, got[e], expect[e])) {
        return where + (weighted ? "weighted " : "") + "dispatch row " +
               std::to_string(e / c.hidden) + " element " + std::to_string(e % c.hidden) +
               ": got " + std::to_string(got[e]) + ", want " + std::to_string(expect[e]);
      }
    }
  }
  // Combine of the experts' rows, weighted and not, back to the home rank.
  for (const bool weighted : {true, false}) {
    if (hal_result_t r = hal_moe_combine(routing, experts.get(), weighted ? weights.get() : nullptr,
                                         c.hidden, c.dtype, out.get(), rank.stream);
        r != HAL_SUCCESS)
      return failure(rank.rank, "hal_moe_combine", r);
    hal_result_t r = HAL_SUCCESS;
    const std::vector<double> got = download(rank, c.dtype, out, in.values.size(), r);
    if (r != HAL_SUCCESS) return failure(rank.rank, "combine", r);
    const std::vector<double> expect = moe_combine_expected(c, all, rank.rank, weighted);
    for (size_t e = 0; e < expect.size(); ++e) {
      if (!moe_close(c.dtype, got[e], expect[e])) {
        return where + (weighted ? "weighted " : "") + "combine element " + std::to_string(e) +
               ": got " + std::to_string(got[e]) + ", want " + std::to_string(expect[e]);
      }
    }
  }
  return {};
}

}  // namespace moe_detail

// Runs |c| on the ranks this process drives (all |n| ranks of an
// hal_comm_init_all communicator, or this process's one), a thread each.
inline std::string run_moe_case(const MoeCase& c, const std::vector<Rank>& ranks, uint32_t n) {
  std::vector<MoeInputs> all;
  for (uint32_t r = 0; r < n; ++r) all.push_back(moe_inputs(c, r, n));
  std::vector<std::string> failures(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] { failures[i] = moe_detail::run_rank(c, ranks[i], all); });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failures)
    if (!f.empty()) return f;
  return {};
}

// The cases for |n| ranks: k = 1 and k > 1, every float dtype, experts
// 1 and 3 per rank (with 1 per rank and 2+ ranks, whole ranks receive nothing).
inline std::vector<MoeCase> moe_matrix(uint32_t n, uint64_t seed) {
  std::vector<MoeCase> cases;
  for (const hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    for (const uint32_t per_rank : {1u, 3u}) {
      const uint32_t experts = per_rank * n;
      const uint32_t usable = experts - (experts + 1) / 3;  // 1 (mod 3) is never chosen
      for (const uint32_t k : {1u, 2u}) {
        if (k > usable) continue;
        cases.push_back({experts, k, k == 1 ? 16u : 33u, dtype, seed++});
      }
    }
  }
  return cases;
}

}  // namespace coll_test
