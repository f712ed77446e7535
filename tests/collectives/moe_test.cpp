// MoE dispatch and combine (hal/moe.h) between ranks of one process:
// against the host reference of conformance/collectives/moe_case.hpp on the
// cpu plugin (1..4 ranks), on the opencl plugin (portable ops, the loader's
// host-staged collectives), and the errors: ranks that disagree, indices out
// of range and too small a capacity fail on every rank; bad arguments at
// the call. Across processes the same cases run in collectives_worker.
#include <catch2/catch.hpp>

#include <thread>

#include "local_ranks.hpp"
#include "matrix_ranks.hpp"
#include "moe_case.hpp"

using namespace coll_test;

namespace {

// Every rank's hal_moe_routing_create at once, a thread each (it blocks).
std::vector<hal_result_t> create_all(const std::vector<Rank>& ranks,
                                     const std::vector<hal_moe_routing_desc_t>& descs,
                                     const std::vector<const int32_t*>& indices,
                                     std::vector<hal_moe_routing_t>& routings,
                                     std::vector<std::string>* messages = nullptr) {
  std::vector<hal_result_t> results(ranks.size());
  routings.assign(ranks.size(), nullptr);
  if (messages != nullptr) messages->assign(ranks.size(), "");
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      results[i] = hal_moe_routing_create(ranks[i].comm, &descs[i], indices[i], ranks[i].stream,
                                          &routings[i]);
      if (results[i] != HAL_SUCCESS && messages != nullptr)
        (*messages)[i] = hal_error_last_message();
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

hal_moe_routing_desc_t routing_desc(uint32_t experts, uint32_t k, size_t tokens, size_t capacity) {
  hal_moe_routing_desc_t desc = HAL_MOE_ROUTING_DESC_INIT;
  desc.num_experts = experts;
  desc.top_k = k;
  desc.num_tokens = tokens;
  desc.recv_capacity = capacity;
  return desc;
}

// |values| (one token's k expert ids each) in a fresh device buffer.
std::unique_ptr<Buffer> device_indices(const Rank& rank, const std::vector<int32_t>& values) {
  auto buffer = std::make_unique<Buffer>(rank.device, std::max<size_t>(values.size(), 1) * 4);
  if (!values.empty()) {
    REQUIRE(hal_memcpy_async(buffer->get(), values.data(), values.size() * 4, rank.stream) ==
            HAL_SUCCESS);
  }
  REQUIRE(hal_stream_synchronize(rank.stream) == HAL_SUCCESS);
  return buffer;
}

}  // namespace

TEST_CASE("moe: dispatch and combine match the reference on 1..4 ranks (3 under TSan)", "[moe]") {
  Session session(HAL_TEST_PLUGIN_DIR, "cpu");
  for (uint32_t n = 1; n <= kMatrixMaxRanks; ++n) {
    LocalRanks local(n);
    for (const MoeCase& c : moe_matrix(n, 500 * n)) {
      INFO(n << " ranks: " << c.label());
      REQUIRE(run_moe_case(c, local.ranks, n) == "");
    }
  }
}

// One thread enqueues both ranks' dispatch and combine, rank 0's before rank
// 1's: rank 0's steps after its all-to-all run only once rank 1 has been
// enqueued, so nothing on the way may wait for rank 0's stream (with
// HAL_OPS_VERBOSE=1 too: collectives.moe_verbose_one_thread runs this case
// with it and checks its lines). The short timeout makes such a wait fail
// in seconds instead of hanging.
TEST_CASE("moe: one thread drives both ranks' dispatch and combine", "[moe][one_thread]") {
  Session session(HAL_TEST_PLUGIN_DIR, "cpu");
  LocalRanks local(2, 3000);
  const std::vector<Rank>& ranks = local.ranks;
  uint64_t seed = 4242;
  for (const hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16, HAL_DTYPE_F16}) {
    const MoeCase c{4, 2, 33, dtype, seed++};
    INFO(c.label());
    const size_t elem = elem_size(dtype);
    const std::vector<MoeInputs> all = {moe_inputs(c, 0, 2), moe_inputs(c, 1, 2)};
    std::vector<std::unique_ptr<Buffer>> ids, tokens, weights, recv, experts, out;
    std::vector<const int32_t*> pointers;
    std::vector<hal_moe_routing_desc_t> descs;
    std::vector<size_t> received;
    for (const Rank& rank : ranks) {
      const MoeInputs& in = all[rank.rank];
      received.push_back(moe_received(c, all, rank.rank).rows.size());
      ids.push_back(device_indices(rank, in.indices));
      pointers.push_back(static_cast<const int32_t*>(ids.back()->get()));
      descs.push_back(routing_desc(c.num_experts, c.top_k, in.tokens, received.back()));
      auto buffer = [&](size_t count) {
        return std::make_unique<Buffer>(rank.device, count * elem);
      };
      tokens.push_back(buffer(in.values.size()));
      weights.push_back(buffer(in.weights.size()));
      recv.push_back(buffer(received.back() * c.hidden));
      experts.push_back(buffer(received.back() * c.hidden));
      out.push_back(buffer(in.values.size()));
      REQUIRE(moe_detail::upload(rank, dtype, in.values, *tokens.back()) == HAL_SUCCESS);
      REQUIRE(moe_detail::upload(rank, dtype, in.weights, *weights.back()) == HAL_SUCCESS);
      REQUIRE(moe_detail::upload(rank, dtype, moe_expert_rows(c, rank.rank, received.back()),
                                 *experts.back()) == HAL_SUCCESS);
    }
    std::vector<hal_moe_routing_t> routings;
    for (hal_result_t r : create_all(ranks, descs, pointers, routings)) REQUIRE(r == HAL_SUCCESS);
    for (const bool weighted : {false, true}) {
      INFO((weighted ? "weighted" : "unweighted"));
      for (const Rank& rank : ranks) {
        const uint32_t r = rank.rank;
        REQUIRE(hal_moe_dispatch(routings[r], tokens[r]->get(),
                                 weighted ? weights[r]->get() : nullptr, c.hidden, dtype,
                                 recv[r]->get(), rank.stream) == HAL_SUCCESS);
      }
      for (const Rank& rank : ranks) {
        const uint32_t r = rank.rank;
        REQUIRE(hal_moe_combine(routings[r], experts[r]->get(),
                                weighted ? weights[r]->get() : nullptr, c.hidden, dtype,
                                out[r]->get(), rank.stream) == HAL_SUCCESS);
      }
      for (const Rank& rank : ranks) {
        const uint32_t r = rank.rank;
        hal_result_t result = HAL_SUCCESS;
        const std::vector<double> dispatched =
            moe_detail::download(rank, dtype, *recv[r], received[r] * c.hidden, result);
        REQUIRE(result == HAL_SUCCESS);
        const std::vector<double> combined =
            moe_detail::download(rank, dtype, *out[r], all[r].values.size(), result);
        REQUIRE(result == HAL_SUCCESS);
        const std::vector<double> want_dispatched = moe_dispatch_expected(c, all, r, weighted);
        const std::vector<double> want_combined = moe_combine_expected(c, all, r, weighted);
        REQUIRE(dispatched.size() == want_dispatched.size());
        for (size_t e = 0; e < dispatched.size(); ++e) {
          INFO("rank " << r << " dispatch element " << e);
          REQUIRE(moe_close(dtype, dispatched[e], want_dispatched[e]));
        }
        for (size_t e = 0; e < combined.size(); ++e) {
          INFO("rank " << r << " combine element " << e);
          REQUIRE(moe_close(dtype, combined[e], want_combined[e]));
        }
      }
    }
    for (hal_moe_routing_t routing : routings)
      CHECK(hal_moe_routing_destroy(routing) == HAL_SUCCESS);
  }
}

