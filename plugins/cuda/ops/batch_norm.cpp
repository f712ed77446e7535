// HAL_OP_BATCH_NORM (training) and HAL_OP_BATCH_NORM_BACKWARD (training) on
// cuDNN 9's graph API: one NORM_FORWARD (mode CUDNN_BATCH_NORM, phase
// CUDNN_NORM_FWD_TRAINING) or NORM_BACKWARD operation in a graph of its own,
// planned and run as the convolution is (cudnn_graph.hpp).
//
// Forward: x, scale, bias (HAL's shift) and y; the batch's mean and inverse
// standard deviation are outputs cuDNN always writes (MEAN_DESC,
// INV_VARIANCE_DESC): HAL's saved_mean and saved_rstd with
// HAL_BATCH_NORM_SAVE_STATS, else f32 [C] scratch in the plan's workspace
// after cuDNN's own. Epsilon is a by-value f32 tensor. With
// HAL_BATCH_NORM_UPDATE_RUNNING the running mean and variance are both the
// input and the output running statistics (the same memory: cuDNN's update,
// like its legacy cudnnBatchNormalizationForwardTraining, is element-wise
// per channel) and EXP_AVG_FACTOR is the execution's momentum, a by-value
// f32 tensor (cuDNN updates the running variance with the unbiased batch
// variance, as HAL and PyTorch do).
// Backward: x, dy, scale, the saved mean and inverse std, dx, dscale and
// dbias (HAL's grad_scale, grad_shift; scratch in the workspace when the
// flags do not ask for them).
//
// Declined, each with its reason, to the portable implementation:
//  - inference (no HAL_BATCH_NORM_TRAINING), forward and backward: HAL gives
//    running_var and epsilon; cuDNN's graph batch norm reads an inverse
//    standard deviation there, which would take a pointwise graph (add,
//    rsqrt) not built here;
//  - the fused relu; an absent scale or shift (cuDNN reads both tensors;
//    HAL's defaults 1 and 0 are not materialised here);
//  - per-channel tensors other than f32; x, y (grad_y, grad_x) of different
//    dtypes; more than 3 spatial dimensions; empty problems.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../device.hpp"
#include "cudnn.hpp"
#include "cudnn_graph.hpp"
#include "hal_util/names.hpp"
#include "ops.hpp"

namespace hal::cuda::ops {
namespace {

constexpr size_t kScratchAlignment = 256;

size_t round_up(size_t value, size_t to) {
  return (value + to - 1) / to * to;
}

// One graph tensor: its HAL operand (-1: workspace scratch number |scratch|,
// -2: the epsilon scalar, -3: the momentum scalar).
struct Role {
  cudnnBackendAttributeName_t attribute{};
  DnnTensor tensor;
  int operand = -1;
  int scratch = 0;
};
constexpr int kScratch = -1, kEpsilon = -2, kMomentum = -3;

struct NormState : GraphState {
  std::vector<Role> roles;
  size_t scratch_offset = 0;  // the first scratch array's workspace offset
  size_t scratch_bytes = 0;   // each scratch array's (C f32, rounded up)
  float epsilon = 0;
};

class BatchNormPlan final : public OpPlan {
 public:
  BatchNormPlan(Device& device, std::unique_ptr<NormState> state)
      : device_(device), state_(std::move(state)) {}
  ~BatchNormPlan() override {
    std::unique_ptr<GraphState> state = std::move(state_);
    destroy_graph(device_, state);
  }
  BatchNormPlan(const BatchNormPlan&) = delete;
  BatchNormPlan& operator=(const BatchNormPlan&) = delete;

  hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const override {
    const NormState& s = *state_;
    // By-value scalars: read by cudnnBackendExecute before it returns.
    float epsilon = s.epsilon;
    float momentum = args.scalar_count > 0 ? static_cast<float>(args.scalars[0].f64) : 0.0f;
    auto* workspace = static_cast<unsigned char*>(args.workspace);
    std::vector<PackEntry> entries;
    for (const Role& role : s.roles) {
      PackEntry entry{role.tensor.uid, nullptr, role.tensor.by_value};
      if (role.operand >= 0) {
        entry.pointer = args.operands[role.operand];
      } else if (role.operand == kEpsilon) {
        entry.pointer = &epsilon;
      } else if (role.operand == kMomentum) {
        entry.pointer = &momentum;
      } else {
        entry.pointer = workspace + s.scratch_offset + role.scratch * s.scratch_bytes;
      }
      entries.push_back(entry);
    }
    return execute_graph(device_, stream, s, entries, args.workspace, args.workspace_bytes);
  }

