// A stand-in for libcublasLt.so.13 (and, for the benchmark's cublasGemmEx,
// libcublas.so.13), for testing the cuda plugin's matmul without a GPU: the
// handful of entry points the plugin calls. Its "device"
// memory is the stand-in driver's, which is host memory, so cublasLtMatmul
// really computes: it checks the descriptors as cuBLASLt would (shapes
// consistent with the transposes, leading dimensions, types, batch counts,
// the algorithm's alignment and workspace), records them for the test, and
// enqueues the GEMM on the stream through the stand-in driver's
// cuLaunchHostFunc, so it runs in stream order. The arithmetic is
// column-major as cuBLASLt's: D = epilogue(alpha * op(A) op(B) + beta * C),
// accumulated in f32, with the bias over D's rows.
#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "fake_cublaslt.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

struct cublasLtContext {
  int unused = 0;
};
struct cublasContext {  // cuBLAS's handle (cublasHandle_t)
  cudaStream_t stream = nullptr;
};

namespace {

struct Desc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int32_t bias_type = -1;
  const void* bias = nullptr;
  void* aux = nullptr;  // GELU's input with GELU_AUX, in D's type
  int64_t aux_ld = 0;
  int64_t aux_batch_stride = 0;
};

struct Preference {
  uint64_t max_workspace = 0;
  uint32_t alignment[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's defaults
};

// A status the next |times| calls of one entry return instead of working.
struct Failure {
  int status = 0;
  int times = 0;
};

struct State {
  std::mutex mutex;
  fake_cublaslt_stats_t stats{};
  fake_cublaslt_matmul_t last{};
  bool has_last = false;
  Failure fail_create, fail_heuristic, fail_matmul;
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

Desc* to_desc(cublasLtMatmulDesc_t desc) {
  return reinterpret_cast<Desc*>(desc);
}
fake_cublaslt_layout_t* to_layout(cublasLtMatrixLayout_t layout) {
  return reinterpret_cast<fake_cublaslt_layout_t*>(layout);
}
Preference* to_preference(cublasLtMatmulPreference_t preference) {
  return reinterpret_cast<Preference*>(preference);
}

size_t type_size(int32_t type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    default:
      return 0;
  }
}

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

float load(const void* base, int32_t type, int64_t index) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[index];
    case CUDA_R_16F:
      return half_to_float(static_cast<const uint16_t*>(base)[index]);
    default:
      return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
  }
}

void store(void* base, int32_t type, int64_t index, float value) {
  switch (type) {
    case CUDA_R_32F:
      static_cast<float*>(base)[index] = value;
      break;
    case CUDA_R_16F:
      static_cast<uint16_t*>(base)[index] = float_to_half(value);
      break;
    default:
      static_cast<uint16_t*>(base)[index] = float_to_bf16(value);
      break;
  }
}

bool known_epilogue(uint32_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return true;
    default:
      return false;
  }
}

