#include "cudnn_graph.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../device.hpp"
#include "../stream.hpp"

namespace hal::cuda::ops {
namespace {

constexpr int64_t kMaxEngineConfigs = 16;  // engine configurations read from the heuristic

}  // namespace

Descriptor Builder::create(cudnnBackendDescriptorType_t type, const char* what) {
  cudnnBackendDescriptor_t desc = nullptr;
  if (failed()) return {};
  check(api_.cudnnBackendCreateDescriptor(type, &desc), what);
  return failed() ? Descriptor() : Descriptor(&api_, desc);
}

void Builder::set(const Descriptor& desc, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t count, const void* values,
                  const char* what) {
  if (failed() || desc.get() == nullptr) return;
  check(api_.cudnnBackendSetAttribute(desc.get(), name, type, count, values), what);
}

void Builder::set_desc(const Descriptor& desc, cudnnBackendAttributeName_t name,
                       const Descriptor& value, const char* what) {
  cudnnBackendDescriptor_t handle = value.get();
  set(desc, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &handle, what);
}

void Builder::finalize(const Descriptor& desc, const char* what) {
  if (failed() || desc.get() == nullptr) return;
  check(api_.cudnnBackendFinalize(desc.get()), what);
}

void Builder::get(const Descriptor& desc, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* values,
                  const char* what) {
  if (failed() || desc.get() == nullptr) return;
  check(api_.cudnnBackendGetAttribute(desc.get(), name, type, requested, count, values), what);
}

Descriptor Builder::tensor(const DnnTensor& t, int64_t alignment) {
  Descriptor d = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "cudnnBackendCreateDescriptor(TENSOR)");
  const int64_t align = std::max(alignment, t.element_bytes);
  set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.type,
      "cudnnBackendSetAttribute(TENSOR_DATA_TYPE)");
  set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t.rank, t.dims.data(),
      "cudnnBackendSetAttribute(TENSOR_DIMENSIONS)");
  set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t.rank, t.strides.data(),
      "cudnnBackendSetAttribute(TENSOR_STRIDES)");
  set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid,
      "cudnnBackendSetAttribute(TENSOR_UNIQUE_ID)");
  set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align,
      "cudnnBackendSetAttribute(TENSOR_BYTE_ALIGNMENT)");
  if (t.by_value) {
    const bool yes = true;
    set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes,
        "cudnnBackendSetAttribute(TENSOR_IS_BY_VALUE)");
  }
  finalize(d, "cudnnBackendFinalize(TENSOR)");
  return d;
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
  // [N, C, 1, W] (and [N, C, 1, 1]): an extent-1 dimension strides past the
  // one inside it, as if outer to it.
  while (dims.size() < 4) {
    const size_t inner = dims.size() > 2 ? 2 : 1;
    const int64_t outer_stride = strides[inner] * std::max<int64_t>(dims[inner], 1);
    dims.insert(dims.begin() + 2, 1);
    strides.insert(strides.begin() + 2, outer_stride);
  }
  out.rank = static_cast<int>(dims.size());
  for (int i = 0; i < out.rank; ++i) {
    out.dims[i] = dims[i];
    out.strides[i] = strides[i];
  }
  return out;
}

DnnTensor dnn_channel_tensor(const hal_tensor_desc_t& t, int rank, int64_t uid) {
  DnnTensor out;
  out.uid = uid;
  dnn_type(t.dtype, &out.type, &out.element_bytes);
  out.rank = rank;
  const int64_t channels = t.shape[0];
  const int64_t stride = std::max<int64_t>(t.strides[0], 1);
  for (int i = 0; i < rank; ++i) {
    out.dims[i] = i == 1 ? channels : 1;
    out.strides[i] = i == 1 ? stride : stride * std::max<int64_t>(channels, 1);
  }
  return out;
}

DnnTensor dnn_scalar(int64_t uid) {
  DnnTensor out;
  out.uid = uid;
  out.rank = 4;
  out.by_value = true;
  for (int i = 0; i < 4; ++i) out.dims[i] = out.strides[i] = 1;
  return out;
}

Executable plan_graph(Builder& b, cudnnHandle_t handle, Descriptor operation,
                      std::vector<Descriptor> parts, bool f32, bool deterministic, std::string& why,
                      cudnnStatus_t& status) {
  Executable out;
  Descriptor graph = b.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                              "cudnnBackendCreateDescriptor(OPERATIONGRAPH)");
  b.set_desc(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, operation,
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
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_INSTANT;
  b.set_desc(heuristic, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph,
             "cudnnBackendSetAttribute(ENGINEHEUR_OPERATION_GRAPH)");
  b.set(heuristic, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode,
        "cudnnBackendSetAttribute(ENGINEHEUR_MODE)");
  b.finalize(heuristic, "cudnnBackendFinalize(ENGINEHEUR)");
  // The results are engine configurations the caller created (cuDNN docs,
  // CUDNN_ATTR_ENGINEHEUR_RESULTS: an array of CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> config_handles;
  for (int64_t i = 0; i < kMaxEngineConfigs && !b.failed(); ++i) {
    configs.push_back(
        b.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "cudnnBackendCreateDescriptor(ENGINECFG)"));
    config_handles.push_back(configs.back().get());
  }
  int64_t config_count = 0;
  b.get(heuristic, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxEngineConfigs,
        &config_count, config_handles.data(), "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)");
  if (b.failed()) {
    why = b.failure_text();
    status = b.status();
    return out;
  }
  std::string skipped;  // why configurations were passed over
  for (int64_t i = 0; i < config_count && i < kMaxEngineConfigs; ++i) {
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
    if (b.failed()) break;
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
    b.set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i],
               "cudnnBackendSetAttribute(EXECUTION_PLAN_ENGINE_CONFIG)");
    b.finalize(plan, "cudnnBackendFinalize(EXECUTION_PLAN)");
    int64_t workspace = 0, workspace_count = 0;
    b.get(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &workspace_count,
          &workspace, "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)");
    if (b.failed() || workspace < 0) {
      // This engine cannot run the graph here: the next one may.
      if (!b.failed()) b.check(CUDNN_STATUS_INTERNAL_ERROR, "a negative workspace size");
      why = b.failure_text();
      status = b.status();
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
    for (Descriptor& part : parts) out.keep.push_back(std::move(part));
    return out;
  }
  if (b.failed()) {
    why = b.failure_text();
    status = b.status();
  } else if (why.empty()) {
    why = "the heuristic offered " + std::to_string(config_count) +
          " engine configurations and none is allowed" + skipped;
    status = CUDNN_STATUS_NOT_SUPPORTED;
  } else {
    why += skipped;
  }
  return out;
}

