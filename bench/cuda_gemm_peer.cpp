// HAL's matmul on the cuda plugin beside cuBLASLt and cuBLAS called
// directly, on the same GPU, in the same process, interleaved in every
// repetition (the order of the three sides rotates):
//
//   hal        hal_op_plan_create(HAL_OP_MATMUL) + hal_op_execute
//   cublasLt   cublasLtMatmul with the heuristic's first algorithm
//   GemmEx     cublasGemmEx (CUBLAS_GEMM_DEFAULT)
//
// d[M,N] = a[M,K] b[K,N], row-major, square sizes (4096 and 8192 by default),
// bf16 and f32 operands with f32 accumulation (CUBLAS_COMPUTE_32F, as the
// plugin plans them: TF32 would round f32 inputs). TFLOP/s, median [min-max].
// Each side writes its own d; after the runs the three are compared (a
// sample of elements), so a wrong transposition on the raw side shows.
//
// The raw sides open the libraries the plugin was pinned to
// (HAL_CUDA_DRIVER_PATH, HAL_CUDA_CUBLASLT_PATH, HAL_CUDA_CUBLAS_PATH: set by
// scripts/gpu_check.sh), else libcuda.so.1, libcublasLt.so.13,
// libcublas.so.13; a side whose library is absent is reported, not fatal.
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

const char* env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? value : fallback;
}

template <class Fn>
bool resolve(void* library, const char* name, Fn& out, std::string& why) {
  out = reinterpret_cast<Fn>(dlsym(library, name));
  if (out == nullptr && why.empty()) why = std::string("no ") + name;
  return out != nullptr;
}

// The driver side: device 0's primary context made current on this thread,
// a stream and the workspace.
struct RawDriver {
  decltype(&::cuStreamSynchronize) stream_sync = nullptr;
  decltype(&::cuMemFree) mem_free = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr workspace = 0;

  bool open(std::string& why) {
    const char* path = env_or("HAL_CUDA_DRIVER_PATH", "libcuda.so.1");
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      why = std::string(path) + ": " + dlerror();
      return false;
    }
    auto get_proc =
        reinterpret_cast<decltype(&::cuGetProcAddress)>(dlsym(library, "cuGetProcAddress_v2"));
    if (get_proc == nullptr) {
      why = "no cuGetProcAddress_v2";
      return false;
    }
    int version = 0;
    auto get_version =
        reinterpret_cast<decltype(&::cuDriverGetVersion)>(dlsym(library, "cuDriverGetVersion"));
    if (get_version == nullptr || get_version(&version) != CUDA_SUCCESS) version = CUDA_VERSION;
    version = std::min(version, CUDA_VERSION);
    bool ok = true;
    auto entry = [&](const char* name, auto& slot) {
      void* pointer = nullptr;
      CUdriverProcAddressQueryResult status{};
      if (get_proc(name, &pointer, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
          pointer == nullptr) {
        if (ok) why = std::string("cannot resolve ") + name;
        ok = false;
      }
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(pointer);
    };
    decltype(&::cuInit) init = nullptr;
    decltype(&::cuDeviceGet) device_get = nullptr;
    decltype(&::cuDevicePrimaryCtxRetain) retain = nullptr;
    decltype(&::cuCtxSetCurrent) set_current = nullptr;
    decltype(&::cuStreamCreate) stream_create = nullptr;
    decltype(&::cuMemAlloc) mem_alloc = nullptr;
    entry("cuInit", init);
    entry("cuDeviceGet", device_get);
    entry("cuDevicePrimaryCtxRetain", retain);
    entry("cuCtxSetCurrent", set_current);
    entry("cuStreamCreate", stream_create);
    entry("cuStreamSynchronize", stream_sync);
    entry("cuMemAlloc", mem_alloc);
    entry("cuMemFree", mem_free);
    if (!ok) return false;
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS ||
        retain(&context, device) != CUDA_SUCCESS || set_current(context) != CUDA_SUCCESS ||
        stream_create(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        mem_alloc(&workspace, kWorkspaceBytes) != CUDA_SUCCESS) {
      why = "CUDA setup on device 0 failed";
      return false;
    }
    return true;
  }
};

// cuBLASLt called directly: one handle, a plan per shape and dtype.
struct RawLt {
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
  cublasLtHandle_t handle = nullptr;

