// Kernel launch on the opencl plugin: arguments set on the kernel's own
// cl_kernel (under its mutex, since arguments are kernel state in OpenCL),
// then one NDRange of grid x block work-items.
#include <algorithm>
#include <cstring>

#include "device.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::opencl {

hal_result_t Kernel::launch(Stream& target, const hal_launch_config_t& config, uint32_t arg_count,
                            const hal_kernel_arg_t* args) {
  const plugin::ErrorReporter& report = target.device().report();
  // The loader checked the shape, the shared memory and the arguments
  // against this kernel (SPEC 10.3); the plugin trusts them.
  std::lock_guard lock(launch_mutex_);
  for (uint32_t i = 0; i < arg_count; ++i) {
    cl_int status = CL_SUCCESS;
    if (arg_types()[i] == HAL_ARG_POINTER) {
      void* pointer = nullptr;
      std::memcpy(&pointer, args[i].value, sizeof(pointer));
      status = clSetKernelArgSVMPointer(kernel_.get(), i, pointer);
    } else {
      status = clSetKernelArg(kernel_.get(), i, args[i].size, args[i].value);
    }
    if (status != CL_SUCCESS) {
      return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, status,
                         "launch_kernel: argument %u of '%s' was refused: %s", i, name().c_str(),
                         cl_error_text(status).c_str());
    }
  }
  if (dynamic_shared_) {
    // OpenCL sizes __local arguments per launch; a size of 0 is invalid.
    const cl_int status = clSetKernelArg(kernel_.get(), arg_count,
                                         std::max<size_t>(config.shared_memory_bytes, 1), nullptr);
    if (status != CL_SUCCESS) {
      return report.fail(HAL_ERROR_INVALID_LAUNCH, status,
                         "launch_kernel: dynamic shared memory of %u bytes was refused: %s",
                         config.shared_memory_bytes, cl_error_text(status).c_str());
    }
  }
  size_t global[3], local[3];
  for (int d = 0; d < 3; ++d) {
    local[d] = config.block[d];
    global[d] = size_t{config.grid[d]} * config.block[d];
  }
  cl_event done = nullptr;
  const cl_int status = clEnqueueNDRangeKernel(target.queue(), kernel_.get(), 3, nullptr, global,
                                               local, 0, nullptr, &done);
  if (status != CL_SUCCESS) {
    return report.fail(result_of(status), status, "launch_kernel: clEnqueueNDRangeKernel('%s'): %s",
                       name().c_str(), cl_error_text(status).c_str());
  }
  target.track(done);
  return HAL_SUCCESS;
}

}  // namespace hal::opencl
