// The outputs of a run: the JSON certification record (one per device, see
// conformance/schema/certification.schema.json), JUnit XML, a self-contained
// HTML page, and the console summary.
#ifndef HAL_CONFORMANCE_HARNESS_REPORTS_HPP_
#define HAL_CONFORMANCE_HARNESS_REPORTS_HPP_

#include <cstdio>
#include <string>

#include "results.hpp"

namespace halconform {

// The certification record of one device of |run|.
std::string certification_json(const RunRecord& run, const DeviceCertification& device);
std::string junit_xml(const RunRecord& run);
std::string html_report(const RunRecord& run);
void print_summary(const RunRecord& run, std::FILE* out);

// |path| as given for one device; with several, "<stem>.<plugin>-<index><ext>".
std::string per_device_path(const std::string& path, const DeviceCertification& device,
                            size_t device_count);
bool write_file(const std::string& path, const std::string& text);
std::string xml_escape(const std::string& text);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_REPORTS_HPP_
