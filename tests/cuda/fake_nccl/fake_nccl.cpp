// A stand-in for libnccl.so.2, for testing the cuda plugin's collectives
// without a GPU. The stand-in driver's device memory is host memory, so the
// collectives are computed here on the host: each call is enqueued on its
// stream through the driver's cuLaunchHostFunc, and runs in stream order.
// The ranks of a communicator are threads of one process that meet in this
// library: a rank first posts copies of what its peers need into per-pair
// mailboxes, then takes what it needs from them, so in-place calls and
// grouped sends and receives cannot deadlock. Reductions go in rank order.
// The modes of fake_nccl.h simulate ncclInProgress, a hung peer and errors.
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fake_nccl.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr char kIdMagic[8] = "FAKENCL";
constexpr int kCollectiveChannel = 0;
constexpr int kPointToPointChannel = 1;

// What a message claims to be, so that ranks calling different things are
// caught instead of mixing data.
struct Tag {
  int kind = 0;
  int dtype = 0;
  int op = 0;
  int root = 0;
  size_t count = 0;
  bool operator==(const Tag& other) const {
    return kind == other.kind && dtype == other.dtype && op == other.op && root == other.root &&
           count == other.count;
  }
};

struct Message {
  Tag tag;
  std::vector<uint8_t> bytes;
};

// One communicator-to-be, named by a unique id.
struct Group {
  int nranks = 0;
  std::set<int> joined;
  std::map<std::tuple<int, int, int>, std::deque<Message>> mailboxes;  // (from, to, channel)
};

struct RankState {
  std::shared_ptr<Group> group;
  int rank = 0;
  bool blocking = true;
  std::atomic<bool> aborted{false};
  ncclResult_t async_error = ncclSuccess;  // guarded by the library's mutex
  int in_progress_polls = 0;               // guarded by the library's mutex
};

struct Library {
  std::mutex mutex;
  std::condition_variable changed;
  std::set<uint64_t> issued_ids;
  std::map<uint64_t, std::shared_ptr<Group>> groups;
  long aborts = 0;
  long live = 0;
  std::map<std::string, long> accepted_calls;  // by function name
  decltype(&::cuLaunchHostFunc) launch_host_func = nullptr;
};

Library& library() {
  static Library* instance = new Library();  // host functions may outlive exit
  return *instance;
}

}  // namespace

struct ncclComm {
  std::shared_ptr<RankState> state;
};

namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? std::atoi(value) : fallback;
}

// HAL_FAKE_NCCL_FAIL: the code |function| is told to return, else ncclSuccess.
ncclResult_t injected(const char* function) {
  const char* value = std::getenv("HAL_FAKE_NCCL_FAIL");
  if (value == nullptr) return ncclSuccess;
  const char* colon = std::strchr(value, ':');
  if (colon == nullptr || std::string(value, colon) != function) return ncclSuccess;
  return static_cast<ncclResult_t>(std::atoi(colon + 1));
}

// The answer of a non-blocking call that was accepted.
ncclResult_t accepted(RankState& state) {
  const int polls = env_int("HAL_FAKE_NCCL_IN_PROGRESS", 0);
  if (state.blocking || polls <= 0) return ncclSuccess;
  std::lock_guard lock(library().mutex);
  state.in_progress_polls = polls;
  return ncclInProgress;
}

