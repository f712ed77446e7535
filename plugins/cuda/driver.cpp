#include "driver.hpp"

#include <algorithm>

#include "hal_util/env.hpp"

namespace hal::cuda {
namespace {

constexpr char kDefaultDriver[] = "libcuda.so.1";
// cuGetProcAddress_v2 and the entry points' current signatures start here.
constexpr int kOldestDriver = 12000;

// "13.0" for 13000.
std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The codes the plugin may see, by name; the driver's cuGetErrorName is
// preferred when it answers.
const char* known_name(CUresult code) {
  switch (code) {
    case CUDA_SUCCESS:
      return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED:
      return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY:
      return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE:
      return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE:
      return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE:
      return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
      return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case CUDA_ERROR_INVALID_PTX:
      return "CUDA_ERROR_INVALID_PTX";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case CUDA_ERROR_INVALID_SOURCE:
      return "CUDA_ERROR_INVALID_SOURCE";
    case CUDA_ERROR_INVALID_HANDLE:
      return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND:
      return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY:
      return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case CUDA_ERROR_LAUNCH_TIMEOUT:
      return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case CUDA_ERROR_LAUNCH_FAILED:
      return "CUDA_ERROR_LAUNCH_FAILED";
    case CUDA_ERROR_NOT_SUPPORTED:
      return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_NOT_PERMITTED:
      return "CUDA_ERROR_NOT_PERMITTED";
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case CUDA_ERROR_UNKNOWN:
      return "CUDA_ERROR_UNKNOWN";
    default:
      return nullptr;
  }
}

}  // namespace

std::string cu_error_text(const DriverApi* api, CUresult code) {
  const char* name = nullptr;
  if (api != nullptr && api->cuGetErrorName != nullptr &&
      api->cuGetErrorName(code, &name) != CUDA_SUCCESS) {
    name = nullptr;
  }
  if (name == nullptr) name = known_name(code);
  if (name == nullptr) name = "CUDA error";
  return std::string(name) + " (" + std::to_string(static_cast<int>(code)) + ")";
}

hal_result_t result_of(CUresult code) {
  switch (code) {
    case CUDA_SUCCESS:
      return HAL_SUCCESS;
    case CUDA_ERROR_NOT_READY:
      return HAL_NOT_READY;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return HAL_ERROR_OUT_OF_MEMORY;
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_SOURCE:
      return HAL_ERROR_INVALID_MODULE;
    case CUDA_ERROR_NOT_FOUND:
      return HAL_ERROR_NOT_FOUND;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return HAL_ERROR_INVALID_LAUNCH;
    case CUDA_ERROR_NOT_SUPPORTED:
      return HAL_ERROR_UNSUPPORTED;
    case CUDA_ERROR_NOT_PERMITTED:  // a CUDA call from a host function on the driver's thread
      return HAL_ERROR_INVALID_STATE;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_DEINITIALIZED:
      return HAL_ERROR_DEVICE_LOST;
    default:
      return HAL_ERROR_INTERNAL;
  }
}

std::unique_ptr<Driver> Driver::open(std::string& why) {
  const char* configured = hal::util::env_nonempty("HAL_CUDA_DRIVER_PATH");
  const std::string path = configured != nullptr ? configured : kDefaultDriver;
  std::unique_ptr<Driver> driver(new Driver());
  if (!driver->library_.open(path, why)) return nullptr;
  using GetProcAddress = decltype(&::cuGetProcAddress);
  auto get_proc = reinterpret_cast<GetProcAddress>(driver->library_.symbol("cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    why = path + " has no cuGetProcAddress_v2: the driver predates CUDA 12";
    return nullptr;
  }
  DriverApi& api = driver->api_;
  // Negotiate down: ask for the entry points as of the older of the driver
  // and the headers (cuGetProcAddress's cudaVersion; cuDriverGetVersion
  // answers before cuInit). A driver newer than the headers serves the
  // headers' versions; an older one (12.x under 13.0 headers) its own, whose
  // signatures are the same for every entry point the plugin uses.
  int driver_version = 0;
  using GetVersion = decltype(&::cuDriverGetVersion);
  auto get_version = reinterpret_cast<GetVersion>(driver->library_.symbol("cuDriverGetVersion"));
  if (get_version == nullptr || get_version(&driver_version) != CUDA_SUCCESS) driver_version = 0;
  const std::string versions =
      (driver_version > 0 ? "the driver supports CUDA " + version_text(driver_version)
                          : std::string("cuDriverGetVersion did not answer")) +
      ", the plugin was built with CUDA " + version_text(CUDA_VERSION) + " headers";
  if (driver_version > 0 && driver_version < kOldestDriver) {
    why = path + ": " + versions + " and needs a driver for CUDA " + version_text(kOldestDriver) +
          " or later";
    return nullptr;
  }
  const int requested = driver_version > 0 ? std::min(driver_version, CUDA_VERSION) : CUDA_VERSION;
  bool missing = false;
  auto resolve = [&](const char* symbol, void** slot) {
    if (missing) return;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult result = get_proc(symbol, slot, requested, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || *slot == nullptr) {
      *slot = nullptr;
      missing = true;
      why = path + ": cuGetProcAddress(\"" + symbol + "\", " + std::to_string(requested) +
            ") failed: " + cu_error_text(nullptr, result) +
            (status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                 ? " (the entry point is newer than CUDA " + version_text(requested) + ")"
                 : std::string()) +
            " (" + versions + ")";
    }
  };
#define HAL_CUDA_RESOLVE(name) resolve(#name, reinterpret_cast<void**>(&api.name));
  HAL_CUDA_DRIVER_FUNCTIONS(HAL_CUDA_RESOLVE)
#undef HAL_CUDA_RESOLVE
  if (missing) return nullptr;
  auto resolve_optional = [&](const char* symbol, void** slot) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc(symbol, slot, requested, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS) {
      *slot = nullptr;
    }
  };
#define HAL_CUDA_RESOLVE_OPTIONAL(name) \
  resolve_optional(#name, reinterpret_cast<void**>(&api.name));
  HAL_CUDA_OPTIONAL_FUNCTIONS(HAL_CUDA_RESOLVE_OPTIONAL)
#undef HAL_CUDA_RESOLVE_OPTIONAL
  driver->library_.pin();  // even a failed cuInit may have started the driver's threads
  if (const CUresult result = api.cuInit(0); result != CUDA_SUCCESS) {
    why = "cuInit failed: " + cu_error_text(&api, result);
    return nullptr;
  }
  api.cuDriverGetVersion(&driver->version_);
  return driver;
}

}  // namespace hal::cuda
