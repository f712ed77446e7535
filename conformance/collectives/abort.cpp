// collectives.abort: hal_comm_abort during a call is local and bounded, and
// the peers of an aborted rank see it (SPEC.md section 13).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "check.hpp"
#include "collectives_common.hpp"
#include "context.hpp"
#include "in_flight.hpp"

namespace halconform {
namespace {

// Two ranks on the device under test and its sibling, rank 0 waiting in an
// allreduce its peer never joins; |aborted| aborts during the call. A long
// deadline: only the abort may end the wait.
void abort_during_call(TestContext& ctx, uint32_t aborted) {
  LocalRanks local(rank_devices(ctx), 2, 60000);
  coll_test::Buffer buffer(local.ranks[0].device, 64);
  HC_REQUIRE(buffer.get() != nullptr, std::string("a 64-byte allocation failed"));
  hal_comm_t c0 = local.ranks[0].comm;
  hal_stream_t s0 = local.ranks[0].stream;
  // The call runs on its own thread: the loader's fallback waits inside
  // hal_allreduce itself, a plugin's engine inside hal_stream_synchronize.
  hal_result_t issued = HAL_SUCCESS, synced = HAL_SUCCESS;
  std::thread call([&] {
    issued = hal_allreduce(buffer.get(), buffer.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0);
    synced = issued == HAL_SUCCESS ? hal_stream_synchronize(s0) : issued;
  });
  // Abort only once the call is really waiting: its thread has been inside
  // hal_allreduce (the loader's blocking fallback) or hal_stream_synchronize
  // (a plugin's engine) for a while. A fixed sleep raced the call's thread
  // under load and aborted before the call began (a caller error, not the
  // behaviour under test).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::max(seconds_in_call("hal_allreduce"), seconds_in_call("hal_stream_synchronize")) <
             0.05 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto start = std::chrono::steady_clock::now();
  const hal_result_t abort_result = hal_comm_abort(local.ranks[aborted].comm);
  call.join();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  HC_OK(abort_result);
  local.ranks[aborted].comm = nullptr;
  if (ctx.has(HAL_DEVICE_CAP_COLLECTIVES)) {
    HC_REQUIRE(issued == HAL_SUCCESS && synced == HAL_ERROR_DEVICE_LOST,
               strf("through %s: the call returned %s, its stream %s; want HAL_SUCCESS, then "
                    "HAL_ERROR_DEVICE_LOST",
                    collective_path(ctx), hal_result_string(issued), hal_result_string(synced)));
  } else {
    HC_REQUIRE(synced != HAL_SUCCESS,
               strf("through %s: the aborted call succeeded", collective_path(ctx)));
  }
  HC_REQUIRE(waited < 30, strf("the wait ended %.1f s after the abort", waited));
  if (aborted == 0) {
    HC_REQUIRE(async_error(local.ranks[1].comm) == HAL_SUCCESS,
               std::string("the idle peer of an aborted rank reports an error"));
  } else {
    const hal_result_t error = async_error(c0);
    HC_REQUIRE(error == HAL_ERROR_REMOTE,
               strf("the waiting rank's async error is %s, want HAL_ERROR_REMOTE",
                    hal_result_string(error)));
  }
  ctx.note(strf("through %s; the wait ended %.3f s after the abort", collective_path(ctx), waited));
}

}  // namespace

HALCONFORM_TEST("collectives.abort.self_during_call",
                "a rank that aborts itself while waiting in a collective fails its stream "
                "promptly; its idle peer is unaffected",
                {.min_devices = 2}) {
  abort_during_call(ctx, 0);
}

HALCONFORM_TEST("collectives.abort.peer_during_call",
                "a peer aborting while a rank waits fails the waiter's stream with "
                "HAL_ERROR_REMOTE instead of a hang",
                {.min_devices = 2}) {
  abort_during_call(ctx, 1);
}

HALCONFORM_TEST("collectives.abort.deadline",
                "a rank whose peer never calls fails with HAL_ERROR_TIMEOUT at its deadline, "
                "not a hang",
                {.min_devices = 2}) {
  constexpr uint32_t kDeadlineMs = 300;
  LocalRanks local(rank_devices(ctx), 2, kDeadlineMs);
  coll_test::Buffer buffer(local.ranks[0].device, 64);
  HC_REQUIRE(buffer.get() != nullptr, std::string("a 64-byte allocation failed"));
  hal_comm_t c0 = local.ranks[0].comm;
  hal_stream_t s0 = local.ranks[0].stream;
  hal_result_t issued = HAL_SUCCESS, synced = HAL_SUCCESS;
  std::atomic<bool> finished{false};
  const auto start = std::chrono::steady_clock::now();
  std::thread call([&] {
    issued = hal_allreduce(buffer.get(), buffer.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, c0, s0);
    synced = issued == HAL_SUCCESS ? hal_stream_synchronize(s0) : issued;
    finished.store(true);
  });
  // Bounded: 30 deadlines; past that, abort the rank so the test ends either way.
  const auto bound = std::chrono::milliseconds(kDeadlineMs * 30);
  while (!finished.load() && std::chrono::steady_clock::now() - start < bound) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool timed_out_itself = finished.load();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!timed_out_itself) {
    hal_comm_abort(c0);
    local.ranks[0].comm = nullptr;
  }
  call.join();
  HC_REQUIRE(timed_out_itself,
             strf("through %s: hal_allreduce with timeout_ms %u, its peer never calling, was still "
                  "waiting %.1f s later: the collective deadline is ignored",
                  collective_path(ctx), kDeadlineMs, waited));
  // The host-staged path returns the cause from the call; a plugin's engine
  // fails the stream and reports the cause as the rank's async error.
  const hal_result_t cause = issued != HAL_SUCCESS ? issued : async_error(c0);
  HC_REQUIRE(issued != HAL_SUCCESS || synced != HAL_SUCCESS,
             strf("through %s: hal_allreduce whose peer never called succeeded after %.2f s",
                  collective_path(ctx), waited));
  HC_REQUIRE(cause == HAL_ERROR_TIMEOUT,
             strf("through %s: hal_allreduce whose peer never called ended with %s (stream %s) "
                  "after %.2f s, expected HAL_ERROR_TIMEOUT at its %u ms deadline",
                  collective_path(ctx), hal_result_string(cause), hal_result_string(synced), waited,
                  kDeadlineMs));
  ctx.note(strf("through %s; HAL_ERROR_TIMEOUT after %.3f s (deadline %u ms)", collective_path(ctx),
                waited, kDeadlineMs));
}

}  // namespace halconform
