#include "check.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace halconform {
namespace {

std::string location(const SourceLocation& where) {
  const char* file = std::strrchr(where.file, '/');
  return std::string(file != nullptr ? file + 1 : where.file) + ":" + std::to_string(where.line);
}

}  // namespace

std::string strf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int length = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string text(length > 0 ? static_cast<size_t>(length) : 0, '\0');
  if (length > 0) std::vsnprintf(text.data(), text.size() + 1, format, args);
  va_end(args);
  return text;
}

void fail(const std::string& message, SourceLocation where) {
  throw TestFailure(location(where) + ": " + message);
}

void fail_condition(const char* condition, const std::string& message, SourceLocation where) {
  std::string text = condition;
  text.append(": ").append(message);
  fail(text, where);
}

void require_result(hal_result_t actual, hal_result_t expected, const char* call,
                    SourceLocation where) {
  if (actual == expected) return;
  std::string message = std::string(call) + " returned " + hal_result_string(actual) +
                        ", expected " + hal_result_string(expected);
  if (actual != HAL_SUCCESS && actual != HAL_NOT_READY) {
    message += std::string(" (detail: ") + hal_error_last_message() + ")";
  }
  fail(message, where);
}

}  // namespace halconform