#ifdef HAL_TEST_HAS_OPENCL
TEST_CASE("moe: on the opencl plugin (portable ops, host-staged collectives)", "[moe][fallback]") {
  Session session(HAL_TEST_PLUGIN_DIR, "opencl");
  uint32_t devices = 0;
  REQUIRE(hal_device_count(&devices) == HAL_SUCCESS);
  if (devices == 0) {
    WARN("the opencl plugin has no device here");
    return;
  }
  LocalRanks local(1);
  for (const MoeCase& c : moe_matrix(1, 900)) {
    INFO(c.label());
    REQUIRE(run_moe_case(c, local.ranks, 1) == "");
  }
}
#endif

TEST_CASE("moe: a plugin without the ops gets a clear UNSUPPORTED, after a routing",
          "[moe][fallback]") {
  Session session(HAL_TEST_LOADER_PLUGIN_DIR, "mock");
  LocalRanks local(2, 5000);
  std::vector<std::unique_ptr<Buffer>> ids;
  std::vector<const int32_t*> pointers;
  std::vector<hal_moe_routing_desc_t> descs;
  for (const Rank& rank : local.ranks) {
    ids.push_back(device_indices(rank, {0, 1, 1, 0}));
    pointers.push_back(static_cast<const int32_t*>(ids.back()->get()));
    descs.push_back(routing_desc(2, 1, 4, 8));
  }
  std::vector<hal_moe_routing_t> routings;
  // The counts go through the loader's host-staged allgather.
  for (hal_result_t r : create_all(local.ranks, descs, pointers, routings)) {
    CHECK(r == HAL_SUCCESS);
  }
  size_t counts[1] = {};
  REQUIRE(hal_moe_routing_get_expert_counts(routings[0], 1, counts) == HAL_SUCCESS);
  CHECK(counts[0] == 4);  // two tokens of expert 0 from each rank
  Buffer tokens(local.ranks[0].device, 4 * 8 * 4), recv(local.ranks[0].device, 4 * 8 * 4);
  CHECK(hal_moe_dispatch(routings[0], tokens.get(), nullptr, 8, HAL_DTYPE_F32, recv.get(),
                         local.ranks[0].stream) == HAL_ERROR_UNSUPPORTED);
  CHECK_THAT(hal_error_last_message(), Catch::Contains("no implementation of embedding"));
  for (hal_moe_routing_t routing : routings) CHECK(hal_moe_routing_destroy(routing) == HAL_SUCCESS);
}