size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
float float_of(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

double from_half(uint16_t h) {
  const int sign = h >> 15;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    magnitude = mantissa != 0 ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(mantissa + 1024, exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

// Round to nearest even, through float (exact for every half).
uint16_t to_half(double wide) {
  const uint32_t x = bits_of(static_cast<float>(wide));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (magnitude < 0x38800000u) {  // a subnormal half: units of 2^-24
    const float scaled = float_of(magnitude) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

double from_bf16(uint16_t b) {
  return float_of(static_cast<uint32_t>(b) << 16);
}

uint16_t to_bf16(double wide) {
  const uint32_t x = bits_of(static_cast<float>(wide));
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

bool is_float(ncclDataType_t type) {
  return type == ncclFloat16 || type == ncclBfloat16 || type == ncclFloat32 || type == ncclFloat64;
}

double load_float(ncclDataType_t type, const uint8_t* p) {
  switch (type) {
    case ncclFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return from_half(h);
    }
    case ncclBfloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return from_bf16(b);
    }
    case ncclFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

void store_float(ncclDataType_t type, uint8_t* p, double value) {
  switch (type) {
    case ncclFloat16: {
      const uint16_t h = to_half(value);
      std::memcpy(p, &h, 2);
      break;
    }
    case ncclBfloat16: {
      const uint16_t b = to_bf16(value);
      std::memcpy(p, &b, 2);
      break;
    }
    case ncclFloat32: {
      const auto f = static_cast<float>(value);
      std::memcpy(p, &f, 4);
      break;
    }
    default:
      std::memcpy(p, &value, 8);
  }
}

// Integers in 64 bits: wrapping at the end is what wrapping at each step
// gives for sums and products.
int64_t load_int(ncclDataType_t type, const uint8_t* p) {
  switch (type) {
    case ncclInt8:
      return static_cast<int8_t>(*p);
    case ncclUint8:
      return *p;
    case ncclInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case ncclUint32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

void store_int(ncclDataType_t type, uint8_t* p, int64_t value) {
  const size_t size = type_size(type);
  const auto wrapped = static_cast<uint64_t>(value);
  std::memcpy(p, &wrapped, size);  // little endian: the low bytes
}

// out = op over |inputs| (in rank order), element by element.
void reduce(ncclDataType_t type, ncclRedOp_t op, size_t count,
            const std::vector<const uint8_t*>& inputs, uint8_t* out) {
  const size_t size = type_size(type);
  const auto ranks = static_cast<int64_t>(inputs.size());
  for (size_t i = 0; i < count; ++i) {
    if (is_float(type)) {
      double acc = load_float(type, inputs[0] + i * size);
      for (size_t r = 1; r < inputs.size(); ++r) {
        const double v = load_float(type, inputs[r] + i * size);
        acc = op == ncclProd  ? acc * v
              : op == ncclMin ? std::min(acc, v)
              : op == ncclMax ? std::max(acc, v)
                              : acc + v;
      }
      if (op == ncclAvg) acc /= static_cast<double>(ranks);
      store_float(type, out + i * size, acc);
    } else {
      int64_t acc = load_int(type, inputs[0] + i * size);
      for (size_t r = 1; r < inputs.size(); ++r) {
        const int64_t v = load_int(type, inputs[r] + i * size);
        acc = op == ncclProd  ? static_cast<int64_t>(static_cast<uint64_t>(acc) * v)
              : op == ncclMin ? std::min(acc, v)
              : op == ncclMax ? std::max(acc, v)
                              : static_cast<int64_t>(static_cast<uint64_t>(acc) + v);
      }
      if (op == ncclAvg) acc /= ranks;  // truncated
      store_int(type, out + i * size, acc);
    }
  }
}

enum Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kSend, kRecv };

struct Op {
  std::shared_ptr<RankState> rank;
  Kind kind;
  const uint8_t* send;
  uint8_t* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;  // the root, or the peer of a send or receive
  cudaStream_t stream;
};

struct Job {
  std::shared_ptr<RankState> rank;
  std::vector<Op> ops;
};

thread_local int group_depth = 0;
thread_local std::vector<Op> grouped;

void post(Group& group, int from, int to, int channel, const Tag& tag, const uint8_t* data,
          size_t bytes) {
  Message message{tag, std::vector<uint8_t>(data, data + bytes)};
  std::lock_guard lock(library().mutex);
  group.mailboxes[{from, to, channel}].push_back(std::move(message));
  library().changed.notify_all();
}

// The next message from |from|; false when this rank was aborted first or
// the message is not the expected one (then the rank's async error is set).
bool take(RankState& me, int from, int channel, const Tag& tag, Message& out) {
  Library& lib = library();
  std::unique_lock lock(lib.mutex);
  auto& box = me.group->mailboxes[{from, me.rank, channel}];
  lib.changed.wait(lock, [&] { return me.aborted.load() || !box.empty(); });
  if (me.aborted.load()) return false;
  out = std::move(box.front());
  box.pop_front();
  if (!(out.tag == tag)) {
    if (me.async_error == ncclSuccess) me.async_error = ncclInvalidUsage;
    return false;
  }
  return true;
}

Tag tag_of(const Op& op) {
  return {op.kind, op.type, op.op, op.root, op.count};
}

void post_outgoing(const Op& op) {
  RankState& me = *op.rank;
  Group& group = *me.group;
  const size_t size = type_size(op.type);
  const Tag tag = tag_of(op);
  switch (op.kind) {
    case kAllReduce:
    case kAllGather:
      for (int r = 0; r < group.nranks; ++r) {
        post(group, me.rank, r, kCollectiveChannel, tag, op.send, op.count * size);
      }
      break;
    case kBroadcast:
      if (me.rank == op.root) {
        for (int r = 0; r < group.nranks; ++r) {
          post(group, me.rank, r, kCollectiveChannel, tag, op.send, op.count * size);
        }
      }
      break;
    case kReduce:
      post(group, me.rank, op.root, kCollectiveChannel, tag, op.send, op.count * size);
      break;
    case kReduceScatter:
      for (int r = 0; r < group.nranks; ++r) {
        post(group, me.rank, r, kCollectiveChannel, tag, op.send + r * op.count * size,
             op.count * size);
      }
      break;
    case kSend: {
      const Tag p2p{kSend, op.type, 0, 0, op.count};
      post(group, me.rank, op.root, kPointToPointChannel, p2p, op.send, op.count * size);
      break;
    }
    case kRecv:
      break;
  }
}

// Takes what |op| needs and writes its output; false on abort or mismatch.
bool complete(const Op& op) {
  RankState& me = *op.rank;
  const int ranks = me.group->nranks;
  const size_t bytes = op.count * type_size(op.type);
  const Tag tag = tag_of(op);
  std::vector<Message> messages(static_cast<size_t>(ranks));
  auto gather = [&]() {
    std::vector<const uint8_t*> inputs;
    for (int r = 0; r < ranks; ++r) {
      if (!take(me, r, kCollectiveChannel, tag, messages[static_cast<size_t>(r)])) return inputs;
      inputs.push_back(messages[static_cast<size_t>(r)].bytes.data());
    }
    return inputs;
  };
  switch (op.kind) {
    case kAllReduce:
    case kReduceScatter: {
      const auto inputs = gather();
      if (static_cast<int>(inputs.size()) != ranks) return false;
      reduce(op.type, op.op, op.count, inputs, op.recv);
      return true;
    }
    case kReduce: {
      if (me.rank != op.root) return true;
      const auto inputs = gather();
      if (static_cast<int>(inputs.size()) != ranks) return false;
      reduce(op.type, op.op, op.count, inputs, op.recv);
      return true;
    }
    case kAllGather: {
      const auto inputs = gather();
      if (static_cast<int>(inputs.size()) != ranks) return false;
      if (bytes == 0) return true;  // a 0-count call may pass NULL buffers
      for (int r = 0; r < ranks; ++r) std::memcpy(op.recv + r * bytes, inputs[r], bytes);
      return true;
    }
    case kBroadcast: {
      Message message;
      if (!take(me, op.root, kCollectiveChannel, tag, message)) return false;
      if (bytes != 0) std::memcpy(op.recv, message.bytes.data(), bytes);
      return true;
    }
    case kRecv: {
      Message message;
      if (!take(me, op.root, kPointToPointChannel, Tag{kSend, op.type, 0, 0, op.count}, message)) {
        return false;
      }
      if (bytes != 0) std::memcpy(op.recv, message.bytes.data(), bytes);
      return true;
    }
    case kSend:
      return true;
  }
  return true;
}

void run_job(void* data) {
  std::unique_ptr<Job> job(static_cast<Job*>(data));
  RankState& me = *job->rank;
  if (me.rank == env_int("HAL_FAKE_NCCL_HANG_RANK", -1)) {
    // A hung peer: holds its stream, as a kernel spinning on the GPU would.
    std::unique_lock lock(library().mutex);
    library().changed.wait(lock, [&] { return me.aborted.load(); });
    return;
  }
  for (const Op& op : job->ops) post_outgoing(op);
  for (const Op& op : job->ops) {
    if (!complete(op)) return;
  }
  if (const int code = env_int("HAL_FAKE_NCCL_ASYNC_ERROR", 0); code != 0) {
    std::lock_guard lock(library().mutex);
    if (me.async_error == ncclSuccess) me.async_error = static_cast<ncclResult_t>(code);
  }
}

// The stand-in driver the plugin opened (its fake_cuStreamWork, cuLaunchHostFunc's shape on the
// stream's own thread, orders the collective on the stream). Null when no driver is loaded.
decltype(&::cuLaunchHostFunc) launch_host_func() {
  Library& lib = library();
  std::lock_guard lock(lib.mutex);
  if (lib.launch_host_func != nullptr) return lib.launch_host_func;
  const char* path = std::getenv("HAL_CUDA_DRIVER_PATH");
  void* driver =
      dlopen(path != nullptr && path[0] != '\0' ? path : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return nullptr;
  using GetProc =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(driver, "cuGetProcAddress_v2"));
  void* function = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (get_proc == nullptr || get_proc("fake_cuStreamWork", &function, CUDA_VERSION,
                                      CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) {
    return nullptr;  // the handle stays open: the driver is never unloaded
  }
  lib.launch_host_func = reinterpret_cast<decltype(&::cuLaunchHostFunc)>(function);
  return lib.launch_host_func;
}

// Submits the ops of a finished group: one job per communicator, in order.
ncclResult_t submit(std::vector<Op> ops) {
  auto launch = launch_host_func();
  if (launch == nullptr) return ncclUnhandledCudaError;
  std::vector<std::unique_ptr<Job>> jobs;
  for (Op& op : ops) {
    auto found = std::find_if(jobs.begin(), jobs.end(),
                              [&](const auto& job) { return job->rank == op.rank; });
    if (found == jobs.end()) {
      jobs.push_back(std::make_unique<Job>());
      jobs.back()->rank = op.rank;
      found = jobs.end() - 1;
    }
    (*found)->ops.push_back(std::move(op));
  }
  ncclResult_t answer = ncclSuccess;
  for (auto& job : jobs) {
    RankState& rank = *job->rank;
    const CUstream stream = job->ops.front().stream;
    if (launch(stream, run_job, job.get()) != CUDA_SUCCESS) return ncclUnhandledCudaError;
    job.release();  // run_job owns it now
    if (accepted(rank) == ncclInProgress) answer = ncclInProgress;
  }
  return answer;
}

ncclResult_t add_op(ncclComm_t comm, Kind kind, const void* send, void* recv, size_t count,
                    ncclDataType_t type, ncclRedOp_t op, int root, cudaStream_t stream,
                    const char* function) {
  if (const ncclResult_t forced = injected(function); forced != ncclSuccess) return forced;
  if (comm == nullptr || type_size(type) == 0) return ncclInvalidArgument;
  RankState& state = *comm->state;
  if (root < 0 || root >= state.group->nranks) return ncclInvalidArgument;
  if (static_cast<int>(op) < ncclSum || static_cast<int>(op) > ncclAvg) return ncclInvalidArgument;
  if (state.aborted.load()) return ncclInvalidUsage;
  {
    std::lock_guard lock(library().mutex);
    ++library().accepted_calls[function];
  }
  Op made{comm->state,
          kind,
          static_cast<const uint8_t*>(send),
          static_cast<uint8_t*>(recv),
          count,
          type,
          op,
          root,
          stream};
  if (group_depth > 0) {
    grouped.push_back(std::move(made));
    return ncclSuccess;
  }
  std::vector<Op> one;
  one.push_back(std::move(made));
  return submit(std::move(one));
}

bool init_complete(const RankState& state) {
  if (std::getenv("HAL_FAKE_NCCL_INIT_HANG") != nullptr) return false;
  return static_cast<int>(state.group->joined.size()) == state.group->nranks;
}

}  // namespace

FAKE_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

FAKE_EXPORT const char* ncclGetErrorString(ncclResult_t) {
  return "a sentence from the stand-in NCCL";
}

FAKE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (const ncclResult_t forced = injected("ncclGetUniqueId"); forced != ncclSuccess) return forced;
  if (id == nullptr) return ncclInvalidArgument;
  static std::mt19937_64 random{std::random_device{}()};
  std::lock_guard lock(library().mutex);
  const uint64_t key = random();
  library().issued_ids.insert(key);
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, kIdMagic, sizeof(kIdMagic));
  std::memcpy(id->internal + sizeof(kIdMagic), &key, sizeof(key));
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id,
                                                int rank, ncclConfig_t* config) {
  if (const ncclResult_t forced = injected("ncclCommInitRankConfig"); forced != ncclSuccess) {
    return forced;
  }
  if (out == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (config != nullptr && config->magic != 0xcafebeef) return ncclInvalidArgument;
  uint64_t key = 0;
  std::memcpy(&key, id.internal + sizeof(kIdMagic), sizeof(key));
  auto state = std::make_shared<RankState>();
  state->rank = rank;
  state->blocking = config == nullptr || config->blocking != 0;
  {
    Library& lib = library();
    std::lock_guard lock(lib.mutex);
    if (std::memcmp(id.internal, kIdMagic, sizeof(kIdMagic)) != 0 ||
        lib.issued_ids.count(key) == 0) {
      return ncclInvalidArgument;  // not an id ncclGetUniqueId made
    }
    auto& group = lib.groups[key];
    if (!group) {
      group = std::make_shared<Group>();
      group->nranks = nranks;
    }
    if (group->nranks != nranks || group->joined.count(rank) != 0) return ncclInvalidUsage;
    group->joined.insert(rank);
    state->group = group;
    ++lib.live;
    lib.changed.notify_all();
  }
  *out = new ncclComm{state};
  if (state->blocking) {
    std::unique_lock lock(library().mutex);
    library().changed.wait(lock, [&] { return init_complete(*state); });
    return ncclSuccess;
  }
  const ncclResult_t answer = accepted(*state);
  std::lock_guard lock(library().mutex);
  return answer == ncclSuccess && init_complete(*state) ? ncclSuccess : ncclInProgress;
}

FAKE_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr) return ncclInvalidArgument;
  RankState& state = *comm->state;
  std::lock_guard lock(library().mutex);
  if (state.in_progress_polls > 0) {
    --state.in_progress_polls;
    *error = ncclInProgress;
  } else if (!init_complete(state)) {
    *error = ncclInProgress;
  } else {
    *error = state.async_error;
  }
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (const ncclResult_t forced = injected("ncclCommFinalize"); forced != ncclSuccess) {
    return forced;
  }
  if (comm == nullptr) return ncclInvalidArgument;
  return accepted(*comm->state);
}

FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  {
    std::lock_guard lock(library().mutex);
    --library().live;
  }
  delete comm;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  comm->state->aborted.store(true);
  {
    std::lock_guard lock(library().mutex);
    ++library().aborts;
    --library().live;
    library().changed.notify_all();  // wakes the rank's waits
  }
  delete comm;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  std::vector<Op> ops = std::move(grouped);
  grouped.clear();
  if (const ncclResult_t forced = injected("ncclGroupEnd"); forced != ncclSuccess) return forced;
  if (ops.empty()) return ncclSuccess;
  return submit(std::move(ops));
}

FAKE_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count,
                                       ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  return add_op(comm, kAllReduce, send, recv, count, type, op, 0, stream, "ncclAllReduce");
}

FAKE_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count,
                                       ncclDataType_t type, int root, ncclComm_t comm,
                                       cudaStream_t stream) {
  return add_op(comm, kBroadcast, send, recv, count, type, ncclSum, root, stream, "ncclBroadcast");
}

FAKE_EXPORT ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                    ncclRedOp_t op, int root, ncclComm_t comm,
                                    cudaStream_t stream) {
  return add_op(comm, kReduce, send, recv, count, type, op, root, stream, "ncclReduce");
}