  bool open(std::string& why) {
    const char* path = env_or("HAL_CUDA_CUBLASLT_PATH", "libcublasLt.so.13");
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      why = std::string(path) + ": " + dlerror();
      return false;
    }
    const bool ok = resolve(library, "cublasLtCreate", create, why) &&
                    resolve(library, "cublasLtMatmulDescCreate", desc_create, why) &&
                    resolve(library, "cublasLtMatmulDescSetAttribute", desc_set, why) &&
                    resolve(library, "cublasLtMatrixLayoutCreate", layout_create, why) &&
                    resolve(library, "cublasLtMatmulPreferenceCreate", preference_create, why) &&
                    resolve(library, "cublasLtMatmulPreferenceSetAttribute", preference_set, why) &&
                    resolve(library, "cublasLtMatmulAlgoGetHeuristic", heuristic, why) &&
                    resolve(library, "cublasLtMatmul", matmul, why);
    if (!ok) return false;
    if (create(&handle) != CUBLAS_STATUS_SUCCESS) {
      why = "cublasLtCreate failed";
      return false;
    }
    return true;
  }

  // A runner of d = a b (row-major) as column-major d^T = b^T a^T; empty
  // with |why| when cuBLASLt offers no algorithm.
  std::function<void()> plan(cudaDataType type, int64_t n, const void* a, const void* b, void* d,
                             const RawDriver& driver, std::string& why) {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t layout = nullptr;
    cublasLtMatmulPreference_t preference = nullptr;
    const auto size = static_cast<uint64_t>(n);
    if (desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        layout_create(&layout, type, size, size, n) != CUBLAS_STATUS_SUCCESS ||
        preference_create(&preference) != CUBLAS_STATUS_SUCCESS) {
      why = "cuBLASLt descriptor creation failed";
      return {};
    }
    const uint64_t workspace = kWorkspaceBytes;
    preference_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                   sizeof(workspace));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (heuristic(handle, desc, layout, layout, layout, layout, preference, 1, &result, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found == 0) {
      why = "cublasLtMatmulAlgoGetHeuristic found no algorithm";
      return {};
    }
    // The descriptors live as long as the process (a handful per run).
    return [this, desc, layout, result, a, b, d, &driver] {
      const float alpha = 1.0f, beta = 0.0f;
      matmul(handle, desc, &alpha, b, layout, a, layout, &beta, d, layout, d, layout, &result.algo,
             reinterpret_cast<void*>(driver.workspace), result.workspaceSize, driver.stream);
    };
  }
};

// cuBLAS's cublasGemmEx called directly.
struct RawGemmEx {
  using Create = cublasStatus_t (*)(void**);
  using SetStream = cublasStatus_t (*)(void*, cudaStream_t);
  using GemmEx = cublasStatus_t (*)(void*, cublasOperation_t, cublasOperation_t, int, int, int,
                                    const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  Create create = nullptr;
  SetStream set_stream = nullptr;
  GemmEx gemm = nullptr;
  void* handle = nullptr;

  bool open(const RawDriver& driver, std::string& why) {
    const char* path = env_or("HAL_CUDA_CUBLAS_PATH", "libcublas.so.13");
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      why = std::string(path) + ": " + dlerror();
      return false;
    }
    if (!resolve(library, "cublasCreate_v2", create, why) ||
        !resolve(library, "cublasSetStream_v2", set_stream, why) ||
        !resolve(library, "cublasGemmEx", gemm, why)) {
      return false;
    }
    if (create(&handle) != CUBLAS_STATUS_SUCCESS ||
        set_stream(handle, driver.stream) != CUBLAS_STATUS_SUCCESS) {
      why = "cublasCreate/cublasSetStream failed";
      return false;
    }
    return true;
  }

