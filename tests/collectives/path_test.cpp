// The path chooser (collective/path.hpp): its decisions at the limits of
// limits.hpp, its refusals of a forced path that cannot serve, its verbose
// lines, and every path forced on the same inputs giving what an
// independent reference gives. Ranks are threads with a shared-memory
// transport and a shared segment each, run through run_batch as the cpu
// plugin runs its ranks in processes.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "hal_collective/limits.hpp"
#include "hal_collective/path.hpp"
#include "hal_collective/reduce.hpp"
#include "hal_collective/shm.hpp"
#include "hal_collective/shm_transport.hpp"
#include "setup_channels.hpp"

using coll_test::Meeting;
using coll_test::ThreadSetup;
using hal::collective::CallFacts;
using hal::collective::Chooser;
using hal::collective::Clock;
using hal::collective::Deadline;
using hal::collective::Means;
using hal::collective::Path;
using hal::collective::PathChoice;
using hal::collective::PathLog;
using hal::collective::PathPolicy;
using hal::collective::ShmGroup;
using hal::collective::ShmTransport;
using hal::collective::Status;
namespace limits = hal::collective::limits;

namespace {

CallFacts facts(hal_collective_kind_t kind, size_t bytes, uint64_t count,
                hal_dtype_t dtype = HAL_DTYPE_F32) {
  return {kind, dtype, HAL_REDUCE_SUM, count, bytes};
}

Means processes(uint32_t ranks, bool segment) {
  return {ranks, false, segment, true, false};
}

Path chosen(const CallFacts& call, const Means& means) {
  const PathChoice choice = hal::collective::choose_path(call, means, PathPolicy::automatic());
  REQUIRE(choice.ok());
  return choice.path;
}

}  // namespace

TEST_CASE("path chooser: the decisions at the limits", "[collectives][path]") {
  const Means shm = processes(2, true);
  const Means messages = processes(2, false);
  const size_t segment = limits::kSegmentAllreduceBytes;
  const size_t direct = limits::kDirectAllreduceBytes;
  // allreduce: segment up to its crossover, then the transport's own choice.
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLREDUCE, segment, segment / 4), shm) == Path::kSegment);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLREDUCE, segment + 4, segment / 4 + 1), shm) ==
        (segment + 4 <= direct ? Path::kDirect : Path::kRing));
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLREDUCE, direct, direct / 4), messages) == Path::kDirect);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLREDUCE, direct + 4, direct / 4 + 1), messages) ==
        Path::kRing);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLREDUCE, 0, 0), shm) == Path::kSegment);
  // Fewer elements than ranks: never the ring, whatever the size.
  const Means many = processes(64, false);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLREDUCE, direct + 8, 63, HAL_DTYPE_F64), many) ==
        Path::kDirect);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLREDUCE, direct + 8, 64, HAL_DTYPE_F64), many) ==
        Path::kRing);
  // alltoallv: the largest send total against its crossover.
  const size_t a2a = limits::kSegmentAlltoallvBytes;
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLTOALLV, a2a, 2), shm) == Path::kSegment);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLTOALLV, a2a + 1, 2), shm) == Path::kDirect);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLTOALLV, 4, 2), messages) == Path::kDirect);
  // Where the ranks may read each other's memory, the segment serves an
  // alltoallv of any size (and nothing else beyond its limits).
  Means cross = shm;
  cross.cross_memory = true;
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLTOALLV, a2a + 1, 2), cross) == Path::kSegment);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLTOALLV, size_t{1} << 40, 2), cross) == Path::kSegment);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLREDUCE, segment + 4, segment / 4 + 1), cross) ==
        chosen(facts(HAL_COLLECTIVE_ALLREDUCE, segment + 4, segment / 4 + 1), shm));
  std::string why_not;
  CHECK(hal::collective::path_serves(Path::kSegment, facts(HAL_COLLECTIVE_ALLTOALLV, a2a + 1, 2),
                                     cross, why_not));
  CHECK_FALSE(hal::collective::path_serves(
      Path::kSegment, facts(HAL_COLLECTIVE_ALLTOALLV, a2a + 1, 2), shm, why_not));
  CHECK_THAT(why_not, Catch::Contains("cannot read each other's memory"));
  // One algorithm per kind elsewhere; threads of one process meet in memory.
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLGATHER, 4, 1), shm) == Path::kRing);
  CHECK(chosen(facts(HAL_COLLECTIVE_REDUCE_SCATTER, 4, 1), shm) == Path::kRing);
  CHECK(chosen(facts(HAL_COLLECTIVE_BROADCAST, 4, 1), shm) == Path::kDirect);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLTOALL, 4, 1), shm) == Path::kDirect);
  CHECK(chosen(facts(HAL_COLLECTIVE_ALLREDUCE, 4, 1), {2, true, false, false, false}) ==
        Path::kLocal);
  // The limits are what the header says they are (a change must be measured).
  STATIC_REQUIRE(limits::kSegmentAllreduceBytes <= limits::kSegmentSlotBytes);
  STATIC_REQUIRE(limits::kSegmentAlltoallvBytes <= limits::kSegmentSlotBytes);
}

