// The parent side of isolation: spawn a worker (posix_spawn of this binary),
// read its records under a watchdog, and turn a crash or a hang into a failed
// test, then carry on from the next test in a new worker.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "check.hpp"
#include "in_flight.hpp"
#include "protocol.hpp"
#include "worker.hpp"

extern char** environ;

namespace halconform {
namespace {

using Clock = std::chrono::steady_clock;

// A spawned worker: its pid, the read end of its result pipe, the file that
// holds its stdout and stderr (a sanitizer report lands there), and the table
// of the HAL calls it has in flight (read when a test hangs).
class WorkerProcess {
 public:
  WorkerProcess(const std::string& executable, const std::vector<std::string>& arguments) {
    // Above kResultFd and kInFlightFd, so no dup2 below overwrites a source
    // before it is copied.
    int table_fd = memfd_create("halconform-in-flight", MFD_CLOEXEC);
    if (table_fd >= 0 && table_fd < 10) {
      const int moved = fcntl(table_fd, F_DUPFD_CLOEXEC, 10);
      ::close(table_fd);
      table_fd = moved;
    }
    if (table_fd >= 0 && ftruncate(table_fd, sizeof(InFlightTable)) == 0) {
      void* mapped =
          mmap(nullptr, sizeof(InFlightTable), PROT_READ | PROT_WRITE, MAP_SHARED, table_fd, 0);
      if (mapped != MAP_FAILED) {
        table_ = static_cast<InFlightTable*>(mapped);
        table_->magic = 0x48434946;  // "HCIF", what the worker checks
        for (InFlightSlot& slot : table_->slots) slot.function.store(kNoCall);
      }
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    read_fd_ = fds[0];
    // Above kResultFd, so the dup2 below always really moves it.
    const int write_fd = fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
    ::close(fds[1]);
    char log_template[] = "/tmp/halconform-worker-XXXXXX";
    log_fd_ = mkostemp(log_template, O_CLOEXEC);
    if (log_fd_ >= 0) unlink(log_template);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, write_fd, kResultFd);
    if (table_ != nullptr) posix_spawn_file_actions_adddup2(&actions, table_fd, kInFlightFd);
    if (log_fd_ >= 0) {
      posix_spawn_file_actions_adddup2(&actions, log_fd_, STDOUT_FILENO);
      posix_spawn_file_actions_adddup2(&actions, log_fd_, STDERR_FILENO);
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(executable.c_str()));
    for (const std::string& argument : arguments)
      argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    const int spawned =
        posix_spawn(&pid_, executable.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(write_fd);
    if (table_fd >= 0) ::close(table_fd);
    if (spawned != 0) {
      pid_ = -1;
      throw std::runtime_error(std::string("posix_spawn failed: ") + std::strerror(spawned));
    }
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  ~WorkerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      wait_for_exit();
    }
    ::close(read_fd_);
    if (log_fd_ >= 0) ::close(log_fd_);
    if (table_ != nullptr) munmap(table_, sizeof(InFlightTable));
  }

  // What the worker has in flight right now ("" when nothing, or no table).
  std::string in_flight() const { return table_ != nullptr ? describe_in_flight(*table_) : ""; }

