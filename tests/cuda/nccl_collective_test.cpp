// The cuda plugin's collectives on NCCL, through the public API, over the
// stand-in driver (fake_driver/) and the stand-in NCCL (fake_nccl/): every
// collective and dtype against a host reference computed here, the unique-id
// bootstrap of ranks that are threads, the deadline (a hung peer: the plugin
// calls ncclCommAbort and the call fails with HAL_ERROR_TIMEOUT), abort,
// ncclInProgress, NCCL's error codes carried with their names, and the
// loader's host-staged collectives when NCCL is absent; alltoallv (the count
// exchange before the data, its mismatches, deadline and abort).
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_nccl.h"
#include "hal.h"

namespace {

// ncclResult_t values (nccl.h), written out: the test is independent of the header.
constexpr int64_t kNcclSystemError = 2;
constexpr int64_t kNcclInvalidArgument = 4;
constexpr int64_t kNcclRemoteError = 6;
constexpr int64_t kNcclInProgress = 7;

constexpr uint32_t kRanks = 2;  // the stand-in driver's devices

[[maybe_unused]] const bool kEnvironment = [] {
  setenv("HAL_PLUGINS", "cuda", 1);
  setenv("HAL_CUDA_DRIVER_PATH", HAL_TEST_FAKE_CUDA, 1);
  return true;
}();

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (previous_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, previous_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string previous_;
};

// The stand-in NCCL the plugin opened (the same file: the same handle).
struct FakeNccl {
  FakeNccl() {
    handle = dlopen(HAL_TEST_FAKE_NCCL, RTLD_NOW);
    REQUIRE(handle != nullptr);
    abort_count =
        reinterpret_cast<fake_nccl_abort_count_fn>(dlsym(handle, "fake_nccl_abort_count"));
    live_comms = reinterpret_cast<fake_nccl_live_comms_fn>(dlsym(handle, "fake_nccl_live_comms"));
    call_count = reinterpret_cast<fake_nccl_call_count_fn>(dlsym(handle, "fake_nccl_call_count"));
    REQUIRE(abort_count != nullptr);
    REQUIRE(live_comms != nullptr);
    REQUIRE(call_count != nullptr);
  }
  ~FakeNccl() { dlclose(handle); }
  void* handle = nullptr;
  fake_nccl_abort_count_fn abort_count = nullptr;
  fake_nccl_live_comms_fn live_comms = nullptr;
  fake_nccl_call_count_fn call_count = nullptr;
};

// hal_init over the stand-ins, both devices, a stream on each.
class NcclSession {
 public:
  explicit NcclSession(const char* nccl_path = HAL_TEST_FAKE_NCCL)
      : nccl_path_("HAL_CUDA_NCCL_PATH", nccl_path) {
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    uint32_t count = 0;
    REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
    REQUIRE(count == kRanks);
    for (uint32_t i = 0; i < kRanks; ++i) {
      REQUIRE(hal_device_get(i, &devices_[i]) == HAL_SUCCESS);
      REQUIRE(hal_stream_create(devices_[i], 0, &streams_[i]) == HAL_SUCCESS);
    }
  }
  ~NcclSession() {
    for (hal_stream_t stream : streams_) hal_stream_destroy(stream);
    hal_shutdown();
  }
  hal_device_t device(uint32_t i) const { return devices_[i]; }
  hal_stream_t stream(uint32_t i) const { return streams_[i]; }
  const hal_device_t* devices() const { return devices_; }

