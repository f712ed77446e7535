// The pipe protocol between halconform and its --worker processes. One line
// per record, fields separated by tabs, text fields escaped (\\, \t, \n):
//   B <test>                                 a test began (the watchdog starts)
//   M <test> <name> <value> <unit> <declared> a metric ("" declared: none)
//   E <test> <status> <seconds> <message>    a test ended
//   C <test> <path> <path>...                the documented paths the test exercised
//   X <message>                              the worker cannot run at all (hal_init failed)
#ifndef HAL_CONFORMANCE_HARNESS_PROTOCOL_HPP_
#define HAL_CONFORMANCE_HARNESS_PROTOCOL_HPP_

#include <string>
#include <vector>

namespace halconform {

// The worker writes its records to this descriptor; stdout and stderr stay free for plugins.
inline constexpr int kResultFd = 3;

std::string escape_field(const std::string& text);
std::string unescape_field(const std::string& text);
std::vector<std::string> split_record(const std::string& line);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_PROTOCOL_HPP_
