// Modules and kernels: not implemented (module.hpp). Module::load refuses,
// so no module, and no kernel, ever exists.
#include "module.hpp"

namespace hal::null_plugin {

hal_result_t Module::load(Device& device, const hal_module_desc_t&, Module*&) {
  // TODO(null): compile or load desc's code for the device, make the Module
  // with device.add_module(...), then declare the format in module_formats
  // and HAL_DEVICE_CAP_KERNELS.
  return device.report().fail(
      HAL_ERROR_UNSUPPORTED, 0,
      "TODO(null): module_load: compile or load desc's code for the device, then declare the "
      "format in module_formats and HAL_DEVICE_CAP_KERNELS");
}

hal_result_t Module::get_kernel(const hal_kernel_desc_t&, Kernel*&) {
  // TODO(null): kernel_get: find desc.name in the module and bind its
  // signature (plugin::resolve_kernel_signature); the table's entry reports
  // the Kernel's KernelInfo.
  return HAL_ERROR_UNSUPPORTED;
}

}  // namespace hal::null_plugin
