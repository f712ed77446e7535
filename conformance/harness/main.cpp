// halconform: discovers the devices to certify, plans the applicable tests of
// the selected profiles for each, runs them in watched worker processes, and
// writes the record. The parent itself runs no test and holds no HAL state
// while workers run.
#include <hal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>

#include "check.hpp"
#include "coverage.hpp"
#include "expectations.hpp"
#include "names.hpp"
#include "options.hpp"
#include "reports.hpp"

namespace halconform {
namespace {

struct PlannedDevice {
  DeviceCertification certification;
  uint32_t plugin_device_index = 0;
};

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

std::vector<const TestCase*> selected_tests(const Options& options) {
  std::vector<const TestCase*> selected;
  for (const TestCase* test : Registry::instance().tests()) {
    bool in_profile = false;
    for (const std::string& profile : options.profiles) in_profile |= test->profile == profile;
    const bool in_tier = test->requirements.tier <= options.settings.tier;
    const bool excluded = !options.exclude.empty() && matches_any_glob(options.exclude, test->name);
    if (in_profile && in_tier && !excluded &&
        (options.filter.empty() || matches_any_glob(options.filter, test->name))) {
      selected.push_back(test);
    }
  }
  return selected;
}

int list_tests(const Options& options) {
  for (const TestCase* test : selected_tests(options)) {
    std::string needs = capability_names(test->requirements.capabilities);
    if (test->requirements.module_formats != 0) {
      needs += ", " + module_format_names(test->requirements.module_formats);
    }
    if (test->requirements.min_devices > 1) {
      needs += strf(", %u devices", test->requirements.min_devices);
    }
    std::printf("%-44s %s  [needs: %s; tier %s]\n", test->name.c_str(), test->summary.c_str(),
                needs.c_str(), tier_name(test->requirements.tier));
  }
  return 0;
}

// hal_init over the selection, the plugins' identities and every selected
// device's properties; then hal_shutdown, so no plugin thread lives in the
// parent while it spawns workers.
bool discover(const Options& options, std::vector<PlannedDevice>& out,
              std::vector<PluginWithoutDevices>& out_without_devices, std::string& out_error) {
  hal_init_options_t init = HAL_INIT_OPTIONS_INIT;
  if (!options.plugin.empty()) init.plugins = options.plugin.c_str();
  if (hal_result_t result = hal_init(&init); result != HAL_SUCCESS) {
    out_error = std::string("hal_init returned ") + hal_result_string(result) + ": " +
                hal_error_last_message();
    return false;
  }
  std::map<std::string, PluginIdentity> plugins;
  std::string without_devices;  // the loaded plugins with 0 devices, and why, for the error
  uint32_t report_count = 0;
  hal_plugin_report_count(&report_count);
  for (uint32_t i = 0; i < report_count; ++i) {
    hal_plugin_report_t report{};
    report.struct_size = sizeof(report);
    if (hal_plugin_report_get(i, &report) != HAL_SUCCESS || report.outcome != HAL_PLUGIN_LOADED) {
      continue;
    }
    if (report.device_count == 0) {
      const std::string reason = report.reason != nullptr ? report.reason : "";
      without_devices += strf("; plugin %s loaded with 0 devices", report.name);
      if (!reason.empty()) without_devices += " (" + reason + ")";
      out_without_devices.push_back(
          {report.name, report.path != nullptr ? report.path : "", reason});
    }
    plugins[report.name] = PluginIdentity{report.name,     report.version, report.vendor,
                                          report.build_id, report.path,    report.abi_version};
  }
  uint32_t count = 0;
  hal_device_count(&count);
  std::map<std::string, uint32_t> devices_per_plugin;
  std::vector<hal_device_properties_t> all(count);
  for (uint32_t i = 0; i < count; ++i) {
    hal_device_t device = nullptr;
    all[i].struct_size = sizeof(hal_device_properties_t);
    if (hal_device_get(i, &device) != HAL_SUCCESS ||
        hal_device_get_properties(device, &all[i]) != HAL_SUCCESS) {
      out_error =
          strf("device %u: hal_device_get_properties failed: %s", i, hal_error_last_message());
      hal_shutdown();
      return false;
    }
    ++devices_per_plugin[all[i].plugin];
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (options.device && *options.device != i) continue;
    PlannedDevice planned;
    DeviceCertification& cert = planned.certification;
    cert.plugin = plugins[all[i].plugin];
    cert.device_index = i;
    cert.plugin_device_count = devices_per_plugin[all[i].plugin];
    cert.properties = all[i];
    cert.fingerprint = device_fingerprint(cert.plugin, all[i]);
    cert.profiles = options.profiles;
    planned.plugin_device_index = all[i].plugin_device_index;
    out.push_back(std::move(planned));
  }
  hal_shutdown();
  if (out.empty()) {
    out_error = options.device ? strf("there is no device %u (%u found)", *options.device, count)
                               : "no device was discovered: nothing to certify" + without_devices;
    return false;
  }
  return true;
}

// The struct's bytes in hex: how the discovering process hands a worker what
// it read, so a test can check the properties are the same in another process.
std::string properties_hex(const hal_device_properties_t& properties) {
  std::string hex;
  const auto* bytes = reinterpret_cast<const uint8_t*>(&properties);
  for (size_t i = 0; i < sizeof(properties); ++i) hex += strf("%02x", bytes[i]);
  return hex;
}

// The plugin's conformance kernel pack: the one named on the command line,
// else hal_plugin_<name>.kernels beside the plugin's shared object.
std::string kernel_pack_for(const Options& options, const std::string& plugin_path) {
  if (!options.settings.kernel_pack.empty()) return options.settings.kernel_pack;
  const size_t dot = plugin_path.rfind(".so");
  if (dot == std::string::npos) return {};
  const std::string beside = plugin_path.substr(0, dot) + ".kernels";
  return access(beside.c_str(), R_OK) == 0 ? beside : std::string();
}

// What the core kernel tests made of the device: certified when
// core.kernels.sources passed, never a pass when it found no kernel to load.
void settle_kernels_status(DeviceCertification& cert) {
  if ((cert.properties.capabilities & HAL_DEVICE_CAP_KERNELS) == 0) {
    cert.kernels_status = "not applicable";
    cert.kernels_detail = "the device does not declare HAL_DEVICE_CAP_KERNELS";
    return;
  }
  for (const TestResult& test : cert.tests) {
    if (test.name != "core.kernels.sources") continue;
    if (test.status == Status::kPass || test.status == Status::kXpass) {
      cert.kernels_status = "certified";
    } else if (test.status == Status::kSkip) {
      cert.kernels_status = "not run";
    } else {
      cert.kernels_status = "not certified";
    }
    cert.kernels_detail = test.message;
  }
}

void print_progress(const DeviceCertification& device, size_t done, size_t total,
                    const TestResult& result) {
  static const bool terminal = isatty(STDOUT_FILENO) != 0;
  const bool bad = breaks_certification(result.status);
  const std::string line =
      strf("[%3zu/%3zu] %s:%u %-44s %-5s %7.2f s", done, total, device.plugin.name.c_str(),
           device.device_index, result.name.c_str(), status_name(result.status), result.duration_s);
  if (terminal && !bad) {
    std::printf("\r\033[K%s", line.c_str());
  } else {
    std::printf("%s%s%s%s\n", terminal ? "\r\033[K" : "", line.c_str(), bad ? "\n    " : "",
                bad ? result.message.c_str() : "");
  }
  std::fflush(stdout);
}

bool certify(const Options& options, PlannedDevice& planned, std::string& out_error) {
  DeviceCertification& cert = planned.certification;
  Expectations expectations;
  if (!load_expectations(cert.plugin.path, expectations, out_error)) return false;
  cert.expectations_path = expectations.path;
  const std::vector<const TestCase*> selected = selected_tests(options);
  std::vector<const TestCase*> to_run;
  std::map<std::string, TestResult> by_name;
  for (const TestCase* test : selected) {
    const std::string reason =
        not_applicable_reason(*test, cert.properties, cert.plugin_device_count);
    if (reason.empty()) {
      to_run.push_back(test);
    } else {
      by_name[test->name] =
          TestResult{test->name, test->profile, test->summary, Status::kSkip, 0, reason};
    }
  }
  IsolatedRun run;
  run.executable = executable_path();
  run.worker.plugin_path = cert.plugin.path;
  run.worker.plugin_device_index = planned.plugin_device_index;
  run.worker.settings = options.settings;
  run.worker.settings.kernel_pack = kernel_pack_for(options, cert.plugin.path);
  run.worker.settings.expected_properties = properties_hex(cert.properties);
  run.timeout_s = options.timeout_s;
  cert.tier = tier_name(options.settings.tier);
  std::vector<TestResult> results;
  size_t done = 0;
  run_isolated(run, to_run, results, cert.metrics, cert.recorded_paths,
               [&](const TestResult& result) {
                 std::vector<TestResult> shown{result};  // as it will be recorded: XFAIL, not FAIL
                 apply_expectations(expectations, shown);
                 print_progress(cert, ++done, to_run.size(), shown.front());
               });
  for (TestResult& result : results) by_name[result.name] = std::move(result);
  for (const TestCase* test : selected) cert.tests.push_back(by_name[test->name]);
  apply_expectations(expectations, cert.tests);
  settle_kernels_status(cert);
  cert.coverage =
      coverage::evaluate(cert.properties, cert.plugin_device_count, cert.recorded_paths);
  if (isatty(STDOUT_FILENO)) std::printf("\r\033[K");
  return true;
}

int run_main(int argc, char** argv) {
  Options options;
  std::string error;
  if (!parse_options(argc, argv, options, error)) {
    std::fprintf(stderr, "halconform: %s\n", error.c_str());
    print_usage(stderr);
    return 2;
  }
  if (options.help) {
    print_usage(stdout);
    return 0;
  }
  if (options.worker) return run_worker(options.worker_options);
  if (options.list) return list_tests(options);

  const auto start = std::chrono::steady_clock::now();
  RunRecord run;
  run.suite_version = HALCONFORM_VERSION;
  run.hal_version = version_string(hal_get_version());
  run.abi_version = version_string(HAL_ABI_VERSION);
  run.started_utc = utc_now();
  for (int i = 0; i < argc; ++i) run.command += (i ? " " : "") + std::string(argv[i]);

  std::vector<PlannedDevice> planned;
  if (!discover(options, planned, run.plugins_without_devices, error)) {
    std::fprintf(stderr, "halconform: %s\n", error.c_str());
    return 1;
  }
  // Present but not certified: said here and kept in the record.
  for (const PluginWithoutDevices& plugin : run.plugins_without_devices) {
    std::printf("halconform: plugin %s loaded with 0 devices: %s\n", plugin.name.c_str(),
                plugin.reason.empty() ? "(no reason given)" : plugin.reason.c_str());
  }
  for (PlannedDevice& device : planned) {
    if (!certify(options, device, error)) {
      std::fprintf(stderr, "halconform: %s\n", error.c_str());
      return 2;
    }
    run.devices.push_back(std::move(device.certification));
  }
  run.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_summary(run, stdout);

  bool written = true;
  if (!options.report_path.empty()) {
    written &= write_file(options.report_path, certification_json(run));
    std::printf("halconform: wrote %s\n", options.report_path.c_str());
  }
  if (!options.junit_path.empty()) written &= write_file(options.junit_path, junit_xml(run));
  if (!options.html_path.empty()) written &= write_file(options.html_path, html_report(run));
  if (!written) {
    std::fprintf(stderr, "halconform: could not write a report file\n");
    return 1;
  }
  return run.passed() ? 0 : 1;
}

}  // namespace
}  // namespace halconform

// A helper rank of collectives.process.killed_peer (conformance/collectives/):
// halconform re-executes itself as the other processes of a communicator.
namespace halconform {
int run_collective_rank(int argc, char** argv);
// stress.leaks.init_shutdown (conformance/stress/leaks.cpp): hal_init /
// hal_shutdown cycles in a process of their own.
int run_lifecycle(int argc, char** argv);
}  // namespace halconform

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--collective-rank") {
    return halconform::run_collective_rank(argc, argv);
  }
  if (argc > 1 && std::string(argv[1]) == "--lifecycle") {
    return halconform::run_lifecycle(argc, argv);
  }
  return halconform::run_main(argc, argv);
}
