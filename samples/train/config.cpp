#include "config.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace train {

const char* precision_name(Precision precision) {
  return precision == Precision::kBf16 ? "bf16 (mixed, f32 master weights)" : "f32";
}

double learning_rate_at(const TrainConfig& config, uint32_t step) {
  const double peak = config.learning_rate;
  if (step < config.warmup_steps) return peak * (step + 1) / config.warmup_steps;
  const uint32_t decay_steps =
      config.steps > config.warmup_steps + 1 ? config.steps - config.warmup_steps - 1 : 1;
  const double progress =
      std::min(1.0, static_cast<double>(step - config.warmup_steps) / decay_steps);
  const double floor = peak * config.final_lr_ratio;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
}

void validate(const TrainConfig& config, uint32_t devices) {
  const ModelConfig& m = config.model;
  auto fail = [](const std::string& why) { throw std::invalid_argument(why); };
  // Bounds keep every size product far from overflow and the run on a laptop.
  if (m.layers < 1 || m.layers > 64) fail("layers must be 1..64");
  if (m.width < 8 || m.width > 4096) fail("width must be 8..4096");
  if (m.heads < 1 || m.width % m.heads != 0) fail("heads must divide the width");
  if (m.context < 2 || m.context > 4096) fail("context must be 2..4096");
  if (m.vocab != 256) fail("the byte-level tokenizer has a vocabulary of 256");
  if (devices == 0) fail("no device to train on");
  if (config.batch < 1 || config.batch > 4096) fail("batch must be 1..4096");
  if (config.batch % devices != 0) {
    fail("the global batch " + std::to_string(config.batch) + " does not split evenly over " +
         std::to_string(devices) + " devices");
  }
  if (config.precision != Precision::kF32 && config.precision != Precision::kBf16) {
    fail("precision must be f32 or bf16");
  }
  if (config.steps < 1) fail("steps must be at least 1");
  if (config.warmup_steps < 1) fail("warmup_steps must be at least 1");
  if (!(config.learning_rate > 0) || !std::isfinite(config.learning_rate)) {
    fail("the learning rate must be positive and finite");
  }
  if (!(config.max_grad_norm >= 0)) fail("max_grad_norm must be >= 0");
}

std::string describe(const TrainConfig& config) {
  std::ostringstream out;
  const ModelConfig& m = config.model;
  out << "layers " << m.layers << ", width " << m.width << ", heads " << m.heads << ", context "
      << m.context << ", vocab " << m.vocab << ", batch " << config.batch << ", steps "
      << config.steps << ", warmup " << config.warmup_steps << ", lr " << config.learning_rate
      << " to x" << config.final_lr_ratio << ", betas " << config.beta1 << "/" << config.beta2
      << ", eps " << config.epsilon << ", weight decay " << config.weight_decay << ", clip "
      << config.max_grad_norm << ", seed " << config.seed;
  return out.str();
}

}  // namespace train