 private:
  ScopedEnv nccl_path_;
  hal_device_t devices_[kRanks] = {};
  hal_stream_t streams_[kRanks] = {};
};

hal_error_detail_t last_detail() {
  hal_error_detail_t detail{};
  detail.struct_size = sizeof(detail);
  REQUIRE(hal_error_get_detail(&detail) == HAL_SUCCESS);
  return detail;
}

hal_comm_config_t config_with_timeout(uint32_t timeout_ms) {
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = timeout_ms;
  return config;
}

// A device buffer; content moves through hal_memcpy_async.
class NcclBuffer {
 public:
  NcclBuffer(hal_device_t device, size_t bytes) : bytes_(bytes) {
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &ptr_) == HAL_SUCCESS);
  }
  ~NcclBuffer() { hal_mem_free(ptr_); }
  NcclBuffer(const NcclBuffer&) = delete;
  NcclBuffer& operator=(const NcclBuffer&) = delete;
  void* get() const { return ptr_; }
  void write(const std::vector<uint8_t>& data, hal_stream_t stream) {
    REQUIRE(hal_memcpy_async(ptr_, data.data(), data.size(), stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
  }
  std::vector<uint8_t> read(hal_stream_t stream) const {
    std::vector<uint8_t> out(bytes_);
    REQUIRE(hal_memcpy_async(out.data(), ptr_, bytes_, stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// --- values: small integers, exact in every dtype, so every order of
// reduction gives the same answer and the reference can be exact.

double decode_half(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) != 0 ? -magnitude : magnitude;
}

// The half whose value is |value| (exact values only), by search over the
// finite halves: independent of any encoder.
uint16_t encode_half(double value) {
  static const std::map<double, uint16_t> table = [] {
    std::map<double, uint16_t> made;
    for (uint32_t bits = 0; bits < 0x7c00u; ++bits) {
      made.emplace(decode_half(static_cast<uint16_t>(bits)), static_cast<uint16_t>(bits));
      made.emplace(-decode_half(static_cast<uint16_t>(bits)),
                   static_cast<uint16_t>(bits | 0x8000u));
    }
    made[0.0] = 0;
    return made;
  }();
  const auto found = table.find(value);
  REQUIRE(found != table.end());
  return found->second;
}

double decode_bf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t encode_bf16(double value) {
  const auto narrow = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &narrow, sizeof(bits));
  REQUIRE((bits & 0xffffu) == 0);  // exact
  return static_cast<uint16_t>(bits >> 16);
}

bool is_float(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F32 || dtype == HAL_DTYPE_F16 || dtype == HAL_DTYPE_BF16 ||
         dtype == HAL_DTYPE_F64;
}

void put(hal_dtype_t dtype, uint8_t* p, double value) {
  switch (dtype) {
    case HAL_DTYPE_F32: {
      const auto v = static_cast<float>(value);
      std::memcpy(p, &v, 4);
      break;
    }
    case HAL_DTYPE_F64:
      std::memcpy(p, &value, 8);
      break;
    case HAL_DTYPE_F16: {
      const uint16_t v = encode_half(value);
      std::memcpy(p, &v, 2);
      break;
    }
    case HAL_DTYPE_BF16: {
      const uint16_t v = encode_bf16(value);
      std::memcpy(p, &v, 2);
      break;
    }
    case HAL_DTYPE_I32: {
      const auto v = static_cast<int32_t>(value);
      std::memcpy(p, &v, 4);
      break;
    }
    case HAL_DTYPE_I64: {
      const auto v = static_cast<int64_t>(value);
      std::memcpy(p, &v, 8);
      break;
    }
    case HAL_DTYPE_I8:
      *p = static_cast<uint8_t>(static_cast<int8_t>(value));
      break;
    default:
      *p = static_cast<uint8_t>(value);
  }
}

double get_value(hal_dtype_t dtype, const uint8_t* p) {
  switch (dtype) {
    case HAL_DTYPE_F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case HAL_DTYPE_F64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case HAL_DTYPE_F16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return decode_half(v);
    }
    case HAL_DTYPE_BF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return decode_bf16(v);
    }
    case HAL_DTYPE_I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case HAL_DTYPE_I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case HAL_DTYPE_I8:
      return static_cast<int8_t>(*p);
    default:
      return *p;
  }
}

// The reference reduction of two ranks' values.
double reference(hal_reduce_op_t op, hal_dtype_t dtype, double a, double b) {
  switch (op) {
    case HAL_REDUCE_SUM:
      return a + b;
    case HAL_REDUCE_PROD:
      return a * b;
    case HAL_REDUCE_MIN:
      return std::min(a, b);
    case HAL_REDUCE_MAX:
      return std::max(a, b);
    default:
      return is_float(dtype) ? (a + b) / 2 : std::trunc((a + b) / 2);
  }
}

// Per rank, |count| seeded small integers (unsigned for U8).
std::vector<std::vector<double>> inputs(hal_dtype_t dtype, size_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> pick(dtype == HAL_DTYPE_U8 ? 0 : -3, 3);
  std::vector<std::vector<double>> values(kRanks, std::vector<double>(count));
  for (auto& rank : values) {
    for (double& v : rank) v = pick(random);
  }
  return values;
}

std::vector<uint8_t> encode(hal_dtype_t dtype, const std::vector<double>& values) {
  std::vector<uint8_t> bytes(values.size() * HAL_DTYPE_SIZE(dtype));
  for (size_t i = 0; i < values.size(); ++i)
    put(dtype, &bytes[i * HAL_DTYPE_SIZE(dtype)], values[i]);
  return bytes;
}

std::vector<double> decode(hal_dtype_t dtype, const std::vector<uint8_t>& bytes) {
  std::vector<double> values(bytes.size() / HAL_DTYPE_SIZE(dtype));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = get_value(dtype, &bytes[i * HAL_DTYPE_SIZE(dtype)]);
  return values;
}

struct Comms {
  explicit Comms(const NcclSession& session, uint32_t timeout_ms = 0) {
    const hal_comm_config_t config = config_with_timeout(timeout_ms);
    REQUIRE(hal_comm_init_all(kRanks, session.devices(), &config, comms) == HAL_SUCCESS);
  }
  ~Comms() {
    for (hal_comm_t comm : comms) hal_comm_destroy(comm);
  }
  hal_comm_t comms[kRanks] = {};
};

constexpr hal_dtype_t kDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16, HAL_DTYPE_F64,
                                   HAL_DTYPE_I32, HAL_DTYPE_I64, HAL_DTYPE_I8,   HAL_DTYPE_U8};
constexpr hal_reduce_op_t kOps[] = {HAL_REDUCE_SUM, HAL_REDUCE_PROD, HAL_REDUCE_MIN, HAL_REDUCE_MAX,
                                    HAL_REDUCE_AVG};

}  // namespace

TEST_CASE("with NCCL the cuda devices declare COLLECTIVES and one rank per GPU, without it neither",
          "[nccl]") {
  {
    NcclSession session;
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    REQUIRE(hal_device_get_properties(session.device(0), &properties) == HAL_SUCCESS);
    CHECK((properties.capabilities & HAL_DEVICE_CAP_COLLECTIVES) != 0);
    // alltoallv on NCCL, after the count exchange.
    CHECK((properties.capabilities & HAL_DEVICE_CAP_ALLTOALLV) != 0);
    CHECK(properties.max_ranks_per_device == 1);  // NCCL refuses two ranks on one GPU
  }
  {
    NcclSession session("/nonexistent/libnccl.so.2");
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    REQUIRE(hal_device_get_properties(session.device(0), &properties) == HAL_SUCCESS);
    CHECK((properties.capabilities & HAL_DEVICE_CAP_COLLECTIVES) == 0);
    CHECK((properties.capabilities & HAL_DEVICE_CAP_ALLTOALLV) != 0);  // the loader's
    CHECK(properties.max_ranks_per_device == 0);  // the loader's collectives take any number
  }
}

