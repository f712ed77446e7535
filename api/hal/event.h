/* HAL public C API: events, points in a stream that other streams and the host wait on. */
#ifndef HAL_EVENT_H_
#define HAL_EVENT_H_

#include "hal/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Types and enums
 *===------------------------------------------------------------------===*/

typedef enum hal_event_flag_bits HAL_ENUM_TYPE {
  HAL_EVENT_FLAG_NONE = 0,
  HAL_EVENT_FLAG_TIMING = 1u << 0, /* record timestamps for hal_event_elapsed_ms */
  HAL_EVENT_FLAG_MAX_ENUM = 0x7fffffff
} hal_event_flag_bits_t;
typedef uint32_t hal_event_flags_t;

/*===------------------------------------------------------------------===*
 * Functions
 *===------------------------------------------------------------------===*/

/* Creates an event on |device|. A new event is complete (never recorded).
 * Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_NULL_POINTER,
 * HAL_ERROR_INVALID_ARGUMENT (unknown flags), HAL_ERROR_UNSUPPORTED
 * (HAL_EVENT_FLAG_TIMING without HAL_DEVICE_CAP_EVENT_TIMING),
 * HAL_ERROR_OUT_OF_MEMORY. */
HAL_API hal_result_t hal_event_create(hal_device_t device, hal_event_flags_t flags,
                                      hal_event_t* out_event);

/* Destroys |event|. Waits that already captured it still complete correctly.
 * hal_event_destroy(NULL) is a no-op.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE (double destroy). */
HAL_API hal_result_t hal_event_destroy(hal_event_t event);

/* Captures the work enqueued on |stream| so far; the event completes when
 * that work completes. Re-recording replaces the captured point (waits
 * already enqueued keep the old one). |stream| must be on the event's device.
 * Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_DEVICE_MISMATCH. */
HAL_API hal_result_t hal_event_record(hal_event_t event, hal_stream_t stream);

/* HAL_SUCCESS when the captured work is complete (or never recorded),
 * HAL_NOT_READY otherwise. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_DEVICE_LOST. */
HAL_API hal_result_t hal_event_query(hal_event_t event);

/* Blocks until the captured work completes. Thread-safe; may block.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_DEVICE_LOST. */
HAL_API hal_result_t hal_event_synchronize(hal_event_t event);

/* Milliseconds between the completion of |start| and of |end|, both created
 * with HAL_EVENT_FLAG_TIMING on the same device and both complete.
 * Does not block. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE,
 * HAL_ERROR_NULL_POINTER, HAL_ERROR_DEVICE_MISMATCH, HAL_ERROR_INVALID_STATE
 * (an event is not complete, was never recorded, or lacks HAL_EVENT_FLAG_TIMING). */
HAL_API hal_result_t hal_event_elapsed_ms(hal_event_t start, hal_event_t end, float* out_ms);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_EVENT_H_ */