TEST_CASE("path chooser: a forced path that cannot serve is refused, naming why",
          "[collectives][path]") {
  const Means shm = processes(2, true);
  auto refusal = [](const CallFacts& call, const Means& means, Path path) {
    return hal::collective::choose_path(call, means, PathPolicy::force(path)).refusal;
  };
  const Status too_big = refusal(facts(HAL_COLLECTIVE_ALLREDUCE, limits::kSegmentSlotBytes + 4,
                                       limits::kSegmentSlotBytes / 4 + 1),
                                 shm, Path::kSegment);
  CHECK(too_big.result == HAL_ERROR_UNSUPPORTED);
  CHECK_THAT(too_big.message, Catch::Contains("HAL_COLL_PATH=segment cannot serve") &&
                                  Catch::Contains("kSegmentSlotBytes"));
  CHECK(refusal(facts(HAL_COLLECTIVE_ALLREDUCE, 4, 1), shm, Path::kRing)
            .message.find("fewer than the 2 ranks") != std::string::npos);
  CHECK_THAT(refusal(facts(HAL_COLLECTIVE_BROADCAST, 64, 16), shm, Path::kRing).message,
             Catch::Contains("no ring algorithm for broadcast"));
  CHECK_THAT(refusal(facts(HAL_COLLECTIVE_ALLGATHER, 64, 16), shm, Path::kDirect).message,
             Catch::Contains("no direct algorithm for allgather"));
  CHECK_THAT(refusal(facts(HAL_COLLECTIVE_BROADCAST, 64, 16), shm, Path::kSegment).message,
             Catch::Contains("allreduce and alltoallv only"));
  CHECK_THAT(
      refusal(facts(HAL_COLLECTIVE_ALLREDUCE, 64, 16), processes(2, false), Path::kSegment).message,
      Catch::Contains("no shared segment serves it"));
  CHECK_THAT(refusal(facts(HAL_COLLECTIVE_ALLREDUCE, 64, 16), shm, Path::kHostStaged).message,
             Catch::Contains("must be set when the communicator is made"));
  CHECK_THAT(refusal(facts(HAL_COLLECTIVE_ALLREDUCE, 64, 16), shm, Path::kLocal).message,
             Catch::Contains("not threads of one process"));
  // What the forced path can serve it serves, also against the preference.
  const PathChoice ring = hal::collective::choose_path(facts(HAL_COLLECTIVE_ALLREDUCE, 64, 16), shm,
                                                       PathPolicy::force(Path::kRing), true);
  CHECK(ring.ok());
  CHECK(ring.path == Path::kRing);
  CHECK(ring.reason == "forced by HAL_COLL_PATH");
  // The variable's values.
  CHECK_FALSE(PathPolicy::parse(nullptr).forced);
  CHECK_FALSE(PathPolicy::parse("").forced);
  CHECK_FALSE(PathPolicy::parse("auto").forced);
  CHECK(PathPolicy::parse("host-staged").path == Path::kHostStaged);
  CHECK(PathPolicy::parse("ring").forced);
  const PathPolicy typo = PathPolicy::parse("rnig");
  CHECK(typo.invalid.result == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(typo.invalid.message, Catch::Contains("'rnig' names no collective path"));
  CHECK(hal::collective::choose_path(facts(HAL_COLLECTIVE_ALLREDUCE, 4, 1), shm, typo)
            .refusal.result == HAL_ERROR_INVALID_ARGUMENT);
}

namespace {

// What |body| writes on stderr.
template <class Body>
std::string stderr_of(Body body) {
  std::fflush(stderr);
  char name[] = "/tmp/hal_path_test_XXXXXX";
  const int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  body();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  std::ifstream in(name);
  std::stringstream text;
  text << in.rdbuf();
  unlink(name);
  return text.str();
}

size_t lines_in(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("path chooser: HAL_COLL_VERBOSE prints each decision once per signature, with why",
          "[collectives][path]") {
  PathLog log(true);
  Chooser chooser;
  chooser.means = processes(2, true);
  chooser.policy = PathPolicy::automatic();
  chooser.log = &log;
  chooser.rank = 1;
  const std::string small = stderr_of([&] {
    chooser.choose(facts(HAL_COLLECTIVE_ALLREDUCE, 4096, 1024));
    chooser.choose(facts(HAL_COLLECTIVE_ALLREDUCE, 4096, 1024));  // the same signature
    chooser.choose(facts(HAL_COLLECTIVE_ALLREDUCE, 5000, 1250));  // the same size class
  });
  CHECK(lines_in(small) == 1);
  CHECK_THAT(small, Catch::StartsWith("hal_coll: rank 1/2 allreduce f32 sum 4096 B -> segment (") &&
                        Catch::Contains("kSegmentAllreduceBytes") &&
                        Catch::Contains("direct: serves, but not preferred at this size") &&
                        Catch::Contains("ring: serves, but not preferred at this size") &&
                        Catch::Contains("local: the ranks are not threads of one process"));
  const std::string large = stderr_of([&] {
    chooser.choose(facts(HAL_COLLECTIVE_ALLREDUCE, 1 << 20, 1 << 18));
    chooser.choose(facts(HAL_COLLECTIVE_ALLTOALLV, 1 << 20, 2, HAL_DTYPE_BF16));
    chooser.choose(facts(HAL_COLLECTIVE_ALLREDUCE, 8, 2, HAL_DTYPE_I32));  // another dtype
  });
  CHECK(lines_in(large) == 3);
  CHECK_THAT(large, Catch::Contains("allreduce f32 sum 1048576 B -> ring (over ") &&
                        Catch::Contains("segment: 1048576 B exceed a rank's slot") &&
                        Catch::Contains("alltoallv bf16 1048576 B -> direct (the largest send "
                                        "total is over") &&
                        Catch::Contains("allreduce i32 sum 8 B -> segment"));
  // A refusal is printed too; a log that is off prints nothing.
  chooser.policy = PathPolicy::force(Path::kRing);
  const std::string refused =
      stderr_of([&] { chooser.choose(facts(HAL_COLLECTIVE_BROADCAST, 8, 2)); });
  CHECK_THAT(refused, Catch::Contains("broadcast f32 8 B -> refused: HAL_COLL_PATH=ring cannot "
                                      "serve this broadcast"));
  PathLog quiet(false);
  chooser.log = &quiet;
  CHECK(stderr_of([&] { chooser.choose(facts(HAL_COLLECTIVE_ALLREDUCE, 8, 2)); }).empty());
}

namespace {

// One rank: its transport, its segment (or none), its scratch.
struct Rank {
  std::unique_ptr<ShmTransport> transport;
  std::unique_ptr<ShmGroup> shm;
  std::vector<uint8_t> scratch;
};

std::vector<Rank> make_ranks(uint32_t ranks, bool segment) {
  Meeting meeting(ranks);
  std::vector<Rank> made(ranks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ThreadSetup setup(meeting, r);
      Status status;
      std::string reason;
      made[r].transport = ShmTransport::create(setup, true, status, reason);
      if (made[r].transport && segment) {
        made[r].shm = ShmGroup::create(*made[r].transport, true, Deadline::after_ms(20000, nullptr),
                                       status, reason);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Rank& rank : made) {
    REQUIRE(rank.transport != nullptr);
    REQUIRE((rank.shm != nullptr) == segment);
  }
  return made;
}

// Runs |call_of(r)| on every rank through run_batch under |policy|.
std::vector<Status> run_all(std::vector<Rank>& ranks, const PathPolicy& policy,
                            const std::function<hal_collective_call_t(uint32_t)>& call_of) {
  const auto n = static_cast<uint32_t>(ranks.size());
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Chooser chooser;
      chooser.means = processes(n, ranks[r].shm != nullptr);
      chooser.policy = policy;
      chooser.rank = r;
      const hal_collective_call_t call = call_of(r);
      statuses[r] =
          hal::collective::run_batch(*ranks[r].transport, ranks[r].shm.get(), std::span(&call, 1),
                                     Deadline::after_ms(20000, nullptr), ranks[r].scratch, chooser);
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

// Values as doubles in and out of every collective dtype. Inputs are small
// integers, so every dtype holds them and their sums and products exactly.
double load(const void* base, size_t i, hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      return static_cast<const float*>(base)[i];
    case HAL_DTYPE_F16:
      return hal::collective::half_to_float(static_cast<const uint16_t*>(base)[i]);
    case HAL_DTYPE_BF16:
      return hal::collective::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case HAL_DTYPE_F64:
      return static_cast<const double*>(base)[i];
    case HAL_DTYPE_I32:
      return static_cast<const int32_t*>(base)[i];
    case HAL_DTYPE_I64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case HAL_DTYPE_I8:
      return static_cast<const int8_t*>(base)[i];
    default:
      return static_cast<const uint8_t*>(base)[i];
  }
}
void store(void* base, size_t i, hal_dtype_t dtype, double value) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      static_cast<float*>(base)[i] = static_cast<float>(value);
      break;
    case HAL_DTYPE_F16:
      static_cast<uint16_t*>(base)[i] = hal::collective::float_to_half(static_cast<float>(value));
      break;
    case HAL_DTYPE_BF16:
      static_cast<uint16_t*>(base)[i] = hal::collective::float_to_bf16(static_cast<float>(value));
      break;
    case HAL_DTYPE_F64:
      static_cast<double*>(base)[i] = value;
      break;
    case HAL_DTYPE_I32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(value);
      break;
    case HAL_DTYPE_I64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(value);
      break;
    case HAL_DTYPE_I8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(value);
      break;
    default:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(value);
      break;
  }
}

// |value| rounded to |dtype|, as a result of that dtype holds it.
double in_dtype(double value, hal_dtype_t dtype) {
  uint64_t slot = 0;
  store(&slot, 0, dtype, value);
  return load(&slot, 0, dtype);
}

bool is_integer(hal_dtype_t dtype) {
  return dtype >= HAL_DTYPE_I32;
}

// The reference of an allreduce, in float64, element by element.
double reference(const std::vector<double>& values, hal_reduce_op_t op, hal_dtype_t dtype) {
  double out = values[0];
  for (size_t r = 1; r < values.size(); ++r) {
    const double v = values[r];
    if (op == HAL_REDUCE_SUM || op == HAL_REDUCE_AVG) out += v;
    if (op == HAL_REDUCE_PROD) out *= v;
    if (op == HAL_REDUCE_MIN) out = std::min(out, v);
    if (op == HAL_REDUCE_MAX) out = std::max(out, v);
  }
  if (op == HAL_REDUCE_AVG) {
    out /= static_cast<double>(values.size());
    if (is_integer(dtype)) out = std::trunc(out);
  }
  return out;
}

// Whether |path| serves the call, as SPEC §13.8 states it (written here
// apart from the chooser, which this checks).
bool spec_serves(Path path, hal_collective_kind_t kind, size_t largest_bytes, uint64_t count,
                 uint32_t ranks, bool segment) {
  switch (path) {
    case Path::kSegment:
      return segment && (kind == HAL_COLLECTIVE_ALLREDUCE || kind == HAL_COLLECTIVE_ALLTOALLV) &&
             largest_bytes <= 64 * 1024;
    case Path::kDirect:
      return kind != HAL_COLLECTIVE_REDUCE_SCATTER && kind != HAL_COLLECTIVE_ALLGATHER;
    case Path::kRing:
      return (kind == HAL_COLLECTIVE_ALLREDUCE && count >= ranks) ||
             kind == HAL_COLLECTIVE_REDUCE_SCATTER || kind == HAL_COLLECTIVE_ALLGATHER;
    default:
      return false;
  }
}

struct Forced {
  const char* name;
  PathPolicy policy;
  Path path;
};

std::vector<Forced> policies() {
  return {{"auto", PathPolicy::automatic(), Path::kDirect},
          {"segment", PathPolicy::force(Path::kSegment), Path::kSegment},
          {"direct", PathPolicy::force(Path::kDirect), Path::kDirect},
          {"ring", PathPolicy::force(Path::kRing), Path::kRing}};
}

void check_refused(const std::vector<Status>& statuses, const char* name) {
  for (const Status& s : statuses) {
    CHECK(s.result == HAL_ERROR_UNSUPPORTED);
    CHECK_THAT(s.message, Catch::Contains(std::string("HAL_COLL_PATH=") + name));
  }
}

// Every forced path on the same allreduces: the reference, or a refusal on
// every rank with nothing written; then the ranks go on in step.
void allreduce_matrix(uint32_t n, bool segment, const std::vector<hal_dtype_t>& dtypes,
                      const std::vector<hal_reduce_op_t>& ops, const std::vector<size_t>& counts) {
  std::vector<Rank> ranks = make_ranks(n, segment);
  std::mt19937 random(n * 31 + segment);
  for (const hal_dtype_t dtype : dtypes) {
    const size_t elem = HAL_DTYPE_SIZE(dtype);
    for (const hal_reduce_op_t op : ops) {
      for (const size_t count : counts) {
        std::vector<std::vector<uint8_t>> send(n, std::vector<uint8_t>(count * elem));
        std::vector<std::vector<double>> values(count, std::vector<double>(n));
        for (uint32_t r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) {
            // Small integers: sums stay within i8; products of 4 of -2..2
            // too; u8 takes 0..4 (0..2 for products).
            const int half = op == HAL_REDUCE_PROD ? 2 : 4;
            const int v = dtype == HAL_DTYPE_U8
                              ? static_cast<int>(random() % (half + 1))
                              : static_cast<int>(random() % (2 * half + 1)) - half;
            store(send[r].data(), i, dtype, v);
            values[i][r] = v;
          }
        }
        for (const Forced& forced : policies()) {
          INFO(n << " ranks" << (segment ? " with" : " without") << " a segment, "
                 << hal::collective::kind_name(HAL_COLLECTIVE_ALLREDUCE) << " dtype " << dtype
                 << " op " << op << " count " << count << ", HAL_COLL_PATH=" << forced.name);
          std::vector<std::vector<uint8_t>> recv(n, std::vector<uint8_t>(count * elem, 0xa5));
          const auto statuses = run_all(ranks, forced.policy, [&](uint32_t r) {
            return hal_collective_call_t{HAL_COLLECTIVE_ALLREDUCE, dtype,          op,   0,
                                         send[r].data(),           recv[r].data(), count};
          });
          if (forced.policy.forced && !spec_serves(forced.path, HAL_COLLECTIVE_ALLREDUCE,
                                                   count * elem, count, n, segment)) {
            check_refused(statuses, forced.name);
            for (uint32_t r = 0; r < n; ++r) {
              CHECK(recv[r] == std::vector<uint8_t>(count * elem, 0xa5));
            }
            continue;
          }
          for (uint32_t r = 0; r < n; ++r) {
            REQUIRE(statuses[r].ok());
            size_t wrong = 0;
            for (size_t i = 0; i < count; ++i) {
              wrong += load(recv[r].data(), i, dtype) !=
                       in_dtype(reference(values[i], op, dtype), dtype);
            }
            CHECK(wrong == 0);
          }
        }
      }
    }
  }
}

// Uneven alltoallv counts: rank |from| sends |scale| * (1 + (3*from + 5*to)
// % 4) elements to rank |to|, and one odd element more to its right.
size_t a2a_count(uint32_t from, uint32_t to, uint32_t n, size_t scale) {
  return scale * (1 + (3 * from + 5 * to) % 4) + ((from + 1) % n == to ? 1 : 0);
}

void alltoallv_matrix(uint32_t n, bool segment, const std::vector<hal_dtype_t>& dtypes,
                      const std::vector<size_t>& scales) {
  std::vector<Rank> ranks = make_ranks(n, segment);
  std::mt19937 random(n * 77 + segment);
  for (const hal_dtype_t dtype : dtypes) {
    const size_t elem = HAL_DTYPE_SIZE(dtype);
    for (const size_t scale : scales) {
      // Layouts: packed send displacements; receive blocks in reverse rank
      // order with a gap of 3 elements, so displacements matter.
      std::vector<std::vector<size_t>> sc(n, std::vector<size_t>(n)), sd = sc, rc = sc, rd = sc;
      std::vector<size_t> send_total(n, 0), recv_total(n, 0);
      size_t largest = 0;
      for (uint32_t r = 0; r < n; ++r) {
        for (uint32_t t = 0; t < n; ++t) {
          sc[r][t] = a2a_count(r, t, n, scale);
          rc[r][t] = a2a_count(t, r, n, scale);
          sd[r][t] = send_total[r];
          send_total[r] += sc[r][t];
        }
        for (uint32_t t = n; t-- > 0;) {
          rd[r][t] = recv_total[r];
          recv_total[r] += rc[r][t] + 3;
        }
        largest = std::max(largest, send_total[r] * elem);
      }
      std::vector<std::vector<uint8_t>> send(n);
      for (uint32_t r = 0; r < n; ++r) {
        send[r].resize(send_total[r] * elem);
        for (uint8_t& b : send[r]) b = static_cast<uint8_t>(random());
      }
      for (const Forced& forced : policies()) {
        INFO(n << " ranks" << (segment ? " with" : " without") << " a segment, alltoallv dtype "
               << dtype << " scale " << scale << " (largest send " << largest
               << " B), HAL_COLL_PATH=" << forced.name);
        std::vector<std::vector<uint8_t>> recv(n);
        for (uint32_t r = 0; r < n; ++r) recv[r].assign(recv_total[r] * elem, 0xa5);
        std::vector<hal_alltoallv_layout_t> layouts(n);
        for (uint32_t r = 0; r < n; ++r) {
          layouts[r] = {send[r].data(), recv[r].data(), sc[r].data(),
                        sd[r].data(),   rc[r].data(),   rd[r].data()};
        }
        const auto statuses = run_all(ranks, forced.policy, [&](uint32_t r) {
          return hal_collective_call_t{
              HAL_COLLECTIVE_ALLTOALLV, dtype, HAL_REDUCE_SUM, 0, &layouts[r], nullptr, n};
        });
        if (forced.policy.forced &&
            !spec_serves(forced.path, HAL_COLLECTIVE_ALLTOALLV, largest, n, n, segment)) {
          check_refused(statuses, forced.name);
          continue;
        }
        for (uint32_t r = 0; r < n; ++r) {
          REQUIRE(statuses[r].ok());
          // The reference: block from f is f's block to r, byte for byte;
          // the gaps are untouched.
          std::vector<uint8_t> want(recv_total[r] * elem, 0xa5);
          for (uint32_t f = 0; f < n; ++f) {
            std::memcpy(want.data() + rd[r][f] * elem, send[f].data() + sd[f][r] * elem,
                        sc[f][r] * elem);
          }
          CHECK(recv[r] == want);
        }
      }
    }
  }
}

const std::vector<hal_dtype_t> kAllDtypes = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16,
                                             HAL_DTYPE_F64, HAL_DTYPE_I32, HAL_DTYPE_I64,
                                             HAL_DTYPE_I8,  HAL_DTYPE_U8};

}  // namespace

