#include "trainer.hpp"

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace train {

namespace {

// Validation: at least 16 sequences, a whole number of global batches.
uint32_t validation_sequences(uint32_t batch) {
  return (16 + batch - 1) / batch * batch;
}

}  // namespace

Trainer::Trainer(const TrainConfig& config, const Corpus& corpus, const Placement& placement)
    : config_(config),
      corpus_(corpus),
      placement_(placement),
      layout_(make_layout(config.model)),
      local_batch_(0),
      data_rng_(config.seed) {
  if (placement.devices.empty()) throw std::invalid_argument("no device to train on");
  if (placement.mpi && placement.devices.size() != 1) {
    throw std::invalid_argument("under mpirun each rank drives exactly one device");
  }
  validate(config, placement.replicas());
  local_batch_ = config.batch / placement.replicas();

  const std::vector<float> params = initial_parameters(layout_, config.seed);
  const std::vector<float> zeros(layout_.total, 0.0f);
  for (hal_device_t device : placement.devices) {
    replicas_.push_back(std::make_unique<Replica>(device, layout_, local_batch_, config.precision));
    replicas_.back()->upload_state(params.data(), zeros.data(), zeros.data());
  }

  if (placement.mpi) {
    hal_comm_config_t comm_config = HAL_COMM_CONFIG_INIT;
    comm_config.bootstrap = HAL_COMM_BOOTSTRAP_MPI;
    hal_comm_t comm = nullptr;
    check(hal_comm_init_rank(placement.devices[0], placement.ranks, nullptr, placement.rank,
                             &comm_config, &comm),
          "hal_comm_init_rank (MPI bootstrap)");
    comms_.emplace_back(comm);
  } else if (placement.devices.size() > 1) {
    std::vector<hal_comm_t> comms(placement.devices.size(), nullptr);
    check(hal_comm_init_all(static_cast<uint32_t>(comms.size()), placement.devices.data(), nullptr,
                            comms.data()),
          "hal_comm_init_all");
    for (hal_comm_t comm : comms) comms_.emplace_back(comm);
  }
}

Trainer::~Trainer() {
  // Work still enqueued (after an exception) finishes before buffers go.
  for (const auto& replica : replicas_) hal_stream_synchronize(replica->stream());
}

void Trainer::all_reduce_average(float* (Replica::*buffer)() const, size_t count) {
  if (comms_.empty()) return;
  // One thread drives every local rank: the calls form one group.
  check(hal_group_start(), "hal_group_start");
  hal_result_t first = HAL_SUCCESS;
  std::string first_message;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& replica = *replicas_[i];
    float* data = (replica.*buffer)();
    const hal_result_t result = hal_allreduce(data, data, count, HAL_DTYPE_F32, HAL_REDUCE_AVG,
                                              comms_[i].get(), replica.stream());
    if (result != HAL_SUCCESS && first == HAL_SUCCESS) {
      first = result;
      first_message = hal_error_last_message();
    }
  }
  const hal_result_t ended = hal_group_end();
  if (first != HAL_SUCCESS) {
    throw HalError(first, std::string("hal_allreduce failed: ") + hal_result_string(first) + ": " +
                              first_message);
  }
  check(ended, "hal_group_end");
}

StepRecord Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  const uint32_t T = config_.model.context;
  sample_batch(corpus_, T, config_.batch, data_rng_, tokens_, targets_);
  const size_t local_tokens = size_t{local_batch_} * T;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const size_t replica_index = size_t{placement_.rank} * replicas_.size() + i;
    Replica& replica = *replicas_[i];
    replica.enqueue_batch(tokens_.data() + replica_index * local_tokens,
                          targets_.data() + replica_index * local_tokens);
    replica.enqueue_forward();
    replica.enqueue_train_loss();
    replica.enqueue_backward();
  }
  all_reduce_average(&Replica::gradients_and_loss, layout_.total + 1);
  std::vector<Replica::Scalars> scalars;
  for (const auto& replica : replicas_) {
    replica->enqueue_gradient_sum_of_squares();
    scalars.push_back(replica->read_scalars());
  }
  // Every replica holds the same averaged gradients, hence the same norm.
  const double norm = std::sqrt(static_cast<double>(scalars[0].gradient_sum_of_squares));
  double clip = 1.0;
  if (config_.max_grad_norm > 0) clip = std::min(1.0, config_.max_grad_norm / (norm + 1e-6));
  const double lr = learning_rate_at(config_, steps_done_);
  for (const auto& replica : replicas_) {
    if (clip < 1.0) replica->enqueue_scale_gradients(static_cast<float>(clip));
    replica->enqueue_adamw(config_, lr, static_cast<int64_t>(steps_done_) + 1);
  }
  for (const auto& replica : replicas_) {
    check(hal_stream_synchronize(replica->stream()), "hal_stream_synchronize");
  }
  ++steps_done_;
  StepRecord record;
  record.step = steps_done_;
  record.loss = scalars[0].loss;
  record.grad_norm = norm;
  record.learning_rate = lr;
  record.step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  record.tokens_per_s = static_cast<double>(config_.batch) * T / (record.step_ms / 1000.0);
  return record;
}

