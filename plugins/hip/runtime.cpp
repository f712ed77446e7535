#include "runtime.hpp"

#include <unistd.h>

#include "hal_util/env.hpp"
#include "library_search.hpp"

namespace hal::hip {
namespace {

constexpr char kDefaultKfd[] = "/dev/kfd";

// Every code of HIP 5.2's hipError_t (aliases share a value: the first name).
const char* known_name(HipStatus code) {
  switch (static_cast<int>(code)) {
    // clang-format off
    case 0: return "hipSuccess";
    case 1: return "hipErrorInvalidValue";
    case 2: return "hipErrorOutOfMemory";
    case 3: return "hipErrorNotInitialized";
    case 4: return "hipErrorDeinitialized";
    case 5: return "hipErrorProfilerDisabled";
    case 6: return "hipErrorProfilerNotInitialized";
    case 7: return "hipErrorProfilerAlreadyStarted";
    case 8: return "hipErrorProfilerAlreadyStopped";
    case 9: return "hipErrorInvalidConfiguration";
    case 12: return "hipErrorInvalidPitchValue";
    case 13: return "hipErrorInvalidSymbol";
    case 17: return "hipErrorInvalidDevicePointer";
    case 21: return "hipErrorInvalidMemcpyDirection";
    case 35: return "hipErrorInsufficientDriver";
    case 52: return "hipErrorMissingConfiguration";
    case 53: return "hipErrorPriorLaunchFailure";
    case 98: return "hipErrorInvalidDeviceFunction";
    case 100: return "hipErrorNoDevice";
    case 101: return "hipErrorInvalidDevice";
    case 200: return "hipErrorInvalidImage";
    case 201: return "hipErrorInvalidContext";
    case 202: return "hipErrorContextAlreadyCurrent";
    case 205: return "hipErrorMapFailed";
    case 206: return "hipErrorUnmapFailed";
    case 207: return "hipErrorArrayIsMapped";
    case 208: return "hipErrorAlreadyMapped";
    case 209: return "hipErrorNoBinaryForGpu";
    case 210: return "hipErrorAlreadyAcquired";
    case 211: return "hipErrorNotMapped";
    case 212: return "hipErrorNotMappedAsArray";
    case 213: return "hipErrorNotMappedAsPointer";
    case 214: return "hipErrorECCNotCorrectable";
    case 215: return "hipErrorUnsupportedLimit";
    case 216: return "hipErrorContextAlreadyInUse";
    case 217: return "hipErrorPeerAccessUnsupported";
    case 218: return "hipErrorInvalidKernelFile";
    case 219: return "hipErrorInvalidGraphicsContext";
    case 300: return "hipErrorInvalidSource";
    case 301: return "hipErrorFileNotFound";
    case 302: return "hipErrorSharedObjectSymbolNotFound";
    case 303: return "hipErrorSharedObjectInitFailed";
    case 304: return "hipErrorOperatingSystem";
    case 400: return "hipErrorInvalidHandle";
    case 401: return "hipErrorIllegalState";
    case 500: return "hipErrorNotFound";
    case 600: return "hipErrorNotReady";
    case 700: return "hipErrorIllegalAddress";
    case 701: return "hipErrorLaunchOutOfResources";
    case 702: return "hipErrorLaunchTimeOut";
    case 704: return "hipErrorPeerAccessAlreadyEnabled";
    case 705: return "hipErrorPeerAccessNotEnabled";
    case 708: return "hipErrorSetOnActiveProcess";
    case 709: return "hipErrorContextIsDestroyed";
    case 710: return "hipErrorAssert";
    case 712: return "hipErrorHostMemoryAlreadyRegistered";
    case 713: return "hipErrorHostMemoryNotRegistered";
    case 719: return "hipErrorLaunchFailure";
    case 720: return "hipErrorCooperativeLaunchTooLarge";
    case 801: return "hipErrorNotSupported";
    case 900: return "hipErrorStreamCaptureUnsupported";
    case 901: return "hipErrorStreamCaptureInvalidated";
    case 902: return "hipErrorStreamCaptureMerge";
    case 903: return "hipErrorStreamCaptureUnmatched";
    case 904: return "hipErrorStreamCaptureUnjoined";
    case 905: return "hipErrorStreamCaptureIsolation";
    case 906: return "hipErrorStreamCaptureImplicit";
    case 907: return "hipErrorCapturedEvent";
    case 908: return "hipErrorStreamCaptureWrongThread";
    case 910: return "hipErrorGraphExecUpdateFailure";
    case 999: return "hipErrorUnknown";
    case 1052: return "hipErrorRuntimeMemory";
    case 1053: return "hipErrorRuntimeOther";
    default: return nullptr;
      // clang-format on
  }
}

}  // namespace

std::string hip_error_text(HipStatus code) {
  const char* name = known_name(code);
  if (name == nullptr) name = "HIP error";
  return std::string(name) + " (" + std::to_string(static_cast<int>(code)) + ")";
}

hal_result_t result_of(HipStatus code) {
  switch (code) {
    case hipSuccess:
      return HAL_SUCCESS;
    case hipErrorNotReady:
      return HAL_NOT_READY;
    case hipErrorOutOfMemory:
      return HAL_ERROR_OUT_OF_MEMORY;
    case hipErrorInvalidImage:
    case hipErrorInvalidKernelFile:
    case hipErrorNoBinaryForGpu:
    case hipErrorInvalidSource:
    case hipErrorSharedObjectInitFailed:
      return HAL_ERROR_INVALID_MODULE;
    case hipErrorNotFound:
    case hipErrorInvalidDeviceFunction:
      return HAL_ERROR_NOT_FOUND;
    case hipErrorLaunchOutOfResources:
    case hipErrorInvalidConfiguration:
      return HAL_ERROR_INVALID_LAUNCH;
    case hipErrorNotSupported:
      return HAL_ERROR_UNSUPPORTED;
    case hipErrorIllegalAddress:
    case hipErrorLaunchFailure:
    case hipErrorLaunchTimeOut:
    case hipErrorDeinitialized:
    case hipErrorAssert:
      return HAL_ERROR_DEVICE_LOST;
    default:
      return HAL_ERROR_INTERNAL;
  }
}

std::string version_text(int version) {
  return "HIP " + std::to_string(version / 10000000) + "." +
         std::to_string(version / 100000 % 100) + "." + std::to_string(version % 100000);
}

std::unique_ptr<Runtime> Runtime::open(std::string& why) {
  const char* kfd_configured = hal::util::env_nonempty("HAL_HIP_KFD_PATH");
  const std::string kfd = kfd_configured != nullptr ? kfd_configured : kDefaultKfd;
  if (access(kfd.c_str(), F_OK) != 0) {
    why = "no " + kfd + ": the amdgpu kernel driver is not loaded";
    return nullptr;
  }
  std::unique_ptr<Runtime> runtime(new Runtime());
  std::string first_error;
  for (const std::string& candidate : rocm_library_candidates(
           "HAL_HIP_RUNTIME_PATH", {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"})) {
    std::string error;
    if (runtime->library_.open(candidate, error)) break;
    if (first_error.empty()) first_error = error;
  }
  if (runtime->library_.handle() == nullptr) {
    why = hal::util::env_nonempty("HAL_HIP_RUNTIME_PATH") != nullptr
              ? first_error
              : rocm_searched_places(first_error);
    return nullptr;
  }
  const std::string& path = runtime->library_.path();
  RuntimeApi& api = runtime->api_;
  bool missing = false;
  auto resolve = [&](const char* symbol, void** slot) {
    if (missing) return;
    *slot = runtime->library_.symbol(symbol);
    if (*slot == nullptr) {
      missing = true;
      why = path + " has no " + symbol + ": not a HIP runtime";
    }
  };
#define HAL_HIP_RESOLVE(name) resolve(#name, reinterpret_cast<void**>(&api.name));
  HAL_HIP_RUNTIME_FUNCTIONS(HAL_HIP_RESOLVE)
  HAL_HIP_OVERLOADED_FUNCTIONS(HAL_HIP_RESOLVE)
#undef HAL_HIP_RESOLVE
  if (missing) return nullptr;
  runtime->library_.pin();  // the first HIP call starts the HSA runtime
  int version = 0;
  if (api.hipDriverGetVersion(&version) != hipSuccess) version = 0;
  // The 5.x hipDeviceProp_t: R0000 where the library versions it (ROCm 6+),
  // else the unversioned name, only from a HIP 5 runtime.
  api.hipGetDeviceProperties = reinterpret_cast<decltype(api.hipGetDeviceProperties)>(
      runtime->library_.symbol("hipGetDevicePropertiesR0000"));
  if (api.hipGetDeviceProperties == nullptr && version < 60000000) {
    api.hipGetDeviceProperties = reinterpret_cast<decltype(api.hipGetDeviceProperties)>(
        runtime->library_.symbol("hipGetDeviceProperties"));
  }
  if (api.hipGetDeviceProperties == nullptr) {
    why = path + " (" + version_text(version) +
          ") has no hipGetDevicePropertiesR0000: the plugin, built with HIP 5 headers, cannot "
          "read its devices' properties (hipDeviceProp_t changed in HIP 6)";
    return nullptr;
  }
  api.hipLaunchHostFunc = reinterpret_cast<decltype(api.hipLaunchHostFunc)>(
      runtime->library_.symbol("hipLaunchHostFunc"));
  // No hipInit: HIP initialises on first use, and HIP 5.2's hipInit answers
  // hipErrorInvalidDevice (101) where there is no GPU, which would hide the
  // precise hipGetDeviceCount answer (hipErrorNoDevice) behind a wrong one.
  runtime->version_ = version;
  return runtime;
}

}  // namespace hal::hip