TEST_CASE("every reduction collective and dtype on NCCL matches the host reference", "[nccl]") {
  NcclSession session;
  FakeNccl fake;
  const long live_before = fake.live_comms();
  {
    Comms comms(session);
    CHECK(fake.live_comms() == live_before + kRanks);
    constexpr size_t kCount = 37;
    uint32_t seed = 1;
    for (hal_dtype_t dtype : kDtypes) {
      for (hal_reduce_op_t op : kOps) {
        CAPTURE(dtype, op);
        const auto values = inputs(dtype, kCount * kRanks, seed++);
        const size_t bytes = kCount * kRanks * HAL_DTYPE_SIZE(dtype);
        std::vector<std::unique_ptr<NcclBuffer>> send, recv;
        for (uint32_t r = 0; r < kRanks; ++r) {
          send.push_back(std::make_unique<NcclBuffer>(session.device(r), bytes));
          recv.push_back(std::make_unique<NcclBuffer>(session.device(r), bytes));
          send[r]->write(encode(dtype, values[r]), session.stream(r));
        }
        auto expected = [&](size_t i) { return reference(op, dtype, values[0][i], values[1][i]); };

        // allreduce, out of place
        for (uint32_t r = 0; r < kRanks; ++r) {
          REQUIRE(hal_allreduce(send[r]->get(), recv[r]->get(), kCount * kRanks, dtype, op,
                                comms.comms[r], session.stream(r)) == HAL_SUCCESS);
        }
        for (uint32_t r = 0; r < kRanks; ++r) {
          const auto got = decode(dtype, recv[r]->read(session.stream(r)));
          for (size_t i = 0; i < kCount * kRanks; ++i) REQUIRE(got[i] == expected(i));
        }
        // reduce to root 1
        for (uint32_t r = 0; r < kRanks; ++r) {
          REQUIRE(hal_reduce(send[r]->get(), recv[r]->get(), kCount, dtype, op, 1, comms.comms[r],
                             session.stream(r)) == HAL_SUCCESS);
        }
        {
          const auto got = decode(dtype, recv[1]->read(session.stream(1)));
          for (size_t i = 0; i < kCount; ++i) REQUIRE(got[i] == expected(i));
        }
        // reduce_scatter: rank r gets block r
        for (uint32_t r = 0; r < kRanks; ++r) {
          REQUIRE(hal_reduce_scatter(send[r]->get(), recv[r]->get(), kCount, dtype, op,
                                     comms.comms[r], session.stream(r)) == HAL_SUCCESS);
        }
        for (uint32_t r = 0; r < kRanks; ++r) {
          const auto got = decode(dtype, recv[r]->read(session.stream(r)));
          for (size_t i = 0; i < kCount; ++i) REQUIRE(got[i] == expected(r * kCount + i));
        }
        // allreduce in place
        for (uint32_t r = 0; r < kRanks; ++r) {
          REQUIRE(hal_allreduce(send[r]->get(), send[r]->get(), kCount * kRanks, dtype, op,
                                comms.comms[r], session.stream(r)) == HAL_SUCCESS);
        }
        for (uint32_t r = 0; r < kRanks; ++r) {
          const auto got = decode(dtype, send[r]->read(session.stream(r)));
          for (size_t i = 0; i < kCount * kRanks; ++i) REQUIRE(got[i] == expected(i));
        }
      }
    }
  }
  CHECK(fake.live_comms() == live_before);  // destroyed, every one
}

TEST_CASE("data-moving collectives on NCCL match the host reference for every dtype", "[nccl]") {
  NcclSession session;
  Comms comms(session);
  constexpr size_t kCount = 29;
  uint32_t seed = 100;
  for (hal_dtype_t dtype : kDtypes) {
    CAPTURE(dtype);
    const size_t element = HAL_DTYPE_SIZE(dtype);
    const auto values = inputs(dtype, kCount * kRanks, seed++);
    std::vector<std::unique_ptr<NcclBuffer>> send, recv;
    for (uint32_t r = 0; r < kRanks; ++r) {
      send.push_back(std::make_unique<NcclBuffer>(session.device(r), kCount * kRanks * element));
      recv.push_back(std::make_unique<NcclBuffer>(session.device(r), kCount * kRanks * element));
      send[r]->write(encode(dtype, values[r]), session.stream(r));
    }
    // broadcast from root 1
    for (uint32_t r = 0; r < kRanks; ++r) {
      REQUIRE(hal_broadcast(send[r]->get(), recv[r]->get(), kCount, dtype, 1, comms.comms[r],
                            session.stream(r)) == HAL_SUCCESS);
    }
    for (uint32_t r = 0; r < kRanks; ++r) {
      const auto got = decode(dtype, recv[r]->read(session.stream(r)));
      for (size_t i = 0; i < kCount; ++i) REQUIRE(got[i] == values[1][i]);
    }
    // allgather: block q of every rank is rank q's first kCount values
    for (uint32_t r = 0; r < kRanks; ++r) {
      REQUIRE(hal_allgather(send[r]->get(), recv[r]->get(), kCount, dtype, comms.comms[r],
                            session.stream(r)) == HAL_SUCCESS);
    }
    for (uint32_t r = 0; r < kRanks; ++r) {
      const auto got = decode(dtype, recv[r]->read(session.stream(r)));
      for (uint32_t q = 0; q < kRanks; ++q) {
        for (size_t i = 0; i < kCount; ++i) REQUIRE(got[q * kCount + i] == values[q][i]);
      }
    }
    // alltoall: block q of rank r is block r of rank q
    for (uint32_t r = 0; r < kRanks; ++r) {
      REQUIRE(hal_alltoall(send[r]->get(), recv[r]->get(), kCount, dtype, comms.comms[r],
                           session.stream(r)) == HAL_SUCCESS);
    }
    for (uint32_t r = 0; r < kRanks; ++r) {
      const auto got = decode(dtype, recv[r]->read(session.stream(r)));
      for (uint32_t q = 0; q < kRanks; ++q) {
        for (size_t i = 0; i < kCount; ++i) {
          REQUIRE(got[q * kCount + i] == values[q][r * kCount + i]);
        }
      }
    }
    // an exchange of sends and receives in one group
    REQUIRE(hal_group_start() == HAL_SUCCESS);
    for (uint32_t r = 0; r < kRanks; ++r) {
      const uint32_t peer = 1 - r;
      REQUIRE(hal_send(send[r]->get(), kCount, dtype, peer, comms.comms[r], session.stream(r)) ==
              HAL_SUCCESS);
      REQUIRE(hal_recv(recv[r]->get(), kCount, dtype, peer, comms.comms[r], session.stream(r)) ==
              HAL_SUCCESS);
    }
    REQUIRE(hal_group_end() == HAL_SUCCESS);
    for (uint32_t r = 0; r < kRanks; ++r) {
      const auto got = decode(dtype, recv[r]->read(session.stream(r)));
      for (size_t i = 0; i < kCount; ++i) REQUIRE(got[i] == values[1 - r][i]);
    }
  }
}

