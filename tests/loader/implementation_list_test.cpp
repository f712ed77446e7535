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
  Outcome outcome;
  if (list != nullptr) setenv("HAL_OPS_IMPLEMENTATIONS", list, 1);
  outcome.stderr_text = capture_stderr([&] {
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

namespace {

// What hal_op_query_implementations says of |kind| (|desc| optional) on the
// mock's first device under HAL_OPS_IMPLEMENTATIONS=|list|, with its stderr.
struct Query {
  hal_result_t result = HAL_ERROR_INTERNAL;
  hal_op_implementations_info_t info{};
  std::string stderr_text;
};

Query query_once(hal_op_kind_t kind, const hal_op_header_t* desc, const char* list) {
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_device_t device = device_of("mock");
  Query query;
  query.info.struct_size = sizeof(query.info);
  if (list != nullptr) setenv("HAL_OPS_IMPLEMENTATIONS", list, 1);
  query.stderr_text = capture_stderr(
      [&] { query.result = hal_op_query_implementations(device, kind, desc, 0, &query.info); });
  unsetenv("HAL_OPS_IMPLEMENTATIONS");
  return query;
}

// The verdicts as hal_op_plan_info_t.declines writes them ("name: reason\n"
// for each one before the one that accepts), and the one that accepts.
std::pair<std::string, std::string> as_plan_would(const hal_op_implementations_info_t& info) {
  std::string declines;
  for (uint32_t i = 0; i < info.count; ++i) {
    const hal_op_candidate_t& candidate = info.candidates[i];
    if (candidate.verdict == HAL_OP_VERDICT_ACCEPTS) return {declines, candidate.name};
    CHECK(candidate.verdict == HAL_OP_VERDICT_DECLINES);
    declines += std::string(candidate.name) + ": " + candidate.reason + "\n";
  }
  return {declines, ""};
}

}  // namespace

// hal_op_query_implementations (SPEC §17.3): the same list, asked the same
// way as hal_op_plan_create, without keeping a plan.
TEST_CASE("hal_op_query_implementations says what each implementation of the list says",
          "[ops][query]") {
  VerboseTracedPlans traced;
  const hal_op_unary_desc_t scale = scale_desc();

  SECTION("without a descriptor: the names in order, none asked to plan") {
    const Query query = query_once(HAL_OP_UNARY, nullptr, nullptr);
    REQUIRE(query.result == HAL_SUCCESS);
    CHECK(query.info.kind == HAL_OP_UNARY);
    REQUIRE(query.info.count >= 1);
    CHECK(std::string(query.info.candidates[0].name) == "mock.scale");
    for (uint32_t i = 0; i < query.info.count; ++i) {
      CHECK(query.info.candidates[i].verdict == HAL_OP_VERDICT_NOT_ASKED);
      CHECK(query.info.candidates[i].reason[0] == '\0');
    }
    CHECK(count_of(query.stderr_text, kAsked) == 0);
  }
  SECTION("without a descriptor, a kind the plugin has none of its own for declines with why") {
    const Query query = query_once(HAL_OP_SOFTMAX, nullptr, nullptr);
    REQUIRE(query.result == HAL_SUCCESS);
    REQUIRE(query.info.count >= 1);
    CHECK(std::string(query.info.candidates[0].name) == "mock");
    CHECK(query.info.candidates[0].verdict == HAL_OP_VERDICT_DECLINES);
    CHECK(std::string(query.info.candidates[0].reason) ==
          "the plugin has no implementation of its own for softmax");
  }
  SECTION("a descriptor the plugin accepts: asked once, accepts, the rest not asked") {
    const Query query = query_once(HAL_OP_UNARY, &scale.header, nullptr);
    REQUIRE(query.result == HAL_SUCCESS);
    REQUIRE(query.info.count >= 1);
    CHECK(query.info.candidates[0].verdict == HAL_OP_VERDICT_ACCEPTS);
    for (uint32_t i = 1; i < query.info.count; ++i) {
      CHECK(query.info.candidates[i].verdict == HAL_OP_VERDICT_NOT_ASKED);
    }
    CHECK(count_of(query.stderr_text, kAsked) == 1);
    // Nothing planned: no plan line of HAL_OPS_VERBOSE.
    CHECK(count_of(query.stderr_text, "hal_ops: plan ") == 0);
  }
  SECTION("every case says what hal_op_plan_create's info and error say") {
    hal_op_unary_desc_t strided = scale;  // every other element: the mock declines when asked
    strided.x.strides[0] = 2;
    const hal_op_softmax_desc_t softmax = softmax_desc();
    struct Case {
      const char* name;
      const hal_op_header_t* desc;
      const char* list;
    } const cases[] = {{"accepted", &scale.header, nullptr},
                       {"declined when asked", &strided.header, nullptr},
                       {"declined unasked", &softmax.header, nullptr},
                       {"excluded", &scale.header, "mock.other,portable"}};
    for (const Case& c : cases) {
      CAPTURE(c.name);
      const Query query = query_once(c.desc->kind, c.desc, c.list);
      REQUIRE(query.result == HAL_SUCCESS);
      const Outcome outcome = plan_once(*c.desc, c.list);
      const auto [declines, accepted] = as_plan_would(query.info);
      if (outcome.result == HAL_SUCCESS) {
        CHECK(accepted == outcome.implementation);
        CHECK(declines == outcome.declines);
      } else {
        CHECK(accepted.empty());
        // The error lists the same declines, "; "-separated.
        std::string joined = declines;
        for (size_t at = joined.find('\n'); at != std::string::npos; at = joined.find('\n', at)) {
          joined.replace(at, 1, at + 1 == joined.size() ? "" : "; ");
        }
        CHECK_THAT(outcome.declines, Catch::EndsWith(joined));
      }
    }
  }
  SECTION("declined when asked: the plugin's own reason") {
    hal_op_unary_desc_t strided = scale;
    strided.x.strides[0] = 2;
    const Query query = query_once(HAL_OP_UNARY, &strided.header, nullptr);
    REQUIRE(query.result == HAL_SUCCESS);
    CHECK(query.info.candidates[0].verdict == HAL_OP_VERDICT_DECLINES);
    CHECK_THAT(query.info.candidates[0].reason, Catch::Contains("mock: only dense tensors"));
    CHECK(count_of(query.stderr_text, kAsked) == 1);
  }
  SECTION("excluded by HAL_OPS_IMPLEMENTATIONS: never asked, with or without a descriptor") {
    for (const hal_op_header_t* desc :
         {&scale.header, static_cast<const hal_op_header_t*>(nullptr)}) {
      const Query query = query_once(HAL_OP_UNARY, desc, "portable");
      REQUIRE(query.result == HAL_SUCCESS);
      CHECK(query.info.candidates[0].verdict == HAL_OP_VERDICT_DECLINES);
      CHECK(std::string(query.info.candidates[0].reason) == "excluded by HAL_OPS_IMPLEMENTATIONS");
      CHECK(count_of(query.stderr_text, kAsked) == 0);
    }
  }
}

TEST_CASE("hal_op_query_implementations refuses bad arguments and writes nothing", "[ops][query]") {
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_device_t device = device_of("mock");
  const hal_op_unary_desc_t scale = scale_desc();
  hal_op_implementations_info_t info{};
  info.struct_size = sizeof(info);
  info.count = 77;  // a canary: a refused call leaves it

  CHECK(hal_op_query_implementations(device, HAL_OP_UNARY, &scale.header, 0, nullptr) ==
        HAL_ERROR_NULL_POINTER);
  CHECK(hal_op_query_implementations(nullptr, HAL_OP_UNARY, &scale.header, 0, &info) ==
        HAL_ERROR_INVALID_HANDLE);
  CHECK(hal_op_query_implementations(device, static_cast<hal_op_kind_t>(9999), nullptr, 0, &info) ==
        HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(hal_error_last_message(), Catch::Contains("kind 9999 is not a hal_op_kind_t"));
  CHECK(hal_op_query_implementations(device, HAL_OP_SOFTMAX, &scale.header, 0, &info) ==
        HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(hal_error_last_message(), Catch::Contains("not the kind asked about (softmax)"));
  CHECK(hal_op_query_implementations(device, HAL_OP_UNARY, nullptr, 0x80, &info) ==
        HAL_ERROR_INVALID_ARGUMENT);
  CHECK(hal_op_query_implementations(device, HAL_OP_UNARY, &scale.header, 0x80, &info) ==
        HAL_ERROR_INVALID_ARGUMENT);
  hal_op_unary_desc_t broken = scale;  // out's shape differs from x's
  broken.out.shape[0] = 15;
  CHECK(hal_op_query_implementations(device, HAL_OP_UNARY, &broken.header, 0, &info) ==
        HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(hal_error_last_message(), Catch::Contains("unary"));
  CHECK(info.count == 77);
  hal_op_implementations_info_t small{};
  small.struct_size = offsetof(hal_op_implementations_info_t, candidates);
  CHECK(hal_op_query_implementations(device, HAL_OP_UNARY, nullptr, 0, &small) ==
        HAL_ERROR_INVALID_ARGUMENT);
}
