// Memory of the cpu plugin (api/hal/memory.h): allocation through the
// device's caching allocator (Device::allocate, Device::free), and the
// stream-ordered copies and fills (Stream::copy, Stream::fill), which large
// sizes split over the thread pool.
#ifndef HAL_PLUGINS_CPU_MEMORY_HPP_
#define HAL_PLUGINS_CPU_MEMORY_HPP_

#include <cstddef>
#include <cstdint>

namespace hal::cpu {

class ThreadPool;

// Executed by a stream when the command's turn comes.
void execute_copy(ThreadPool& pool, void* dst, const void* src, size_t size);
void execute_fill(ThreadPool& pool, void* dst, uint8_t value, size_t size);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_MEMORY_HPP_
