// The implementation list of an op kind (SPEC §17.3): each candidate is named
// before anything is planned (the plugin's own through its op_implementation
// entry, then the loader's portable ones), HAL_OPS_IMPLEMENTATIONS filters the
// names before any candidate is asked, and HAL_OPS_VERBOSE=1 prints once per
// plan who served it and why each earlier candidate declined. The mock plugin
// announces every op_plan_create on stderr (HAL_TEST_MOCK_TRACE_PLANS), so the
// test counts the plans it was asked for.
#include "test_support.hpp"

#include <cstdlib>
#include <filesystem>
#include <string>

using namespace loader_test;

namespace {

// An f32 scale of 16 elements: the one case the mock's mock.scale plans.
hal_op_unary_desc_t scale_desc() {
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_UNARY;
  desc.activation = HAL_ACTIVATION_NONE;
  desc.alpha = 2.0f;
  const int64_t shape[1] = {16};
  hal_tensor_desc_contiguous(&desc.x, HAL_DTYPE_F32, 1, shape);
  hal_tensor_desc_contiguous(&desc.out, HAL_DTYPE_F32, 1, shape);
  return desc;
}

// A softmax, which the mock names no implementation of its own for.
hal_op_softmax_desc_t softmax_desc() {
  hal_op_softmax_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_SOFTMAX;
  const int64_t shape[2] = {4, 8};
  hal_tensor_desc_contiguous(&desc.x, HAL_DTYPE_F32, 2, shape);
  hal_tensor_desc_contiguous(&desc.y, HAL_DTYPE_F32, 2, shape);
  return desc;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// One plan of |desc| on the mock's first device under HAL_OPS_IMPLEMENTATIONS=|list|
// (nullptr: unset): what it printed on stderr, its result, and (planned) who served it.
struct Outcome {
  hal_result_t result = HAL_ERROR_INTERNAL;
  std::string stderr_text;
  std::string implementation;
  std::string declines;  // the plan's, or the failure's message
};

Outcome plan_once(const hal_op_header_t& desc, const char* list) {
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_device_t device = device_of("mock");
  std::filesystem::create_directories(HAL_TEST_SCRATCH_DIR);
  Outcome outcome;
  if (list != nullptr) setenv("HAL_OPS_IMPLEMENTATIONS", list, 1);
  outcome.stderr_text =
      capture_stderr(std::string(HAL_TEST_SCRATCH_DIR) + "/implementation_list.txt", [&] {
        hal_op_plan_t plan = nullptr;
        outcome.result = hal_op_plan_create(device, &desc, 0, &plan);
        if (outcome.result == HAL_SUCCESS) {
          hal_op_plan_info_t info{};
          info.struct_size = sizeof(info);
          REQUIRE(hal_op_plan_get_info(plan, &info) == HAL_SUCCESS);
          outcome.implementation = info.implementation;
          outcome.declines = info.declines;
          REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
        } else {
          outcome.declines = hal_error_last_message();
        }
      });
  unsetenv("HAL_OPS_IMPLEMENTATIONS");
  return outcome;
}

// HAL_OPS_VERBOSE is read once per process: set before the first plan.
struct VerboseTracedPlans {
  VerboseTracedPlans() {
    setenv("HAL_OPS_VERBOSE", "1", 1);
    setenv("HAL_TEST_MOCK_TRACE_PLANS", "1", 1);
  }
  ~VerboseTracedPlans() {
    unsetenv("HAL_OPS_VERBOSE");
    unsetenv("HAL_TEST_MOCK_TRACE_PLANS");
  }
};

constexpr char kAsked[] = "mock: op_plan_create";

}  // namespace

TEST_CASE("the implementation list is filtered before any candidate is asked", "[ops][verbose]") {
  VerboseTracedPlans traced;
  const hal_op_unary_desc_t scale = scale_desc();

  SECTION("unfiltered, the plugin's own serves, asked once, said once") {
    const Outcome outcome = plan_once(scale.header, nullptr);
    CAPTURE(outcome.stderr_text);
    REQUIRE(outcome.result == HAL_SUCCESS);
    CHECK(outcome.implementation == "mock.scale");
    CHECK(outcome.declines.empty());
    CHECK(count_of(outcome.stderr_text, kAsked) == 1);
    CHECK(count_of(outcome.stderr_text, "hal_ops: plan unary ") == 1);
    CHECK(count_of(outcome.stderr_text, "-> mock.scale\n") == 1);
  }
  SECTION("a list that allows it by its first component") {
    const Outcome outcome = plan_once(scale.header, "mock");
    REQUIRE(outcome.result == HAL_SUCCESS);
    CHECK(outcome.implementation == "mock.scale");
    CHECK(count_of(outcome.stderr_text, kAsked) == 1);
  }
  SECTION("filtered out by name: never asked to plan, and the decline says why") {
    const Outcome outcome = plan_once(scale.header, "mock.other,portable");
    CAPTURE(outcome.stderr_text);
    CHECK(count_of(outcome.stderr_text, kAsked) == 0);
    CHECK(outcome.implementation != "mock.scale");
    CHECK_THAT(outcome.declines,
               Catch::Contains("mock.scale: excluded by HAL_OPS_IMPLEMENTATIONS"));
    // One verbose line for the plan, naming the decline (served by the portable
    // implementation or by none: the mock runs no portable kernels).
    CHECK(count_of(outcome.stderr_text, "hal_ops: plan unary ") == 1);
    CHECK_THAT(outcome.stderr_text,
               Catch::Contains("(declined: mock.scale: excluded by HAL_OPS_IMPLEMENTATIONS"));
  }
  SECTION("a kind the plugin names no implementation for is declined unasked") {
    const hal_op_softmax_desc_t softmax = softmax_desc();
    const Outcome outcome = plan_once(softmax.header, nullptr);
    CAPTURE(outcome.stderr_text);
    CHECK(count_of(outcome.stderr_text, kAsked) == 0);
    CHECK_THAT(outcome.declines,
               Catch::Contains("mock: the plugin has no implementation of its own for softmax"));
    CHECK(count_of(outcome.stderr_text, "hal_ops: plan softmax ") == 1);
  }
}

// SPEC §2: a plugin built against an older minor is never handed an op kind
// (or dtype) of a later one: declined unasked, with the reason, and the next
// implementation is tried.
TEST_CASE("a plugin of an older ABI minor is never asked about a newer op kind", "[ops][abi]") {
  VerboseTracedPlans traced;
  const hal_op_unary_desc_t scale = scale_desc();
  setenv("HAL_TEST_MOCK_ABI_MINOR", "0", 1);
  const Outcome outcome = plan_once(scale.header, nullptr);
  unsetenv("HAL_TEST_MOCK_ABI_MINOR");
  CAPTURE(outcome.stderr_text);
  CHECK(count_of(outcome.stderr_text, kAsked) == 0);
  CHECK(count_of(outcome.stderr_text, "mock: op_implementation") == 0);
  CHECK(outcome.implementation != "mock.scale");
  CHECK_THAT(
      outcome.declines,
      Catch::Contains("mock: the plugin declares ABI 1.0, older than 1.1, which added unary"));
  CHECK_THAT(outcome.stderr_text, Catch::Contains("(declined: mock: the plugin declares ABI 1.0"));

  // At the loader's own minor the same plugin is asked, and serves.
  const Outcome current = plan_once(scale.header, nullptr);
  REQUIRE(current.result == HAL_SUCCESS);
  CHECK(current.implementation == "mock.scale");
  CHECK(count_of(current.stderr_text, "mock: op_implementation") == 1);
}
