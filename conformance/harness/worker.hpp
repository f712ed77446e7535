// The two halves of test isolation. The parent never runs a test itself: it
// re-executes halconform as `halconform --worker ...` (a fresh process, so no
// fork after hal_init), which runs a list of tests on one device and streams
// results over a pipe. The parent's watchdog kills a worker whose test passes
// its timeout, records a crash with its signal, and starts a new worker at the
// next test.
#ifndef HAL_CONFORMANCE_HARNESS_WORKER_HPP_
#define HAL_CONFORMANCE_HARNESS_WORKER_HPP_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "context.hpp"
#include "registry.hpp"
#include "results.hpp"

namespace halconform {

struct WorkerOptions {
  std::string plugin_path;  // loaded alone, as an explicit plugin list
  uint32_t plugin_device_index = 0;
  std::vector<std::string> tests;
  RunSettings settings;
};

// The body of `halconform --worker`: writes protocol records to kResultFd.
int run_worker(const WorkerOptions& options);

struct IsolatedRun {
  std::string executable;  // this halconform binary
  WorkerOptions worker;    // .tests is filled by run_isolated
  double timeout_s = 60;   // per test, and for a worker to start
};

// Runs |tests| in workers; appends one result per test in order, the
// metrics they recorded and the paths each exercised (test -> paths); calls
// |on_result| after each.
void run_isolated(const IsolatedRun& run, const std::vector<const TestCase*>& tests,
                  std::vector<TestResult>& results, std::vector<Metric>& metrics,
                  std::map<std::string, std::vector<std::string>>& coverage,
                  const std::function<void(const TestResult&)>& on_result);

// The worker's command line for |tests|, the inverse of parsing --worker.
std::vector<std::string> worker_arguments(const IsolatedRun& run,
                                          const std::vector<std::string>& tests);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_WORKER_HPP_
