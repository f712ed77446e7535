// Memory of the cpu plugin (api/hal/memory.h): allocation through the
// device's caching allocator, and the stream-ordered copies and fills, which
// large sizes split over the thread pool.
#ifndef HAL_PLUGINS_CPU_MEMORY_HPP_
#define HAL_PLUGINS_CPU_MEMORY_HPP_

#include <cstddef>
#include <cstdint>

#include "hal_plugin.h"

namespace hal::cpu {

class ThreadPool;

// Executed by a stream when the command's turn comes.
void execute_copy(ThreadPool& pool, void* dst, const void* src, size_t size);
void execute_fill(ThreadPool& pool, void* dst, uint8_t value, size_t size);

hal_result_t mem_alloc(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                       size_t alignment, void** out_ptr);
hal_result_t mem_free(hal_impl_device_t* device, void* ptr);
hal_result_t memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src, size_t size);
hal_result_t memset_async(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_MEMORY_HPP_
