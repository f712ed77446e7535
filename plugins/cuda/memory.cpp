// Memory of the cuda plugin: device, pinned host and managed allocations
// (over-aligned ones carved out of larger ones), and the copies and fills a
// stream enqueues.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "device.hpp"
#include "stream.hpp"

namespace hal::cuda {

hal_result_t Device::allocate(hal_memory_kind_t kind, size_t size, size_t alignment,
                              void** out_ptr) {
  const ContextScope bound = bind();
  if (!bound.ok()) return fail(bound.result(), "mem_alloc");
  // Alignments above the driver's are carved out of a larger allocation.
  const size_t bytes = allocations_.block_bytes(size, alignment);
  if (bytes == 0) {
    return report().fail(HAL_ERROR_OUT_OF_MEMORY, 0,
                         "mem_alloc: %zu bytes aligned to %zu overflow the address space", size,
                         alignment);
  }
  void* base = nullptr;
  CUresult result = CUDA_SUCCESS;
  const char* call = "";
  switch (kind) {
    case HAL_MEMORY_DEVICE: {
      CUdeviceptr device_ptr = 0;
      call = "mem_alloc: cuMemAlloc";
      result = api().cuMemAlloc(&device_ptr, bytes);
      base = reinterpret_cast<void*>(device_ptr);
      break;
    }
    case HAL_MEMORY_HOST:
      call = "mem_alloc: cuMemHostAlloc";
      result =
          api().cuMemHostAlloc(&base, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
      break;
    case HAL_MEMORY_SHARED: {
      CUdeviceptr managed = 0;
      call = "mem_alloc: cuMemAllocManaged";
      result = api().cuMemAllocManaged(&managed, bytes, CU_MEM_ATTACH_GLOBAL);
      base = reinterpret_cast<void*>(managed);
      break;
    }
    default:
      return report().fail(HAL_ERROR_UNSUPPORTED, 0, "mem_alloc: memory kind %d is unknown",
                           static_cast<int>(kind));
  }
  if (result != CUDA_SUCCESS) {
    // A fatal error met here is the device's loss (fail() keeps it sticky).
    const hal_result_t mapped = result_of(result) == HAL_ERROR_OUT_OF_MEMORY
                                    ? HAL_ERROR_OUT_OF_MEMORY
                                : is_fatal(result) ? HAL_ERROR_DEVICE_LOST
                                                   : HAL_ERROR_INTERNAL;
    const std::string what = std::string(call) + " of " + std::to_string(bytes) + " bytes failed";
    return fail(mapped, result, what.c_str());
  }
  *out_ptr = allocations_.add(kind, base, alignment);
  return HAL_SUCCESS;
}

hal_result_t Device::free(void* ptr) {
  plugin::Allocations::Block block{};
  if (!allocations_.take(ptr, block)) {
    return report().fail(HAL_ERROR_INVALID_ARGUMENT, 0,
                         "mem_free: %p is not an allocation of this device", ptr);
  }
  // A lost device's memory went with its context (SPEC §4.4: a free after
  // a loss succeeds); the driver would only repeat the sticky error.
  if (lost() != CUDA_SUCCESS) return HAL_SUCCESS;
  const ContextScope bound = bind();
  if (!bound.ok()) return fail(bound.result(), "mem_free");
  const CUresult result = release(block.kind, block.base);
  return result == CUDA_SUCCESS ? HAL_SUCCESS : fail(result, "mem_free");
}

CUresult Device::release(hal_memory_kind_t kind, void* base) const {
  return kind == HAL_MEMORY_HOST ? api().cuMemFreeHost(base)
                                 : api().cuMemFree(reinterpret_cast<CUdeviceptr>(base));
}

namespace {

// What a host function of the driver's does: plain host memory work, never
// a CUDA call (cuLaunchHostFunc: "The host function must not make any CUDA
// API calls"). The record is the host function's to delete.
struct HostCopy {
  void* dst;
  const void* src;
  size_t size;
  int value;  // a fill when >= 0
};

void CUDA_CB run_host_copy(void* data) {
  const std::unique_ptr<HostCopy> job(static_cast<HostCopy*>(data));
  if (job->value >= 0) {
    std::memset(job->dst, job->value, job->size);
  } else {
    std::memmove(job->dst, job->src, job->size);
  }
}

}  // namespace

Stream::Memory Stream::classify(const void* pointer, CUresult& error) const {
  // Memory CUDA does not know is pageable host memory: cuPointerGetAttribute
  // answers CUDA_ERROR_INVALID_VALUE for a pointer no CUDA allocation or
  // registration covers (CUDA Driver API, cuPointerGetAttribute).
  CUmemorytype type{};
  error = device().api().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                               reinterpret_cast<CUdeviceptr>(pointer));
  if (error == CUDA_ERROR_INVALID_VALUE) {
    error = CUDA_SUCCESS;
    return Memory::kPageable;
  }
  if (error != CUDA_SUCCESS) return Memory::kDevice;
  return type == CU_MEMORYTYPE_HOST ? Memory::kPinned : Memory::kDevice;
}

CUresult Stream::enqueue_host_copy(void* dst, const void* src, size_t size, int value) {
  auto job = std::make_unique<HostCopy>(HostCopy{dst, src, size, value});
  const CUresult result = device().api().cuLaunchHostFunc(stream_, run_host_copy, job.get());
  if (result == CUDA_SUCCESS) job.release();  // the host function deletes it
  return result;
}

hal_result_t Stream::copy(void* dst, const void* src, size_t size) {
  const ContextScope bound = device().bind();
  if (!bound.ok()) return device().fail(bound.result(), "memcpy_async");
  const DriverApi& cu = device().api();
  CUresult error = CUDA_SUCCESS;
  const Memory from = classify(src, error);
  const Memory to = error == CUDA_SUCCESS ? classify(dst, error) : Memory::kDevice;
  if (error != CUDA_SUCCESS) return device().fail(error, "memcpy_async: cuPointerGetAttribute");
  if (from != Memory::kPageable && to != Memory::kPageable) {
    // Unified addressing: the driver tells device, pinned and managed
    // memory apart by the pointer.
    const CUresult result = cu.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                                             reinterpret_cast<CUdeviceptr>(src), size, stream_);
    return result == CUDA_SUCCESS ? HAL_SUCCESS
                                  : device().fail(result, "memcpy_async: cuMemcpyAsync");
  }
  // Pageable host memory: cuMemcpyAsync would synchronise with the stream
  // or return only once the copy completed ("API synchronization behavior":
  // pageable to device performs a stream sync first; device to pageable
  // returns once the copy has completed), so a caller holding a gate that
  // the stream's earlier host function waits for would stall. The plugin
  // keeps the copy asynchronous and in stream order instead: host to host in
  // a host function, and to or from the device through the stream's pinned
  // staging buffer, chunk by chunk (a host function fills or drains it).
  if (from != Memory::kDevice && to != Memory::kDevice) {
    const CUresult result = enqueue_host_copy(dst, src, size, -1);
    return result == CUDA_SUCCESS ? HAL_SUCCESS
                                  : device().fail(result, "memcpy_async: cuLaunchHostFunc");
  }
  std::lock_guard lock(staging_mutex_);
  if (staging_ == nullptr) {
    if (const CUresult result = cu.cuMemHostAlloc(&staging_, kStagingBytes, 0);
        result != CUDA_SUCCESS) {
      staging_ = nullptr;
      return device().fail(result, "memcpy_async: cuMemHostAlloc (pageable staging)");
    }
  }
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  for (size_t offset = 0; offset < size; offset += kStagingBytes) {
    const size_t chunk = std::min(kStagingBytes, size - offset);
    // One buffer reused in stream order: each chunk's fill and drain run
    // before the next chunk's, since the stream runs its work in order.
    CUresult result = CUDA_SUCCESS;
    const char* call = "";
    if (from == Memory::kPageable) {
      call = "memcpy_async: cuLaunchHostFunc (staging)";
      result = enqueue_host_copy(staging_, in + offset, chunk, -1);
      if (result == CUDA_SUCCESS) {
        call = "memcpy_async: cuMemcpyAsync (from staging)";
        result = cu.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(out + offset),
                                  reinterpret_cast<CUdeviceptr>(staging_), chunk, stream_);
      }
    } else {
      call = "memcpy_async: cuMemcpyAsync (to staging)";
      result = cu.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(staging_),
                                reinterpret_cast<CUdeviceptr>(in + offset), chunk, stream_);
      if (result == CUDA_SUCCESS) {
        call = "memcpy_async: cuLaunchHostFunc (staging)";
        result = enqueue_host_copy(out + offset, staging_, chunk, -1);
      }
    }
    if (result != CUDA_SUCCESS) return device().fail(result, call);
  }
  return HAL_SUCCESS;
}

hal_result_t Stream::fill(void* dst, uint8_t value, size_t size) {
  const ContextScope bound = device().bind();
  if (!bound.ok()) return device().fail(bound.result(), "memset_async");
  CUresult error = CUDA_SUCCESS;
  const Memory target = classify(dst, error);
  if (error != CUDA_SUCCESS) return device().fail(error, "memset_async: cuPointerGetAttribute");
  if (target == Memory::kPageable) {
    // cuMemsetD8Async fills memory CUDA knows; pageable host memory is
    // filled by a host function, in stream order.
    const CUresult result = enqueue_host_copy(dst, nullptr, size, value);
    return result == CUDA_SUCCESS ? HAL_SUCCESS
                                  : device().fail(result, "memset_async: cuLaunchHostFunc");
  }
  const CUresult result =
      device().api().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(dst), value, size, stream_);
  return result == CUDA_SUCCESS ? HAL_SUCCESS
                                : device().fail(result, "memset_async: cuMemsetD8Async");
}

}  // namespace hal::cuda