 private:
  Device& device_;
  std::unique_ptr<NormState> state_;
};

Executable build_batch_norm(const Cudnn& dnn, cudnnHandle_t handle, bool backward,
                            const std::vector<Role>& roles, int64_t alignment, bool deterministic,
                            std::string& why, cudnnStatus_t& status) {
  Builder b(dnn);
  std::vector<Descriptor> parts;
  for (const Role& role : roles) parts.push_back(b.tensor(role.tensor, alignment));
  Descriptor operation = b.create(backward ? CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR
                                           : CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR,
                                  "cudnnBackendCreateDescriptor(OPERATION_NORM)");
  const cudnnBackendNormMode_t mode = CUDNN_BATCH_NORM;
  b.set(operation,
        backward ? CUDNN_ATTR_OPERATION_NORM_BWD_MODE : CUDNN_ATTR_OPERATION_NORM_FWD_MODE,
        CUDNN_TYPE_NORM_MODE, 1, &mode, "cudnnBackendSetAttribute(OPERATION_NORM_MODE)");
  if (!backward) {
    const cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
    b.set(operation, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1, &phase,
          "cudnnBackendSetAttribute(OPERATION_NORM_FWD_PHASE)");
  }
  for (size_t i = 0; i < roles.size(); ++i) {
    b.set_desc(operation, roles[i].attribute, parts[i],
               "cudnnBackendSetAttribute(OPERATION_NORM tensor)");
  }
  b.finalize(operation, "cudnnBackendFinalize(OPERATION_NORM)");
  return plan_graph(b, handle, std::move(operation), std::move(parts),
                    roles[0].tensor.type == CUDNN_DATA_FLOAT, deterministic, why, status);
}

// Why |t| (a per-channel tensor) cannot be cuDNN's, or empty.
std::string channel_dtype(const char* name, const hal_tensor_desc_t& t) {
  if (t.dtype == HAL_DTYPE_F32) return {};
  return std::string(name) + " is " + hal::util::dtype_name(t.dtype) +
         ": cuDNN's batch norm takes f32 per-channel tensors";
}

}  // namespace

Planned plan_batch_norm(Device& device, const hal_op_batch_norm_desc_t& desc,
                        hal_op_plan_flags_t flags) {
  const bool backward = desc.header.kind == HAL_OP_BATCH_NORM_BACKWARD;
  const uint32_t f = desc.flags;
  if ((f & HAL_BATCH_NORM_TRAINING) == 0) {
    return decline(
        "inference batch norm: HAL gives running_var and epsilon, cuDNN's graph batch norm "
        "reads an inverse standard deviation there (a pointwise graph not built here)");
  }
  if ((f & HAL_BATCH_NORM_RELU) != 0) return decline("the fused relu is not passed to cuDNN here");
  if ((f & HAL_BATCH_NORM_SCALE) == 0 || (!backward && (f & HAL_BATCH_NORM_SHIFT) == 0)) {
    return decline(
        "cuDNN's batch norm reads scale and shift tensors; absent ones (1 and 0) are not "
        "materialised here");
  }
  const hal_tensor_desc_t& x = desc.x;
  const hal_tensor_desc_t& y = backward ? desc.grad_y : desc.y;
  const hal_tensor_desc_t& out = backward ? desc.grad_x : desc.y;
  if (x.dtype != y.dtype || x.dtype != out.dtype) {
    return decline(std::string("activations of dtypes ") + hal::util::dtype_name(x.dtype) + ", " +
                   hal::util::dtype_name(y.dtype) + ", " + hal::util::dtype_name(out.dtype) +
                   ": cuDNN's batch norm reads and writes one type");
  }
  cudnnDataType_t type{};
  int64_t bytes = 0;
  if (!dnn_type(x.dtype, &type, &bytes)) {
    return decline(std::string("dtype ") + hal::util::dtype_name(x.dtype) + " has no cuDNN type");
  }
  if (x.rank > 5) {
    return decline("x of rank " + std::to_string(x.rank) +
                   ": cuDNN's tensors have at most 3 spatial dimensions");
  }
  for (uint32_t d = 0; d < x.rank; ++d) {
    if (x.shape[d] == 0) return decline("empty problems are left to the portable implementation");
  }
  std::string why;
  for (const auto& [name, t, used] :
       {std::tuple{"scale", &desc.scale, true}, std::tuple{"shift", &desc.shift, !backward},
        std::tuple{"running_mean", &desc.running_mean,
                   !backward && (f & HAL_BATCH_NORM_UPDATE_RUNNING) != 0},
        std::tuple{"running_var", &desc.running_var,
                   !backward && (f & HAL_BATCH_NORM_UPDATE_RUNNING) != 0},
        std::tuple{"grad_scale", &desc.grad_scale, backward && (f & HAL_BATCH_NORM_GRAD_SCALE)},
        std::tuple{"grad_shift", &desc.grad_shift, backward && (f & HAL_BATCH_NORM_GRAD_SHIFT)}}) {
    if (used && why.empty()) why = channel_dtype(name, *t);
  }
  if (!why.empty()) return decline(why);

  const uint32_t spatial = x.rank - 2;
  const int64_t channels = x.shape[desc.layout == HAL_CHANNELS_LAST ? x.rank - 1 : 1];
  auto state = std::make_unique<NormState>();
  state->epsilon = desc.epsilon;
  std::vector<Role>& roles = state->roles;
  int64_t uid = 0;
  int scratch = 0;
  const auto activation = [&](cudnnBackendAttributeName_t attribute, const hal_tensor_desc_t& t,
                              int operand) {
    roles.push_back({attribute, dnn_tensor(t, desc.layout, spatial, ++uid), operand, 0});
  };
  const auto channel = [&](cudnnBackendAttributeName_t attribute, const hal_tensor_desc_t& t,
                           int operand) {
    const int dnn_rank = roles.front().tensor.rank;
    roles.push_back({attribute, dnn_channel_tensor(t, dnn_rank, ++uid), operand, 0});
  };
  hal_tensor_desc_t scratch_desc{};
  scratch_desc.dtype = HAL_DTYPE_F32;
  scratch_desc.rank = 1;
  scratch_desc.shape[0] = channels;
  scratch_desc.strides[0] = 1;
  // An f32 [C] output the op does not ask for: the next scratch array.
  const auto channel_or_scratch = [&](cudnnBackendAttributeName_t attribute,
                                      const hal_tensor_desc_t& t, int operand, bool given) {
    if (given) return channel(attribute, t, operand);
    channel(attribute, scratch_desc, kScratch);
    roles.back().scratch = scratch++;
  };
  const auto scalar = [&](cudnnBackendAttributeName_t attribute, int which) {
    roles.push_back({attribute, dnn_scalar(++uid), which, 0});
  };
  if (!backward) {
    // Operands: 0 x, 1 scale, 2 shift, 3 running_mean, 4 running_var, 5 y,
    // 6 saved_mean, 7 saved_rstd.
    const bool save = (f & HAL_BATCH_NORM_SAVE_STATS) != 0;
    activation(CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, x, 0);
    activation(CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, desc.y, 5);
    channel(CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, desc.scale, 1);
    channel(CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, desc.shift, 2);
    channel_or_scratch(CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, desc.saved_mean, 6, save);
    channel_or_scratch(CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, desc.saved_rstd, 7, save);
    scalar(CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, kEpsilon);
    if ((f & HAL_BATCH_NORM_UPDATE_RUNNING) != 0) {
      channel(CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, desc.running_mean, 3);
      channel(CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, desc.running_var, 4);
      channel(CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, desc.running_mean, 3);
      channel(CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, desc.running_var, 4);
      scalar(CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, kMomentum);
    }
  } else {
    // Operands: 0 x, 1 grad_y, 2 scale, 3 saved_mean, 4 saved_rstd, 8 grad_x,
    // 9 grad_scale, 10 grad_shift.
    activation(CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, x, 0);
    activation(CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, desc.grad_y, 1);
    activation(CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, desc.grad_x, 8);
    channel(CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, desc.scale, 2);
    channel(CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, desc.saved_mean, 3);
    channel(CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, desc.saved_rstd, 4);
    channel_or_scratch(CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, desc.grad_scale, 9,
                       (f & HAL_BATCH_NORM_GRAD_SCALE) != 0);
    channel_or_scratch(CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, desc.grad_shift, 10,
                       (f & HAL_BATCH_NORM_GRAD_SHIFT) != 0);
  }

  std::shared_ptr<const Cudnn> dnn;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  const cudnnHandle_t handle = device.dnn().handle(device, &dnn, why, &status);
  if (handle == nullptr) return decline(why, static_cast<int64_t>(status));
  const ContextScope bound = device.bind();
  if (!bound.ok()) {
    return decline("cuCtxSetCurrent failed: " + cu_error_text(&device.api(), bound.result()));
  }
  const std::unique_lock lock = device.dnn().lock();
  state->dnn = dnn;
  state->handle = handle;
  const bool deterministic = (flags & HAL_OP_PLAN_DETERMINISTIC) != 0;
  std::string fast_why, any_why;
  cudnnStatus_t fast_status = CUDNN_STATUS_SUCCESS, any_status = CUDNN_STATUS_SUCCESS;
  state->fast = build_batch_norm(*dnn, handle, backward, roles, kCudnnFastAlignment, deterministic,
                                 fast_why, fast_status);
  state->any =
      build_batch_norm(*dnn, handle, backward, roles, 0, deterministic, any_why, any_status);
  if (!state->fast.ok() && !state->any.ok()) {
    return decline(any_why, static_cast<int64_t>(any_status));
  }
  state->scratch_offset = round_up(static_cast<size_t>(state->workspace()), kScratchAlignment);
  state->scratch_bytes = round_up(static_cast<size_t>(channels) * sizeof(float), kScratchAlignment);
  Planned planned;
  planned.result = HAL_SUCCESS;
  planned.workspace_bytes =
      scratch > 0 ? state->scratch_offset + static_cast<size_t>(scratch) * state->scratch_bytes
                  : static_cast<size_t>(state->workspace());
  planned.plan = std::make_unique<BatchNormPlan>(device, std::move(state));
  return planned;
}

}  // namespace hal::cuda::ops