TEST_CASE("path chooser: every forced path gives the reference allreduce, every dtype",
          "[collectives][path]") {
  // Odd sizes on both sides of every limit: 1 element (fewer than 3 ranks),
  // 7, 4097 (over 16 KiB in f32: direct's and the segment's crossovers).
  const uint32_t n = GENERATE(2u, 3u);
  allreduce_matrix(n, true, kAllDtypes, {HAL_REDUCE_SUM, HAL_REDUCE_MAX}, {1, 7, 4097});
  // Past the segment's slot (64 KiB + 4 B of f32): the segment refuses.
  allreduce_matrix(n, true, {HAL_DTYPE_F32}, {HAL_REDUCE_AVG}, {16385});
}

TEST_CASE(
    "path chooser: every forced path gives the reference alltoallv, through the segment "
    "and pairwise",
    "[collectives][path]") {
  const uint32_t n = GENERATE(2u, 3u);
  // Scale 1: tiny blocks; 1500 f32: over kSegmentSlotBytes for the largest
  // rank (the segment refuses when forced, auto goes pairwise).
  alltoallv_matrix(n, true, {HAL_DTYPE_F32, HAL_DTYPE_BF16, HAL_DTYPE_U8, HAL_DTYPE_F64},
                   {0, 1, 1500});
}

