// The model: a GPT-style decoder (token and learned position embeddings,
// pre-norm blocks of causal multi-head attention and a GELU MLP, a final
// layernorm, an untied output matrix, cross-entropy), its parameter layout
// and initialisation, and one replica of it on one device, expressed only
// through HAL's operators.
//
// Every parameter, gradient and Adam moment lives in one flat f32 buffer per
// kind, at the same offsets, so the gradient all-reduce is one call and a
// checkpoint is three arrays. bench/train/train_torch.py defines the same
// model, parameter order and initialisation.
#pragma once

#include <hal.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config.hpp"
#include "hal_handles.hpp"

namespace train {

// One parameter tensor: rows x cols f32 at |offset| elements (vectors have
// one row). Linear layers store their weight as [in, out]: y = x @ W + b.
struct ParamEntry {
  std::string name;
  size_t offset = 0;
  int64_t rows = 1;
  int64_t cols = 0;
  bool decay = false;     // AdamW's weight decay applies (matrices and embeddings)
  float init_std = 0.0f;  // normal(0, std) when > 0; else the constant init_value
  float init_value = 0.0f;
  size_t numel() const { return static_cast<size_t>(rows * cols); }
};

struct LayerParams {
  size_t ln1_g, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_g, ln2_b, fc_w, fc_b, out_w, out_b;
};

struct ParamLayout {
  ModelConfig model;
  std::vector<ParamEntry> entries;  // in initialisation and checkpoint order
  size_t wte = 0, wpe = 0, lnf_g = 0, lnf_b = 0, head_w = 0;
  std::vector<LayerParams> layers;
  size_t count = 0;  // parameters
  size_t total = 0;  // elements including the padding that aligns each entry to 64 bytes
};

ParamLayout make_layout(const ModelConfig& model);

// The initial parameters (layout.total elements, padding 0): entries in
// order, matrices element by element in row-major order from
// Rng(seed + 0x1000).normal() * init_std; constants consume nothing.
std::vector<float> initial_parameters(const ParamLayout& layout, uint64_t seed);

// Matmul FLOPs of one token's forward pass (2 per multiply-add), attention
// included: the count the progress line's FLOP/s uses (x3 for a training step).
double forward_flops_per_token(const ModelConfig& model);

// One copy of the model on one device: its parameters, gradients, optimizer
// state, activations and the planned operators of a training step. All work
// is enqueued on the replica's stream; the caller synchronises.
class Replica {
 public:
  Replica(hal_device_t device, const ParamLayout& layout, uint32_t local_batch,
          Precision precision = Precision::kF32);

  hal_device_t device() const { return device_; }
  hal_stream_t stream() const { return stream_.get(); }
  uint32_t local_batch() const { return batch_; }

  // Enqueues copies of |local_batch| sequences of tokens and targets from
  // host memory that must stay valid until the stream is synchronised.
  void enqueue_batch(const int32_t* tokens, const int32_t* targets);

  void enqueue_forward();     // tokens -> logits
  void enqueue_train_loss();  // loss (into the slot after the gradients) and dlogits
  void enqueue_eval_loss();   // loss into the evaluation slot, no gradient
  void enqueue_backward();    // every gradient, overwritten

  // The gradients followed by the loss: one all-reduce serves both.
  float* gradients_and_loss() const { return gradients_.f32(); }
  size_t gradients_and_loss_count() const { return layout_.total + 1; }
  float* eval_loss() const { return scalars_.f32(kEvalLossSlot); }

  void enqueue_gradient_sum_of_squares();  // into a scalar read by read_scalars
  void enqueue_scale_gradients(float factor);
  void enqueue_adamw(const TrainConfig& config, double learning_rate, int64_t step);

  struct Scalars {
    float loss = 0, gradient_sum_of_squares = 0, eval_loss = 0;
  };
  // Copies the scalars to the host and synchronises the stream.
  Scalars read_scalars();

  // Parameters and Adam moments: layout.total floats each. Synchronous.
  void upload_state(const float* params, const float* m, const float* v);
  void download_state(float* params, float* m, float* v);
  // The gradients (layout.total floats) as the last backward left them. Synchronous.
  void download_gradients(float* out);
  // Row |row| (sequence * context + position) of the logits. Synchronous.
  void download_logits_row(size_t row, float* out);

  // "what: implementation" for each planned operator, for the run's header.
  std::vector<std::string> implementations() const;

 private:
  struct OpCall {
    hal_op_plan_t plan;
    std::vector<void*> operands;
    std::vector<hal_op_scalar_t> scalars;
  };
  static constexpr size_t kLossSlot = 0;  // in the gradients buffer: after layout.total
  static constexpr size_t kSumSquaresSlot = 0;
  static constexpr size_t kEvalLossSlot = 16;
  static constexpr size_t kClipSlot = 32;

  template <typename Desc>
  hal_op_plan_t plan(Desc& desc, hal_op_kind_t kind, const char* label);
  void run(const OpCall& call);
  void run(hal_op_plan_t plan, std::vector<void*> operands,
           std::vector<hal_op_scalar_t> scalars = {});
  void build_plans(const ParamLayout& layout);
  // bf16: the weights' bf16 copy from the f32 master weights.
  void enqueue_low_precision_weights();
  // Where matmuls read weight |offset|: the bf16 copy, or the f32 weights.
  void* matmul_weight(size_t offset) const;

  hal_device_t device_;
  ParamLayout layout_;
  uint32_t batch_;
  size_t rows_;  // batch * context
  Precision precision_;
  hal_dtype_t compute_dtype_;  // of matmul operands: f32, or bf16 in mixed precision
  Stream stream_;
  std::vector<Plan> plans_;
  std::vector<std::string> plan_labels_;  // what each plan computes, for implementations()
  std::map<std::string, hal_op_plan_t> plan_cache_;  // descriptor bytes -> plan
  size_t workspace_bytes_ = 0;

  DeviceBuffer params_, gradients_, adam_m_, adam_v_, squares_, scalars_;
  DeviceBuffer tokens_, targets_;
  // Activations kept for the backward pass, one slice per layer.
  DeviceBuffer residual_, middle_, ln1_, ln2_, ln_stats_, qkv_, attention_, lse_, fc_pre_, fc_act_;
  DeviceBuffer final_ln_, final_stats_, logits_, dlogits_;
  // Backward temporaries.
  DeviceBuffer d_residual_, d_norm_out_, d_fc_, d_attention_, d_q_, d_k_, d_v_, d_qkv_;
  DeviceBuffer workspace_;
  // Mixed precision only: bf16 weights, and bf16 copies of the gradients
  // that are matmul operands (the f32 ones accumulate).
  DeviceBuffer params_low_, d_residual_low_, d_fc_low_;
  hal_op_plan_t cast_weights_ = nullptr, cast_rows_ = nullptr;

  std::vector<OpCall> forward_, train_loss_, eval_loss_, backward_, sum_squares_;
  hal_op_plan_t scale_plan_ = nullptr;
  float clip_factor_ = 1.0f;  // host source of the clip factor's copy
  hal_op_plan_t adamw_decay_ = nullptr, adamw_no_decay_ = nullptr;
  std::vector<int64_t> decay_numels_, no_decay_numels_;
};

}  // namespace train
