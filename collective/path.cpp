#include "hal_collective/path.hpp"

#include "hal_collective/alltoallv.hpp"
#include "hal_collective/limits.hpp"
#include "hal_collective/reduce.hpp"
#include "hal_util/env.hpp"
#include "hal_util/names.hpp"

#include <bit>
#include <cstdio>
#include <cstring>

namespace hal::collective {

namespace {

constexpr const char* kPathNames[kPathCount] = {"local", "segment", "direct", "ring",
                                                "host-staged"};

const char* op_name(hal_reduce_op_t op) noexcept {
  switch (op) {
    case HAL_REDUCE_SUM:
      return "sum";
    case HAL_REDUCE_PROD:
      return "prod";
    case HAL_REDUCE_MIN:
      return "min";
    case HAL_REDUCE_MAX:
      return "max";
    case HAL_REDUCE_AVG:
      return "avg";
    default:
      return "?";
  }
}

bool reduces(hal_collective_kind_t kind) noexcept {
  return kind == HAL_COLLECTIVE_ALLREDUCE || kind == HAL_COLLECTIVE_REDUCE ||
         kind == HAL_COLLECTIVE_REDUCE_SCATTER;
}

std::string bytes_text(size_t bytes) {
  return std::to_string(bytes) + " B";
}

// The path the engine takes when nothing is forced, among those that serve.
// The order of the checks is the order of preference.
// |reason| is built when asked for only (HAL_COLL_VERBOSE): a call's
// choice costs no allocation.
Path preferred(const CallFacts& call, const Means& means, std::string* reason_out) {
  std::string ignored;
  std::string& reason = reason_out != nullptr ? *reason_out : ignored;
  const bool explain = reason_out != nullptr;
  if (means.local) {
    if (explain) reason = "the ranks are threads of this process";
    return Path::kLocal;
  }
  if (call.kind == HAL_COLLECTIVE_ALLREDUCE && means.segment &&
      call.bytes <= limits::kSegmentAllreduceBytes) {
    if (explain)
      reason = "at most " + bytes_text(limits::kSegmentAllreduceBytes) +
               " (kSegmentAllreduceBytes): one round through the shared segment";
    return Path::kSegment;
  }
  if (call.kind == HAL_COLLECTIVE_ALLTOALLV && means.segment &&
      call.bytes <= limits::kSegmentAlltoallvBytes) {
    if (explain)
      reason = "the largest send total is at most " + bytes_text(limits::kSegmentAlltoallvBytes) +
               " (kSegmentAlltoallvBytes): one round through the shared segment";
    return Path::kSegment;
  }
  if (call.kind == HAL_COLLECTIVE_ALLTOALLV && means.segment && means.cross_memory) {
    if (explain)
      reason = "the largest send total is over " + bytes_text(limits::kSegmentAlltoallvBytes) +
               " (kSegmentAlltoallvBytes): each rank reads its blocks out of its peers' send "
               "buffers (cross-memory attach, one copy)";
    return Path::kSegment;
  }
  if (call.kind == HAL_COLLECTIVE_ALLREDUCE) {
    if (call.bytes <= limits::kDirectAllreduceBytes || call.count < means.ranks) {
      if (explain)
        reason = call.count < means.ranks
                     ? "fewer elements than ranks: the ring would have empty blocks"
                     : "at most " + bytes_text(limits::kDirectAllreduceBytes) +
                           " (kDirectAllreduceBytes): one round, whole buffers";
      return Path::kDirect;
    }
    if (explain)
      reason = "over " + bytes_text(limits::kDirectAllreduceBytes) +
               " (kDirectAllreduceBytes): the ring moves 2(n-1)/n of the bytes";
    return Path::kRing;
  }
  if (call.kind == HAL_COLLECTIVE_REDUCE_SCATTER || call.kind == HAL_COLLECTIVE_ALLGATHER) {
    if (explain) reason = "the only algorithm for this kind";
    return Path::kRing;
  }
  if (explain)
    reason = call.kind == HAL_COLLECTIVE_ALLTOALLV && means.segment
                 ? "the largest send total is over " + bytes_text(limits::kSegmentAlltoallvBytes) +
                       " (kSegmentAlltoallvBytes): pairwise over the transport"
                 : "the only algorithm for this kind";
  return Path::kDirect;
}

}  // namespace

const char* path_name(Path path) noexcept {
  const auto index = static_cast<uint32_t>(path);
  return index < kPathCount ? kPathNames[index] : "?";
}

PathPolicy PathPolicy::parse(const char* value) {
  PathPolicy read;
  if (value == nullptr || value[0] == '\0' || std::strcmp(value, "auto") == 0) return read;
  for (uint32_t i = 0; i < kPathCount; ++i) {
    if (std::strcmp(value, kPathNames[i]) == 0) return force(static_cast<Path>(i));
  }
  read.invalid = Status::failure(
      HAL_ERROR_INVALID_ARGUMENT,
      std::string("HAL_COLL_PATH='") + value +
          "' names no collective path (auto, local, segment, direct, ring, host-staged)");
  return read;
}

const PathPolicy& PathPolicy::from_environment() {
  static const PathPolicy policy = parse(util::env("HAL_COLL_PATH"));
  return policy;
}

bool path_serves(Path path, const CallFacts& call, const Means& means, std::string& why_not) {
  const bool point_to_point = call.kind == HAL_COLLECTIVE_SEND || call.kind == HAL_COLLECTIVE_RECV;
  if (point_to_point) {
    why_not = "a send or receive is a message, not a collective";
    return false;
  }
  switch (path) {
    case Path::kLocal:
      if (!means.local) why_not = "the ranks are not threads of one process";
      break;
    case Path::kSegment:
      if (means.local) {
        why_not = "the ranks are threads of this process (they meet in memory)";
      } else if (!means.segment) {
        why_not =
            "no shared segment serves it (the ranks are on several hosts, HAL_COMM_SHM=0, "
            "more than " +
            std::to_string(limits::kMaxSegmentRanks) +
            " ranks, the loader's store, or a batch of several calls)";
      } else if (call.kind != HAL_COLLECTIVE_ALLREDUCE && call.kind != HAL_COLLECTIVE_ALLTOALLV) {
        why_not =
            std::string("it carries allreduce and alltoallv only, not ") + kind_name(call.kind);
      } else if (call.bytes > limits::kSegmentSlotBytes &&
                 !(call.kind == HAL_COLLECTIVE_ALLTOALLV && means.cross_memory)) {
        why_not = bytes_text(call.bytes) + " exceed a rank's slot of " +
                  bytes_text(limits::kSegmentSlotBytes) + " (kSegmentSlotBytes)" +
                  (call.kind == HAL_COLLECTIVE_ALLTOALLV
                       ? " and the ranks cannot read each other's memory (cross-memory attach)"
                       : "");
      }
      break;
    case Path::kDirect:
      if (means.local) {
        why_not = "the ranks are threads of this process (they meet in memory)";
      } else if (!means.transport) {
        why_not = "no point-to-point transport";
      } else if (call.kind == HAL_COLLECTIVE_REDUCE_SCATTER ||
                 call.kind == HAL_COLLECTIVE_ALLGATHER) {
        why_not = std::string("no direct algorithm for ") + kind_name(call.kind);
      }
      break;
    case Path::kRing:
      if (means.local) {
        why_not = "the ranks are threads of this process (they meet in memory)";
      } else if (!means.transport) {
        why_not = "no point-to-point transport";
      } else if (call.kind != HAL_COLLECTIVE_ALLREDUCE &&
                 call.kind != HAL_COLLECTIVE_REDUCE_SCATTER &&
                 call.kind != HAL_COLLECTIVE_ALLGATHER) {
        why_not = std::string("no ring algorithm for ") + kind_name(call.kind);
      } else if (call.kind == HAL_COLLECTIVE_ALLREDUCE && call.count < means.ranks) {
        why_not = std::to_string(call.count) + " elements are fewer than the " +
                  std::to_string(means.ranks) + " ranks the ring splits them over";
      }
      break;
    case Path::kHostStaged:
      if (!means.host_staged) {
        why_not =
            "the plugin serves this communicator (HAL_COLL_PATH=host-staged must be set when "
            "the communicator is made)";
      }
      break;
  }
  return why_not.empty();
}

PathChoice choose_path(const CallFacts& call, const Means& means, const PathPolicy& policy,
                       bool explain) {
  PathChoice choice;
  if (!policy.invalid.ok()) {
    choice.refusal = policy.invalid;
    return choice;
  }
  // A host-staged communicator's calls are served by the loader; inside it
  // the data takes local, direct or ring, which this same function picks.
  const bool forced_staging = policy.forced && policy.path == Path::kHostStaged;
  if (policy.forced && !forced_staging) {
    std::string why_not;
    if (!path_serves(policy.path, call, means, why_not)) {
      choice.refusal = Status::failure(HAL_ERROR_UNSUPPORTED,
                                       std::string("HAL_COLL_PATH=") + path_name(policy.path) +
                                           " cannot serve this " + kind_name(call.kind) + " of " +
                                           bytes_text(call.bytes) + " over " +
                                           std::to_string(means.ranks) + " ranks: " + why_not);
      return choice;
    }
    choice.path = policy.path;
    if (explain) choice.reason = "forced by HAL_COLL_PATH";
  } else if (forced_staging && !means.host_staged) {
    std::string why_not;
    path_serves(Path::kHostStaged, call, means, why_not);
    choice.refusal = Status::failure(HAL_ERROR_UNSUPPORTED,
                                     std::string("HAL_COLL_PATH=host-staged cannot serve this ") +
                                         kind_name(call.kind) + ": " + why_not);
    return choice;
  } else {
    choice.path = preferred(call, means, explain ? &choice.reason : nullptr);
  }
  if (!explain) return choice;
  for (uint32_t i = 0; i < kPathCount; ++i) {
    const auto other = static_cast<Path>(i);
    if (other == choice.path || other == Path::kHostStaged) continue;
    std::string why_not;
    if (path_serves(other, call, means, why_not)) {
      why_not = policy.forced ? "not forced" : "serves, but not preferred at this size";
    }
    if (!choice.declined.empty()) choice.declined += "; ";
    choice.declined += std::string(path_name(other)) + ": " + why_not;
  }
  return choice;
}

CallFacts facts_of(const hal_collective_call_t& call) noexcept {
  CallFacts facts{call.kind, call.dtype, call.op, call.count, 0};
  const size_t elem = dtype_size(call.dtype);
  if (call.kind == HAL_COLLECTIVE_ALLTOALLV) {
    const hal_alltoallv_layout_t& layout = layout_of(call);
    for (uint64_t r = 0; r < call.count; ++r) facts.bytes += layout.send_counts[r] * elem;
  } else {
    facts.bytes = call.count * elem;
  }
  return facts;
}

PathChoice Chooser::choose(const CallFacts& call) const {
  const bool verbose = log != nullptr && log->on();
  PathChoice choice = choose_path(call, means, policy, verbose);
  if (verbose) log->note(rank, call, means, choice);
  return choice;
}

Status Chooser::check(std::span<const hal_collective_call_t> calls) const {
  for (const hal_collective_call_t& call : calls) {
    if (call.kind == HAL_COLLECTIVE_SEND || call.kind == HAL_COLLECTIVE_RECV) continue;
    if (PathChoice choice = choose(facts_of(call)); !choice.ok()) return choice.refusal;
  }
  return {};
}

bool PathLog::enabled() noexcept {
  static const bool on = util::env_flag("HAL_COLL_VERBOSE", false);
  return on;
}

std::string PathLog::line(uint32_t rank, const CallFacts& call, const Means& means,
                          const PathChoice& choice) {
  // Appended piece by piece: GCC 12's -Wrestrict misreads "literal" + string.
  std::string text = "hal_coll: rank ";
  text += std::to_string(rank);
  text += '/';
  text += std::to_string(means.ranks);
  text += ' ';
  text += kind_name(call.kind);
  text += ' ';
  text += util::dtype_name(call.dtype);
  if (reduces(call.kind)) {
    text += ' ';
    text += op_name(call.op);
  }
  text += ' ';
  text += bytes_text(call.bytes);
  if (means.host_staged) text += " (host-staged)";
  if (!choice.ok()) {
    text += " -> refused: ";
    text += choice.refusal.message;
    return text;
  }
  text += " -> ";
  text += path_name(choice.path);
  text += " (";
  text += choice.reason;
  text += "); not ";
  text += choice.declined;
  return text;
}

void PathLog::note(uint32_t rank, const CallFacts& call, const Means& means,
                   const PathChoice& choice) {
  if (!enabled_) return;
  // A size class is a power of two: bytes 0, 1, 2-3, 4-7, ...
  const int size_class = call.bytes == 0 ? 0 : static_cast<int>(std::bit_width(call.bytes));
  const int path = choice.ok() ? static_cast<int>(choice.path) : -1;
  {
    std::lock_guard lock(mutex_);
    if (!seen_
             .emplace(static_cast<int>(call.kind), static_cast<int>(call.dtype),
                      static_cast<int>(call.op), path, size_class)
             .second) {
      return;
    }
  }
  const std::string text = line(rank, call, means, choice);
  std::fprintf(stderr, "%s\n", text.c_str());
}

}  // namespace hal::collective
