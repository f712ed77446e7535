// train: trains the sample transformer on the devices HAL finds.
//
//   train [--steps N] [--layers L] [--width C] [--heads H] [--context T]
//         [--batch B] [--lr X] [--seed S] [--precision f32|bf16]
//         [--eval-every N] [--devices K|all]
//         [--mpi] [--corpus PATH] [--save FILE] [--save-every N]
//         [--stop-after K] [--resume FILE] [--log FILE]
//         [--label TEXT] [--sample N] [--temperature X] [--quiet]
//         [--expect-log FILE --tolerance X]
//
// Exit status: 0 trained (and matched --expect-log); 1 a failure while
// training, or a loss curve outside the tolerance; 2 a usage error; 130
// stopped by SIGINT or SIGTERM (after the step in flight, and a checkpoint
// with --save).
#include <hal.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "progress.hpp"
#include "trainer.hpp"

namespace {

using train::HalError;

struct Options {
  train::TrainConfig config;
  uint32_t eval_every = 50;
  std::string devices = "all";
  bool mpi = false;
  std::string corpus = train::kDefaultCorpusDirectory;
  std::string save, resume, log, expect_log, label = "hal";
  uint32_t save_every = 0;  // also save after every N-th step (with --save)
  uint32_t stop_after = 0;  // end this process after step K (0: run to --steps)
  double tolerance = 0;
  bool has_tolerance = false;
  uint32_t sample_bytes = 0;
  double temperature = 0.8;
  bool quiet = false;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

uint64_t parse_unsigned(const std::string& flag, const std::string& text, uint64_t max) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || *end != '\0' || errno != 0 || value > max) {
    throw UsageError(flag + " expects a whole number up to " + std::to_string(max) + ", not '" +
                     text + "'");
  }
  return value;
}

double parse_double(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value)) {
    throw UsageError(flag + " expects a number, not '" + text + "'");
  }
  return value;
}

Options parse(int argc, char** argv) {
  Options options;
  train::TrainConfig& c = options.config;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      return argv[++i];
    };
    auto u32 = [&]() { return static_cast<uint32_t>(parse_unsigned(flag, value(), 1u << 30)); };
    if (flag == "--steps")
      c.steps = u32();
    else if (flag == "--layers")
      c.model.layers = u32();
    else if (flag == "--width")
      c.model.width = u32();
    else if (flag == "--heads")
      c.model.heads = u32();
    else if (flag == "--context")
      c.model.context = u32();
    else if (flag == "--batch")
      c.batch = u32();
    else if (flag == "--warmup")
      c.warmup_steps = u32();
    else if (flag == "--lr")
      c.learning_rate = parse_double(flag, value());
    else if (flag == "--seed")
      c.seed = parse_unsigned(flag, value(), UINT64_MAX);
    else if (flag == "--precision") {
      const std::string name = value();
      if (name == "f32") {
        c.precision = train::Precision::kF32;
      } else if (name == "bf16") {
        c.precision = train::Precision::kBf16;
      } else {
        throw UsageError("--precision expects f32 or bf16, not '" + name + "'");
      }
    } else if (flag == "--eval-every")
      options.eval_every = u32();
    else if (flag == "--devices")
      options.devices = value();
    else if (flag == "--mpi")
      options.mpi = true;
    else if (flag == "--corpus")
      options.corpus = value();
    else if (flag == "--save")
      options.save = value();
    else if (flag == "--save-every")
      options.save_every = u32();
    else if (flag == "--stop-after")
      options.stop_after = u32();
    else if (flag == "--resume")
      options.resume = value();
    else if (flag == "--log")
      options.log = value();
    else if (flag == "--label")
      options.label = value();
    else if (flag == "--sample")
      options.sample_bytes = u32();
    else if (flag == "--temperature")
      options.temperature = parse_double(flag, value());
    else if (flag == "--quiet")
      options.quiet = true;
    else if (flag == "--expect-log")
      options.expect_log = value();
    else if (flag == "--tolerance") {
      options.tolerance = parse_double(flag, value());
      options.has_tolerance = true;
    } else if (flag == "--help" || flag == "-h") {
      throw UsageError("");
    } else {
      throw UsageError("unknown option " + flag);
    }
  }
  if (!options.expect_log.empty() && !options.has_tolerance) {
    throw UsageError("--expect-log needs --tolerance");
  }
  if (!options.expect_log.empty() && options.log.empty()) {
    throw UsageError("--expect-log compares this run's --log with it: give --log too");
  }
  if (options.save_every > 0 && options.save.empty()) {
    throw UsageError("--save-every needs --save FILE (the checkpoint it rewrites)");
  }
  if (!(options.tolerance >= 0)) throw UsageError("--tolerance must be >= 0");
  if (!(options.temperature > 0)) throw UsageError("--temperature must be > 0");
  return options;
}