TEST_CASE("ranks that are threads meet through HAL's unique id and NCCL's id travels over it",
          "[nccl]") {
  NcclSession session;
  FakeNccl fake;
  const long live_before = fake.live_comms();
  hal_comm_unique_id_t id{};
  REQUIRE(hal_comm_get_unique_id(&id) == HAL_SUCCESS);
  hal_comm_t comms[kRanks] = {};
  hal_result_t results[kRanks] = {HAL_ERROR_INTERNAL, HAL_ERROR_INTERNAL};
  std::vector<std::thread> threads;
  const hal_comm_config_t config = config_with_timeout(20000);
  for (uint32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      results[r] = hal_comm_init_rank(session.device(r), kRanks, &id, r, &config, &comms[r]);
    });
  }
  for (auto& thread : threads) thread.join();
  REQUIRE(results[0] == HAL_SUCCESS);
  REQUIRE(results[1] == HAL_SUCCESS);
  // NCCL communicators (the stand-in accepts only ids its ncclGetUniqueId
  // made, so rank 1 got rank 0's id), not the loader's host-staged ranks.
  CHECK(fake.live_comms() == live_before + kRanks);
  const auto values = inputs(HAL_DTYPE_F32, 64, 7);
  std::vector<std::unique_ptr<NcclBuffer>> buffers;
  for (uint32_t r = 0; r < kRanks; ++r) {
    buffers.push_back(std::make_unique<NcclBuffer>(session.device(r), 64 * 4));
    buffers[r]->write(encode(HAL_DTYPE_F32, values[r]), session.stream(r));
    REQUIRE(hal_allreduce(buffers[r]->get(), buffers[r]->get(), 64, HAL_DTYPE_F32, HAL_REDUCE_SUM,
                          comms[r], session.stream(r)) == HAL_SUCCESS);
  }
  for (uint32_t r = 0; r < kRanks; ++r) {
    const auto got = decode(HAL_DTYPE_F32, buffers[r]->read(session.stream(r)));
    for (size_t i = 0; i < 64; ++i) REQUIRE(got[i] == values[0][i] + values[1][i]);
  }
  for (hal_comm_t comm : comms) REQUIRE(hal_comm_destroy(comm) == HAL_SUCCESS);
  CHECK(fake.live_comms() == live_before);
}

TEST_CASE("rank 0 failing to make NCCL's id fails every rank at once", "[nccl]") {
  ScopedEnv fail("HAL_FAKE_NCCL_FAIL", "ncclGetUniqueId:3");
  NcclSession session;
  hal_comm_unique_id_t id{};
  REQUIRE(hal_comm_get_unique_id(&id) == HAL_SUCCESS);
  hal_comm_t comms[kRanks] = {};
  hal_result_t results[kRanks] = {HAL_SUCCESS, HAL_SUCCESS};
  std::string messages[kRanks];
  int64_t codes[kRanks] = {};
  const hal_comm_config_t config = config_with_timeout(20000);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      results[r] = hal_comm_init_rank(session.device(r), kRanks, &id, r, &config, &comms[r]);
      hal_error_detail_t detail{};
      detail.struct_size = sizeof(detail);
      if (hal_error_get_detail(&detail) == HAL_SUCCESS) {
        messages[r] = detail.message;
        codes[r] = detail.native_code;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(results[0] == HAL_ERROR_INTERNAL);
  CHECK(codes[0] == 3);
  CHECK_THAT(messages[0], Catch::Contains("ncclGetUniqueId: ncclInternalError (3)"));
  CHECK(results[1] == HAL_ERROR_REMOTE);
  CHECK_THAT(messages[1], Catch::Contains("rank 0 could not make an NCCL unique id"));
}

TEST_CASE("a hung peer: at the deadline the plugin calls ncclCommAbort and the call times out",
          "[nccl]") {
  ScopedEnv hang("HAL_FAKE_NCCL_HANG_RANK", "1");
  NcclSession session;
  FakeNccl fake;
  const long aborts_before = fake.abort_count();
  Comms comms(session, 300);
  std::vector<std::unique_ptr<NcclBuffer>> buffers;
  for (uint32_t r = 0; r < kRanks; ++r) {
    buffers.push_back(std::make_unique<NcclBuffer>(session.device(r), 256));
    REQUIRE(hal_allreduce(buffers[r]->get(), buffers[r]->get(), 64, HAL_DTYPE_F32, HAL_REDUCE_SUM,
                          comms.comms[r], session.stream(r)) == HAL_SUCCESS);
  }
  for (uint32_t r = 0; r < kRanks; ++r) {
    CAPTURE(r);
    REQUIRE(hal_stream_synchronize(session.stream(r)) == HAL_ERROR_DEVICE_LOST);
    const hal_error_detail_t detail = last_detail();
    CHECK(std::string(detail.plugin) == "cuda");
    CHECK(detail.native_code == kNcclInProgress);
    CHECK_THAT(detail.message, Catch::Contains("allreduce on rank") &&
                                   Catch::Contains("HAL_ERROR_TIMEOUT") &&
                                   Catch::Contains("ncclCommAbort called"));
    hal_result_t async = HAL_SUCCESS;
    REQUIRE(hal_comm_get_async_error(comms.comms[r], &async) == HAL_SUCCESS);
    CHECK(async == HAL_ERROR_TIMEOUT);
    // The loss is sticky, and the communicator refuses further calls.
    CHECK(hal_stream_synchronize(session.stream(r)) == HAL_ERROR_DEVICE_LOST);
    CHECK(hal_device_synchronize(session.device(r)) == HAL_ERROR_DEVICE_LOST);
  }
  CHECK(fake.abort_count() == aborts_before + kRanks);
}

TEST_CASE("hal_comm_abort ends a call blocked on a peer through ncclCommAbort", "[nccl]") {
  ScopedEnv hang("HAL_FAKE_NCCL_HANG_RANK", "1");
  NcclSession session;
  FakeNccl fake;
  const long aborts_before = fake.abort_count();
  const long live_before = fake.live_comms();
  const hal_comm_config_t config = config_with_timeout(600000);  // never reached
  hal_comm_t comms[kRanks] = {};
  REQUIRE(hal_comm_init_all(kRanks, session.devices(), &config, comms) == HAL_SUCCESS);
  NcclBuffer buffer0(session.device(0), 256);
  NcclBuffer buffer1(session.device(1), 256);
  REQUIRE(hal_allreduce(buffer0.get(), buffer0.get(), 64, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms[0],
                        session.stream(0)) == HAL_SUCCESS);
  REQUIRE(hal_allreduce(buffer1.get(), buffer1.get(), 64, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms[1],
                        session.stream(1)) == HAL_SUCCESS);
  REQUIRE(hal_comm_abort(comms[0]) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(session.stream(0)) == HAL_ERROR_DEVICE_LOST);
  CHECK_THAT(last_detail().message, Catch::Contains("the rank aborted"));
  REQUIRE(hal_comm_abort(comms[1]) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(session.stream(1)) == HAL_ERROR_DEVICE_LOST);
  CHECK(fake.abort_count() == aborts_before + kRanks);
  CHECK(fake.live_comms() == live_before);
}

TEST_CASE("a rank of this process aborting fails its peer's waiting call with REMOTE at once",
          "[nccl]") {
  NcclSession session;
  FakeNccl fake;
  const hal_comm_config_t config = config_with_timeout(600000);  // never reached
  hal_comm_t comms[kRanks] = {};
  REQUIRE(hal_comm_init_all(kRanks, session.devices(), &config, comms) == HAL_SUCCESS);
  NcclBuffer buffer(session.device(0), 256);
  // Rank 0 waits in an allreduce that rank 1 never joins; rank 1 aborts.
  REQUIRE(hal_allreduce(buffer.get(), buffer.get(), 64, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms[0],
                        session.stream(0)) == HAL_SUCCESS);
  REQUIRE(hal_comm_abort(comms[1]) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(session.stream(0)) == HAL_ERROR_DEVICE_LOST);
  CHECK_THAT(last_detail().message, Catch::Contains("rank 1 aborted"));
  hal_result_t async = HAL_SUCCESS;
  REQUIRE(hal_comm_get_async_error(comms[0], &async) == HAL_SUCCESS);
  CHECK(async == HAL_ERROR_REMOTE);
  REQUIRE(hal_comm_destroy(comms[0]) == HAL_SUCCESS);
}

TEST_CASE("an idle peer of an aborted rank stays healthy until it calls", "[nccl]") {
  NcclSession session;
  hal_comm_t comms[kRanks] = {};
  REQUIRE(hal_comm_init_all(kRanks, session.devices(), nullptr, comms) == HAL_SUCCESS);
  REQUIRE(hal_comm_abort(comms[0]) == HAL_SUCCESS);
  hal_result_t async = HAL_ERROR_INTERNAL;
  REQUIRE(hal_comm_get_async_error(comms[1], &async) == HAL_SUCCESS);
  CHECK(async == HAL_SUCCESS);
  NcclBuffer buffer(session.device(1), 64);
  CHECK(hal_allreduce(buffer.get(), buffer.get(), 16, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms[1],
                      session.stream(1)) == HAL_ERROR_REMOTE);
  CHECK_THAT(last_detail().message, Catch::Contains("rank 0 aborted"));
  REQUIRE(hal_comm_destroy(comms[1]) == HAL_SUCCESS);
}

TEST_CASE("ncclInProgress answers are polled until NCCL is done", "[nccl]") {
  ScopedEnv in_progress("HAL_FAKE_NCCL_IN_PROGRESS", "3");
  NcclSession session;
  Comms comms(session);
  const auto values = inputs(HAL_DTYPE_I32, 16, 11);
  std::vector<std::unique_ptr<NcclBuffer>> buffers;
  for (uint32_t r = 0; r < kRanks; ++r) {
    buffers.push_back(std::make_unique<NcclBuffer>(session.device(r), 64));
    buffers[r]->write(encode(HAL_DTYPE_I32, values[r]), session.stream(r));
    REQUIRE(hal_allreduce(buffers[r]->get(), buffers[r]->get(), 16, HAL_DTYPE_I32, HAL_REDUCE_MAX,
                          comms.comms[r], session.stream(r)) == HAL_SUCCESS);
  }
  for (uint32_t r = 0; r < kRanks; ++r) {
    const auto got = decode(HAL_DTYPE_I32, buffers[r]->read(session.stream(r)));
    for (size_t i = 0; i < 16; ++i) REQUIRE(got[i] == std::max(values[0][i], values[1][i]));
  }
}

TEST_CASE("an init NCCL never finishes times out, and the ranks are aborted", "[nccl]") {
  ScopedEnv hang("HAL_FAKE_NCCL_INIT_HANG", "1");
  NcclSession session;
  FakeNccl fake;
  const long aborts_before = fake.abort_count();
  const long live_before = fake.live_comms();
  const hal_comm_config_t config = config_with_timeout(200);
  hal_comm_t comms[kRanks] = {};
  REQUIRE(hal_comm_init_all(kRanks, session.devices(), &config, comms) == HAL_ERROR_TIMEOUT);
  const hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == kNcclInProgress);
  CHECK_THAT(detail.message,
             Catch::Contains("ncclCommInitRankConfig is still ncclInProgress (7)") &&
                 Catch::Contains("ncclCommAbort called"));
  CHECK(fake.abort_count() >= aborts_before + 1);
  CHECK(fake.live_comms() == live_before);
}

