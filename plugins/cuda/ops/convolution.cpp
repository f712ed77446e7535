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
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../device.hpp"
#include "../stream.hpp"
#include "cudnn.hpp"
#include "hal_util/names.hpp"
#include "ops.hpp"

namespace hal::cuda::ops {
namespace {

constexpr int64_t kConvFastAlignment = 16;
constexpr int64_t kMaxConfigs = 16;  // engine configurations read from the heuristic

// One tensor of the operation as cuDNN sees it.
struct DnnTensor {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int64_t element_bytes = 4;
  int rank = 0;  // 4 or 5
  std::array<int64_t, 5> dims{}, strides{};
};

// A backend descriptor owned by the plan, destroyed through its library.
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(const CudnnApi* api, cudnnBackendDescriptor_t desc) : api_(api), desc_(desc) {}
  Descriptor(Descriptor&& other) noexcept
      : api_(other.api_), desc_(std::exchange(other.desc_, nullptr)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    if (this != &other) {
      reset();
      api_ = other.api_;
      desc_ = std::exchange(other.desc_, nullptr);
    }
    return *this;
  }
  ~Descriptor() { reset(); }
  cudnnBackendDescriptor_t get() const { return desc_; }

 private:
  void reset() {
    if (desc_ != nullptr) api_->cudnnBackendDestroyDescriptor(desc_);
    desc_ = nullptr;
  }
  const CudnnApi* api_ = nullptr;
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// A failed cuDNN call while building: the call and the status.
struct Failure {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::string call;
  bool failed() const { return status != CUDNN_STATUS_SUCCESS; }
};

// Builds descriptors, remembering the first failure (later calls do nothing).
class Builder {
 public:
  explicit Builder(const Cudnn& dnn) : dnn_(dnn), api_(dnn.api()) {}

  Descriptor create(cudnnBackendDescriptorType_t type, const char* what) {
    cudnnBackendDescriptor_t desc = nullptr;
    if (failure_.failed()) return {};
    check(api_.cudnnBackendCreateDescriptor(type, &desc), what);
    return failure_.failed() ? Descriptor() : Descriptor(&api_, desc);
  }
  void set(const Descriptor& desc, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const void* values, const char* what) {
    if (failure_.failed() || desc.get() == nullptr) return;
    check(api_.cudnnBackendSetAttribute(desc.get(), name, type, count, values), what);
  }
  void finalize(const Descriptor& desc, const char* what) {
    if (failure_.failed() || desc.get() == nullptr) return;
    check(api_.cudnnBackendFinalize(desc.get()), what);
  }
  void get(const Descriptor& desc, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* values,
           const char* what) {
    if (failure_.failed() || desc.get() == nullptr) return;
    check(api_.cudnnBackendGetAttribute(desc.get(), name, type, requested, count, values), what);
  }
  void check(cudnnStatus_t status, const char* what) {
    if (status != CUDNN_STATUS_SUCCESS && !failure_.failed()) failure_ = {status, what};
  }
  const Failure& failure() const { return failure_; }
  void clear() { failure_ = {}; }
  std::string failure_text() const {
    return failure_.call + " failed: " + dnn_.status_text(failure_.status);
  }

 private:
  const Cudnn& dnn_;
  const CudnnApi& api_;
  Failure failure_;
};

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

bool dnn_type(hal_dtype_t dtype, cudnnDataType_t* out, int64_t* bytes) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      *out = CUDNN_DATA_FLOAT;
      *bytes = 4;
      return true;
    case HAL_DTYPE_F16:
      *out = CUDNN_DATA_HALF;
      *bytes = 2;
      return true;
    case HAL_DTYPE_BF16:
      *out = CUDNN_DATA_BFLOAT16;
      *bytes = 2;
      return true;
    default:
      return false;
  }
}

// HAL's tensor in cuDNN's dimension order: [N, C, spatial...] (a filter
// [K, C/groups, k...]), 1-D lifted to 2-D with a leading spatial extent 1.
DnnTensor dnn_tensor(const hal_tensor_desc_t& t, hal_channel_layout_t layout, uint32_t spatial,
                     int64_t uid) {
  DnnTensor out;
  out.uid = uid;
  dnn_type(t.dtype, &out.type, &out.element_bytes);
  std::vector<int64_t> dims, strides;
  // HAL's dimension index of cuDNN's dimension i (before the lift).
  const uint32_t rank = spatial + 2;
  for (uint32_t i = 0; i < rank; ++i) {
    uint32_t from = i;
    if (layout == HAL_CHANNELS_LAST && i >= 1) from = i == 1 ? rank - 1 : i - 1;
    dims.push_back(t.shape[from]);
    strides.push_back(t.strides[from]);
  }
  if (spatial == 1) {
    // [N, C, 1, W]: the extent-1 dimension strides past W, as if outer to it.
    dims.insert(dims.begin() + 2, 1);
    strides.insert(strides.begin() + 2, strides[2] * std::max<int64_t>(dims[2], 1));
  }
  out.rank = static_cast<int>(dims.size());
  for (int i = 0; i < out.rank; ++i) {
    out.dims[i] = dims[i];
    out.strides[i] = strides[i];
  }
  return out;
}

