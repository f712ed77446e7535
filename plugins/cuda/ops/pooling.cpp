// HAL_OP_POOLING and HAL_OP_POOLING_BACKWARD on cuDNN 9's graph API: one
// RESAMPLE_FWD or RESAMPLE_BWD operation (cudnn_graph.h's
// CUDNN_BACKEND_OPERATION_RESAMPLE_{FWD,BWD}_DESCRIPTOR) in a graph of its
// own, planned and run as the convolution is (cudnn_graph.hpp).
//
// The resample descriptor says HAL's windows as they are: WINDOW_DIMS the
// kernel, STRIDES, PRE_PADDINGS and POST_PADDINGS pad_begin and pad_end;
// 1-D lifted to 2-D (a leading window of 1). Max pooling is
// CUDNN_RESAMPLE_MAXPOOL with CUDNN_NEG_INF_PAD and CUDNN_PROPAGATE_NAN (a
// window's NaN is its result, as SPEC §17.6.9 says); average is
// CUDNN_RESAMPLE_AVGPOOL_EXCLUDE_PADDING (the divisor counts the positions
// inside x) or _INCLUDE_PADDING (HAL_POOLING_COUNT_INCLUDE_PAD: every
// position of the window, which lies inside [-pad_begin, i + pad_end)).
// Ceil mode is a larger post padding (the extra positions are outside x:
// -inf for max, not counted by EXCLUDE_PADDING). Adaptive average or max
// pooling is a fixed window when every input extent is a multiple of the
// output's (kernel = stride = i / o, no padding).
//
// Declined, each with its reason, to the portable implementation:
//  - max pooling with HAL_POOLING_INDICES and the max backward: HAL's
//    indices are the flat position of the chosen element in x's (n, c)
//    plane (PyTorch's), which the backward reads; cuDNN's resample writes
//    an index tensor of its own (the position inside the window) and its
//    backward reads that or x and y, and HAL's max backward is given
//    neither x nor y. The contract cannot be met through cuDNN, so it is
//    not attempted: max pooling is served in inference form only.
//  - dilation other than 1 (the resample descriptor has none);
//  - divisor_override (no resample mode divides by a given count);
//  - ceil mode with COUNT_INCLUDE_PAD where the last window overhangs
//    pad_end (INCLUDE_PADDING would count the overhang; HAL does not);
//  - adaptive windows of uneven sizes;
//  - x and y (grad_y and grad_x) of different dtypes, empty problems.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../device.hpp"
#include "cudnn.hpp"
#include "cudnn_graph.hpp"
#include "hal_util/names.hpp"
#include "ops.hpp"

namespace hal::cuda::ops {
namespace {

struct PoolState : GraphState {
  std::array<int64_t, 2> uids{};
  std::array<int, 2> operands{};  // HAL operand indices of cuDNN's x (dx) and y (dy)
};

// The window of one spatial dimension, as cuDNN's resample takes it.
struct Window {
  int64_t kernel = 1, stride = 1, pre = 0, post = 0;
};

class PoolingPlan final : public OpPlan {
 public:
  PoolingPlan(Device& device, std::unique_ptr<PoolState> state)
      : device_(device), state_(std::move(state)) {}
  ~PoolingPlan() override {
    std::unique_ptr<GraphState> state = std::move(state_);
    destroy_graph(device_, state);
  }
  PoolingPlan(const PoolingPlan&) = delete;
  PoolingPlan& operator=(const PoolingPlan&) = delete;

  hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const override {
    const PoolState& s = *state_;
    std::vector<PackEntry> entries;
    for (size_t i = 0; i < 2; ++i) entries.push_back({s.uids[i], args.operands[s.operands[i]]});
    return execute_graph(device_, stream, s, entries, args.workspace, args.workspace_bytes);
  }