TEST_CASE("moe: what every rank must agree on fails on every rank", "[moe][errors]") {
  Session session(HAL_TEST_PLUGIN_DIR, "cpu");
  const uint32_t n = 3;
  LocalRanks local(n, 3000);
  std::vector<std::unique_ptr<Buffer>> ids;
  std::vector<const int32_t*> pointers;
  // Rank r's tokens: 4 tokens of k = 2 over 6 experts, rank 2 none.
  const std::vector<std::vector<int32_t>> chosen = {
      {0, 5, 1, 2, 3, 4, 0, 1}, {2, 3, 0, 5, 4, 1, 5, 0}, {}};
  for (uint32_t r = 0; r < n; ++r) {
    ids.push_back(device_indices(local.ranks[r], chosen[r]));
    pointers.push_back(static_cast<const int32_t*>(ids.back()->get()));
  }
  auto descs = [&](uint32_t experts, uint32_t k, size_t capacity) {
    std::vector<hal_moe_routing_desc_t> all;
    for (uint32_t r = 0; r < n; ++r)
      all.push_back(routing_desc(experts, k, r == 2 ? 0 : 4, capacity));
    return all;
  };
  std::vector<hal_moe_routing_t> routings;
  std::vector<std::string> messages;

  SECTION(
      "top_k differs on one rank: ARGUMENT_MISMATCH everywhere, the communicator stays usable") {
    auto d = descs(6, 2, 64);
    d[1].top_k = 1;
    d[1].num_tokens = 8;
    for (hal_result_t r : create_all(local.ranks, d, pointers, routings, &messages))
      CHECK(r == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK_THAT(messages[0], Catch::Contains("disagree"));
    // The same ranks agree now.
    for (hal_result_t r : create_all(local.ranks, descs(6, 2, 64), pointers, routings))
      CHECK(r == HAL_SUCCESS);
    for (hal_moe_routing_t routing : routings) hal_moe_routing_destroy(routing);
  }
  SECTION("num_experts differs on one rank: ARGUMENT_MISMATCH everywhere") {
    auto d = descs(6, 2, 64);
    d[2].num_experts = 9;
    for (hal_result_t r : create_all(local.ranks, d, pointers, routings))
      CHECK(r == HAL_ERROR_ARGUMENT_MISMATCH);
  }
  SECTION("an expert index out of range on rank 1: INVALID_ARGUMENT everywhere, naming it") {
    auto bad = chosen[1];
    bad[5] = 6;
    auto bad_ids = device_indices(local.ranks[1], bad);
    auto p = pointers;
    p[1] = static_cast<const int32_t*>(bad_ids->get());
    for (hal_result_t r : create_all(local.ranks, descs(6, 2, 64), p, routings, &messages))
      CHECK(r == HAL_ERROR_INVALID_ARGUMENT);
    for (const std::string& m : messages) CHECK_THAT(m, Catch::Contains("rank 1: token 2 slot 1"));
    bad[5] = -1;
    auto negative = device_indices(local.ranks[1], bad);
    p[1] = static_cast<const int32_t*>(negative->get());
    for (hal_result_t r : create_all(local.ranks, descs(6, 2, 64), p, routings))
      CHECK(r == HAL_ERROR_INVALID_ARGUMENT);
  }
  SECTION("a receive capacity too small on rank 0: OUT_OF_BOUNDS everywhere") {
    auto d = descs(6, 2, 64);
    d[0].recv_capacity = 1;  // experts 0 and 1 get 7 rows
    for (hal_result_t r : create_all(local.ranks, d, pointers, routings, &messages))
      CHECK(r == HAL_ERROR_OUT_OF_BOUNDS);
    for (const std::string& m : messages)
      CHECK_THAT(m, Catch::Contains("rank 0 would receive 7 rows"));
  }
}

// HAL_CPU_COLLECTIVES_BLOCKING=1 for the communicators made in its scope:
// each collective's enqueue returns once the collective ran, so the caller's
// next call on the stream meets its outcome, as a caller preempted for that
// long would (a loaded host, a sanitizer's slow-down).
struct CollectivesBlocking {
  CollectivesBlocking() { ::setenv("HAL_CPU_COLLECTIVES_BLOCKING", "1", 1); }
  ~CollectivesBlocking() { ::unsetenv("HAL_CPU_COLLECTIVES_BLOCKING"); }
  CollectivesBlocking(const CollectivesBlocking&) = delete;
  CollectivesBlocking& operator=(const CollectivesBlocking&) = delete;
};

// The ordering of the cold CI run that failed "num_experts differs on one
// rank" with one rank's HAL_ERROR_DEVICE_LOST: the gather of the counts
// failed on the stream before that rank enqueued the copy of its result, and
// the copy's refusal (the stream is lost) was reported instead of the
// communicator's verdict. Forced here on every rank.
TEST_CASE("moe: the agreed verdict wins when the gather failed before the next step",
          "[moe][errors]") {
  Session session(HAL_TEST_PLUGIN_DIR, "cpu");
  const uint32_t n = 3;
  const CollectivesBlocking blocking;
  LocalRanks local(n, 3000);
  std::vector<std::unique_ptr<Buffer>> ids;
  std::vector<const int32_t*> pointers;
  const std::vector<std::vector<int32_t>> chosen = {
      {0, 5, 1, 2, 3, 4, 0, 1}, {2, 3, 0, 5, 4, 1, 5, 0}, {}};
  std::vector<hal_moe_routing_desc_t> descs;
  for (uint32_t r = 0; r < n; ++r) {
    ids.push_back(device_indices(local.ranks[r], chosen[r]));
    pointers.push_back(static_cast<const int32_t*>(ids.back()->get()));
    descs.push_back(routing_desc(6, 2, r == 2 ? 0 : 4, 64));
  }
  std::vector<hal_moe_routing_t> routings;
  std::vector<std::string> messages;

  SECTION("num_experts differs on one rank: the gather's mismatch on every rank") {
    descs[1].num_experts = 9;
    for (hal_result_t r : create_all(local.ranks, descs, pointers, routings, &messages))
      CHECK(r == HAL_ERROR_ARGUMENT_MISMATCH);
    for (const std::string& m : messages) CHECK_THAT(m, Catch::Contains("exchanging the counts"));
  }
  SECTION("top_k differs on one rank: the verdict on every rank, the communicator usable") {
    descs[0].top_k = 1;
    descs[0].num_tokens = 8;
    for (hal_result_t r : create_all(local.ranks, descs, pointers, routings))
      CHECK(r == HAL_ERROR_ARGUMENT_MISMATCH);
    descs[0] = routing_desc(6, 2, 4, 64);
    for (hal_result_t r : create_all(local.ranks, descs, pointers, routings))
      CHECK(r == HAL_SUCCESS);
    for (hal_moe_routing_t routing : routings) hal_moe_routing_destroy(routing);
  }
  SECTION("hidden differs on one rank: dispatch returns the all-to-all's mismatch on every rank") {
    for (hal_result_t r : create_all(local.ranks, descs, pointers, routings))
      REQUIRE(r == HAL_SUCCESS);
    std::vector<std::unique_ptr<Buffer>> tokens, received;
    std::vector<hal_result_t> results(n, HAL_SUCCESS);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < n; ++r) {
      const size_t hidden = r == 2 ? 8 : 4;
      hal_moe_routing_info_t info{};
      info.struct_size = sizeof(info);
      REQUIRE(hal_moe_routing_get_info(routings[r], &info) == HAL_SUCCESS);
      REQUIRE(info.num_recv_rows > 0);  // so a step follows the all-to-all on every rank
      tokens.push_back(
          std::make_unique<Buffer>(local.ranks[r].device, descs[r].num_tokens * hidden * 4));
      received.push_back(
          std::make_unique<Buffer>(local.ranks[r].device, info.num_recv_rows * hidden * 4));
    }
    for (uint32_t r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        results[r] = hal_moe_dispatch(routings[r], tokens[r]->get(), nullptr, r == 2 ? 8 : 4,
                                      HAL_DTYPE_F32, received[r]->get(), local.ranks[r].stream);
      });
    }
    for (std::thread& t : threads) t.join();
    for (uint32_t r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(results[r] == HAL_ERROR_ARGUMENT_MISMATCH);
      hal_result_t async = HAL_SUCCESS;
      REQUIRE(hal_comm_get_async_error(local.ranks[r].comm, &async) == HAL_SUCCESS);
      CHECK(async == HAL_ERROR_ARGUMENT_MISMATCH);
      hal_moe_routing_destroy(routings[r]);
    }
  }
}

