#include "dialect_compiler.hpp"

#include "hal_util/env.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "hal_dialect/dialect.hpp"

extern char** environ;

namespace hal::cpu {
namespace {

namespace fs = std::filesystem;

// Flags every dialect module is built with. -march=native: kernels are
// built on the machine that runs them; -fno-math-errno lets sqrt and
// friends vectorise.
constexpr std::array<const char*, 7> kCompileFlags = {
    "-std=c++20", "-O2", "-march=native", "-fno-math-errno", "-fPIC", "-shared", "-w"};
// Diagnostics longer than this are cut: the first errors are the useful ones.
constexpr size_t kMaxDiagnosticBytes = 6000;

uint64_t fnv1a(std::string_view text, uint64_t hash) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

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

// Runs |argv| with stdout and stderr to |log_path|; the exit status, or -1
// when it could not start (errno set).
int run_program(const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> arguments;
  for (const std::string& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t child = 0;
  const int spawned =
      posix_spawn(&child, arguments[0], &actions, nullptr, arguments.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    errno = spawned;
    return -1;
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_text(const std::string& path, size_t limit) {
  std::ifstream file(path, std::ios::binary);
  std::string text(limit, '\0');
  file.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<size_t>(file.gcount()));
  if (text.size() == limit) text += "\n[... diagnostics cut]";
  return text;
}

struct Compiler {
  std::string path;
  std::string version;  // the first line of --version
};

// The compiler: $HAL_CXX, else the first of c++, g++, clang++ on PATH. Its
// version is asked once per path and process.
bool find_compiler(Compiler& out, std::string& why) {
  const char* chosen = hal::util::env("HAL_CXX");
  if (chosen != nullptr && *chosen != '\0') {
    out.path = resolve_program(chosen);
    if (out.path.empty()) {
      why = std::string("HAL_CXX names '") + chosen + "', which is not an executable";
      return false;
    }
  } else {
    for (const char* name : {"c++", "g++", "clang++"}) {
      out.path = resolve_program(name);
      if (!out.path.empty()) break;
    }
    if (out.path.empty()) {
      why = "no C++ compiler found: HAL_CXX is unset and none of c++, g++, clang++ is on PATH";
      return false;
    }
  }
  static std::mutex mutex;
  static std::map<std::string, std::string> versions;
  std::lock_guard lock(mutex);
  auto found = versions.find(out.path);
  if (found == versions.end()) {
    const std::string log =
        (fs::temp_directory_path() / ("hal-cxx-version-" + std::to_string(getpid()) + ".txt"))
            .string();
    const int status = run_program({out.path, "--version"}, log);
    std::string version = read_text(log, 512);
    std::error_code ignored;
    fs::remove(log, ignored);
    if (status != 0) {
      why = "the C++ compiler '" + out.path + "' does not run ('--version' exited with " +
            std::to_string(status) + ")";
      return false;
    }
    version = version.substr(0, version.find('\n'));
    found = versions.emplace(out.path, version).first;
  }
  out.version = found->second;
  return true;
}

}  // namespace

std::string dialect_cache_directory() {
  if (const char* dir = hal::util::env("HAL_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* xdg = hal::util::env("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/hal";
  }
  if (const char* home = hal::util::env("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/hal";
  }
  return (fs::temp_directory_path() / "hal-cache").string();
}

hal_result_t compile_dialect(std::string_view source, const std::string& machine,
                             const plugin::ErrorReporter& report, std::string& out_library) {
  dialect::TranslatedModule translated;
  dialect::Diagnostic diagnostic;
  if (!dialect::translate(source, dialect::Backend::kCpp, translated, diagnostic)) {
    return report.fail_message(
        HAL_ERROR_INVALID_MODULE, 0,
        "module_load: the HAL dialect source is invalid: " + diagnostic.to_string());
  }
  Compiler compiler;
  std::string why;
  if (!find_compiler(compiler, why)) {
    return report.fail_message(HAL_ERROR_UNSUPPORTED, 0,
                               "module_load: the cpu plugin compiles HAL dialect modules with "
                               "the system C++ compiler, but " +
                                   why);
  }

  // The key: everything that changes the object code.
  std::string key_text = translated.text;
  key_text += '\0' + compiler.path + '\0' + compiler.version + '\0' + machine;
  for (const char* flag : kCompileFlags) key_text += std::string("\0", 1) + flag;
  const std::string key = hex(fnv1a(key_text, 14695981039346656037ull)) +
                          hex(fnv1a(key_text, 0x84222325cbf29ce4ull ^ key_text.size()));

  const fs::path directory = dialect_cache_directory();
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) {
    return report.fail_message(HAL_ERROR_INTERNAL, error.value(),
                               "module_load: cannot create the kernel cache directory '" +
                                   directory.string() + "': " + error.message());
  }
  const fs::path library = directory / ("cpu-" + key + ".so");
  if (fs::exists(library, error)) {
    out_library = library.string();
    return HAL_SUCCESS;
  }

  // A unique stem per attempt: processes and threads may compile the same
  // source at once; each renames its own complete object into place.
  static std::atomic<uint64_t> attempts{0};
  const std::string stem = "cpu-" + key + ".tmp." + std::to_string(getpid()) + "." +
                           std::to_string(attempts.fetch_add(1));
  const fs::path source_path = directory / (stem + ".cpp");
  const fs::path object_path = directory / (stem + ".so");
  const fs::path log_path = directory / (stem + ".log");
  struct Cleanup {
    std::vector<fs::path> paths;
    ~Cleanup() {
      std::error_code ignored;
      for (const fs::path& path : paths) fs::remove(path, ignored);
    }
  } cleanup{{source_path, object_path, log_path}};
  {
    std::ofstream file(source_path, std::ios::binary);
    file << translated.text;
    if (!file.flush()) {
      return report.fail_message(HAL_ERROR_INTERNAL, errno,
                                 "module_load: cannot write '" + source_path.string() + "'");
    }
  }
  std::vector<std::string> argv = {compiler.path};
  for (const char* flag : kCompileFlags) argv.emplace_back(flag);
  argv.insert(argv.end(), {"-o", object_path.string(), source_path.string()});
  const int status = run_program(argv, log_path.string());
  if (status < 0) {
    return report.fail_message(HAL_ERROR_UNSUPPORTED, errno,
                               "module_load: cannot run the C++ compiler '" + compiler.path +
                                   "': " + std::strerror(errno));
  }
  if (status != 0) {
    return report.fail_message(HAL_ERROR_INVALID_MODULE, status,
                               "module_load: the C++ compiler (" + compiler.version +
                                   ") rejected the translated HAL dialect source:\n" +
                                   read_text(log_path.string(), kMaxDiagnosticBytes));
  }
  fs::rename(object_path, library, error);
  if (error) {
    return report.fail_message(HAL_ERROR_INTERNAL, error.value(),
                               "module_load: cannot move the compiled kernel into the cache at '" +
                                   library.string() + "': " + error.message());
  }
  out_library = library.string();
  return HAL_SUCCESS;
}

}  // namespace hal::cpu