FAKE_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t count,
                                       ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  return add_op(comm, kAllGather, send, recv, count, type, ncclSum, 0, stream, "ncclAllGather");
}

FAKE_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count,
                                           ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream) {
  return add_op(comm, kReduceScatter, send, recv, count, type, op, 0, stream, "ncclReduceScatter");
}

FAKE_EXPORT ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                                  ncclComm_t comm, cudaStream_t stream) {
  return add_op(comm, kSend, send, nullptr, count, type, ncclSum, peer, stream, "ncclSend");
}

FAKE_EXPORT ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer,
                                  ncclComm_t comm, cudaStream_t stream) {
  return add_op(comm, kRecv, nullptr, recv, count, type, ncclSum, peer, stream, "ncclRecv");
}

FAKE_EXPORT long fake_nccl_abort_count(void) {
  std::lock_guard lock(library().mutex);
  return library().aborts;
}

FAKE_EXPORT long fake_nccl_call_count(const char* function) {
  if (function == nullptr) return 0;
  std::lock_guard lock(library().mutex);
  const auto found = library().accepted_calls.find(function);
  return found != library().accepted_calls.end() ? found->second : 0;
}

FAKE_EXPORT long fake_nccl_live_comms(void) {
  std::lock_guard lock(library().mutex);
  return library().live;
}
