// The in-process tests' session and ranks: hal_init over one plugin, and
// ranks 0..n-1 of one hal_comm_init_all communicator, each with a stream.
#pragma once

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <vector>

#include "harness.hpp"

namespace coll_test {

// hal_init over one plugin directory and one plugin; shuts down at scope exit.
class Session {
 public:
  Session(const char* dir, const char* plugin) {
    setenv("HAL_CPU_DEVICES", "4", 1);  // ranks 1..4 each on its own device
    hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
    options.plugin_path = dir;
    options.plugins = plugin;
    options.skip_default_search = 1;
    REQUIRE(hal_init(&options) == HAL_SUCCESS);
  }
  ~Session() { hal_shutdown(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

// Ranks 0..n-1 of one hal_comm_init_all communicator over the first n devices.
class LocalRanks {
 public:
  explicit LocalRanks(uint32_t n, uint32_t timeout_ms = 20000) {
    std::vector<hal_device_t> devices(n);
    for (uint32_t i = 0; i < n; ++i) REQUIRE(hal_device_get(i, &devices[i]) == HAL_SUCCESS);
    std::vector<hal_comm_t> comms(n);
    hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
    config.timeout_ms = timeout_ms;
    REQUIRE(hal_comm_init_all(n, devices.data(), &config, comms.data()) == HAL_SUCCESS);
    for (uint32_t i = 0; i < n; ++i) {
      Rank rank{comms[i], nullptr, devices[i], i};
      REQUIRE(hal_stream_create(devices[i], 0, &rank.stream) == HAL_SUCCESS);
      ranks.push_back(rank);
    }
  }
  ~LocalRanks() {
    for (Rank& rank : ranks) {
      hal_stream_destroy(rank.stream);
      if (rank.comm != nullptr) hal_comm_destroy(rank.comm);
    }
  }
  std::vector<Rank> ranks;
};

}  // namespace coll_test