  std::function<void()> plan(cudaDataType type, int64_t n, const void* a, const void* b, void* d) {
    const int size = static_cast<int>(n);
    return [this, type, size, a, b, d] {
      const float alpha = 1.0f, beta = 0.0f;
      gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &alpha, b, type, size, a, type, size,
           &beta, d, type, size, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
  }
};

bool check(hal_result_t result, const char* what) {
  if (result == HAL_SUCCESS) return true;
  std::fprintf(stderr, "error: %s: %s: %s\n", what, hal_result_string(result),
               hal_error_last_message());
  return false;
}

uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float from_element(const std::vector<unsigned char>& bytes, size_t index, bool bf16) {
  if (!bf16) {
    float value;
    std::memcpy(&value, bytes.data() + index * 4, 4);
    return value;
  }
  uint16_t half;
  std::memcpy(&half, bytes.data() + index * 2, 2);
  const uint32_t bits = uint32_t{half} << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

std::vector<long long> parse_list(const std::string& text) {
  std::vector<long long> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = text.find(',', at);
    out.push_back(std::atoll(text.substr(at, comma - at).c_str()));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  if (args.flag("--help")) {
    std::printf(
        "usage: cuda_gemm_peer [--sizes 4096,8192] [--dtypes bf16,f32] [--reps N] [--iters N]\n"
        "HAL's matmul on the cuda plugin vs cublasLtMatmul and cublasGemmEx called directly\n"
        "on GPU 0, interleaved: TFLOP/s, median [min-max] over the repetitions.\n");
    return 0;
  }
  const std::vector<long long> sizes = parse_list(args.str("--sizes", "4096,8192"));
  const std::string dtypes = args.str("--dtypes", "bf16,f32");
  const int reps = static_cast<int>(args.integer("--reps", 5));
  const int iters = static_cast<int>(args.integer("--iters", 10));
  args.finish();

  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  options.plugins = "cuda";
  if (!check(hal_init(&options), "hal_init")) return 1;
  uint32_t count = 0;
  hal_device_count(&count);
  if (count == 0) {
    std::fprintf(stderr, "error: the cuda plugin has no device (see halinfo)\n");
    return 1;
  }
  hal_device_t device = nullptr;
  hal_stream_t stream = nullptr;
  hal_device_get(0, &device);
  if (!check(hal_stream_create(device, 0, &stream), "hal_stream_create")) return 1;
  RawDriver driver;
  std::string why;
  if (!driver.open(why)) {
    std::fprintf(stderr, "error: the raw driver side: %s\n", why.c_str());
    return 1;
  }
  RawLt lt;
  std::string lt_why;
  const bool have_lt = lt.open(lt_why);
  RawGemmEx gemm_ex;
  std::string ex_why;
  const bool have_ex = gemm_ex.open(driver, ex_why);
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  hal_device_get_properties(device, &properties);
  std::printf("cuda_gemm_peer on %s: %d iterations per sample, %d repetitions\n", properties.name,
              iters, reps);
  if (!have_lt) std::printf("cublasLt side not measured: %s\n", lt_why.c_str());
  if (!have_ex) std::printf("GemmEx side not measured: %s\n", ex_why.c_str());
  std::printf("\n");

  bench::Table table({"matmul", "HAL (impl)", "HAL TFLOP/s", "cublasLt TFLOP/s", "GemmEx TFLOP/s",
                      "HAL / Lt", "HAL / GemmEx", "max |diff|"});
  std::mt19937 random(20261207);
  bool failed = false;
  for (const std::string& name : {std::string("bf16"), std::string("f32")}) {
    if (dtypes.find(name) == std::string::npos) continue;
    const bool bf16 = name == "bf16";
    const hal_dtype_t hal_type = bf16 ? HAL_DTYPE_BF16 : HAL_DTYPE_F32;
    const cudaDataType cuda_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const size_t element = bf16 ? 2 : 4;
    for (const long long n : sizes) {
      const size_t bytes = static_cast<size_t>(n * n) * element;
      void *a = nullptr, *b = nullptr, *d_hal = nullptr, *d_lt = nullptr, *d_ex = nullptr;
      if (!check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &a), "hal_mem_alloc") ||
          !check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &b), "hal_mem_alloc") ||
          !check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &d_hal), "hal_mem_alloc") ||
          !check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &d_lt), "hal_mem_alloc") ||
          !check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &d_ex), "hal_mem_alloc")) {
        return 1;
      }
      // Seeded values in [-1, 1): exact in bf16 to 8 bits.
      std::vector<unsigned char> host(bytes);
      std::uniform_real_distribution<float> value(-1.0f, 1.0f);
      for (void* operand : {a, b}) {
        for (size_t i = 0; i < static_cast<size_t>(n * n); ++i) {
          const float v = value(random);
          if (bf16) {
            const uint16_t h = to_bf16(v);
            std::memcpy(host.data() + i * 2, &h, 2);
          } else {
            std::memcpy(host.data() + i * 4, &v, 4);
          }
        }
        if (!check(hal_memcpy_async(operand, host.data(), bytes, stream), "hal_memcpy_async") ||
            !check(hal_stream_synchronize(stream), "hal_stream_synchronize")) {
          return 1;
        }
      }
      hal_op_matmul_desc_t desc{};
      desc.header.struct_size = sizeof(desc);
      desc.header.kind = HAL_OP_MATMUL;
      desc.alpha = 1.0f;
      const int64_t shape[2] = {n, n};
      hal_tensor_desc_contiguous(&desc.a, hal_type, 2, shape);
      hal_tensor_desc_contiguous(&desc.b, hal_type, 2, shape);
      hal_tensor_desc_contiguous(&desc.c, hal_type, 2, shape);
      hal_tensor_desc_contiguous(&desc.d, hal_type, 2, shape);
      hal_op_plan_t plan = nullptr;
      if (!check(hal_op_plan_create(device, &desc.header, 0, &plan), "hal_op_plan_create")) {
        return 1;
      }
      hal_op_plan_info_t info{};
      info.struct_size = sizeof(info);
      hal_op_plan_get_info(plan, &info);
      void* workspace = nullptr;
      if (info.workspace_bytes > 0 &&
          !check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, info.workspace_bytes, 0, &workspace),
                 "hal_mem_alloc")) {
        return 1;
      }
      void* operands[6] = {a, b, nullptr, d_hal, nullptr, nullptr};
      hal_op_exec_args_t exec{};
      exec.struct_size = sizeof(exec);
      exec.operand_count = 6;
      exec.operands = operands;
      exec.workspace = workspace;
      exec.workspace_bytes = info.workspace_bytes;
      const std::function<void()> run_hal = [&] { hal_op_execute(plan, &exec, stream); };
      std::string plan_why;
      const std::function<void()> run_lt =
          have_lt ? lt.plan(cuda_type, n, a, b, d_lt, driver, plan_why) : std::function<void()>();
      const std::function<void()> run_ex =
          have_ex ? gemm_ex.plan(cuda_type, n, a, b, d_ex) : std::function<void()>();
      if (have_lt && !run_lt)
        std::printf("cublasLt %s %lld: %s\n", name.c_str(), n, plan_why.c_str());
      // One side's timed sample: |iters| calls, then its stream synchronised.
      const auto sample = [&](int side) {
        const double start = bench::now_s();
        if (side == 0) {
          for (int i = 0; i < iters; ++i) run_hal();
          hal_stream_synchronize(stream);
        } else {
          const std::function<void()>& run = side == 1 ? run_lt : run_ex;
          for (int i = 0; i < iters; ++i) run();
          driver.stream_sync(driver.stream);
        }
        return bench::now_s() - start;
      };
      const double flops = 2.0 * static_cast<double>(n) * n * n * iters;
      std::vector<double> tflops[3];
      for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms up
        for (int turn = 0; turn < 3; ++turn) {
          const int side = (turn + std::max(rep, 0)) % 3;  // rotate the order
          if ((side == 1 && !run_lt) || (side == 2 && !run_ex)) continue;
          const double seconds = sample(side);
          if (rep >= 0) tflops[side].push_back(flops / seconds / 1e12);
        }
      }
      // The three results, compared on a seeded sample of elements.
      double max_diff = 0;
      std::vector<unsigned char> got[3];
      void* results[3] = {d_hal, d_lt, d_ex};
      for (int side = 0; side < 3; ++side) {
        if (tflops[side].empty()) continue;
        got[side].resize(bytes);
        if (!check(hal_memcpy_async(got[side].data(), results[side], bytes, stream),
                   "hal_memcpy_async") ||
            !check(hal_stream_synchronize(stream), "hal_stream_synchronize")) {
          return 1;
        }
      }
      std::uniform_int_distribution<size_t> pick(0, static_cast<size_t>(n * n) - 1);
      for (int s = 0; s < 256; ++s) {
        const size_t index = pick(random);
        const float reference = from_element(got[0], index, bf16);
        for (int side = 1; side < 3; ++side) {
          if (got[side].empty()) continue;
          max_diff = std::max(
              max_diff,
              static_cast<double>(std::fabs(from_element(got[side], index, bf16) - reference)));
        }
      }
      // Sums of n products of values below 1 in magnitude: f32 agrees to
      // ~1e-3 relative, bf16 outputs to their 8 bits.
      const double tolerance = (bf16 ? 0.02 : 1e-3) * std::sqrt(static_cast<double>(n)) + 1e-3;
      if (max_diff > tolerance) failed = true;
      const auto cell = [&](int side) {
        return tflops[side].empty() ? std::string("-")
                                    : bench::fmt_stats(bench::summarize(tflops[side]), 1);
      };
      const auto ratio = [&](int side) {
        if (tflops[side].empty() || tflops[0].empty()) return std::string("-");
        const double other = bench::summarize(tflops[side]).median;
        return bench::fmt(other > 0 ? bench::summarize(tflops[0]).median / other : 0, 3);
      };
      table.row({name + " " + std::to_string(n) + "^3", info.implementation, cell(0), cell(1),
                 cell(2), ratio(1), ratio(2),
                 bench::fmt(max_diff, 4) + (max_diff > tolerance ? " MISMATCH" : "")});
      hal_op_plan_destroy(plan);
      for (void* p : {a, b, d_hal, d_lt, d_ex, workspace}) {
        if (p != nullptr) hal_mem_free(p);
      }
    }
  }
  table.print();
  std::printf(
      "\ngoal: HAL >= 0.95 of the faster raw side; 'max |diff|' compares the three "
      "results on 256 seeded elements\n");
  driver.mem_free(driver.workspace);
  hal_stream_destroy(stream);
  hal_shutdown();
  return failed ? 1 : 0;
}
