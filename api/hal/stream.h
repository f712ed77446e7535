/* HAL public C API: streams, asynchronous in-order queues of work on one device. */
#ifndef HAL_STREAM_H_
#define HAL_STREAM_H_

#include "hal/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Types and enums
 *===------------------------------------------------------------------===*/

/* A stream: work enqueued on it runs asynchronously to the host, in the order
 * it was enqueued. Owned by the caller; destroyed with hal_stream_destroy. */
typedef struct hal_stream_s* hal_stream_t;

/* An event (see hal/event.h). */
typedef struct hal_event_s* hal_event_t;

/* A host function enqueued on a stream. It runs after all earlier work on the
 * stream and before any later work. It must not call HAL functions that wait
 * on the same stream: those that would (synchronize, a blocking query or
 * destroy of that stream; hal_device_synchronize, hal_mem_free or
 * hal_module_unload on its device) fail with HAL_ERROR_INVALID_STATE. */
typedef void (*hal_host_fn_t)(void* user_data);

typedef enum hal_stream_flag_bits HAL_ENUM_TYPE {
  HAL_STREAM_FLAG_NONE = 0,
  HAL_STREAM_FLAG_MAX_ENUM = 0x7fffffff
} hal_stream_flag_bits_t;
typedef uint32_t hal_stream_flags_t;

/*===------------------------------------------------------------------===*
 * Functions
 *===------------------------------------------------------------------===*/

/* Creates a stream on |device|. |flags| must be 0 in v1.0. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_NULL_POINTER,
 * HAL_ERROR_INVALID_ARGUMENT (unknown flags), HAL_ERROR_OUT_OF_MEMORY. */
HAL_API hal_result_t hal_stream_create(hal_device_t device, hal_stream_flags_t flags,
                                       hal_stream_t* out_stream);

/* Waits for the work enqueued on |stream| to complete, then destroys it.
 * hal_stream_destroy(NULL) is a no-op. No other thread may use |stream|
 * concurrently or afterwards; a later use gets HAL_ERROR_DESTROYED_HANDLE
 * (detected until its slab slot is handed out again, SPEC §3).
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE (double destroy). */
HAL_API hal_result_t hal_stream_destroy(hal_stream_t stream);

/* The device a stream belongs to. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_NULL_POINTER. */
HAL_API hal_result_t hal_stream_get_device(hal_stream_t stream, hal_device_t* out_device);

/* Blocks until all work enqueued on |stream| before the call completes.
 * Thread-safe; may block.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE,
 * HAL_ERROR_DEVICE_LOST (earlier work failed; the detail says which). */
HAL_API hal_result_t hal_stream_synchronize(hal_stream_t stream);

/* HAL_SUCCESS when all enqueued work has completed, HAL_NOT_READY when not.
 * Never blocks on devices with HAL_DEVICE_CAP_STREAM_QUERY. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_DEVICE_LOST. */
HAL_API hal_result_t hal_stream_query(hal_stream_t stream);

/* Makes all later work on |stream| wait until the work captured by the last
 * hal_event_record of |event| completes. The event may belong to another
 * device, even of another plugin. An event never recorded is complete.
 * Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE (either handle). */
HAL_API hal_result_t hal_stream_wait_event(hal_stream_t stream, hal_event_t event);

/* Enqueues |fn(user_data)| on |stream|. Asynchronous on devices with
 * HAL_DEVICE_CAP_HOST_CALLBACKS; otherwise the loader runs it on the calling
 * thread after synchronising the stream (the same ordering, but blocking).
 * Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_NULL_POINTER (fn). */
HAL_API hal_result_t hal_stream_enqueue_host_fn(hal_stream_t stream, hal_host_fn_t fn,
                                                void* user_data);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_STREAM_H_ */
