// Kernel launch on the hip plugin: hipModuleLaunchKernel on the stream, with
// one pointer per argument to its value.
#include <string>

#include "device.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::hip {

hal_result_t Kernel::launch(Stream& target, const hal_launch_config_t& config, uint32_t arg_count,
                            const hal_kernel_arg_t* args) {
  Device& device = target.device();
  // The loader checked the shape, the shared memory and the arguments
  // against this kernel (SPEC 10.3); the plugin trusts them.
  if (const HipStatus bound = device.bind(); bound != hipSuccess) {
    return device.fail(bound, "launch_kernel");
  }
  // kernelParams: one pointer per argument to its value; the loader has
  // checked each size against the signature, and hipModuleLaunchKernel
  // copies the values into the kernarg segment before it returns.
  void* params[HAL_MAX_KERNEL_ARGS] = {};
  for (uint32_t i = 0; i < arg_count; ++i) params[i] = const_cast<void*>(args[i].value);
  const HipStatus result = device.api().hipModuleLaunchKernel(
      function_, config.grid[0], config.grid[1], config.grid[2], config.block[0], config.block[1],
      config.block[2], config.shared_memory_bytes, target.get(), arg_count > 0 ? params : nullptr,
      nullptr);
  if (result != hipSuccess) {
    const std::string what = "launch_kernel: hipModuleLaunchKernel('" + name() + "')";
    const hal_result_t mapped =
        result == hipErrorInvalidValue ? HAL_ERROR_INVALID_LAUNCH : result_of(result);
    return device.fail(mapped, result, what.c_str());
  }
  return HAL_SUCCESS;
}

}  // namespace hal::hip