  int read_fd() const { return read_fd_; }
  void kill_now() { kill(pid_, SIGKILL); }
  // How the worker ended, as a sentence.
  std::string wait_for_exit() {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (WIFSIGNALED(status)) {
      return strf("killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    }
    return strf("exited with status %d", WEXITSTATUS(status));
  }
  // The last |limit| bytes the worker printed, for a crash message.
  std::string output_tail(size_t limit = 800) const {
    if (log_fd_ < 0) return {};
    const off_t end = lseek(log_fd_, 0, SEEK_END);
    const off_t start = end > static_cast<off_t>(limit) ? end - static_cast<off_t>(limit) : 0;
    std::string tail(static_cast<size_t>(end - start), '\0');
    const ssize_t n = pread(log_fd_, tail.data(), tail.size(), start);
    tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return tail;
  }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
  int log_fd_ = -1;
  InFlightTable* table_ = nullptr;
};

TestResult failed(const TestCase& test, const std::string& message, double duration_s) {
  return TestResult{test.name, test.profile, test.summary, Status::kFail, duration_s, message};
}

Status parse_status(const std::string& name) {
  for (Status status : {Status::kPass, Status::kFail, Status::kSkip}) {
    if (name == status_name(status)) return status;
  }
  return Status::kFail;
}

}  // namespace

std::vector<std::string> worker_arguments(const IsolatedRun& run,
                                          const std::vector<std::string>& tests) {
  std::string list;
  for (const std::string& test : tests) list += (list.empty() ? "" : ",") + test;
  return {"--worker",
          "--plugin",
          run.worker.plugin_path,
          "--device",
          std::to_string(run.worker.plugin_device_index),
          "--kernels",
          run.worker.settings.kernels_path,
          "--duration",
          strf("%g", run.worker.settings.stress_seconds),
          "--tier",
          tier_name(run.worker.settings.tier),
          "--kernel-pack",
          run.worker.settings.kernel_pack,
          "--expect-properties",
          run.worker.settings.expected_properties,
          "--tests",
          list};
}

void run_isolated(const IsolatedRun& run, const std::vector<const TestCase*>& tests,
                  std::vector<TestResult>& results, std::vector<Metric>& metrics,
                  std::map<std::string, std::vector<std::string>>& coverage,
                  const std::function<void(const TestResult&)>& on_result) {
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run.timeout_s));
  auto record = [&](TestResult result) {
    results.push_back(result);
    on_result(results.back());
  };
  size_t next = 0;
  while (next < tests.size()) {
    std::vector<std::string> names;
    for (size_t i = next; i < tests.size(); ++i) names.push_back(tests[i]->name);
    WorkerProcess worker(run.executable, worker_arguments(run, names));
    long running = -1;  // index of the test that began and has not ended
    Clock::time_point began = Clock::now();
    Clock::time_point deadline = began + timeout;
    std::string pending;
    bool worker_done = false;
    while (!worker_done) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd descriptor{worker.read_fd(), POLLIN, 0};
      const int ready = poll(&descriptor, 1, static_cast<int>(std::max<long>(0, left.count())));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {  // the watchdog
        // Where it hangs, read before the kill: the call that never returned.
        const std::string hung = worker.in_flight();
        worker.kill_now();
        worker.wait_for_exit();
        const size_t victim = running >= 0 ? static_cast<size_t>(running) : next;
        std::string message =
            running >= 0 ? strf("timed out after %g s (the worker was killed)", run.timeout_s)
                         : strf("the worker did not start the test within %g s", run.timeout_s);
        message += hung.empty() ? ": no HAL call was in flight (the test's own code did not end)"
                                : ": hung: " + hung;
        record(failed(*tests[victim], message, run.timeout_s));
        next = victim + 1;
        break;
      }
      char buffer[4096];
      const ssize_t n = ::read(worker.read_fd(), buffer, sizeof(buffer));
      if (n <= 0) {  // the worker exited: normally, or in a crash
        const std::string how = worker.wait_for_exit();
        if (running >= 0) {
          const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
          std::string message = "crashed: the worker " + how + " during the test";
          if (const std::string tail = worker.output_tail(); !tail.empty()) {
            message += "; its last output: " + tail;
          }
          record(failed(*tests[running], message, seconds));
          next = static_cast<size_t>(running) + 1;
        } else if (next < tests.size()) {
          record(failed(*tests[next],
                        "the worker " + how + " before the test began: " + worker.output_tail(),
                        0));
          ++next;
        }
        worker_done = true;
        continue;
      }
      pending.append(buffer, static_cast<size_t>(n));
      size_t newline;
      while ((newline = pending.find('\n')) != std::string::npos) {
        const std::vector<std::string> fields = split_record(pending.substr(0, newline));
        pending.erase(0, newline + 1);
        const std::string& kind = fields[0];
        if (kind == "B" && fields.size() >= 2) {
          running = static_cast<long>(next);
          began = Clock::now();
          deadline = began + timeout;
        } else if (kind == "M" && fields.size() >= 6) {
          metrics.push_back(
              Metric{fields[2], std::strtod(fields[3].c_str(), nullptr), fields[4],
                     fields[5].empty() ? NAN : std::strtod(fields[5].c_str(), nullptr), fields[1]});
        } else if (kind == "E" && fields.size() >= 5 && running >= 0) {
          const TestCase& test = *tests[running];
          record(TestResult{test.name, test.profile, test.summary, parse_status(fields[2]),
                            std::strtod(fields[3].c_str(), nullptr), fields[4]});
          next = static_cast<size_t>(running) + 1;
          running = -1;
          deadline = Clock::now() + timeout;
        } else if (kind == "C" && fields.size() >= 2) {
          std::vector<std::string>& paths = coverage[fields[1]];
          paths.assign(fields.begin() + 2, fields.end());
        } else if (kind == "X" && fields.size() >= 2) {
          for (; next < tests.size(); ++next) record(failed(*tests[next], fields[1], 0));
        }
      }
    }
  }
}

}  // namespace halconform
