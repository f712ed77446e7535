// HAL_OP_CONVOLUTION, _BACKWARD_DATA and _BACKWARD_WEIGHTS on cuDNN 9's
// graph API (cudnn.hpp says why that API): one operation per plan, a
// CONVOLUTION_FORWARD, _BACKWARD_DATA or _BACKWARD_FILTER operation of
// cuDNN's, in an operation graph of its own.
//
// Tensors. cuDNN's are [N, C, spatial...] in that order whatever the layout,
// with free element strides (cuDNN docs, "Backend Descriptor Types",
// CUDNN_BACKEND_TENSOR_DESCRIPTOR: "dimensions ... in NCHW order", the
// memory layout given by the strides); a filter is [K, C/groups, k...] and the
// group count is C over the filter's C. HAL's channels-last descriptors
// ([N, spatial..., C], filters [C_out, k..., C_in/groups]) are permuted to
// that order with their strides, so NHWC reaches cuDNN as NHWC memory. cuDNN
// convolves 2-D and 3-D: a 1-D problem gets a leading spatial extent of 1
// (stride 1, dilation 1, no padding).
// Geometry: CUDNN_ATTR_CONVOLUTION_{FILTER_STRIDES, DILATIONS, PRE_PADDINGS,
// POST_PADDINGS} are HAL's stride, dilation, pad_begin and pad_end as they
// are (asymmetric padding included); the mode is CUDNN_CROSS_CORRELATION
// (HAL's definition takes the taps unflipped).
// Transposed convolution (HAL_CONV_TRANSPOSED) is the convolution of the
// same geometry with the roles exchanged: its forward is cuDNN's backward
// data (dy = x, dx = y), its backward data is cuDNN's forward (x = grad_y,
// y = grad_x) and its backward weights is cuDNN's backward filter with
// x = grad_y and dy = x.
// Precision: compute type f32 (HAL's f32 accumulation). For f32 data the
// engines whose numerical notes say TENSOR_CORE or DOWN_CONVERT_INPUTS are
// skipped: they are TF32, 10 mantissa bits, outside SPEC §17.5's f32
// tolerance (as matmul.cpp keeps cuBLASLt off TF32).
// HAL_OP_PLAN_DETERMINISTIC skips the engines noted NONDETERMINISTIC.
//
// Planning builds everything: the descriptors, the graph, the heuristic's
// engine configurations (CUDNN_HEUR_MODE_INSTANT) and an execution plan of
// the first configuration that is allowed and finalizes, twice: for operands
// aligned to 16 bytes and for operands aligned only to their element (the
// tensors' BYTE_ALIGNMENT; HAL's pointers may be any element of an
// allocation). The workspace is the larger of the two plans'. An execution
// builds a variant pack (the pointers by unique id, the workspace), sets the
// device handle's stream and calls cudnnBackendExecute.
//
// Declined (the portable implementation serves them), each with its reason:
// the bias, residual and activation epilogues (not fused through cuDNN
// here), an output of another dtype than the inputs (cuDNN's convolution
// writes its inputs' type), empty problems, and whatever cuDNN cannot
// finalize or has no allowed engine for (its status is the decline's native
// code).
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../device.hpp"
#include "../stream.hpp"
#include "cudnn.hpp"
#include "cudnn_graph.hpp"
#include "hal_util/names.hpp"
#include "ops.hpp"

namespace hal::cuda::ops {
namespace {

// What cuDNN does, and which HAL operand plays which of its roles.
struct Mapping {
  cudnnBackendDescriptorType_t operation{};
  // The operation's three tensor attributes, in the order of |roles|.
  std::array<cudnnBackendAttributeName_t, 3> attributes{};
  cudnnBackendAttributeName_t alpha{}, beta{}, conv{};
  // For each attribute: the HAL operand index and which desc field it is.
  std::array<int, 3> operands{};
  std::array<const hal_tensor_desc_t*, 3> tensors{};
  std::array<bool, 3> is_filter{};
};

Mapping mapping_of(const hal_op_convolution_desc_t& desc) {
  const bool transposed = (desc.flags & HAL_CONV_TRANSPOSED) != 0;
  Mapping m;
  auto forward = [&](int x_op, const hal_tensor_desc_t* x, int w_op, int y_op,
                     const hal_tensor_desc_t* y) {
    m.operation = CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
    m.attributes = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
    m.alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA;
    m.beta = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA;
    m.conv = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC;
    m.operands = {x_op, w_op, y_op};
    m.tensors = {x, &desc.w, y};
    m.is_filter = {false, true, false};
  };
  auto backward_data = [&](int dy_op, const hal_tensor_desc_t* dy, int w_op, int dx_op,
                           const hal_tensor_desc_t* dx) {
    m.operation = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
    m.attributes = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX};
    m.alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA;
    m.beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA;
    m.conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC;
    m.operands = {dy_op, w_op, dx_op};
    m.tensors = {dy, &desc.w, dx};
    m.is_filter = {false, true, false};
  };
  auto backward_filter = [&](int x_op, const hal_tensor_desc_t* x, int dy_op,
                             const hal_tensor_desc_t* dy, int dw_op) {
    m.operation = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
    m.attributes = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW};
    m.alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
    m.beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA;
    m.conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC;
    m.operands = {x_op, dy_op, dw_op};
    m.tensors = {x, dy, &desc.w};
    m.is_filter = {false, false, true};
  };
  // HAL operands: forward 0 x, 1 w, 4 y; backward data 0 grad_y, 1 w,
  // 2 grad_x; backward weights 0 x, 1 grad_y, 2 grad_w.
  switch (desc.header.kind) {
    case HAL_OP_CONVOLUTION:
      if (transposed) {
        backward_data(0, &desc.x, 1, 4, &desc.y);
      } else {
        forward(0, &desc.x, 1, 4, &desc.y);
      }
      break;
    case HAL_OP_CONVOLUTION_BACKWARD_DATA:
      if (transposed) {
        forward(0, &desc.y, 1, 2, &desc.x);
      } else {
        backward_data(0, &desc.y, 1, 2, &desc.x);
      }
      break;
    default:  // HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS
      if (transposed) {
        backward_filter(1, &desc.y, 0, &desc.x, 2);
      } else {
        backward_filter(0, &desc.x, 1, &desc.y, 2);
      }
      break;
  }
  return m;
}