namespace {

hal_result_t fail_execution(Device& device, const GraphState& state, cudnnStatus_t status,
                            const char* call) {
  return device.report().fail(result_of(status), static_cast<int64_t>(status),
                              "op_execute: %s failed: %s", call,
                              state.dnn->status_text(status).c_str());
}

}  // namespace

hal_result_t execute_graph(Device& device, Stream& stream, const GraphState& state,
                           const std::vector<PackEntry>& entries, void* workspace_pointer,
                           size_t workspace_bytes) {
  const plugin::ErrorReporter& report = device.report();
  bool aligned = true;
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (const PackEntry& entry : entries) {
    uids.push_back(entry.uid);
    pointers.push_back(entry.pointer);
    if (!entry.by_value) {
      aligned = aligned && reinterpret_cast<uintptr_t>(entry.pointer) % kCudnnFastAlignment == 0;
    }
  }
  const Executable& chosen = aligned && state.fast.ok() ? state.fast : state.any;
  if (!chosen.ok()) {
    return report.fail(HAL_ERROR_UNSUPPORTED, 0,
                       "op_execute: cuDNN offered no engine for operands that are not "
                       "%lld-byte aligned, and these are not",
                       static_cast<long long>(kCudnnFastAlignment));
  }
  if (chosen.workspace > 0 &&
      (workspace_pointer == nullptr || workspace_bytes < static_cast<size_t>(chosen.workspace))) {
    return report.fail(HAL_ERROR_INVALID_ARGUMENT, 0,
                       "op_execute: cuDNN's plan needs a workspace of %lld bytes, given %zu",
                       static_cast<long long>(chosen.workspace),
                       workspace_pointer != nullptr ? workspace_bytes : size_t{0});
  }
  const ContextScope bound = device.bind();
  if (!bound.ok()) return device.fail(bound.result(), "op_execute: cuCtxSetCurrent");
  const CudnnApi& api = state.dnn->api();
  cudnnBackendDescriptor_t pack = nullptr;
  if (const cudnnStatus_t status =
          api.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
      status != CUDNN_STATUS_SUCCESS) {
    return fail_execution(device, state, status, "cudnnBackendCreateDescriptor(VARIANT_PACK)");
  }
  const Descriptor owned(&api, pack);
  void* workspace = chosen.workspace > 0 ? workspace_pointer : nullptr;
  struct Set {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t count;
    const void* values;
    const char* what;
  };
  const auto count = static_cast<int64_t>(entries.size());
  const Set sets[] = {
      {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids.data(),
       "cudnnBackendSetAttribute(VARIANT_PACK_UNIQUE_IDS)"},
      {CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, pointers.data(),
       "cudnnBackendSetAttribute(VARIANT_PACK_DATA_POINTERS)"},
      {CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace,
       "cudnnBackendSetAttribute(VARIANT_PACK_WORKSPACE)"},
  };
  for (const Set& set : sets) {
    if (const cudnnStatus_t status =
            api.cudnnBackendSetAttribute(pack, set.name, set.type, set.count, set.values);
        status != CUDNN_STATUS_SUCCESS) {
      return fail_execution(device, state, status, set.what);
    }
  }
  if (const cudnnStatus_t status = api.cudnnBackendFinalize(pack); status != CUDNN_STATUS_SUCCESS) {
    return fail_execution(device, state, status, "cudnnBackendFinalize(VARIANT_PACK)");
  }
  // One handle per device, one stream per handle: set and run under its lock.
  const std::unique_lock lock = device.dnn().lock();
  if (const cudnnStatus_t status =
          api.cudnnSetStream(state.handle, reinterpret_cast<cudaStream_t>(stream.get()));
      status != CUDNN_STATUS_SUCCESS) {
    return fail_execution(device, state, status, "cudnnSetStream");
  }
  const cudnnStatus_t status = api.cudnnBackendExecute(state.handle, chosen.plan.get(), pack);
  return status == CUDNN_STATUS_SUCCESS
             ? HAL_SUCCESS
             : fail_execution(device, state, status, "cudnnBackendExecute");
}

void destroy_graph(Device& device, std::unique_ptr<GraphState>& state) {
  const ContextScope bound = device.bind();
  const std::unique_lock lock = device.dnn().lock();
  state.reset();
}

}  // namespace hal::cuda::ops
