#include "progress.hpp"

#include <cmath>

namespace train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const auto total = static_cast<uint64_t>(std::llround(seconds));
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof text, "%llu:%02llu:%02llu",
                  static_cast<unsigned long long>(total / 3600),
                  static_cast<unsigned long long>(total / 60 % 60),
                  static_cast<unsigned long long>(total % 60));
  } else {
    std::snprintf(text, sizeof text, "%llu:%02llu", static_cast<unsigned long long>(total / 60),
                  static_cast<unsigned long long>(total % 60));
  }
  return text;
}

std::string progress_line(uint32_t step, uint32_t total, double tokens_per_s, double seconds_left) {
  char rate[32] = "-";
  if (std::isfinite(tokens_per_s) && tokens_per_s > 0)
    std::snprintf(rate, sizeof rate, "%.0f", tokens_per_s);
  char text[128];
  std::snprintf(text, sizeof text, "step %u/%u  %s tok/s  ETA %s", step, total, rate,
                format_duration(seconds_left).c_str());
  return text;
}

void Progress::update(uint32_t done, uint32_t total, double tokens) {
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  if (!started_) {
    // The clock starts at the first completed step: the first step pays for
    // first-touch page faults and kernel compiles, which would skew the rate.
    started_ = true;
    start_ = now;
    first_tokens_ = tokens;
    first_step_ = done;
  }
  const bool last = done >= total;
  if (shown_ && !last && now - last_draw_ < std::chrono::milliseconds(250)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const uint32_t timed_steps = done - first_step_;
  double rate = NAN, left = NAN;
  if (timed_steps > 0 && elapsed > 0) {
    rate = (tokens - first_tokens_) / elapsed;
    left = elapsed / timed_steps * (total - done);
  }
  std::fprintf(out_, "\r\033[K%s", progress_line(done, total, rate, left).c_str());
  std::fflush(out_);
  shown_ = true;
}

void Progress::clear() {
  if (!shown_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  shown_ = false;
}

}  // namespace train
