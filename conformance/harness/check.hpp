// How a test body says that something is wrong: it throws TestFailure (the
// first broken promise ends the test, with a sentence naming the call, the
// result and the loader's error detail) or TestSkipped (the device cannot run
// it, decided at run time, e.g. too little memory for a case).
#ifndef HAL_CONFORMANCE_HARNESS_CHECK_HPP_
#define HAL_CONFORMANCE_HARNESS_CHECK_HPP_

#include <hal.h>

#include <stdexcept>
#include <string>

namespace halconform {

struct TestFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct TestSkipped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Where a check was written: the caller's file and line. std::source_location needs
// __builtin_source_location, which clang 14 (the sanitizer trees' compiler) lacks; these
// builtins take the caller's position in GCC and clang alike when used as default arguments.
struct SourceLocation {
  const char* file;
  unsigned line;
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          unsigned line = __builtin_LINE()) {
    return {file, line};
  }
};

// printf into a std::string.
std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void fail(const std::string& message,
                       SourceLocation where = SourceLocation::current());

// HC_REQUIRE's failure: "<condition>: <message>".
[[noreturn]] void fail_condition(const char* condition, const std::string& message,
                                 SourceLocation where = SourceLocation::current());

// |call| returned |actual| and the test wanted |expected|.
void require_result(hal_result_t actual, hal_result_t expected, const char* call,
                    SourceLocation where = SourceLocation::current());

}  // namespace halconform

// The call must succeed.
#define HC_OK(call) ::halconform::require_result((call), HAL_SUCCESS, #call)
// The call must return exactly |expected|.
#define HC_EXPECT_RESULT(call, expected) ::halconform::require_result((call), (expected), #call)
// |condition| must hold; the message (a std::string expression) is built only on failure.
#define HC_REQUIRE(condition, message)                                     \
  do {                                                                     \
    if (!(condition)) ::halconform::fail_condition(#condition, (message)); \
  } while (0)

#endif  // HAL_CONFORMANCE_HARNESS_CHECK_HPP_
