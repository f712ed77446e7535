// A stand-in for libcudnn.so.9, for testing the cuda plugin's convolution
// without a GPU: the graph ("backend") API entry points the plugin calls,
// modelled on cuDNN 9's documentation (docs.nvidia.com/deeplearning/cudnn,
// "Backend Descriptor Types" and the cudnn_graph library's
// cudnnBackendCreateDescriptor / SetAttribute / GetAttribute / Finalize /
// Execute). Descriptors are attribute bags checked as cuDNN checks them
// (an attribute's type, setting a finalized descriptor, finalizing with a
// required attribute missing, referencing an unfinalized descriptor, shapes
// that do not convolve); finalize snapshots what later steps need. The
// heuristic offers three engines (fake_cudnn.h) with the numerical notes and
// alignment needs real engines have, so the plugin's engine filter and its
// alignment variants are exercised. Its "device" memory is the stand-in
// driver's, which is host memory, so cudnnBackendExecute really convolves:
// tensors [N, C, spatial...] with their strides, filters [K, C/groups, k...],
// cross-correlation or (CUDNN_CONVOLUTION) flipped taps, pre and post
// padding, dilation, in double, y = alpha * result + beta * y, enqueued
// through the stand-in driver's cuLaunchHostFunc, so it runs in stream order.
// Pooling and batch norm likewise: RESAMPLE_FWD and RESAMPLE_BWD (max with
// -inf or zero padding, NaN skipped unless RESAMPLE_NAN_PROPAGATION asks for
// it; average dividing by the window or by its positions inside x; no index
// tensor, no max backward: not modelled), NORM_FORWARD in training (mean,
// biased variance, inverse std, the running statistics updated with the
// by-value factor and the unbiased variance) and NORM_BACKWARD, as cuDNN's
// documentation defines them (not as HAL does: the tests compare with HAL's).
#include <cuda.h>
#include <cudnn_graph.h>
#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "fake_cudnn.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace {

// ---- element conversions (round to nearest even) ----

float bits_to_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
uint32_t float_to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_half(float value) {
  const uint32_t x = float_to_bits(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)
    return static_cast<uint16_t>(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half, units of 2^-24
    const float units = bits_to_float(magnitude) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(units)));
  }
  uint32_t h = ((((magnitude >> 23) - 112) << 10) | ((magnitude >> 13) & 0x3ffu));
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;  // a carry moves the exponent
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_float(uint16_t b) {
  return bits_to_float(static_cast<uint32_t>(b) << 16);
}

