// A training run: the replicas (one per device, in this process or one per
// MPI rank), the data they are fed, the gradient all-reduce, gradient
// clipping and the optimizer step, evaluation, sampling and checkpoints.
// Nothing here knows which plugin serves the devices.
#pragma once

#include <hal.h>

#include <memory>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "config.hpp"
#include "corpus.hpp"
#include "hal_handles.hpp"
#include "model.hpp"

namespace train {

// Where the replicas run. In one process: |devices| (one replica each,
// ranks = 1). Under mpirun: one device, and this process is |rank| of |ranks|.
struct Placement {
  std::vector<hal_device_t> devices;
  bool mpi = false;
  uint32_t rank = 0;
  uint32_t ranks = 1;
  uint32_t replicas() const { return static_cast<uint32_t>(devices.size()) * ranks; }
};

struct StepRecord {
  uint32_t step = 0;  // 1-based: the optimizer step just taken
  double loss = 0;    // mean cross-entropy over the global batch, before the step
  double grad_norm = 0;
  double learning_rate = 0;
  double step_ms = 0;
  double tokens_per_s = 0;
};

class Trainer {
 public:
  Trainer(const TrainConfig& config, const Corpus& corpus, const Placement& placement);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  StepRecord step();
  // Mean cross-entropy over the fixed validation sequences.
  double evaluate();
  // |count| bytes continuing |prompt|, drawn at |temperature| (> 0) with |seed|,
  // by the first replica. Non-printable bytes are kept as they are.
  std::string sample(const std::string& prompt, size_t count, double temperature, uint64_t seed);

  // Rank 0 writes; every rank calls (the state is identical on all).
  void save(const std::string& path);
  // Restores a checkpoint of the same configuration (else throws). The
  // configuration's step count is not compared: a run may continue past the
  // checkpoint's last step. The learning-rate schedule stays the checkpoint's
  // (config().steps becomes its length), so a stopped run resumed continues
  // the uninterrupted run's curve bit for bit, and steps past the schedule's
  // end run at its final rate.
  void resume(const std::string& path);

  uint32_t steps_done() const { return steps_done_; }
  const TrainConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  bool is_primary() const { return placement_.rank == 0; }
  std::vector<std::string> implementations() const { return replicas_.front()->implementations(); }

 private:
  void all_reduce_average(float* (Replica::*buffer)() const, size_t count);

  TrainConfig config_;
  const Corpus& corpus_;
  Placement placement_;
  ParamLayout layout_;
  uint32_t local_batch_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<Comm> comms_;
  Rng data_rng_;
  uint32_t steps_done_ = 0;
  std::vector<int32_t> tokens_, targets_;  // the global batch
};

}  // namespace train
