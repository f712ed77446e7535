// Collectives between ranks of one process: the cpu plugin's own engine and
// the loader's host-staged fallback (the mock test plugin has none), checked
// against the host reference; then bad input, deadlines and abort.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "harness.hpp"
#include "local_ranks.hpp"
#include "matrix_ranks.hpp"

using namespace coll_test;

namespace {

void run_matrix(uint32_t max_ranks) {
  for (uint32_t n = 1; n <= max_ranks; ++n) {
    LocalRanks local(n);
    for (const Case& c : matrix(n, 1000 * n)) {
      INFO(n << " ranks: " << c.label());
      const std::string failure = run_case(c, local.ranks, n);
      REQUIRE(failure == "");
    }
  }
}

hal_result_t async_error(hal_comm_t comm) {
  hal_result_t error = HAL_SUCCESS;
  REQUIRE(hal_comm_get_async_error(comm, &error) == HAL_SUCCESS);
  return error;
}

}  // namespace

TEST_CASE("cpu plugin: every collective, dtype, op and count over 1..4 ranks (3 under TSan)",
          "[in_process]") {
  Session session(HAL_TEST_PLUGIN_DIR, "cpu");
  hal_device_t device = nullptr;
  REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  REQUIRE(hal_device_get_properties(device, &properties) == HAL_SUCCESS);
  CHECK((properties.capabilities & HAL_DEVICE_CAP_COLLECTIVES) != 0);
  run_matrix(kMatrixMaxRanks);
}

TEST_CASE("loader fallback: host-staged collectives for a plugin without any", "[fallback]") {
  Session session(HAL_TEST_LOADER_PLUGIN_DIR, "mock");
  run_matrix(2);
}

