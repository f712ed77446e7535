// The test registry of halconform: every test registers itself once, at
// static-initialisation time, with the capabilities it needs; profiles are
// registered the same way by their folder's profile.cpp. The suite is compiled
// once and parametrised at run time over devices.
#ifndef HAL_CONFORMANCE_HARNESS_REGISTRY_HPP_
#define HAL_CONFORMANCE_HARNESS_REGISTRY_HPP_

#include <hal.h>

#include <cstdint>
#include <string>
#include <vector>

namespace halconform {

class TestContext;

// The sets of a run, smallest first (oneDNN's SMOKE / CI / NIGHTLY): a test
// belongs to the smallest tier it runs in and to every larger one; tests
// also scale their work with the run's tier (TestContext::tier).
enum class Tier { kSmoke = 0, kCi = 1, kFull = 2 };
const char* tier_name(Tier tier);  // "smoke", "ci", "full"

// What a device must declare for a test to apply. A test that applies and
// fails is a failure; a test that does not apply is skipped with the reason.
struct Requirements {
  hal_device_caps_t capabilities = 0;  // hal_device_cap_bits_t, all required
  uint32_t module_formats = 0;         // (1u << hal_module_format_t), all required
  uint32_t min_devices = 1;            // devices of the same plugin (peer tests need 2)
  Tier tier = Tier::kSmoke;            // the smallest tier the test runs in
};

using TestBody = void (*)(TestContext&);

struct TestCase {
  std::string name;     // "<profile>.<area>.<behaviour>", e.g. "core.memory.copy_directions"
  std::string profile;  // the part of the name before the first '.'
  std::string summary;  // one line: what the test proves
  Requirements requirements;
  TestBody body;
};

struct Profile {
  std::string name;
  int order;  // position in listings and reports
  std::string description;
};

class Registry {
 public:
  static Registry& instance();
  void add_test(TestCase test);
  void add_profile(Profile profile);
  // Profiles by order; tests by profile order, then name (registration order
  // across translation units is unspecified).
  std::vector<Profile> profiles() const;
  std::vector<const TestCase*> tests() const;
  const TestCase* find(const std::string& name) const;
  const Profile* find_profile(const std::string& name) const;

 private:
  std::vector<TestCase> tests_;
  std::vector<Profile> profiles_;
};

// Why |test| does not apply to a device with |properties| and |plugin_devices|
// devices in its plugin; empty when it applies.
std::string not_applicable_reason(const TestCase& test, const hal_device_properties_t& properties,
                                  uint32_t plugin_devices);

// fnmatch-style globs separated by ','; a name matches when any glob does.
bool matches_any_glob(const std::string& patterns, const std::string& name);

struct TestRegistrar {
  TestRegistrar(const char* name, const char* summary, Requirements requirements, TestBody body);
};
struct ProfileRegistrar {
  ProfileRegistrar(const char* name, int order, const char* description);
};

}  // namespace halconform

#define HALCONFORM_CONCAT_INNER(a, b) a##b
#define HALCONFORM_CONCAT(a, b) HALCONFORM_CONCAT_INNER(a, b)

// Defines and registers one test; the body follows as a block with |ctx|:
//   HALCONFORM_TEST("core.memory.alloc_sizes", "allocations of odd sizes", {}) { ... }
// The names are numbered by __COUNTER__, not __LINE__: two files compiled as one translation unit
// (a unity build) may register tests on the same line.
#define HALCONFORM_TEST(name, summary, ...) \
  HALCONFORM_TEST_NUMBERED(__COUNTER__, name, summary, __VA_ARGS__)
#define HALCONFORM_TEST_NUMBERED(id, name, summary, ...)                                 \
  static void HALCONFORM_CONCAT(halconform_test_, id)(::halconform::TestContext & ctx);  \
  static const ::halconform::TestRegistrar HALCONFORM_CONCAT(halconform_registrar_, id){ \
      name, summary, ::halconform::Requirements(__VA_ARGS__),                            \
      &HALCONFORM_CONCAT(halconform_test_, id)};                                         \
  static void HALCONFORM_CONCAT(halconform_test_,                                        \
                                id)([[maybe_unused]] ::halconform::TestContext & ctx)

// Registers a profile; each profile folder has exactly one, in profile.cpp.
#define HALCONFORM_PROFILE(name, order, description)                                 \
  static const ::halconform::ProfileRegistrar HALCONFORM_CONCAT(halconform_profile_, \
                                                                __COUNTER__) {       \
    name, order, description                                                         \
  }

#endif  // HAL_CONFORMANCE_HARNESS_REGISTRY_HPP_