// The plan of one alignment: an execution plan and its workspace.
struct Executable {
  std::vector<Descriptor> keep;  // the tensors, operation, graph... the plan was made of
  Descriptor plan;
  int64_t workspace = 0;
  bool ok() const { return plan.get() != nullptr; }
};

struct ConvState {
  std::shared_ptr<const Cudnn> dnn;
  cudnnHandle_t handle = nullptr;
  Executable fast, any;
  std::array<int64_t, 3> uids{};
  std::array<int, 3> operands{};
  std::array<int64_t, 3> element_bytes{};
};

// Builds the graph for tensors aligned to |alignment| bytes and takes the
// first allowed engine configuration that finalizes. On no plan: |why|, and
// the last status as |status|.
Executable build(const Cudnn& dnn, cudnnHandle_t handle, const hal_op_convolution_desc_t& desc,
                 const Mapping& mapping, const std::array<DnnTensor, 3>& tensors, int64_t alignment,
                 bool deterministic, std::string& why, cudnnStatus_t& status) {
  Executable out;
  Builder b(dnn);
  const uint32_t spatial = desc.spatial_dims;
  std::array<Descriptor, 3> tensor_descs;
  for (size_t i = 0; i < 3; ++i) {
    const DnnTensor& t = tensors[i];
    tensor_descs[i] =
        b.create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "cudnnBackendCreateDescriptor(TENSOR)");
    const int64_t align = std::max(alignment, t.element_bytes);
    b.set(tensor_descs[i], CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.type,
          "cudnnBackendSetAttribute(TENSOR_DATA_TYPE)");
    b.set(tensor_descs[i], CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t.rank, t.dims.data(),
          "cudnnBackendSetAttribute(TENSOR_DIMENSIONS)");
    b.set(tensor_descs[i], CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t.rank, t.strides.data(),
          "cudnnBackendSetAttribute(TENSOR_STRIDES)");
    b.set(tensor_descs[i], CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid,
          "cudnnBackendSetAttribute(TENSOR_UNIQUE_ID)");
    b.set(tensor_descs[i], CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align,
          "cudnnBackendSetAttribute(TENSOR_BYTE_ALIGNMENT)");
    b.finalize(tensor_descs[i], "cudnnBackendFinalize(TENSOR)");
  }

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
  cudnnBackendDescriptor_t conv_handle = conv.get();
  b.set(operation, mapping.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_handle,
        "cudnnBackendSetAttribute(OPERATION_CONVOLUTION_CONV_DESC)");
  for (size_t i = 0; i < 3; ++i) {
    cudnnBackendDescriptor_t t = tensor_descs[i].get();
    b.set(operation, mapping.attributes[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
          "cudnnBackendSetAttribute(OPERATION_CONVOLUTION tensor)");
  }
  b.finalize(operation, "cudnnBackendFinalize(OPERATION_CONVOLUTION)");

  Descriptor graph = b.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                              "cudnnBackendCreateDescriptor(OPERATIONGRAPH)");
  cudnnBackendDescriptor_t op_handle = operation.get();
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op_handle,
        "cudnnBackendSetAttribute(OPERATIONGRAPH_OPS)");
  // The handle attributes are deprecated from cuDNN 9.? in favour of device
  // properties, and still honoured by every cuDNN 9: the plugin runs on any.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
  constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop
  b.set(graph, kGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle,
        "cudnnBackendSetAttribute(OPERATIONGRAPH_HANDLE)");
  b.finalize(graph, "cudnnBackendFinalize(OPERATIONGRAPH)");

  Descriptor heuristic =
      b.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "cudnnBackendCreateDescriptor(ENGINEHEUR)");
  cudnnBackendDescriptor_t graph_handle = graph.get();
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_INSTANT;
  b.set(heuristic, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &graph_handle, "cudnnBackendSetAttribute(ENGINEHEUR_OPERATION_GRAPH)");
  b.set(heuristic, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode,
        "cudnnBackendSetAttribute(ENGINEHEUR_MODE)");
  b.finalize(heuristic, "cudnnBackendFinalize(ENGINEHEUR)");
  // The results are engine configurations the caller created (cuDNN docs,
  // CUDNN_ATTR_ENGINEHEUR_RESULTS: an array of CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> config_handles;
  for (int64_t i = 0; i < kMaxConfigs && !b.failure().failed(); ++i) {
    configs.push_back(
        b.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "cudnnBackendCreateDescriptor(ENGINECFG)"));
    config_handles.push_back(configs.back().get());
  }
  int64_t config_count = 0;
  b.get(heuristic, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxConfigs,
        &config_count, config_handles.data(), "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)");
  if (b.failure().failed()) {
    why = b.failure_text();
    status = b.failure().status;
    return out;
  }
  const bool f32 = tensors[0].type == CUDNN_DATA_FLOAT;
  std::string skipped;  // why configurations were passed over
  for (int64_t i = 0; i < config_count && i < kMaxConfigs; ++i) {
    // The engine's numerical notes (CUDNN_ATTR_ENGINECFG_ENGINE fills an
    // engine descriptor the caller created).
    Descriptor engine =
        b.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "cudnnBackendCreateDescriptor(ENGINE)");
    cudnnBackendDescriptor_t engine_handle = engine.get();
    int64_t engine_count = 0;
    b.get(configs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine_count,
          &engine_handle, "cudnnBackendGetAttribute(ENGINECFG_ENGINE)");
    std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
    int64_t note_count = 0;
    b.get(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
          static_cast<int64_t>(notes.size()), &note_count, notes.data(),
          "cudnnBackendGetAttribute(ENGINE_NUMERICAL_NOTE)");
    if (b.failure().failed()) break;
    const char* refused = nullptr;
    for (int64_t n = 0; n < note_count && n < static_cast<int64_t>(notes.size()); ++n) {
      if (f32 && (notes[n] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE ||
                  notes[n] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)) {
        refused = "TF32 (tensor cores on f32 data)";
      }
      if (deterministic && notes[n] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) {
        refused = "nondeterministic (HAL_OP_PLAN_DETERMINISTIC)";
      }
    }
    if (refused != nullptr) {
      if (skipped.empty()) skipped = std::string("; skipped engines: ") + refused;
      continue;
    }
    Descriptor plan = b.create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                               "cudnnBackendCreateDescriptor(EXECUTION_PLAN)");
    b.set(plan, kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle,
          "cudnnBackendSetAttribute(EXECUTION_PLAN_HANDLE)");
    cudnnBackendDescriptor_t config_handle = configs[i].get();
    b.set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &config_handle, "cudnnBackendSetAttribute(EXECUTION_PLAN_ENGINE_CONFIG)");
    b.finalize(plan, "cudnnBackendFinalize(EXECUTION_PLAN)");
    int64_t workspace = 0, workspace_count = 0;
    b.get(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &workspace_count,
          &workspace, "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)");
    if (b.failure().failed() || workspace < 0) {
      // This engine cannot run the graph here: the next one may.
      if (!b.failure().failed()) b.check(CUDNN_STATUS_INTERNAL_ERROR, "a negative workspace size");
      why = b.failure_text();
      status = b.failure().status;
      b.clear();
      continue;
    }
    out.plan = std::move(plan);
    out.workspace = workspace;
    out.keep.push_back(std::move(engine));
    out.keep.push_back(std::move(configs[i]));
    out.keep.push_back(std::move(heuristic));
    out.keep.push_back(std::move(graph));
    out.keep.push_back(std::move(operation));
    out.keep.push_back(std::move(conv));
    for (Descriptor& t : tensor_descs) out.keep.push_back(std::move(t));
    return out;
  }
  if (b.failure().failed()) {
    why = b.failure_text();
    status = b.failure().status;
  } else if (why.empty()) {
    why = "the heuristic offered " + std::to_string(config_count) +
          " engine configurations and none is allowed" + skipped;
    status = CUDNN_STATUS_NOT_SUPPORTED;
  } else {
    why += skipped;
  }
  return out;
}

