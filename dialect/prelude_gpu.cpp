// The CUDA and HIP backends' prelude: CUDA C++ for NVRTC, HIP C++ for
// hiprtc. The two differ only in the f16 header; NVRTC and hiprtc provide
// the ids, __syncthreads, atomics and math functions.
#include "hal_dialect/dialect.hpp"

namespace hal::dialect {
namespace {

constexpr std::string_view kGpuPrelude = R"hal_prelude(
typedef int hal_i32;
typedef unsigned int hal_u32;
typedef long long hal_i64;
typedef unsigned long long hal_u64;
typedef float hal_f32;
typedef double hal_f64;
typedef unsigned short hal_f16;   // storage only: load_f16/store_f16 convert
typedef unsigned short hal_bf16;  // storage only
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef FLT_MAX
#define FLT_MAX 3.402823466e+38F
#endif
static __device__ inline unsigned int hal_dim(dim3 v, int d) { return d == 0 ? v.x : d == 1 ? v.y : d == 2 ? v.z : 0u; }
static __device__ inline int hal_local_id(int d) { return (int)hal_dim(dim3(threadIdx.x, threadIdx.y, threadIdx.z), d); }
static __device__ inline int hal_local_size(int d) { return d > 2 ? 1 : (int)hal_dim(dim3(blockDim.x, blockDim.y, blockDim.z), d); }
static __device__ inline int hal_group_id(int d) { return (int)hal_dim(dim3(blockIdx.x, blockIdx.y, blockIdx.z), d); }
static __device__ inline int hal_num_groups(int d) { return d > 2 ? 1 : (int)hal_dim(dim3(gridDim.x, gridDim.y, gridDim.z), d); }
static __device__ inline int hal_global_id(int d) { return hal_group_id(d) * hal_local_size(d) + hal_local_id(d); }
static __device__ inline int hal_global_size(int d) { return hal_num_groups(d) * hal_local_size(d); }
template <class T> static __device__ inline T hal_min(T a, T b) { return b < a ? b : a; }
template <class T> static __device__ inline T hal_max(T a, T b) { return a < b ? b : a; }
static __device__ inline float hal_rsqrt(float x) { return rsqrtf(x); }
static __device__ inline double hal_rsqrt(double x) { return rsqrt(x); }
#define hal_atomic_add(p, v) atomicAdd((p), (v))
#define hal_atomic_sub(p, v) atomicSub((p), (v))
#define hal_atomic_min(p, v) atomicMin((p), (v))
#define hal_atomic_max(p, v) atomicMax((p), (v))
#define hal_atomic_xchg(p, v) atomicExch((p), (v))
#define hal_atomic_cas(p, e, d) atomicCAS((p), (e), (d))
#define hal_load_f16(p) __half2float(__ushort_as_half(*(p)))
#define hal_store_f16(p, v) (*(p) = __half_as_ushort(__float2half_rn(v)))
#define hal_load_bf16(p) __uint_as_float(((unsigned int)*(p)) << 16)
#define hal_store_bf16(p, v) (*(p) = hal_f32_to_bf16(v))
static __device__ inline unsigned short hal_f32_to_bf16(float value) {
  unsigned int bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (unsigned short)(bits >> 16);
}
)hal_prelude";

}  // namespace

std::string gpu_prelude(Backend backend) {
  std::string prelude = backend == Backend::kHip
                            // hiprtc builds hip_runtime.h and hip_fp16.h in
                            // (__HIPCC_RTC__): including the installed ones
                            // again redefines their types (HIP 5.2), so they
                            // are included only for hipcc.
                            ? "// ---- HAL kernel dialect prelude: HIP C++ (hiprtc) ----\n"
                              "#ifndef __HIPCC_RTC__\n#include <hip/hip_runtime.h>\n"
                              "#include <hip/hip_fp16.h>\n#endif\n"
                            : "// ---- HAL kernel dialect prelude: CUDA C++ (NVRTC) ----\n"
                              "#include <cuda_fp16.h>\n";
  prelude += kGpuPrelude;
  return prelude;
}

}  // namespace hal::dialect
