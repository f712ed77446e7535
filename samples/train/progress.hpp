// Progress of a long run on a terminal: one status line on stderr (steps,
// tokens per second, time left), redrawn in place and cleared before any
// other output, so the per-step or per-validation lines on stdout stay whole.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace train {

// "1:05:09" / "4:07" / "0:09": hours only when needed.
std::string format_duration(double seconds);

// "step 120/300  25,112 tok/s  ETA 0:42" (ETA "-" while unknown).
std::string progress_line(uint32_t step, uint32_t total, double tokens_per_s, double seconds_left);

class Progress {
 public:
  // |enabled|: draw at all (the caller decides: a terminal, the primary rank).
  Progress(FILE* out, bool enabled) : out_(out), enabled_(enabled) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { clear(); }

  // After a step: |done| of |total| steps, |tokens| trained by this process so
  // far. The rate and the time left are measured from the first update (the
  // first step pays for page faults and kernel compiles). Redraws at most 4
  // times a second, and always on the last step.
  void update(uint32_t done, uint32_t total, double tokens);
  // Erases the line (before other output, and at the end).
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  FILE* out_;
  bool enabled_;
  bool shown_ = false;
  bool started_ = false;
  Clock::time_point start_{}, last_draw_{};
  uint32_t first_step_ = 0;
  double first_tokens_ = 0;
};

}  // namespace train
