/* HAL: how a kernel for the cpu plugin (HAL_MODULE_FORMAT_CPU_SHARED_OBJECT) is written.
 *
 * A CPU module is an ELF shared object built by the user's compiler. Each
 * kernel is an exported C function called once per block (work-group):
 *
 *   HAL_CPU_KERNEL void my_kernel(const hal_cpu_block_context_t* ctx, arg0, arg1, ...);
 *
 * The kernel loops over the block's threads itself (they run as a loop, so
 * the compiler can vectorise it); a group barrier is the end of one such loop
 * and the start of the next. Arguments follow the C calling convention of
 * their hal_arg_type_t (pointer, int32_t, uint32_t, int64_t, uint64_t,
 * float, double); the plugin calls through libffi.
 *
 * A kernel may export its signature so callers need not declare it:
 *
 *   HAL_CPU_KERNEL_SIGNATURE(my_kernel, "ptr,ptr,u32");
 *
 * Type names: ptr, i32, u32, i64, u64, f32, f64, separated by ','. An empty
 * string is a kernel without arguments. Blocks run concurrently on several
 * host threads; threads of one block run on one host thread. */
#ifndef HAL_CPU_KERNEL_H_
#define HAL_CPU_KERNEL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Passed by the cpu plugin as the first argument of every kernel call. */
typedef struct hal_cpu_block_context {
  size_t struct_size;           /* sizeof(hal_cpu_block_context_t) of the plugin */
  uint32_t grid[3];             /* blocks per dimension */
  uint32_t block[3];            /* threads per block per dimension */
  uint32_t block_id[3];         /* this block's coordinates */
  uint32_t shared_memory_bytes; /* dynamic group-shared bytes at shared_memory */
  void* shared_memory;          /* this block's group-shared memory (64-byte aligned), or NULL */
  uint32_t worker_index;        /* which host thread runs the block, 0..worker_count-1 */
  uint32_t worker_count;        /* host threads that may run blocks (sizes per-worker scratch) */
} hal_cpu_block_context_t;

#if defined(__cplusplus)
#define HAL_CPU_KERNEL_EXTERN extern "C"
#else
#define HAL_CPU_KERNEL_EXTERN
#endif

/* Exports a kernel function from its shared object (modules are usually built
 * with hidden visibility), with C linkage in C++ too. */
#define HAL_CPU_KERNEL HAL_CPU_KERNEL_EXTERN __attribute__((visibility("default")))

/* Exports the argument signature of kernel |name| as the string
 * hal_kernel_signature_<name>, which hal_kernel_get reads when the caller
 * declares none. */
#define HAL_CPU_KERNEL_SIGNATURE(name, signature)              \
  HAL_CPU_KERNEL_EXTERN __attribute__((visibility("default"))) \
  const char hal_kernel_signature_##name[] = signature

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_CPU_KERNEL_H_ */
