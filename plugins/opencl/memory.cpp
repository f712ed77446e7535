// Memory of the opencl plugin: SVM allocations (fine-grain when the device
// has it), and the copies and fills a stream enqueues.
#include <algorithm>
#include <cstdint>

#include "device.hpp"
#include "stream.hpp"

namespace hal::opencl {

hal_result_t Device::allocate(hal_memory_kind_t kind, size_t size, size_t alignment,
                              void** out_ptr) {
  if (kind != HAL_MEMORY_DEVICE && !fine_grain()) {
    return report().fail(HAL_ERROR_UNSUPPORTED, 0,
                         "mem_alloc: host and shared memory need fine-grain SVM, which this "
                         "device lacks");
  }
  if (size > properties().max_allocation_bytes) {
    return report().fail(HAL_ERROR_OUT_OF_MEMORY, 0,
                         "mem_alloc: %zu bytes exceed the device's max_allocation_bytes %llu", size,
                         static_cast<unsigned long long>(properties().max_allocation_bytes));
  }
  const cl_svm_mem_flags flags =
      CL_MEM_READ_WRITE | (fine_grain() ? CL_MEM_SVM_FINE_GRAIN_BUFFER : 0);
  // Some platforms (PoCL) refuse alignments above their base-address
  // alignment: those allocations get the slack and an aligned pointer inside.
  const size_t native = std::max<size_t>(properties().min_alignment_bytes, 1);
  const bool carve = alignment > native;
  void* base = clSVMAlloc(context(), flags, carve ? size + alignment : size,
                          static_cast<cl_uint>(carve ? 0 : alignment));
  void* ptr = base;
  if (carve && base != nullptr) {
    const auto address = reinterpret_cast<uintptr_t>(base);
    ptr = reinterpret_cast<void*>((address + alignment - 1) & ~(uintptr_t{alignment} - 1));
    if (ptr != base) remember_base(ptr, base);
  }
  if (ptr == nullptr) {
    return report().fail(HAL_ERROR_OUT_OF_MEMORY, 0,
                         "mem_alloc: clSVMAlloc of %zu bytes (alignment %zu) failed", size,
                         alignment);
  }
  *out_ptr = ptr;
  return HAL_SUCCESS;
}

hal_result_t Device::free(void* ptr) {
  clSVMFree(context(), take_base(ptr));
  return HAL_SUCCESS;
}

void Device::remember_base(void* aligned, void* base) {
  std::lock_guard lock(mutex_);
  over_aligned_.emplace(aligned, base);
}

void* Device::take_base(void* aligned) {
  std::lock_guard lock(mutex_);
  const auto it = over_aligned_.find(aligned);
  if (it == over_aligned_.end()) return aligned;
  void* base = it->second;
  over_aligned_.erase(it);
  return base;
}

hal_result_t Stream::copy(void* dst, const void* src, size_t size) {
  // clEnqueueSVMMemcpy takes SVM and host pointers alike.
  cl_event done = nullptr;
  const cl_int status = clEnqueueSVMMemcpy(queue(), CL_FALSE, dst, src, size, 0, nullptr, &done);
  if (status != CL_SUCCESS) return fail("clEnqueueSVMMemcpy", status);
  track(done);
  return HAL_SUCCESS;
}

hal_result_t Stream::fill(void* dst, uint8_t value, size_t size) {
  cl_event done = nullptr;
  const cl_int status = clEnqueueSVMMemFill(queue(), dst, &value, 1, size, 0, nullptr, &done);
  if (status != CL_SUCCESS) return fail("clEnqueueSVMMemFill", status);
  track(done);
  return HAL_SUCCESS;
}

}  // namespace hal::opencl
