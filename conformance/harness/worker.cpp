// The worker side: hal_init over the one plugin, then each test in its own
// try block, every record written before the next test starts.
#include "worker.hpp"

#include <hal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>

#include "check.hpp"
#include "coverage.hpp"
#include "in_flight.hpp"
#include "protocol.hpp"

namespace halconform {
namespace {

void emit(const std::string& line) {
  const std::string record = line + "\n";
  size_t written = 0;
  while (written < record.size()) {
    const ssize_t n = ::write(kResultFd, record.data() + written, record.size() - written);
    if (n <= 0) return;  // the parent is gone: nobody to report to
    written += static_cast<size_t>(n);
  }
}

std::string join(std::initializer_list<std::string> fields) {
  std::string line;
  for (const std::string& field : fields) {
    if (!line.empty()) line += '\t';
    line += escape_field(field);
  }
  return line;
}

TestResult run_one(const TestCase& test, hal_device_t device,
                   const std::vector<hal_device_t>& devices, const RunSettings& settings,
                   std::vector<Metric>& out_metrics) {
  TestResult result{test.name, test.profile, test.summary, Status::kPass, 0, ""};
  const auto start = std::chrono::steady_clock::now();
  mark_test_thread();
  try {
    TestContext context(test, device, devices, settings);
    try {
      test.body(context);
      result.message = context.notes();
    } catch (...) {
      out_metrics = context.metrics();
      throw;
    }
    out_metrics = context.metrics();
  } catch (const TestSkipped& skipped) {
    result.status = Status::kSkip;
    result.message = skipped.what();
  } catch (const TestFailure& failure) {
    result.status = Status::kFail;
    result.message = failure.what();
  } catch (const std::exception& exception) {
    result.status = Status::kFail;
    result.message = std::string("the test threw: ") + exception.what();
  }
  result.duration_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

int run_worker(const WorkerOptions& options) {
  attach_in_flight_table();
  hal_init_options_t init = HAL_INIT_OPTIONS_INIT;
  init.plugins = options.plugin_path.c_str();
  init.skip_default_search = 1;
  if (hal_result_t result = hal_init(&init); result != HAL_SUCCESS) {
    emit(join({"X", std::string("hal_init over ") + options.plugin_path + " returned " +
                        hal_result_string(result) + ": " + hal_error_last_message()}));
    return 1;
  }
  uint32_t count = 0;
  hal_device_count(&count);
  std::vector<hal_device_t> devices(count);
  for (uint32_t i = 0; i < count; ++i) hal_device_get(i, &devices[i]);
  if (options.plugin_device_index >= count) {
    emit(join({"X", strf("the plugin has %u devices; device %u does not exist", count,
                         options.plugin_device_index)}));
    hal_shutdown();
    return 1;
  }
  const hal_device_t device = devices[options.plugin_device_index];
  for (const std::string& name : options.tests) {
    emit(join({"B", name}));
    const TestCase* test = Registry::instance().find(name);
    if (test == nullptr) {
      emit(join({"E", name, "fail", "0", "no such test in this halconform"}));
      continue;
    }
    std::vector<Metric> metrics;
    coverage::begin_test();
    const TestResult result = run_one(*test, device, devices, options.settings, metrics);
    const std::vector<std::string> paths = coverage::end_test();
    std::string record = "C\t" + escape_field(name);
    for (const std::string& path : paths) record += "\t" + escape_field(path);
    emit(record);
    for (const Metric& metric : metrics) {
      emit(join({"M", name, metric.name, strf("%.17g", metric.value), metric.unit,
                 std::isnan(metric.declared) ? "" : strf("%.17g", metric.declared)}));
    }
    emit(join(
        {"E", name, status_name(result.status), strf("%.6f", result.duration_s), result.message}));
  }
  hal_shutdown();
  return 0;
}

}  // namespace halconform
