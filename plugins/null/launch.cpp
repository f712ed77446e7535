// Kernel launches: not implemented (module.hpp); no kernel ever exists.
#include "module.hpp"
#include "stream.hpp"

namespace hal::null_plugin {

hal_result_t Kernel::launch(Stream& stream, const hal_launch_config_t&, uint32_t,
                            const hal_kernel_arg_t*) {
  return stream.device().report().fail(
      HAL_ERROR_UNSUPPORTED, 0,
      "TODO(null): launch_kernel: enqueue the grid on the stream's queue with the arguments");
}

}  // namespace hal::null_plugin
