// Checkpoints: everything a run needs to continue the same loss curve (the
// configuration, the step, the sampler's RNG state, the parameters and both
// Adam moments), in one file written atomically and read as untrusted input.
//
// Format, native little-endian (the header records the byte order):
//   "HALCKPT1" | u32 version | u32 endian marker 0x01020304
//   | config: u32 layers, width, heads, context, vocab, batch, steps (the
//   |         schedule's length), warmup
//   |         f64 learning_rate, final_lr_ratio | f32 beta1, beta2, epsilon,
//   |         weight_decay, max_grad_norm | u64 seed | u32 precision
//   | u32 step | u64 rng_state | u64 elements
//   | f32 params[elements] | f32 m[elements] | f32 v[elements]
//   | u64 FNV-1a-64 of every byte before it
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"

namespace train {

struct Checkpoint {
  TrainConfig config;
  uint32_t step = 0;  // optimizer steps done
  uint64_t rng_state = 0;
  std::vector<float> params, m, v;  // make_layout(config.model).total each
};

// Writes |checkpoint| to |path| through a private temporary file in the same
// directory (mode 0600, created exclusively), fsynced and renamed over
// |path|, so a crash leaves the old file or the new one, never half of one.
// Throws std::runtime_error naming the path and the system error.
void save_checkpoint(const Checkpoint& checkpoint, const std::string& path);

// Reads |path| completely and checks it before returning anything: a regular
// file, the magic, version and byte order, a configuration that validates,
// the exact size the configuration implies, and the checksum. Throws
// std::runtime_error with a sentence naming the path and the first problem
// found; nothing is returned half-loaded.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace train