TEST_CASE("NCCL's error codes are the native code, with their names", "[nccl]") {
  SECTION("a failing collective") {
    ScopedEnv fail("HAL_FAKE_NCCL_FAIL", "ncclAllReduce:2");
    NcclSession session;
    Comms comms(session);
    NcclBuffer buffer(session.device(0), 64);
    REQUIRE(hal_allreduce(buffer.get(), buffer.get(), 16, HAL_DTYPE_F32, HAL_REDUCE_SUM,
                          comms.comms[0], session.stream(0)) == HAL_ERROR_INTERNAL);
    const hal_error_detail_t detail = last_detail();
    CHECK(detail.native_code == kNcclSystemError);
    CHECK_THAT(detail.message, Catch::Contains("ncclAllReduce failed: ncclSystemError (2)"));
    hal_result_t async = HAL_SUCCESS;
    REQUIRE(hal_comm_get_async_error(comms.comms[0], &async) == HAL_SUCCESS);
    CHECK(async == HAL_ERROR_INTERNAL);
    // The communicator failed: the next call is refused.
    CHECK(hal_broadcast(buffer.get(), buffer.get(), 16, HAL_DTYPE_F32, 0, comms.comms[0],
                        session.stream(0)) == HAL_ERROR_INVALID_STATE);
  }
  SECTION("a failing init") {
    ScopedEnv fail("HAL_FAKE_NCCL_FAIL", "ncclCommInitRankConfig:4");
    NcclSession session;
    hal_comm_t comms[kRanks] = {};
    REQUIRE(hal_comm_init_all(kRanks, session.devices(), nullptr, comms) ==
            HAL_ERROR_INVALID_ARGUMENT);
    const hal_error_detail_t detail = last_detail();
    CHECK(detail.native_code == kNcclInvalidArgument);
    CHECK_THAT(detail.message, Catch::Contains("ncclInvalidArgument (4)"));
  }
  SECTION("an asynchronous NCCL error") {
    ScopedEnv fail("HAL_FAKE_NCCL_ASYNC_ERROR", "6");
    NcclSession session;
    Comms comms(session);
    std::vector<std::unique_ptr<NcclBuffer>> buffers;
    for (uint32_t r = 0; r < kRanks; ++r) {
      buffers.push_back(std::make_unique<NcclBuffer>(session.device(r), 64));
      REQUIRE(hal_allreduce(buffers[r]->get(), buffers[r]->get(), 16, HAL_DTYPE_F32, HAL_REDUCE_SUM,
                            comms.comms[r], session.stream(r)) == HAL_SUCCESS);
    }
    for (uint32_t r = 0; r < kRanks; ++r) hal_stream_synchronize(session.stream(r));
    hal_result_t async = HAL_SUCCESS;
    REQUIRE(hal_comm_get_async_error(comms.comms[0], &async) == HAL_SUCCESS);
    CHECK(async == HAL_ERROR_REMOTE);
    NcclBuffer more(session.device(0), 64);
    CHECK(hal_allreduce(more.get(), more.get(), 16, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms.comms[0],
                        session.stream(0)) != HAL_SUCCESS);
    (void)kNcclRemoteError;
  }
}

