// The OpenCL API as the opencl plugin uses it: the headers at the 3.0 target,
// the names of error codes for messages, and small RAII holders.
#ifndef HAL_PLUGINS_OPENCL_OPENCL_HPP_
#define HAL_PLUGINS_OPENCL_OPENCL_HPP_

#include <CL/cl.h>

#include <string>
#include <utility>

#include "hal_plugin.h"

namespace hal::opencl {

// "CL_OUT_OF_RESOURCES (-5)".
std::string cl_error_text(cl_int code);

// The HAL result an OpenCL error maps to when nothing more specific applies.
hal_result_t result_of(cl_int code);

// Owns one reference of a cl_* object.
template <class Handle, cl_int (*Release)(Handle)>
class ClHandle {
 public:
  ClHandle() = default;
  explicit ClHandle(Handle handle) : handle_(handle) {}
  ~ClHandle() { reset(); }
  ClHandle(ClHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  ClHandle& operator=(ClHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  ClHandle(const ClHandle&) = delete;
  ClHandle& operator=(const ClHandle&) = delete;

  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }
  void reset(Handle handle = nullptr) {
    if (handle_ != nullptr) Release(handle_);
    handle_ = handle;
  }

 private:
  Handle handle_ = nullptr;
};

using ClContext = ClHandle<cl_context, clReleaseContext>;
using ClQueue = ClHandle<cl_command_queue, clReleaseCommandQueue>;
using ClEvent = ClHandle<cl_event, clReleaseEvent>;
using ClProgram = ClHandle<cl_program, clReleaseProgram>;
using ClKernel = ClHandle<cl_kernel, clReleaseKernel>;

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_OPENCL_HPP_