uint32_t env_number(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr)
    throw UsageError(std::string("--mpi: ") + name + " is not set (run under mpirun)");
  return static_cast<uint32_t>(parse_unsigned(name, text, 1u << 20));
}

// Every device of the plugin that serves device 0 (collectives join devices
// of one plugin), or the first K of them.
train::Placement place(const Options& options) {
  train::Placement placement;
  uint32_t count = 0;
  train::check(hal_device_count(&count), "hal_device_count");
  if (count == 0) throw std::runtime_error("HAL found no device (see halinfo for why)");
  std::vector<hal_device_t> devices;
  std::string first_plugin;
  for (uint32_t i = 0; i < count; ++i) {
    hal_device_t device = nullptr;
    train::check(hal_device_get(i, &device), "hal_device_get");
    hal_device_properties_t properties;
    std::memset(&properties, 0, sizeof properties);
    properties.struct_size = sizeof properties;
    train::check(hal_device_get_properties(device, &properties), "hal_device_get_properties");
    if (i == 0) first_plugin = properties.plugin;
    if (first_plugin == properties.plugin) devices.push_back(device);
  }
  if (options.mpi) {
    placement.mpi = true;
    placement.rank = env_number("OMPI_COMM_WORLD_RANK");
    placement.ranks = env_number("OMPI_COMM_WORLD_SIZE");
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const uint64_t local_rank =
        local ? parse_unsigned("OMPI_COMM_WORLD_LOCAL_RANK", local, 1u << 20) : 0;
    placement.devices = {devices[local_rank % devices.size()]};
    return placement;
  }
  uint64_t wanted = devices.size();
  if (options.devices != "all") wanted = parse_unsigned("--devices", options.devices, 1024);
  if (wanted == 0 || wanted > devices.size()) {
    throw UsageError("--devices " + options.devices + ": plugin " + first_plugin + " has " +
                     std::to_string(devices.size()) + " device(s)");
  }
  devices.resize(wanted);
  placement.devices = devices;
  return placement;
}

double declared_peak(const train::Placement& placement) {
  double peak = 0;
  for (hal_device_t device : placement.devices) {
    hal_device_properties_t properties;
    std::memset(&properties, 0, sizeof properties);
    properties.struct_size = sizeof properties;
    if (hal_device_get_properties(device, &properties) == HAL_SUCCESS) {
      peak += properties.peak_fp32_flops;
    }
  }
  return peak * placement.ranks;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", ch);
      out += escaped;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// step -> loss from a log this program wrote (one JSON object per line).
std::map<uint32_t, double> read_losses(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open the expected log " + path);
  std::map<uint32_t, double> losses;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    auto field = [&](const char* name) -> double {
      const std::string key = std::string("\"") + name + "\":";
      const size_t at = line.find(key);
      if (at == std::string::npos) {
        throw std::runtime_error(path + ":" + std::to_string(number) + ": no \"" + name +
                                 "\" field");
      }
      const char* start = line.c_str() + at + key.size();
      char* end = nullptr;
      const double value = std::strtod(start, &end);
      if (end == start) {
        throw std::runtime_error(path + ":" + std::to_string(number) + ": \"" + name +
                                 "\" is not a number");
      }
      return value;
    };
    const double step = field("step");
    if (!(step >= 1 && step <= 1e9) || step != std::floor(step)) {
      throw std::runtime_error(path + ":" + std::to_string(number) + ": bad step");
    }
    losses[static_cast<uint32_t>(step)] = field("loss");
  }
  if (losses.empty()) throw std::runtime_error("the expected log " + path + " holds no step");
  return losses;
}

// Set by SIGINT and SIGTERM: the run stops after the step in flight (a second
// signal ends the process at once: the handler restores the default).
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal) {
  g_stop_signal = signal;
  std::signal(signal, SIG_DFL);
}