TEST_CASE("bad input gives a specific error on every rank involved", "[errors]") {
  Session session(HAL_TEST_PLUGIN_DIR, "cpu");
  LocalRanks local(2, 2000);
  Buffer a0(local.ranks[0].device, 64), a1(local.ranks[1].device, 64);
  hal_comm_t c0 = local.ranks[0].comm, c1 = local.ranks[1].comm;
  hal_stream_t s0 = local.ranks[0].stream, s1 = local.ranks[1].stream;

  SECTION("mismatched counts between ranks") {
    REQUIRE(hal_allreduce(a0.get(), a0.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0) ==
            HAL_SUCCESS);
    REQUIRE(hal_allreduce(a1.get(), a1.get(), 8, HAL_DTYPE_F32, HAL_REDUCE_SUM, c1, s1) ==
            HAL_SUCCESS);
    CHECK(hal_stream_synchronize(s0) == HAL_ERROR_DEVICE_LOST);
    CHECK(hal_stream_synchronize(s1) == HAL_ERROR_DEVICE_LOST);
    CHECK(async_error(c0) == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK(async_error(c1) == HAL_ERROR_ARGUMENT_MISMATCH);
    // A failed communicator refuses further calls.
    CHECK(hal_allreduce(a0.get(), a0.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0) ==
          HAL_ERROR_INVALID_STATE);
  }
  SECTION("mismatched dtypes between ranks") {
    hal_allreduce(a0.get(), a0.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0);
    hal_allreduce(a1.get(), a1.get(), 4, HAL_DTYPE_I32, HAL_REDUCE_SUM, c1, s1);
    CHECK(hal_stream_synchronize(s0) == HAL_ERROR_DEVICE_LOST);
    CHECK(hal_stream_synchronize(s1) == HAL_ERROR_DEVICE_LOST);
    CHECK(async_error(c0) == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK(async_error(c1) == HAL_ERROR_ARGUMENT_MISMATCH);
  }
  SECTION("root and peer out of range, bad dtype and op") {
    CHECK(hal_broadcast(a0.get(), a0.get(), 4, HAL_DTYPE_F32, 2, c0, s0) ==
          HAL_ERROR_INVALID_ARGUMENT);
    CHECK(hal_send(a0.get(), 4, HAL_DTYPE_F32, 7, c0, s0) == HAL_ERROR_INVALID_ARGUMENT);
    // Past the enumerators, and negative (a C caller may pass any 32-bit value).
    for (const int32_t raw : {99, -1, INT32_MIN}) {
      CHECK(hal_allreduce(a0.get(), a0.get(), 4, static_cast<hal_dtype_t>(raw), HAL_REDUCE_SUM, c0,
                          s0) == HAL_ERROR_INVALID_ARGUMENT);
      CHECK(hal_allreduce(a0.get(), a0.get(), 4, HAL_DTYPE_F32, static_cast<hal_reduce_op_t>(raw),
                          c0, s0) == HAL_ERROR_INVALID_ARGUMENT);
    }
    CHECK(hal_allreduce(nullptr, a0.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0) ==
          HAL_ERROR_NULL_POINTER);
    CHECK(hal_allreduce(a0.get(), a0.get(), SIZE_MAX / 2, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0) ==
          HAL_ERROR_INVALID_SIZE);
  }
  SECTION("a buffer beyond its allocation or on another device") {
    CHECK(hal_allreduce(a0.get(), a0.get(), 17, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0) ==
          HAL_ERROR_OUT_OF_BOUNDS);
    CHECK(hal_allreduce(a1.get(), a0.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0) ==
          HAL_ERROR_DEVICE_MISMATCH);
    CHECK(hal_allreduce(a0.get(), a0.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s1) ==
          HAL_ERROR_DEVICE_MISMATCH);
  }
  SECTION("a destroyed communicator") {
    REQUIRE(hal_comm_destroy(c1) == HAL_SUCCESS);
    CHECK(hal_allreduce(a1.get(), a1.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c1, s1) ==
          HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_comm_destroy(c1) == HAL_ERROR_DESTROYED_HANDLE);
    local.ranks[1].comm = nullptr;
    // Its peer, left alone, fails at its deadline instead of hanging.
    hal_allreduce(a0.get(), a0.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0);
    CHECK(hal_stream_synchronize(s0) == HAL_ERROR_DEVICE_LOST);
    CHECK(async_error(c0) == HAL_ERROR_TIMEOUT);
  }
  SECTION("group end without a start") {
    CHECK(hal_group_end() == HAL_ERROR_INVALID_STATE);
  }
}

// Rank |rank|'s alltoallv over |ranks| ranks: |counts[from][to]| elements of
// f32, packed, from and into the buffers' starts.
hal_result_t alltoallv_with(const std::vector<std::vector<size_t>>& counts, uint32_t rank,
                            const Buffer& send, const Buffer& recv, const Rank& self) {
  std::vector<size_t> sends = counts[rank], receives;
  for (const auto& row : counts) receives.push_back(row[rank]);
  return hal_alltoallv(send.get(), sends.data(), nullptr, recv.get(), receives.data(), nullptr,
                       HAL_DTYPE_F32, self.comm, self.stream);
}

TEST_CASE("alltoallv: counts that disagree fail on every rank, bad layouts fail at the call",
          "[alltoallv]") {
  const bool host_staged = GENERATE(false, true);
  Session session(host_staged ? HAL_TEST_LOADER_PLUGIN_DIR : HAL_TEST_PLUGIN_DIR,
                  host_staged ? "mock" : "cpu");
  INFO((host_staged ? "the loader's host-staged path" : "the cpu plugin's engine"));
  const uint32_t n = host_staged ? 2 : 3;  // the mock plugin has two devices
  LocalRanks local(n, 2000);
  std::vector<std::unique_ptr<Buffer>> sends, recvs;
  for (const Rank& rank : local.ranks) {
    sends.push_back(std::make_unique<Buffer>(rank.device, 256));
    recvs.push_back(std::make_unique<Buffer>(rank.device, 256));
  }
  const Rank& r0 = local.ranks[0];

  SECTION("rank 0 expects 2 elements from rank 1, which sends 3: every rank fails") {
    std::vector<std::vector<size_t>> counts = {{1, 2, 0}, {3, 0, 4}, {0, 0, 0}};
    counts.resize(n);
    for (auto& row : counts) row.resize(n);
    std::vector<hal_result_t> issued;
    hal_group_start();
    for (uint32_t r = 0; r < n; ++r) {
      std::vector<std::vector<size_t>> seen = counts;
      if (r == 0) seen[1][0] = 2;  // what rank 0 believes rank 1 sends it
      issued.push_back(alltoallv_with(seen, r, *sends[r], *recvs[r], local.ranks[r]));
    }
    const hal_result_t ended = hal_group_end();
    for (hal_result_t r : issued) CHECK(r == HAL_SUCCESS);
    if (host_staged) {
      CHECK(ended == HAL_ERROR_ARGUMENT_MISMATCH);
      CHECK_THAT(hal_error_last_message(), Catch::Contains("rank 1 sends 3 elements to rank 0"));
    } else {
      CHECK(ended == HAL_SUCCESS);
      for (const Rank& rank : local.ranks) {
        CHECK(hal_stream_synchronize(rank.stream) == HAL_ERROR_DEVICE_LOST);
        CHECK(async_error(rank.comm) == HAL_ERROR_ARGUMENT_MISMATCH);
      }
    }
  }
  SECTION("arguments refused at the call") {
    const size_t two[3] = {2, 2, 2};
    const size_t none[3] = {0, 0, 0};
    const size_t overlapping[3] = {0, 1, 2};
    const size_t huge[3] = {SIZE_MAX / 2, 0, 0};
    const size_t far[3] = {0, SIZE_MAX - 1, 0};
    CHECK(hal_alltoallv(sends[0]->get(), nullptr, nullptr, recvs[0]->get(), two, nullptr,
                        HAL_DTYPE_F32, r0.comm, r0.stream) == HAL_ERROR_NULL_POINTER);
    CHECK(hal_alltoallv(sends[0]->get(), two, nullptr, recvs[0]->get(), nullptr, nullptr,
                        HAL_DTYPE_F32, r0.comm, r0.stream) == HAL_ERROR_NULL_POINTER);
    CHECK(hal_alltoallv(sends[0]->get(), two, nullptr, recvs[0]->get(), two, nullptr,
                        static_cast<hal_dtype_t>(99), r0.comm,
                        r0.stream) == HAL_ERROR_INVALID_ARGUMENT);
    // Receive blocks 1 and 2 overlap (elements 1..2 and 2..3).
    CHECK(hal_alltoallv(sends[0]->get(), two, nullptr, recvs[0]->get(), two, overlapping,
                        HAL_DTYPE_F32, r0.comm, r0.stream) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(hal_error_last_message(), Catch::Contains("overlap"));
    // A receive block inside the send blocks: not in place.
    CHECK(hal_alltoallv(sends[0]->get(), two, nullptr, static_cast<uint8_t*>(sends[0]->get()) + 8,
                        two, nullptr, HAL_DTYPE_F32, r0.comm,
                        r0.stream) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(hal_alltoallv(sends[0]->get(), huge, nullptr, recvs[0]->get(), two, nullptr,
                        HAL_DTYPE_F32, r0.comm, r0.stream) == HAL_ERROR_INVALID_SIZE);
    CHECK(hal_alltoallv(sends[0]->get(), two, far, recvs[0]->get(), two, nullptr, HAL_DTYPE_F32,
                        r0.comm, r0.stream) == HAL_ERROR_INVALID_SIZE);
    // 2 x 40 f32 = 320 bytes past a 256-byte allocation.
    const size_t forty[3] = {40, 40, 40};
    CHECK(hal_alltoallv(sends[0]->get(), forty, nullptr, recvs[0]->get(), two, nullptr,
                        HAL_DTYPE_F32, r0.comm, r0.stream) == HAL_ERROR_OUT_OF_BOUNDS);
    CHECK(hal_alltoallv(sends[0]->get(), two, nullptr, recvs[1]->get(), two, nullptr, HAL_DTYPE_F32,
                        r0.comm, r0.stream) == HAL_ERROR_DEVICE_MISMATCH);
    // Nothing to move: NULL buffers are fine, and a displacement of an empty block is ignored.
    const size_t anywhere[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
    std::vector<hal_result_t> issued;
    hal_group_start();
    for (const Rank& rank : local.ranks) {
      issued.push_back(hal_alltoallv(nullptr, none, anywhere, nullptr, none, nullptr, HAL_DTYPE_F32,
                                     rank.comm, rank.stream));
    }
    CHECK(hal_group_end() == HAL_SUCCESS);
    for (hal_result_t r : issued) CHECK(r == HAL_SUCCESS);
    for (const Rank& rank : local.ranks) CHECK(hal_stream_synchronize(rank.stream) == HAL_SUCCESS);
  }
}

TEST_CASE("abort is local and bounded, and peers see it", "[abort]") {
  Session session(HAL_TEST_PLUGIN_DIR, "cpu");
  // A long deadline: only the abort may end the wait.
  LocalRanks local(2, 60000);
  Buffer a0(local.ranks[0].device, 64);
  hal_comm_t c0 = local.ranks[0].comm;
  hal_stream_t s0 = local.ranks[0].stream;
  SECTION("the waiting rank aborts itself during the call") {
    REQUIRE(hal_allreduce(a0.get(), a0.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0) ==
            HAL_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(hal_comm_abort(c0) == HAL_SUCCESS);
    local.ranks[0].comm = nullptr;
    CHECK(hal_stream_synchronize(s0) == HAL_ERROR_DEVICE_LOST);
    CHECK(async_error(local.ranks[1].comm) == HAL_SUCCESS);
  }
  SECTION("a peer aborts while this rank waits") {
    REQUIRE(hal_allreduce(a0.get(), a0.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0) ==
            HAL_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(hal_comm_abort(local.ranks[1].comm) == HAL_SUCCESS);
    local.ranks[1].comm = nullptr;
    CHECK(hal_stream_synchronize(s0) == HAL_ERROR_DEVICE_LOST);
    CHECK(async_error(c0) == HAL_ERROR_REMOTE);
  }
}
