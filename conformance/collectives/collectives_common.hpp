// What the collectives profile's tests share: the path a device's
// collectives take, the devices that carry the ranks, and RAII ranks of one
// hal_comm_init_all communicator.
#ifndef HAL_CONFORMANCE_COLLECTIVES_COLLECTIVES_COMMON_HPP_
#define HAL_CONFORMANCE_COLLECTIVES_COLLECTIVES_COMMON_HPP_

#include <hal.h>

#include <algorithm>
#include <vector>

#include "check.hpp"
#include "context.hpp"
#include "harness.hpp"

namespace halconform {

// The most ranks one test drives in this process.
inline constexpr uint32_t kMaxCollectiveRanks = 8;

// Which implementation the device's collectives run on, for test messages.
inline const char* collective_path(const TestContext& ctx) {
  return ctx.has(HAL_DEVICE_CAP_COLLECTIVES)
             ? "the plugin's collectives (HAL_DEVICE_CAP_COLLECTIVES)"
             : "the loader's host-staged fallback (no HAL_DEVICE_CAP_COLLECTIVES)";
}

// The device under test (rank 0), then its siblings in plugin order, at most
// kMaxCollectiveRanks.
inline std::vector<hal_device_t> rank_devices(const TestContext& ctx) {
  std::vector<hal_device_t> devices{ctx.device()};
  for (hal_device_t device : ctx.plugin_devices()) {
    if (device != ctx.device() && devices.size() < kMaxCollectiveRanks) devices.push_back(device);
  }
  return devices;
}

// Ranks 0..n-1 of one hal_comm_init_all communicator over devices[0..n-1],
// each with its own stream; destroyed (or left aborted) at scope exit.
class LocalRanks {
 public:
  LocalRanks(const std::vector<hal_device_t>& devices, uint32_t n, uint32_t timeout_ms) {
    std::vector<hal_comm_t> comms(n);
    hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
    config.timeout_ms = timeout_ms;
    HC_OK(hal_comm_init_all(n, devices.data(), &config, comms.data()));
    for (uint32_t i = 0; i < n; ++i) ranks.push_back({comms[i], nullptr, devices[i], i});
    for (coll_test::Rank& rank : ranks) {
      if (hal_result_t r = hal_stream_create(rank.device, 0, &rank.stream); r != HAL_SUCCESS) {
        release();
        require_result(r, HAL_SUCCESS, "hal_stream_create");
      }
    }
  }
  ~LocalRanks() { release(); }
  LocalRanks(const LocalRanks&) = delete;
  LocalRanks& operator=(const LocalRanks&) = delete;

  std::vector<coll_test::Rank> ranks;

 private:
  void release() {
    for (coll_test::Rank& rank : ranks) {
      if (rank.stream != nullptr) hal_stream_destroy(rank.stream);
      if (rank.comm != nullptr) hal_comm_destroy(rank.comm);
    }
    ranks.clear();
  }
};

// The communicator's asynchronous error.
inline hal_result_t async_error(hal_comm_t comm) {
  hal_result_t error = HAL_SUCCESS;
  HC_OK(hal_comm_get_async_error(comm, &error));
  return error;
}

}  // namespace halconform

#endif  // HAL_CONFORMANCE_COLLECTIVES_COLLECTIVES_COMMON_HPP_