uint16_t float_to_bf16(float value) {
  const uint32_t x = float_to_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

int64_t type_bytes(cudnnDataType_t type) {
  return type == CUDNN_DATA_FLOAT ? 4 : 2;
}

double load(const void* base, cudnnDataType_t type, int64_t index) {
  switch (type) {
    case CUDNN_DATA_FLOAT:
      return static_cast<const float*>(base)[index];
    case CUDNN_DATA_HALF:
      return half_to_float(static_cast<const uint16_t*>(base)[index]);
    default:
      return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
  }
}

void store(void* base, cudnnDataType_t type, int64_t index, double value) {
  const float v = static_cast<float>(value);
  switch (type) {
    case CUDNN_DATA_FLOAT:
      static_cast<float*>(base)[index] = v;
      break;
    case CUDNN_DATA_HALF:
      static_cast<uint16_t*>(base)[index] = float_to_half(v);
      break;
    default:
      static_cast<uint16_t*>(base)[index] = float_to_bf16(v);
      break;
  }
}

// TF32: f32 with its mantissa rounded to 10 bits.
double tf32(double value) {
  const uint32_t bits = float_to_bits(static_cast<float>(value));
  return bits_to_float((bits + 0x1000u) & ~0x1fffu);
}

// ---- descriptors ------------------------------------------------------------

struct Attribute {
  cudnnBackendAttributeType_t type{};
  int64_t count = 0;
  std::vector<unsigned char> bytes;
};

size_t attribute_size(cudnnBackendAttributeType_t type) {
  switch (type) {
    case CUDNN_TYPE_HANDLE:
      return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_INT64:
      return 8;
    case CUDNN_TYPE_FLOAT:
      return 4;
    case CUDNN_TYPE_DOUBLE:
      return 8;
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
      return sizeof(void*);
    case CUDNN_TYPE_BOOLEAN:
      return sizeof(bool);
    default:  // the enumerations
      return 4;
  }
}

struct TensorInfo {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int rank = 0;
  std::array<int64_t, 5> dims{}, strides{};
  int64_t uid = 0, alignment = 0;
  bool by_value = false;  // a host scalar read at execute
};

struct ConvInfo {
  int64_t spatial = 0;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  std::array<int64_t, 3> stride{}, dilation{}, pre{}, post{};
};

// A convolution operation in the forward's roles: x [N, C, i...], w [K, C/g,
// k...], y [N, K, o...] (backward data: dx, w, dy; backward filter: x, dw, dy).
struct ResampleInfo {
  cudnnResampleMode_t mode = CUDNN_RESAMPLE_MAXPOOL;
  cudnnPaddingMode_t padding = CUDNN_ZERO_PAD;
  bool propagate_nan = false;  // unset: NaN skipped (cudnnNanPropagation_t's default)
  int64_t spatial = 0;
  std::array<int64_t, 3> window{}, stride{}, pre{}, post{};
};

// A convolution (x, w, y, conv), a resample (x, y; dx, dy in the backward)
// or a batch norm (its tensors by attribute in |tensors|).
struct OpInfo {
  cudnnBackendDescriptorType_t kind{};
  TensorInfo x, w, y;
  ConvInfo conv;
  double alpha = 1.0, beta = 0.0;
  ResampleInfo resample;
  cudnnBackendNormMode_t norm_mode{};
  cudnnBackendNormFwdPhase_t norm_phase{};
  std::map<int, TensorInfo> tensors;  // every tensor of a resample or norm, by attribute
};

struct Descriptor {
  cudnnBackendDescriptorType_t type{};
  bool finalized = false;
  std::map<int, Attribute> attributes;
  // Snapshots taken at finalize.
  TensorInfo tensor;
  ConvInfo conv;
  ResampleInfo resample;
  std::shared_ptr<const OpInfo> op;  // operation, graph, heuristic, engine, config, plan
  cudnnHandle_t handle = nullptr;    // graph, plan
  int64_t engine = -1;               // engine, config, plan
  int64_t workspace = 0;             // plan
  // Variant pack.
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  void* workspace_pointer = nullptr;
};

// A status the next |times| calls of one entry return instead of working.
struct Failure {
  int status = 0;
  int times = 0;
};

struct State {
  std::mutex mutex;
  std::set<Descriptor*> live;
  fake_cudnn_stats_t stats{};
  fake_cudnn_execution_t last{};
  bool has_last = false;
  Failure fail_create, fail_finalize_plan, fail_execute;
  decltype(&::cuLaunchHostFunc) launch_host_func = nullptr;
};

State& state() {
  static State* instance = new State();  // never destroyed: host functions may outlive exit
  return *instance;
}

int take(Failure& pending) {
  if (pending.times <= 0) return 0;
  --pending.times;
  return pending.status;
}

// The stand-in driver the plugin opened (its fake_cuStreamWork orders the
// work on the stream). Null when no such driver is loaded.
decltype(&::cuLaunchHostFunc) find_launch_host_func() {
  const char* path = std::getenv("HAL_CUDA_DRIVER_PATH");
  void* driver =
      dlopen(path != nullptr && path[0] != '\0' ? path : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return nullptr;
  using GetProc =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(driver, "cuGetProcAddress_v2"));
  void* function = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (get_proc == nullptr || get_proc("fake_cuStreamWork", &function, CUDA_VERSION,
                                      CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) {
    return nullptr;
  }
  return reinterpret_cast<decltype(&::cuLaunchHostFunc)>(function);
}

// ---- reading attributes -------------------------------------------------------

const Attribute* find(const Descriptor& d, cudnnBackendAttributeName_t name) {
  const auto it = d.attributes.find(static_cast<int>(name));
  return it == d.attributes.end() ? nullptr : &it->second;
}

template <class T>
bool scalar(const Descriptor& d, cudnnBackendAttributeName_t name, T* out) {
  const Attribute* a = find(d, name);
  if (a == nullptr || a->count != 1 || a->bytes.size() < sizeof(T)) return false;
  std::memcpy(out, a->bytes.data(), sizeof(T));
  return true;
}

bool int64s(const Descriptor& d, cudnnBackendAttributeName_t name, std::vector<int64_t>* out) {
  const Attribute* a = find(d, name);
  if (a == nullptr || a->type != CUDNN_TYPE_INT64) return false;
  out->resize(static_cast<size_t>(a->count));
  std::memcpy(out->data(), a->bytes.data(), a->bytes.size());
  return true;
}

// A referenced descriptor: live, of |type| and finalized.
cudnnStatus_t referenced(const Descriptor& d, cudnnBackendAttributeName_t name,
                         cudnnBackendDescriptorType_t type, Descriptor** out) {
  void* pointer = nullptr;
  const Attribute* a = find(d, name);
  if (a == nullptr || a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || a->count != 1) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  std::memcpy(&pointer, a->bytes.data(), sizeof(pointer));
  auto* target = static_cast<Descriptor*>(pointer);
  if (state().live.count(target) == 0) return CUDNN_STATUS_BAD_PARAM;
  if (target->type != type) return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
  if (!target->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  *out = target;
  return CUDNN_STATUS_SUCCESS;
}

// ---- finalize -----------------------------------------------------------------

cudnnStatus_t finalize_tensor(Descriptor& d) {
  TensorInfo& t = d.tensor;
  std::vector<int64_t> dims, strides;
  if (!scalar(d, CUDNN_ATTR_TENSOR_DATA_TYPE, &t.type) ||
      !int64s(d, CUDNN_ATTR_TENSOR_DIMENSIONS, &dims) ||
      !int64s(d, CUDNN_ATTR_TENSOR_STRIDES, &strides) ||
      !scalar(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, &t.uid) ||
      !scalar(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &t.alignment)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (t.type != CUDNN_DATA_FLOAT && t.type != CUDNN_DATA_HALF && t.type != CUDNN_DATA_BFLOAT16) {
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  }
  if (dims.size() != strides.size() || dims.size() < 3 || dims.size() > 5) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  // The alignment: a power of two, at least the element's size.
  if (t.alignment < type_bytes(t.type) || (t.alignment & (t.alignment - 1)) != 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (const Attribute* by_value = find(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE); by_value != nullptr) {
    if (by_value->type != CUDNN_TYPE_BOOLEAN || by_value->count != 1) {
      return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
    }
    t.by_value = by_value->bytes[0] != 0;
  }
  t.rank = static_cast<int>(dims.size());
  for (int i = 0; i < t.rank; ++i) {
    if (dims[i] <= 0 || strides[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
    t.dims[i] = dims[i];
    t.strides[i] = strides[i];
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_conv(Descriptor& d) {
  ConvInfo& c = d.conv;
  std::vector<int64_t> stride, dilation, pre, post;
  if (!scalar(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &c.spatial) ||
      !scalar(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, &c.compute) ||
      !scalar(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, &c.mode) ||
      !int64s(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, &stride) ||
      !int64s(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, &dilation) ||
      !int64s(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &pre) ||
      !int64s(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &post)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (c.spatial < 1 || c.spatial > 3) return CUDNN_STATUS_BAD_PARAM;
  const size_t n = static_cast<size_t>(c.spatial);
  if (stride.size() != n || dilation.size() != n || pre.size() != n || post.size() != n) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  for (size_t i = 0; i < n; ++i) {
    if (stride[i] < 1 || dilation[i] < 1 || pre[i] < 0 || post[i] < 0) {
      return CUDNN_STATUS_BAD_PARAM;
    }
    c.stride[i] = stride[i];
    c.dilation[i] = dilation[i];
    c.pre[i] = pre[i];
    c.post[i] = post[i];
  }
  return CUDNN_STATUS_SUCCESS;
}

// The shapes of a convolution: x [N, C, i...], w [K, C/g, k...], y [N, K, o...].
cudnnStatus_t check_shapes(const OpInfo& op) {
  const TensorInfo &x = op.x, &w = op.w, &y = op.y;
  const int rank = x.rank;
  if (w.rank != rank || y.rank != rank || rank != op.conv.spatial + 2 || rank < 4) {
    return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  }
  if (x.type != w.type || x.type != y.type) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  if (x.uid == w.uid || x.uid == y.uid || w.uid == y.uid) {
    return CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES;
  }
  const int64_t groups = w.dims[1] > 0 ? x.dims[1] / w.dims[1] : 0;
  if (groups < 1 || x.dims[1] % w.dims[1] != 0 || w.dims[0] % groups != 0 ||
      y.dims[0] != x.dims[0] || y.dims[1] != w.dims[0]) {
    return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  }
  for (int s = 0; s < rank - 2; ++s) {
    const int64_t eff = op.conv.dilation[s] * (w.dims[2 + s] - 1) + 1;
    const int64_t span = x.dims[2 + s] + op.conv.pre[s] + op.conv.post[s] - eff;
    if (span < 0 || span / op.conv.stride[s] + 1 != y.dims[2 + s]) {
      return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_resample(Descriptor& d) {
  ResampleInfo& r = d.resample;
  cudnnDataType_t compute{};
  std::vector<int64_t> window, stride, pre, post;
  if (!scalar(d, CUDNN_ATTR_RESAMPLE_MODE, &r.mode) ||
      !scalar(d, CUDNN_ATTR_RESAMPLE_COMP_TYPE, &compute) ||
      !scalar(d, CUDNN_ATTR_RESAMPLE_SPATIAL_DIMS, &r.spatial) ||
      !int64s(d, CUDNN_ATTR_RESAMPLE_WINDOW_DIMS, &window) ||
      !int64s(d, CUDNN_ATTR_RESAMPLE_STRIDES, &stride) ||
      !int64s(d, CUDNN_ATTR_RESAMPLE_PRE_PADDINGS, &pre) ||
      !int64s(d, CUDNN_ATTR_RESAMPLE_POST_PADDINGS, &post)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (const Attribute* a = find(d, CUDNN_ATTR_RESAMPLE_PADDING_MODE); a != nullptr) {
    if (a->type != CUDNN_TYPE_PADDING_MODE) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
    std::memcpy(&r.padding, a->bytes.data(), sizeof(r.padding));
  }
  if (const Attribute* a = find(d, CUDNN_ATTR_RESAMPLE_NAN_PROPAGATION); a != nullptr) {
    if (a->type != CUDNN_TYPE_NAN_PROPOGATION) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
    cudnnNanPropagation_t nan{};
    std::memcpy(&nan, a->bytes.data(), sizeof(nan));
    r.propagate_nan = nan == CUDNN_PROPAGATE_NAN;
  }
  if (r.mode != CUDNN_RESAMPLE_MAXPOOL && r.mode != CUDNN_RESAMPLE_AVGPOOL_INCLUDE_PADDING &&
      r.mode != CUDNN_RESAMPLE_AVGPOOL_EXCLUDE_PADDING) {
    return CUDNN_STATUS_NOT_SUPPORTED;  // nearest and bilinear: not modelled here
  }
  if (compute != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  if (r.spatial < 2 || r.spatial > 3) return CUDNN_STATUS_BAD_PARAM;  // 2-D and 3-D
  const size_t n = static_cast<size_t>(r.spatial);
  if (window.size() != n || stride.size() != n || pre.size() != n || post.size() != n) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  for (size_t i = 0; i < n; ++i) {
    if (window[i] < 1 || stride[i] < 1 || pre[i] < 0 || post[i] < 0) return CUDNN_STATUS_BAD_PARAM;
    r.window[i] = window[i];
    r.stride[i] = stride[i];
    r.pre[i] = pre[i];
    r.post[i] = post[i];
  }
  return CUDNN_STATUS_SUCCESS;
}

// The tensor an operation's attribute names, into op.tensors; |required|
// missing is BAD_PARAM, an optional one absent is left out.
cudnnStatus_t take_tensor(const Descriptor& d, cudnnBackendAttributeName_t name, bool required,
                          OpInfo& op) {
  if (find(d, name) == nullptr) return required ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_SUCCESS;
  Descriptor* t = nullptr;
  if (const cudnnStatus_t s = referenced(d, name, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t);
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  op.tensors[static_cast<int>(name)] = t->tensor;
  return CUDNN_STATUS_SUCCESS;
}

const TensorInfo* tensor_of(const OpInfo& op, cudnnBackendAttributeName_t name) {
  const auto it = op.tensors.find(static_cast<int>(name));
  return it == op.tensors.end() ? nullptr : &it->second;
}

bool unique_ids(const OpInfo& op) {
  std::set<int64_t> uids;
  for (const auto& [attribute, t] : op.tensors) {
    if (!uids.insert(t.uid).second) return false;
  }
  return true;
}

cudnnStatus_t finalize_resample_operation(Descriptor& d) {
  auto op = std::make_shared<OpInfo>();
  op->kind = d.type;
  const bool backward = d.type == CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR;
  const cudnnBackendAttributeName_t x_name =
      backward ? CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DXDESC : CUDNN_ATTR_OPERATION_RESAMPLE_FWD_XDESC;
  const cudnnBackendAttributeName_t y_name =
      backward ? CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DYDESC : CUDNN_ATTR_OPERATION_RESAMPLE_FWD_YDESC;
  for (const cudnnBackendAttributeName_t name : {x_name, y_name}) {
    if (const cudnnStatus_t s = take_tensor(d, name, true, *op); s != CUDNN_STATUS_SUCCESS) {
      return s;
    }
  }
  // The index tensor (max pooling's training form), and the backward's x and
  // y that a max backward re-derives its argmax from: not modelled here.
  for (const cudnnBackendAttributeName_t name :
       {CUDNN_ATTR_OPERATION_RESAMPLE_FWD_IDXDESC, CUDNN_ATTR_OPERATION_RESAMPLE_BWD_IDXDESC,
        CUDNN_ATTR_OPERATION_RESAMPLE_BWD_XDESC, CUDNN_ATTR_OPERATION_RESAMPLE_BWD_YDESC}) {
    if (find(d, name) != nullptr) return CUDNN_STATUS_NOT_SUPPORTED;
  }
  Descriptor* r = nullptr;
  if (const cudnnStatus_t s = referenced(d,
                                         backward ? CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DESC
                                                  : CUDNN_ATTR_OPERATION_RESAMPLE_FWD_DESC,
                                         CUDNN_BACKEND_RESAMPLE_DESCRIPTOR, &r);
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  op->resample = r->resample;
  if (backward && op->resample.mode == CUDNN_RESAMPLE_MAXPOOL) return CUDNN_STATUS_NOT_SUPPORTED;
  const TensorInfo& x = *tensor_of(*op, x_name);
  const TensorInfo& y = *tensor_of(*op, y_name);
  op->x = x;
  op->y = y;
  if (x.type != y.type) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  if (!unique_ids(*op)) return CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES;
  const ResampleInfo& rs = op->resample;
  if (x.rank != rs.spatial + 2 || y.rank != x.rank || x.dims[0] != y.dims[0] ||
      x.dims[1] != y.dims[1]) {
    return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  }
  for (int s = 0; s < rs.spatial; ++s) {
    const int64_t span = x.dims[2 + s] + rs.pre[s] + rs.post[s] - rs.window[s];
    if (span < 0 || span / rs.stride[s] + 1 != y.dims[2 + s]) {
      return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    }
  }
  d.op = std::move(op);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_norm_operation(Descriptor& d) {
  auto op = std::make_shared<OpInfo>();
  op->kind = d.type;
  const bool backward = d.type == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR;
  if (!scalar(d, backward ? CUDNN_ATTR_OPERATION_NORM_BWD_MODE : CUDNN_ATTR_OPERATION_NORM_FWD_MODE,
              &op->norm_mode)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (op->norm_mode != CUDNN_BATCH_NORM) return CUDNN_STATUS_NOT_SUPPORTED;  // not modelled here
  std::vector<cudnnBackendAttributeName_t> required, activations, channels, running;
  if (backward) {
    required = {
        CUDNN_ATTR_OPERATION_NORM_BWD_XDESC,       CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC,
        CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC,      CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC,
        CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC,   CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC,
        CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC};
    activations = {required.begin(), required.begin() + 3};
    channels = {required.begin() + 3, required.end()};
  } else {
    if (!scalar(d, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, &op->norm_phase)) {
      return CUDNN_STATUS_BAD_PARAM;
    }
    // Inference reads a mean and an inverse variance: not modelled here.
    if (op->norm_phase != CUDNN_NORM_FWD_TRAINING) return CUDNN_STATUS_NOT_SUPPORTED;
    required = {
        CUDNN_ATTR_OPERATION_NORM_FWD_XDESC,       CUDNN_ATTR_OPERATION_NORM_FWD_YDESC,
        CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC,  CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC,
        CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC,   CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC,
        CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC};
    activations = {required.begin(), required.begin() + 2};
    channels = {required.begin() + 2, required.begin() + 6};
    running = {CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
               CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
               CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
               CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC};
  }
  for (const cudnnBackendAttributeName_t name : required) {
    if (const cudnnStatus_t s = take_tensor(d, name, true, *op); s != CUDNN_STATUS_SUCCESS) {
      return s;
    }
  }
  // The running statistics and their factor: all or none.
  size_t given = 0;
  for (const cudnnBackendAttributeName_t name : running) {
    if (const cudnnStatus_t s = take_tensor(d, name, false, *op); s != CUDNN_STATUS_SUCCESS) {
      return s;
    }
    given += tensor_of(*op, name) != nullptr ? 1 : 0;
  }
  if (!backward) {
    if (const cudnnStatus_t s =
            take_tensor(d, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, false, *op);
        s != CUDNN_STATUS_SUCCESS) {
      return s;
    }
    const bool factor =
        tensor_of(*op, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC) != nullptr;
    if ((given != 0 || factor) && (given != running.size() || !factor)) {
      return CUDNN_STATUS_BAD_PARAM;
    }
    channels.insert(channels.end(), running.begin(), running.begin() + static_cast<long>(given));
  }
  if (!unique_ids(*op)) return CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES;
  const TensorInfo& x = *tensor_of(*op, activations[0]);
  op->x = x;
  op->y = *tensor_of(*op, activations[1]);
  for (const cudnnBackendAttributeName_t name : activations) {
    const TensorInfo& t = *tensor_of(*op, name);
    if (t.type != x.type) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
    if (t.rank != x.rank || t.by_value) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    for (int i = 0; i < x.rank; ++i) {
      if (t.dims[i] != x.dims[i]) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    }
  }
  // Per-channel tensors: f32 [1, C, 1...] of x's rank.
  for (const cudnnBackendAttributeName_t name : channels) {
    const TensorInfo& t = *tensor_of(*op, name);
    if (t.type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
    if (t.rank != x.rank || t.by_value) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    for (int i = 0; i < x.rank; ++i) {
      if (t.dims[i] != (i == 1 ? x.dims[1] : 1)) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    }
  }
  // Scalars: one f32 element, by value.
  for (const cudnnBackendAttributeName_t name :
       {CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC,
        CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC}) {
    const TensorInfo* t = tensor_of(*op, name);
    if (t == nullptr) continue;
    if (!t->by_value || t->type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < t->rank; ++i) {
      if (t->dims[i] != 1) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    }
  }
  d.op = std::move(op);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_operation(Descriptor& d) {
  if (d.type == CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR ||
      d.type == CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR) {
    return finalize_resample_operation(d);
  }
  if (d.type == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR ||
      d.type == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR) {
    return finalize_norm_operation(d);
  }
  auto op = std::make_shared<OpInfo>();
  op->kind = d.type;
  std::array<cudnnBackendAttributeName_t, 3> names{};  // x, w, y roles
  cudnnBackendAttributeName_t alpha{}, beta{}, conv{};
  switch (d.type) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      names = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
      alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA;
      beta = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA;
      conv = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC;
      break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      names = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
      alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA;
      beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA;
      conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC;
      break;
    default:
      names = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
      alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
      beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA;
      conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC;
      break;
  }
  std::array<TensorInfo*, 3> roles = {&op->x, &op->w, &op->y};
  for (size_t i = 0; i < 3; ++i) {
    Descriptor* t = nullptr;
    if (const cudnnStatus_t s = referenced(d, names[i], CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t);
        s != CUDNN_STATUS_SUCCESS) {
      return s;
    }
    *roles[i] = t->tensor;
  }
  Descriptor* c = nullptr;
  if (const cudnnStatus_t s = referenced(d, conv, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &c);
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  op->conv = c->conv;
  // alpha and beta: float or double (the docs allow either), both required.
  for (auto [name, out] : {std::pair{alpha, &op->alpha}, std::pair{beta, &op->beta}}) {
    const Attribute* a = find(d, name);
    if (a == nullptr || a->count != 1) return CUDNN_STATUS_BAD_PARAM;
    if (a->type == CUDNN_TYPE_FLOAT) {
      float v;
      std::memcpy(&v, a->bytes.data(), 4);
      *out = v;
    } else if (a->type == CUDNN_TYPE_DOUBLE) {
      std::memcpy(out, a->bytes.data(), 8);
    } else {
      return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
    }
  }
  if (const cudnnStatus_t s = check_shapes(*op); s != CUDNN_STATUS_SUCCESS) return s;
  d.op = std::move(op);
  return CUDNN_STATUS_SUCCESS;
}

bool is_convolution(cudnnBackendDescriptorType_t type) {
  return type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
         type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
         type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
}

bool is_operation(cudnnBackendDescriptorType_t type) {
  return is_convolution(type) || type == CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR ||
         type == CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR ||
         type == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR ||
         type == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR;
}

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

cudnnStatus_t finalize_graph(Descriptor& d) {
  const Attribute* ops = find(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
  if (ops == nullptr || ops->type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
  if (ops->count != 1) return CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;  // one convolution
  void* pointer = nullptr;
  std::memcpy(&pointer, ops->bytes.data(), sizeof(pointer));
  auto* op = static_cast<Descriptor*>(pointer);
  if (state().live.count(op) == 0 || !is_operation(op->type)) return CUDNN_STATUS_BAD_PARAM;
  if (!op->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  if (!scalar(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, &d.handle) || d.handle == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  d.op = op->op;
  return CUDNN_STATUS_SUCCESS;
}

// The engines the heuristic offers for |op|, in its order.
std::vector<int64_t> engines_for(const OpInfo& op) {
  std::vector<int64_t> out;
  if (is_convolution(op.kind) && op.x.type == CUDNN_DATA_FLOAT) {
    out.push_back(FAKE_CUDNN_ENGINE_TF32);
  }
  out.push_back(FAKE_CUDNN_ENGINE_VECTOR);
  out.push_back(FAKE_CUDNN_ENGINE_GENERIC);
  return out;
}

std::vector<cudnnBackendNumericalNote_t> notes_of(int64_t engine, const OpInfo& op) {
  if (engine == FAKE_CUDNN_ENGINE_TF32) return {CUDNN_NUMERICAL_NOTE_TENSOR_CORE};
  if (engine == FAKE_CUDNN_ENGINE_VECTOR &&
      op.kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR) {
    return {CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC};
  }
  return {};
}

cudnnStatus_t finalize_heuristic(Descriptor& d) {
  Descriptor* graph = nullptr;
  if (const cudnnStatus_t s = referenced(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                         CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph);
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  cudnnBackendHeurMode_t mode{};
  if (!scalar(d, CUDNN_ATTR_ENGINEHEUR_MODE, &mode)) return CUDNN_STATUS_BAD_PARAM;
  d.op = graph->op;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_plan(Descriptor& d) {
  if (const int status = take(state().fail_finalize_plan); status != 0) {
    return static_cast<cudnnStatus_t>(status);
  }
  Descriptor* config = nullptr;
  if (const cudnnStatus_t s = referenced(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                         CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &config);
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  if (!scalar(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, &d.handle) || d.handle == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const OpInfo& op = *config->op;
  if (config->engine == FAKE_CUDNN_ENGINE_VECTOR) {
    // Vectorised loads: every tensor declared 16-byte aligned.
    for (const TensorInfo* t : {&op.x, &op.w, &op.y}) {
      if (is_convolution(op.kind) && t->alignment < 16) return CUDNN_STATUS_NOT_SUPPORTED;
    }
    for (const auto& [attribute, t] : op.tensors) {
      if (!t.by_value && t.alignment < 16) return CUDNN_STATUS_NOT_SUPPORTED;
    }
  }
  d.op = config->op;
  d.engine = config->engine;
  d.workspace = config->engine == FAKE_CUDNN_ENGINE_VECTOR    ? FAKE_CUDNN_VECTOR_WORKSPACE
                : config->engine == FAKE_CUDNN_ENGINE_GENERIC ? FAKE_CUDNN_GENERIC_WORKSPACE
                                                              : 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_variant_pack(Descriptor& d) {
  const Attribute* uids = find(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const Attribute* pointers = find(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  if (uids == nullptr || pointers == nullptr || uids->type != CUDNN_TYPE_INT64 ||
      pointers->type != CUDNN_TYPE_VOID_PTR || uids->count != pointers->count) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  d.uids.resize(static_cast<size_t>(uids->count));
  std::memcpy(d.uids.data(), uids->bytes.data(), uids->bytes.size());
  d.pointers.resize(static_cast<size_t>(pointers->count));
  std::memcpy(d.pointers.data(), pointers->bytes.data(), pointers->bytes.size());
  if (const Attribute* w = find(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE); w != nullptr) {
    if (w->type != CUDNN_TYPE_VOID_PTR || w->count != 1) return CUDNN_STATUS_BAD_PARAM;
    std::memcpy(&d.workspace_pointer, w->bytes.data(), sizeof(void*));
  }
  return CUDNN_STATUS_SUCCESS;
}

// ---- the convolution ----------------------------------------------------------

struct Job {
  OpInfo op;
  int64_t engine = 0;
  void* x = nullptr;  // a convolution's, in the forward's roles
  void* w = nullptr;
  void* y = nullptr;
  std::map<int, void*> pointers;  // a resample's or norm's device tensors, by attribute
  std::map<int, double> values;   // its by-value scalars, read at execute
};

// Element offset of index |idx| (rank entries) in |t|.
int64_t offset(const TensorInfo& t, const int64_t* idx) {
  int64_t off = 0;
  for (int i = 0; i < t.rank; ++i) off += idx[i] * t.strides[i];
  return off;
}

int64_t count(const TensorInfo& t) {
  int64_t n = 1;
  for (int i = 0; i < t.rank; ++i) n *= t.dims[i];
  return n;
}

// Index |linear| (row-major over t's dims) into |idx|.
void unflatten(const TensorInfo& t, int64_t linear, int64_t* idx) {
  for (int i = t.rank; i-- > 0;) {
    idx[i] = linear % t.dims[i];
    linear /= t.dims[i];
  }
}

// ---- pooling and batch norm ---------------------------------------------------

// Every element of |t| as double, in its row-major order.
std::vector<double> read_all(const void* base, const TensorInfo& t) {
  std::vector<double> out(static_cast<size_t>(count(t)));
  int64_t idx[5] = {};
  for (int64_t linear = 0; linear < count(t); ++linear) {
    unflatten(t, linear, idx);
    out[static_cast<size_t>(linear)] = load(base, t.type, offset(t, idx));
  }
  return out;
}

void write_all(void* base, const TensorInfo& t, const std::vector<double>& values) {
  int64_t idx[5] = {};
  for (int64_t linear = 0; linear < count(t); ++linear) {
    unflatten(t, linear, idx);
    store(base, t.type, offset(t, idx), values[static_cast<size_t>(linear)]);
  }
}

void* pointer_at(const Job& job, cudnnBackendAttributeName_t name) {
  const auto it = job.pointers.find(static_cast<int>(name));
  return it == job.pointers.end() ? nullptr : it->second;
}

// cuDNN's resample: windows of window[s] positions o * stride - pre + t;
// positions outside x are padding (-inf with NEG_INF_PAD, else 0). Max
// skips a NaN unless NaN propagation was asked for; average divides by the
// window's size (INCLUDE_PADDING) or by its positions inside x.
void run_resample(const Job& job) {
  const OpInfo& op = job.op;
  const ResampleInfo& r = op.resample;
  const bool backward = op.kind == CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR;
  const TensorInfo &x = op.x, &y = op.y;
  void* xp = pointer_at(job, backward ? CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DXDESC
                                      : CUDNN_ATTR_OPERATION_RESAMPLE_FWD_XDESC);
  void* yp = pointer_at(job, backward ? CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DYDESC
                                      : CUDNN_ATTR_OPERATION_RESAMPLE_FWD_YDESC);
  const int spatial = static_cast<int>(r.spatial);
  int64_t taps = 1;
  for (int s = 0; s < spatial; ++s) taps *= r.window[s];
  const std::vector<double> in = backward ? read_all(yp, y) : read_all(xp, x);
  std::vector<double> out(static_cast<size_t>(backward ? count(x) : count(y)), 0.0);
  auto flat = [](const TensorInfo& t, const int64_t* idx) {
    int64_t f = 0;
    for (int i = 0; i < t.rank; ++i) f = f * t.dims[i] + idx[i];
    return f;
  };
  int64_t yi[5] = {}, xi[5] = {};
  for (int64_t linear = 0; linear < count(y); ++linear) {
    unflatten(y, linear, yi);
    xi[0] = yi[0];
    xi[1] = yi[1];
    double best = -INFINITY, sum = 0.0;
    bool nan = false;
    int64_t inside_count = 0;
    std::vector<int64_t> inside;  // flat x positions inside the window
    for (int64_t tap = 0; tap < taps; ++tap) {
      int64_t rest = tap;
      bool inside_x = true;
      for (int s = spatial; s-- > 0;) {
        const int64_t t = rest % r.window[s];
        rest /= r.window[s];
        xi[2 + s] = yi[2 + s] * r.stride[s] - r.pre[s] + t;
        if (xi[2 + s] < 0 || xi[2 + s] >= x.dims[2 + s]) inside_x = false;
      }
      if (!inside_x) {
        if (r.mode == CUDNN_RESAMPLE_MAXPOOL && r.padding != CUDNN_NEG_INF_PAD) {
          best = std::max(best, 0.0);  // zero padding takes part in the max
        }
        continue;
      }
      ++inside_count;
      const int64_t at = flat(x, xi);
      inside.push_back(at);
      if (backward) continue;
      const double v = in[static_cast<size_t>(at)];
      if (std::isnan(v)) {
        nan = nan || r.propagate_nan;
        continue;
      }
      best = std::max(best, v);
      sum += v;
    }
    const double divisor = r.mode == CUDNN_RESAMPLE_AVGPOOL_INCLUDE_PADDING
                               ? static_cast<double>(taps)
                               : static_cast<double>(std::max<int64_t>(inside_count, 1));
    if (backward) {
      for (const int64_t at : inside) {
        out[static_cast<size_t>(at)] += in[static_cast<size_t>(linear)] / divisor;
      }
    } else if (r.mode == CUDNN_RESAMPLE_MAXPOOL) {
      out[static_cast<size_t>(linear)] = nan ? NAN : best;
    } else {
      out[static_cast<size_t>(linear)] = sum / divisor;
    }
  }
  if (backward) {
    write_all(xp, x, out);
  } else {
    write_all(yp, y, out);
  }
}

// Per-channel f32 tensors [1, C, 1...]: element c.
double channel_load(const Job& job, const OpInfo& op, cudnnBackendAttributeName_t name, int64_t c) {
  const TensorInfo& t = op.tensors.at(static_cast<int>(name));
  return load(pointer_at(job, name), t.type, c * t.strides[1]);
}
void channel_store(const Job& job, const OpInfo& op, cudnnBackendAttributeName_t name, int64_t c,
                   double value) {
  const TensorInfo& t = op.tensors.at(static_cast<int>(name));
  store(pointer_at(job, name), t.type, c * t.strides[1], value);
}

// cuDNN's batch norm in training: per channel over N and space, the mean and
// the biased variance, inverse std 1/sqrt(var + epsilon), y = (x - mean) *
// inv_std * scale + bias; the running statistics updated with the factor and
// the unbiased variance. Backward with the saved mean and inverse std.
void run_norm(const Job& job) {
  const OpInfo& op = job.op;
  const bool backward = op.kind == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR;
  const TensorInfo& x = op.x;
  const std::vector<double> xv =
      read_all(pointer_at(job, backward ? CUDNN_ATTR_OPERATION_NORM_BWD_XDESC
                                        : CUDNN_ATTR_OPERATION_NORM_FWD_XDESC),
               x);
  const int64_t channels = x.dims[1];
  const double m = static_cast<double>(count(x) / channels);
  std::vector<int64_t> channel_of(xv.size());
  int64_t idx[5] = {};
  for (int64_t linear = 0; linear < count(x); ++linear) {
    unflatten(x, linear, idx);
    channel_of[static_cast<size_t>(linear)] = idx[1];
  }
  std::vector<double> mean(static_cast<size_t>(channels), 0.0), var(mean), inv(mean);
  if (!backward) {
    const auto it = job.values.find(CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC);
    const double epsilon = it->second;
    for (size_t i = 0; i < xv.size(); ++i) mean[static_cast<size_t>(channel_of[i])] += xv[i];
    for (double& v : mean) v /= m;
    for (size_t i = 0; i < xv.size(); ++i) {
      const double d = xv[i] - mean[static_cast<size_t>(channel_of[i])];
      var[static_cast<size_t>(channel_of[i])] += d * d;
    }
    for (int64_t c = 0; c < channels; ++c) {
      const auto k = static_cast<size_t>(c);
      var[k] /= m;
      inv[k] = 1.0 / std::sqrt(var[k] + epsilon);
    }
    std::vector<double> y(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const int64_t c = channel_of[i];
      const auto k = static_cast<size_t>(c);
      y[i] = (xv[i] - mean[k]) * inv[k] *
                 channel_load(job, op, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, c) +
             channel_load(job, op, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, c);
    }
    write_all(pointer_at(job, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC), op.y, y);
    const auto factor = job.values.find(CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC);
    for (int64_t c = 0; c < channels; ++c) {
      const auto k = static_cast<size_t>(c);
      channel_store(job, op, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, c, mean[k]);
      channel_store(job, op, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, c, inv[k]);
      if (factor == job.values.end()) continue;
      const double f = factor->second;
      // Both inputs read before either output is written (they may be one memory).
      const double rm =
          channel_load(job, op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, c);
      const double rv =
          channel_load(job, op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, c);
      channel_store(job, op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, c,
                    (1 - f) * rm + f * mean[k]);
      channel_store(job, op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, c,
                    (1 - f) * rv + f * var[k] * m / (m - 1));
    }
    return;
  }
  const std::vector<double> dy =
      read_all(pointer_at(job, CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC), op.y);
  std::vector<double> dscale(static_cast<size_t>(channels), 0.0), dbias(dscale), scale(dscale);
  for (int64_t c = 0; c < channels; ++c) {
    const auto k = static_cast<size_t>(c);
    mean[k] = channel_load(job, op, CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, c);
    inv[k] = channel_load(job, op, CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, c);
    scale[k] = channel_load(job, op, CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, c);
  }
  std::vector<double> xhat(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const auto k = static_cast<size_t>(channel_of[i]);
    xhat[i] = (xv[i] - mean[k]) * inv[k];
    dbias[k] += dy[i];
    dscale[k] += dy[i] * xhat[i];
  }
  std::vector<double> dx(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const auto k = static_cast<size_t>(channel_of[i]);
    dx[i] = scale[k] * inv[k] * (dy[i] - dbias[k] / m - xhat[i] * dscale[k] / m);
  }
  const TensorInfo& dx_t = op.tensors.at(CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC);
  write_all(pointer_at(job, CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC), dx_t, dx);
  for (int64_t c = 0; c < channels; ++c) {
    const auto k = static_cast<size_t>(c);
    channel_store(job, op, CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, c, dscale[k]);
    channel_store(job, op, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, c, dbias[k]);
  }
}

void run_job(void* data) {
  std::unique_ptr<Job> job(static_cast<Job*>(data));
  if (!is_convolution(job->op.kind)) {
    if (job->op.kind == CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR ||
        job->op.kind == CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR) {
      run_resample(*job);
    } else {
      run_norm(*job);
    }
    return;
  }
  const OpInfo& op = job->op;
  const TensorInfo &x = op.x, &w = op.w, &y = op.y;
  const int spatial = x.rank - 2;
  const bool round = job->engine == FAKE_CUDNN_ENGINE_TF32;
  auto read = [&](const void* base, const TensorInfo& t, const int64_t* idx) {
    const double v = load(base, t.type, offset(t, idx));
    return round ? tf32(v) : v;
  };
  const int64_t groups = x.dims[1] / w.dims[1];
  const int64_t k_per_group = w.dims[0] / groups;
  // The output's accumulators, in its row-major order.
  const TensorInfo& out = op.kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ? y
                          : op.kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
                              ? x
                              : w;
  void* out_ptr = &out == &y ? job->y : &out == &x ? job->x : job->w;
  std::vector<double> acc(static_cast<size_t>(count(out)), 0.0);
  auto flat = [](const TensorInfo& t, const int64_t* idx) {
    int64_t f = 0;
    for (int i = 0; i < t.rank; ++i) f = f * t.dims[i] + idx[i];
    return f;
  };
  int64_t taps = 1;
  for (int s = 0; s < spatial; ++s) taps *= w.dims[2 + s];
  const int64_t ys = count(y);
  int64_t yi[5], xi[5], wi[5];
  for (int64_t linear = 0; linear < ys; ++linear) {
    unflatten(y, linear, yi);
    const int64_t k = yi[1];
    const int64_t g = k / k_per_group;
    for (int64_t c = 0; c < w.dims[1]; ++c) {
      for (int64_t tap = 0; tap < taps; ++tap) {
        wi[0] = k;
        wi[1] = c;
        int64_t rest = tap;
        for (int s = spatial; s-- > 0;) {
          wi[2 + s] = rest % w.dims[2 + s];
          rest /= w.dims[2 + s];
        }
        xi[0] = yi[0];
        xi[1] = g * w.dims[1] + c;
        bool inside = true;
        for (int s = 0; s < spatial; ++s) {
          // Convolution mode flips the taps; cross-correlation does not.
          const int64_t t =
              op.conv.mode == CUDNN_CONVOLUTION ? w.dims[2 + s] - 1 - wi[2 + s] : wi[2 + s];
          const int64_t pos =
              yi[2 + s] * op.conv.stride[s] - op.conv.pre[s] + t * op.conv.dilation[s];
          if (pos < 0 || pos >= x.dims[2 + s]) inside = false;
          xi[2 + s] = pos;
        }
        if (!inside) continue;
        switch (op.kind) {
          case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
            acc[static_cast<size_t>(flat(y, yi))] += read(job->x, x, xi) * read(job->w, w, wi);
            break;
          case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
            acc[static_cast<size_t>(flat(x, xi))] += read(job->y, y, yi) * read(job->w, w, wi);
            break;
          default:
            acc[static_cast<size_t>(flat(w, wi))] += read(job->x, x, xi) * read(job->y, y, yi);
            break;
        }
      }
    }
  }
  int64_t oi[5];
  for (int64_t linear = 0; linear < count(out); ++linear) {
    unflatten(out, linear, oi);
    const int64_t at = offset(out, oi);
    double value = op.alpha * acc[static_cast<size_t>(linear)];
    if (op.beta != 0.0) value += op.beta * load(out_ptr, out.type, at);
    store(out_ptr, out.type, at, value);
  }
}

void record_tensor(const TensorInfo& t, fake_cudnn_tensor_t* out) {
  out->type = t.type;
  out->rank = t.rank;
  for (int i = 0; i < 5; ++i) {
    out->dims[i] = t.dims[i];
    out->strides[i] = t.strides[i];
  }
  out->uid = t.uid;
  out->alignment = t.alignment;
}

}  // namespace

extern "C" {

FAKE_EXPORT size_t cudnnGetVersion(void) {
  return CUDNN_VERSION;
}

FAKE_EXPORT const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (static_cast<int>(status)) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED:
      return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER:
      return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH:
      return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE:
      return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED";
    default:
      return "CUDNN_STATUS_UNKNOWN";
  }
}

FAKE_EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const int status = take(s.fail_create); status != 0)
    return static_cast<cudnnStatus_t>(status);
  if (s.launch_host_func == nullptr) s.launch_host_func = find_launch_host_func();
  if (s.launch_host_func == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;  // no driver
  *handle = new cudnnContext();
  ++s.stats.live_handles;
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  std::lock_guard lock(state().mutex);
  delete handle;
  --state().stats.live_handles;
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                       cudnnBackendDescriptor_t* out) {
  if (out == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  switch (type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
    case CUDNN_BACKEND_RESAMPLE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      break;
    default:
      return CUDNN_STATUS_NOT_SUPPORTED;  // not modelled here
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const int status = take(s.fail_create); status != 0)
    return static_cast<cudnnStatus_t>(status);
  auto* d = new Descriptor();
  d->type = type;
  s.live.insert(d);
  ++s.stats.live_descriptors;
  *out = reinterpret_cast<cudnnBackendDescriptor_t>(d);
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto* d = reinterpret_cast<Descriptor*>(desc);
  if (s.live.erase(d) == 0) return CUDNN_STATUS_BAD_PARAM;  // never made, or destroyed twice
  delete d;
  --s.stats.live_descriptors;
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc,
                                                   cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type, int64_t count,
                                                   const void* values) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto* d = reinterpret_cast<Descriptor*>(desc);
  if (s.live.count(d) == 0) return CUDNN_STATUS_BAD_PARAM;
  if (d->finalized) return CUDNN_STATUS_NOT_INITIALIZED;  // the docs: set before finalize only
  if (count < 0 || (count > 0 && values == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  Attribute a;
  a.type = type;
  a.count = count;
  const auto* bytes = static_cast<const unsigned char*>(values);
  a.bytes.assign(bytes, bytes + static_cast<size_t>(count) * attribute_size(type));
  d->attributes[static_cast<int>(name)] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto* d = reinterpret_cast<Descriptor*>(desc);
  if (s.live.count(d) == 0 || d->finalized) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      status = finalize_tensor(*d);
      break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
      status = finalize_conv(*d);
      break;
    case CUDNN_BACKEND_RESAMPLE_DESCRIPTOR:
      status = finalize_resample(*d);
      break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      status = finalize_graph(*d);
      break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      status = finalize_heuristic(*d);
      break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      status = finalize_plan(*d);
      break;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      status = finalize_variant_pack(*d);
      break;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      status = CUDNN_STATUS_NOT_SUPPORTED;  // made by the heuristic here, not by hand
      break;
    default:
      status = finalize_operation(*d);
      break;
  }
  if (status == CUDNN_STATUS_SUCCESS) d->finalized = true;
  return status;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc,
                                                   cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type,
                                                   int64_t requested, int64_t* count,
                                                   void* values) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto* d = reinterpret_cast<Descriptor*>(desc);
  if (s.live.count(d) == 0 || count == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!d->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
    const std::vector<int64_t> engines = engines_for(*d->op);
    *count = static_cast<int64_t>(engines.size());
    auto* configs = static_cast<cudnnBackendDescriptor_t*>(values);
    for (int64_t i = 0; i < requested && i < *count; ++i) {
      // The caller created them (ENGINECFG descriptors): filled and finalized here.
      auto* config = reinterpret_cast<Descriptor*>(configs[i]);
      if (s.live.count(config) == 0 || config->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) {
        return CUDNN_STATUS_BAD_PARAM;
      }
      config->op = d->op;
      config->engine = engines[static_cast<size_t>(i)];
      config->finalized = true;
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_ENGINE) {
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || requested < 1 || values == nullptr) {
      return CUDNN_STATUS_BAD_PARAM;
    }
    auto* engine = *static_cast<Descriptor**>(values);
    if (s.live.count(engine) == 0 || engine->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
      return CUDNN_STATUS_BAD_PARAM;
    }
    engine->op = d->op;
    engine->engine = d->engine;
    engine->finalized = true;
    *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  if (d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR && name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) {
    if (type != CUDNN_TYPE_NUMERICAL_NOTE) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
    const std::vector<cudnnBackendNumericalNote_t> notes = notes_of(d->engine, *d->op);
    *count = static_cast<int64_t>(notes.size());
    for (int64_t i = 0; i < requested && i < *count; ++i) {
      static_cast<cudnnBackendNumericalNote_t*>(values)[i] = notes[static_cast<size_t>(i)];
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR &&
      name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
    if (type != CUDNN_TYPE_INT64 || requested < 1 || values == nullptr) {
      return CUDNN_STATUS_BAD_PARAM;
    }
    *static_cast<int64_t*>(values) = d->workspace;
    *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  return CUDNN_STATUS_NOT_SUPPORTED;  // not modelled here
}

FAKE_EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle,
                                              cudnnBackendDescriptor_t plan_desc,
                                              cudnnBackendDescriptor_t pack_desc) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto* plan = reinterpret_cast<Descriptor*>(plan_desc);
  auto* pack = reinterpret_cast<Descriptor*>(pack_desc);
  if (handle == nullptr || s.live.count(plan) == 0 || s.live.count(pack) == 0 ||
      plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
      pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!plan->finalized || !pack->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  if (plan->handle != handle) return CUDNN_STATUS_BAD_PARAM;
  if (const int status = take(s.fail_execute); status != 0) {
    return static_cast<cudnnStatus_t>(status);
  }
  auto job = std::make_unique<Job>();
  job->op = *plan->op;
  job->engine = plan->engine;
  // Every tensor of the graph by its unique id, aligned as declared.
  const auto pointer_of = [&](const TensorInfo& t, void** out) {
    bool seen = false;
    for (size_t i = 0; i < pack->uids.size(); ++i) {
      if (pack->uids[i] != t.uid) continue;
      *out = pack->pointers[i];
      seen = true;
    }
    if (!seen || *out == nullptr) return CUDNN_STATUS_BAD_PARAM;
    if (!t.by_value &&
        reinterpret_cast<uintptr_t>(*out) % static_cast<uintptr_t>(t.alignment) != 0) {
      return CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
    }
    return CUDNN_STATUS_SUCCESS;
  };
  if (is_convolution(job->op.kind)) {
    std::array<void*, 3> found{};
    const std::array<const TensorInfo*, 3> tensors = {&job->op.x, &job->op.w, &job->op.y};
    for (size_t t = 0; t < 3; ++t) {
      if (const cudnnStatus_t status = pointer_of(*tensors[t], &found[t]);
          status != CUDNN_STATUS_SUCCESS) {
        return status;
      }
    }
    job->x = found[0];
    job->w = found[1];
    job->y = found[2];
  } else {
    for (const auto& [attribute, t] : job->op.tensors) {
      void* pointer = nullptr;
      if (const cudnnStatus_t status = pointer_of(t, &pointer); status != CUDNN_STATUS_SUCCESS) {
        return status;
      }
      // A by-value scalar is the host value now (cuDNN copies it at execute).
      if (t.by_value) {
        job->values[attribute] = *static_cast<const float*>(pointer);
      } else {
        job->pointers[attribute] = pointer;
      }
    }
  }
  // The engine scribbles over its whole workspace (a short one shows under ASan).
  if (plan->workspace > 0) {
    std::memset(pack->workspace_pointer, 0xa5, static_cast<size_t>(plan->workspace));
  }
  fake_cudnn_execution_t& last = s.last;
  last = {};
  last.operation = job->op.kind;
  last.mode = job->op.conv.mode;
  last.compute_type = job->op.conv.compute;
  last.spatial_dims = job->op.conv.spatial;
  for (int i = 0; i < 3; ++i) {
    last.stride[i] = job->op.conv.stride[i];
    last.dilation[i] = job->op.conv.dilation[i];
    last.pre_padding[i] = job->op.conv.pre[i];
    last.post_padding[i] = job->op.conv.post[i];
  }
  record_tensor(job->op.x, &last.x);
  record_tensor(job->op.w, &last.w);
  record_tensor(job->op.y, &last.y);
  const ResampleInfo& rs = job->op.resample;
  if (!is_convolution(job->op.kind)) {
    last.spatial_dims = rs.spatial;
    for (int i = 0; i < 3; ++i) {
      last.stride[i] = rs.stride[i];
      last.pre_padding[i] = rs.pre[i];
      last.post_padding[i] = rs.post[i];
      last.window[i] = rs.window[i];
    }
  }
  last.resample_mode = rs.mode;
  last.padding_mode = rs.padding;
  last.nan_propagation = rs.propagate_nan ? 1 : 0;
  last.norm_mode = job->op.norm_mode;
  last.norm_phase = job->op.norm_phase;
  last.running_stats =
      job->values.count(CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC) != 0 ? 1 : 0;
  last.tensor_count = static_cast<int64_t>(job->op.tensors.size());
  const auto value = [&](cudnnBackendAttributeName_t name) {
    const auto it = job->values.find(static_cast<int>(name));
    return it == job->values.end() ? 0.0 : it->second;
  };
  last.epsilon = value(CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC);
  last.factor = value(CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC);
  last.engine = plan->engine;
  last.workspace_bytes = plan->workspace;
  last.workspace = pack->workspace_pointer;
  s.has_last = true;
  ++s.stats.executions;
  if (s.launch_host_func == nullptr ||
      s.launch_host_func(reinterpret_cast<CUstream>(handle->stream), run_job, job.get()) !=
          CUDA_SUCCESS) {
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  job.release();  // run_job owns it now
  return CUDNN_STATUS_SUCCESS;
}

// ---- the test queries -------------------------------------------------------

FAKE_EXPORT void fake_cudnn_stats(fake_cudnn_stats_t* out) {
  std::lock_guard lock(state().mutex);
  *out = state().stats;
}

FAKE_EXPORT int fake_cudnn_last_execution(fake_cudnn_execution_t* out) {
  std::lock_guard lock(state().mutex);
  if (!state().has_last) return 0;
  *out = state().last;
  return 1;
}

FAKE_EXPORT void fake_cudnn_fail_next(const char* what, int status, int times) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const std::string name(what);
  const Failure failure{status, times};
  if (name == "create") s.fail_create = failure;
  if (name == "finalize_plan") s.fail_finalize_plan = failure;
  if (name == "execute") s.fail_execute = failure;
}

}  // extern "C"