TEST_CASE("path chooser: the other kinds take their one algorithm or are refused",
          "[collectives][path]") {
  std::vector<Rank> ranks = make_ranks(3, true);
  const uint32_t n = 3;
  const size_t count = 5;
  for (const hal_collective_kind_t kind :
       {HAL_COLLECTIVE_BROADCAST, HAL_COLLECTIVE_ALLGATHER, HAL_COLLECTIVE_REDUCE_SCATTER}) {
    for (const Forced& forced : policies()) {
      INFO(hal::collective::kind_name(kind) << ", HAL_COLL_PATH=" << forced.name);
      std::vector<std::vector<float>> send(n), recv(n);
      for (uint32_t r = 0; r < n; ++r) {
        send[r].resize(kind == HAL_COLLECTIVE_REDUCE_SCATTER ? count * n : count);
        for (size_t i = 0; i < send[r].size(); ++i) send[r][i] = static_cast<float>(r * 100 + i);
        recv[r].assign(kind == HAL_COLLECTIVE_ALLGATHER ? count * n : count, -1.0f);
      }
      const auto statuses = run_all(ranks, forced.policy, [&](uint32_t r) {
        return hal_collective_call_t{kind,           HAL_DTYPE_F32,  HAL_REDUCE_SUM, 1,
                                     send[r].data(), recv[r].data(), count};
      });
      if (forced.policy.forced && !spec_serves(forced.path, kind, count * 4, count, n, true)) {
        check_refused(statuses, forced.name);
        continue;
      }
      for (uint32_t r = 0; r < n; ++r) {
        REQUIRE(statuses[r].ok());
        for (size_t i = 0; i < recv[r].size(); ++i) {
          double want = 0;
          if (kind == HAL_COLLECTIVE_BROADCAST) want = 100 + static_cast<double>(i);
          if (kind == HAL_COLLECTIVE_ALLGATHER) want = (i / count) * 100.0 + i % count;
          if (kind == HAL_COLLECTIVE_REDUCE_SCATTER) {
            for (uint32_t from = 0; from < n; ++from) want += from * 100.0 + r * count + i;
          }
          CHECK(recv[r][i] == want);
        }
      }
    }
  }
}