struct ConvState : GraphState {
  std::array<int64_t, 3> uids{};
  std::array<int, 3> operands{};
};

// Builds the graph for tensors aligned to |alignment| bytes and takes the
// first allowed engine configuration that finalizes. On no plan: |why|, and
// the last status as |status|.
Executable build_convolution(const Cudnn& dnn, cudnnHandle_t handle,
                             const hal_op_convolution_desc_t& desc, const Mapping& mapping,
                             const std::array<DnnTensor, 3>& tensors, int64_t alignment,
                             bool deterministic, std::string& why, cudnnStatus_t& status) {
  Builder b(dnn);
  const uint32_t spatial = desc.spatial_dims;
  std::vector<Descriptor> parts;
  for (const DnnTensor& t : tensors) parts.push_back(b.tensor(t, alignment));

  // The geometry, lifted to 2-D for 1-D problems.
  const bool lift = spatial == 1;
  const int64_t dims = lift ? 2 : spatial;
  std::vector<int64_t> stride, dilation, pre, post;
  if (lift) {
    stride.push_back(1);
    dilation.push_back(1);
    pre.push_back(0);
    post.push_back(0);
  }
  for (uint32_t i = 0; i < spatial; ++i) {
    stride.push_back(desc.stride[i]);
    dilation.push_back(desc.dilation[i]);
    pre.push_back(desc.pad_begin[i]);
    post.push_back(desc.pad_end[i]);
  }
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  Descriptor conv =
      b.create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "cudnnBackendCreateDescriptor(CONVOLUTION)");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims,
        "cudnnBackendSetAttribute(CONVOLUTION_SPATIAL_DIMS)");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute,
        "cudnnBackendSetAttribute(CONVOLUTION_COMP_TYPE)");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode,
        "cudnnBackendSetAttribute(CONVOLUTION_CONV_MODE)");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, dims, stride.data(),
        "cudnnBackendSetAttribute(CONVOLUTION_FILTER_STRIDES)");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dims, dilation.data(),
        "cudnnBackendSetAttribute(CONVOLUTION_DILATIONS)");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, dims, pre.data(),
        "cudnnBackendSetAttribute(CONVOLUTION_PRE_PADDINGS)");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, dims, post.data(),
        "cudnnBackendSetAttribute(CONVOLUTION_POST_PADDINGS)");
  b.finalize(conv, "cudnnBackendFinalize(CONVOLUTION)");

  Descriptor operation =
      b.create(mapping.operation, "cudnnBackendCreateDescriptor(OPERATION_CONVOLUTION)");
  const float alpha = 1.0f, beta = 0.0f;  // host scalars of the compute type's width
  b.set(operation, mapping.alpha, CUDNN_TYPE_FLOAT, 1, &alpha,
        "cudnnBackendSetAttribute(OPERATION_CONVOLUTION_ALPHA)");
  b.set(operation, mapping.beta, CUDNN_TYPE_FLOAT, 1, &beta,
        "cudnnBackendSetAttribute(OPERATION_CONVOLUTION_BETA)");
  b.set_desc(operation, mapping.conv, conv,
             "cudnnBackendSetAttribute(OPERATION_CONVOLUTION_CONV_DESC)");
  for (size_t i = 0; i < 3; ++i) {
    b.set_desc(operation, mapping.attributes[i], parts[i],
               "cudnnBackendSetAttribute(OPERATION_CONVOLUTION tensor)");
  }
  b.finalize(operation, "cudnnBackendFinalize(OPERATION_CONVOLUTION)");
  parts.push_back(std::move(conv));
  return plan_graph(b, handle, std::move(operation), std::move(parts),
                    tensors[0].type == CUDNN_DATA_FLOAT, deterministic, why, status);
}

