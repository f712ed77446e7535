// Kernel launch on the level_zero plugin: the group size and the arguments
// set on the kernel (under its mutex: they are kernel state in Level Zero),
// then the launch appended to the stream's command list.
#include <algorithm>

#include "device.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::level_zero {

hal_result_t Kernel::launch(Stream& target, const hal_launch_config_t& config, uint32_t arg_count,
                            const hal_kernel_arg_t* args) {
  const Device& device = target.device();
  const plugin::ErrorReporter& report = device.report();
  // The loader checked the shape, the shared memory and the arguments
  // against this kernel (SPEC 10.3); the plugin trusts them.
  const LoaderApi& ze = device.api();
  std::lock_guard lock(launch_mutex_);
  if (const ze_result_t result =
          ze.zeKernelSetGroupSize(kernel_, config.block[0], config.block[1], config.block[2]);
      result != ZE_RESULT_SUCCESS) {
    return device.fail(HAL_ERROR_INVALID_LAUNCH, result, "launch_kernel: zeKernelSetGroupSize");
  }
  // The value of each argument (a pointer argument's value is the pointer);
  // the driver copies it at the call.
  for (uint32_t i = 0; i < arg_count; ++i) {
    if (const ze_result_t result =
            ze.zeKernelSetArgumentValue(kernel_, i, args[i].size, args[i].value);
        result != ZE_RESULT_SUCCESS) {
      return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, static_cast<int64_t>(result),
                         "launch_kernel: argument %u of '%s' was refused: %s", i, name().c_str(),
                         ze_error_text(result).c_str());
    }
  }
  if (dynamic_shared_) {
    // A __local argument: a size and no value; Level Zero refuses size 0.
    const size_t bytes = std::max<size_t>(config.shared_memory_bytes, 1);
    if (const ze_result_t result = ze.zeKernelSetArgumentValue(kernel_, arg_count, bytes, nullptr);
        result != ZE_RESULT_SUCCESS) {
      return report.fail(HAL_ERROR_INVALID_LAUNCH, static_cast<int64_t>(result),
                         "launch_kernel: dynamic shared memory of %u bytes was refused: %s",
                         config.shared_memory_bytes, ze_error_text(result).c_str());
    }
  }
  const ze_group_count_t groups = {config.grid[0], config.grid[1], config.grid[2]};
  const ze_result_t result = target.append([&](ze_command_list_handle_t list) {
    return ze.zeCommandListAppendLaunchKernel(list, kernel_, &groups, nullptr, 0, nullptr);
  });
  if (result != ZE_RESULT_SUCCESS) {
    const std::string what = "launch_kernel: zeCommandListAppendLaunchKernel('" + name() + "')";
    return device.fail(
        result_of(result) == HAL_ERROR_INTERNAL ? HAL_ERROR_INVALID_LAUNCH : result_of(result),
        result, what.c_str());
  }
  return HAL_SUCCESS;
}

}  // namespace hal::level_zero
