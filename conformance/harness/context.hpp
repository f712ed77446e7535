// What a test body gets: the device under test, its declared properties, a
// peer device of the same plugin, the conformance kernels, a seeded random
// source, and a place to put metrics.
#ifndef HAL_CONFORMANCE_HARNESS_CONTEXT_HPP_
#define HAL_CONFORMANCE_HARNESS_CONTEXT_HPP_

#include <hal.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "registry.hpp"

namespace halconform {

struct Metric {
  std::string name;  // e.g. "copy_bandwidth_h2d"
  double value;
  std::string unit;       // e.g. "bytes/s"
  double declared = NAN;  // the device's declared figure, NAN when there is none
  std::string test;       // the test that measured it
};

// Settings of one run that tests read.
struct RunSettings {
  std::string kernels_path;     // the CPU shared object with the conformance kernels
  std::string kernel_pack;      // a vendor's conformance kernel pack (manifest), "" = none
  std::string plugin_path;      // the plugin under test (a worker knows it; tests respawn with it)
  double stress_seconds = 2.0;  // how long each stress test runs
  Tier tier = Tier::kFull;      // which set runs, and how much each test does
  // The device's properties as the discovering process read them (hex of
  // the struct), so a worker can check they are the same in another process.
  std::string expected_properties;
};

class TestContext {
 public:
  TestContext(const TestCase& test, hal_device_t device, std::vector<hal_device_t> plugin_devices,
              const RunSettings& settings);

  hal_device_t device() const { return device_; }
  const hal_device_properties_t& properties() const { return properties_; }
  bool has(hal_device_cap_bits_t capability) const {
    return (properties_.capabilities & capability) != 0;
  }
  // Another device of the same plugin (the next one, cyclically), or nullptr.
  hal_device_t peer_device() const { return peer_; }
  const hal_device_properties_t& peer_properties() const { return peer_properties_; }
  const std::vector<hal_device_t>& plugin_devices() const { return plugin_devices_; }
  const std::string& kernels_path() const { return settings_.kernels_path; }
  const RunSettings& settings() const { return settings_; }
  Tier tier() const { return settings_.tier; }
  // |smoke|, |ci| or |full| by the run's tier: how much a test does.
  template <class T>
  T by_tier(T smoke, T ci, T full) const {
    return tier() == Tier::kSmoke ? smoke : tier() == Tier::kCi ? ci : full;
  }
  double stress_seconds() const { return settings_.stress_seconds; }
  // Seeded from the test's name: every run sees the same data.
  std::mt19937_64& random() { return random_; }
  const TestCase& test() const { return test_; }

  void record_metric(const std::string& name, double value, const std::string& unit,
                     double declared = NAN);
  // A sentence kept with a passing test's result (what was measured, what was scaled down).
  void note(const std::string& text);
  [[noreturn]] void skip(const std::string& reason);

  std::vector<Metric>& metrics() { return metrics_; }
  const std::string& notes() const { return notes_; }

 private:
  const TestCase& test_;
  hal_device_t device_;
  std::vector<hal_device_t> plugin_devices_;
  hal_device_t peer_ = nullptr;
  hal_device_properties_t properties_{};
  hal_device_properties_t peer_properties_{};
  const RunSettings& settings_;
  std::mt19937_64 random_;
  std::vector<Metric> metrics_;
  std::string notes_;
};

// The properties of |device|; throws TestFailure when the call fails.
hal_device_properties_t device_properties(hal_device_t device);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_CONTEXT_HPP_
