// The HTML report: one self-contained page (inline CSS and SVG, no script, no
// external resource) with the verdict at a glance, failures first, and a bar
// chart of every metric against its declared figure.
#include <algorithm>

#include "check.hpp"
#include "names.hpp"
#include "reports.hpp"

namespace halconform {
namespace {

constexpr const char* kStyle = R"(
body{font-family:sans-serif;margin:24px;color:#222;max-width:1150px}
h1{margin:0 0 8px 0} h2{margin-top:28px;border-bottom:1px solid #ccc}
.verdict{display:inline-block;padding:10px 28px;font-size:32px;font-weight:bold;color:#fff;border-radius:6px}
.pass{background:#2e7d32}.fail{background:#c62828}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3} .st-fail,.st-xpass{color:#c62828;font-weight:bold}
.st-pass{color:#2e7d32}.st-skip{color:#777}.st-xfail{color:#ef6c00}
.msg{font-family:monospace;white-space:pre-wrap;max-width:700px;word-break:break-word}
.small{color:#666;font-size:12px}
)";

std::string status_cell(Status status) {
  return strf("<td class=\"st-%s\">%s</td>", status_name(status), status_name(status));
}

// Horizontal bars: achieved (blue) and declared (grey) per metric, each
// scaled to the larger of the two so the ratio reads at a glance.
std::string metrics_svg(const std::vector<Metric>& metrics) {
  if (metrics.empty()) return "<p class=\"small\">no metrics recorded</p>";
  const int row_height = 46, label_width = 260, bar_width = 560;
  const int height = row_height * static_cast<int>(metrics.size()) + 10;
  std::string svg = strf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"12\">",
      label_width + bar_width + 240, height);
  int y = 5;
  for (const Metric& metric : metrics) {
    const bool declared = !std::isnan(metric.declared) && metric.declared > 0;
    const double scale = std::max(metric.value, declared ? metric.declared : 0.0);
    const double achieved_width = scale > 0 ? bar_width * metric.value / scale : 0;
    svg += strf("<text x=\"0\" y=\"%d\">%s</text>", y + 14, xml_escape(metric.name).c_str());
    svg += strf("<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"14\" fill=\"#1565c0\"/>",
                label_width, y + 3, std::max(1.0, achieved_width));
    svg +=
        strf("<text x=\"%d\" y=\"%d\">%.4g %s%s</text>", label_width + bar_width + 8, y + 14,
             metric.value, xml_escape(metric.unit).c_str(), declared ? "" : " (nothing declared)");
    if (declared) {
      svg += strf("<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"14\" fill=\"#9e9e9e\"/>",
                  label_width, y + 21, bar_width * metric.declared / scale);
      svg += strf("<text x=\"%d\" y=\"%d\">declared %.4g (achieved %.1f%%)</text>",
                  label_width + bar_width + 8, y + 32, metric.declared,
                  100.0 * metric.value / metric.declared);
    }
    y += row_height;
  }
  return svg + "</svg>";
}

// The coverage report: the counts, then every path that no test exercised
// (uncovered first), then every path with the tests that exercised it.
std::string coverage_section(const DeviceCertification& device) {
  const coverage::DeviceCoverage& c = device.coverage;
  std::string html = strf(
      "<h3>Coverage of the documented paths</h3><p>%zu covered, %zu uncovered, %zu waived, %zu "
      "not applicable; kernels: <b>%s</b>%s%s; tier %s</p>",
      c.covered, c.uncovered, c.waived, c.not_applicable, xml_escape(device.kernels_status).c_str(),
      device.kernels_detail.empty() ? "" : " (",
      (xml_escape(device.kernels_detail) + (device.kernels_detail.empty() ? "" : ")")).c_str(),
      xml_escape(device.tier).c_str());
  if (!c.unlisted.empty()) {
    html += "<p class=\"small\">recorded but not listed: ";
    for (const std::string& path : c.unlisted) html += xml_escape(path) + " ";
    html += "</p>";
  }
  html +=
      "<details><summary>every path and the tests that exercised it</summary><table><tr><th>"
      "path</th><th>status</th><th>defined in</th><th>tests (or why not)</th></tr>";
  for (const coverage::PathStatus wanted :
       {coverage::PathStatus::kUncovered, coverage::PathStatus::kWaived,
        coverage::PathStatus::kNotApplicable, coverage::PathStatus::kCovered}) {
    for (const coverage::PathResult& path : c.paths) {
      if (path.status != wanted) continue;
      std::string detail = path.reason;
      for (size_t i = 0; i < path.tests.size() && i < 6; ++i) {
        detail += (i == 0 ? "" : ", ") + path.tests[i];
      }
      if (path.tests.size() > 6) detail += strf(" and %zu more", path.tests.size() - 6);
      const char* status = coverage::path_status_name(path.status);
      html += strf(
          "<tr><td>%s</td><td class=\"st-%s\">%s</td><td>%s</td><td class=\"msg\">%s</td>"
          "</tr>",
          xml_escape(path.name).c_str(),
          path.status == coverage::PathStatus::kUncovered ? "fail"
          : path.status == coverage::PathStatus::kCovered ? "pass"
                                                          : "skip",
          status, xml_escape(path.source).c_str(), xml_escape(detail).c_str());
    }
  }
  return html + "</table></details>";
}

std::string device_section(const DeviceCertification& device) {
  const hal_device_properties_t& p = device.properties;
  std::string html = strf(
      "<h2>%s device %u: %s <span class=\"verdict %s\" style=\"font-size:16px;padding:2px "
      "10px\">%s</span></h2>",
      xml_escape(device.plugin.name).c_str(), device.device_index, xml_escape(p.name).c_str(),
      device.passed() ? "pass" : "fail", device.passed() ? "PASS" : "FAIL");
  html += strf(
      "<p class=\"small\">plugin %s %s (%s), build %s; fingerprint %s; uuid %s; known failures: "
      "%s</p>",
      xml_escape(device.plugin.name).c_str(), xml_escape(device.plugin.version).c_str(),
      xml_escape(device.plugin.vendor).c_str(), xml_escape(device.plugin.build_id).c_str(),
      device.fingerprint.c_str(), uuid_string(p.uuid).c_str(),
      device.expectations_path.empty() ? "none" : xml_escape(device.expectations_path).c_str());
  html +=
      "<table><tr><th>profile</th><th>verdict</th><th>pass</th><th>fail</th><th>skip</"
      "th><th>xfail</th><th>xpass</th></tr>";
  for (const std::string& profile : device.profiles) {
    int counts[5] = {};
    for (const TestResult& test : device.tests) {
      if (test.profile == profile) ++counts[static_cast<int>(test.status)];
    }
    const bool passed = device.profile_passed(profile);
    html += strf(
        "<tr><td>%s</td><td "
        "class=\"st-%s\">%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>",
        profile.c_str(), passed ? "pass" : "fail", passed ? "PASS" : "FAIL", counts[0], counts[1],
        counts[2], counts[3], counts[4]);
  }
  html += "</table><h3>Performance: achieved against declared</h3>" + metrics_svg(device.metrics);
  // Failures first, then known failures, then the rest in suite order.
  std::vector<const TestResult*> ordered;
  for (const TestResult& test : device.tests) ordered.push_back(&test);
  auto rank = [](Status status) {
    return breaks_certification(status) ? 0 : status == Status::kXfail ? 1 : 2;
  };
  std::stable_sort(ordered.begin(), ordered.end(), [&](const TestResult* a, const TestResult* b) {
    return rank(a->status) < rank(b->status);
  });
  html += "<h3>Tests</h3><table><tr><th>test</th><th>status</th><th>s</th><th>message</th></tr>";
  for (const TestResult* test : ordered) {
    html += strf("<tr><td title=\"%s\">%s</td>%s<td>%.3f</td><td class=\"msg\">%s</td></tr>",
                 xml_escape(test->summary).c_str(), xml_escape(test->name).c_str(),
                 status_cell(test->status).c_str(), test->duration_s,
                 xml_escape(test->message).c_str());
  }
  html += "</table>";
  html += coverage_section(device);
  html += strf(
      "<p class=\"small\">capabilities: %s; module formats: %s; total memory %llu bytes; peak %.4g "
      "FLOP/s</p>",
      capability_names(p.capabilities).c_str(), module_format_names(p.module_formats).c_str(),
      static_cast<unsigned long long>(p.total_memory_bytes), p.peak_fp32_flops);
  return html;
}

}  // namespace

std::string html_report(const RunRecord& run) {
  std::string html =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>halconform "
      "report</title><style>";
  html += kStyle;
  html += "</style></head><body>";
  html += strf("<h1>halconform <span class=\"verdict %s\">%s</span></h1>",
               run.passed() ? "pass" : "fail", run.passed() ? "PASS" : "FAIL");
  html += strf("<p class=\"small\">suite %s, libhal %s (ABI %s), started %s, %.1f s<br>%s</p>",
               run.suite_version.c_str(), run.hal_version.c_str(), run.abi_version.c_str(),
               run.started_utc.c_str(), run.duration_s, xml_escape(run.command).c_str());
  for (const DeviceCertification& device : run.devices) html += device_section(device);
  return html + "</body></html>\n";
}

}  // namespace halconform
