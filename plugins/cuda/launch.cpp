// Kernel launch on the cuda plugin: cuLaunchKernel on the stream, with one
// pointer per argument to its value, after raising the kernel's dynamic
// shared memory limit where the launch needs more than the default.
#include <string>

#include "device.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::cuda {

hal_result_t Kernel::launch(Stream& target, const hal_launch_config_t& config, uint32_t arg_count,
                            const hal_kernel_arg_t* args) {
  Device& device = target.device();
  // The loader checked the shape, the shared memory and the arguments
  // against this kernel (SPEC 10.3); the plugin trusts them.
  const ContextScope bound = device.bind();
  if (!bound.ok()) {
    return device.fail(bound.result(), "launch_kernel");
  }
  const DriverApi& cu = device.api();
  if (const CUresult raised = ensure_dynamic_shared(cu, config.shared_memory_bytes);
      raised != CUDA_SUCCESS) {
    return device.fail(HAL_ERROR_INVALID_LAUNCH, raised,
                       "launch_kernel: cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  // kernelParams: one pointer per argument to its value; the loader has
  // checked each size against the signature, and cuLaunchKernel copies
  // the values before it returns.
  void* params[HAL_MAX_KERNEL_ARGS] = {};
  for (uint32_t i = 0; i < arg_count; ++i) params[i] = const_cast<void*>(args[i].value);
  const CUresult result =
      cu.cuLaunchKernel(function_, config.grid[0], config.grid[1], config.grid[2], config.block[0],
                        config.block[1], config.block[2], config.shared_memory_bytes, target.get(),
                        arg_count > 0 ? params : nullptr, nullptr);
  if (result != CUDA_SUCCESS) {
    const std::string what = "launch_kernel: cuLaunchKernel('" + name() + "')";
    const hal_result_t mapped =
        result == CUDA_ERROR_INVALID_VALUE ? HAL_ERROR_INVALID_LAUNCH : result_of(result);
    return device.fail(mapped, result, what.c_str());
  }
  return HAL_SUCCESS;
}

}  // namespace hal::cuda
