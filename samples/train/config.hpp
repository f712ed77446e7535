// What a training run is: the model's shape and the optimizer's settings.
// samples/train/README.md and bench/train/train_torch.py state the same model.
#pragma once

#include <cstdint>
#include <string>

namespace train {

struct ModelConfig {
  uint32_t layers = 4;
  uint32_t width = 128;  // C
  uint32_t heads = 4;    // head dimension C / heads
  uint32_t context = 128;
  uint32_t vocab = 256;  // byte-level tokens
  bool operator==(const ModelConfig&) const = default;
};

// What the matmuls compute in. kBf16 is mixed precision: bf16 copies of
// the weights and of the activations and gradients that feed matmuls, f32
// accumulation, f32 master weights, gradients, optimizer state and
// residual stream.
enum class Precision : uint32_t { kF32 = 0, kBf16 = 1 };

const char* precision_name(Precision precision);

struct TrainConfig {
  ModelConfig model;
  Precision precision = Precision::kF32;
  uint32_t batch = 8;  // global sequences per step, split evenly over the devices
  // The learning-rate schedule's length: a fresh run's --steps; a resumed run
  // keeps its checkpoint's (and may train past it, at the final rate).
  uint32_t steps = 300;
  uint32_t warmup_steps = 10;
  double learning_rate = 3e-3;  // peak
  double final_lr_ratio = 0.1;  // cosine decays to this fraction of the peak
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;  // on matrices and embeddings only
  float max_grad_norm = 1.0f;
  uint64_t seed = 1337;
  bool operator==(const TrainConfig&) const = default;
};

// The learning rate of optimizer step |step| (0-based): linear warm-up, then
// cosine decay to final_lr_ratio * learning_rate at the last step, and that
// final rate for steps past the schedule.
double learning_rate_at(const TrainConfig& config, uint32_t step);

// Throws std::invalid_argument with a sentence when |config| cannot train
// (a width the heads do not divide, a batch the devices do not divide, a
// size beyond what the sample allows).
void validate(const TrainConfig& config, uint32_t devices);

std::string describe(const TrainConfig& config);

}  // namespace train