TEST_CASE("moe: bad arguments fail at the call", "[moe][errors]") {
  Session session(HAL_TEST_PLUGIN_DIR, "cpu");
  LocalRanks local(1, 3000);
  const Rank& rank = local.ranks[0];
  auto ids = device_indices(rank, {0, 1, 1, 1});
  const auto* indices = static_cast<const int32_t*>(ids->get());
  hal_moe_routing_desc_t desc = routing_desc(2, 1, 4, 4);
  hal_moe_routing_t routing = nullptr;

  SECTION("routing_create") {
    CHECK(hal_moe_routing_create(nullptr, &desc, indices, rank.stream, &routing) ==
          HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_moe_routing_create(rank.comm, &desc, indices, nullptr, &routing) ==
          HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_moe_routing_create(rank.comm, nullptr, indices, rank.stream, &routing) ==
          HAL_ERROR_NULL_POINTER);
    CHECK(hal_moe_routing_create(rank.comm, &desc, indices, rank.stream, nullptr) ==
          HAL_ERROR_NULL_POINTER);
    CHECK(hal_moe_routing_create(rank.comm, &desc, nullptr, rank.stream, &routing) ==
          HAL_ERROR_NULL_POINTER);
    hal_moe_routing_desc_t small = desc;
    small.struct_size = 8;
    CHECK(hal_moe_routing_create(rank.comm, &small, indices, rank.stream, &routing) ==
          HAL_ERROR_INVALID_ARGUMENT);
    hal_moe_routing_desc_t no_experts = desc;
    no_experts.num_experts = 0;
    CHECK(hal_moe_routing_create(rank.comm, &no_experts, indices, rank.stream, &routing) ==
          HAL_ERROR_INVALID_ARGUMENT);
    hal_moe_routing_desc_t no_k = desc;
    no_k.top_k = 0;
    CHECK(hal_moe_routing_create(rank.comm, &no_k, indices, rank.stream, &routing) ==
          HAL_ERROR_INVALID_ARGUMENT);
    hal_moe_routing_desc_t too_many = desc;
    too_many.num_tokens = 5;  // 20 bytes of a 16-byte allocation
    CHECK(hal_moe_routing_create(rank.comm, &too_many, indices, rank.stream, &routing) ==
          HAL_ERROR_OUT_OF_BOUNDS);
    too_many.num_tokens = size_t{1} << 40;
    CHECK(hal_moe_routing_create(rank.comm, &too_many, indices, rank.stream, &routing) ==
          HAL_ERROR_INVALID_ARGUMENT);
    // Host indices are read like any copy.
    const int32_t host[4] = {1, 1, 0, 1};
    REQUIRE(hal_moe_routing_create(rank.comm, &desc, host, rank.stream, &routing) == HAL_SUCCESS);
    size_t counts[2] = {};
    CHECK(hal_moe_routing_get_expert_counts(routing, 2, counts) == HAL_SUCCESS);
    CHECK(counts[0] == 1);
    CHECK(counts[1] == 3);
    CHECK(hal_moe_routing_get_expert_counts(routing, 3, counts) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(hal_moe_routing_get_expert_counts(routing, 2, nullptr) == HAL_ERROR_NULL_POINTER);
    hal_moe_routing_info_t info{};
    info.struct_size = 8;
    CHECK(hal_moe_routing_get_info(routing, &info) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(hal_moe_routing_get_info(routing, nullptr) == HAL_ERROR_NULL_POINTER);
    CHECK(hal_moe_routing_destroy(routing) == HAL_SUCCESS);
    CHECK(hal_moe_routing_destroy(routing) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_moe_routing_get_info(routing, &info) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_moe_routing_destroy(nullptr) == HAL_SUCCESS);
    // Another kind of handle.
    CHECK(hal_moe_routing_destroy(reinterpret_cast<hal_moe_routing_t>(rank.comm)) ==
          HAL_ERROR_INVALID_HANDLE);
    // Inside a group: refused (it waits for its own collective).
    REQUIRE(hal_group_start() == HAL_SUCCESS);
    CHECK(hal_moe_routing_create(rank.comm, &desc, indices, rank.stream, &routing) ==
          HAL_ERROR_INVALID_STATE);
    REQUIRE(hal_group_end() == HAL_SUCCESS);
  }
  SECTION("dispatch and combine") {
    REQUIRE(hal_moe_routing_create(rank.comm, &desc, indices, rank.stream, &routing) ==
            HAL_SUCCESS);
    const size_t hidden = 8;
    Buffer tokens(rank.device, 4 * hidden * 4), recv(rank.device, 4 * hidden * 4);
    Buffer weights(rank.device, 4 * 4), small(rank.device, 3 * hidden * 4);
    float host[4 * 8] = {};
    CHECK(hal_moe_dispatch(routing, tokens.get(), nullptr, hidden, HAL_DTYPE_F32, recv.get(),
                           rank.stream) == HAL_SUCCESS);
    CHECK(hal_moe_dispatch(nullptr, tokens.get(), nullptr, hidden, HAL_DTYPE_F32, recv.get(),
                           rank.stream) == HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_moe_dispatch(routing, nullptr, nullptr, hidden, HAL_DTYPE_F32, recv.get(),
                           rank.stream) == HAL_ERROR_NULL_POINTER);
    CHECK(hal_moe_dispatch(routing, tokens.get(), nullptr, 0, HAL_DTYPE_F32, recv.get(),
                           rank.stream) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(hal_moe_dispatch(routing, tokens.get(), nullptr, hidden, HAL_DTYPE_I32, recv.get(),
                           rank.stream) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(hal_moe_dispatch(routing, tokens.get(), nullptr, SIZE_MAX / 2, HAL_DTYPE_F32, recv.get(),
                           rank.stream) == HAL_ERROR_INVALID_SIZE);
    CHECK(hal_moe_dispatch(routing, tokens.get(), nullptr, hidden, HAL_DTYPE_F32, small.get(),
                           rank.stream) == HAL_ERROR_OUT_OF_BOUNDS);
    CHECK(hal_moe_dispatch(routing, host, nullptr, hidden, HAL_DTYPE_F32, recv.get(),
                           rank.stream) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(hal_error_last_message(), Catch::Contains("not in a HAL allocation"));
    CHECK(hal_moe_dispatch(routing, tokens.get(), nullptr, hidden, HAL_DTYPE_F32, tokens.get(),
                           rank.stream) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(hal_error_last_message(), Catch::Contains("overlaps"));
    CHECK(hal_moe_combine(routing, recv.get(), weights.get(), hidden, HAL_DTYPE_F32, tokens.get(),
                          rank.stream) == HAL_SUCCESS);
    CHECK(hal_moe_combine(routing, recv.get(), small.get(), hidden, HAL_DTYPE_F32, tokens.get(),
                          rank.stream) == HAL_SUCCESS);
    CHECK(hal_moe_combine(routing, recv.get(), weights.get(), hidden, HAL_DTYPE_F32, small.get(),
                          rank.stream) == HAL_ERROR_OUT_OF_BOUNDS);
    REQUIRE(hal_group_start() == HAL_SUCCESS);
    CHECK(hal_moe_combine(routing, recv.get(), nullptr, hidden, HAL_DTYPE_F32, tokens.get(),
                          rank.stream) == HAL_ERROR_INVALID_STATE);
    REQUIRE(hal_group_end() == HAL_SUCCESS);
    CHECK(hal_stream_synchronize(rank.stream) == HAL_SUCCESS);
    CHECK(hal_moe_routing_destroy(routing) == HAL_SUCCESS);
    CHECK(hal_moe_combine(routing, recv.get(), nullptr, hidden, HAL_DTYPE_F32, tokens.get(),
                          rank.stream) == HAL_ERROR_DESTROYED_HANDLE);
  }
}
