// The Level Zero loader as the level_zero plugin uses it: libze_loader.so.1
// opened at run time (never linked, so the plugin loads where libze1 is
// absent), every ze* entry point taken from it with dlsym, zeInit called
// once, and the names of ze_result_t codes for messages (the plugin's own
// table: Level Zero 1.8 has no call that names a code).
#ifndef HAL_PLUGINS_LEVEL_ZERO_LOADER_HPP_
#define HAL_PLUGINS_LEVEL_ZERO_LOADER_HPP_

#include <ze_api.h>

#include <memory>
#include <string>

#include "hal_plugin.h"
#include "hal_plugin_sdk/vendor_library.hpp"

namespace hal::level_zero {

// The timeout zeEventHostSynchronize takes for "no limit".
inline constexpr uint64_t kForever = UINT64_MAX;

// One pointer per loader function the plugin calls, typed from the header's
// declaration.
struct LoaderApi {
// clang-format off
#define HAL_ZE_FUNCTIONS(X) \
  X(zeInit) X(zeDriverGet) X(zeDriverGetProperties) X(zeDriverGetApiVersion) X(zeDeviceGet) \
  X(zeDeviceGetProperties) X(zeDeviceGetComputeProperties) X(zeDeviceGetMemoryProperties) \
  X(zeDeviceGetMemoryAccessProperties) X(zeDeviceGetCommandQueueGroupProperties) \
  X(zeContextCreate) X(zeContextDestroy) X(zeMemAllocDevice) X(zeMemAllocHost) \
  X(zeMemAllocShared) X(zeMemFree) X(zeCommandListCreateImmediate) X(zeCommandListDestroy) \
  X(zeCommandListAppendMemoryCopy) X(zeCommandListAppendMemoryFill) \
  X(zeCommandListAppendBarrier) X(zeCommandListAppendSignalEvent) \
  X(zeCommandListAppendWaitOnEvents) X(zeCommandListAppendEventReset) \
  X(zeCommandListAppendLaunchKernel) X(zeEventPoolCreate) X(zeEventPoolDestroy) \
  X(zeEventCreate) X(zeEventDestroy) X(zeEventHostSignal) X(zeEventHostReset) X(zeEventHostSynchronize) \
  X(zeEventQueryStatus) X(zeEventQueryKernelTimestamp) X(zeModuleCreate) X(zeModuleDestroy) \
  X(zeModuleBuildLogGetString) X(zeModuleBuildLogDestroy) X(zeKernelCreate) X(zeKernelDestroy) \
  X(zeKernelGetProperties) X(zeKernelSetArgumentValue) X(zeKernelSetGroupSize)
// clang-format on
#define HAL_ZE_DECLARE(name) decltype(&::name) name = nullptr;
  HAL_ZE_FUNCTIONS(HAL_ZE_DECLARE)
#undef HAL_ZE_DECLARE
};

// The opened loader. Absent (with the reason) when the library is missing,
// lacks an entry point, or zeInit fails (no driver: ZE_RESULT_ERROR_UNINITIALIZED).
class Loader {
 public:
  // Opens HAL_LEVEL_ZERO_LOADER_PATH when set, else "libze_loader.so.1", and
  // calls zeInit(ZE_INIT_FLAG_GPU_ONLY). Returns null and sets |why| when the
  // loader is unusable.
  static std::unique_ptr<Loader> open(std::string& why);
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const LoaderApi& api() const { return api_; }
  const std::string& path() const { return library_.path(); }

 private:
  Loader() = default;
  hal::plugin::VendorLibrary library_;
  LoaderApi api_;
};

// The code's name, NULL for a code the table does not know.
const char* ze_result_name(ze_result_t code);

// "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (0x70000003)".
std::string ze_error_text(ze_result_t code);

// The HAL result a ze_result_t maps to when the call site knows nothing more
// specific.
hal_result_t result_of(ze_result_t code);

}  // namespace hal::level_zero

#endif  // HAL_PLUGINS_LEVEL_ZERO_LOADER_HPP_