bool with_bias(uint32_t epilogue) {
  return (epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
}

bool with_aux(uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

// What cuBLASLt checks of a problem before choosing or running an
// algorithm: the compute and scale types this stand-in serves, the types,
// shapes, leading dimensions and batch counts.
cublasStatus_t validate(const Desc& desc, const fake_cublaslt_layout_t& a,
                        const fake_cublaslt_layout_t& b, const fake_cublaslt_layout_t& c,
                        const fake_cublaslt_layout_t& d) {
  if (desc.compute != CUBLAS_COMPUTE_32F || desc.scale != CUDA_R_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (a.type != b.type || c.type != d.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.type != a.type && d.type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!known_epilogue(desc.epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (with_bias(desc.epilogue) && desc.bias_type != -1 && type_size(desc.bias_type) == 0) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const uint64_t m = desc.transa == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t k = desc.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = desc.transb == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t n = desc.transb == CUBLAS_OP_N ? b.cols : b.rows;
  if (k != kb || c.rows != m || c.cols != n || d.rows != m || d.cols != n) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // GELU_AUX: a leading dimension and batch stride divisible by 8, the
  // leading dimension at least D's rows (cublasLt.h, EPILOGUE_AUX_LD).
  if (with_aux(desc.epilogue) &&
      (desc.aux_ld % 8 != 0 || desc.aux_ld < static_cast<int64_t>(d.rows) ||
       (d.batch_count > 1 && desc.aux_batch_stride % 8 != 0))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  for (const fake_cublaslt_layout_t* layout : {&a, &b, &c, &d}) {
    if (layout->ld < static_cast<int64_t>(layout->rows) || layout->ld < 1) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (layout->batch_count != d.batch_count || layout->batch_stride < 0) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// One GEMM to run on the stream, with everything it needs copied at the call.
struct Job {
  Desc desc;
  fake_cublaslt_layout_t a, b, c, d;
  const void *a_ptr, *b_ptr, *c_ptr, *bias;
  void* d_ptr;
  float alpha, beta;
};

float gelu_tanh(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

void run_job(void* data) {
  Job* job = static_cast<Job*>(data);
  const Desc& desc = job->desc;
  const uint64_t m = job->d.rows, n = job->d.cols;
  const uint64_t k = desc.transa == CUBLAS_OP_N ? job->a.cols : job->a.rows;
  const int32_t bias_type = desc.bias_type == -1 ? job->d.type : desc.bias_type;
  for (int32_t z = 0; z < job->d.batch_count; ++z) {
    const int64_t a0 = z * job->a.batch_stride, b0 = z * job->b.batch_stride;
    const int64_t c0 = z * job->c.batch_stride, d0 = z * job->d.batch_stride;
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        float sum = 0.0f;
        for (uint64_t p = 0; p < k; ++p) {
          // op(A)(i, p) and op(B)(p, j) of column-major A and B.
          const int64_t ai = desc.transa == CUBLAS_OP_N ? static_cast<int64_t>(i + p * job->a.ld)
                                                        : static_cast<int64_t>(p + i * job->a.ld);
          const int64_t bi = desc.transb == CUBLAS_OP_N ? static_cast<int64_t>(p + j * job->b.ld)
                                                        : static_cast<int64_t>(j + p * job->b.ld);
          sum += load(job->a_ptr, job->a.type, a0 + ai) * load(job->b_ptr, job->b.type, b0 + bi);
        }
        float value = job->alpha * sum;
        if (job->beta != 0.0f) {
          value += job->beta * load(job->c_ptr, job->c.type, c0 + i + j * job->c.ld);
        }
        if (with_bias(desc.epilogue)) value += load(job->bias, bias_type, static_cast<int64_t>(i));
        if (with_aux(desc.epilogue)) {
          store(desc.aux, job->d.type,
                z * desc.aux_batch_stride + static_cast<int64_t>(i + j * desc.aux_ld), value);
        }
        if ((desc.epilogue & CUBLASLT_EPILOGUE_RELU) != 0) value = value > 0.0f ? value : 0.0f;
        if ((desc.epilogue & CUBLASLT_EPILOGUE_GELU) != 0) value = gelu_tanh(value);
        store(job->d_ptr, job->d.type, d0 + static_cast<int64_t>(i + j * job->d.ld), value);
      }
    }
  }
  delete job;
}

// The stand-in driver the plugin opened (its fake_cuStreamWork, cuLaunchHostFunc's shape on the
// stream's own thread, orders the GEMM on the stream). Null when no such driver is loaded.
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
    return nullptr;  // the handle stays open: the driver is never unloaded
  }
  return reinterpret_cast<decltype(&::cuLaunchHostFunc)>(function);
}

// Reads an attribute given with exactly its type's size.
template <class T>
cublasStatus_t read_attribute(const void* buffer, size_t size, T* out) {
  if (buffer == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(out, buffer, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

FAKE_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const int status = take(s.fail_create); status != 0) {
    return static_cast<cublasStatus_t>(status);
  }
  if (s.launch_host_func == nullptr) s.launch_host_func = find_launch_host_func();
  if (s.launch_host_func == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;  // no driver
  *handle = new cublasLtContext();
  ++s.stats.live_handles;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  std::lock_guard lock(state().mutex);
  --state().stats.live_handles;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT size_t cublasLtGetVersion(void) {
  return 130000;
}

FAKE_EXPORT const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    default:
      return "<unrecognized cuBLAS status>";  // as cuBLAS answers unknown codes
  }
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* out,
                                                    cublasComputeType_t compute,
                                                    cudaDataType_t scale) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Desc* desc = new Desc();
  desc->compute = compute;
  desc->scale = scale;
  *out = reinterpret_cast<cublasLtMatmulDesc_t>(desc);
  std::lock_guard lock(state().mutex);
  ++state().stats.live_descs;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete to_desc(desc);
  std::lock_guard lock(state().mutex);
  --state().stats.live_descs;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t handle,
                                                          cublasLtMatmulDescAttributes_t attribute,
                                                          const void* buffer, size_t size) {
  Desc* desc = to_desc(handle);
  if (desc == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return read_attribute(buffer, size, &desc->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return read_attribute(buffer, size, &desc->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return read_attribute(buffer, size, &desc->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read_attribute(buffer, size, &desc->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return read_attribute(buffer, size, &desc->bias_type);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return read_attribute(buffer, size, &desc->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return read_attribute(buffer, size, &desc->aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return read_attribute(buffer, size, &desc->aux_batch_stride);
    default:
      return CUBLAS_STATUS_INVALID_VALUE;  // not one the plugin should set
  }
}

FAKE_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* out,
                                                      cudaDataType type, uint64_t rows,
                                                      uint64_t cols, int64_t ld) {
  if (out == nullptr || type_size(type) == 0) return CUBLAS_STATUS_INVALID_VALUE;
  auto* layout = new fake_cublaslt_layout_t{type, rows, cols, ld, 1, 0};
  *out = reinterpret_cast<cublasLtMatrixLayout_t>(layout);
  std::lock_guard lock(state().mutex);
  ++state().stats.live_layouts;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete to_layout(layout);
  std::lock_guard lock(state().mutex);
  --state().stats.live_layouts;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(
    cublasLtMatrixLayout_t handle, cublasLtMatrixLayoutAttribute_t attribute, const void* buffer,
    size_t size) {
  fake_cublaslt_layout_t* layout = to_layout(handle);
  if (layout == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return read_attribute(buffer, size, &layout->batch_count);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return read_attribute(buffer, size, &layout->batch_stride);
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *out = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference());
  std::lock_guard lock(state().mutex);
  ++state().stats.live_preferences;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete to_preference(preference);
  std::lock_guard lock(state().mutex);
  --state().stats.live_preferences;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t handle, cublasLtMatmulPreferenceAttributes_t attribute,
    const void* buffer, size_t size) {
  Preference* preference = to_preference(handle);
  if (preference == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read_attribute(buffer, size, &preference->max_workspace);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return read_attribute(buffer, size, &preference->alignment[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return read_attribute(buffer, size, &preference->alignment[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return read_attribute(buffer, size, &preference->alignment[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return read_attribute(buffer, size, &preference->alignment[3]);
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// Offers one algorithm: id 2 when every operand is promised 16-byte
// alignment (a vectorised kernel), else id 1, which takes any element-
// aligned pointer. Either needs FAKE_CUBLASLT_WORKSPACE_BYTES of workspace
// when the cap allows it.
FAKE_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* found) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested <= 0 || results == nullptr || found == nullptr || desc == nullptr ||
      preference == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  State& s = state();
  {
    std::lock_guard lock(s.mutex);
    ++s.stats.heuristic_calls;
    if (const int status = take(s.fail_heuristic); status != 0) {
      return static_cast<cublasStatus_t>(status);
    }
  }
  *found = 0;
  if (const cublasStatus_t status =
          validate(*to_desc(desc), *to_layout(a), *to_layout(b), *to_layout(c), *to_layout(d));
      status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  const Preference& pref = *to_preference(preference);
  bool aligned = true;
  for (uint32_t alignment : pref.alignment) aligned = aligned && alignment >= 16;
  cublasLtMatmulHeuristicResult_t result{};
  result.algo.data[0] = aligned ? 2 : 1;
  result.workspaceSize =
      pref.max_workspace >= FAKE_CUBLASLT_WORKSPACE_BYTES ? FAKE_CUBLASLT_WORKSPACE_BYTES : 0;
  result.algo.data[1] = result.workspaceSize;
  result.state = CUBLAS_STATUS_SUCCESS;
  result.wavesCount = 1.0f;
  results[0] = result;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                          const void* alpha, const void* a,
                                          cublasLtMatrixLayout_t a_layout, const void* b,
                                          cublasLtMatrixLayout_t b_layout, const void* beta,
                                          const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                                          cublasLtMatrixLayout_t d_layout,
                                          const cublasLtMatmulAlgo_t* algo, void* workspace,
                                          size_t workspace_bytes, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  State& s = state();
  if (desc == nullptr || alpha == nullptr || beta == nullptr || a_layout == nullptr ||
      b_layout == nullptr || c_layout == nullptr || d_layout == nullptr || algo == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  auto job = std::make_unique<Job>();
  job->desc = *to_desc(desc);
  job->a = *to_layout(a_layout);
  job->b = *to_layout(b_layout);
  job->c = *to_layout(c_layout);
  job->d = *to_layout(d_layout);
  job->a_ptr = a, job->b_ptr = b, job->c_ptr = c, job->d_ptr = d;
  job->bias = job->desc.bias;
  std::memcpy(&job->alpha, alpha, sizeof(float));
  std::memcpy(&job->beta, beta, sizeof(float));
  std::lock_guard lock(s.mutex);
  ++s.stats.matmul_calls;
  fake_cublaslt_matmul_t& last = s.last;
  last.compute_type = job->desc.compute;
  last.scale_type = job->desc.scale;
  last.transa = job->desc.transa;
  last.transb = job->desc.transb;
  last.epilogue = job->desc.epilogue;
  last.bias_type = job->desc.bias_type;
  last.bias = job->bias;
  last.aux = job->desc.aux;
  last.aux_ld = job->desc.aux_ld;
  last.aux_batch_stride = job->desc.aux_batch_stride;
  last.a = job->a, last.b = job->b, last.c = job->c, last.d = job->d;
  last.a_ptr = a, last.b_ptr = b, last.c_ptr = c, last.d_ptr = d;
  last.alpha = job->alpha, last.beta = job->beta;
  last.algo_id = algo->data[0];
  last.workspace_bytes = workspace_bytes;
  last.workspace = workspace;
  s.has_last = true;
  if (const int status = take(s.fail_matmul); status != 0) {
    return static_cast<cublasStatus_t>(status);
  }
  if (const cublasStatus_t status = validate(job->desc, job->a, job->b, job->c, job->d);
      status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  if (algo->data[0] != 1 && algo->data[0] != 2) return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace_bytes < algo->data[1] || (algo->data[1] != 0 && workspace == nullptr)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (with_bias(job->desc.epilogue) && job->bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (with_aux(job->desc.epilogue) && job->desc.aux == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (job->beta != 0.0f && c == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (a == nullptr || b == nullptr || d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  // The vectorised algorithm on a pointer it was not chosen for: on a GPU a
  // misaligned access; here a refusal the test sees.
  if (algo->data[0] == 2) {
    for (const void* pointer : {a, b, c, static_cast<const void*>(d), job->bias,
                                static_cast<const void*>(job->desc.aux)}) {
      if (pointer != nullptr && reinterpret_cast<uintptr_t>(pointer) % 16 != 0) {
        return CUBLAS_STATUS_EXECUTION_FAILED;
      }
    }
  }
  if (s.launch_host_func == nullptr ||
      s.launch_host_func(stream, run_job, job.get()) != CUDA_SUCCESS) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  job.release();  // run_job owns it now
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLAS's cublasGemmEx (libcublas.so.13), for bench/cuda_gemm_peer ----------
// The same library stands in for libcublas too (HAL_CUDA_CUBLAS_PATH names
// it in scripts/gpu_check.sh's dry run): a handle, its stream, and
// cublasGemmEx as cuBLAS documents it (column-major, lda >= rows of op(A)'s
// storage, CUBLAS_COMPUTE_32F with f32 scalars), computed by the same GEMM
// on the stream.

FAKE_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.launch_host_func == nullptr) s.launch_host_func = find_launch_host_func();
  if (s.launch_host_func == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                        cublasOperation_t transb, int m, int n, int k,
                                        const void* alpha, const void* a, cudaDataType a_type,
                                        int lda, const void* b, cudaDataType b_type, int ldb,
                                        const void* beta, void* c, cudaDataType c_type, int ldc,
                                        cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  auto job = std::make_unique<Job>();
  job->desc.compute = compute;
  job->desc.transa = transa;
  job->desc.transb = transb;
  const auto rows_of = [](cublasOperation_t op, int rows, int cols) {
    return static_cast<uint64_t>(op == CUBLAS_OP_N ? rows : cols);
  };
  job->a = {a_type, rows_of(transa, m, k), rows_of(transa, k, m), lda, 1, 0};
  job->b = {b_type, rows_of(transb, k, n), rows_of(transb, n, k), ldb, 1, 0};
  job->c = {c_type, static_cast<uint64_t>(m), static_cast<uint64_t>(n), ldc, 1, 0};
  job->d = job->c;
  job->a_ptr = a, job->b_ptr = b, job->c_ptr = c, job->d_ptr = c;
  job->bias = nullptr;
  std::memcpy(&job->alpha, alpha, sizeof(float));
  std::memcpy(&job->beta, beta, sizeof(float));
  if (const cublasStatus_t status = validate(job->desc, job->a, job->b, job->c, job->d);
      status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  if (a == nullptr || b == nullptr || c == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.launch_host_func == nullptr ||
      s.launch_host_func(handle->stream, run_job, job.get()) != CUDA_SUCCESS) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  job.release();
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the test queries -------------------------------------------------------

FAKE_EXPORT void fake_cublaslt_stats(fake_cublaslt_stats_t* out) {
  std::lock_guard lock(state().mutex);
  *out = state().stats;
}

FAKE_EXPORT int fake_cublaslt_last_matmul(fake_cublaslt_matmul_t* out) {
  std::lock_guard lock(state().mutex);
  if (!state().has_last) return 0;
  *out = state().last;
  return 1;
}

FAKE_EXPORT void fake_cublaslt_fail_next(const char* what, int status, int times) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const std::string name(what);
  Failure failure{status, times};
  if (name == "create") s.fail_create = failure;
  if (name == "heuristic") s.fail_heuristic = failure;
  if (name == "matmul") s.fail_matmul = failure;
}

}  // extern "C"
