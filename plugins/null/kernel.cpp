// Modules, kernels and launches: not implemented. The device declares no
// HAL_DEVICE_CAP_KERNELS and no module format, so the loader refuses module
// loads before they reach these entries; they are here to be filled in.
#include "null.hpp"

namespace hal::null_plugin {

hal_result_t module_load(hal_impl_device_t* device, const hal_module_desc_t*, hal_impl_module_t**) {
  return to_device(device)->report().fail(
      HAL_ERROR_UNSUPPORTED, 0,
      "TODO(null): module_load: compile or load desc's code for the device, then declare the "
      "format in module_formats and HAL_DEVICE_CAP_KERNELS");
}

hal_result_t module_unload(hal_impl_module_t*) {
  // No module is ever created, so the loader never calls this; no reporter
  // is reachable from a module that does not exist.
  // TODO(null): module_unload: free the module and its kernels.
  return HAL_ERROR_UNSUPPORTED;
}

hal_result_t kernel_get(hal_impl_module_t*, const hal_kernel_desc_t*, hal_impl_kernel_t**,
                        hal_kernel_info_t*) {
  // TODO(null): kernel_get: find desc->name in the module, check the
  // signature, fill out_info with plugin::write_versioned_struct.
  return HAL_ERROR_UNSUPPORTED;
}

hal_result_t launch_kernel(hal_impl_stream_t* stream, hal_impl_kernel_t*,
                           const hal_launch_config_t*, uint32_t, const hal_kernel_arg_t*) {
  return to_stream(stream)->device->report().fail(
      HAL_ERROR_UNSUPPORTED, 0,
      "TODO(null): launch_kernel: enqueue the grid on the stream's queue with the arguments");
}

}  // namespace hal::null_plugin
