// JUnit XML (one <testsuite> per device) and the console summary table.
#include <map>

#include "check.hpp"
#include "reports.hpp"

namespace halconform {

std::string junit_xml(const RunRecord& run) {
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"halconform\">\n";
  for (const DeviceCertification& device : run.devices) {
    size_t failures = 0, skipped = 0;
    double seconds = 0;
    for (const TestResult& test : device.tests) {
      failures += breaks_certification(test.status) ? 1 : 0;
      skipped += test.status == Status::kSkip || test.status == Status::kXfail ? 1 : 0;
      seconds += test.duration_s;
    }
    xml += strf(
        "  <testsuite name=\"%s\" tests=\"%zu\" failures=\"%zu\" skipped=\"%zu\" time=\"%.3f\">\n",
        xml_escape(device.plugin.name + " device " + std::to_string(device.device_index) + " (" +
                   device.properties.name + ")")
            .c_str(),
        device.tests.size(), failures, skipped, seconds);
    for (const TestResult& test : device.tests) {
      const size_t dot = test.name.rfind('.');
      xml += strf("    <testcase classname=\"%s\" name=\"%s\" time=\"%.3f\"",
                  xml_escape(test.name.substr(0, dot)).c_str(),
                  xml_escape(test.name.substr(dot + 1)).c_str(), test.duration_s);
      const std::string message = xml_escape(test.message);
      switch (test.status) {
        case Status::kPass:
          xml += "/>\n";
          break;
        case Status::kFail:
        case Status::kXpass:
          xml += strf(">\n      <failure type=\"%s\" message=\"%s\"/>\n    </testcase>\n",
                      status_name(test.status), message.c_str());
          break;
        case Status::kSkip:
        case Status::kXfail:
          xml += strf(">\n      <skipped message=\"%s: %s\"/>\n    </testcase>\n",
                      status_name(test.status), message.c_str());
          break;
      }
    }
    xml += "  </testsuite>\n";
  }
  return xml + "</testsuites>\n";
}

void print_summary(const RunRecord& run, std::FILE* out) {
  std::fprintf(out, "\n%-28s %-12s %6s %6s %6s %6s %6s  %s\n", "device", "profile", "pass", "fail",
               "skip", "xfail", "xpass", "verdict");
  for (const DeviceCertification& device : run.devices) {
    const std::string label = device.plugin.name + ":" + std::to_string(device.device_index);
    for (const std::string& profile : device.profiles) {
      std::map<Status, int> counts;
      for (const TestResult& test : device.tests) {
        if (test.profile == profile) ++counts[test.status];
      }
      std::fprintf(out, "%-28s %-12s %6d %6d %6d %6d %6d  %s\n", label.c_str(), profile.c_str(),
                   counts[Status::kPass], counts[Status::kFail], counts[Status::kSkip],
                   counts[Status::kXfail], counts[Status::kXpass],
                   device.profile_passed(profile) ? "PASS" : "FAIL");
    }
  }
  for (const DeviceCertification& device : run.devices) {
    const coverage::DeviceCoverage& c = device.coverage;
    std::fprintf(out,
                 "%s:%u kernels: %s; coverage: %zu paths covered, %zu uncovered, %zu waived, %zu "
                 "not applicable (tier %s)\n",
                 device.plugin.name.c_str(), device.device_index, device.kernels_status.c_str(),
                 c.covered, c.uncovered, c.waived, c.not_applicable, device.tier.c_str());
    if (device.kernels_status == "not certified") {
      std::fprintf(out, "  kernels: not certified: %s\n", device.kernels_detail.c_str());
    }
  }
  bool any_failure = false;
  for (const DeviceCertification& device : run.devices) {
    for (const TestResult& test : device.tests) {
      if (!breaks_certification(test.status)) continue;
      if (!any_failure) std::fprintf(out, "\nfailures:\n");
      any_failure = true;
      std::fprintf(out, "  %s:%u %s [%s] %s\n", device.plugin.name.c_str(), device.device_index,
                   test.name.c_str(), status_name(test.status), test.message.c_str());
    }
  }
  bool any_metric = false;
  for (const DeviceCertification& device : run.devices) {
    for (const Metric& metric : device.metrics) {
      if (!any_metric) std::fprintf(out, "\nmetrics:\n");
      any_metric = true;
      std::fprintf(out, "  %s:%u %-28s %14.4g %-10s", device.plugin.name.c_str(),
                   device.device_index, metric.name.c_str(), metric.value, metric.unit.c_str());
      if (!std::isnan(metric.declared) && metric.declared > 0) {
        std::fprintf(out, " declared %.4g (%.1f%%)", metric.declared,
                     100.0 * metric.value / metric.declared);
      }
      std::fprintf(out, "\n");
    }
  }
  std::fprintf(out, "\nhalconform: %s (%zu device(s), %.1f s)\n", run.passed() ? "PASS" : "FAIL",
               run.devices.size(), run.duration_s);
}

}  // namespace halconform