TEST_CASE("without NCCL the loader's host-staged collectives serve the cuda devices", "[nccl]") {
  NcclSession session("/nonexistent/libnccl.so.2");
  Comms comms(session);
  const auto values = inputs(HAL_DTYPE_F64, 32, 21);
  std::vector<std::unique_ptr<NcclBuffer>> buffers;
  for (uint32_t r = 0; r < kRanks; ++r) {
    buffers.push_back(std::make_unique<NcclBuffer>(session.device(r), 32 * 8));
    buffers[r]->write(encode(HAL_DTYPE_F64, values[r]), session.stream(r));
  }
  // The loader's path blocks until the peers take part: one group.
  REQUIRE(hal_group_start() == HAL_SUCCESS);
  for (uint32_t r = 0; r < kRanks; ++r) {
    REQUIRE(hal_allreduce(buffers[r]->get(), buffers[r]->get(), 32, HAL_DTYPE_F64, HAL_REDUCE_SUM,
                          comms.comms[r], session.stream(r)) == HAL_SUCCESS);
  }
  REQUIRE(hal_group_end() == HAL_SUCCESS);
  for (uint32_t r = 0; r < kRanks; ++r) {
    const auto got = decode(HAL_DTYPE_F64, buffers[r]->read(session.stream(r)));
    for (size_t i = 0; i < 32; ++i) REQUIRE(got[i] == values[0][i] + values[1][i]);
  }
}

// --- alltoallv: the count exchange, then the data.

namespace {

constexpr uint8_t kUntouched = 0xa5;  // what the receive buffers hold before a call

// One rank's arrays of an alltoallv, in elements.
struct Uneven {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  size_t send_elements = 1, recv_elements = 1;  // the buffers' sizes (at least 1)
};

// Displacements for |counts|: the blocks in a shuffled order with gaps of
// 0..2 elements, or packed in rank order. Returns the span they need.
size_t place(const std::vector<size_t>& counts, bool packed, std::mt19937& random,
             std::vector<size_t>& displs) {
  std::vector<uint32_t> order(counts.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  if (!packed) std::shuffle(order.begin(), order.end(), random);
  std::uniform_int_distribution<size_t> gap(0, packed ? 0 : 2);
  displs.assign(counts.size(), 0);
  size_t at = 0;
  for (uint32_t peer : order) {
    at += gap(random);
    displs[peer] = at;
    at += counts[peer];
  }
  return std::max<size_t>(at, 1);
}

// Every rank's arrays, from a matrix |sends| (sends[from][to] elements) that
// agrees by construction.
std::vector<Uneven> layouts(const std::vector<std::vector<size_t>>& sends, bool packed,
                            std::mt19937& random) {
  std::vector<Uneven> all(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    all[r].send_counts = sends[r];
    for (uint32_t from = 0; from < kRanks; ++from) all[r].recv_counts.push_back(sends[from][r]);
    all[r].send_elements = place(all[r].send_counts, packed, random, all[r].send_displs);
    all[r].recv_elements = place(all[r].recv_counts, packed, random, all[r].recv_displs);
  }
  return all;
}

// What rank |r| receives: each block from its sender's send bytes, the gaps untouched.
std::vector<uint8_t> expected_recv(const std::vector<Uneven>& all,
                                   const std::vector<std::vector<uint8_t>>& sent, uint32_t r,
                                   size_t element) {
  std::vector<uint8_t> out(all[r].recv_elements * element, kUntouched);
  for (uint32_t from = 0; from < kRanks; ++from) {
    const size_t bytes = all[r].recv_counts[from] * element;
    const size_t source = all[from].send_displs[r] * element;
    const size_t target = all[r].recv_displs[from] * element;
    std::copy_n(sent[from].begin() + static_cast<std::ptrdiff_t>(source), bytes,
                out.begin() + static_cast<std::ptrdiff_t>(target));
  }
  return out;
}

// |body(r)| on a thread per rank (an alltoallv waits for its peers' counts);
// each result with the thread's last error message.
struct RankOutcome {
  hal_result_t result = HAL_ERROR_INTERNAL;
  std::string message;
};
template <class Body>
std::vector<RankOutcome> on_every_rank(Body body) {
  std::vector<RankOutcome> outcomes(kRanks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      outcomes[r].result = body(r);
      if (outcomes[r].result != HAL_SUCCESS) outcomes[r].message = hal_error_last_message();
    });
  }
  for (auto& thread : threads) thread.join();
  return outcomes;
}

// The send and receive buffers of every rank for |all|: seeded send bytes,
// the receive buffers filled with kUntouched.
struct UnevenBuffers {
  UnevenBuffers(const NcclSession& session, const std::vector<Uneven>& all, size_t element,
                std::mt19937& random) {
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint32_t r = 0; r < kRanks; ++r) {
      sent.emplace_back(all[r].send_elements * element);
      for (uint8_t& b : sent[r]) b = static_cast<uint8_t>(byte(random));
      send.push_back(std::make_unique<NcclBuffer>(session.device(r), sent[r].size()));
      recv.push_back(
          std::make_unique<NcclBuffer>(session.device(r), all[r].recv_elements * element));
      send[r]->write(sent[r], session.stream(r));
      recv[r]->write(std::vector<uint8_t>(all[r].recv_elements * element, kUntouched),
                     session.stream(r));
    }
  }
  std::vector<std::vector<uint8_t>> sent;
  std::vector<std::unique_ptr<NcclBuffer>> send, recv;
};

hal_result_t alltoallv_of(const Uneven& layout, const UnevenBuffers& buffers, uint32_t r,
                          hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream, bool packed) {
  return hal_alltoallv(buffers.send[r]->get(), layout.send_counts.data(),
                       packed ? nullptr : layout.send_displs.data(), buffers.recv[r]->get(),
                       layout.recv_counts.data(), packed ? nullptr : layout.recv_displs.data(),
                       dtype, comm, stream);
}

}  // namespace

