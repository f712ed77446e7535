/* HAL public C API: modules (loaded code images), kernels and launch. */
#ifndef HAL_KERNEL_H_
#define HAL_KERNEL_H_

#include "hal/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Types and enums
 *===------------------------------------------------------------------===*/

/* A loaded code image on one device. Owned by the caller. */
typedef struct hal_module_s* hal_module_t;
/* One entry point of a module with its argument signature. Owned by its
 * module: valid until the module is unloaded. */
typedef struct hal_kernel_s* hal_kernel_t;

/* What a module image is. A device lists the formats it loads in
 * hal_device_properties_t.module_formats as (1u << format). */
typedef enum hal_module_format HAL_ENUM_TYPE {
  HAL_MODULE_FORMAT_CPU_SHARED_OBJECT =
      0,                          /* an ELF shared object for the host (hal/cpu_kernel.h) */
  HAL_MODULE_FORMAT_OPENCL_C = 1, /* OpenCL C source */
  HAL_MODULE_FORMAT_SPIRV = 2,    /* SPIR-V binary */
  HAL_MODULE_FORMAT_PTX = 3,      /* NVIDIA PTX text */
  HAL_MODULE_FORMAT_CUBIN = 4,    /* NVIDIA cubin/fatbin */
  HAL_MODULE_FORMAT_HSACO = 5,    /* AMD code object */
  /* HAL kernel dialect source (SPEC.md, "Kernel dialect"): compiled at run
   * time by the plugin; hal_kernel_get takes each kernel's signature from it. */
  HAL_MODULE_FORMAT_HAL_DIALECT = 6,
  HAL_MODULE_FORMAT_MAX_ENUM = 0x7fffffff
} hal_module_format_t;

/* The type of one kernel argument. */
typedef enum hal_arg_type HAL_ENUM_TYPE {
  HAL_ARG_POINTER = 0, /* a device pointer (void*) */
  HAL_ARG_I32 = 1,
  HAL_ARG_U32 = 2,
  HAL_ARG_I64 = 3,
  HAL_ARG_U64 = 4,
  HAL_ARG_F32 = 5,
  HAL_ARG_F64 = 6,
  HAL_ARG_TYPE_MAX_ENUM = 0x7fffffff
} hal_arg_type_t;

/* The most arguments a kernel may take. */
#define HAL_MAX_KERNEL_ARGS 64

/* Describes a module image: either |data| + |size| in memory, or |path| to a
 * file (then data must be NULL). */
typedef struct hal_module_desc {
  size_t struct_size;         /* [in] sizeof(hal_module_desc_t) */
  const void* next;           /* [in] extension chain, NULL */
  hal_module_format_t format; /* what the image is */
  uint32_t reserved;
  const void* data; /* [optional] the image in memory */
  size_t size;      /* bytes at data */
  const char* path; /* [optional] the image in a file */
} hal_module_desc_t;

/* Selects a kernel in a module and declares its signature. When arg_types is
 * NULL the signature comes from the module itself (for a CPU shared object:
 * the exported string hal_kernel_signature_<name>, see hal/cpu_kernel.h);
 * when both exist they must agree. */
typedef struct hal_kernel_desc {
  size_t struct_size;              /* [in] sizeof(hal_kernel_desc_t) */
  const void* next;                /* [in] extension chain, NULL */
  const char* name;                /* the entry point's name */
  const hal_arg_type_t* arg_types; /* [optional][range(0,arg_count)] */
  uint32_t arg_count;              /* 0..HAL_MAX_KERNEL_ARGS */
  uint32_t reserved;
} hal_kernel_desc_t;

/* What a kernel is, as the plugin resolved it. */
typedef struct hal_kernel_info {
  size_t struct_size; /* [in] sizeof(hal_kernel_info_t) */
  const void* next;   /* [in] extension chain, NULL */
  const char* name;   /* valid while the module is loaded */
  uint32_t arg_count;
  hal_arg_type_t arg_types[HAL_MAX_KERNEL_ARGS];
  uint32_t max_threads_per_block; /* for this kernel on its device */
  uint32_t static_shared_memory_bytes;
} hal_kernel_info_t;

