#include "dialect_compiler.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "hal_dialect/dialect.hpp"
#include "hal_util/cached_build.hpp"
#include "hal_util/elf_image.hpp"
#include "hal_util/env.hpp"
#include "hal_util/secure_file.hpp"

extern char** environ;

namespace hal::cpu {
namespace {

using hal::util::UniqueFd;

// Flags every dialect module is built with. -march=native: kernels are
// built on the machine that runs them; -fno-math-errno lets sqrt and
// friends vectorise; -O3, not -O2: GCC's -O2 vectorises only loops whose
// trip count is a known multiple of the vector width (its "very cheap" cost
// model), which a loop over a block's work-items never is, and -O3 also
// unrolls the short inner loops of region bodies so the work-item loop
// around them vectorises (the tiled matmul: 8x faster than at -O2).
constexpr std::array<const char*, 7> kCompileFlags = {
    "-std=c++20", "-O3", "-march=native", "-fno-math-errno", "-fPIC", "-shared", "-w"};
// Diagnostics longer than this are cut: the first errors are the useful ones.
constexpr size_t kMaxDiagnosticBytes = 6000;
// A compiler that writes more than this is stopped: no useful diagnostic is
// this long, and a runaway one would otherwise fill memory or a disk.
constexpr size_t kMaxCompilerOutputBytes = size_t{1} << 20;
// The default wall-clock limit of one compiler run (HAL_CXX_TIMEOUT_S).
constexpr double kDefaultTimeoutSeconds = 300;

bool is_executable(const std::string& path) {
  struct stat status {};
  return stat(path.c_str(), &status) == 0 && S_ISREG(status.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

// |name| as a path: itself when it has a '/', else the first match in PATH.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable(name) ? name : std::string();
  const char* path = hal::util::env("PATH");
  std::stringstream directories(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string directory; std::getline(directories, directory, ':');) {
    // An empty PATH entry is the current directory.
    const std::string candidate = (directory.empty() ? std::string(".") : directory) + "/" + name;
    if (is_executable(candidate)) return candidate;
  }
  return {};
}

struct RunResult {
  enum class Outcome { kExited, kSignaled, kTimedOut, kOutputCapped, kNotStarted };
  Outcome outcome = Outcome::kNotStarted;
  int code = 0;        // the exit status, the signal, or the errno of the failed start
  std::string output;  // stdout and stderr, the first kMaxDiagnosticBytes
  bool output_cut = false;
};

// Runs |argv| in its own process group with stdin from /dev/null and stdout
// and stderr into a pipe read here: at most kMaxCompilerOutputBytes in all
// (the group is killed beyond), and for at most |timeout_seconds| (the group
// is killed then). No file is created.
RunResult run_program(const std::vector<std::string>& argv, double timeout_seconds) {
  RunResult result;
  std::vector<char*> arguments;
  for (const std::string& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  int pipe_ends[2];
  if (pipe2(pipe_ends, O_CLOEXEC) != 0) {
    result.code = errno;
    return result;
  }
  UniqueFd reader(pipe_ends[0]);
  UniqueFd writer(pipe_ends[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, writer.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, writer.get(), 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // Its own process group, so a timeout kills whatever it started too; the
  // default disposition of every signal and no blocked ones, whatever this
  // process ignores or blocks.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t child = 0;
  const int spawned =
      posix_spawn(&child, arguments[0], &actions, &attributes, arguments.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  writer.reset();
  if (spawned != 0) {
    result.code = spawned;
    return result;
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::min(timeout_seconds, 1e7)));
  size_t total = 0;
  bool closed = false, exited = false;
  // Once it exited and its group is killed, the pipe closes at once unless a
  // process that left the group (setsid) holds it: that one is not waited for.
  constexpr auto kGraceAfterExit = std::chrono::seconds(1);
  Clock::time_point exited_at{};
  char buffer[65536];
  while (!(closed && exited)) {
    if (exited && Clock::now() - exited_at > kGraceAfterExit) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.outcome = RunResult::Outcome::kTimedOut;
      break;
    }
    if (!closed) {
      pollfd watch{reader.get(), POLLIN, 0};
      // Short polls while it runs: its exit is seen by waitid, not by the pipe
      // (a child it left behind may hold the pipe open).
      const int ready = poll(&watch, 1, static_cast<int>(std::min<int64_t>(left.count(), 50)));
      if (ready > 0) {
        const ssize_t n = read(reader.get(), buffer, sizeof(buffer));
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
          closed = true;
        } else if (n > 0) {
          total += static_cast<size_t>(n);
          const size_t keep =
              std::min(static_cast<size_t>(n),
                       kMaxDiagnosticBytes - std::min(kMaxDiagnosticBytes, result.output.size()));
          result.output.append(buffer, keep);
          result.output_cut = result.output_cut || keep < static_cast<size_t>(n);
          if (total > kMaxCompilerOutputBytes) {
            result.outcome = RunResult::Outcome::kOutputCapped;
            break;
          }
        }
      }
    } else {
      poll(nullptr, 0, static_cast<int>(std::min<int64_t>(left.count(), 10)));
    }
    if (!exited) {
      // WNOWAIT: the child stays a zombie, so its pid (the group's id) cannot
      // be reused before the group is killed below.
      siginfo_t info{};
      if (waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == child) {
        exited = true;
        exited_at = Clock::now();
        // Whatever it left behind in its group goes with it; that also closes
        // the pipe they may hold.
        kill(-child, SIGKILL);
      }
    }
  }
  kill(-child, SIGKILL);  // a no-op when the group is gone
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (result.outcome == RunResult::Outcome::kNotStarted) {
    if (WIFEXITED(status)) {
      result.outcome = RunResult::Outcome::kExited;
      result.code = WEXITSTATUS(status);
    } else {
      result.outcome = RunResult::Outcome::kSignaled;
      result.code = WTERMSIG(status);
    }
  }
  return result;
}

struct Compiler {
  std::string path;
  std::string version;  // the first line of --version
};

std::string format_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

// A run that did not end with its own exit: the sentence saying which limit
// was hit, and the result that goes with it. False when it did exit.
bool failed_run(const RunResult& run, const std::string& what, double timeout_seconds,
                hal_result_t& result, std::string& sentence) {
  switch (run.outcome) {
    case RunResult::Outcome::kTimedOut:
      result = HAL_ERROR_TIMEOUT;
      sentence = what + " ran longer than HAL_CXX_TIMEOUT_S = " + format_seconds(timeout_seconds) +
                 " seconds and was killed (with its process group)";
      return true;
    case RunResult::Outcome::kOutputCapped:
      result = HAL_ERROR_INVALID_MODULE;
      sentence = what + " wrote more than " + std::to_string(kMaxCompilerOutputBytes) +
                 " bytes of output and was killed (with its process group); its first "
                 "output:\n" +
                 run.output;
      return true;
    case RunResult::Outcome::kNotStarted:
      result = HAL_ERROR_UNSUPPORTED;
      sentence = what + " could not be started: " + std::strerror(run.code);
      return true;
    default:
      return false;
  }
}

// HAL_CXX_TIMEOUT_S: seconds, > 0; unset or empty is the default.
bool compiler_timeout(double& seconds, std::string& why) {
  seconds = kDefaultTimeoutSeconds;
  const char* text = hal::util::env_nonempty("HAL_CXX_TIMEOUT_S");
  if (text == nullptr) return true;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(value) || value <= 0) {
    why =
        std::string("HAL_CXX_TIMEOUT_S is '") + text + "'; it must be a positive number of seconds";
    return false;
  }
  seconds = value;
  return true;
}

// The compiler: $HAL_CXX, else the first of c++, g++, clang++ on PATH. Its
// version is asked once per path and process.
bool find_compiler(Compiler& out, double timeout_seconds, hal_result_t& failure, std::string& why) {
  const char* chosen = hal::util::env("HAL_CXX");
  if (chosen != nullptr && *chosen != '\0') {
    out.path = resolve_program(chosen);
    if (out.path.empty()) {
      why = std::string("HAL_CXX names '") + chosen + "', which is not an executable";
      failure = HAL_ERROR_UNSUPPORTED;
      return false;
    }
  } else {
    for (const char* name : {"c++", "g++", "clang++"}) {
      out.path = resolve_program(name);
      if (!out.path.empty()) break;
    }
    if (out.path.empty()) {
      why = "no C++ compiler found: HAL_CXX is unset and none of c++, g++, clang++ is on PATH";
      failure = HAL_ERROR_UNSUPPORTED;
      return false;
    }
  }
  static std::mutex mutex;
  static std::map<std::string, std::string> versions;
  std::lock_guard lock(mutex);
  auto found = versions.find(out.path);
  if (found == versions.end()) {
    // The version text comes through a pipe: no file to create or to plant.
    const RunResult run = run_program({out.path, "--version"}, timeout_seconds);
    const std::string what = "the C++ compiler '" + out.path + "' asked for '--version'";
    if (failed_run(run, what, timeout_seconds, failure, why)) return false;
    if (run.outcome != RunResult::Outcome::kExited || run.code != 0) {
      why =
          "the C++ compiler '" + out.path + "' does not run ('--version' " +
          (run.outcome == RunResult::Outcome::kExited ? "exited with " : "was killed by signal ") +
          std::to_string(run.code) + ")";
      failure = HAL_ERROR_UNSUPPORTED;
      return false;
    }
    found = versions.emplace(out.path, run.output.substr(0, run.output.find('\n'))).first;
  }
  out.version = found->second;
  return true;
}

bool mentions_full_disk(const std::string& text) {
  for (int error : {ENOSPC, EDQUOT, EFBIG}) {
    if (text.find(std::strerror(error)) != std::string::npos) return true;
  }
  return false;
}

// Compiles the translated |text| with |compiler| into a shared object
// (|image|): the source, the object and anything the compiler writes stay in a
// fresh directory only this user can enter, so no name in it can be planted.
hal_result_t compile_object(const std::string& text, const Compiler& compiler,
                            double timeout_seconds, const plugin::ErrorReporter& report,
                            std::vector<unsigned char>& image) {
  std::string why;
  hal_result_t failure = HAL_ERROR_INTERNAL;
  hal::util::PrivateTempDirectory work;
  if (!work.create("hal-cxx-", why)) {
    const int error = errno;
    return report.fail_message(
        hal::util::is_disk_full(error) ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL, error,
        "module_load: " + why);
  }
  const std::string source_path = work.path() + "/module.cpp";
  const std::string object_path = work.path() + "/module.so";
  {
    UniqueFd file(openat(work.fd(), "module.cpp",
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    int error = file.valid() ? 0 : errno;
    if (error == 0) error = hal::util::write_all(file.get(), text.data(), text.size());
    if (error != 0) {
      return report.fail_message(
          hal::util::is_disk_full(error) ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL, error,
          "module_load: " + hal::util::describe_write_error(error, source_path));
    }
  }
  std::vector<std::string> argv = {compiler.path};
  for (const char* flag : kCompileFlags) argv.emplace_back(flag);
  argv.insert(argv.end(), {"-o", object_path, source_path});
  const RunResult run = run_program(argv, timeout_seconds);
  if (failed_run(run, "the C++ compiler '" + compiler.path + "'", timeout_seconds, failure, why)) {
    return report.fail_message(failure, run.code, "module_load: " + why);
  }
  const std::string diagnostics = run.output + (run.output_cut ? "\n[... diagnostics cut]" : "");
  if (run.outcome == RunResult::Outcome::kSignaled && run.code == SIGXFSZ) {
    return report.fail_message(HAL_ERROR_OUT_OF_MEMORY, EFBIG,
                               "module_load: the C++ compiler was stopped by the file size "
                               "limit (RLIMIT_FSIZE) writing into '" +
                                   work.path() + "'");
  }
  if (run.outcome != RunResult::Outcome::kExited || run.code != 0) {
    if (mentions_full_disk(diagnostics)) {
      return report.fail_message(HAL_ERROR_OUT_OF_MEMORY, ENOSPC,
                                 "module_load: the C++ compiler ran out of disk space writing "
                                 "into '" +
                                     work.path() + "':\n" + diagnostics);
    }
    return report.fail_message(HAL_ERROR_INVALID_MODULE, run.code,
                               "module_load: the C++ compiler (" + compiler.version +
                                   ") rejected the translated HAL dialect source:\n" + diagnostics);
  }
  hal::util::ReadRule rule;
  rule.no_follow = true;
  rule.must_be_private = true;
  rule.max_bytes = hal::util::KernelCache::kMaxObjectBytes;
  int error = 0;
  if (!hal::util::read_regular_file(work.fd(), "module.so", rule, image, error, why) ||
      !hal::util::check_elf_image(image.data(), image.size(), why)) {
    return report.fail_message(HAL_ERROR_INVALID_MODULE, error,
                               "module_load: the C++ compiler '" + compiler.path +
                                   "' exited with 0 but its object '" + object_path +
                                   "' is not a loadable shared object: " + why);
  }
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t compile_dialect(std::string_view source, const std::string& machine,
                             bool bounds_checked, const plugin::ErrorReporter& report,
                             CompiledDialect& out) {
  dialect::TranslatedModule translated;
  dialect::Diagnostic diagnostic;
  dialect::TranslateOptions options;
  options.bounds_checked = bounds_checked;
  if (!dialect::translate(source, dialect::Backend::kCpp, translated, diagnostic, options)) {
    return report.fail_message(
        HAL_ERROR_INVALID_MODULE, 0,
        "module_load: the HAL dialect source is invalid: " + diagnostic.to_string());
  }
  for (const dialect::KernelRecord& kernel : translated.kernels) {
    // Which shape each kernel's work-items take (SPEC.md, "Work-items and
    // barriers on the cpu plugin"), for whoever wonders why one is slow.
    report.log(HAL_LOG_DEBUG, "HAL dialect kernel '%s' runs as %s%s%s", kernel.entry.c_str(),
               std::string(dialect::cpu_shape_name(kernel.cpu_shape)).c_str(),
               kernel.cpu_shape_note.empty() ? "" : ": ", kernel.cpu_shape_note.c_str());
  }
  double timeout_seconds = 0;
  std::string why;
  if (!compiler_timeout(timeout_seconds, why)) {
    return report.fail_message(HAL_ERROR_INVALID_ARGUMENT, 0, "module_load: " + why);
  }
  Compiler compiler;
  hal_result_t failure = HAL_ERROR_INTERNAL;
  if (!find_compiler(compiler, timeout_seconds, failure, why)) {
    return report.fail_message(failure, 0,
                               "module_load: the cpu plugin compiles HAL dialect modules with "
                               "the system C++ compiler, but " +
                                   why);
  }

  // The key: everything that changes the object code.
  std::vector<std::string_view> key_parts = {translated.text, compiler.path, compiler.version,
                                             machine};
  for (const char* flag : kCompileFlags) key_parts.emplace_back(flag);
  hal::util::CachedBuildRequest request;
  request.prefix = "cpu";
  request.object_suffix = ".so";
  request.key = hal::util::KernelCache::key_of(key_parts);
  request.validate = [](const std::vector<unsigned char>& image, std::string& problem) {
    return hal::util::check_elf_image(image.data(), image.size(), problem);
  };
  hal_result_t build_result = HAL_SUCCESS;
  const auto build = [&](std::vector<unsigned char>& image) {
    build_result = compile_object(translated.text, compiler, timeout_seconds, report, image);
    return build_result == HAL_SUCCESS;
  };
  const auto log = [&](hal_log_level_t level, const std::string& message) {
    report.log(level, "%s", message.c_str());
  };
  hal::util::CachedBuild cached;
  if (!hal::util::build_cached(request, build, log, cached)) return build_result;
  out.image = std::move(cached.image);
  out.origin = std::move(cached.origin);
  return HAL_SUCCESS;
}

}  // namespace hal::cpu