TEST_CASE("alltoallv on NCCL matches the host reference: every dtype, zeros, displacements",
          "[nccl][alltoallv]") {
  NcclSession session;
  FakeNccl fake;
  Comms comms(session, 20000);
  std::mt19937 random(2026);
  std::uniform_int_distribution<size_t> count(0, 6);
  for (hal_dtype_t dtype : kDtypes) {
    const size_t element = HAL_DTYPE_SIZE(dtype);
    for (int shape = 0; shape < 4; ++shape) {
      // 0: random counts, zeros among them; 1: rank 1 sends nothing; 2: nobody
      // sends anything; 3: random counts, packed (NULL displacements).
      std::vector<std::vector<size_t>> sends(kRanks, std::vector<size_t>(kRanks));
      for (uint32_t from = 0; from < kRanks; ++from) {
        for (uint32_t to = 0; to < kRanks; ++to) {
          sends[from][to] = shape == 2 || (shape == 1 && from == 1) ? 0 : count(random);
        }
      }
      const bool packed = shape == 3;
      const auto all = layouts(sends, packed, random);
      CAPTURE(dtype, shape, sends);
      UnevenBuffers buffers(session, all, element, random);
      const long sends_before = fake.call_count("ncclSend");
      const auto outcomes = on_every_rank([&](uint32_t r) {
        return alltoallv_of(all[r], buffers, r, dtype, comms.comms[r], session.stream(r), packed);
      });
      // One ncclSend per non-empty block, none for an empty one.
      long blocks = 0;
      for (const auto& row : sends)
        blocks += std::count_if(row.begin(), row.end(), [](size_t c) { return c != 0; });
      CHECK(fake.call_count("ncclSend") == sends_before + blocks);
      for (uint32_t r = 0; r < kRanks; ++r) {
        CAPTURE(r, outcomes[r].message);
        REQUIRE(outcomes[r].result == HAL_SUCCESS);
        REQUIRE(buffers.recv[r]->read(session.stream(r)) ==
                expected_recv(all, buffers.sent, r, element));
      }
    }
  }
}

TEST_CASE("two alltoallv and an allreduce in one group share one count exchange",
          "[nccl][alltoallv]") {
  ScopedEnv in_progress("HAL_FAKE_NCCL_IN_PROGRESS", "2");  // and NCCL answers ncclInProgress
  NcclSession session;
  Comms comms(session, 20000);
  std::mt19937 random(77);
  std::uniform_int_distribution<size_t> count(0, 5);
  std::vector<std::vector<size_t>> first(kRanks, std::vector<size_t>(kRanks)), second = first;
  for (auto* matrix : {&first, &second}) {
    for (auto& row : *matrix) {
      for (size_t& c : row) c = count(random);
    }
  }
  const auto all_first = layouts(first, false, random);
  const auto all_second = layouts(second, false, random);
  UnevenBuffers buffers_first(session, all_first, 4, random);
  UnevenBuffers buffers_second(session, all_second, 2, random);
  const auto values = inputs(HAL_DTYPE_I32, 8, 5);
  std::vector<std::unique_ptr<NcclBuffer>> reduced;
  for (uint32_t r = 0; r < kRanks; ++r) {
    reduced.push_back(std::make_unique<NcclBuffer>(session.device(r), 32));
    reduced[r]->write(encode(HAL_DTYPE_I32, values[r]), session.stream(r));
  }
  const auto outcomes = on_every_rank([&](uint32_t r) {
    hal_result_t result = hal_group_start();
    const hal_comm_t comm = comms.comms[r];
    const hal_stream_t stream = session.stream(r);
    if (result == HAL_SUCCESS) {
      result = alltoallv_of(all_first[r], buffers_first, r, HAL_DTYPE_F32, comm, stream, false);
    }
    if (result == HAL_SUCCESS) {
      result = hal_allreduce(reduced[r]->get(), reduced[r]->get(), 8, HAL_DTYPE_I32, HAL_REDUCE_SUM,
                             comm, stream);
    }
    if (result == HAL_SUCCESS) {
      result = alltoallv_of(all_second[r], buffers_second, r, HAL_DTYPE_BF16, comm, stream, false);
    }
    const hal_result_t ended = hal_group_end();
    return result != HAL_SUCCESS ? result : ended;
  });
  for (uint32_t r = 0; r < kRanks; ++r) {
    CAPTURE(r, outcomes[r].message);
    REQUIRE(outcomes[r].result == HAL_SUCCESS);
    CHECK(buffers_first.recv[r]->read(session.stream(r)) ==
          expected_recv(all_first, buffers_first.sent, r, 4));
    CHECK(buffers_second.recv[r]->read(session.stream(r)) ==
          expected_recv(all_second, buffers_second.sent, r, 2));
    const auto got = decode(HAL_DTYPE_I32, reduced[r]->read(session.stream(r)));
    for (size_t i = 0; i < 8; ++i) CHECK(got[i] == values[0][i] + values[1][i]);
  }
}

TEST_CASE("one thread drives both ranks' alltoallv in one group", "[nccl][alltoallv]") {
  NcclSession session;
  Comms comms(session, 20000);
  std::mt19937 random(31);
  const auto all = layouts({{3, 0}, {2, 5}}, false, random);
  UnevenBuffers buffers(session, all, 2, random);
  // hal_group_end runs each rank's batch on a thread of its own: each waits for the other's counts.
  REQUIRE(hal_group_start() == HAL_SUCCESS);
  for (uint32_t r = 0; r < kRanks; ++r) {
    REQUIRE(alltoallv_of(all[r], buffers, r, HAL_DTYPE_F16, comms.comms[r], session.stream(r),
                         false) == HAL_SUCCESS);
  }
  REQUIRE(hal_group_end() == HAL_SUCCESS);
  for (uint32_t r = 0; r < kRanks; ++r) {
    CHECK(buffers.recv[r]->read(session.stream(r)) == expected_recv(all, buffers.sent, r, 2));
  }
}

