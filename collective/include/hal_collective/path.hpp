// Which path serves a collective call: the one place that decides it.
//
//   local        the ranks are threads of one process: they meet in memory
//                (hal_comm_init_local; LocalGroup)
//   segment      ranks in processes of one host: the data goes through the
//                shared segment in one round (ShmGroup); an alltoallv
//                larger than a slot, where the kernel lets the ranks read
//                each other's memory, by cross-memory attach (one copy)
//   direct       over the point-to-point transport, every rank exchanges
//                with every peer at once (latency-bound sizes, and the
//                kinds with one natural pattern: broadcast, reduce,
//                alltoall, alltoallv)
//   ring         over the transport, with the neighbours in n-1 steps
//                (bandwidth-bound allreduce, reduce-scatter, allgather)
//   host-staged  the loader serves the communicator (a plugin without
//                collectives, HAL_COMM_SHM=0 over a store, or forced): the
//                data is staged through host memory and then takes direct
//                or ring over the store, or local in one process
//
// choose_path() takes the call (kind, dtype, bytes), the ranks and what the
// communicator has (its means), and returns the path and why, with a line
// for each path it did not take. The limits it applies are in limits.hpp.
// HAL_COLL_PATH forces one path (for tests and comparisons); a forced path
// that cannot serve a call is refused with HAL_ERROR_UNSUPPORTED, never
// replaced. HAL_COLL_VERBOSE=1 prints each decision once per communicator
// and signature (kind, dtype, op, path, power-of-two size class).
#pragma once

#include "hal_collective/status.hpp"

#include <cstdint>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <tuple>

namespace hal::collective {

enum class Path : uint8_t { kLocal, kSegment, kDirect, kRing, kHostStaged };
inline constexpr uint32_t kPathCount = 5;

const char* path_name(Path path) noexcept;

// What a communicator's rank has to serve calls with.
struct Means {
  uint32_t ranks = 1;
  bool local = false;        // ranks are threads of this process
  bool segment = false;      // a shared segment with every peer (ShmGroup)
  bool transport = false;    // point-to-point messages to every peer
  bool host_staged = false;  // the loader's communicator
  // Every rank may read every peer's memory (cross-memory attach, probed at
  // set-up): the segment serves an alltoallv of any size, each rank reading
  // its blocks straight out of its peers' send buffers (one copy).
  bool cross_memory = false;
};

// The facts of a call the choice depends on. |bytes|: an allreduce's
// buffer; an alltoallv's largest send total over all ranks once the counts
// are known (before that, this rank's own).
struct CallFacts {
  hal_collective_kind_t kind = HAL_COLLECTIVE_ALLREDUCE;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  hal_reduce_op_t op = HAL_REDUCE_SUM;
  uint64_t count = 0;
  size_t bytes = 0;
};

// HAL_COLL_PATH, read once: kAuto when unset, empty or "auto".
struct PathPolicy {
  bool forced = false;
  Path path = Path::kSegment;  // when forced
  Status invalid;              // a value that names no path

  static const PathPolicy& from_environment();
  // A value of HAL_COLL_PATH (nullptr: unset).
  static PathPolicy parse(const char* value);
  static PathPolicy force(Path path) { return {true, path, {}}; }
  static PathPolicy automatic() { return {}; }
  // A small number every rank publishes, so ranks whose processes were
  // given different HAL_COLL_PATH values fail alike instead of waiting.
  uint32_t code() const noexcept { return forced ? 1u + static_cast<uint32_t>(path) : 0u; }
};

struct PathChoice {
  Path path = Path::kDirect;
  Status refusal;        // a forced path that cannot serve the call
  std::string reason;    // why |path|
  std::string declined;  // "segment: why not; ring: why not; ..."
  bool ok() const { return refusal.ok(); }
};

// Whether |path| can serve the call, with the sentence why not.
bool path_serves(Path path, const CallFacts& call, const Means& means, std::string& why_not);

// |explain| fills the reason and the declines (strings: HAL_COLL_VERBOSE
// and tests); without it a choice allocates nothing unless it refuses.
PathChoice choose_path(const CallFacts& call, const Means& means, const PathPolicy& policy,
                       bool explain = false);

// Facts of an engine call. An alltoallv's bytes are this rank's send total.
CallFacts facts_of(const hal_collective_call_t& call) noexcept;

class PathLog;

// What a rank decides with: its means, the policy, its log.
struct Chooser {
  Means means;
  PathPolicy policy = PathPolicy::from_environment();
  PathLog* log = nullptr;
  uint32_t rank = 0;
  PathChoice choose(const CallFacts& call) const;
  // Chooses (and logs) for every collective of a batch, sends and receives
  // aside: the first refusal, else success.
  Status check(std::span<const hal_collective_call_t> calls) const;
};

// HAL_COLL_VERBOSE=1: prints a decision on stderr the first time this log
// sees its signature. One log per communicator rank; thread-safe.
class PathLog {
 public:
  PathLog() : enabled_(enabled()) {}
  explicit PathLog(bool enabled) : enabled_(enabled) {}  // tests
  static bool enabled() noexcept;                        // HAL_COLL_VERBOSE
  bool on() const noexcept { return enabled_; }
  void note(uint32_t rank, const CallFacts& call, const Means& means, const PathChoice& choice);
  // The line note() prints, without the once-per-signature filter.
  static std::string line(uint32_t rank, const CallFacts& call, const Means& means,
                          const PathChoice& choice);

 private:
  bool enabled_;
  std::mutex mutex_;
  std::set<std::tuple<int, int, int, int, int>> seen_;
};

}  // namespace hal::collective