int run(const Options& options) {
  const train::Placement placement = place(options);
  const train::Corpus corpus = train::load_corpus(options.corpus, options.config.model.context);
  train::Trainer trainer(options.config, corpus, placement);
  const bool primary = trainer.is_primary();
  if (!options.resume.empty()) trainer.resume(options.resume);

  // The schedule (trainer.config().steps) is this run's --steps, or, resumed,
  // the checkpoint's; the run trains until --steps (or --stop-after).
  const uint32_t target = options.config.steps;
  if (trainer.steps_done() > target) {
    throw UsageError("--steps " + std::to_string(target) + ": the checkpoint " + options.resume +
                     " is already at step " + std::to_string(trainer.steps_done()) +
                     "; ask for more steps to continue it");
  }
  const uint32_t last_step = options.stop_after > 0 ? std::min(target, options.stop_after) : target;
  const train::TrainConfig& config = trainer.config();
  const double flops_per_step =
      3.0 * train::forward_flops_per_token(config.model) * config.batch * config.model.context;
  const double peak = declared_peak(placement);
  if (primary) {
    std::printf("model: %s\n", train::describe(config).c_str());
    std::printf("parameters: %zu; corpus: %zu train bytes, %zu validation bytes from %zu file(s)\n",
                trainer.layout().count, corpus.train.size(), corpus.validation.size(),
                corpus.files.size());
    std::printf(
        "replicas: %u (%zu device(s) in this process, %u rank(s)); declared peak %.1f GFLOP/s\n",
        placement.replicas(), placement.devices.size(), placement.ranks, peak / 1e9);
    if (!options.quiet) {
      std::map<std::string, int> plans;  // "what: implementation" -> plans
      for (const std::string& line : trainer.implementations()) ++plans[line];
      std::printf("operator plans:");
      for (const auto& [line, count] : plans) std::printf(" [%s x%d]", line.c_str(), count);
      std::printf("\n");
    }
    if (!options.resume.empty()) {
      std::printf("resumed from %s at step %u\n", options.resume.c_str(), trainer.steps_done());
    }
    if (target > config.steps) {
      std::printf(
          "the learning-rate schedule ends at step %u: steps %u..%u continue at its final rate "
          "%.2e\n",
          config.steps, std::max(config.steps, trainer.steps_done()) + 1, target,
          train::learning_rate_at(config, config.steps));
    }
    std::fflush(stdout);
  }
  // One rank stopping alone would leave the others waiting in a collective:
  // under mpirun the signals keep their default (mpirun ends every rank).
  if (!placement.mpi) {
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
  }
  train::Progress progress(stderr, primary && ::isatty(STDERR_FILENO) == 1);
  auto save = [&](const char* why) {
    progress.clear();
    trainer.save(options.save);
    if (primary)
      std::printf("saved %s (%s, step %u)\n", options.save.c_str(), why, trainer.steps_done());
    std::fflush(stdout);
  };

  std::ofstream log;
  if (primary && !options.log.empty()) {
    log.open(options.log, trainer.steps_done() > 0 ? std::ios::app : std::ios::trunc);
    if (!log) throw std::runtime_error("cannot write the log " + options.log);
  }
  const uint32_t first_step = trainer.steps_done();
  double total_ms = 0, total_tokens = 0, last_val = NAN, tokens_this_run = 0;
  uint32_t timed_steps = 0;
  bool interrupted = false;
  while (trainer.steps_done() < last_step) {
    if (g_stop_signal != 0) {
      interrupted = true;
      break;
    }
    const train::StepRecord record = trainer.step();
    tokens_this_run += static_cast<double>(config.batch) * config.model.context;
    const bool evaluate =
        (options.eval_every > 0 && record.step % options.eval_every == 0) || record.step == target;
    double val_loss = NAN;
    if (evaluate) val_loss = last_val = trainer.evaluate();
    if (!std::isfinite(record.loss)) {
      throw std::runtime_error("the loss is " + std::to_string(record.loss) + " at step " +
                               std::to_string(record.step) + ": training diverged");
    }
    if (record.step > first_step + 1) {  // a run's first step pays for first-touch page faults
      total_ms += record.step_ms;
      total_tokens += static_cast<double>(config.batch) * config.model.context;
      ++timed_steps;
    }
    if (options.save_every > 0 && record.step % options.save_every == 0 &&
        record.step < last_step) {
      save("periodic");
    }
    if (!primary) continue;
    const double flops = flops_per_step / (record.step_ms / 1000.0);
    if (!options.quiet || evaluate) {
      progress.clear();
      char val[32] = "     -";
      if (evaluate) std::snprintf(val, sizeof val, "%.4f", val_loss);
      std::printf(
          "step %4u/%u  loss %.4f  val %s  lr %.2e  norm %.3f  %7.1f ms  %8.0f tok/s  %6.2f "
          "GFLOP/s  %5.2f%% of peak\n",
          record.step, target, record.loss, val, record.learning_rate, record.grad_norm,
          record.step_ms, record.tokens_per_s, flops / 1e9, peak > 0 ? 100.0 * flops / peak : 0.0);
      std::fflush(stdout);
    }
    if (log.is_open()) {
      char line[512];
      std::snprintf(line, sizeof line,
                    "{\"step\":%u,\"loss\":%.9g,\"val_loss\":%s,\"lr\":%.9g,\"grad_norm\":%.9g,"
                    "\"step_ms\":%.6g,\"tokens_per_s\":%.6g,\"label\":",
                    record.step, record.loss, evaluate ? std::to_string(val_loss).c_str() : "null",
                    record.learning_rate, record.grad_norm, record.step_ms, record.tokens_per_s);
      log << line << json_string(options.label) << "}\n";
      log.flush();
    }
    progress.update(record.step, target, tokens_this_run);
  }
  progress.clear();
  if (g_stop_signal != 0 && trainer.steps_done() < last_step) interrupted = true;
  if (primary && timed_steps > 0) {
    std::printf(
        "done: %u steps, mean %.1f ms/step, %.0f tokens/s (steps %u..), last val loss %.4f\n",
        trainer.steps_done(), total_ms / timed_steps, total_tokens / (total_ms / 1000.0),
        first_step + 2, last_val);
    if (first_step > 0) {
      std::printf("(resumed at step %u: %u steps trained in this run)\n", first_step,
                  trainer.steps_done() - first_step);
    }
  }
  if (!options.save.empty()) save(interrupted ? "interrupted" : "end of the run");
  if (interrupted || trainer.steps_done() < target) {
    if (primary) {
      std::printf("stopped at step %u of %u%s%s\n", trainer.steps_done(), target,
                  interrupted ? " (signal)" : " (--stop-after)",
                  options.save.empty() ? "" : ("; continue with --resume " + options.save).c_str());
    }
    if (interrupted) return 130;
  }
  if (primary && options.sample_bytes > 0) {
    const std::string text =
        trainer.sample("The ", options.sample_bytes, options.temperature, config.seed);
    std::printf("sample (temperature %.2f):\nThe %s\n", options.temperature, text.c_str());
  }
  if (primary && !options.expect_log.empty()) {
    // Compares this run's log with the expected one, step by step.
    const std::map<uint32_t, double> expected = read_losses(options.expect_log);
    const std::map<uint32_t, double> actual = read_losses(options.log);
    double worst = 0;
    uint32_t compared = 0, worst_step = 0;
    for (const auto& [step, loss] : actual) {
      const auto found = expected.find(step);
      if (found == expected.end()) continue;
      const double difference = std::fabs(loss - found->second);
      if (!(difference <= worst)) {
        worst = difference;
        worst_step = step;
      }
      ++compared;
    }
    if (compared == 0) throw std::runtime_error("no step in common with " + options.expect_log);
    std::printf(
        "loss curve vs %s: %u steps compared, largest difference %.3g at step %u "
        "(tolerance %.3g)\n",
        options.expect_log.c_str(), compared, worst, worst_step, options.tolerance);
    if (!(worst <= options.tolerance)) {
      std::printf("FAILED: the loss curves differ by more than the tolerance\n");
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const UsageError& error) {
    if (error.what()[0] != '\0') std::fprintf(stderr, "train: %s\n", error.what());
    std::fprintf(
        stderr,
        "usage: train [--steps N] [--layers L] [--width C] [--heads H] [--context T]\n"
        "             [--batch B] [--warmup N] [--lr X] [--seed S] [--precision f32|bf16]\n"
        "             [--eval-every N]\n"
        "             [--devices K|all] [--mpi] [--corpus PATH] [--save FILE]\n"
        "             [--save-every N] [--stop-after K] [--resume FILE]\n"
        "             [--log FILE] [--label TEXT] [--sample N]\n"
        "             [--temperature X] [--quiet] [--expect-log FILE --tolerance X]\n");
    return 2;
  }
  const hal_result_t init = hal_init(nullptr);
  if (init != HAL_SUCCESS) {
    std::fprintf(stderr, "train: hal_init failed: %s: %s\n", hal_result_string(init),
                 hal_error_last_message());
    return 1;
  }
  int status = 1;
  try {
    status = run(options);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "train: %s\n", error.what());
    status = 2;
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr, "train: %s\n", error.what());
    status = 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "train: %s\n", error.what());
    status = 1;
  }
  hal_shutdown();
  return status;
}
