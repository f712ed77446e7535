// The application's host functions (hal_stream_enqueue_host_fn): the loader
// runs each through a trampoline that notes, for the thread it runs on, which
// stream and device it belongs to. A host function's stream waits for it to
// return, so a call from it that would wait for that stream (or for its whole
// device) could never return: such calls fail with HAL_ERROR_INVALID_STATE
// instead (SPEC §7 "Host functions").
#pragma once

#include "objects.hpp"

#include <hal/stream.h>

namespace hal::loader {

// Enqueues the application's |fn| on |stream| through the trampoline.
hal_result_t enqueue_application_host_fn(hal_stream_s* stream, hal_host_fn_t fn, void* user_data,
                                         const char* function) noexcept;

// HAL_ERROR_INVALID_STATE, with the detail set, when the calling thread runs
// a host function of |stream| or of a stream of |device| (either may be
// NULL); HAL_SUCCESS otherwise.
hal_result_t refuse_wait_in_host_fn(const hal_stream_s* stream, const hal_device_s* device,
                                    const char* function) noexcept;

}  // namespace hal::loader