/* The shape of a launch: a 3-D grid of 3-D blocks. */
typedef struct hal_launch_config {
  size_t struct_size;           /* [in] sizeof(hal_launch_config_t) */
  const void* next;             /* [in] extension chain, NULL */
  uint32_t grid[3];             /* blocks per dimension, each >= 1 */
  uint32_t block[3];            /* threads per block per dimension, each >= 1 */
  uint32_t shared_memory_bytes; /* dynamic group-shared memory per block */
  uint32_t reserved;
} hal_launch_config_t;

/* One kernel argument: |size| bytes at |value| (copied at enqueue). */
typedef struct hal_kernel_arg {
  const void* value;
  size_t size;
} hal_kernel_arg_t;

/*===------------------------------------------------------------------===*
 * Functions
 *===------------------------------------------------------------------===*/

/* Loads a module on |device|. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_NULL_POINTER (desc, out),
 * HAL_ERROR_INVALID_ARGUMENT (neither or both of data and path, size 0,
 * unknown format), HAL_ERROR_UNSUPPORTED (format not in module_formats, or
 * the device lacks HAL_DEVICE_CAP_KERNELS), HAL_ERROR_NOT_FOUND (path does
 * not exist), HAL_ERROR_INVALID_MODULE (the image is not of its format; the
 * detail carries the loader's or compiler's message), HAL_ERROR_OUT_OF_MEMORY.
 * A desc->struct_size smaller than the v1.0 struct is HAL_ERROR_INVALID_ARGUMENT. */
HAL_API hal_result_t hal_module_load(hal_device_t device, const hal_module_desc_t* desc,
                                     hal_module_t* out_module);

/* Unloads |module| and invalidates its kernels. Waits for launches of its
 * kernels already enqueued to complete. hal_module_unload(NULL) is a no-op.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE. */
HAL_API hal_result_t hal_module_unload(hal_module_t module);

/* Finds a kernel in |module| and fixes its signature. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE,
 * HAL_ERROR_NULL_POINTER, HAL_ERROR_INVALID_ARGUMENT (arg_count out of range,
 * unknown arg type), HAL_ERROR_NOT_FOUND (no such entry point),
 * HAL_ERROR_ARGUMENT_MISMATCH (declared signature disagrees with the
 * module's, or neither exists; a module signature off SPEC.md §8's grammar is
 * none), HAL_ERROR_INVALID_MODULE (the vendor refuses the module's code when
 * it makes the kernel), HAL_ERROR_OUT_OF_MEMORY. Each call returns a
 * new handle owned by the module. A desc->struct_size smaller than the v1.0
 * struct is HAL_ERROR_INVALID_ARGUMENT. */
HAL_API hal_result_t hal_kernel_get(hal_module_t module, const hal_kernel_desc_t* desc,
                                    hal_kernel_t* out_kernel);

/* Describes |kernel|. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE,
 * HAL_ERROR_NULL_POINTER, HAL_ERROR_INVALID_ARGUMENT (struct_size too small). */
HAL_API hal_result_t hal_kernel_get_info(hal_kernel_t kernel, hal_kernel_info_t* out_info);

/* Enqueues |kernel| on |stream| over config->grid blocks of config->block
 * threads with |arg_count| arguments, which must match the signature in
 * count and in size (4 bytes for 32-bit types, 8 for 64-bit and pointers).
 * Argument values are copied before the call returns. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE,
 * HAL_ERROR_NULL_POINTER (config; args with arg_count > 0; an arg value),
 * HAL_ERROR_INVALID_ARGUMENT (config->struct_size smaller than the v1.0 struct;
 * arg_count above HAL_MAX_KERNEL_ARGS; a pointer argument in memory
 * hal_mem_free released),
 * HAL_ERROR_DEVICE_MISMATCH (kernel and stream on different devices),
 * HAL_ERROR_INVALID_LAUNCH (a zero grid or block dim, a dim or the block's
 * thread count over the device limits, too much shared memory),
 * HAL_ERROR_ARGUMENT_MISMATCH (wrong count, or a wrong size), HAL_ERROR_DEVICE_LOST. */
HAL_API hal_result_t hal_launch_kernel(hal_kernel_t kernel, const hal_launch_config_t* config,
                                       uint32_t arg_count, const hal_kernel_arg_t* args,
                                       hal_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_KERNEL_H_ */