TEST_CASE("alltoallv counts that disagree fail on every rank with ARGUMENT_MISMATCH, no data moved",
          "[nccl][alltoallv]") {
  NcclSession session;
  FakeNccl fake;
  Comms comms(session, 20000);
  std::mt19937 random(9);
  const std::vector<std::vector<size_t>> sends = {{2, 3}, {4, 1}};
  auto all = layouts(sends, false, random);
  UnevenBuffers buffers(session, all, 8, random);
  const long sends_before = fake.call_count("ncclSend");
  SECTION("a receive count") {
    all[0].recv_counts[1] = 3;  // rank 1 sends it 4
    const auto outcomes = on_every_rank([&](uint32_t r) {
      return alltoallv_of(all[r], buffers, r, HAL_DTYPE_F64, comms.comms[r], session.stream(r),
                          false);
    });
    for (uint32_t r = 0; r < kRanks; ++r) {
      CAPTURE(r);
      CHECK(outcomes[r].result == HAL_ERROR_ARGUMENT_MISMATCH);
      CHECK_THAT(outcomes[r].message,
                 Catch::Contains("rank 1 sends 4 elements to rank 0, which expects 3"));
    }
  }
  SECTION("the dtype") {
    const auto outcomes = on_every_rank([&](uint32_t r) {
      return alltoallv_of(all[r], buffers, r, r == 0 ? HAL_DTYPE_F64 : HAL_DTYPE_I64,
                          comms.comms[r], session.stream(r), false);
    });
    for (uint32_t r = 0; r < kRanks; ++r) {
      CAPTURE(r);
      CHECK(outcomes[r].result == HAL_ERROR_ARGUMENT_MISMATCH);
      CHECK_THAT(outcomes[r].message, Catch::Contains("dtype"));
    }
  }
  CHECK(fake.call_count("ncclSend") == sends_before);  // no data moved
  for (uint32_t r = 0; r < kRanks; ++r) {
    CHECK(buffers.recv[r]->read(session.stream(r)) ==
          std::vector<uint8_t>(all[r].recv_elements * 8, kUntouched));
  }
  // The communicator is still good: the agreeing call moves the data.
  all[0].recv_counts[1] = 4;
  const auto outcomes = on_every_rank([&](uint32_t r) {
    return alltoallv_of(all[r], buffers, r, HAL_DTYPE_F64, comms.comms[r], session.stream(r),
                        false);
  });
  for (uint32_t r = 0; r < kRanks; ++r) {
    REQUIRE(outcomes[r].result == HAL_SUCCESS);
    CHECK(buffers.recv[r]->read(session.stream(r)) == expected_recv(all, buffers.sent, r, 8));
  }
}

TEST_CASE("an alltoallv whose peer never calls times out, and its stream is lost",
          "[nccl][alltoallv]") {
  NcclSession session;
  FakeNccl fake;
  const long aborts_before = fake.abort_count();
  Comms comms(session, 300);
  std::mt19937 random(3);
  const auto all = layouts({{1, 2}, {3, 0}}, false, random);
  UnevenBuffers buffers(session, all, 4, random);
  // Only rank 0 calls: its count exchange waits for rank 1 until the deadline.
  const hal_result_t result =
      alltoallv_of(all[0], buffers, 0, HAL_DTYPE_F32, comms.comms[0], session.stream(0), false);
  CHECK(result == HAL_ERROR_TIMEOUT);
  const hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == kNcclInProgress);
  CHECK_THAT(detail.message, Catch::Contains("count exchange failed (HAL_ERROR_TIMEOUT)") &&
                                 Catch::Contains("ncclCommAbort called"));
  CHECK(fake.abort_count() == aborts_before + 1);
  hal_result_t async = HAL_SUCCESS;
  REQUIRE(hal_comm_get_async_error(comms.comms[0], &async) == HAL_SUCCESS);
  CHECK(async == HAL_ERROR_TIMEOUT);
  CHECK(hal_stream_synchronize(session.stream(0)) == HAL_ERROR_DEVICE_LOST);
  CHECK_THAT(last_detail().message, Catch::Contains("count exchange"));
}

TEST_CASE("an alltoallv waiting for its counts ends at an abort", "[nccl][alltoallv]") {
  NcclSession session;
  FakeNccl fake;
  const hal_comm_config_t config = config_with_timeout(600000);  // never reached
  hal_comm_t comms[kRanks] = {};
  REQUIRE(hal_comm_init_all(kRanks, session.devices(), &config, comms) == HAL_SUCCESS);
  std::mt19937 random(4);
  const auto all = layouts({{1, 2}, {3, 0}}, false, random);
  UnevenBuffers buffers(session, all, 4, random);
  // Rank 0 calls alone; the abort comes once its count exchange was issued.
  const long gathers_before = fake.call_count("ncclAllGather");
  RankOutcome outcome;
  std::atomic<bool> returned{false};
  std::thread caller([&] {
    outcome.result =
        alltoallv_of(all[0], buffers, 0, HAL_DTYPE_F32, comms[0], session.stream(0), false);
    outcome.message = hal_error_last_message();
    returned = true;
  });
  while (fake.call_count("ncclAllGather") == gathers_before && !returned) {
    std::this_thread::yield();
  }
  SECTION("its own rank aborts") {
    REQUIRE(hal_comm_abort(comms[0]) == HAL_SUCCESS);
    caller.join();
    CHECK(outcome.result == HAL_ERROR_INVALID_STATE);
    CHECK_THAT(outcome.message,
               Catch::Contains("count exchange failed") && Catch::Contains("the rank aborted"));
    REQUIRE(hal_comm_destroy(comms[1]) == HAL_SUCCESS);
  }
  SECTION("its peer in this process aborts") {
    REQUIRE(hal_comm_abort(comms[1]) == HAL_SUCCESS);
    caller.join();
    CHECK(outcome.result == HAL_ERROR_REMOTE);
    CHECK_THAT(outcome.message,
               Catch::Contains("count exchange failed") && Catch::Contains("rank 1 aborted"));
    REQUIRE(hal_comm_destroy(comms[0]) == HAL_SUCCESS);
  }
  CHECK(hal_stream_synchronize(session.stream(0)) == HAL_ERROR_DEVICE_LOST);
}

TEST_CASE("a failing ncclAllGather of the counts fails the alltoallv with NCCL's code",
          "[nccl][alltoallv]") {
  ScopedEnv fail("HAL_FAKE_NCCL_FAIL", "ncclAllGather:2");
  NcclSession session;
  Comms comms(session, 20000);
  std::mt19937 random(5);
  const auto all = layouts({{1, 2}, {3, 0}}, false, random);
  UnevenBuffers buffers(session, all, 4, random);
  const hal_result_t result =
      alltoallv_of(all[0], buffers, 0, HAL_DTYPE_F32, comms.comms[0], session.stream(0), false);
  CHECK(result == HAL_ERROR_INTERNAL);
  const hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == kNcclSystemError);
  CHECK_THAT(detail.message, Catch::Contains("ncclAllGather failed: ncclSystemError (2)"));
}
