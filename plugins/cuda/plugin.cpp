#include "plugin.hpp"

#include "device.hpp"

namespace hal::cuda {

Plugin::Plugin(const hal_plugin_host_t* host) : report_(host) {
  discover();
}

Plugin::~Plugin() {
  devices_.clear();
}

void Plugin::discover() {
  std::string why;
  driver_ = Driver::open(why);
  if (!driver_) {
    report_.log(HAL_LOG_WARNING, "cuda: %s; 0 devices", why.c_str());
    return;
  }
  const DriverApi& api = driver_->api();
  int count = 0;
  if (const CUresult result = api.cuDeviceGetCount(&count); result != CUDA_SUCCESS) {
    report_.log(HAL_LOG_WARNING, "cuda: cuDeviceGetCount failed: %s; 0 devices",
                cu_error_text(&api, result).c_str());
    return;
  }
  if (count == 0) {
    report_.log(HAL_LOG_WARNING, "cuda: the driver (%s) sees no GPU; 0 devices",
                driver_->path().c_str());
    return;
  }
  std::string nvrtc_why;
  nvrtc_ = Nvrtc::open(nvrtc_why);
  if (!nvrtc_) {
    report_.log(HAL_LOG_INFO, "cuda: %s; HAL dialect modules are not offered", nvrtc_why.c_str());
  }
  std::string nccl_why;
  nccl_ = collective::Nccl::open(nccl_why);
  if (!nccl_) {
    report_.log(HAL_LOG_INFO, "cuda: %s; the loader's host-staged collectives serve",
                nccl_why.c_str());
  } else {
    report_.log(HAL_LOG_INFO, "cuda: collectives on NCCL %d from %s", nccl_->version(),
                nccl_->path().c_str());
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice handle = 0;
    CUcontext context = nullptr;
    CUresult result = api.cuDeviceGet(&handle, ordinal);
    if (result == CUDA_SUCCESS) result = api.cuDevicePrimaryCtxRetain(&context, handle);
    if (result != CUDA_SUCCESS) {
      report_.log(HAL_LOG_WARNING, "cuda: GPU %d skipped: %s", ordinal,
                  cu_error_text(&api, result).c_str());
      continue;
    }
    devices_.push_back(std::make_unique<Device>(report_, *driver_, nvrtc_.get(), blas_loader_,
                                                nccl_.get(), handle, context,
                                                static_cast<uint32_t>(devices_.size())));
  }
}

void plugin_shutdown(hal_plugin_context_t* context) {
  // The loader calls this once, after every other call returned.
  std::unique_ptr<Plugin> plugin(to_plugin(context));
  try {
    for (uint32_t i = 0; i < plugin->device_count(); ++i) plugin->device(i).release_all();
  } catch (...) {
  }
}

hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count) {
  *out_count = to_plugin(context)->device_count();
  return HAL_SUCCESS;
}

hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device) {
  // The loader asks for 0..device_count-1 only (SPEC 10.3).
  *out_device = reinterpret_cast<hal_impl_device_t*>(&to_plugin(context)->device(index));
  return HAL_SUCCESS;
}

}  // namespace hal::cuda
