#include "registry.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <tuple>

#include "names.hpp"

namespace halconform {

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kSmoke:
      return "smoke";
    case Tier::kCi:
      return "ci";
    case Tier::kFull:
      return "full";
  }
  return "full";
}

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

void Registry::add_test(TestCase test) {
  tests_.push_back(std::move(test));
}

void Registry::add_profile(Profile profile) {
  profiles_.push_back(std::move(profile));
}

std::vector<Profile> Registry::profiles() const {
  std::vector<Profile> sorted = profiles_;
  std::sort(sorted.begin(), sorted.end(),
            [](const Profile& a, const Profile& b) { return a.order < b.order; });
  return sorted;
}

std::vector<const TestCase*> Registry::tests() const {
  std::vector<const TestCase*> sorted;
  for (const TestCase& test : tests_) sorted.push_back(&test);
  auto order_of = [this](const TestCase* test) {
    const Profile* profile = find_profile(test->profile);
    return profile != nullptr ? profile->order : 1 << 30;
  };
  std::sort(sorted.begin(), sorted.end(), [&](const TestCase* a, const TestCase* b) {
    return std::make_tuple(order_of(a), a->name) < std::make_tuple(order_of(b), b->name);
  });
  return sorted;
}

const TestCase* Registry::find(const std::string& name) const {
  for (const TestCase& test : tests_) {
    if (test.name == name) return &test;
  }
  return nullptr;
}

const Profile* Registry::find_profile(const std::string& name) const {
  for (const Profile& profile : profiles_) {
    if (profile.name == name) return &profile;
  }
  return nullptr;
}

std::string not_applicable_reason(const TestCase& test, const hal_device_properties_t& properties,
                                  uint32_t plugin_devices) {
  const Requirements& needs = test.requirements;
  const hal_device_caps_t missing_caps = needs.capabilities & ~properties.capabilities;
  if (missing_caps != 0) {
    return "device does not declare " + capability_names(missing_caps);
  }
  const uint32_t missing_formats = needs.module_formats & ~properties.module_formats;
  if (missing_formats != 0) {
    return "device does not load " + module_format_names(missing_formats);
  }
  if (plugin_devices < needs.min_devices) {
    return "needs " + std::to_string(needs.min_devices) + " devices of the plugin, it has " +
           std::to_string(plugin_devices);
  }
  return {};
}

bool matches_any_glob(const std::string& patterns, const std::string& name) {
  size_t start = 0;
  while (start <= patterns.size()) {
    size_t end = patterns.find(',', start);
    if (end == std::string::npos) end = patterns.size();
    const std::string glob = patterns.substr(start, end - start);
    if (!glob.empty() && fnmatch(glob.c_str(), name.c_str(), 0) == 0) return true;
    start = end + 1;
  }
  return false;
}

TestRegistrar::TestRegistrar(const char* name, const char* summary, Requirements requirements,
                             TestBody body) {
  const std::string full = name;
  Registry::instance().add_test(
      TestCase{full, full.substr(0, full.find('.')), summary, requirements, body});
}

ProfileRegistrar::ProfileRegistrar(const char* name, int order, const char* description) {
  Registry::instance().add_profile(Profile{name, order, description});
}

}  // namespace halconform
