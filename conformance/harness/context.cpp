#include "context.hpp"

#include <functional>

#include "check.hpp"

namespace halconform {

hal_device_properties_t device_properties(hal_device_t device) {
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  HC_OK(hal_device_get_properties(device, &properties));
  return properties;
}

TestContext::TestContext(const TestCase& test, hal_device_t device,
                         std::vector<hal_device_t> plugin_devices, const RunSettings& settings)
    : test_(test),
      device_(device),
      plugin_devices_(std::move(plugin_devices)),
      settings_(settings),
      random_(std::hash<std::string>{}(test.name)) {
  properties_ = device_properties(device);
  for (size_t i = 0; i < plugin_devices_.size(); ++i) {
    if (plugin_devices_[i] != device) continue;
    if (plugin_devices_.size() > 1) {
      peer_ = plugin_devices_[(i + 1) % plugin_devices_.size()];
      peer_properties_ = device_properties(peer_);
    }
  }
}

void TestContext::record_metric(const std::string& name, double value, const std::string& unit,
                                double declared) {
  metrics_.push_back(Metric{name, value, unit, declared, test_.name});
}

void TestContext::note(const std::string& text) {
  if (!notes_.empty()) notes_ += "; ";
  notes_ += text;
}

void TestContext::skip(const std::string& reason) {
  throw TestSkipped(reason);
}

}  // namespace halconform