class ConvolutionPlan final : public OpPlan {
 public:
  ConvolutionPlan(Device& device, std::unique_ptr<ConvState> state)
      : device_(device), state_(std::move(state)) {}
  // An execution plan may hold kernels cuDNN compiled into the device's
  // context: destroyed with that context current.
  ~ConvolutionPlan() override {
    const ContextScope bound = device_.bind();
    const std::unique_lock lock = device_.dnn().lock();
    state_.reset();
  }
  ConvolutionPlan(const ConvolutionPlan&) = delete;
  ConvolutionPlan& operator=(const ConvolutionPlan&) = delete;

  hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const override {
    const plugin::ErrorReporter& report = device_.report();
    const ConvState& s = *state_;
    std::array<void*, 3> pointers{};
    bool aligned = true;
    for (size_t i = 0; i < 3; ++i) {
      pointers[i] = args.operands[s.operands[i]];
      aligned = aligned && reinterpret_cast<uintptr_t>(pointers[i]) % kConvFastAlignment == 0;
    }
    const Executable& chosen = aligned && s.fast.ok() ? s.fast : s.any;
    if (!chosen.ok()) {
      return report.fail(HAL_ERROR_UNSUPPORTED, 0,
                         "op_execute: cuDNN offered no engine for operands that are not "
                         "%lld-byte aligned, and these are not",
                         static_cast<long long>(kConvFastAlignment));
    }
    if (chosen.workspace > 0 && (args.workspace == nullptr ||
                                 args.workspace_bytes < static_cast<size_t>(chosen.workspace))) {
      return report.fail(HAL_ERROR_INVALID_ARGUMENT, 0,
                         "op_execute: cuDNN's plan needs a workspace of %lld bytes, given %zu",
                         static_cast<long long>(chosen.workspace),
                         args.workspace != nullptr ? args.workspace_bytes : size_t{0});
    }
    const ContextScope bound = device_.bind();
    if (!bound.ok()) return device_.fail(bound.result(), "op_execute: cuCtxSetCurrent");
    const CudnnApi& api = s.dnn->api();
    cudnnBackendDescriptor_t pack = nullptr;
    if (const cudnnStatus_t status =
            api.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
        status != CUDNN_STATUS_SUCCESS) {
      return fail(status, "cudnnBackendCreateDescriptor(VARIANT_PACK)");
    }
    const Descriptor owned(&api, pack);
    void* workspace = chosen.workspace > 0 ? args.workspace : nullptr;
    struct Set {
      cudnnBackendAttributeName_t name;
      cudnnBackendAttributeType_t type;
      int64_t count;
      const void* values;
      const char* what;
    };
    const Set sets[] = {
        {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, s.uids.data(),
         "cudnnBackendSetAttribute(VARIANT_PACK_UNIQUE_IDS)"},
        {CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers.data(),
         "cudnnBackendSetAttribute(VARIANT_PACK_DATA_POINTERS)"},
        {CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace,
         "cudnnBackendSetAttribute(VARIANT_PACK_WORKSPACE)"},
    };
    for (const Set& set : sets) {
      if (const cudnnStatus_t status =
              api.cudnnBackendSetAttribute(pack, set.name, set.type, set.count, set.values);
          status != CUDNN_STATUS_SUCCESS) {
        return fail(status, set.what);
      }
    }
    if (const cudnnStatus_t status = api.cudnnBackendFinalize(pack);
        status != CUDNN_STATUS_SUCCESS) {
      return fail(status, "cudnnBackendFinalize(VARIANT_PACK)");
    }
    // One handle per device, one stream per handle: set and run under its lock.
    const std::unique_lock lock = device_.dnn().lock();
    if (const cudnnStatus_t status =
            api.cudnnSetStream(s.handle, reinterpret_cast<cudaStream_t>(stream.get()));
        status != CUDNN_STATUS_SUCCESS) {
      return fail(status, "cudnnSetStream");
    }
    const cudnnStatus_t status = api.cudnnBackendExecute(s.handle, chosen.plan.get(), pack);
    return status == CUDNN_STATUS_SUCCESS ? HAL_SUCCESS : fail(status, "cudnnBackendExecute");
  }

