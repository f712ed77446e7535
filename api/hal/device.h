/* HAL public C API: devices, their properties and capabilities. */
#ifndef HAL_DEVICE_H_
#define HAL_DEVICE_H_

#include "hal/result.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Types and enums
 *===------------------------------------------------------------------===*/

/* A device. Owned by the loader from hal_init to hal_shutdown: never freed by
 * the caller. */
typedef struct hal_device_s* hal_device_t;

typedef enum hal_device_type HAL_ENUM_TYPE {
  HAL_DEVICE_TYPE_CPU = 0,
  HAL_DEVICE_TYPE_GPU = 1,
  HAL_DEVICE_TYPE_ACCELERATOR = 2,
  HAL_DEVICE_TYPE_MAX_ENUM = 0x7fffffff
} hal_device_type_t;

/* Capability bits. A declared capability is a promise that halconform checks. */
typedef enum hal_device_cap_bits HAL_ENUM_TYPE {
  HAL_DEVICE_CAP_KERNELS = 1u << 0,            /* modules, kernels and hal_launch_kernel */
  HAL_DEVICE_CAP_EVENT_TIMING = 1u << 1,       /* hal_event_elapsed_ms */
  HAL_DEVICE_CAP_HOST_CALLBACKS = 1u << 2,     /* hal_stream_enqueue_host_fn runs asynchronously */
  HAL_DEVICE_CAP_HOST_MEMORY = 1u << 3,        /* HAL_MEMORY_HOST allocations */
  HAL_DEVICE_CAP_SHARED_MEMORY = 1u << 4,      /* HAL_MEMORY_SHARED allocations */
  HAL_DEVICE_CAP_UNIFIED_ADDRESSING = 1u << 5, /* device pointers usable on the host */
  HAL_DEVICE_CAP_PEER_ACCESS = 1u << 6,        /* copies between devices of the same plugin */
  HAL_DEVICE_CAP_STREAM_QUERY = 1u << 7, /* hal_stream_query and hal_event_query don't block */
  HAL_DEVICE_CAP_COLLECTIVES = 1u << 8,  /* the plugin's own collectives (else host-staged) */
  HAL_DEVICE_CAP_ALLTOALLV = 1u << 9,    /* hal_alltoallv on this device's communicators */
  HAL_DEVICE_CAP_MAX_ENUM = 0x7fffffff
} hal_device_cap_bits_t;
typedef uint32_t hal_device_caps_t;

/* Module formats a device can load (bit = 1 << hal_module_format_t). */
typedef uint32_t hal_module_format_mask_t;

/* Properties of a device. The caller sets struct_size; the loader writes at
 * most that many bytes, so a binary built against an older, smaller struct
 * keeps working. */
typedef struct hal_device_properties {
  size_t struct_size;                      /* [in] sizeof(hal_device_properties_t) */
  const void* next;                        /* [in] extension chain, NULL */
  char name[128];                          /* e.g. "HAL CPU device 0 (AMD EPYC ...)" */
  char vendor[64];                         /* e.g. "AuthenticAMD" */
  char plugin[32];                         /* the plugin's name, e.g. "cpu" */
  char driver_version[64];                 /* the vendor driver's version, or the plugin's */
  uint8_t uuid[16];                        /* stable per physical device and index */
  hal_device_type_t type;                  /* CPU, GPU, accelerator */
  uint32_t index;                          /* global index in the loader's device list */
  uint32_t plugin_device_index;            /* index inside its plugin */
  hal_device_caps_t capabilities;          /* hal_device_cap_bits_t */
  hal_module_format_mask_t module_formats; /* loadable hal_module_format_t, as bits */
  uint32_t compute_units;                  /* cores, SMs, CUs */
  uint64_t total_memory_bytes;             /* memory the device can allocate in total */
  uint64_t max_allocation_bytes;           /* the largest single allocation */
  uint64_t min_alignment_bytes;            /* every allocation is at least this aligned */
  uint32_t max_threads_per_block;          /* product of block dims may not exceed this */
  uint32_t max_block_dims[3];              /* per dimension */
  uint32_t max_grid_dims[3];               /* per dimension */
  uint32_t max_shared_memory_bytes;        /* group-shared memory per block */
  uint32_t subgroup_size;                  /* SIMD width / warp size */
  uint32_t reserved0;
  double peak_fp32_flops;       /* declared peak FP32 FLOP/s, 0 when not declared */
  double peak_memory_bandwidth; /* declared peak memory bandwidth, bytes/s, 0 when not declared */
  /* Appended in 1.x: how many ranks of one communicator may sit on this device
   * (hal_comm_init_rank from several processes or threads naming it): 0 no
   * limit (HAL's host-staged collectives), 1 for NCCL, which refuses two ranks
   * on one GPU. A plugin built against an older header leaves it 0. */
  uint32_t max_ranks_per_device;
  uint32_t reserved1;
} hal_device_properties_t;

/*===------------------------------------------------------------------===*
 * Functions
 *===------------------------------------------------------------------===*/

/* Number of devices across all loaded plugins; 0 is success. Thread-safe.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_NULL_POINTER. */
HAL_API hal_result_t hal_device_count(uint32_t* out_count);

/* The device at |index| in the global list (plugin load order, then the
 * plugin's own order). The handle is borrowed. Thread-safe.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_NULL_POINTER, HAL_ERROR_NOT_FOUND. */
HAL_API hal_result_t hal_device_get(uint32_t index, hal_device_t* out_device);

/* Fills |out_properties| (struct_size set by the caller). Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_NULL_POINTER,
 * HAL_ERROR_INVALID_ARGUMENT (struct_size smaller than the v1.0 struct). */
HAL_API hal_result_t hal_device_get_properties(hal_device_t device,
                                               hal_device_properties_t* out_properties);

/* Blocks until all work enqueued on every stream of |device| before the call
 * has completed. Thread-safe. May block.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DEVICE_LOST. */
HAL_API hal_result_t hal_device_synchronize(hal_device_t device);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_DEVICE_H_ */
