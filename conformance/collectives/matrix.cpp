// collectives.matrix: each collective over every dtype, reduction and count
// (0, 1, odd, past a chunk), in and out of place, on 1..N ranks of one
// process: the device under test as rank 0 and its sibling devices of the
// same plugin, one hal_comm_init_all communicator per rank count, checked
// against the host reference (reference.hpp, shared with tests/collectives).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "check.hpp"
#include "collectives_common.hpp"
#include "context.hpp"
#include "hal_objects.hpp"
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

// An independent reference for the 16-bit float dtypes: a format with
// |mantissa| stored bits and |exponent| bits, decoded to and rounded from a
// double (round to nearest, ties to even, through std::nearbyint). The sum of
// two values of either format rounds from a double without a double-rounding
// error (53 >= 2 * 11 + 2), so the expected bits are exact.
struct HalfFormat {
  int mantissa;
  int exponent;
  const char* name;
};
constexpr HalfFormat kF16{10, 5, "f16"};
constexpr HalfFormat kBF16{7, 8, "bf16"};

double half_decode(const HalfFormat& f, uint16_t bits) {
  const int bias = (1 << (f.exponent - 1)) - 1;
  const uint32_t exponent_field = (bits >> f.mantissa) & ((1u << f.exponent) - 1);
  const uint32_t mantissa_field = bits & ((1u << f.mantissa) - 1);
  const double sign = (bits & 0x8000u) != 0 ? -1.0 : 1.0;
  if (exponent_field == (1u << f.exponent) - 1) {
    return mantissa_field != 0 ? std::nan("") : sign * INFINITY;
  }
  if (exponent_field == 0) return sign * std::ldexp(mantissa_field, 1 - bias - f.mantissa);
  return sign * std::ldexp(mantissa_field + (1u << f.mantissa),
                           static_cast<int>(exponent_field) - bias - f.mantissa);
}

bool half_is_nan(const HalfFormat& f, uint16_t bits) {
  const uint32_t all_ones = (1u << f.exponent) - 1;
  return ((bits >> f.mantissa) & all_ones) == all_ones && (bits & ((1u << f.mantissa) - 1)) != 0;
}

uint16_t half_round(const HalfFormat& f, double x) {
  const int bias = (1 << (f.exponent - 1)) - 1;
  const uint16_t infinity = static_cast<uint16_t>(((1u << f.exponent) - 1) << f.mantissa);
  if (std::isnan(x)) return static_cast<uint16_t>(infinity | (1u << (f.mantissa - 1)));
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0;
  const double magnitude = std::fabs(x);
  const int min_exponent = 1 - bias;
  if (magnitude <
      std::ldexp(1.0, min_exponent)) {  // subnormal (may round up to the minimum normal)
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(
                                            std::ldexp(magnitude, f.mantissa - min_exponent))));
  }
  int e = 0;
  std::frexp(magnitude, &e);
  int exponent = e - 1;
  auto q = static_cast<uint32_t>(std::nearbyint(std::ldexp(magnitude, f.mantissa - exponent)));
  if (q == (2u << f.mantissa)) {
    q = 1u << f.mantissa;
    ++exponent;
  }
  if (exponent > bias) return static_cast<uint16_t>(sign | infinity);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exponent + bias) << f.mantissa) |
                               (q - (1u << f.mantissa)));
}