TEST_CASE("path chooser: ranks given different HAL_COLL_PATH values all fail alike",
          "[collectives][path]") {
  std::vector<Rank> ranks = make_ranks(2, true);
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  std::vector<Status> statuses(2);
  std::thread other([&] {
    Chooser chooser;
    chooser.means = processes(2, true);
    chooser.policy = PathPolicy::force(Path::kDirect);
    chooser.rank = 1;
    const hal_collective_call_t call{
        HAL_COLLECTIVE_ALLREDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, b.data(), b.data(), 4};
    statuses[1] =
        hal::collective::run_batch(*ranks[1].transport, ranks[1].shm.get(), std::span(&call, 1),
                                   Deadline::after_ms(20000, nullptr), ranks[1].scratch, chooser);
  });
  Chooser chooser;
  chooser.means = processes(2, true);
  chooser.policy = PathPolicy::automatic();
  const hal_collective_call_t call{
      HAL_COLLECTIVE_ALLREDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, a.data(), a.data(), 4};
  statuses[0] =
      hal::collective::run_batch(*ranks[0].transport, ranks[0].shm.get(), std::span(&call, 1),
                                 Deadline::after_ms(20000, nullptr), ranks[0].scratch, chooser);
  other.join();
  for (const Status& s : statuses) {
    CHECK(s.result == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK_THAT(s.message, Catch::Contains("different HAL_COLL_PATH values"));
  }
  // Still in step: the next call agrees and sums.
  const auto after = run_all(ranks, PathPolicy::automatic(), [&](uint32_t r) {
    float* data = r == 0 ? a.data() : b.data();
    return hal_collective_call_t{
        HAL_COLLECTIVE_ALLREDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, data, data, 4};
  });
  CHECK(after[0].ok());
  CHECK(after[1].ok());
  CHECK(a == std::vector<float>(4, 3.0f));
}

TEST_CASE(
    "path chooser: an alltoallv tried inline finishes through the segment, or leaves the "
    "episode to run()",
    "[collectives][path]") {
  std::vector<Rank> ranks = make_ranks(2, true);
  Chooser chooser;
  chooser.means = processes(2, true);
  chooser.policy = PathPolicy::automatic();
  for (const size_t scale : {size_t{3}, size_t{20000}}) {
    INFO("scale " << scale);
    std::vector<std::vector<float>> send(2), recv(2);
    std::vector<std::vector<size_t>> counts(2, std::vector<size_t>(2)), displs = counts;
    for (uint32_t r = 0; r < 2; ++r) {
      counts[r] = {scale * (r + 1), scale * (r + 1)};
      displs[r] = {0, scale * (r + 1)};
      send[r].resize(2 * scale * (r + 1));
      for (size_t i = 0; i < send[r].size(); ++i) send[r][i] = static_cast<float>(r * 1e6 + i);
      recv[r].assign(2 * scale * (r + 1), -1.0f);
    }
    // Rank r sends scale*(r+1) to each; receives scale*(f+1) from f: each
    // rank's receive counts are the senders'.
    std::vector<std::vector<size_t>> rcounts = {{scale, 2 * scale}, {scale, 2 * scale}};
    std::vector<std::vector<size_t>> rdispls = {{0, scale}, {0, scale}};
    for (uint32_t r = 0; r < 2; ++r) recv[r].assign(3 * scale, -1.0f);
    hal_alltoallv_layout_t layouts[2];
    hal_collective_call_t calls[2];
    for (uint32_t r = 0; r < 2; ++r) {
      layouts[r] = {send[r].data(),   recv[r].data(),    counts[r].data(),
                    displs[r].data(), rcounts[r].data(), rdispls[r].data()};
      calls[r] = {
          HAL_COLLECTIVE_ALLTOALLV, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, &layouts[r], nullptr, 2};
    }
    Status status;
    Clock::time_point first_look;
    // Rank 0 alone: nobody came, the episode stays open.
    CHECK_FALSE(
        ranks[0].shm->try_run(calls[0], chooser, std::chrono::microseconds(0), status, first_look));
    Status late;
    std::thread peer([&] {
      if (!ranks[1].shm->try_run(calls[1], chooser, std::chrono::seconds(20), late, first_look)) {
        late = hal::collective::run_batch(
            *ranks[1].transport, ranks[1].shm.get(), std::span(&calls[1], 1),
            Deadline::after_ms(20000, nullptr), ranks[1].scratch, chooser);
      }
    });
    const Status rest =
        hal::collective::run_batch(*ranks[0].transport, ranks[0].shm.get(), std::span(&calls[0], 1),
                                   Deadline::after_ms(20000, nullptr), ranks[0].scratch, chooser);
    peer.join();
    CHECK(rest.ok());
    CHECK(late.ok());
    for (uint32_t r = 0; r < 2; ++r) {
      for (uint32_t f = 0; f < 2; ++f) {
        for (size_t i = 0; i < rcounts[r][f]; ++i) {
          CHECK(recv[r][rdispls[r][f] + i] == send[f][displs[f][r] + i]);
        }
      }
    }
  }
}

// A large alltoallv read across (cross-memory attach) on the inline path:
// both ranks' tries give up (rank 0: nobody came; rank 1: it read its
// blocks, but rank 0 has not read its send buffer yet), and run() finishes
// each where its try stopped; then a try that finishes whole.
TEST_CASE(
    "path chooser: a cross-memory alltoallv tried inline waits for its readers or leaves "
    "them to run()",
    "[collectives][path][cma]") {
  std::vector<Rank> ranks = make_ranks(2, true);
  REQUIRE(ranks[0].shm->cross_memory());
  Chooser chooser;
  chooser.means = processes(2, true);
  chooser.means.cross_memory = true;
  chooser.policy = PathPolicy::automatic();
  constexpr size_t kScale = 20000;  // 80 KB and more per rank: past a slot
  std::vector<std::vector<float>> send(2), recv(2);
  hal_alltoallv_layout_t layouts[2];
  hal_collective_call_t calls[2];
  // Rank r sends (r + 1) * kScale to each rank, and receives (f + 1) * kScale from rank f.
  std::vector<std::vector<size_t>> sc(2), sd(2), rc(2), rd(2);
  for (uint32_t r = 0; r < 2; ++r) {
    sc[r] = {kScale * (r + 1), kScale * (r + 1)};
    sd[r] = {0, kScale * (r + 1)};
    rc[r] = {kScale, 2 * kScale};
    rd[r] = {1, kScale + 2};  // gaps before each block
    send[r].resize(2 * kScale * (r + 1));
    for (size_t i = 0; i < send[r].size(); ++i) send[r][i] = static_cast<float>(r * 1e6 + i);
  }
  auto reset = [&] {
    for (uint32_t r = 0; r < 2; ++r) {
      recv[r].assign(3 * kScale + 3, -1.0f);
      layouts[r] = {send[r].data(), recv[r].data(), sc[r].data(),
                    sd[r].data(),   rc[r].data(),   rd[r].data()};
      calls[r] = {
          HAL_COLLECTIVE_ALLTOALLV, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, &layouts[r], nullptr, 2};
    }
  };
  auto check_received = [&] {
    for (uint32_t r = 0; r < 2; ++r) {
      std::vector<float> want(3 * kScale + 3, -1.0f);
      for (uint32_t f = 0; f < 2; ++f) {
        std::copy_n(send[f].begin() + static_cast<long>(sd[f][r]), rc[r][f],
                    want.begin() + static_cast<long>(rd[r][f]));
      }
      CHECK(recv[r] == want);
    }
  };
  reset();
  Status status;
  Clock::time_point first_look;
  CHECK_FALSE(
      ranks[0].shm->try_run(calls[0], chooser, std::chrono::microseconds(0), status, first_look));
  CHECK_FALSE(
      ranks[1].shm->try_run(calls[1], chooser, std::chrono::microseconds(0), status, first_look));
  Status statuses[2];
  std::thread peer([&] {
    statuses[1] =
        hal::collective::run_batch(*ranks[1].transport, ranks[1].shm.get(), std::span(&calls[1], 1),
                                   Deadline::after_ms(20000, nullptr), ranks[1].scratch, chooser);
  });
  statuses[0] =
      hal::collective::run_batch(*ranks[0].transport, ranks[0].shm.get(), std::span(&calls[0], 1),
                                 Deadline::after_ms(20000, nullptr), ranks[0].scratch, chooser);
  peer.join();
  CHECK(statuses[0].ok());
  CHECK(statuses[1].ok());
  check_received();
  // Both tries with patience: each reads and waits for the other's read.
  reset();
  bool ended[2] = {false, false};
  std::thread second([&] {
    ended[1] =
        ranks[1].shm->try_run(calls[1], chooser, std::chrono::seconds(20), statuses[1], first_look);
  });
  Clock::time_point mine;
  ended[0] = ranks[0].shm->try_run(calls[0], chooser, std::chrono::seconds(20), statuses[0], mine);
  second.join();
  CHECK(ended[0]);
  CHECK(ended[1]);
  CHECK(statuses[0].ok());
  CHECK(statuses[1].ok());
  check_received();
}

TEST_CASE("path chooser [slow]: the matrix over 4 ranks, every op, with and without a segment",
          "[collectives][path][slow]") {
  const bool segment = GENERATE(true, false);
  allreduce_matrix(
      4, segment, kAllDtypes,
      {HAL_REDUCE_SUM, HAL_REDUCE_PROD, HAL_REDUCE_MIN, HAL_REDUCE_MAX, HAL_REDUCE_AVG},
      {0, 1, 3, 5, 1023, 4096, 4099, 16384, 16385, 70001});
  alltoallv_matrix(4, segment, kAllDtypes, {0, 1, 7, 333, 1500, 5000});
}

TEST_CASE(
    "path chooser: a batch of several calls goes over the transport, forced segment is "
    "refused there",
    "[collectives][path]") {
  std::vector<Rank> ranks = make_ranks(2, true);
  for (const Forced& forced : policies()) {
    INFO("HAL_COLL_PATH=" << forced.name);
    std::vector<std::vector<float>> data(2, std::vector<float>(6));
    for (uint32_t r = 0; r < 2; ++r) {
      for (size_t i = 0; i < 6; ++i) data[r][i] = static_cast<float>(r * 10 + i);
    }
    std::vector<Status> statuses(2);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        Chooser chooser;
        chooser.means = processes(2, true);
        chooser.policy = forced.policy;
        chooser.rank = r;
        // Two allreduces of 3 in one batch: no episode, the transport.
        const hal_collective_call_t calls[2] = {
            {HAL_COLLECTIVE_ALLREDUCE, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, data[r].data(),
             data[r].data(), 3},
            {HAL_COLLECTIVE_ALLREDUCE, HAL_DTYPE_F32, HAL_REDUCE_MAX, 0, data[r].data() + 3,
             data[r].data() + 3, 3}};
        statuses[r] = hal::collective::run_batch(*ranks[r].transport, ranks[r].shm.get(), calls,
                                                 Deadline::after_ms(20000, nullptr),
                                                 ranks[r].scratch, chooser);
      });
    }
    for (auto& t : threads) t.join();
    if (forced.policy.forced && forced.path == Path::kSegment) {
      check_refused(statuses, forced.name);
      continue;
    }
    for (uint32_t r = 0; r < 2; ++r) {
      REQUIRE(statuses[r].ok());
      CHECK(data[r] == std::vector<float>{10, 12, 14, 13, 14, 15});
    }
  }
}
