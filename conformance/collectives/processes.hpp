// Ranks in separate processes: the unique id as text for a command line,
// starting and reaping a rank process with a deadline, and the killed-peer
// scenario every rank runs. Shared by collectives_worker, multiprocess_test
// and halconform's collectives profile (which re-executes itself as a rank).
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

extern char** environ;

namespace coll_test {

inline std::string hex_id(const hal_comm_unique_id_t& id) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t byte : id.bytes) {
    out += digits[byte >> 4];
    out += digits[byte & 15];
  }
  return out;
}

inline bool parse_id(const std::string& hex, hal_comm_unique_id_t& id) {
  if (hex.size() != 2 * sizeof(id.bytes)) return false;
  for (size_t i = 0; i < sizeof(id.bytes); ++i) {
    id.bytes[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  return true;
}

// Starts args[0] with |args|; the pid, or -1.
inline pid_t spawn_process(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

// The exit code of |pid| (128 + signal when killed by one); a process still
// running at |deadline| is killed and counts as a hang (-1).
inline int wait_process(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status)     ? WEXITSTATUS(status)
         : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                               : -2;
}

// Rank |victim| dies (or, with |signal| SIGSTOP, hangs) before the third
// allreduce; the others must see an error (a failed stream and
// HAL_ERROR_REMOTE or HAL_ERROR_TIMEOUT) instead of hanging. "" when this
// rank saw that, else what it saw.
inline std::string run_kill(Rank& self, uint32_t victim, int signal = SIGKILL) {
  Buffer buffer(self.device, 1024);
  for (int round = 0; round < 3; ++round) {
    if (round == 2 && self.rank == victim) {
      // Let the peers finish round 1 first: a rank killed while the store
      // still reads its last messages would fail round 1 for them, which is
      // right but not what this test is about.
      usleep(200 * 1000);
      raise(signal);
    }
    const hal_result_t issued = hal_allreduce(buffer.get(), buffer.get(), 256, HAL_DTYPE_F32,
                                              HAL_REDUCE_SUM, self.comm, self.stream);
    const hal_result_t synced =
        issued == HAL_SUCCESS ? hal_stream_synchronize(self.stream) : issued;
    if (round < 2 && synced != HAL_SUCCESS) return "an early round failed";
    if (round == 2) {
      hal_result_t error = HAL_SUCCESS;
      hal_comm_get_async_error(self.comm, &error);
      if (synced == HAL_SUCCESS) return "a survivor succeeded with a dead peer";
      std::printf("rank %u saw %s / %s\n", self.rank, hal_result_string(synced),
                  hal_result_string(error));
      return synced == HAL_ERROR_REMOTE || synced == HAL_ERROR_TIMEOUT ||
                     error == HAL_ERROR_REMOTE || error == HAL_ERROR_TIMEOUT
                 ? ""
                 : std::string("unexpected error kind: ") + hal_result_string(synced) + " / " +
                       hal_result_string(error);
    }
  }
  return "unreachable";
}

}  // namespace coll_test