double Trainer::evaluate() {
  const uint32_t T = config_.model.context;
  const uint32_t sequences = validation_sequences(config_.batch);
  std::vector<int32_t> tokens, targets;
  validation_batch(corpus_, T, sequences, tokens, targets);
  const size_t local_tokens = size_t{local_batch_} * T;
  double sum = 0;
  const uint32_t chunks = sequences / config_.batch;
  for (uint32_t chunk = 0; chunk < chunks; ++chunk) {
    const size_t base = size_t{chunk} * config_.batch * T;
    for (size_t i = 0; i < replicas_.size(); ++i) {
      const size_t replica_index = size_t{placement_.rank} * replicas_.size() + i;
      Replica& replica = *replicas_[i];
      replica.enqueue_batch(tokens.data() + base + replica_index * local_tokens,
                            targets.data() + base + replica_index * local_tokens);
      replica.enqueue_forward();
      replica.enqueue_eval_loss();
    }
    all_reduce_average(&Replica::eval_loss, 1);
    double chunk_loss = 0;
    for (size_t i = 0; i < replicas_.size(); ++i) {
      const Replica::Scalars scalars = replicas_[i]->read_scalars();
      if (i == 0) chunk_loss = scalars.eval_loss;
    }
    sum += chunk_loss;
  }
  return sum / chunks;
}

std::string Trainer::sample(const std::string& prompt, size_t count, double temperature,
                            uint64_t seed) {
  if (!(temperature > 0) || !std::isfinite(temperature)) {
    throw std::invalid_argument("the sampling temperature must be positive and finite");
  }
  Replica& replica = *replicas_.front();
  const size_t T = config_.model.context;
  const size_t vocab = config_.model.vocab;
  std::vector<int32_t> tokens(size_t{local_batch_} * T, 0), targets(tokens.size(), 0);
  std::vector<float> logits(vocab);
  std::vector<double> weights(vocab);
  std::string text = prompt.empty() ? std::string("\n") : prompt;
  const size_t prompt_bytes = text.size();
  Rng rng(seed);
  for (size_t produced = 0; produced < count; ++produced) {
    const size_t window = std::min(T, text.size());
    for (size_t t = 0; t < window; ++t) {
      tokens[t] = static_cast<uint8_t>(text[text.size() - window + t]);
    }
    replica.enqueue_batch(tokens.data(), targets.data());
    replica.enqueue_forward();
    replica.download_logits_row(window - 1, logits.data());
    double largest = -INFINITY;
    for (float logit : logits) largest = std::max(largest, static_cast<double>(logit));
    double total = 0;
    for (size_t v = 0; v < vocab; ++v) {
      weights[v] = std::exp((logits[v] - largest) / temperature);
      total += weights[v];
    }
    double pick = rng.uniform() * total;
    size_t chosen = vocab - 1;
    for (size_t v = 0; v < vocab; ++v) {
      pick -= weights[v];
      if (pick < 0) {
        chosen = v;
        break;
      }
    }
    text.push_back(static_cast<char>(chosen));
  }
  return text.substr(prompt_bytes);
}

void Trainer::save(const std::string& path) {
  Checkpoint checkpoint;
  checkpoint.config = config_;
  checkpoint.step = steps_done_;
  checkpoint.rng_state = data_rng_.state();
  checkpoint.params.resize(layout_.total);
  checkpoint.m.resize(layout_.total);
  checkpoint.v.resize(layout_.total);
  replicas_.front()->download_state(checkpoint.params.data(), checkpoint.m.data(),
                                    checkpoint.v.data());
  if (is_primary()) save_checkpoint(checkpoint, path);
}

void Trainer::resume(const std::string& path) {
  const Checkpoint checkpoint = load_checkpoint(path);
  TrainConfig same_schedule = config_;
  same_schedule.steps = checkpoint.config.steps;
  if (!(checkpoint.config == same_schedule)) {
    throw std::runtime_error("checkpoint " + path + " was written by a run of a different " +
                             "configuration (" + describe(checkpoint.config) + "); this run is (" +
                             describe(config_) + ")");
  }
  for (const auto& replica : replicas_) {
    replica->upload_state(checkpoint.params.data(), checkpoint.m.data(), checkpoint.v.data());
  }
  steps_done_ = checkpoint.step;
  data_rng_.set_state(checkpoint.rng_state);
  config_.steps = checkpoint.config.steps;  // the schedule of the run that began it
}

}  // namespace train
