// The outputs of a run: the JSON certification record (one file for the run,
// every device in it, see conformance/schema/certification.schema.json),
// JUnit XML, a self-contained HTML page, and the console summary. Each output
// is the one file its option names, whatever the number of devices.
#ifndef HAL_CONFORMANCE_HARNESS_REPORTS_HPP_
#define HAL_CONFORMANCE_HARNESS_REPORTS_HPP_

#include <cstdio>
#include <string>

#include "results.hpp"

namespace halconform {

// The record's layout version ("record_version"): 2 holds every device of the
// run in "devices" (1 was one file per device); 3 adds each device's tier,
// kernels status and coverage report.
inline constexpr uint32_t kRecordVersion = 3;

// The certification record of |run|: the run's fields and one entry per device.
std::string certification_json(const RunRecord& run);
std::string junit_xml(const RunRecord& run);
std::string html_report(const RunRecord& run);
void print_summary(const RunRecord& run, std::FILE* out);

bool write_file(const std::string& path, const std::string& text);
std::string xml_escape(const std::string& text);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_REPORTS_HPP_
