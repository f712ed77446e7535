/* HAL public C API: device memory and stream-ordered copies and fills.
 *
 * Memory model: allocations are device pointers in one unified address space
 * (as CUDA, HIP, Level Zero USM and OpenCL SVM provide), so pointer arithmetic
 * works and a pointer inside an allocation identifies it. The loader keeps a
 * table of every live allocation: a copy or fill that starts inside an
 * allocation and runs past its end is rejected with HAL_ERROR_OUT_OF_BOUNDS.
 * A pointer that is not inside any HAL allocation is host memory of the
 * process (pageable) and is accepted as a copy source or destination. */
#ifndef HAL_MEMORY_H_
#define HAL_MEMORY_H_

#include "hal/device.h"
#include "hal/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Types and enums
 *===------------------------------------------------------------------===*/

typedef enum hal_memory_kind HAL_ENUM_TYPE {
  HAL_MEMORY_DEVICE = 0, /* device memory; fastest for kernels */
  HAL_MEMORY_HOST = 1,   /* pinned host memory the device reaches (HAL_DEVICE_CAP_HOST_MEMORY) */
  HAL_MEMORY_SHARED =
      2, /* migrating memory reached by host and device (HAL_DEVICE_CAP_SHARED_MEMORY) */
  HAL_MEMORY_KIND_MAX_ENUM = 0x7fffffff
} hal_memory_kind_t;

/* What the loader knows about an allocation. */
typedef struct hal_memory_info {
  size_t struct_size;     /* [in] sizeof(hal_memory_info_t) */
  const void* next;       /* [in] extension chain, NULL */
  void* base;             /* start of the allocation containing the pointer */
  size_t size;            /* its size in bytes, as requested */
  hal_device_t device;    /* the device it was allocated on */
  hal_memory_kind_t kind; /* its kind */
  uint32_t reserved;
} hal_memory_info_t;

/*===------------------------------------------------------------------===*
 * Functions
 *===------------------------------------------------------------------===*/

/* Allocates |size| bytes of |kind| memory on |device|, aligned to |alignment|
 * (0 means the device's min_alignment_bytes; otherwise a power of two). The
 * memory is not initialised. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_NULL_POINTER (out_ptr),
 * HAL_ERROR_INVALID_SIZE (size 0), HAL_ERROR_INVALID_ARGUMENT (kind unknown,
 * alignment not a power of two), HAL_ERROR_UNSUPPORTED (kind not supported by
 * the device), HAL_ERROR_OUT_OF_MEMORY (larger than max_allocation_bytes or
 * the device is full). *out_ptr is written only on success. */
HAL_API hal_result_t hal_mem_alloc(hal_device_t device, hal_memory_kind_t kind, size_t size,
                                   size_t alignment, void** out_ptr);

/* Frees an allocation made by hal_mem_alloc. |ptr| must be the base pointer.
 * Blocks until the work already enqueued on the device's streams completes,
 * so memory in use by a kernel or copy is never recycled under it.
 * hal_mem_free(NULL) is a no-op returning HAL_SUCCESS. The loader holds freed
 * memory back from the plugin for a while, so that a freed pointer passed to
 * a later call is refused (SPEC.md §6, "Freed memory"). Thread-safe; may block.
 * Errors: HAL_ERROR_NOT_FOUND (not a live allocation: never allocated or freed
 * already), HAL_ERROR_INVALID_ARGUMENT (points inside an allocation, not at its base). */
HAL_API hal_result_t hal_mem_free(void* ptr);

/* Describes the allocation containing |ptr| (any address inside it).
 * Thread-safe.
 * Errors: HAL_ERROR_NULL_POINTER, HAL_ERROR_INVALID_ARGUMENT (struct_size too
 * small), HAL_ERROR_NOT_FOUND (|ptr| is not inside a live HAL allocation). */
HAL_API hal_result_t hal_mem_get_info(const void* ptr, hal_memory_info_t* out_info);

/* Enqueues a copy of |size| bytes from |src| to |dst| on |stream|; either may
 * be a HAL allocation of the stream's device, of another device of the same
 * plugin (HAL_DEVICE_CAP_PEER_ACCESS), or host memory. The ranges must not
 * overlap. Asynchronous: host memory must stay valid until the copy completes.
 * size 0 is a no-op that still orders like any other operation.
 * Thread-safe: calls on one stream from several threads are serialised.
 * Errors: HAL_ERROR_INVALID_HANDLE/DESTROYED_HANDLE (stream),
 * HAL_ERROR_NULL_POINTER (dst or src with size > 0), HAL_ERROR_INVALID_SIZE
 * (address + size overflows), HAL_ERROR_OUT_OF_BOUNDS (a range overruns its
 * allocation), HAL_ERROR_INVALID_ARGUMENT (ranges overlap, or a range in
 * memory hal_mem_free released),
 * HAL_ERROR_DEVICE_MISMATCH (an allocation of another plugin's device),
 * HAL_ERROR_DEVICE_LOST. */
HAL_API hal_result_t hal_memcpy_async(void* dst, const void* src, size_t size, hal_stream_t stream);

/* Enqueues setting |size| bytes at |dst| to the byte |value| on |stream|.
 * Same rules and errors as hal_memcpy_async for |dst| (there is no overlap case). */
HAL_API hal_result_t hal_memset_async(void* dst, uint8_t value, size_t size, hal_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_MEMORY_H_ */
