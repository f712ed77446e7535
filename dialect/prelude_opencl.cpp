// The OpenCL C backend's prelude. Most builtins are OpenCL's own; the ids
// become int, atomics get one overload per address space (clang's
// overloadable attribute, which every OpenCL C compiler built on clang
// accepts), and float atomic add is a compare-exchange loop.
#include "hal_dialect/dialect.hpp"

namespace hal::dialect {
namespace {

constexpr std::string_view kOpenClPrelude = R"hal_prelude(
// ---- HAL kernel dialect prelude: OpenCL C ----
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
typedef int hal_i32;
typedef uint hal_u32;
typedef long hal_i64;
typedef ulong hal_u64;
typedef float hal_f32;
typedef double hal_f64;
typedef half hal_f16;     /* storage only: vload_half/vstore_half convert */
typedef ushort hal_bf16;  /* storage only */
#define hal_global_id(d) ((int)get_global_id(d))
#define hal_local_id(d) ((int)get_local_id(d))
#define hal_group_id(d) ((int)get_group_id(d))
#define hal_local_size(d) ((int)get_local_size(d))
#define hal_num_groups(d) ((int)get_num_groups(d))
#define hal_global_size(d) ((int)get_global_size(d))
#define hal_min(a, b) min(a, b)
#define hal_max(a, b) max(a, b)
#define hal_rsqrt(x) rsqrt(x)
#define hal_load_f16(p) vload_half(0, (p))
#define hal_store_f16(p, v) vstore_half_rte((v), 0, (p))
#define hal_load_bf16(p) as_float(((uint) * (p)) << 16)
#define hal_store_bf16(p, v) (*(p) = hal_f32_to_bf16(v))
inline ushort hal_f32_to_bf16(float value) {
  uint bits = as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (ushort)((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (ushort)(bits >> 16);
}
#define HAL_OCL_ATOMICS(SPACE)                                                                \
  int __attribute__((overloadable)) hal_atomic_add(volatile SPACE int* p, int v) { return atomic_add(p, v); } \
  uint __attribute__((overloadable)) hal_atomic_add(volatile SPACE uint* p, uint v) { return atomic_add(p, v); } \
  int __attribute__((overloadable)) hal_atomic_sub(volatile SPACE int* p, int v) { return atomic_sub(p, v); } \
  uint __attribute__((overloadable)) hal_atomic_sub(volatile SPACE uint* p, uint v) { return atomic_sub(p, v); } \
  int __attribute__((overloadable)) hal_atomic_min(volatile SPACE int* p, int v) { return atomic_min(p, v); } \
  uint __attribute__((overloadable)) hal_atomic_min(volatile SPACE uint* p, uint v) { return atomic_min(p, v); } \
  int __attribute__((overloadable)) hal_atomic_max(volatile SPACE int* p, int v) { return atomic_max(p, v); } \
  uint __attribute__((overloadable)) hal_atomic_max(volatile SPACE uint* p, uint v) { return atomic_max(p, v); } \
  int __attribute__((overloadable)) hal_atomic_xchg(volatile SPACE int* p, int v) { return atomic_xchg(p, v); } \
  uint __attribute__((overloadable)) hal_atomic_xchg(volatile SPACE uint* p, uint v) { return atomic_xchg(p, v); } \
  int __attribute__((overloadable)) hal_atomic_cas(volatile SPACE int* p, int e, int d) { return atomic_cmpxchg(p, e, d); } \
  uint __attribute__((overloadable)) hal_atomic_cas(volatile SPACE uint* p, uint e, uint d) { return atomic_cmpxchg(p, e, d); } \
  float __attribute__((overloadable)) hal_atomic_add(volatile SPACE float* p, float v) {   \
    uint old = as_uint(*p), seen;                                                           \
    while ((seen = atomic_cmpxchg((volatile SPACE uint*)p, old, as_uint(as_float(old) + v))) != old) old = seen; \
    return as_float(old);                                                                    \
  }
HAL_OCL_ATOMICS(__global)
HAL_OCL_ATOMICS(__local)
)hal_prelude";

}  // namespace

std::string_view opencl_prelude() {
  return kOpenClPrelude;
}

}  // namespace hal::dialect