class ConvolutionPlan final : public OpPlan {
 public:
  ConvolutionPlan(Device& device, std::unique_ptr<ConvState> state)
      : device_(device), state_(std::move(state)) {}
  ~ConvolutionPlan() override {
    std::unique_ptr<GraphState> state = std::move(state_);
    destroy_graph(device_, state);
  }
  ConvolutionPlan(const ConvolutionPlan&) = delete;
  ConvolutionPlan& operator=(const ConvolutionPlan&) = delete;

  hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const override {
    const ConvState& s = *state_;
    std::vector<PackEntry> entries;
    for (size_t i = 0; i < 3; ++i) entries.push_back({s.uids[i], args.operands[s.operands[i]]});
    return execute_graph(device_, stream, s, entries, args.workspace, args.workspace_bytes);
  }

 private:
  Device& device_;
  std::unique_ptr<ConvState> state_;
};

}  // namespace

Planned plan_convolution(Device& device, const hal_op_convolution_desc_t& desc,
                         hal_op_plan_flags_t flags) {
  const hal_op_kind_t kind = desc.header.kind;
  if (kind == HAL_OP_CONVOLUTION) {
    if ((desc.flags & HAL_CONV_BIAS) != 0) {
      return decline("the bias epilogue is not fused through cuDNN here");
    }
    if ((desc.flags & HAL_CONV_RESIDUAL) != 0) {
      return decline("the residual epilogue is not fused through cuDNN here");
    }
    if (desc.activation != HAL_ACTIVATION_NONE) {
      return decline("the activation epilogue is not fused through cuDNN here");
    }
  }
  if (kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS && (desc.flags & HAL_CONV_BIAS) != 0) {
    return decline("grad_bias is not computed through cuDNN here");
  }
  const Mapping mapping = mapping_of(desc);
  std::array<DnnTensor, 3> tensors;
  for (size_t i = 0; i < 3; ++i) {
    const hal_tensor_desc_t& t = *mapping.tensors[i];
    cudnnDataType_t type{};
    int64_t bytes = 0;
    if (!dnn_type(t.dtype, &type, &bytes)) {
      return decline(std::string("dtype ") + hal::util::dtype_name(t.dtype) + " has no cuDNN type");
    }
    for (uint32_t d = 0; d < t.rank; ++d) {
      if (t.shape[d] == 0) return decline("empty problems are left to the portable implementation");
    }
    tensors[i] = dnn_tensor(t, desc.layout, desc.spatial_dims, static_cast<int64_t>(i) + 1);
  }
  if (tensors[0].type != tensors[1].type || tensors[2].type != tensors[0].type) {
    return decline(std::string("operands of dtypes ") +
                   hal::util::dtype_name(mapping.tensors[0]->dtype) + ", " +
                   hal::util::dtype_name(mapping.tensors[1]->dtype) + ", " +
                   hal::util::dtype_name(mapping.tensors[2]->dtype) +
                   ": cuDNN's convolution reads and writes one type");
  }

  std::shared_ptr<const Cudnn> dnn;
  std::string why;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  const cudnnHandle_t handle = device.dnn().handle(device, &dnn, why, &status);
  if (handle == nullptr) return decline(why, static_cast<int64_t>(status));

  const bool deterministic = (flags & HAL_OP_PLAN_DETERMINISTIC) != 0;
  // Finalizing an execution plan may compile or load kernels: in the device's context.
  const ContextScope bound = device.bind();
  if (!bound.ok()) {
    return decline("cuCtxSetCurrent failed: " + cu_error_text(&device.api(), bound.result()));
  }
  // cuDNN is thread-safe but for a handle used by two threads at once: the
  // graph and the plans take the device's handle, so they are built under
  // its lock (as executions run).
  const std::unique_lock lock = device.dnn().lock();
  auto state = std::make_unique<ConvState>();
  state->dnn = dnn;
  state->handle = handle;
  for (size_t i = 0; i < 3; ++i) {
    state->uids[i] = tensors[i].uid;
    state->operands[i] = mapping.operands[i];
  }
  std::string fast_why, any_why;
  cudnnStatus_t fast_status = CUDNN_STATUS_SUCCESS, any_status = CUDNN_STATUS_SUCCESS;
  state->fast = build_convolution(*dnn, handle, desc, mapping, tensors, kCudnnFastAlignment,
                                  deterministic, fast_why, fast_status);
  state->any = build_convolution(*dnn, handle, desc, mapping, tensors, 0, deterministic, any_why,
                                 any_status);
  if (!state->fast.ok() && !state->any.ok()) {
    return decline(any_why, static_cast<int64_t>(any_status));
  }
  Planned planned;
  planned.result = HAL_SUCCESS;
  planned.workspace_bytes = static_cast<size_t>(state->workspace());
  planned.plan = std::make_unique<ConvolutionPlan>(device, std::move(state));
  return planned;
}

}  // namespace hal::cuda::ops
