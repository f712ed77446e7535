// collectives.matrix: each collective over every dtype, reduction and count
// (0, 1, odd, past a chunk), in and out of place, on 1..N ranks of one
// process: the device under test as rank 0 and its sibling devices of the
// same plugin, one hal_comm_init_all communicator per rank count, checked
// against the host reference (reference.hpp, shared with tests/collectives).
#include <algorithm>

#include "check.hpp"
#include "collectives_common.hpp"
#include "context.hpp"
#include "harness.hpp"

namespace halconform {
namespace {

using coll_test::Kind;

// 0, 1, odd, and one past the engines' 16 KiB chunk for a 1-byte dtype, so
// every dtype crosses a chunk boundary (and the small-message threshold)
// while the whole profile stays a few seconds.
const std::vector<size_t> kCounts = {0, 1, 7, 16411};

void run_kind(TestContext& ctx, Kind kind) {
  const std::vector<hal_device_t> devices = rank_devices(ctx);
  const uint32_t max_ranks = static_cast<uint32_t>(devices.size());
  size_t cases = 0;
  for (uint32_t n = 1; n <= max_ranks; ++n) {
    LocalRanks local(devices, n, 20000);
    for (const coll_test::Case& c : coll_test::matrix(n, 1000 * n, kCounts, {kind})) {
      const std::string failure = coll_test::run_case(c, local.ranks, n);
      if (!failure.empty()) {
        fail(strf("through %s, %u ranks, %s: %s", collective_path(ctx), n, c.label().c_str(),
                  failure.c_str()));
      }
      ++cases;
    }
  }
  ctx.note(strf("%zu cases over 1..%u ranks through %s", cases, max_ranks, collective_path(ctx)));
}

}  // namespace

HALCONFORM_TEST("collectives.matrix.allreduce",
                "allreduce: every dtype, reduction and count, in place too, over 1..N ranks", {}) {
  run_kind(ctx, Kind::kAllreduce);
}
HALCONFORM_TEST("collectives.matrix.broadcast",
                "broadcast: every dtype, count and root, in place too, over 1..N ranks", {}) {
  run_kind(ctx, Kind::kBroadcast);
}
HALCONFORM_TEST("collectives.matrix.reduce",
                "reduce: every dtype, reduction, count and root over 1..N ranks", {}) {
  run_kind(ctx, Kind::kReduce);
}
HALCONFORM_TEST("collectives.matrix.allgather",
                "allgather: every dtype and count, in place by offset too, over 1..N ranks", {}) {
  run_kind(ctx, Kind::kAllgather);
}
HALCONFORM_TEST("collectives.matrix.reduce_scatter",
                "reduce_scatter: every dtype, reduction and count over 1..N ranks", {}) {
  run_kind(ctx, Kind::kReduceScatter);
}
HALCONFORM_TEST("collectives.matrix.alltoall", "alltoall: every dtype and count over 1..N ranks",
                {}) {
  run_kind(ctx, Kind::kAlltoall);
}
HALCONFORM_TEST("collectives.matrix.send_recv",
                "send/recv in a group: every dtype and count over 1..N ranks", {}) {
  run_kind(ctx, Kind::kSendRecv);
}

}  // namespace halconform
