#include "options.hpp"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "registry.hpp"

namespace halconform {
namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

bool parse_number(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && end != nullptr && *end == '\0' && out > 0;
}

}  // namespace

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: halconform [--plugin NAME|PATH] [--device N] [--profile P[,P...]|all]\n"
               "                  [--filter GLOB[,GLOB...]] [--exclude GLOB[,GLOB...]] [--list]\n"
               "                  [--report FILE.json]\n"
               "                  [--junit FILE.xml] [--html FILE.html] [--timeout SECONDS]\n"
               "                  [--duration SECONDS] [--kernels PATH] [--kernel-pack FILE]\n"
               "                  [--tier smoke|ci|full]\n"
               "Certifies a HAL plugin and its devices. Default: every discovered device,\n"
               "profile core, tier full. Exit status 0 only when every applicable test passes.\n"
               "profiles:\n");
  for (const Profile& profile : Registry::instance().profiles()) {
    std::fprintf(out, "  %-12s %s\n", profile.name.c_str(), profile.description.c_str());
  }
}

std::string executable_path() {
  char buffer[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string("halconform");
}

std::string default_kernels_path(const std::string& executable) {
  const std::string dir = executable.substr(0, executable.rfind('/'));
  return dir + "/../" HALCONFORM_LIBDIR "/hal/conformance/halconform_kernels.so";
}

bool parse_options(int argc, char** argv, Options& out, std::string& out_error) {
  std::string profiles = "core";
  std::string tests;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&](std::string& into) {
      if (i + 1 >= argc) {
        out_error = arg + " needs a value";
        return false;
      }
      into = argv[++i];
      return true;
    };
    std::string value;
    if (arg == "--help" || arg == "-h") {
      out.help = true;
    } else if (arg == "--list") {
      out.list = true;
    } else if (arg == "--worker") {
      out.worker = true;
    } else if (arg == "--plugin") {
      if (!next(out.plugin)) return false;
    } else if (arg == "--device") {
      if (!next(value)) return false;
      char* end = nullptr;
      const unsigned long index = std::strtoul(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || index > UINT32_MAX) {
        out_error = "--device '" + value + "' is not a device index";
        return false;
      }
      out.device = static_cast<uint32_t>(index);
    } else if (arg == "--profile") {
      if (!next(profiles)) return false;
    } else if (arg == "--filter") {
      if (!next(out.filter)) return false;
    } else if (arg == "--exclude") {
      if (!next(out.exclude)) return false;
    } else if (arg == "--report") {
      if (!next(out.report_path)) return false;
    } else if (arg == "--junit") {
      if (!next(out.junit_path)) return false;
    } else if (arg == "--html") {
      if (!next(out.html_path)) return false;
    } else if (arg == "--kernels") {
      if (!next(out.settings.kernels_path)) return false;
    } else if (arg == "--kernel-pack") {
      if (!next(out.settings.kernel_pack)) return false;
    } else if (arg == "--expect-properties") {
      if (!next(out.settings.expected_properties)) return false;
    } else if (arg == "--tier") {
      if (!next(value)) return false;
      if (value == "smoke") {
        out.settings.tier = Tier::kSmoke;
      } else if (value == "ci") {
        out.settings.tier = Tier::kCi;
      } else if (value == "full") {
        out.settings.tier = Tier::kFull;
      } else {
        out_error = "--tier '" + value + "' is not smoke, ci or full";
        return false;
      }
    } else if (arg == "--tests") {
      if (!next(tests)) return false;
    } else if (arg == "--timeout" || arg == "--duration") {
      if (!next(value)) return false;
      double seconds = 0;
      if (!parse_number(value, seconds)) {
        out_error = arg + " '" + value + "' is not a positive number of seconds";
        return false;
      }
      (arg == "--timeout" ? out.timeout_s : out.settings.stress_seconds) = seconds;
    } else {
      out_error = "unknown argument '" + arg + "'";
      return false;
    }
  }
  for (const std::string& profile : split_commas(profiles)) {
    if (profile == "all") {
      out.profiles.clear();
      for (const Profile& known : Registry::instance().profiles())
        out.profiles.push_back(known.name);
      break;
    }
    if (Registry::instance().find_profile(profile) == nullptr) {
      out_error = "unknown profile '" + profile + "'";
      return false;
    }
    out.profiles.push_back(profile);
  }
  if (out.settings.kernels_path.empty()) {
    out.settings.kernels_path = default_kernels_path(executable_path());
  }
  if (out.worker) {
    out.settings.plugin_path = out.plugin;
    out.worker_options.plugin_path = out.plugin;
    out.worker_options.plugin_device_index = out.device.value_or(0);
    out.worker_options.tests = split_commas(tests);
    out.worker_options.settings = out.settings;
  }
  return true;
}

}  // namespace halconform