 private:
  hal_result_t fail(cudnnStatus_t status, const char* call) const {
    return device_.report().fail(result_of(status), static_cast<int64_t>(status),
                                 "op_execute: %s failed: %s", call,
                                 state_->dnn->status_text(status).c_str());
  }

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
    state->element_bytes[i] = tensors[i].element_bytes;
  }
  std::string fast_why, any_why;
  cudnnStatus_t fast_status = CUDNN_STATUS_SUCCESS, any_status = CUDNN_STATUS_SUCCESS;
  state->fast = build(*dnn, handle, desc, mapping, tensors, kConvFastAlignment, deterministic,
                      fast_why, fast_status);
  state->any = build(*dnn, handle, desc, mapping, tensors, 0, deterministic, any_why, any_status);
  if (!state->fast.ok() && !state->any.ok()) {
    return decline(any_why, static_cast<int64_t>(any_status));
  }
  Planned planned;
  planned.result = HAL_SUCCESS;
  planned.workspace_bytes = static_cast<size_t>(std::max(
      state->fast.ok() ? state->fast.workspace : 0, state->any.ok() ? state->any.workspace : 0));
  planned.plan = std::make_unique<ConvolutionPlan>(device, std::move(state));
  return planned;
}

}  // namespace hal::cuda::ops