 private:
  Device& device_;
  std::unique_ptr<PoolState> state_;
};

Executable build_pooling(const Cudnn& dnn, cudnnHandle_t handle, bool backward, bool max,
                         bool include_pad, const std::vector<Window>& windows,
                         const std::array<DnnTensor, 2>& tensors, int64_t alignment,
                         bool deterministic, std::string& why, cudnnStatus_t& status) {
  Builder b(dnn);
  std::vector<Descriptor> parts;
  for (const DnnTensor& t : tensors) parts.push_back(b.tensor(t, alignment));
  const auto dims = static_cast<int64_t>(windows.size());
  std::vector<int64_t> kernel, stride, pre, post;
  for (const Window& w : windows) {
    kernel.push_back(w.kernel);
    stride.push_back(w.stride);
    pre.push_back(w.pre);
    post.push_back(w.post);
  }
  const cudnnResampleMode_t mode = max           ? CUDNN_RESAMPLE_MAXPOOL
                                   : include_pad ? CUDNN_RESAMPLE_AVGPOOL_INCLUDE_PADDING
                                                 : CUDNN_RESAMPLE_AVGPOOL_EXCLUDE_PADDING;
  const cudnnPaddingMode_t padding = max ? CUDNN_NEG_INF_PAD : CUDNN_ZERO_PAD;
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  Descriptor resample =
      b.create(CUDNN_BACKEND_RESAMPLE_DESCRIPTOR, "cudnnBackendCreateDescriptor(RESAMPLE)");
  b.set(resample, CUDNN_ATTR_RESAMPLE_MODE, CUDNN_TYPE_RESAMPLE_MODE, 1, &mode,
        "cudnnBackendSetAttribute(RESAMPLE_MODE)");
  b.set(resample, CUDNN_ATTR_RESAMPLE_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute,
        "cudnnBackendSetAttribute(RESAMPLE_COMP_TYPE)");
  b.set(resample, CUDNN_ATTR_RESAMPLE_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims,
        "cudnnBackendSetAttribute(RESAMPLE_SPATIAL_DIMS)");
  b.set(resample, CUDNN_ATTR_RESAMPLE_WINDOW_DIMS, CUDNN_TYPE_INT64, dims, kernel.data(),
        "cudnnBackendSetAttribute(RESAMPLE_WINDOW_DIMS)");
  b.set(resample, CUDNN_ATTR_RESAMPLE_STRIDES, CUDNN_TYPE_INT64, dims, stride.data(),
        "cudnnBackendSetAttribute(RESAMPLE_STRIDES)");
  b.set(resample, CUDNN_ATTR_RESAMPLE_PRE_PADDINGS, CUDNN_TYPE_INT64, dims, pre.data(),
        "cudnnBackendSetAttribute(RESAMPLE_PRE_PADDINGS)");
  b.set(resample, CUDNN_ATTR_RESAMPLE_POST_PADDINGS, CUDNN_TYPE_INT64, dims, post.data(),
        "cudnnBackendSetAttribute(RESAMPLE_POST_PADDINGS)");
  b.set(resample, CUDNN_ATTR_RESAMPLE_PADDING_MODE, CUDNN_TYPE_PADDING_MODE, 1, &padding,
        "cudnnBackendSetAttribute(RESAMPLE_PADDING_MODE)");
  // cuDNN 9 marks the NaN-propagation enumeration deprecated and still
  // reads it; said explicitly, so a NaN in a max window is never skipped.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
  b.set(resample, CUDNN_ATTR_RESAMPLE_NAN_PROPAGATION, CUDNN_TYPE_NAN_PROPOGATION, 1, &nan,
        "cudnnBackendSetAttribute(RESAMPLE_NAN_PROPAGATION)");
#pragma GCC diagnostic pop
  b.finalize(resample, "cudnnBackendFinalize(RESAMPLE)");

  Descriptor operation = b.create(backward ? CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR
                                           : CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR,
                                  "cudnnBackendCreateDescriptor(OPERATION_RESAMPLE)");
  if (backward) {
    b.set_desc(operation, CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DXDESC, parts[0],
               "cudnnBackendSetAttribute(OPERATION_RESAMPLE_BWD_DXDESC)");
    b.set_desc(operation, CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DYDESC, parts[1],
               "cudnnBackendSetAttribute(OPERATION_RESAMPLE_BWD_DYDESC)");
    b.set_desc(operation, CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DESC, resample,
               "cudnnBackendSetAttribute(OPERATION_RESAMPLE_BWD_DESC)");
  } else {
    b.set_desc(operation, CUDNN_ATTR_OPERATION_RESAMPLE_FWD_XDESC, parts[0],
               "cudnnBackendSetAttribute(OPERATION_RESAMPLE_FWD_XDESC)");
    b.set_desc(operation, CUDNN_ATTR_OPERATION_RESAMPLE_FWD_YDESC, parts[1],
               "cudnnBackendSetAttribute(OPERATION_RESAMPLE_FWD_YDESC)");
    b.set_desc(operation, CUDNN_ATTR_OPERATION_RESAMPLE_FWD_DESC, resample,
               "cudnnBackendSetAttribute(OPERATION_RESAMPLE_FWD_DESC)");
  }
  b.finalize(operation, "cudnnBackendFinalize(OPERATION_RESAMPLE)");
  parts.push_back(std::move(resample));
  return plan_graph(b, handle, std::move(operation), std::move(parts),
                    tensors[0].type == CUDNN_DATA_FLOAT, deterministic, why, status);
}

}  // namespace

Planned plan_pooling(Device& device, const hal_op_pooling_desc_t& desc, hal_op_plan_flags_t flags) {
  const bool backward = desc.header.kind == HAL_OP_POOLING_BACKWARD;
  const bool max = desc.pooling == HAL_POOLING_MAX;
  const bool adaptive = (desc.flags & HAL_POOLING_ADAPTIVE) != 0;
  const bool include_pad = (desc.flags & HAL_POOLING_COUNT_INCLUDE_PAD) != 0;
  const bool ceil_mode = (desc.flags & HAL_POOLING_CEIL_MODE) != 0;
  if (max && backward) {
    return decline(
        "the max backward reads HAL's saved indices (flat positions in x's plane); cuDNN's "
        "resample backward reads its own window index or x and y, which the op is not given");
  }
  if (max && (desc.flags & HAL_POOLING_INDICES) != 0) {
    return decline(
        "HAL's max indices are flat positions in x's (n, c) plane; cuDNN's resample writes its "
        "own index (the position in the window): only max pooling without indices is served");
  }
  if (desc.divisor_override != 0) return decline("divisor_override has no cuDNN resample mode");
  if (desc.x.dtype != desc.y.dtype) {
    return decline(std::string("x and y of dtypes ") + hal::util::dtype_name(desc.x.dtype) + ", " +
                   hal::util::dtype_name(desc.y.dtype) +
                   ": cuDNN's resample reads and writes one type");
  }
  cudnnDataType_t type{};
  int64_t bytes = 0;
  if (!dnn_type(desc.x.dtype, &type, &bytes)) {
    return decline(std::string("dtype ") + hal::util::dtype_name(desc.x.dtype) +
                   " has no cuDNN type");
  }
  for (const hal_tensor_desc_t* t : {&desc.x, &desc.y}) {
    for (uint32_t d = 0; d < t->rank; ++d) {
      if (t->shape[d] == 0)
        return decline("empty problems are left to the portable implementation");
    }
  }
  const uint32_t sd = desc.spatial_dims;
  const uint32_t first = desc.layout == HAL_CHANNELS_LAST ? 1 : 2;  // x's first spatial dimension
  std::vector<Window> windows;
  if (sd == 1) windows.push_back({});  // the lift to 2-D
  for (uint32_t s = 0; s < sd; ++s) {
    const int64_t i = desc.x.shape[first + s], o = desc.y.shape[first + s];
    Window w;
    if (adaptive) {
      if (i % o != 0) {
        return decline("adaptive windows of uneven sizes (input extent " + std::to_string(i) +
                       " not a multiple of the output's " + std::to_string(o) +
                       ") have no cuDNN resample");
      }
      w.kernel = w.stride = i / o;
    } else {
      if (desc.dilation[s] != 1) return decline("cuDNN's resample has no dilation");
      w = {desc.kernel[s], desc.stride[s], desc.pad_begin[s], desc.pad_end[s]};
      // Ceil mode's last window may overhang pad_end: cuDNN's output extent
      // is the floor's, so the overhang becomes post padding.
      const int64_t overhang = (o - 1) * w.stride + w.kernel - (i + w.pre + w.post);
      if (ceil_mode && overhang > 0) {
        if (include_pad) {
          return decline(
              "ceil mode's last window overhangs pad_end, and cuDNN's AVGPOOL_INCLUDE_PADDING "
              "would count the overhang in the divisor (HAL does not)");
        }
        w.post += overhang;
      }
    }
    windows.push_back(w);
  }

  std::shared_ptr<const Cudnn> dnn;
  std::string why;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  const cudnnHandle_t handle = device.dnn().handle(device, &dnn, why, &status);
  if (handle == nullptr) return decline(why, static_cast<int64_t>(status));
  const ContextScope bound = device.bind();
  if (!bound.ok()) {
    return decline("cuCtxSetCurrent failed: " + cu_error_text(&device.api(), bound.result()));
  }
  const std::unique_lock lock = device.dnn().lock();
  auto state = std::make_unique<PoolState>();
  state->dnn = dnn;
  state->handle = handle;
  // cuDNN's x (dx) and y (dy): forward operands 0 x, 1 y; backward 2 grad_x, 0 grad_y.
  state->operands = backward ? std::array<int, 2>{2, 0} : std::array<int, 2>{0, 1};
  state->uids = {1, 2};
  const std::array<DnnTensor, 2> tensors = {dnn_tensor(desc.x, desc.layout, sd, 1),
                                            dnn_tensor(desc.y, desc.layout, sd, 2)};
  const bool deterministic = (flags & HAL_OP_PLAN_DETERMINISTIC) != 0;
  std::string fast_why, any_why;
  cudnnStatus_t fast_status = CUDNN_STATUS_SUCCESS, any_status = CUDNN_STATUS_SUCCESS;
  state->fast = build_pooling(*dnn, handle, backward, max, include_pad, windows, tensors,
                              kCudnnFastAlignment, deterministic, fast_why, fast_status);
  state->any = build_pooling(*dnn, handle, backward, max, include_pad, windows, tensors, 0,
                             deterministic, any_why, any_status);
  if (!state->fast.ok() && !state->any.ok()) {
    return decline(any_why, static_cast<int64_t>(any_status));
  }
  Planned planned;
  planned.result = HAL_SUCCESS;
  planned.workspace_bytes = static_cast<size_t>(state->workspace());
  planned.plan = std::make_unique<PoolingPlan>(device, std::move(state));
  return planned;
}

}  // namespace hal::cuda::ops