// Operand pairs: the named edge cases first (ties to even, subnormals,
// overflow to infinity, infinities, NaN, signed zeros), then random bit patterns.
std::vector<std::pair<uint16_t, uint16_t>> half_operands(const HalfFormat& f, size_t count,
                                                         std::mt19937_64& random) {
  const uint16_t one = static_cast<uint16_t>(((1u << (f.exponent - 1)) - 1) << f.mantissa);
  const uint16_t half_ulp_of_one = static_cast<uint16_t>(one - ((f.mantissa + 1) << f.mantissa));
  const uint16_t infinity = static_cast<uint16_t>(((1u << f.exponent) - 1) << f.mantissa);
  const uint16_t largest = static_cast<uint16_t>(infinity - 1);
  std::vector<std::pair<uint16_t, uint16_t>> pairs = {
      {one, half_ulp_of_one},                                   // a tie: stays even
      {static_cast<uint16_t>(one + 1), half_ulp_of_one},        // a tie: rounds up to even
      {0x0001, 0x0001},                                         // subnormals
      {static_cast<uint16_t>((1u << f.mantissa) - 1), 0x0001},  // to the minimum normal
      {largest, largest},                                       // overflow to infinity
      {infinity, static_cast<uint16_t>(infinity | 0x8000)},     // inf + -inf: NaN
      {static_cast<uint16_t>(infinity | 1), one},               // NaN
      {0x8000, 0x8000},                                         // -0 + -0
      {0x0000, 0x8000},                                         // +0 + -0
  };
  while (pairs.size() < count) {
    pairs.emplace_back(static_cast<uint16_t>(random()), static_cast<uint16_t>(random()));
  }
  return pairs;
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
HALCONFORM_TEST("collectives.matrix.alltoallv",
                "alltoallv: every dtype, uneven counts with zeros and a rank that sends nothing, "
                "gaps between the received blocks, over 1..N ranks",
                {}) {
  if (!ctx.has(HAL_DEVICE_CAP_ALLTOALLV)) {
    // The promise runs the other way: without the bit the call is refused, never half done.
    LocalRanks local(rank_devices(ctx), 1, 20000);
    const size_t one = 1;
    float send = 1.0f, recv = 0.0f;
    HC_REQUIRE(hal_alltoallv(&send, &one, nullptr, &recv, &one, nullptr, HAL_DTYPE_F32,
                             local.ranks[0].comm, local.ranks[0].stream) == HAL_ERROR_UNSUPPORTED,
               "a device without HAL_DEVICE_CAP_ALLTOALLV must refuse hal_alltoallv with "
               "HAL_ERROR_UNSUPPORTED");
    ctx.note("no HAL_DEVICE_CAP_ALLTOALLV: hal_alltoallv is refused with HAL_ERROR_UNSUPPORTED");
    return;
  }
  run_kind(ctx, Kind::kAlltoallv);
}
HALCONFORM_TEST("collectives.matrix.send_recv",
                "send/recv in a group: every dtype and count over 1..N ranks", {}) {
  run_kind(ctx, Kind::kSendRecv);
}

HALCONFORM_TEST("collectives.matrix.half_exact",
                "f16 and bf16 allreduce (sum, max) of two ranks is bit-exact: round to nearest "
                "even, subnormals, infinities, NaN",
                {.min_devices = 2}) {
  LocalRanks local(rank_devices(ctx), 2, 20000);
  constexpr size_t kCount = 4099;
  for (const HalfFormat& format : {kF16, kBF16}) {
    const hal_dtype_t dtype = format.exponent == 5 ? HAL_DTYPE_F16 : HAL_DTYPE_BF16;
    for (const hal_reduce_op_t op : {HAL_REDUCE_SUM, HAL_REDUCE_MAX}) {
      const auto pairs = half_operands(format, kCount, ctx.random());
      std::vector<uint16_t> inputs[2] = {std::vector<uint16_t>(kCount),
                                         std::vector<uint16_t>(kCount)};
      for (size_t i = 0; i < kCount; ++i)
        inputs[0][i] = pairs[i].first, inputs[1][i] = pairs[i].second;
      std::vector<Buffer> buffers;
      for (int r = 0; r < 2; ++r) {
        buffers.emplace_back(local.ranks[r].device, kCount * 2);
        HC_OK(hal_memcpy_async(buffers[r].get(), inputs[r].data(), kCount * 2,
                               local.ranks[r].stream));
        HC_OK(hal_stream_synchronize(local.ranks[r].stream));
      }
      // One thread drives both ranks: their calls go in one group (SPEC.md
      // §13.2), or the loader's blocking host-staged path waits for a peer
      // that this thread has not issued yet.
      HC_OK(hal_group_start());
      for (int r = 0; r < 2; ++r) {
        const hal_result_t issued = hal_allreduce(buffers[r].get(), buffers[r].get(), kCount, dtype,
                                                  op, local.ranks[r].comm, local.ranks[r].stream);
        if (issued != HAL_SUCCESS) hal_group_end();
        require_result(issued, HAL_SUCCESS, "hal_allreduce");
      }
      HC_OK(hal_group_end());
      for (int r = 0; r < 2; ++r) {
        const std::vector<uint8_t> bytes =
            read_back(local.ranks[r].stream, buffers[r].get(), kCount * 2);
        std::vector<uint16_t> got(kCount);
        std::memcpy(got.data(), bytes.data(), kCount * 2);
        for (size_t i = 0; i < kCount; ++i) {
          const uint16_t a = inputs[0][i], b = inputs[1][i];
          const bool any_nan = half_is_nan(format, a) || half_is_nan(format, b);
          const double da = half_decode(format, a), db = half_decode(format, b);
          bool ok = false;
          uint16_t want = 0;
          if (op == HAL_REDUCE_SUM) {
            want = half_round(format, da + db);  // exact in a double, then one rounding
            ok = half_is_nan(format, want) ? half_is_nan(format, got[i]) : got[i] == want;
          } else {
            if (any_nan) continue;  // max with NaN: SPEC leaves it open
            want = da >= db ? a : b;
            ok = da == db ? half_decode(format, got[i]) == da : got[i] == want;
          }
          HC_REQUIRE(ok, strf("through %s: hal_allreduce %s %s, rank %d, element %zu: 0x%04x "
                              "and 0x%04x gave 0x%04x, expected 0x%04x (round to nearest even)",
                              collective_path(ctx), format.name,
                              op == HAL_REDUCE_SUM ? "sum" : "max", r, i, a, b, got[i], want));
        }
      }
    }
  }
}

}  // namespace halconform
